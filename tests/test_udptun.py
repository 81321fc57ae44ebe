"""UDP tunnels (GUE, GRE-in-UDP, direct): scapy builds the inner and the tunnel traffic
and dissects what vecgate sends; tshark's GRE-in-UDP dissector reads an output. The peer
is 198.18.1.2 / 2001:db8:1::2 behind eth1; every input frame enters through eth0 (the
gateway accepts its addresses on any interface)."""
import struct

import pytest

from conftest import GW_MAC0, HOST_MAC, run_pcap, tshark_clean

from scapy.all import GRE, ICMP, IP, UDP, Ether, IPv6, Raw, raw

INNER4 = "198.19.50.7"
INNER6 = "2001:db8:150::7"


def tunnel(encap, outer=4, extra=""):
    local, remote = ("198.18.1.1", "198.18.1.2") if outer == 4 else ("2001:db8:1::1", "2001:db8:1::2")
    return f"""
[[udp_tunnel]]
local = "{local}"
remote = "{remote}"
encap = "{encap}"
routes = ["198.19.50.0/24", "2001:db8:150::/48"]
{extra}
"""


def to_inner4(i=0, ttl=64):
    return Ether(src=HOST_MAC, dst=GW_MAC0) / IP(src="198.18.0.2", dst=INNER4, ttl=ttl) / UDP(sport=1000 + i, dport=9) / Raw(b"x" * 40)


def to_inner6(i=0):
    return Ether(src=HOST_MAC, dst=GW_MAC0) / IPv6(src="2001:db8::2", dst=INNER6) / UDP(sport=1000 + i, dport=9) / Raw(b"y" * 40)


def from_peer4(port, payload, chksum=None):
    u = UDP(sport=40000, dport=port)
    if chksum is not None:
        u.chksum = chksum
    return Ether(src=HOST_MAC, dst=GW_MAC0) / IP(src="198.18.1.2", dst="198.18.1.1") / u / Raw(payload)


def from_peer6(port, payload, chksum=None):
    u = UDP(sport=40000, dport=port)
    if chksum is not None:
        u.chksum = chksum
    return Ether(src=HOST_MAC, dst=GW_MAC0) / IPv6(src="2001:db8:1::2", dst="2001:db8:1::1") / u / Raw(payload)


def back_to_host():
    """An inner packet from the far side to host A (routed out of eth0)."""
    return IP(src=INNER4, dst="198.18.0.2", ttl=20) / UDP(sport=9, dport=1000) / Raw(b"z" * 30)


def udp_checksum_ok(pkt):
    """The outer UDP checksum over the pseudo-header, summed here from the bytes (scapy
    re-serialising a GRE-in-UDP packet does not always give back the same bytes)."""
    b = raw(pkt)[14:]
    if b[0] >> 4 == 6:
        udp = b[40:]
        ph = b[8:40] + struct.pack("!I", len(udp)) + b"\0\0\0\x11"
    else:
        hl = (b[0] & 15) * 4
        udp = b[hl:]
        ph = b[12:20] + struct.pack("!BBH", 0, 17, len(udp))
    data = ph + udp + (b"\0" if len(udp) % 2 else b"")
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s == 0xFFFF


# --- encap -----------------------------------------------------------------------

def test_gue_over_ipv4_as_linux_sends_it(vecgate, tmp_path):
    pkts = [to_inner4(i) for i in range(40)] + [to_inner6(0)]
    out0, out1, c, _ = run_pcap(vecgate, tmp_path, pkts, tunnel("gue", extra="port = 5555"))
    assert len(out1) == 41 and not out0, c
    sports = set()
    for k, p in enumerate(out1):
        # The outer TTL is the tunnel's (default 64): we are the outer packet's source.
        assert p[IP].src == "198.18.1.1" and p[IP].dst == "198.18.1.2" and p[IP].ttl == 64
        u = p[UDP]
        assert u.dport == 5555 and 49152 <= u.sport <= 65535 and u.chksum == 0
        g = raw(u.payload)
        want = pkts[k][IP] if k < 40 else pkts[k][IPv6]
        # Variant 0, C clear, Hlen 0, proto 4 (IPIP) or 41 (IPv6), no flags.
        assert g[:4] == (b"\x00\x04\x00\x00" if k < 40 else b"\x00\x29\x00\x00"), g[:4].hex()
        inner = (IP if k < 40 else IPv6)(g[4:])
        if k < 40:
            assert inner.ttl == 63 and inner[UDP].sport == 1000 + k and raw(inner[UDP].payload) == raw(want[UDP].payload)
        else:
            assert inner.hlim == 63
        sports.add(u.sport)
    # A source port per inner flow: 40 flows land on many ports.
    assert len(sports) > 30, sports
    assert c[("gue4-encap", "encapsulated")] == 41


def test_gre_in_udp_over_ipv6_with_key_and_software_checksum(vecgate, tmp_path):
    pkts = [to_inner4(i) for i in range(4)] + [to_inner6(i) for i in range(4)]
    out0, out1, c, _ = run_pcap(vecgate, tmp_path, pkts, tunnel("gre", 6, 'key = 0x1234\nchecksum = "software"'))
    assert len(out1) == 8, c
    for k, p in enumerate(out1):
        assert p[IPv6].src == "2001:db8:1::1" and p[IPv6].dst == "2001:db8:1::2"
        assert p[UDP].dport == 4754 and udp_checksum_ok(p)
        g = GRE(raw(p[UDP].payload))
        assert g.key_present == 1 and g.key == 0x1234 and g.chksum_present == 0
        assert g.proto == (0x0800 if k < 4 else 0x86dd)
    # tshark's GRE-in-UDP dissector (port 4754) reads every packet cleanly.
    bad, text = tshark_clean(tmp_path / "out1.pcap")
    assert not bad, bad


def test_gre_checksum_and_sequence_numbers(vecgate, tmp_path):
    """RFC 2784's checksum and RFC 2890's sequence numbers on what vecgate sends (scapy
    recomputes the checksum, tshark checks it); received packets carrying them are
    taken, and one whose GRE checksum is wrong is dropped by name."""
    pkts = [to_inner4(i) for i in range(5)] + [to_inner6(0)]
    extra = "key = 9\ngre_checksum = true\ngre_sequence = true"
    out0, out1, c, _ = run_pcap(vecgate, tmp_path, pkts, tunnel("gre", extra=extra))
    assert len(out1) == 6 and not out0, c
    seqs = []
    for k, p in enumerate(out1):
        g = GRE(raw(p[UDP].payload))
        assert (g.chksum_present, g.key_present, g.seqnum_present) == (1, 1, 1) and g.key == 9
        assert g.proto == (0x0800 if k < 5 else 0x86dd)
        sent = g.chksum
        g.chksum = None
        assert GRE(raw(g)).chksum == sent, f"packet {k}: GRE checksum {sent:#06x}"
        seqs.append(g.sequence_number)
        inner = (IP if k < 5 else IPv6)(raw(g.payload))
        assert (inner.ttl if k < 5 else inner.hlim) == 63
        assert raw(inner[UDP].payload) == raw(pkts[k][UDP].payload)
    assert seqs == list(range(6)), seqs
    bad, _ = tshark_clean(tmp_path / "out1.pcap")
    assert not bad, bad
    # From the peer: with a checksum and a sequence number, good and bad.
    inner = raw(back_to_host())
    good = raw(GRE(chksum_present=1, key_present=1, key=9, seqnum_present=1, sequence_number=77, proto=0x0800) / Raw(inner))
    broken = bytearray(good)
    broken[-1] ^= 1
    out0, out1, c, _ = run_pcap(vecgate, tmp_path, [from_peer4(4754, good), from_peer4(4754, bytes(broken))],
                                tunnel("gre", extra=extra))
    assert len(out0) == 1 and out0[0][IP].dst == "198.18.0.2" and raw(out0[0][UDP].payload) == b"z" * 30, c
    assert c.get(("gue4-input", "gre-bad-checksum")) == 1, c


def test_direct_ipv6_inside_ipv4(vecgate, tmp_path):
    out0, out1, c, _ = run_pcap(vecgate, tmp_path, [to_inner6(i) for i in range(3)], tunnel("direct", extra="port = 5556"))
    assert len(out1) == 3, c
    for p in out1:
        assert p[UDP].dport == 5556
        inner = IPv6(raw(p[UDP].payload))
        assert inner.dst == INNER6 and inner.hlim == 63


def test_inner_ttl_expiry_answers_with_icmp(vecgate, tmp_path):
    out0, out1, c, _ = run_pcap(vecgate, tmp_path, [to_inner4(0, ttl=1)], tunnel("gue"))
    assert not out1 and len(out0) == 1 and out0[0][ICMP].type == 11, c


# --- decap -----------------------------------------------------------------------

def test_decap_each_encapsulation(vecgate, tmp_path):
    inner = raw(back_to_host())
    pkts = [
        from_peer4(6080, b"\x00\x04\x00\x00" + inner),                      # GUE variant 0
        from_peer4(6080, inner),                                             # GUE variant 1 (direct)
        from_peer4(6080, b"\x01\x04\x00\x01" + b"\x00" * 4 + inner),         # GUE with a private-flags word
    ]
    out0, out1, c, _ = run_pcap(vecgate, tmp_path, pkts, tunnel("gue"))
    assert len(out0) == 3 and not out1, c
    for p in out0:
        assert p[IP].src == INNER4 and p[IP].dst == "198.18.0.2" and p[IP].ttl == 19
        assert raw(p[UDP].payload) == b"z" * 30
    assert c[("gue4-input", "decapsulated")] == 3
    gre = raw(GRE(key_present=1, key=7, proto=0x0800)) + inner
    out0, out1, c, _ = run_pcap(vecgate, tmp_path, [from_peer6(4754, gre, chksum=None)], tunnel("gre", 6, "key = 7"))
    assert len(out0) == 1 and out0[0][IP].dst == "198.18.0.2", c


def fold(s):
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s


def test_decap_completes_a_remote_checksum_offload(vecgate, tmp_path):
    """Linux's `encap-remcsum`: the GUE private flag, then (start, field) counted from
    the inner packet; the inner UDP checksum field holds only the pseudo-header sum,
    which vecgate completes. scapy checks the result against its own checksum."""
    inner = bytearray(raw(back_to_host()))
    udp_len = len(inner) - 20
    pseudo = inner[12:20] + struct.pack("!BBH", 0, 17, udp_len)
    seed = fold(sum(struct.unpack("!6H", pseudo)))
    inner[26:28] = struct.pack("!H", seed)
    rco = lambda start, field: b"\x02\x04\x00\x01" + struct.pack("!IHH", 0x80000000, start, field)
    pkts = [
        from_peer4(6080, rco(20, 26) + bytes(inner)),
        from_peer4(6080, rco(20, 26 + 400) + bytes(inner)),      # field past the packet
        from_peer4(6080, rco(20, 27) + bytes(inner)),            # field not word-aligned with start
        from_peer4(6080, b"\x01\x04\x00\x01" + struct.pack("!I", 0x80000000) + bytes(inner)),  # no room for the word
    ]
    out0, out1, c, _ = run_pcap(vecgate, tmp_path, pkts, tunnel("gue"))
    assert len(out0) == 1 and not out1, c
    got = out0[0][IP]
    assert raw(got[UDP].payload) == b"z" * 30
    sent = got[UDP].chksum
    assert sent not in (0, seed)
    del got[UDP].chksum
    assert IP(raw(got))[UDP].chksum == sent, f"{sent:#06x}"
    assert c[("gue4-input", "gue-remote-checksum-completed")] == 1, c
    assert c[("gue4-input", "gue-bad-remote-checksum")] == 2, c
    assert c[("gue4-input", "gue-unknown-flags")] == 1, c


def test_bad_input_is_dropped_by_name(vecgate, tmp_path):
    inner = raw(back_to_host())
    pkts = [
        from_peer4(6080, b"\x20\x07\x00\x00control"),                       # control message
        from_peer4(6080, b"\x00\x04\x80\x00" + inner),                      # unknown flag
        from_peer4(6080, b"\x05\x04\x00\x00" + inner[:8]),                  # Hlen past the packet
        from_peer4(6080, b"\x80\x04\x00\x00" + inner),                      # version 2
        from_peer4(6080, b"\x00\x2f\x00\x00" + inner),                      # proto 47 on a GUE tunnel
        from_peer4(6080, b"\x00\x04\x00\x00" + inner, chksum=0x1234),       # bad UDP checksum
    ]
    out0, out1, c, snap = run_pcap(vecgate, tmp_path, pkts, tunnel("gue"))
    assert not out0 and not out1, c
    for name in ("control-messages", "gue-unknown-flags", "gue-truncated", "gue-bad-version", "unsupported-inner", "bad-udp-checksum"):
        assert c.get(("gue4-input", name)) == 1, (name, c)


def test_zero_checksum_over_ipv6_needs_the_tunnel_to_accept_it(vecgate, tmp_path):
    inner = raw(back_to_host())
    pkt = from_peer6(6080, b"\x00\x04\x00\x00" + inner, chksum=0)
    out0, _, c, _ = run_pcap(vecgate, tmp_path, [pkt], tunnel("gue", 6))
    assert not out0 and c.get(("gue6-input", "zero-checksum-refused")) == 1, c
    out0, _, c, _ = run_pcap(vecgate, tmp_path, [pkt], tunnel("gue", 6, "accept_zero_checksum = true"))
    assert len(out0) == 1, c


def test_other_ports_and_peers_are_not_tunnels(vecgate, tmp_path):
    inner = raw(back_to_host())
    pkts = [
        from_peer4(7777, b"\x00\x04\x00\x00" + inner),  # no tunnel on this port: port unreachable
        Ether(src=HOST_MAC, dst=GW_MAC0) / IP(src="198.18.1.9", dst="198.18.1.1") / UDP(sport=1, dport=6080) / Raw(b"\x00\x04\x00\x00" + inner),
    ]
    out0, out1, c, _ = run_pcap(vecgate, tmp_path, pkts, tunnel("gue"))
    assert c.get(("ip4-local", "port-unreachable")) == 1, c
    assert c.get(("gue4-input", "no-tunnel")) == 1, c


def test_decap_tells_peers_apart_within_a_vector(vecgate, tmp_path):
    """Two tunnels on one port from two peers, their packets interleaved in one vector
    (gueN-input remembers the last peer it looked up): each packet is judged by its own
    tunnel's encapsulation, and a stranger's by none."""
    inner = raw(back_to_host())
    gue, direct = b"\x00\x04\x00\x00" + inner, inner
    def from_peer(last_octet, payload):
        return Ether(src=HOST_MAC, dst=GW_MAC0) / IP(src=f"198.18.1.{last_octet}", dst="198.18.1.1") / \
            UDP(sport=40000, dport=6080, chksum=0) / Raw(payload)
    second = """
[[udp_tunnel]]
local = "198.18.1.1"
remote = "198.18.1.3"
encap = "direct"
port = 6080
routes = ["198.19.51.0/24"]
"""
    pkts = [from_peer(2, gue), from_peer(3, direct), from_peer(3, gue), from_peer(2, gue), from_peer(9, gue), from_peer(3, direct)]
    out0, out1, c, _ = run_pcap(vecgate, tmp_path, pkts, tunnel("gue") + second)
    assert len(out0) == 4 and not out1, c
    assert all(p[IP].src == INNER4 and raw(p[UDP].payload) == b"z" * 30 for p in out0)
    assert c[("gue4-input", "decapsulated")] == 4
    # The GUE header from the direct tunnel's peer is read as an inner packet of version 0.
    assert c.get(("gue4-input", "unsupported-inner")) == 1 and c.get(("gue4-input", "no-tunnel")) == 1, c


@pytest.mark.parametrize("mode", ["strict", "loose"])
def test_urpf_on_a_tunnel_checks_the_sources_it_takes_out(vecgate, tmp_path, mode):
    """`urpf` on a `[[udp_tunnel]]`: scapy sends GUE packets whose inner sources are the
    tunnel's own (a route into it), the far side of the eth1 link, the gateway's own
    address, a blackhole and nobody's, over IPv4 and IPv6. Strict passes only the
    tunnel's own; loose also the link's. Every other packet is in the drop capture, and
    tshark reads there the reason and the inner source each was dropped for."""
    from test_forwarding import dropped_records
    srcs4 = {INNER4: "pass", "198.19.60.7": "link", "198.18.1.1": "own-address",
             "198.19.254.7": "no-route", "198.18.99.1": "no-route"}
    srcs6 = {"2001:db8:150::9": "pass", "2001:db8:100::9": "link"}
    pkts = [from_peer4(6080, b"\x00\x04\x00\x00" + raw(IP(src=s, dst="198.18.0.2") / UDP(sport=9, dport=1000) / Raw(b"u")))
            for s in srcs4]
    pkts += [from_peer4(6080, b"\x00\x29\x00\x00" + raw(IPv6(src=s, dst="2001:db8::2") / UDP(sport=9, dport=1000) / Raw(b"u")))
             for s in srcs6]
    drops = tmp_path / "drops.pcapng"
    out0, out1, c, _ = run_pcap(vecgate, tmp_path, pkts, tunnel("gue", extra=f'urpf = "{mode}"'), drops=drops)
    want = {"pass"} | ({"link"} if mode == "loose" else set())
    passed = sorted(p[IP].src if IP in p else p[IPv6].src for p in out0)
    assert passed == sorted(s for s, k in {**srcs4, **srcs6}.items() if k in want), (passed, c)
    reasons = {"link": "urpf-wrong-tunnel", "own-address": "urpf-own-address", "no-route": "urpf-no-route"}
    recs = dropped_records(drops)
    dropped4 = {r["src"]: r["comment"] for r in recs if r["src"]}
    assert dropped4 == {s: f"gue4-input: {reasons[k]}, received on eth0" for s, k in srcs4.items() if k not in want}, (recs, c)
    # The IPv6 one from the link's side, under strict.
    assert len(recs) - len(dropped4) == (1 if mode == "strict" else 0), recs
    assert c.get(("gue4-input", "urpf-wrong-tunnel"), 0) == (2 if mode == "strict" else 0), c
    assert c[("gue4-input", "decapsulated")] == len(pkts)
