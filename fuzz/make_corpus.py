"""Seed corpus for the fuzz targets, built by scapy (an independent implementation):
valid packets of every kind each parser sees, plus truncations and bit flips.
Run from this folder: python3 make_corpus.py (the output is committed)."""
import random
from pathlib import Path

from scapy.all import (ARP, ICMP, IP, TCP, UDP, Ether, Dot1Q, IPv6, ICMPv6EchoRequest, ICMPv6ND_NS, ICMPv6ND_NA,
                       ICMPv6NDOptSrcLLAddr, ICMPv6NDOptDstLLAddr, ICMPv6PacketTooBig, IPv6ExtHdrHopByHop,
                       IPv6ExtHdrDestOpt, IPv6ExtHdrFragment, IPv6ExtHdrRouting, HBHOptUnknown, Raw, raw)

S6, D6 = "2001:db8::1", "2001:db8::2"   # the addresses wire::fuzz::icmpv6 checksums with
rnd = random.Random(7)
seeds = {
    "ethernet": [Ether(dst="02:00:00:00:00:01") / IP() / UDP(), Ether() / Dot1Q(vlan=5) / IP(), Ether(type=0x86dd) / IPv6()],
    "arp": [ARP(op=1, psrc="198.18.0.2", pdst="198.18.0.1"), ARP(op=2, hwsrc="02:00:00:00:00:01", psrc="198.18.0.1")],
    "ipv4": [IP(src="198.18.0.1", dst="198.19.0.1") / UDP() / Raw(b"x" * 10), IP(options=[b"\x01\x01\x01\x00"]) / TCP(),
             IP(flags="MF", frag=100) / Raw(b"y" * 16), IP(ihl=5, len=20)],
    "ipv6": [IPv6(src=S6, dst=D6) / UDP(), IPv6() / IPv6ExtHdrHopByHop(options=[HBHOptUnknown(otype=0x87, optdata=b"ab")]) / UDP(),
             IPv6() / IPv6ExtHdrDestOpt() / IPv6ExtHdrRouting() / IPv6ExtHdrFragment(offset=0, m=1) / UDP()],
    "icmpv4": [ICMP(type=8, id=1, seq=2) / Raw(b"ping"), ICMP(type=3, code=4, nexthopmtu=1400) / raw(IP() / UDP()), ICMP(type=11)],
    "icmpv6": [raw(IPv6(src=S6, dst=D6) / ICMPv6EchoRequest(data=b"x"))[40:],
               raw(IPv6(src=S6, dst=D6, hlim=255) / ICMPv6ND_NS(tgt=D6) / ICMPv6NDOptSrcLLAddr(lladdr="02:00:00:00:00:07"))[40:],
               raw(IPv6(src=S6, dst=D6, hlim=255) / ICMPv6ND_NA(tgt=S6) / ICMPv6NDOptDstLLAddr(lladdr="02:00:00:00:00:08"))[40:],
               raw(IPv6(src=S6, dst=D6) / ICMPv6PacketTooBig(mtu=1280) / Raw(b"q" * 48))[40:]],
    "udp": [raw(IP(src="198.18.0.1", dst="198.18.0.2") / UDP(sport=2152, dport=2152) / Raw(b"gtp"))[20:], raw(UDP(len=8))],
    "tcp": [raw(TCP(flags="S", options=[("MSS", 1460), ("NOP", None), ("WScale", 7)])), raw(TCP(flags="PA") / Raw(b"data"))],
}
from scapy.contrib.gtp import GTP_U_Header, GTPPDUSessionContainer, GTPEchoRequest
seeds["gtpu"] = [
    GTP_U_Header(teid=0x1234) / IP(src="198.18.0.1", dst="198.19.0.1") / UDP(),
    GTP_U_Header(teid=7, E=1, next_ex=0x85) / GTPPDUSessionContainer(type=1, QFI=9) / IP(src="198.18.0.1", dst="198.19.0.1") / UDP(),
    GTP_U_Header(teid=7, E=1, next_ex=0x85) / GTPPDUSessionContainer(type=0, QFI=5, RQI=1) / IPv6(src=S6, dst=D6) / UDP(),
    GTP_U_Header(teid=0, S=1, seq=5, gtp_type=1) / GTPEchoRequest(),
]
from scapy.all import GRE
# GUE has no scapy layer: its headers are written out (variant 0 data with IPIP, with a
# private-flags word and IPv6, a control message).
seeds["gue"] = [
    b"\x00\x04\x00\x00" + raw(IP(src="198.18.0.1", dst="198.18.0.2") / ICMP()),
    b"\x01\x29\x00\x01\x00\x00\x00\x00" + raw(IPv6(src=S6, dst=D6) / UDP()),
    b"\x20\x01\x00\x00control",
]
seeds["gre"] = [
    GRE(proto=0x0800) / IP(src="198.18.0.1", dst="198.18.0.2"),
    GRE(chksum_present=1, key_present=1, seqnum_present=1, key=7, sequence_number=9, proto=0x86dd) / IPv6(src=S6, dst=D6),
]
from scapy.layers.ipsec import SecurityAssociation, ESP
# ESP as it arrives in UDP 4500 (RFC 3948): scapy's own ESP (NULL, AES-GCM with an IV
# and ICV, AES-CBC + HMAC), a NAT keep-alive and an IKE message after the non-ESP marker.
_inner = IP(src="198.19.3.1", dst="198.19.4.1") / ICMP()
_tun = IP(src="198.18.3.1", dst="198.18.3.2")
seeds["esp"] = [
    raw(SecurityAssociation(ESP, spi=0x1000, crypt_algo="NULL", auth_algo="NULL", tunnel_header=_tun).encrypt(_inner)[ESP]),
    raw(SecurityAssociation(ESP, spi=0x2000, crypt_algo="AES-GCM", crypt_key=bytes(range(20)), auth_algo="NULL",
                            tunnel_header=_tun).encrypt(_inner, seq_num=5)[ESP]),
    raw(SecurityAssociation(ESP, spi=0x3000, crypt_algo="AES-CBC", crypt_key=bytes(16), auth_algo="SHA2-256-128",
                            auth_key=bytes(32), tunnel_header=_tun).encrypt(_inner)[ESP]),
    b"\xff",
    b"\x00\x00\x00\x00" + bytes(28),
]
from scapy.layers.sctp import (SCTP, SCTPChunkInit, SCTPChunkInitAck, SCTPChunkAbort, SCTPChunkShutdown,
                               SCTPChunkShutdownComplete, SCTPChunkData, SCTPChunkSACK, SCTPChunkParamIPv4Addr,
                               SCTPChunkParamIPv6Addr, SCTPChunkParamHostname, SCTPChunkParamSupportedAddrTypes,
                               SCTPChunkParamECNCapable, SCTPChunkParamStateCookie, SCTPChunkParamSupportedExtensions,
                               SCTPChunkParamChunkList, SCTPChunkParamRandom, SCTPChunkAddressConf, SCTPChunkAuthentication,
                               SCTPChunkParamAddIPAddr)
# SCTP as NGAP carries it (port 38412): scapy computes the CRC32c.
seeds["sctp"] = [
    SCTP(sport=38412, dport=38412, tag=0) / SCTPChunkInit(init_tag=0x11223344, a_rwnd=65536, n_out_streams=2, n_in_streams=2, init_tsn=1),
    SCTP(sport=38412, dport=38412, tag=0x11223344) / SCTPChunkInitAck(init_tag=0x55667788, a_rwnd=65536, n_out_streams=2, n_in_streams=2, init_tsn=9),
    SCTP(sport=38412, dport=38412, tag=0x55667788) / SCTPChunkSACK(cumul_tsn_ack=8) / SCTPChunkData(tsn=1, proto_id=60, data=b"ngap"),
    SCTP(sport=38412, dport=38412, tag=0x55667788) / SCTPChunkShutdown(cumul_tsn_ack=8),
    SCTP(sport=38412, dport=38412, tag=0x55667788) / SCTPChunkAbort(),
    SCTP(sport=38412, dport=38412, tag=0x55667788) / SCTPChunkShutdownComplete(),
    # A multi-homed INIT and INIT ACK: address parameters among others (the load
    # balancer's NAT removes them: wire::sctp::remove_multihoming).
    SCTP(sport=38412, dport=38412, tag=0) / SCTPChunkInit(init_tag=0x11223344, a_rwnd=65536, n_out_streams=2, n_in_streams=2, init_tsn=1,
        params=[SCTPChunkParamIPv4Addr(addr="198.18.0.7"), SCTPChunkParamSupportedAddrTypes(addr_type_list=["IPv4", "IPv6"]),
                SCTPChunkParamIPv6Addr(addr="2001:db8::7"), SCTPChunkParamECNCapable()]),
    SCTP(sport=38412, dport=38412, tag=0x11223344) / SCTPChunkInitAck(init_tag=0x55667788, a_rwnd=65536, n_out_streams=2, n_in_streams=2, init_tsn=9,
        params=[SCTPChunkParamStateCookie(cookie=b"cookie"), SCTPChunkParamHostname(hostname=b"peer"), SCTPChunkParamIPv4Addr(addr="198.18.1.7")]),
    # An INIT and INIT ACK offering dynamic address reconfiguration (ASCONF and
    # ASCONF-ACK among their Supported Extensions, which the NAT removes; the AUTH Chunk
    # List naming them, which it keeps), and an ASCONF after its AUTH chunk.
    SCTP(sport=38412, dport=38412, tag=0) / SCTPChunkInit(init_tag=0x11223344, a_rwnd=65536, n_out_streams=2, n_in_streams=2, init_tsn=1,
        params=[SCTPChunkParamSupportedExtensions(supported_extensions=[0xc1, 0x80, 0xc0, 0x0f]), SCTPChunkParamRandom(random=bytes(32)),
                SCTPChunkParamChunkList(chunk_list=[0xc1, 0x80]), SCTPChunkParamIPv4Addr(addr="198.18.0.7")]),
    SCTP(sport=38412, dport=38412, tag=0x11223344) / SCTPChunkInitAck(init_tag=0x55667788, a_rwnd=65536, n_out_streams=2, n_in_streams=2, init_tsn=9,
        params=[SCTPChunkParamStateCookie(cookie=b"cookie"), SCTPChunkParamSupportedExtensions(supported_extensions=[0x80, 0xc1])]),
    SCTP(sport=38412, dport=38412, tag=0x55667788) / SCTPChunkAuthentication(shared_key_id=0, HMAC_function=1, HMAC=bytes(20))
        / SCTPChunkAddressConf(seq=9, params=[SCTPChunkParamIPv4Addr(addr="198.18.0.2"), SCTPChunkParamAddIPAddr(correlation_id=1, addr="198.18.0.9")]),
]
out = Path(__file__).parent / "corpus"
for target, pkts in seeds.items():
    d = out / target
    d.mkdir(parents=True, exist_ok=True)
    n = 0
    for p in pkts:
        b = raw(p) if not isinstance(p, bytes) else p
        variants = [b, b[: len(b) // 2], b[:1]]
        for _ in range(3):
            m = bytearray(b)
            m[rnd.randrange(len(m))] ^= 1 << rnd.randrange(8)
            variants.append(bytes(m))
        for v in variants:
            (d / f"seed-{n:03}").write_bytes(v)
            n += 1
print("corpus written")
