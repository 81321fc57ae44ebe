"""GTP-U gateway: scapy (scapy.contrib.gtp, an independent implementation) builds the
tunnel traffic and dissects what vecgate sends; tshark's GTP dissector reads the output
captures. The gNB is 198.18.1.2 / 2001:db8:1::2, reached through eth1; the test harness
feeds every input frame through eth0 (the gateway accepts its addresses on any interface)."""
import pytest
from conftest import GW_MAC0, GW_MAC1, HOST_MAC, ROUTER_MAC, run_pcap, tshark_clean

from scapy.all import IP, UDP, Ether, Raw, IPv6, ICMP, raw
from scapy.contrib.gtp import (GTP_U_Header, GTPPDUSessionContainer, GTPEchoRequest, GTPEchoResponse, GTPErrorIndication,
                               GTPSupportedExtensionHeadersNotification, GTPHeader)

UE4 = "198.19.100.1"
UE6 = "2001:db8:200::1"


def tunnels(v4="", v6="", techniques="", decap6="ip6"):
    return f"""
[[gtpu_tunnel]]
local = "198.18.1.1"
remote = "198.18.1.2"
teid_in = 0x100
teid_out = 0x200
ue = "{UE4}/32"
{v4}

[[gtpu_tunnel]]
local = "2001:db8:1::1"
remote = "2001:db8:1::2"
teid_in = 0x101
teid_out = 0x201
decap_next = "{decap6}"
ue = "{UE6}/128"
{v6}
{techniques}
"""


def to_ue4(i=0, size=40, ttl=64):
    return Ether(src=HOST_MAC, dst=GW_MAC0) / IP(src="198.18.0.2", dst=UE4, ttl=ttl) / UDP(sport=1000 + i, dport=9) / Raw(bytes(i % 256 for i in range(size)))


def to_ue6(i=0, size=40):
    return Ether(src=HOST_MAC, dst=GW_MAC0) / IPv6(src="2001:db8::2", dst=UE6) / UDP(sport=1000 + i, dport=9) / Raw(bytes(i % 256 for i in range(size)))


def from_gnb4(gtp, sport=2152, chksum=None):
    u = UDP(sport=sport, dport=2152)
    if chksum is not None:
        u.chksum = chksum
    return Ether(src=HOST_MAC, dst=GW_MAC0) / IP(src="198.18.1.2", dst="198.18.1.1") / u / gtp


def from_gnb6(gtp, chksum=None):
    u = UDP(sport=2152, dport=2152)
    if chksum is not None:
        u.chksum = chksum
    return Ether(src=HOST_MAC, dst=GW_MAC0) / IPv6(src="2001:db8:1::2", dst="2001:db8:1::1") / u / gtp


def udp_checksum_ok(pkt):
    """scapy recomputes the outer UDP checksum; zero means 'none' (only valid over IPv4
    or where configured)."""
    ip = pkt[IP] if pkt.haslayer(IP) else pkt[IPv6]
    got = pkt[UDP].chksum
    c = ip.copy()
    del c[UDP].chksum
    want = c.__class__(raw(c))[UDP].chksum
    return got == want


def inner_of(pkt):
    return pkt[GTP_U_Header].payload


# --- encap -----------------------------------------------------------------------

def test_encap_ipv4_zero_checksum_matches_scapy(vecgate, tmp_path):
    pkts = [to_ue4(i) for i in range(8)]
    out0, out1, c, _ = run_pcap(vecgate, tmp_path, pkts, tunnels())
    assert len(out1) == 8 and not out0
    for sent, p in zip(pkts, out1):
        assert p[Ether].src == GW_MAC1 and p[Ether].dst == ROUTER_MAC
        assert p[IP].src == "198.18.1.1" and p[IP].dst == "198.18.1.2" and p[IP].proto == 17
        assert p[IP].flags == "DF" and p[IP].ttl == 64, "the outer TTL is ours, not a forwarding hop's"
        assert (p[UDP].sport, p[UDP].dport, p[UDP].chksum) == (2152, 2152, 0)
        g = p[GTP_U_Header]
        assert (g.gtp_type, g.teid, g.E, g.S) == (255, 0x200, 0, 0)
        assert g.length == len(sent[IP])
        inner = IP(raw(inner_of(p)))
        # One routing hop into the tunnel: TTL 64 -> 63, everything else unchanged.
        assert inner.ttl == 63 and inner[UDP].sport == sent[UDP].sport and raw(inner[UDP].payload) == raw(sent[UDP].payload)
    assert c[("gtpu4-encap", "encapsulated")] == 8
    bad, text = tshark_clean(tmp_path / "out1.pcap")
    assert not bad, text


def test_encap_ipv4_qfi_sequence_and_software_checksum(vecgate, tmp_path):
    extra = tunnels(v4='qfi = 9\nsequence = true\nchecksum = "software"')
    out0, out1, c, _ = run_pcap(vecgate, tmp_path, [to_ue4(i) for i in range(5)], extra)
    assert len(out1) == 5
    for n, p in enumerate(out1):
        g = p[GTP_U_Header]
        assert g.E == 1 and g.S == 1 and g.seq == n and g.next_ex == 0x85
        pdu = p[GTPPDUSessionContainer]
        assert pdu.type == 0 and pdu.QFI == 9  # DL PDU SESSION INFORMATION
        assert p[UDP].chksum != 0 and udp_checksum_ok(p)
        assert IP(raw(pdu.payload)).dst == UE4
    bad, text = tshark_clean(tmp_path / "out1.pcap")
    assert not bad, text


@pytest.mark.parametrize("mode", ["software", "zero", "offload"])
def test_encap_ipv6_checksum_modes(vecgate, tmp_path, mode):
    extra = tunnels(v6=f'checksum = "{mode}"')
    out0, out1, c, _ = run_pcap(vecgate, tmp_path, [to_ue6(i, size=s) for i, s in enumerate([10, 500, 1200])], extra)
    assert len(out1) == 3
    for p in out1:
        assert p[IPv6].src == "2001:db8:1::1" and p[IPv6].dst == "2001:db8:1::2" and p[IPv6].nh == 17
        assert p[GTP_U_Header].teid == 0x201
        if mode == "zero":
            assert p[UDP].chksum == 0
        else:
            assert p[UDP].chksum != 0 and udp_checksum_ok(p)
        inner = IPv6(raw(inner_of(p)))
        assert inner.dst == UE6 and inner.hlim == 63
    if mode == "offload":
        # A pcap file is no NIC: the writer completes the checksum left for the device.
        assert c[("gtpu6-encap", "inner-checksum-completed")] == 0
    if mode != "zero":
        bad, text = tshark_clean(tmp_path / "out1.pcap")
        assert not bad, text


def test_encap_flow_hash_source_port(vecgate, tmp_path):
    extra = tunnels(v4='src_port = "flow_hash"')
    pkts = [to_ue4(i) for i in range(64)] + [to_ue4(0)]
    _, out1, _, _ = run_pcap(vecgate, tmp_path, pkts, extra)
    ports = [p[UDP].sport for p in out1]
    assert all(49152 <= x <= 65535 for x in ports)
    assert len(set(ports[:64])) > 48  # many flows, many ports
    assert ports[64] == ports[0]  # one flow, one port (per-flow order on ECMP/RSS)


def test_encap_inner_ttl_expiry_sends_icmp(vecgate, tmp_path):
    out0, out1, c, _ = run_pcap(vecgate, tmp_path, [to_ue4(ttl=1)], tunnels())
    assert not out1 and len(out0) == 1
    assert out0[0][ICMP].type == 11 and out0[0][IP].dst == "198.18.0.2"
    assert c[("gtpu4-encap", "inner-ttl-expired")] == 1


# --- decap -----------------------------------------------------------------------

def inner4(dst="198.19.0.5", ttl=64):
    return IP(src=UE4, dst=dst, ttl=ttl) / UDP(sport=4000, dport=9) / Raw(b"uplink-payload")


def test_decap_ipv4_routes_the_inner_packet(vecgate, tmp_path):
    pkts = [from_gnb4(GTP_U_Header(teid=0x100) / inner4()),
            from_gnb4(GTP_U_Header(teid=0x100, next_ex=0x85) / GTPPDUSessionContainer(type=1, QFI=5) / inner4()),
            from_gnb4(GTP_U_Header(teid=0x100, S=1, seq=7) / inner4()),
            from_gnb4(GTP_U_Header(teid=0x100) / inner4(), chksum=None)]
    out0, out1, c, _ = run_pcap(vecgate, tmp_path, pkts)  # no tunnels: nothing decaps
    assert c.get(("gtpu4-input", "decapsulated"), 0) == 0
    out0, out1, c, _ = run_pcap(vecgate, tmp_path, pkts, tunnels())
    assert c[("gtpu4-input", "decapsulated")] == 4
    routed = [p for p in out1 if p.haslayer(IP) and p[IP].dst == "198.19.0.5" and not p.haslayer(GTP_U_Header)]
    assert len(routed) == 4
    for p in routed:
        assert p[IP].src == UE4 and p[IP].ttl == 63 and raw(p[Raw]) == b"uplink-payload"
        assert p[Ether].src == GW_MAC1 and p[Ether].dst == ROUTER_MAC
    bad, text = tshark_clean(tmp_path / "out1.pcap")
    assert not bad, text


def test_decap_ipv6_zero_checksum_needs_configuration(vecgate, tmp_path):
    inner = IPv6(src=UE6, dst="2001:db8:100::5") / UDP(sport=4000, dport=9) / Raw(b"x" * 20)
    pkts = [from_gnb6(GTP_U_Header(teid=0x101) / inner, chksum=0), from_gnb6(GTP_U_Header(teid=0x101) / inner)]
    _, out1, c, _ = run_pcap(vecgate, tmp_path, pkts, tunnels())
    assert c[("gtpu6-input", "zero-checksum-refused")] == 1
    assert c[("gtpu6-input", "decapsulated")] == 1
    _, out1, c, _ = run_pcap(vecgate, tmp_path, pkts, tunnels(v6="accept_zero_checksum = true"))
    assert c[("gtpu6-input", "decapsulated")] == 2
    routed = [p for p in out1 if p.haslayer(IPv6) and p[IPv6].dst == "2001:db8:100::5"]
    assert len(routed) == 2 and all(p[IPv6].hlim == 63 for p in routed)


def test_strict_urpf_on_a_tunnel_passes_only_its_ues(vecgate, tmp_path):
    """`urpf = "strict"` on a GTP-U tunnel (the static one-UE tunnel's anti-spoofing):
    scapy's G-PDUs from the UE's address are routed, those from another address (the
    data network's side, the IPv6 tunnel's UE, the gateway's own) dropped by reason in
    `gtpu4-input`. Switched off, all but the gateway's own pass (uRPF off forwards it,
    as VPP does)."""
    inner = lambda src: IP(src=src, dst="198.19.0.5") / UDP(sport=4000, dport=9) / Raw(b"uplink-payload")
    srcs = [UE4, "198.19.0.77", "198.18.1.1", UE4]
    pkts = [from_gnb4(GTP_U_Header(teid=0x100) / inner(s)) for s in srcs]
    pkts.append(from_gnb4(GTP_U_Header(teid=0x100) / IPv6(src=UE6, dst="2001:db8:100::5") / UDP(sport=1, dport=9)))
    _, out1, c, _ = run_pcap(vecgate, tmp_path, pkts, tunnels(v4='urpf = "strict"\ndecap_next = "ip"'))
    routed = [p[IP].src for p in out1 if p.haslayer(IP) and p[IP].dst == "198.19.0.5"]
    assert routed == [UE4, UE4], (routed, c)
    assert (c[("gtpu4-input", "urpf-wrong-tunnel")], c[("gtpu4-input", "urpf-own-address")]) == (2, 1), c
    assert c[("gtpu4-input", "decapsulated")] == 5
    _, out1, c, _ = run_pcap(vecgate, tmp_path, pkts, tunnels(v4='decap_next = "ip"'))
    assert len([p for p in out1 if p.haslayer(IP) and p[IP].dst == "198.19.0.5"]) == 4, c
    assert not any(v for k, v in c.items() if k[1].startswith("urpf")), c


def assert_error_indication(p, teid, sport):
    """`p` is the gateway's Error Indication (198.18.1.1 → the gNB 198.18.1.2) for a G-PDU
    with `teid` sent from UDP port `sport`."""
    assert p[IP].src == "198.18.1.1" and p[IP].dst == "198.18.1.2" and p[UDP].dport == 2152 and udp_checksum_ok(p)
    h = GTPHeader(raw(p[UDP].payload))
    assert h.gtp_type == 26 and h.teid == 0 and h.S == 1
    body = raw(p[UDP].payload)
    # UDP Port extension with the G-PDU's source port, then TEID Data I and the peer address.
    assert body[11] == 0x40 and int.from_bytes(body[13:15], "big") == sport
    ies = body[16:]
    assert ies[0] == 16 and int.from_bytes(ies[1:5], "big") == teid
    assert ies[5] == 133 and int.from_bytes(ies[6:8], "big") == 4 and bytes(ies[8:12]) == bytes([198, 18, 1, 1])


def test_unknown_teid_gets_error_indication(vecgate, tmp_path):
    pkts = [from_gnb4(GTP_U_Header(teid=0xabcdef) / inner4(), sport=40000)]
    _, out1, c, _ = run_pcap(vecgate, tmp_path, pkts, tunnels())
    assert c[("gtpu4-input", "error-indications-sent")] == 1
    assert len(out1) == 1
    assert_error_indication(out1[0], teid=0xabcdef, sport=40000)
    bad, text = tshark_clean(tmp_path / "out1.pcap")
    assert not bad, text


def test_echo_request_answered(vecgate, tmp_path):
    pkts = [from_gnb4(GTPHeader(seq=4242, S=1, teid=0) / GTPEchoRequest(), sport=33333),
            from_gnb6(GTPHeader(seq=7, S=1, teid=0) / GTPEchoRequest())]
    _, out1, c, _ = run_pcap(vecgate, tmp_path, pkts, tunnels())
    assert c[("gtpu4-input", "echo-replies")] == 1 and c[("gtpu6-input", "echo-replies")] == 1
    v4 = [p for p in out1 if p.haslayer(IP)][0]
    assert v4[UDP].dport == 33333 and udp_checksum_ok(v4)
    r = GTPHeader(raw(v4[UDP].payload))
    assert r.gtp_type == 2 and r.seq == 4242 and r.haslayer(GTPEchoResponse)
    v6 = [p for p in out1 if p.haslayer(IPv6)][0]
    assert udp_checksum_ok(v6) and GTPHeader(raw(v6[UDP].payload)).seq == 7
    bad, text = tshark_clean(tmp_path / "out1.pcap")
    assert not bad, text


def test_extensions_by_comprehension_rule(vecgate, tmp_path):
    g = bytes(GTP_U_Header(teid=0x100, E=1, next_ex=0, gtp_type=255))
    body = raw(inner4())

    def with_ext(ext_type):
        # Header with E set, an unknown extension of 4 bytes, then the inner packet.
        hdr = bytearray(g[:8] + b"\x00\x00\x00" + bytes([ext_type]))
        ext = bytes([1, 0xaa, 0xbb, 0])
        hdr[2:4] = (4 + len(ext) + len(body)).to_bytes(2, "big")
        return from_gnb4(Raw(bytes(hdr) + ext + body))

    _, out1, c, _ = run_pcap(vecgate, tmp_path, [with_ext(0x01), with_ext(0x81)], tunnels())
    # 0x01: comprehension not required -> skipped, decapsulated. 0x81: required -> notify.
    assert c[("gtpu4-input", "decapsulated")] == 1
    assert c[("gtpu4-input", "ext-notifications-sent")] == 1
    notes = [p for p in out1 if p.haslayer(UDP) and p[UDP].sport == 2152 and p[IP].src == "198.18.1.1"]
    assert len(notes) == 1
    n = GTPHeader(raw(notes[0][UDP].payload))
    assert n.gtp_type == 31 and n.haslayer(GTPSupportedExtensionHeadersNotification)


def test_malformed_gtpu_is_dropped_and_counted(vecgate, tmp_path):
    good = raw(GTP_U_Header(teid=0x100) / inner4())
    pkts = [
        from_gnb4(Raw(good[:6])),  # shorter than the header
        from_gnb4(Raw(bytes([0x50]) + good[1:])),  # version 2
        from_gnb4(Raw(good[:2] + (len(good)).to_bytes(2, "big") + good[4:])),  # length past the datagram
        from_gnb4(GTP_U_Header(teid=0x100) / inner4(), chksum=0x1234),  # bad UDP checksum
        from_gnb4(GTPHeader(gtp_type=254, teid=0x100)),  # end marker: consumed
        from_gnb4(GTPHeader(gtp_type=99, teid=0x100)),  # unknown type
    ]
    _, out1, c, _ = run_pcap(vecgate, tmp_path, pkts, tunnels())
    assert c[("gtpu4-input", "bad-udp-length")] + c.get(("gtpu4-input", "gtp-truncated"), 0) == 2
    assert c[("gtpu4-input", "bad-version")] == 1
    assert c[("gtpu4-input", "bad-udp-checksum")] == 1
    assert c[("gtpu4-input", "end-markers")] == 1
    assert c[("gtpu4-input", "unknown-message")] == 1
    assert not out1


def test_techniques_do_not_change_the_output(vecgate, tmp_path):
    """Each fast-path technique is an optimisation: with all six off the gateway sends
    exactly the same bytes."""
    pkts = [to_ue4(i) for i in range(4)] + [to_ue6(i) for i in range(4)] + \
           [from_gnb4(GTP_U_Header(teid=0x100) / inner4(dst=f"198.19.0.{i}")) for i in range(1, 5)]
    _, on, c_on, _ = run_pcap(vecgate, tmp_path, pkts, tunnels())
    off = "[gtpu.techniques]\n" + "\n".join(f"{t} = false" for t in
        ["lookup_cache", "skip_inner_input", "skip_outer_lookup", "encap_adjacency", "batch_lookup", "prefetch", "checksum_from_inner"])
    _, offo, c_off, snap = run_pcap(vecgate, tmp_path, pkts, tunnels(techniques=off))
    assert sorted(raw(p) for p in on) == sorted(raw(p) for p in offo)
    assert len(on) == 12
    # Without the bypasses, GTP-U went through ip4-local and the inner packets through ip4-input.
    nodes = {n["name"]: n["packets"] for n in snap["nodes"]}
    assert nodes["ip4-local"] >= 4 and nodes["gtpu4-input"] == 4


def test_decap_ethernet_pdu_session_goes_out_as_is(vecgate, tmp_path):
    """decap_next = ethernet (an Ethernet PDU session on N6): the inner frame leaves by
    the configured interface byte for byte; an inner frame too short to be Ethernet is
    dropped and counted."""
    extra = tunnels(v4='decap_next = "ethernet"\ndecap_interface = "eth1"')
    frame = Ether(src="02:aa:00:00:00:01", dst="02:bb:00:00:00:02") / IP(src="198.18.50.1", dst="198.18.50.2") / UDP(sport=7, dport=9) / Raw(b"l2-session")
    pkts = [from_gnb4(GTP_U_Header(teid=0x100, gtp_type=255) / Raw(raw(frame))),
            from_gnb4(GTP_U_Header(teid=0x100, gtp_type=255) / Raw(b"\x01\x02\x03"))]
    _, out1, c, _ = run_pcap(vecgate, tmp_path, pkts, extra)
    assert c[("gtpu4-input", "decapsulated")] == 2 and c[("gtpu4-input", "bad-inner")] == 1
    assert [raw(p) for p in out1] == [raw(frame)]
