"""The load balancer's encapsulation mode (direct server return), pcap mode: scapy builds
client packets, vecgate chooses a backend per connection (lb4-nat / lb6-nat) and carries
the packet to it unchanged inside IP-in-IP, GRE or GUE (the same node); scapy
and tshark dissect the outer and inner headers. The client 198.18.0.2 / 2001:db8::2 is
behind eth0; backends in 198.19.0.0/16 and 2001:db8:100::/48 are routed by 198.18.1.2 /
2001:db8:1::2 behind eth1; the node's address there (198.18.1.1 / 2001:db8:1::1) is the
outer source."""
import subprocess
from collections import Counter

import pytest

from conftest import GW_MAC0, GW_MAC1, HOST_MAC, ROUTER_MAC, gateway_config, reassembled6, run_pcap, tshark_clean, write_pcap

from scapy.all import (GRE, ICMP, IP, SCTP, TCP, UDP, Ether, ICMPv6PacketTooBig, IPerror, IPerror6, IPv6, Raw, SCTPChunkCookieEcho, SCTPChunkData,
                       SCTPChunkHeartbeatReq, SCTPChunkInit, SCTPChunkParamHeartbeatInfo, SCTPChunkParamIPv4Addr, SCTPChunkParamIPv6Addr, SCTPChunkShutdown,
                       SCTPChunkShutdownComplete, TCPerror, IPv6ExtHdrFragment, defragment, fragment, fragment6, raw, wrpcap)

BACKENDS = ["198.19.1.10", "198.19.2.10", "198.19.3.10"]
BACKENDS6 = ["2001:db8:100::10", "2001:db8:100::20", "2001:db8:100::30"]
NODE, NODE6 = "198.18.1.1", "2001:db8:1::1"
CLIENT, CLIENT6 = "198.18.0.2", "2001:db8::2"
# One service address per mode.
VIPS = {"ipip": "198.18.128.20", "gre": "198.18.128.21", "gue": "198.18.128.22"}
VIP6 = "2001:db8:80::20"
GUE_PORT = 5555
# SCTP services (NGAP's port), one per encapsulation, and one over IPv6.
NGAP = 38412
SCTP_VIPS = {"ipip": "198.18.128.30", "gre": "198.18.128.31", "gue": "198.18.128.32"}
SCTP_VIP6 = "2001:db8:80::30"


def service(name, kind, vip, port, protocol, mode, backends, gue_port=GUE_PORT):
    """One encapsulated service's table, its backends on its own port (GUE's port: the
    default without `gue_port`)."""
    listed = ", ".join(f'{{ addr = "{a}", port = {port} }}' for a in backends)
    gue = f"gue_port = {gue_port}\n" if mode == "gue" and gue_port else ""
    return f"""
[[lb_service]]
name = "{name}"
type = "{kind}"
vip = "{vip}"
port = {port}
protocol = "{protocol}"
forwarding = "{mode}"
{gue}backends = [{listed}]
"""


def services():
    text = f'[lb]\nsnat4 = "{NODE}"\nsnat6 = "{NODE6}"\n'
    for mode, vip in VIPS.items():
        text += service(f"default/{mode}", "load_balancer", vip, 80, "tcp", mode, BACKENDS)
        text += service(f"default/{mode}-udp", "cluster_ip", vip, 53, "udp", mode, BACKENDS)
    for mode, vip in SCTP_VIPS.items():
        text += service(f"core/amf-{mode}", "cluster_ip", vip, NGAP, "sctp", mode, BACKENDS)
    # IPv6 in GUE on its default port.
    text += service("core/amf6", "cluster_ip", SCTP_VIP6, NGAP, "sctp", "gue", BACKENDS6, gue_port=None)
    text += service("default/gue6", "cluster_ip", VIP6, 80, "tcp", "gue", BACKENDS6, gue_port=None)
    return text


def client_packet(mode, sport, flags="S"):
    return Ether(src=HOST_MAC, dst=GW_MAC0) / IP(src=CLIENT, dst=VIPS[mode], id=sport) / TCP(sport=sport, dport=80, flags=flags, seq=1000) / Raw(b"hello")


def inner_of(p):
    """The packet an output frame carries, as bytes, by its outer protocol."""
    if p[IP].proto == 4:
        return raw(p[IP].payload)
    if p[IP].proto == 47:
        assert p[GRE].proto == 0x0800 and not p[GRE].chksum_present and not p[GRE].key_present
        return raw(p[GRE].payload)
    assert p[IP].proto == 17 and p[UDP].dport == GUE_PORT, p.summary()
    gue = raw(p[UDP].payload)
    assert gue[:4] == b"\x00\x04\x00\x00", "GUE variant 0, no options, protocol 4 (IPv4)"
    return gue[4:]


def outer_checks(p, inner_len, extra):
    """The outer IPv4 header as an independent implementation computes it."""
    o = p[IP]
    assert o.src == NODE and o.dst in BACKENDS
    assert o.len == 20 + extra + inner_len and o.flags.DF
    q = o.copy()
    del q.chksum
    assert IP(raw(q)).chksum == o.chksum, p.summary()


def test_each_encapsulation_carries_the_client_packet_unchanged(vecgate, tmp_path):
    n = 60
    sent = {mode: [client_packet(mode, 20000 + i) for i in range(n)] for mode in VIPS}
    _, out1, counters, _ = run_pcap(vecgate, tmp_path, [p for ps in sent.values() for p in ps], services())
    assert len(out1) == 3 * n
    by_mode = Counter()
    for p in out1:
        assert p[Ether].dst == ROUTER_MAC and p[Ether].src == GW_MAC1
        proto = p[IP].proto
        mode, extra = {4: ("ipip", 0), 47: ("gre", 4), 17: ("gue", 12)}[proto]
        inner = inner_of(p)
        original = IP(inner)
        # The client's packet, byte for byte (TTL, checksums, ports: nothing translated).
        i = original[TCP].sport - 20000
        assert inner == raw(sent[mode][i][IP]), p.summary()
        assert original.dst == VIPS[mode] and original.src == CLIENT
        outer_checks(p, len(inner), extra)
        by_mode[mode] += 1
    assert by_mode == {m: n for m in VIPS}
    assert counters[("lb4-nat", "encapsulated")] == 3 * n
    assert counters[("lb4-nat", "new-session")] == 3 * n
    # tshark: outer IPv4 checksums (and the inner ones, ipip and gre) verified.
    bad, _ = tshark_clean(tmp_path / "out1.pcap")
    assert not bad, bad


def test_flows_spread_and_stick_one_session_each(vecgate, tmp_path):
    n = 150
    first = [client_packet("gre", 30000 + i) for i in range(n)]
    then = [client_packet("gre", 30000 + i, flags="A") for i in range(n)]
    _, out1, counters, _ = run_pcap(vecgate, tmp_path, first + then, services())
    assert len(out1) == 2 * n
    backend = {}
    for p in out1:
        sport = IP(inner_of(p))[TCP].sport
        backend.setdefault(sport, p[IP].dst)
        assert backend[sport] == p[IP].dst, "a connection keeps its backend"
    seen = Counter(backend.values())
    assert set(seen) == set(BACKENDS)
    assert all(abs(c - n / 3) < n * 0.12 for c in seen.values()), seen
    # One session per connection; the second packet of each is a hit.
    assert counters[("lb4-nat", "new-session")] == n
    assert counters[("lb4-nat", "encapsulated")] == 2 * n


def test_gue_source_port_follows_the_flow(vecgate, tmp_path):
    n = 100
    pkts = [client_packet("gue", 40000 + i) for i in range(n)] + [client_packet("gue", 40000 + i, flags="A") for i in range(n)]
    _, out1, _, _ = run_pcap(vecgate, tmp_path, pkts, services())
    port = {}
    for p in out1:
        assert p[UDP].chksum == 0, "zero UDP checksum over IPv4"
        assert p[UDP].len == len(p[UDP])
        assert 49152 <= p[UDP].sport
        sport = IP(inner_of(p))[TCP].sport
        port.setdefault(sport, p[UDP].sport)
        assert port[sport] == p[UDP].sport, "one flow, one source port"
    # Different flows, different ports: the backend's RSS spreads them.
    assert len(set(port.values())) > 0.9 * n


def test_udp_service_and_ipv6_gue(vecgate, tmp_path):
    dns = [Ether(src=HOST_MAC, dst=GW_MAC0) / IP(src=CLIENT, dst=VIPS["ipip"]) / UDP(sport=31000 + i, dport=53) / Raw(b"q" * 11) for i in range(20)]
    six = [Ether(src=HOST_MAC, dst=GW_MAC0) / IPv6(src=CLIENT6, dst=VIP6) / TCP(sport=41000 + i, dport=80, flags="S") / Raw(b"six") for i in range(30)]
    _, out1, counters, _ = run_pcap(vecgate, tmp_path, dns + six, services())
    v4 = [p for p in out1 if IP in p and p[IP].proto == 4]
    v6 = [p for p in out1 if IPv6 in p]
    assert len(v4) == 20 and len(v6) == 30
    for p in v4:
        assert raw(p[IP].payload) == raw(dns[IP(raw(p[IP].payload))[UDP].sport - 31000][IP])
    for p in v6:
        o = p[IPv6]
        assert o.src == NODE6 and o.dst in BACKENDS6 and o.nh == 17 and o.plen == len(o.payload)
        assert p[UDP].dport == 6080, "the default GUE port"
        sent = p[UDP].chksum
        q = p.copy()
        del q[UDP].chksum
        assert sent != 0 and Ether(raw(q))[UDP].chksum == sent, "the UDP checksum over IPv6, as scapy computes it"
        gue = raw(p[UDP].payload)
        assert gue[:4] == b"\x00\x29\x00\x00", "GUE variant 0, protocol 41 (IPv6)"
        inner = IPv6(gue[4:])
        assert raw(inner) == raw(six[inner[TCP].sport - 41000][IPv6])
    assert len({p[IPv6].dst for p in v6}) == 3
    assert counters[("lb6-nat", "encapsulated")] == 30
    assert counters[("lb4-nat", "encapsulated")] == 20


def test_a_packet_too_big_for_the_backends_link_once_encapsulated(vecgate, tmp_path):
    """The outer headers make a client packet that fits the link to the backend (1400
    bytes, eth1's MTU) longer than that link: with DF (IPv4) or over IPv6, the client is told the size that fits
    (frag-needed / packet too big about its own packet: the link MTU less the outer
    headers), as a tunnel tells its sources; without DF, the outer packet goes
    fragmented, its DF cleared, and the fragments make up the client's packet whole."""
    big = Raw((bytes(range(256)) * 6)[:1360])
    df = Ether(src=HOST_MAC, dst=GW_MAC0) / IP(src=CLIENT, dst=VIPS["gre"], flags="DF") / TCP(sport=30000, dport=80, flags="S") / big
    no_df = Ether(src=HOST_MAC, dst=GW_MAC0) / IP(src=CLIENT, dst=VIPS["gue"]) / TCP(sport=30001, dport=80, flags="S") / big
    six = Ether(src=HOST_MAC, dst=GW_MAC0) / IPv6(src=CLIENT6, dst=VIP6) / TCP(sport=30002, dport=80, flags="S") / big.load[:1340]
    fits = client_packet("gre", 30003)
    out0, out1, counters, _ = run_pcap(vecgate, tmp_path, [df, no_df, six, fits], services())
    assert len(df[IP]) == 1400 and len(six[IPv6]) == 1400
    errs = [p for p in out0 if ICMP in p or ICMPv6PacketTooBig in p]
    assert len(errs) == 2, [p.summary() for p in out0]
    e4 = next(p for p in errs if ICMP in p)
    assert (e4[IP].dst, e4[ICMP].type, e4[ICMP].code, e4[ICMP].nexthopmtu) == (CLIENT, 3, 4, 1400 - 24)
    assert (e4[IPerror].src, e4[IPerror].dst, e4[TCPerror].sport) == (CLIENT, VIPS["gre"], 30000)
    e6 = next(p for p in errs if ICMPv6PacketTooBig in p)
    # IPv6 outer 40, UDP 8, GUE 4.
    assert (e6[IPv6].dst, e6[ICMPv6PacketTooBig].mtu) == (CLIENT6, 1400 - 52)
    assert (e6[IPerror6].src, e6[IPerror6].dst) == (CLIENT6, VIP6)
    assert counters[("lb4-nat", "inner-too-big")] == 1 and counters[("lb6-nat", "inner-too-big")] == 1, counters
    # Without DF: outer fragments, DF clear, that reassemble into the GUE packet carrying
    # the client's packet unchanged.
    frags = [p for p in out1 if IP in p and p[IP].proto == 17]
    assert len(frags) == 2 and all(not p[IP].flags.DF for p in frags), [p.summary() for p in out1]
    whole = b"".join(raw(p[IP].payload) for p in sorted(frags, key=lambda p: p[IP].frag))
    assert whole[8 + 4:] == raw(no_df[IP]), "the client's packet inside the reassembled GUE datagram"
    # The packet that fits goes whole, DF kept.
    whole_gre = [p for p in out1 if IP in p and p[IP].proto == 47]
    assert len(whole_gre) == 1 and whole_gre[0][IP].flags.DF


def test_bad_encapsulated_services_name_the_field(vecgate, tmp_path):
    def refused(extra):
        cfg = gateway_config(tmp_path, extra)
        write_pcap(tmp_path / "in.pcap", [])
        r = subprocess.run([str(vecgate), "pcap", "--config", str(cfg), "--json"], capture_output=True, text=True, timeout=60)
        assert r.returncode != 0
        return r.stderr

    svc = '[[lb_service]]\nname = "x"\ntype = "cluster_ip"\nvip = "198.18.128.30"\nport = 80\nprotocol = "tcp"\n'
    e = refused(svc + 'forwarding = "gre"\nbackends = [{ addr = "198.19.1.10", port = 80 }]\n')
    assert 'lb_service[0]: service "x": forwarding: gre needs the node\'s IPv4 address (lb.snat4)' in e, e
    e = refused(f'[lb]\nsnat4 = "{NODE}"\n' + svc + 'forwarding = "ipip"\nbackends = [{ addr = "198.19.1.10", port = 8080 }]\n')
    assert "backends[0].port: 8080: expected the service's port 80" in e, e
    e = refused(svc + 'forwarding = "vxlan"\n')
    assert "forwarding" in e and "nat" in e, e
    e = refused(svc + "gue_port = 5555\n")
    assert 'gue_port: 5555: only with forwarding = "gue"' in e, e


def carried(p):
    """The packet an output frame carries (IPv4 in any of the three encapsulations,
    IPv6 in GUE), and its backend (the outer destination)."""
    if IPv6 in p and p[Ether].type == 0x86DD:
        gue = raw(p[UDP].payload)
        assert gue[:4] == b"\x00\x29\x00\x00", "GUE variant 0, protocol 41 (IPv6)"
        return IPv6(gue[4:]), p[IPv6].dst
    return IP(inner_of(p)), p[IP].dst


@pytest.mark.parametrize("mode", ["ipip", "gre", "gue", "gue6"])
def test_a_multihomed_sctp_association_keeps_its_backend_on_every_path(vecgate, tmp_path, mode):
    """A multi-homed SCTP client through direct server return: its INIT lists its other
    addresses (carried unchanged: the backend learns them), and when it sends from
    another of them (path verification, a failover) its packets still reach the backend
    that holds the association, where their own 5-tuple would have Maglev choose
    another: vecgate keys the association by the backend's verification tag, which
    every packet after the INIT carries. A probe run first finds second and third
    addresses whose own INITs go elsewhere; the run itself ends with such an INIT."""
    six = mode == "gue6"
    net, l3, vip = (IPv6, "2001:db8::", SCTP_VIP6) if six else (IP, "198.18.0.", SCTP_VIPS[mode])
    addr_param = SCTPChunkParamIPv6Addr if six else SCTPChunkParamIPv4Addr
    node = "lb6-nat" if six else "lb4-nat"

    def pkt(src, tag, chunk):
        return Ether(src=HOST_MAC, dst=GW_MAC0) / net(src=src, dst=vip) / SCTP(sport=40000, dport=NGAP, tag=tag) / chunk

    def init(src, listed=()):
        params = [addr_param(addr=a) for a in listed]
        return pkt(src, 0, SCTPChunkInit(init_tag=0x1234, a_rwnd=65536, n_out_streams=2, n_in_streams=2, init_tsn=1, params=params))

    first = l3 + "2"
    candidates = [l3 + str(i) for i in range(3, 40)]
    # Each address's own INIT (the same ports): where its 5-tuple goes.
    _, out1, _, _ = run_pcap(vecgate, tmp_path, [init(a) for a in [first] + candidates], services())
    own = {str(i.src): b for i, b in map(carried, out1)}
    assert len(own) == 1 + len(candidates)
    elsewhere = [a for a in candidates if own[a] != own[first]]
    assert len(elsewhere) >= 2, own
    second, third = elsewhere[:2]

    tag = 0x5EED0001
    assoc = [
        init(first, listed=[first, second, third]),
        pkt(first, tag, SCTPChunkCookieEcho(cookie=b"c" * 32)),
        pkt(first, tag, SCTPChunkData(tsn=1, data=b"one")),
        pkt(second, tag, SCTPChunkHeartbeatReq(params=[SCTPChunkParamHeartbeatInfo(data=b"path-two")])),
        pkt(second, tag, SCTPChunkData(tsn=2, data=b"two")),
        pkt(third, tag, SCTPChunkData(tsn=3, data=b"three")),
        pkt(second, tag, SCTPChunkShutdown(cumul_tsn_ack=1)),
        pkt(second, tag, SCTPChunkShutdownComplete()),
    ]
    # After it, the second address's own INIT: its 5-tuple goes elsewhere in this run too.
    sent = assoc + [init(second)]
    _, out1, counters, _ = run_pcap(vecgate, tmp_path, sent, services())
    assert len(out1) == len(sent), counters
    for p, s in zip(out1, sent):
        inner, backend = carried(p)
        assert raw(inner) == raw(s[net]), "the client's packet unchanged"
        want = own[second] if s is sent[-1] else own[first]
        assert backend == want, f"{s.summary()} went to {backend}, not {want}"
    assert counters[(node, "sctp-path-changed")] == 3, "the second, the third, then the second address again"
    assert counters[(node, "new-session")] == 2, "the association and the last INIT"
    assert counters[(node, "encapsulated")] == len(sent)
    assert not [k for k, v in counters.items() if v and k[0] == node and k[1] not in ("sctp-path-changed", "new-session", "encapsulated")], counters
    # tshark, on the packets taken out of their outer headers (it has no GUE dissector):
    # each one's tag, a good CRC32c, nothing malformed.
    wrpcap(str(tmp_path / "inner.pcap"), [Ether(src=GW_MAC1, dst=ROUTER_MAC) / carried(p)[0] for p in out1])
    r = subprocess.run(["tshark", "-r", str(tmp_path / "inner.pcap"), "-o", "sctp.checksum:CRC 32c", "-T", "fields",
                        "-e", "sctp.verification_tag", "-e", "sctp.checksum.status", "-e", "_ws.malformed"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    read = [line.split("\t") for line in r.stdout.splitlines()]
    assert read == [[hex(s[SCTP].tag) if s[SCTP].tag else "0x00000000", "1", ""] for s in sent], r.stdout


def test_an_icmp_error_about_a_backends_reply_goes_to_that_backend(vecgate, tmp_path):
    """Path MTU discovery through direct server return: a backend's reply leaves it from
    the service address, so a router's frag-needed (IPv4) or packet too big (IPv6) about
    the reply is sent to the service address, and routed to vecgate. It goes on,
    unchanged, inside the connection's outer headers to the backend that holds the
    connection (GUE: the connection's source port, so the backend's RSS queues it with
    the connection), whose socket the quote names; without a session, to the backend the
    connection's next packet would get. (It was translated as a NAT connection's before:
    sent to the backend's own address about a packet that address never sent, which
    the backend's kernel drops, its path MTU never lowered.)"""
    router, router6 = "198.18.0.254", "2001:db8::fe"
    reply_body = Raw(b"r" * 1400)

    def error4(vip, cport, l4):
        reply = raw(IP(src=vip, dst=CLIENT, flags="DF") / l4 / reply_body)
        return Ether(src=HOST_MAC, dst=GW_MAC0) / IP(src=router, dst=vip) / ICMP(type=3, code=4, nexthopmtu=1300) / reply[:96]

    syns = {mode: client_packet(mode, 45000 + i) for i, mode in enumerate(VIPS)}
    errors = {mode: error4(VIPS[mode], 45000 + i, TCP(sport=80, dport=45000 + i, flags="A", seq=7)) for i, mode in enumerate(VIPS)}
    # IPv6 in GUE.
    syns["gue6"] = Ether(src=HOST_MAC, dst=GW_MAC0) / IPv6(src=CLIENT6, dst=VIP6) / TCP(sport=45010, dport=80, flags="S") / Raw(b"six")
    reply6 = raw(IPv6(src=VIP6, dst=CLIENT6) / TCP(sport=80, dport=45010, flags="A") / reply_body)
    errors["gue6"] = Ether(src=HOST_MAC, dst=GW_MAC0) / IPv6(src=router6, dst=VIP6) / ICMPv6PacketTooBig(mtu=1280) / reply6[:1000]
    # An SCTP association (its INIT's backend; the reply carries the client's own tag).
    syns["sctp"] = Ether(src=HOST_MAC, dst=GW_MAC0) / IP(src=CLIENT, dst=SCTP_VIPS["ipip"]) / SCTP(sport=45020, dport=NGAP, tag=0) / SCTPChunkInit(
        init_tag=0x1234, a_rwnd=65536, n_out_streams=2, n_in_streams=2, init_tsn=1)
    errors["sctp"] = error4(SCTP_VIPS["ipip"], 45020, SCTP(sport=NGAP, dport=45020, tag=0x1234) / SCTPChunkData(tsn=9, data=b"d"))
    # An error about a connection without a session, then that connection's packet.
    lone_error = error4(VIPS["gre"], 45030, TCP(sport=80, dport=45030, flags="A"))
    lone_syn = client_packet("gre", 45030, flags="A")
    sent = list(syns.values()) + list(errors.values()) + [lone_error, lone_syn]
    out0, out1, counters, _ = run_pcap(vecgate, tmp_path, sent, services())
    assert not out0, [p.summary() for p in out0]
    assert len(out1) == len(sent), counters
    # Each output by the packet it carries unchanged (the order may differ: resolved
    # backends go straight out, the others by the lookup).
    by_bytes = {raw(c[IPv6] if IPv6 in c else c[IP]): c for c in sent}
    got = {id(by_bytes[raw(carried(p)[0])]): p for p in out1}
    assert len(got) == len(sent)

    def outer_sport(p):
        return p[UDP].sport if UDP in p and (p[UDP].dport in (GUE_PORT, 6080)) else None

    for case, err in errors.items():
        net = IPv6 if case == "gue6" else IP
        inner, backend = carried(got[id(err)])
        assert raw(inner) == raw(err[net]), f"{case}: the error unchanged"
        syn_backend = carried(got[id(syns[case])])[1]
        assert backend == syn_backend, f"{case}: to {backend}, the connection's backend is {syn_backend}"
        assert outer_sport(got[id(err)]) == outer_sport(got[id(syns[case])]), case
    assert outer_sport(got[id(errors["gue"])]) is not None and outer_sport(got[id(errors["gue6"])]) is not None
    assert carried(got[id(lone_error)])[1] == carried(got[id(lone_syn)])[1], "the backend the connection gets"
    assert counters[("lb4-nat", "icmp-to-backend")] == 5 and counters[("lb6-nat", "icmp-to-backend")] == 1, counters
    assert counters[("lb4-nat", "new-session")] == 5 and counters[("lb6-nat", "new-session")] == 1, "an error makes no session"
    assert counters[("lb4-nat", "encapsulated")] == 10 and counters[("lb6-nat", "encapsulated")] == 2
    assert not [k for k, v in counters.items() if v and k[0] in ("lb4-nat", "lb6-nat") and k[1] not in ("icmp-to-backend", "new-session", "encapsulated")], counters
    # tshark reads the carried errors: their ICMP checksums (over the whole quote) good,
    # the quoted reply's ports, nothing malformed. (The quotes are cut short of the
    # replies' transport checksums' reach.)
    wrpcap(str(tmp_path / "inner.pcap"), [Ether(src=GW_MAC1, dst=ROUTER_MAC) / carried(got[id(e)])[0] for e in list(errors.values()) + [lone_error]])
    r = subprocess.run(["tshark", "-r", str(tmp_path / "inner.pcap"), "-T", "fields", "-e", "icmp.type", "-e", "icmpv6.type", "-e", "icmp.checksum.status",
                        "-e", "icmpv6.checksum.status", "-e", "tcp.dstport", "-e", "sctp.dstport", "-e", "_ws.malformed"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    read = [line.split("\t") for line in r.stdout.splitlines()]
    v4 = lambda port, sctp=False: ["3", "", "1", "", "" if sctp else str(port), str(port) if sctp else "", ""]
    assert read == [v4(45000), v4(45001), v4(45002), ["", "2", "", "1", "45010", "", ""], v4(45020, sctp=True), v4(45030)], r.stdout


def test_a_fragmented_datagram_goes_whole_to_one_backend(vecgate, tmp_path):
    """A client's datagram in fragments (only the first with the ports that choose the
    backend) is reassembled by the node and carried whole to one backend, in outer
    packets fragmented for the backend's 1400-byte link (the backend reassembles them):
    IPv4 in each encapsulation (fragments in order and reversed), IPv6 in GUE (outer
    IPv6 fragments, not a Packet Too Big the client could not act on). Before, every
    fragment was dropped."""
    body = bytes(range(256)) * 12
    originals, frames = {}, []
    for i, mode in enumerate(VIPS):
        d = IP(src=CLIENT, dst=VIPS[mode], id=700 + i) / UDP(sport=47000 + i, dport=53) / Raw(body)
        originals[47000 + i] = raw(d)
        pieces = fragment(d, fragsize=1000)
        frames += [Ether(src=HOST_MAC, dst=GW_MAC0) / f for f in (reversed(pieces) if mode == "gre" else pieces)]
    six = IPv6(src=CLIENT6, dst=VIP6) / TCP(sport=47010, dport=80, flags="A", seq=1) / Raw(body)
    originals[47010] = raw(six)
    frames += [Ether(src=HOST_MAC, dst=GW_MAC0) / f
               for f in fragment6(IPv6(src=CLIENT6, dst=VIP6) / IPv6ExtHdrFragment(id=710) / TCP(sport=47010, dport=80, flags="A", seq=1) / Raw(body), 1280)]
    _, out1, counters, _ = run_pcap(vecgate, tmp_path, frames, services())
    assert all(len(f) - 14 <= 1400 for f in out1), "outer fragments fit the link"
    outer4 = defragment([f[IP] for f in out1 if IP in f and f[Ether].type == 0x0800])
    frags6 = [f[IPv6] for f in out1 if IPv6 in f and f[Ether].type == 0x86DD]
    assert frags6 and all(IPv6ExtHdrFragment in f for f in frags6), "the IPv6 outer packet in fragments"
    [outer6] = reassembled6(frags6)
    got = {}
    for o in list(outer4) + [outer6]:
        assert o.src in (NODE, NODE6) and o.dst in BACKENDS + BACKENDS6, o.summary()
        inner, _ = carried(Ether() / o)
        l4 = inner[UDP] if UDP in inner else inner[TCP]
        got[l4.sport] = raw(inner)
    assert got == originals, "each datagram whole and unchanged inside its outer headers"
    n6 = sum(1 for f in frames if IPv6 in f)
    assert (counters[("lb4-nat", "to-reassembly")], counters[("lb6-nat", "to-reassembly")]) == (len(frames) - n6, n6)
    assert counters[("lb4-nat", "encapsulated")] == 3 and counters[("lb6-nat", "encapsulated")] == 1
    assert counters[("lb4-nat", "fragment-outer")] == 3 and counters[("lb6-nat", "fragment-outer")] == 1
    assert counters[("lb6-nat", "inner-too-big")] == 0
