"""Seeds for the whole-graph fuzz target (control::fuzz::graph), built by scapy (an
independent implementation): one input per protocol path through the harness's
dataplane (crates/control/src/fuzz/graph.toml), some as sequences of frames (fragments
of one datagram, a run of one tunnel's packets for the tunnel hint), some behind a
virtio-net header. Input format: records of [control u8][length u16 BE][frame]; control
bits 0-1: the interface (0 access0, 1 core0, 2 narrow0, 3 parcel0), bit 2: a virtio-net
header leads the frame, bit 3: the frame arrives in one poll with the next. ESP is built
by scapy's SecurityAssociation, parcels by tests/parcelpkt.py (standard library, not our
Rust). Run from this folder: python3 make_graph_corpus.py (output committed)."""
import struct
import sys
from pathlib import Path

from scapy.all import (ARP, ICMP, IP, TCP, UDP, Ether, Dot1Q, IPv6, ICMPv6EchoRequest, ICMPv6ND_NS, ICMPv6PacketTooBig,
                       ICMPv6NDOptSrcLLAddr, IPv6ExtHdrFragment, IPv6ExtHdrHopByHop, IPv6ExtHdrDestOpt, IPv6ExtHdrRouting, RouterAlert, HBHOptUnknown, GRE, Raw,
                       fragment, fragment6, raw)
from scapy.contrib.gtp import GTP_U_Header, GTPPDUSessionContainer, GTPEchoRequest
from scapy.layers.ipsec import ESP, SecurityAssociation
from scapy.layers.sctp import (SCTP, SCTPChunkAbort, SCTPChunkCookieAck, SCTPChunkCookieEcho, SCTPChunkData, SCTPChunkHeartbeatAck,
                               SCTPChunkHeartbeatReq, SCTPChunkInit, SCTPChunkInitAck, SCTPChunkSACK, SCTPChunkShutdown,
                               SCTPChunkShutdownAck, SCTPChunkShutdownComplete, SCTPChunkParamECNCapable, SCTPChunkParamHostname,
                               SCTPChunkParamIPv4Addr, SCTPChunkParamIPv6Addr, SCTPChunkParamStateCookie,
                               SCTPChunkParamSupportedAddrTypes, SCTPChunkParamSupportedExtensions, SCTPChunkParamChunkList,
                               SCTPChunkAuthentication, SCTPChunkAddressConf, SCTPChunkAddressConfAck, SCTPChunkParamAddIPAddr,
                               SCTPChunkParamSuccessIndication, crc32c)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from parcelpkt import fold, ones, parcel4, parcel6  # noqa: E402

ACCESS, CORE, NARROW, PARCEL = 0, 1, 2, 3
HOLD = 8
MAC = {ACCESS: "02:00:00:00:00:01", CORE: "02:00:00:00:00:02", NARROW: "02:00:00:00:00:03", PARCEL: "02:00:00:00:00:04"}
PEER_MAC = "02:00:00:00:09:09"
USER4, USER6 = "198.18.0.2", "2001:db8::2"
US4, US6 = "198.18.1.1", "2001:db8:1::1"


def eth(port, pkt):
    return Ether(src=PEER_MAC, dst=MAC[port]) / pkt


def rec(port, frame, vnet=None, hold=False):
    b = raw(frame)
    ctl = port | (HOLD if hold else 0)
    if vnet is not None:
        ctl |= 4
        b = vnet + b
    return struct.pack("!BH", ctl, len(b)) + b


def vnet_hdr(flags=0, gso_type=0, hdr_len=0, gso_size=0, csum_start=0, csum_offset=0):
    # struct virtio_net_hdr, host (little-endian) byte order.
    return struct.pack("<BBHHHH", flags, gso_type, hdr_len, gso_size, csum_start, csum_offset)


def payload(n):
    return Raw(bytes(i % 251 for i in range(n)))


def udp_gso4(dst, n, gso_size):
    """A UDP_SEGMENT send of `n` bytes as the kernel hands it over a vnet header: one
    packet, UDP length all of it, the pseudo-header sum (not complemented) in the field."""
    p = bytearray(raw(eth(ACCESS, IP(src=USER4, dst=dst) / UDP(sport=3001, dport=4001, chksum=0) / payload(n))))
    ph = p[26:34] + struct.pack("!BBH", 0, 17, 8 + n)
    p[40:42] = struct.pack("!H", fold(ones(bytes(ph))))
    return bytes(p)


def udp_gso6(dst, n, gso_size):
    p = bytearray(raw(eth(ACCESS, IPv6(src=USER6, dst=dst) / UDP(sport=3001, dport=4001, chksum=0) / payload(n))))
    ph = p[22:54] + struct.pack("!IxxxB", 8 + n, 17)
    p[60:62] = struct.pack("!H", fold(ones(bytes(ph))))
    return bytes(p)


def gtpu4(src, teid, inner, **kw):
    return eth(CORE, IP(src=src, dst=US4) / UDP(sport=2152, dport=2152) / GTP_U_Header(teid=teid, **kw) / inner)


def gtpu6(src, teid, inner, chksum=None, **kw):
    u = UDP(sport=2152, dport=2152) if chksum is None else UDP(sport=2152, dport=2152, chksum=chksum)
    return eth(CORE, IPv6(src=src, dst=US6) / u / GTP_U_Header(teid=teid, **kw) / inner)


def gue(inner, proto):
    return Raw(bytes([0, proto, 0, 0])) / inner


# The graph.toml SAs' keys: bytes 1, 2, ... (AES-GCM-128: key and salt; AES-CBC: 16;
# HMAC-SHA-256: 32).
KEY = bytes(range(1, 33))
esp4_in = SecurityAssociation(ESP, spi=8193, crypt_algo="AES-GCM", crypt_key=KEY[:20],
                              tunnel_header=IP(src="198.18.1.7", dst=US4))
esp6_in = SecurityAssociation(ESP, spi=8195, crypt_algo="NULL", auth_algo="SHA2-256-128", auth_key=KEY,
                              tunnel_header=IPv6(src="2001:db8:1::7", dst=US6), nat_t_header=UDP(sport=4500, dport=4500))


def esp(sa, inner, seq):
    return sa.encrypt(inner, seq_num=seq)


def sctp4(vip, sport, tag, chunks, chksum=None):
    """A client's SCTP packet to an SCTP service (scapy computes the CRC32c unless
    `chksum` is given: 0 for one left to the device, anything else a wrong one)."""
    return eth(ACCESS, IP(src=USER4, dst=vip) / SCTP(sport=sport, dport=38412, tag=tag, chksum=chksum) / chunks)


def sctp6(vip, sport, tag, chunks, chksum=None, src=USER6):
    return eth(ACCESS, IPv6(src=src, dst=vip) / SCTP(sport=sport, dport=38412, tag=tag, chksum=chksum) / chunks)


def sctp_chunk_length(frame, l4, length, at=2):
    """`frame` with its first chunk's length set to `length` (`at`: the offset of the
    length in the chunk; 22, an INIT's first parameter's), the CRC32c computed again over
    it (so only the length is wrong)."""
    b = bytearray(raw(frame))
    b[l4 + 12 + at:l4 + 14 + at] = struct.pack("!H", length)
    b[l4 + 8:l4 + 12] = b"\0\0\0\0"
    b[l4 + 8:l4 + 12] = struct.pack("!I", crc32c(bytes(b[l4:])))  # scapy's value goes big-endian
    return bytes(b)


def raw_l3(ethertype, l3):
    return Ether(src=PEER_MAC, dst=MAC[ACCESS], type=ethertype) / Raw(l3)


def user_udp4(dst, n=64, sport=1, dport=2, flags=0):
    return eth(ACCESS, IP(src=USER4, dst=dst, flags=flags) / UDP(sport=sport, dport=dport) / payload(n))


def user_udp6(dst, n=64, sport=1, dport=2):
    return eth(ACCESS, IPv6(src=USER6, dst=dst) / UDP(sport=sport, dport=dport) / payload(n))


inner4 = IP(src="198.19.10.5", dst="198.19.1.5") / UDP(sport=1000, dport=2000) / payload(32)
inner6 = IPv6(src="2001:db8:100::5", dst="2001:db8:98::5") / UDP(sport=1000, dport=2000) / payload(32)
syn4 = IP(src=USER4, dst="198.19.11.5") / TCP(flags="S", options=[("MSS", 1460)])
syn6 = IPv6(src=USER6, dst="2001:db8:101::5") / TCP(flags="S", options=[("MSS", 1440)])

seeds = {
    # Local: echo, ARP, ND, port unreachable.
    "echo4": [rec(ACCESS, eth(ACCESS, IP(src=USER4, dst="198.18.0.1") / ICMP(id=1, seq=1) / payload(56)))],
    "echo6": [rec(ACCESS, eth(ACCESS, IPv6(src=USER6, dst="2001:db8::1") / ICMPv6EchoRequest(id=1, seq=1, data=b"x" * 56)))],
    "arp": [rec(ACCESS, Ether(src=PEER_MAC, dst="ff:ff:ff:ff:ff:ff") / ARP(op=1, hwsrc=PEER_MAC, psrc=USER4, pdst="198.18.0.1"))],
    "nd": [rec(ACCESS, eth(ACCESS, IPv6(src=USER6, dst="ff02::1:ff00:1", hlim=255) / ICMPv6ND_NS(tgt="2001:db8::1")
                          / ICMPv6NDOptSrcLLAddr(lladdr=PEER_MAC)))],
    "port-unreachable": [rec(ACCESS, eth(ACCESS, IP(src=USER4, dst="198.18.0.1") / UDP(sport=5, dport=9999) / payload(8)))],
    # Routed: plain, over the narrow link (fragmented, or refused with DF / as IPv6),
    # TTL expiry, blackhole, an unresolved next hop, a VLAN tag, IPv6 options.
    "route4": [rec(ACCESS, eth(ACCESS, IP(src=USER4, dst="198.19.0.5") / UDP(sport=1, dport=2) / payload(64)))],
    "route6": [rec(ACCESS, eth(ACCESS, IPv6(src=USER6, dst="2001:db8:99::5") / UDP(sport=1, dport=2) / payload(64)))],
    "fragment4": [rec(ACCESS, eth(ACCESS, IP(src=USER4, dst="198.19.0.5", flags=0) / UDP() / payload(1400)))],
    "frag-needed4": [rec(ACCESS, eth(ACCESS, IP(src=USER4, dst="198.19.0.5", flags="DF") / UDP() / payload(1400)))],
    "too-big6": [rec(ACCESS, eth(ACCESS, IPv6(src=USER6, dst="2001:db8:99::5") / UDP() / payload(1400)))],
    "ttl4": [rec(ACCESS, eth(ACCESS, IP(src=USER4, dst="198.19.0.5", ttl=1) / UDP() / payload(8)))],
    "hlim6": [rec(ACCESS, eth(ACCESS, IPv6(src=USER6, dst="2001:db8:99::5", hlim=1) / UDP() / payload(8)))],
    "blackhole": [rec(ACCESS, eth(ACCESS, IP(src=USER4, dst="198.19.255.5") / UDP() / payload(8)))],
    "unresolved": [rec(ACCESS, eth(ACCESS, IP(src=USER4, dst="198.19.9.5") / UDP() / payload(8))),
                   rec(ACCESS, eth(ACCESS, IPv6(src=USER6, dst="2001:db8:97::5") / UDP() / payload(8)))],
    "vlan": [rec(ACCESS, Ether(src=PEER_MAC, dst=MAC[ACCESS]) / Dot1Q(vlan=5) / IP(src=USER4, dst="198.19.0.5") / UDP())],
    "hbh6": [rec(ACCESS, eth(ACCESS, IPv6(src=USER6, dst="2001:db8:99::5") / IPv6ExtHdrHopByHop(options=[HBHOptUnknown(otype=0x87, optdata=b"ab")]) / UDP()))],
    # Into tunnels: GTP-U (both families, every checksum mode, MSS clamping, outer
    # fragmentation, Packet Too Big), GUE, GRE, direct.
    "encap-gtpu4": [rec(ACCESS, eth(ACCESS, IP(src=USER4, dst="198.19.10.5") / UDP(sport=7, dport=8) / payload(100)))],
    "encap-gtpu4-clamp-outer-frag": [rec(ACCESS, eth(ACCESS, syn4)),
                                     rec(ACCESS, eth(ACCESS, IP(src=USER4, dst="198.19.11.5", flags=0) / UDP() / payload(1200)))],
    "encap-gtpu6": [rec(ACCESS, eth(ACCESS, IPv6(src=USER6, dst="2001:db8:100::5") / UDP() / payload(100)))],
    "encap-gtpu6-clamp-too-big": [rec(ACCESS, eth(ACCESS, syn6)),
                                  rec(ACCESS, eth(ACCESS, IPv6(src=USER6, dst="2001:db8:101::5") / UDP() / payload(1300)))],
    "encap-gtpu6-zero-csum": [rec(ACCESS, eth(ACCESS, IP(src=USER4, dst="198.19.12.5") / UDP() / payload(40)))],
    "encap-gue4-inner-frag": [rec(ACCESS, eth(ACCESS, IP(src=USER4, dst="198.19.20.5", flags=0) / UDP() / payload(1200))),
                              rec(ACCESS, eth(ACCESS, IPv6(src=USER6, dst="2001:db8:120::5") / UDP() / payload(1000)))],
    "encap-gre4": [rec(ACCESS, eth(ACCESS, IP(src=USER4, dst="198.19.21.5") / TCP(flags="S", options=[("MSS", 1460)]))),
                   rec(ACCESS, eth(ACCESS, IPv6(src=USER6, dst="2001:db8:121::5") / UDP() / payload(64)))],
    "encap-direct6": [rec(ACCESS, eth(ACCESS, IP(src=USER4, dst="198.19.22.5") / UDP() / payload(64))),
                      rec(ACCESS, eth(ACCESS, IPv6(src=USER6, dst="2001:db8:122::5") / UDP() / payload(64)))],
    "encap-gue6-outer-frag": [rec(ACCESS, eth(ACCESS, IP(src=USER4, dst="198.19.23.5", flags=0) / UDP() / payload(1400))),
                              rec(ACCESS, eth(ACCESS, IPv6(src=USER6, dst="2001:db8:123::5") / UDP() / payload(1200)))],
    # From tunnels: G-PDUs of each tunnel, path management, errors.
    "decap-gtpu4": [rec(CORE, gtpu4("198.18.1.2", 100, inner4))],
    "decap-gtpu4-container-seq": [
        rec(CORE, eth(CORE, IP(src="198.18.1.3", dst=US4) / UDP(sport=2152, dport=2152)
                / GTP_U_Header(teid=101, E=1, S=1, seq=9, next_ex=0x85) / GTPPDUSessionContainer(type=1, QFI=9) / inner6))],
    "decap-gtpu4-ethernet": [rec(CORE, gtpu4("198.18.1.4", 104, Ether(src="02:00:00:00:07:07", dst="02:00:00:00:07:08") / inner4))],
    "decap-gtpu6": [rec(CORE, gtpu6("2001:db8:1::2", 102, inner6)), rec(CORE, gtpu6("2001:db8:1::2", 102, inner6, chksum=0))],
    "decap-gtpu6-container": [rec(CORE, eth(CORE, IPv6(src="2001:db8:1::3", dst=US6) / UDP(sport=2152, dport=2152)
                                            / GTP_U_Header(teid=103, E=1, next_ex=0x85) / GTPPDUSessionContainer(type=0, QFI=5) / inner4))],
    "gtpu-echo": [rec(CORE, eth(CORE, IP(src="198.18.1.2", dst=US4) / UDP(sport=2152, dport=2152)
                                / GTP_U_Header(teid=0, S=1, seq=5, gtp_type=1) / GTPEchoRequest()))],
    "gtpu-unknown-teid": [rec(CORE, gtpu4("198.18.1.2", 999, inner4)), rec(CORE, gtpu6("2001:db8:1::2", 999, inner6))],
    "gtpu-unknown-ext": [rec(CORE, eth(CORE, IP(src="198.18.1.2", dst=US4) / UDP(sport=2152, dport=2152)
                                       / GTP_U_Header(teid=100, E=1, next_ex=0xc1) / Raw(b"\x01\x00\x00\x00") / inner4))],
    "decap-gue4": [rec(CORE, eth(CORE, IP(src="198.18.1.5", dst=US4) / UDP(sport=50000, dport=6080) / gue(inner4, 4))),
                   rec(CORE, eth(CORE, IP(src="198.18.1.5", dst=US4) / UDP(sport=50000, dport=6080) / Raw(b"\x20\x01\x00\x00ctl!")))],
    "decap-gre4": [rec(CORE, eth(CORE, IP(src="198.18.1.6", dst=US4) / UDP(sport=50000, dport=4754)
                                 / GRE(chksum_present=1, key_present=1, seqnum_present=1, key=7, sequence_number=3, proto=0x0800) / inner4))],
    "decap-direct6": [rec(CORE, eth(CORE, IPv6(src="2001:db8:1::5", dst=US6) / UDP(sport=50000, dport=5555) / inner4)),
                      rec(CORE, eth(CORE, IPv6(src="2001:db8:1::5", dst=US6) / UDP(sport=50000, dport=5555) / inner6))],
    "decap-gue6-zero": [rec(CORE, eth(CORE, IPv6(src="2001:db8:1::6", dst=US6) / UDP(sport=50000, dport=6080, chksum=0) / gue(inner6, 41)))],
    # A run of one tunnel's packets (the hint), then another tunnel on the same port.
    "hint-gue4": [rec(CORE, eth(CORE, IP(src="198.18.1.5", dst=US4) / UDP(sport=50000 + i, dport=6080) / gue(inner4, 4))) for i in range(6)]
                 + [rec(CORE, eth(CORE, IP(src="198.18.1.2", dst=US4) / UDP(sport=2152, dport=2152) / GTP_U_Header(teid=100) / inner4))],
    # Reassembly: the outer packets of a tunnel fragmented on the way (both families,
    # in order and reversed), and a lone fragment that waits.
    "reassembly4": [rec(CORE, eth(CORE, f)) for f in fragment(IP(src="198.18.1.5", dst=US4, id=77) / UDP(sport=50000, dport=6080)
                                                              / gue(IP(src="198.19.10.5", dst="198.19.1.5") / UDP() / payload(600), 4), fragsize=256)],
    "reassembly4-reversed": [rec(CORE, eth(CORE, f)) for f in reversed(fragment(IP(src="198.18.1.2", dst=US4, id=78) / UDP(sport=2152, dport=2152)
                                                                                / GTP_U_Header(teid=100) / IP(src="198.19.10.5", dst="198.19.1.5") / UDP() / payload(500), fragsize=200))],
    "reassembly6": [rec(CORE, eth(CORE, f)) for f in fragment6(IPv6(src="2001:db8:1::2", dst=US6) / IPv6ExtHdrFragment(id=5)
                                                               / UDP(sport=2152, dport=2152) / GTP_U_Header(teid=102) / IPv6(src="2001:db8:100::5", dst="2001:db8:98::5") / UDP() / payload(900), 400)],
    "lone-fragment": [rec(CORE, eth(CORE, IP(src="198.18.1.5", dst=US4, id=79, flags="MF") / Raw(b"z" * 64)))],
    # virtio-net headers: a partial UDP checksum, a TCP GSO frame into a tunnel, a bad one.
    "vnet-partial-csum": [rec(ACCESS, eth(ACCESS, IP(src=USER4, dst="198.19.0.5") / UDP(sport=1, dport=2, chksum=0) / payload(64)),
                              vnet_hdr(flags=1, csum_start=34, csum_offset=6))],
    "vnet-gso-tcp4": [rec(ACCESS, eth(ACCESS, IP(src=USER4, dst="198.19.10.5", flags="DF") / TCP(flags="A", chksum=0) / payload(3000)),
                          vnet_hdr(flags=1, gso_type=1, hdr_len=54, gso_size=1200, csum_start=34, csum_offset=16))],
    "vnet-bad": [rec(ACCESS, eth(ACCESS, IP(src=USER4, dst="198.19.0.5") / UDP()), vnet_hdr(flags=1, csum_start=400, csum_offset=6))],
    # IPsec: ESP and ESP in UDP from the peers (decrypted, the inner packet routed to
    # the users), traffic routed into each SA, and narrow0's SPD: protect (SA 5),
    # discard (both families), bypass (route4 above).
    "esp4-decrypt": [rec(CORE, eth(CORE, esp(esp4_in, inner4, seq))) for seq in (1, 2)],
    "esp6-udp-decrypt": [rec(CORE, eth(CORE, esp(esp6_in, inner6, seq))) for seq in (1, 2)]
                        + [rec(CORE, eth(CORE, IPv6(src="2001:db8:1::7", dst=US6) / UDP(sport=4500, dport=4500) / Raw(b"\xff")))],
    # Punt: IKE to 500, a BGP SYN to 179, IKE behind ESP in UDP's non-ESP marker (4500);
    # the host's answer from the punt link.
    "punt": [rec(ACCESS, eth(ACCESS, IP(src=USER4, dst=US4) / UDP(sport=500, dport=500) / payload(100))),
             rec(ACCESS, eth(ACCESS, IPv6(src=USER6, dst=US6) / TCP(sport=40010, dport=179, flags="S"))),
             rec(CORE, eth(CORE, IPv6(src="2001:db8:1::7", dst=US6) / UDP(sport=4500, dport=4500) / Raw(b"\0\0\0\0" + bytes(payload(60))))),
             # the host's reply from our address, in by the punt link: sent as ours (ip-punt-inject)
             rec(NARROW, eth(NARROW, IP(src=US4, dst=USER4, ttl=1) / UDP(sport=500, dport=500) / payload(100)))],
    "esp4-encrypt": [rec(ACCESS, user_udp4("198.19.30.5")), rec(ACCESS, user_udp4("198.19.30.5", 1380))],
    "esp6-encrypt": [rec(ACCESS, eth(ACCESS, IPv6(src=USER6, dst="2001:db8:130::5") / UDP() / payload(100))),
                     rec(ACCESS, eth(ACCESS, IP(src=USER4, dst="198.19.30.6") / TCP(flags="S", options=[("MSS", 1460)])))],
    "spd-protect": [rec(ACCESS, user_udp4("198.19.0.200")), rec(ACCESS, user_udp4("198.19.0.201", 1300))],
    "spd-discard": [rec(ACCESS, user_udp4("198.19.0.70")), rec(ACCESS, user_udp6("2001:db8:99:1::5"))],
    # A parcel and a joinable run toward the SPD's interface take its policies too.
    "spd-parcel": [rec(ACCESS, raw_l3(0x0800, parcel4(USER4, "198.19.0.70", 1000, 2000, [bytes([i]) * 100 for i in range(3)])))]
                  + [rec(ACCESS, user_udp4("198.19.0.71", 100, 3000, 4000), hold=i < 2) for i in range(3)],
    # The load balancer: a TCP connection to the IPv4 service (SYN, then the backend's
    # SYN-ACK to the node's address and port, from whichever backend Maglev chose), UDP
    # to the IPv6 service and its reply, a port no service has.
    "lb4-tcp": [rec(ACCESS, eth(ACCESS, IP(src=USER4, dst="198.18.128.10") / TCP(sport=40000, dport=80, flags="S", seq=1)))]
               + [rec(ACCESS, eth(ACCESS, IP(src=b, dst=US4) / TCP(sport=8080, dport=40000, flags="SA", seq=7, ack=2)))
                  for b in ("198.19.1.10", "198.19.1.11")]
               + [rec(ACCESS, eth(ACCESS, IP(src=USER4, dst="198.18.128.10") / TCP(sport=40000, dport=80, flags="A", seq=2, ack=8)))],
    "lb6-udp": [rec(ACCESS, user_udp6("2001:db8:128::10", 40, sport=5000, dport=53))]
               + [rec(ACCESS, eth(ACCESS, IPv6(src=b, dst=US6) / UDP(sport=5353, dport=5000) / payload(80)))
                  for b in ("2001:db8:98::10", "2001:db8:98::11")],
    # Direct server return: a TCP connection to the GRE service (SYN, then data), UDP to
    # the GUE service over IPv6 (encapsulated by lb4-nat / lb6-nat; nothing comes back
    # this way), and a router's frag-needed about the backend's direct reply, sent to the
    # service address: carried in GRE to the connection's backend (icmp-to-backend).
    "lb4-dsr-gre": [rec(ACCESS, eth(ACCESS, IP(src=USER4, dst="198.18.128.11") / TCP(sport=40002, dport=80, flags="S", seq=1))),
                    rec(ACCESS, eth(ACCESS, IP(src=USER4, dst="198.18.128.11") / TCP(sport=40002, dport=80, flags="A", seq=2) / payload(200))),
                    rec(ACCESS, eth(ACCESS, IP(src="198.18.0.9", dst="198.18.128.11") / ICMP(type=3, code=4, nexthopmtu=1280)
                                    / raw(IP(src="198.18.128.11", dst=USER4, flags="DF") / TCP(sport=80, dport=40002, flags="A", seq=9) / payload(1400))[:68]))],
    "lb6-dsr-gue": [rec(ACCESS, user_udp6("2001:db8:128::11", 120, sport=5002, dport=53), hold=True),
                    rec(ACCESS, user_udp6("2001:db8:128::11", 64, sport=5003, dport=53))],
    # Fragments to services (only the first carries the ports): reassembled by the node
    # and the whole datagram load-balanced, then fragmented again for the link: UDP to
    # the IPv6 NAT service (IPv6 fragments out, not Packet Too Big), a TCP segment to the
    # IPv4 one in reversed fragments, UDP to the IPv6 GUE service (outer fragments).
    "lb6-fragments": [rec(ACCESS, eth(ACCESS, f)) for f in fragment6(IPv6(src=USER6, dst="2001:db8:128::10") / IPv6ExtHdrFragment(id=40)
                                                                     / UDP(sport=5040, dport=53) / payload(2400), 1280)],
    "lb4-fragments": [rec(ACCESS, eth(ACCESS, f)) for f in reversed(fragment(IP(src=USER4, dst="198.18.128.10", id=41)
                                                                              / TCP(sport=40041, dport=80, flags="S", seq=1) / payload(2400), fragsize=1200))],
    "lb6-dsr-fragments": [rec(ACCESS, eth(ACCESS, f)) for f in fragment6(IPv6(src=USER6, dst="2001:db8:128::11") / IPv6ExtHdrFragment(id=42)
                                                                         / UDP(sport=5042, dport=53) / payload(2400), 1280)],
    # Hop-by-Hop and Destination Options headers before the transport header: a query to
    # the IPv6 NAT service carried through with them, a datagram fragmented behind a
    # Hop-by-Hop header reassembled, and a Routing header refused (extension-headers).
    "lb6-options": [rec(ACCESS, eth(ACCESS, IPv6(src=USER6, dst="2001:db8:128::10") / IPv6ExtHdrHopByHop(options=[RouterAlert()])
                                    / IPv6ExtHdrDestOpt() / UDP(sport=5050, dport=53) / payload(40))),
                    rec(ACCESS, eth(ACCESS, IPv6(src=USER6, dst="2001:db8:128::10") / IPv6ExtHdrRouting(addresses=[USER6], segleft=0)
                                    / UDP(sport=5051, dport=53) / payload(40)))]
                   + [rec(ACCESS, eth(ACCESS, f)) for f in fragment6(IPv6(src=USER6, dst="2001:db8:128::10") / IPv6ExtHdrHopByHop()
                                                                     / IPv6ExtHdrFragment(id=43) / UDP(sport=5043, dport=53) / payload(2400), 1280)],
    # The services filtered by source (loadBalancerSourceRanges): a SYN from inside the
    # ranges makes a session, one from outside is dropped (source-not-allowed), both families.
    "lb-source-ranges": [rec(ACCESS, eth(ACCESS, IP(src=USER4, dst="198.18.128.12") / TCP(sport=40020, dport=443, flags="S", seq=1))),
                         rec(ACCESS, eth(ACCESS, IP(src="198.18.32.9", dst="198.18.128.12") / TCP(sport=40021, dport=443, flags="S", seq=1))),
                         rec(ACCESS, eth(ACCESS, IPv6(src=USER6, dst="2001:db8:128::12") / TCP(sport=40022, dport=443, flags="S", seq=1))),
                         rec(ACCESS, eth(ACCESS, IPv6(src="2001:db8:77::5", dst="2001:db8:128::12") / TCP(sport=40023, dport=443, flags="S", seq=1)))],
    # A packet too big about the IPv6 service's translated datagram, to the node's
    # address (the client's port kept on it; either backend): lb6-nat translates it to
    # the client. (No `Local` service here: its forwarded replies would take every
    # forwarded packet through lbN-nat, past ethernet-input's forwarding fast paths.)
    "lb6-ptb": [rec(ACCESS, user_udp6("2001:db8:128::10", 1300, sport=5010, dport=53))]
               + [rec(ACCESS, eth(ACCESS, IPv6(src="2001:db8::9", dst=US6) / ICMPv6PacketTooBig(mtu=1280)
                                  / raw(IPv6(src=US6, dst=b, hlim=63) / UDP(sport=5010, dport=5353) / payload(1300))[:1232]))
                  for b in ("2001:db8:98::10", "2001:db8:98::11")],
    # The graph_local target's `Local` services (graph_local.toml; in the graph target these
    # are routed packets): a connection keeps the client's address, so the backend's reply
    # and a router's ICMP error about it are forwarded to the client, translated by
    # lbN-nat on the way (reply-translated, icmp-translated).
    "lb4-local": [rec(ACCESS, eth(ACCESS, IP(src=USER4, dst="198.18.128.12") / TCP(sport=40020, dport=80, flags="S", seq=1))),
                  rec(ACCESS, eth(ACCESS, IP(src="198.19.1.30", dst=USER4) / TCP(sport=8080, dport=40020, flags="SA", seq=7, ack=2))),
                  rec(ACCESS, eth(ACCESS, IP(src="198.18.0.9", dst=USER4) / ICMP(type=3, code=4, nexthopmtu=1280)
                                  / raw(IP(src=USER4, dst="198.19.1.30", ttl=63) / TCP(sport=40020, dport=8080, flags="A", seq=2))[:28]))],
    # A `Local` service's client behind the GUE tunnel to 198.18.1.5 (its route
    # 198.19.20.0/24): its SYN decapsulated, the backend's reply translated by lb4-nat and
    # sent on into the tunnel (`LbNat::onward`).
    "lb4-local-tunnel": [rec(CORE, eth(CORE, IP(src="198.18.1.5", dst=US4) / UDP(sport=50000, dport=6080)
                                       / gue(IP(src="198.19.20.9", dst="198.18.128.12") / TCP(sport=40030, dport=80, flags="S", seq=1), 4))),
                         rec(ACCESS, eth(ACCESS, IP(src="198.19.1.30", dst="198.19.20.9") / TCP(sport=8080, dport=40030, flags="SA", seq=7, ack=2)))],
    "lb6-local": [rec(ACCESS, user_udp6("2001:db8:128::12", 1300, sport=5020, dport=53)),
                  rec(ACCESS, eth(ACCESS, IPv6(src="2001:db8:98::30", dst=USER6) / UDP(sport=5353, dport=5020) / payload(80))),
                  rec(ACCESS, eth(ACCESS, IPv6(src="2001:db8::9", dst=USER6) / ICMPv6PacketTooBig(mtu=1280)
                                  / raw(IPv6(src=USER6, dst="2001:db8:98::30", hlim=63) / UDP(sport=5020, dport=5353) / payload(1300))[:1232]))],
    # SCTP (the services on NGAP's port 38412, the NAT one's backends on 38413): an
    # association to the NAT service over IPv4 through its life (INIT, either backend's INIT ACK to the node's address and the
    # client's port, COOKIE ECHO with DATA, COOKIE ACK, a heartbeat, SHUTDOWN, SHUTDOWN ACK,
    # SHUTDOWN COMPLETE); what lbN-nat refuses by name (a wrong CRC32c, a chunk length
    # below 4, one past the packet) beside an ABORT without an association and an INIT
    # whose CRC32c its sender left to the device (a vnet partial checksum at the CRC
    # field, the field zero); direct server return in GUE over IPv6, the same kinds.
    "lb4-sctp": [rec(ACCESS, sctp4("198.18.128.13", 40100, 0, SCTPChunkInit(init_tag=0x1000, a_rwnd=65536, n_out_streams=2, n_in_streams=2, init_tsn=1)))]
                + [rec(ACCESS, eth(ACCESS, IP(src=b, dst=US4) / SCTP(sport=38413, dport=40100, tag=0x1000)
                                   / SCTPChunkInitAck(init_tag=0x9000, a_rwnd=65536, n_out_streams=2, n_in_streams=2, init_tsn=9)))
                   for b in ("198.19.1.40", "198.19.1.41")]
                + [rec(ACCESS, sctp4("198.18.128.13", 40100, 0x9000, SCTPChunkCookieEcho(cookie=b"cookie-of-the-backend") / SCTPChunkData(tsn=1, data=b"NGSetupRequest")))]
                + [rec(ACCESS, eth(ACCESS, IP(src=b, dst=US4) / SCTP(sport=38413, dport=40100, tag=0x1000) / SCTPChunkCookieAck() / SCTPChunkSACK(cumul_tsn_ack=1)))
                   for b in ("198.19.1.40", "198.19.1.41")]
                + [rec(ACCESS, sctp4("198.18.128.13", 40100, 0x9000, SCTPChunkHeartbeatReq() / SCTPChunkData(tsn=2, data=b"x" * 40)))]
                + [rec(ACCESS, eth(ACCESS, IP(src=b, dst=US4) / SCTP(sport=38413, dport=40100, tag=0x1000) / SCTPChunkHeartbeatAck() / SCTPChunkShutdown(cumul_tsn_ack=2)))
                   for b in ("198.19.1.40", "198.19.1.41")]
                + [rec(ACCESS, sctp4("198.18.128.13", 40100, 0x9000, SCTPChunkShutdownAck()))]
                + [rec(ACCESS, eth(ACCESS, IP(src=b, dst=US4) / SCTP(sport=38413, dport=40100, tag=0x1000) / SCTPChunkShutdownComplete()))
                   for b in ("198.19.1.40", "198.19.1.41")],
    "lb4-sctp-refused": [rec(ACCESS, sctp4("198.18.128.13", 40101, 0, SCTPChunkInit(init_tag=0x1001, init_tsn=1), chksum=0x12345678)),
                         rec(ACCESS, sctp_chunk_length(sctp4("198.18.128.13", 40102, 0, SCTPChunkInit(init_tag=0x1002, init_tsn=1)), 34, 3)),
                         rec(ACCESS, sctp_chunk_length(sctp4("198.18.128.13", 40103, 0, SCTPChunkInit(init_tag=0x1003, init_tsn=1)), 34, 200)),
                         rec(ACCESS, sctp4("198.18.128.13", 40104, 0x7000, SCTPChunkAbort())),
                         rec(ACCESS, sctp4("198.18.128.13", 40105, 0, SCTPChunkInit(init_tag=0x1005, init_tsn=1), chksum=0),
                             vnet_hdr(flags=1, csum_start=34, csum_offset=8))],
    "lb6-sctp-dsr": [rec(ACCESS, sctp6("2001:db8:128::13", 40110, 0, SCTPChunkInit(init_tag=0x2000, a_rwnd=65536, n_out_streams=2, n_in_streams=2, init_tsn=1))),
                     rec(ACCESS, sctp6("2001:db8:128::13", 40110, 0x9000, SCTPChunkCookieEcho(cookie=b"cookie-of-the-backend") / SCTPChunkData(tsn=1, data=b"NGSetupRequest"))),
                     rec(ACCESS, sctp6("2001:db8:128::13", 40110, 0x9000, SCTPChunkHeartbeatReq()), hold=True),
                     # The client's second address: its path joins the association (`sctp-path-changed`).
                     rec(ACCESS, sctp6("2001:db8:128::13", 40110, 0x9000, SCTPChunkData(tsn=2, data=b"second path"), src="2001:db8::3")),
                     rec(ACCESS, sctp6("2001:db8:128::13", 40110, 0x9000, SCTPChunkData(tsn=2, data=b"y" * 100), chksum=0),
                         vnet_hdr(flags=1, csum_start=54, csum_offset=8)),
                     rec(ACCESS, sctp6("2001:db8:128::13", 40110, 0x9000, SCTPChunkAbort(), chksum=0x12345678)),
                     rec(ACCESS, sctp_chunk_length(sctp6("2001:db8:128::13", 40111, 0, SCTPChunkInit(init_tag=0x2001, init_tsn=1)), 54, 2)),
                     rec(ACCESS, sctp6("2001:db8:128::13", 40110, 0x9000, SCTPChunkAbort()))],
    # A multi-homed client's INIT and either backend's INIT ACK, listing addresses among
    # other parameters: translated without them (`sctp-addresses-removed`); an INIT whose
    # first parameter runs past its chunk (`sctp-bad-parameter`).
    "lb4-sctp-multihomed": [rec(ACCESS, sctp4("198.18.128.13", 40120, 0, SCTPChunkInit(
                               init_tag=0x1200, a_rwnd=65536, n_out_streams=2, n_in_streams=2, init_tsn=1,
                               params=[SCTPChunkParamSupportedAddrTypes(addr_type_list=["IPv4", "IPv6"]), SCTPChunkParamIPv4Addr(addr="198.18.0.7"),
                                       SCTPChunkParamIPv6Addr(addr="2001:db8::7"), SCTPChunkParamECNCapable()])))]
                           + [rec(ACCESS, eth(ACCESS, IP(src=b, dst=US4) / SCTP(sport=38413, dport=40120, tag=0x1200)
                                              / SCTPChunkInitAck(init_tag=0x9200, a_rwnd=65536, n_out_streams=2, n_in_streams=2, init_tsn=9,
                                                                 params=[SCTPChunkParamIPv4Addr(addr=b), SCTPChunkParamStateCookie(cookie=b"cookie-of-the-backend"),
                                                                         SCTPChunkParamHostname(hostname=b"backend")])))
                              for b in ("198.19.1.40", "198.19.1.41")]
                           + [rec(ACCESS, sctp_chunk_length(sctp4("198.18.128.13", 40121, 0, SCTPChunkInit(
                               init_tag=0x1201, init_tsn=1, params=[SCTPChunkParamIPv4Addr(addr="198.18.0.7")])), 34, 200, at=22))],
    # An INIT offering ASCONF (Supported Extensions: ASCONF, ASCONF-ACK, FORWARD-TSN; the
    # AUTH Chunk List naming ASCONF) and either backend's INIT ACK offering ASCONF alone:
    # translated without it (`sctp-asconf-unlisted`); then the client's ASCONF and either
    # backend's ASCONF-ACK, each after its AUTH chunk: dropped (`sctp-asconf-dropped`;
    # the other backend's is no reply of ours); the client's DATA after them goes.
    "lb4-sctp-asconf": [rec(ACCESS, sctp4("198.18.128.13", 40130, 0, SCTPChunkInit(
                           init_tag=0x1300, a_rwnd=65536, n_out_streams=2, n_in_streams=2, init_tsn=1,
                           params=[SCTPChunkParamSupportedExtensions(supported_extensions=[0xc1, 0x80, 0xc0]),
                                   SCTPChunkParamChunkList(chunk_list=[0xc1, 0x80]), SCTPChunkParamECNCapable()])))]
                       + [rec(ACCESS, eth(ACCESS, IP(src=b, dst=US4) / SCTP(sport=38413, dport=40130, tag=0x1300)
                                          / SCTPChunkInitAck(init_tag=0x9300, a_rwnd=65536, n_out_streams=2, n_in_streams=2, init_tsn=9,
                                                             params=[SCTPChunkParamStateCookie(cookie=b"cookie-of-the-backend"),
                                                                     SCTPChunkParamSupportedExtensions(supported_extensions=[0x80, 0xc1])])))
                          for b in ("198.19.1.40", "198.19.1.41")]
                       + [rec(ACCESS, sctp4("198.18.128.13", 40130, 0x9300, SCTPChunkAuthentication(shared_key_id=0, HMAC_function=1, HMAC=bytes(20))
                                            / SCTPChunkAddressConf(seq=9, params=[SCTPChunkParamIPv4Addr(addr=USER4),
                                                                                   SCTPChunkParamAddIPAddr(correlation_id=1, addr="198.18.0.9")])))]
                       + [rec(ACCESS, eth(ACCESS, IP(src=b, dst=US4) / SCTP(sport=38413, dport=40130, tag=0x1300)
                                          / SCTPChunkAuthentication(shared_key_id=0, HMAC_function=1, HMAC=bytes(20))
                                          / SCTPChunkAddressConfAck(seq=9, params=[SCTPChunkParamSuccessIndication(correlation_id=1)])))
                          for b in ("198.19.1.40", "198.19.1.41")]
                       + [rec(ACCESS, sctp4("198.18.128.13", 40130, 0x9300, SCTPChunkData(tsn=1, data=b"NGSetupRequest")))],
    "lb-no-service": [rec(ACCESS, eth(ACCESS, IP(src=USER4, dst="198.18.128.10") / TCP(sport=40001, dport=81, flags="S"))),
                      rec(ACCESS, user_udp6("2001:db8:128::10", 8, sport=5001, dport=54))],
    # Parcels: routed out of the parcel link whole, split for the narrow link, and a run
    # of equal datagrams of one flow in one vector joined into a parcel.
    "parcel4-whole": [rec(ACCESS, raw_l3(0x0800, parcel4(USER4, "198.19.40.5", 1000, 2000, [bytes([i]) * 200 for i in range(4)])))],
    "parcel4-split": [rec(ACCESS, raw_l3(0x0800, parcel4(USER4, "198.19.0.5", 1000, 2000, [bytes([i]) * 300 for i in range(3)])))],
    "parcel6": [rec(ACCESS, raw_l3(0x86dd, parcel6(USER6, "2001:db8:140::5", 1000, 2000, [bytes([i]) * 200 for i in range(3)]))),
                rec(ACCESS, raw_l3(0x86dd, parcel6(USER6, "2001:db8:99::5", 1000, 2000, [bytes([i]) * 100 for i in range(3)])))],
    "parcel-join4": [rec(ACCESS, user_udp4("198.19.40.5", 500, 3000, 4000), hold=i < 5) for i in range(6)],
    "parcel-join6": [rec(ACCESS, user_udp6("2001:db8:140::5", 500, 3000, 4000), hold=i < 3) for i in range(4)],
    # Parcels meet UDP GSO (access0 takes GSO frames in the harness): a parcel toward
    # access0 leaves as one GSO frame, a GSO frame from a host toward the parcel link
    # becomes a parcel (parcelN-join), both families.
    "parcel4-to-gso": [rec(CORE, Ether(src=PEER_MAC, dst=MAC[CORE], type=0x800) / Raw(parcel4("198.18.1.50", "198.19.1.5", 1000, 2000, [bytes([i]) * 300 for i in range(4)])))],
    "parcel6-to-gso": [rec(CORE, Ether(src=PEER_MAC, dst=MAC[CORE], type=0x86dd) / Raw(parcel6("2001:db8:1::50", "2001:db8:98::5", 1000, 2000, [bytes([i]) * 300 for i in range(4)])))],
    "gso4-to-parcel": [rec(ACCESS, udp_gso4("198.19.40.5", 2100, 500), vnet_hdr(flags=1, gso_type=5, hdr_len=42, gso_size=500, csum_start=34, csum_offset=6))],
    "gso6-to-parcel": [rec(ACCESS, udp_gso6("2001:db8:140::5", 2100, 500), vnet_hdr(flags=1, gso_type=5, hdr_len=62, gso_size=500, csum_start=54, csum_offset=6))],
    # IPv6 parcels into UDP tunnels: whole in fragmented outer packets (GUE over IPv6,
    # fragment = "outer"), split before the tunnel (GUE over IPv4, fragment = "inner").
    "parcel6-tunnel-outer": [rec(ACCESS, raw_l3(0x86dd, parcel6(USER6, "2001:db8:123::5", 1000, 2000, [bytes([i]) * 500 for i in range(4)])))],
    "parcel6-tunnel-inner": [rec(ACCESS, raw_l3(0x86dd, parcel6(USER6, "2001:db8:120::5", 1000, 2000, [bytes([i]) * 500 for i in range(4)])))],
}

out = Path(__file__).parent / "corpus" / "graph"
out.mkdir(parents=True, exist_ok=True)
# Seed names as arguments write only those (the ESP seeds' IVs are random).
only = set(sys.argv[1:]) or set(seeds)
for name, records in seeds.items():
    if name in only:
        (out / f"seed-{name}").write_bytes(b"".join(records))
print(f"{len(only & set(seeds))} seeds in {out}")
