"""Tunnel MTU: scapy builds inner packets too big for a GTP-U tunnel (with and without
DF, IPv4 and IPv6), TCP SYNs for MSS clamping, and outer packets fragmented every way
(in order, out of order, duplicated, overlapping, missing a piece); scapy reassembles
and dissects what vecgate sends, and tshark reads the captures.

The tunnels leave by eth1, whose MTU is 1400: over IPv4 a tunnel's inner MTU is
1400 - 36 (IPv4, UDP, GTP-U) = 1364, over IPv6 1400 - 56 = 1344."""
from conftest import GW_MAC0, HOST_MAC, run_pcap, tshark_clean

from scapy.all import IP, UDP, TCP, Ether, Raw, IPv6, ICMP, raw, fragment, fragment6, IPv6ExtHdrFragment
from scapy.layers.inet6 import ICMPv6PacketTooBig
from scapy.contrib.gtp import GTP_U_Header

from test_gtpu import UE4, UE6, tunnels as gtpu_tunnels
MTU4, MTU6 = 1400 - 36, 1400 - 56


def tunnels(v4="", v6=""):
    """test_gtpu's two tunnels; the IPv6 one carries either family (decap_next = "ip")."""
    return gtpu_tunnels(v4, v6, decap6="ip")


def payload(n):
    return Raw(bytes((i * 7) % 256 for i in range(n)))


def to_ue4(size, df, ident=1):
    """An IPv4 packet of `size` bytes to the UE."""
    return Ether(src=HOST_MAC, dst=GW_MAC0) / IP(src="198.18.0.2", dst=UE4, id=ident, flags="DF" if df else 0) / UDP(sport=4000, dport=9) / payload(size - 28)


def to_ue6(size):
    return Ether(src=HOST_MAC, dst=GW_MAC0) / IPv6(src="2001:db8::2", dst=UE6) / UDP(sport=4000, dport=9) / payload(size - 48)


def defragment4(frags):
    """The datagram the IPv4 fragments make, put together here (not by vecgate)."""
    frags = sorted(frags, key=lambda p: p[IP].frag)
    data = b"".join(raw(p[IP].payload)[:p[IP].len - p[IP].ihl * 4] for p in frags)
    first = frags[0][IP]
    return IP(src=first.src, dst=first.dst, id=first.id, proto=first.proto, ttl=first.ttl) / Raw(data), data


def test_df_and_ipv6_too_big_get_icmp_with_the_tunnel_mtu(vecgate, tmp_path):
    pkts = [to_ue4(1400, df=True), to_ue4(MTU4, df=True, ident=2), to_ue6(1400), to_ue6(MTU6)]
    out0, out1, c, _ = run_pcap(vecgate, tmp_path, pkts, tunnels())
    icmp4 = [p for p in out0 if p.haslayer(ICMP)]
    ptb = [p for p in out0 if p.haslayer(ICMPv6PacketTooBig)]
    assert len(icmp4) == 1 and (icmp4[0][ICMP].type, icmp4[0][ICMP].code) == (3, 4)
    assert icmp4[0][ICMP].nexthopmtu == MTU4 and icmp4[0][IP].dst == "198.18.0.2"
    assert len(ptb) == 1 and ptb[0][ICMPv6PacketTooBig].mtu == MTU6 and ptb[0][IPv6].dst == "2001:db8::2"
    # The packets exactly at the tunnel MTU fit: outer packets of exactly 1400 bytes.
    assert sorted(len(p[IP if p.haslayer(IP) else IPv6]) for p in out1) == [1400, 1400]
    assert c[("gtpu4-encap", "inner-too-big")] == 1 and c[("gtpu6-encap", "inner-too-big")] == 1
    bad, text = tshark_clean(tmp_path / "out0.pcap")
    assert not bad, text


def test_without_df_the_inner_packet_is_fragmented_before_encapsulation(vecgate, tmp_path):
    pkt = to_ue4(2000, df=False, ident=0x4242)
    out0, out1, c, _ = run_pcap(vecgate, tmp_path, [pkt], tunnels())
    assert not out0 and len(out1) == 2
    for p in out1:
        assert len(p[IP]) <= 1400 and p[IP].flags.DF and p[IP].frag == 0, "outer packets whole"
        assert p[GTP_U_Header].teid == 0x200
    inner = [IP(raw(p[GTP_U_Header].payload)) for p in out1]
    assert all(len(i) <= MTU4 and i.id == 0x4242 for i in inner)
    whole, data = defragment4(inner)
    assert data == raw(pkt[IP].payload)
    assert c[("gtpu4-encap", "fragment-inner")] == 1 and c[("ip4-fragment", "fragments")] == 2
    assert c[("gtpu4-encap", "encapsulated")] == 2
    bad, text = tshark_clean(tmp_path / "out1.pcap")
    assert not bad, text


def hopped(frame):
    """The inner IPv4 packet as it leaves in the tunnel: one hop on (TTL 63)."""
    ip = frame[IP].copy()
    ip.ttl -= 1
    del ip.chksum
    return raw(ip)


def test_outer_policy_fragments_the_outer_packet_ipv4_and_ipv6(vecgate, tmp_path):
    pkt = to_ue4(1390, df=False, ident=0x77)
    out0, out1, c, _ = run_pcap(vecgate, tmp_path, [pkt, to_ue4(1390, df=False, ident=0x78)],
                                tunnels(v4='fragment = "outer"'))
    assert not out0 and len(out1) == 4
    frags = [p for p in out1 if p.haslayer(IP)]
    by_id = {}
    for p in frags:
        # Through ip4-fragment and ip4-rewrite, still with the TTL the tunnel gave it.
        assert len(p[IP]) <= 1400 and not p[IP].flags.DF and p[IP].ttl == 64
        by_id.setdefault(p[IP].id, []).append(p)
    assert len(by_id) == 2, "each datagram has its own identification"
    for group in by_id.values():
        whole, data = defragment4(group)
        outer = IP(src="198.18.1.1", dst="198.18.1.2", proto=17) / UDP(data)
        assert outer[UDP].dport == 2152 and outer[GTP_U_Header].teid == 0x200
        assert raw(outer[GTP_U_Header].payload) in (hopped(pkt), hopped(to_ue4(1390, df=False, ident=0x78)))
    assert c[("gtpu4-encap", "fragment-outer")] == 2
    # IPv4 inner in the IPv6 tunnel: the outer IPv6 packet gets a Fragment header.
    out0, out1, c, _ = run_pcap(vecgate, tmp_path, [Ether(src=HOST_MAC, dst=GW_MAC0) / IP(src="198.18.0.2", dst="198.19.200.9") / UDP(sport=5, dport=9) / payload(1362)],
                                tunnels(v6='fragment = "outer"') + '\n[[route]]\nprefix = "198.19.200.0/24"\ninterface = "gtpu_tunnel1"\n')
    assert len(out1) == 2 and all(p.haslayer(IPv6ExtHdrFragment) and len(p[IPv6]) <= 1400 and p[IPv6].hlim == 64 for p in out1)
    pieces = sorted(out1, key=lambda p: p[IPv6ExtHdrFragment].offset)
    assert pieces[0][IPv6ExtHdrFragment].m == 1 and pieces[1][IPv6ExtHdrFragment].m == 0
    assert pieces[0][IPv6ExtHdrFragment].id == pieces[1][IPv6ExtHdrFragment].id
    data = b"".join(raw(p[IPv6ExtHdrFragment].payload) for p in pieces)
    u = UDP(data)
    assert u.dport == 2152 and u[GTP_U_Header].teid == 0x201 and u[GTP_U_Header].payload.dst == "198.19.200.9"
    assert c[("gtpu6-encap", "fragment-outer")] == 1 and c[("ip6-fragment", "fragments")] == 2
    bad, text = tshark_clean(tmp_path / "out1.pcap")
    assert not bad, text


def syn(src, dst, mss, flags="S"):
    return IP(src=src, dst=dst) / TCP(sport=40000, dport=80, flags=flags, options=[("NOP", None), ("MSS", mss), ("SAckOK", b"")])


def tcp_ok(ip):
    c = ip.copy()
    del c[TCP].chksum
    return IP(raw(c))[TCP].chksum == ip[TCP].chksum


def test_mss_clamping_both_directions(vecgate, tmp_path):
    into = Ether(src=HOST_MAC, dst=GW_MAC0) / syn("198.18.0.2", UE4, 1460)
    small = Ether(src=HOST_MAC, dst=GW_MAC0) / syn("198.18.0.2", UE4, 1200)
    out_of = Ether(src=HOST_MAC, dst=GW_MAC0) / IP(src="198.18.1.2", dst="198.18.1.1") / UDP(sport=2152, dport=2152) / \
        GTP_U_Header(teid=0x100) / syn(UE4, "198.19.0.5", 1460, flags="SA")
    out0, out1, c, _ = run_pcap(vecgate, tmp_path, [into, small, out_of], tunnels(v4="tcp_mss_clamp = true"))
    encapped = [IP(raw(p[GTP_U_Header].payload)) for p in out1 if p.haslayer(GTP_U_Header)]
    decapped = [p[IP] for p in out1 if not p.haslayer(GTP_U_Header)]
    assert sorted(dict(i[TCP].options)["MSS"] for i in encapped) == [1200, MTU4 - 40]
    assert len(decapped) == 1 and dict(decapped[0][TCP].options)["MSS"] == MTU4 - 40
    assert all(tcp_ok(i) for i in encapped + decapped)
    assert c[("gtpu4-encap", "mss-clamped")] == 1 and c[("gtpu4-input", "mss-clamped")] == 1
    # Without the option nothing changes.
    out0, out1, c, _ = run_pcap(vecgate, tmp_path, [into], tunnels())
    assert dict(IP(raw(out1[0][GTP_U_Header].payload))[TCP].options)["MSS"] == 1460


def gtpu_from_gnb4(inner, ident):
    return IP(src="198.18.1.2", dst="198.18.1.1", id=ident) / UDP(sport=2152, dport=2152) / GTP_U_Header(teid=0x100) / inner


def test_outer_fragments_are_reassembled_then_decapsulated(vecgate, tmp_path):
    def inner(k):
        return IP(src=UE4, dst="198.19.0.5") / UDP(sport=6000 + k, dport=9) / payload(900)

    def frags(k, size=400):
        return [Ether(src=HOST_MAC, dst=GW_MAC0) / f for f in fragment(gtpu_from_gnb4(inner(k), 100 + k), fragsize=size)]

    in_order = frags(0)
    out_of_order = frags(1)[::-1]
    dup = frags(2)
    dup = dup[:2] + [dup[1]] + dup[2:]
    missing = frags(3)[:-1]
    # An overlapping piece: the second fragment again, shifted back by 8 bytes.
    ov = frags(4)
    o = ov[1].copy()
    o[IP].frag -= 1
    o[IP].len = None
    o[IP].chksum = None
    overlapping = [ov[0], o, ov[1], ov[2]]
    out0, out1, c, _ = run_pcap(vecgate, tmp_path, in_order + out_of_order + dup + missing + overlapping, tunnels())
    got = sorted(p[UDP].sport for p in out1 if p.haslayer(UDP) and not p.haslayer(GTP_U_Header))
    assert got == [6000, 6001, 6002], got
    for p in out1:
        assert raw(p[UDP].payload) == raw(payload(900))
    assert c[("ip4-reassembly", "reassembled")] == 3
    assert c[("ip4-reassembly", "duplicate")] == 1
    assert c[("ip4-reassembly", "overlap")] == 1
    assert c[("gtpu4-input", "decapsulated")] == 3


def test_ipv6_outer_fragments_overlap_drops_the_datagram(vecgate, tmp_path):
    def gtpu6(k):
        inner = IP(src=UE4, dst="198.19.0.5") / UDP(sport=7000 + k, dport=9) / payload(900)
        return IPv6(src="2001:db8:1::2", dst="2001:db8:1::1") / IPv6ExtHdrFragment(id=500 + k) / UDP(sport=2152, dport=2152) / GTP_U_Header(teid=0x101) / inner

    whole = [Ether(src=HOST_MAC, dst=GW_MAC0) / f for f in fragment6(gtpu6(0), 500)]
    shuffled = [Ether(src=HOST_MAC, dst=GW_MAC0) / f for f in fragment6(gtpu6(1), 500)][::-1]
    ov = [Ether(src=HOST_MAC, dst=GW_MAC0) / f for f in fragment6(gtpu6(2), 500)]
    o = ov[1].copy()
    o[IPv6ExtHdrFragment].offset -= 1
    out0, out1, c, _ = run_pcap(vecgate, tmp_path, whole + shuffled + [ov[0], o] + ov[1:], tunnels())
    got = sorted(p[UDP].sport for p in out1 if p.haslayer(UDP) and not p.haslayer(GTP_U_Header))
    assert got == [7000, 7001], got
    assert c[("ip6-reassembly", "reassembled")] == 2 and c[("ip6-reassembly", "overlap")] == 1
    assert c[("gtpu6-input", "decapsulated")] == 2


def test_tunnel_mtu_config_errors_name_the_field(vecgate, tmp_path):
    import subprocess
    from conftest import gateway_config
    for extra, field in ((tunnels(v4="mtu = 100"), "gtpu_tunnel[0].mtu"), (tunnels(v4='fragment = "sideways"'), "fragment"),
                         ("[dataplane.reassembly]\ntimeout_ms = 0\n", "dataplane.reassembly.timeout_ms")):
        cfg = gateway_config(tmp_path, extra)
        if extra.startswith("[dataplane."):
            text = cfg.read_text().replace("[dataplane]\n", "[dataplane]\nreassembly = { timeout_ms = 0 }\n").replace(extra, "")
            cfg.write_text(text)
        (tmp_path / "in.pcap").write_bytes(b"")
        r = subprocess.run([str(vecgate), "pcap", "--config", str(cfg)], capture_output=True, text=True, timeout=30)
        assert r.returncode != 0 and field in r.stderr, (field, r.stderr)


def test_gue_tunnels_share_the_mechanism(vecgate, tmp_path):
    """A GUE tunnel over IPv4 out of eth1: inner MTU 1400 - 20 - 8 - 4 = 1368. DF gets
    frag-needed with it, no DF is fragmented before encapsulation, and a SYN is clamped."""
    gue = """
[[udp_tunnel]]
local = "198.18.1.1"
remote = "198.18.1.2"
encap = "gue"
routes = ["198.19.50.0/24"]
tcp_mss_clamp = true
"""
    dst = "198.19.50.1"
    big_df = Ether(src=HOST_MAC, dst=GW_MAC0) / IP(src="198.18.0.2", dst=dst, flags="DF") / UDP(sport=1, dport=9) / payload(1400)
    big = Ether(src=HOST_MAC, dst=GW_MAC0) / IP(src="198.18.0.2", dst=dst, id=99) / UDP(sport=2, dport=9) / payload(2000)
    s = Ether(src=HOST_MAC, dst=GW_MAC0) / syn("198.18.0.2", dst, 1460)
    out0, out1, c, _ = run_pcap(vecgate, tmp_path, [big_df, big, s], gue)
    assert len(out0) == 1 and out0[0][ICMP].nexthopmtu == 1368
    inner = [IP(raw(p[UDP].payload)[4:]) for p in out1]
    assert all(len(p[IP]) <= 1400 and p[UDP].dport == 6080 for p in out1)
    frags = [i for i in inner if i.id == 99]
    assert len(frags) == 2 and defragment4(frags)[1] == raw(big[IP].payload)
    syns = [i for i in inner if i.proto == 6]
    assert len(syns) == 1 and dict(syns[0][TCP].options)["MSS"] == 1368 - 40 and tcp_ok(syns[0])
    assert c[("gue4-encap", "inner-too-big")] == 1 and c[("gue4-encap", "fragment-inner")] == 1
    assert c[("gue4-encap", "mss-clamped")] == 1


def test_a_datagram_that_times_out_is_answered_with_time_exceeded(vecgate, tmp_path):
    """Reassembly time 10 ms: the first fragment of a datagram, then 1,500,000 frames
    to a blackhole (tens of milliseconds of work: 300,000 took 10 ms on an AMD EPYC
    Zen 5, too close), then a fragment of another datagram,
    which sweeps the table: the first datagram is dropped (`timed-out`) and its source
    gets ICMP Time Exceeded, code 1, quoting its first fragment; IPv4 and IPv6."""
    def inner(k):
        return IP(src=UE4, dst="198.19.0.5") / UDP(sport=8000 + k, dport=9) / payload(900)

    first4 = Ether(src=HOST_MAC, dst=GW_MAC0) / fragment(gtpu_from_gnb4(inner(0), 300), fragsize=400)[0]
    g6 = IPv6(src="2001:db8:1::2", dst="2001:db8:1::1") / IPv6ExtHdrFragment(id=700) / UDP(sport=2152, dport=2152) / GTP_U_Header(teid=0x101) / inner(1)
    first6 = Ether(src=HOST_MAC, dst=GW_MAC0) / fragment6(g6, 500)[0]
    filler = bytes(Ether(src=HOST_MAC, dst=GW_MAC0) / IP(src="198.18.0.2", dst="198.19.254.1") / UDP(sport=1, dport=9))
    late4 = Ether(src=HOST_MAC, dst=GW_MAC0) / fragment(gtpu_from_gnb4(inner(2), 301), fragsize=400)[1]
    late6 = Ether(src=HOST_MAC, dst=GW_MAC0) / fragment6(IPv6(src="2001:db8:1::2", dst="2001:db8:1::1") / IPv6ExtHdrFragment(id=701) / UDP(sport=2152, dport=2152) / GTP_U_Header(teid=0x101) / inner(3), 500)[1]
    pkts = [first4, first6] + [filler] * 1_500_000 + [late4, late6]
    out0, out1, c, snap = run_pcap(vecgate, tmp_path, pkts, tunnels() + "\n[dataplane.reassembly]\ntimeout_ms = 10\n")
    # The premise: the run took well over the timeout (else the filler is too short for
    # this machine, and the test says so rather than fail below).
    elapsed_ms = snap["elapsed_cycles"] / snap["tsc_hz"] * 1000
    assert elapsed_ms > 20, f"the run took {elapsed_ms:.1f} ms: more filler frames are needed on this machine"
    assert c[("ip4-reassembly", "timed-out")] == 1 and c[("ip6-reassembly", "timed-out")] == 1, {k: v for k, v in c.items() if v}
    te4 = [p for p in out1 if p.haslayer(ICMP) and (p[ICMP].type, p[ICMP].code) == (11, 1)]
    # From the address of the interface the fragments came in on (the harness feeds
    # every frame through eth0), to the fragments' source.
    assert len(te4) == 1 and te4[0][IP].dst == "198.18.1.2" and te4[0][IP].src == "198.18.0.1"
    from scapy.layers.inet import IPerror
    assert te4[0][IPerror].id == 300 and te4[0][IPerror].flags.MF
    from scapy.layers.inet6 import ICMPv6TimeExceeded
    te6 = [p for p in out1 if p.haslayer(ICMPv6TimeExceeded)]
    assert len(te6) == 1 and te6[0][ICMPv6TimeExceeded].code == 1 and te6[0][IPv6].dst == "2001:db8:1::2"
    assert c[("ip4-reassembly", "time-exceeded")] == 1 and c[("ip6-reassembly", "time-exceeded")] == 1
    bad, text = tshark_clean(tmp_path / "out1.pcap")
    assert not bad, text
