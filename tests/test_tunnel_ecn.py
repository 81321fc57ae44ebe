"""DSCP and ECN across every tunnel (RFC 6040, RFC 2983's uniform model, RFC 4301
§5.1.2.1): entering, the outer header carries the inner packet's traffic class byte
(DSCP and ECN), or with a tunnel's `dscp = N` (the pipe model) that DSCP and the inner
ECN field; leaving, the outer ECN is combined into the inner packet by RFC 6040's
table (outer CE marks an ECN-capable inner packet CE, outer ECT(1) turns ECT(0) into
ECT(1), outer CE over a Not-ECT inner packet is dropped by name), the inner DSCP kept.
scapy builds the packets and reads the results; an IPv4 header's checksum is checked
by recomputing it with scapy. GUE (the fast path and, with a GRE key, the general
one), GTP-U, ESP (scapy's ESP layer decrypts and encrypts) and the load balancer's
direct server return."""
import json
import socket
import subprocess

import pytest
from conftest import GW_MAC0, HOST_MAC, run_pcap

from scapy.all import GRE, IP, UDP, Ether, IPv6, Raw, raw
from scapy.contrib.gtp import GTP_U_Header

import test_gtpu
import test_ipsec
import test_lb_encap
import test_udptun
from test_ctl import ctl, running  # noqa: F401 (a fixture)

NOT_ECT, ECT1, ECT0, CE = 0, 1, 2, 3
EF = 46 << 2  # DSCP Expedited Forwarding in the traffic class byte
AF41 = 34 << 2

# RFC 6040 §4.2 Figure 4: (inner, outer) -> inner after decapsulation; None: dropped.
TABLE = {
    (NOT_ECT, NOT_ECT): NOT_ECT, (NOT_ECT, ECT0): NOT_ECT, (NOT_ECT, ECT1): NOT_ECT, (NOT_ECT, CE): None,
    (ECT0, NOT_ECT): ECT0, (ECT0, ECT0): ECT0, (ECT0, ECT1): ECT1, (ECT0, CE): CE,
    (ECT1, NOT_ECT): ECT1, (ECT1, ECT0): ECT1, (ECT1, ECT1): ECT1, (ECT1, CE): CE,
    (CE, NOT_ECT): CE, (CE, ECT0): CE, (CE, ECT1): CE, (CE, CE): CE,
}
CASES = sorted(TABLE)


def ip4_checksum_ok(l3):
    """The IPv4 header's checksum as sent equals scapy's recomputation."""
    again = IP(raw(l3))
    sent = again.chksum
    del again.chksum
    return IP(raw(again)).chksum == sent


def tc_of(l3):
    return l3.tos if l3.version == 4 else l3.tc


def inner_from_host(v, tc, i):
    """A packet from host A into the tunnels' routes (DSCP and ECN `tc`)."""
    if v == 4:
        return Ether(src=HOST_MAC, dst=GW_MAC0) / IP(src="198.18.0.2", dst=test_udptun.INNER4, tos=tc) / UDP(sport=2000 + i, dport=9) / Raw(b"e" * 30)
    return Ether(src=HOST_MAC, dst=GW_MAC0) / IPv6(src="2001:db8::2", dst=test_udptun.INNER6, tc=tc) / UDP(sport=2000 + i, dport=9) / Raw(b"e" * 30)


def back_to_host(v, tc):
    """An inner packet from the far side to host A (routed out of eth0)."""
    if v == 4:
        return IP(src=test_udptun.INNER4, dst="198.18.0.2", tos=tc) / UDP(sport=9, dport=1000) / Raw(b"z" * 30)
    return IPv6(src=test_udptun.INNER6, dst="2001:db8::2", tc=tc) / UDP(sport=9, dport=1000) / Raw(b"z" * 30)


TCS = [0, NOT_ECT | EF, ECT0 | EF, ECT1 | AF41, CE | AF41, CE, 0xFF]


# --- UDP tunnels ---------------------------------------------------------------------

@pytest.mark.parametrize("outer", [4, 6])
@pytest.mark.parametrize("encap,extra", [("gue", ""), ("gre", "key = 7"), ("gue", "tcp_mss_clamp = true")],
                         ids=["gue-fast-path", "gre-key-fast-path", "gue-clamping-general-path"])
def test_udp_tunnel_outer_header_carries_the_inner_traffic_class(vecgate, tmp_path, outer, encap, extra):
    sent = [inner_from_host(v, tc, i) for i, (v, tc) in enumerate((v, tc) for v in (4, 6) for tc in TCS)]
    out0, out1, c, _ = run_pcap(vecgate, tmp_path, sent, test_udptun.tunnel(encap, outer, extra))
    assert len(out1) == len(sent) and not out0, c
    for p, s in zip(out1, sent):
        l3 = IP(raw(p)[14:]) if outer == 4 else IPv6(raw(p)[14:])
        want = tc_of(s[IP] if IP in s else s[IPv6])
        assert tc_of(l3) == want, (p.summary(), want)
        if outer == 4:
            assert ip4_checksum_ok(l3), p.summary()
        else:
            assert l3.fl == 0, "the flow label is left as the template has it"


def outer_tc_for(dscp, inner_tc):
    """What the outer header carries under a tunnel's `dscp` setting: the inner byte
    whole ("inherit"), or the fixed DSCP over the inner ECN field."""
    return inner_tc if dscp == "inherit" else dscp << 2 | (inner_tc & CE)


@pytest.mark.parametrize("dscp", ["inherit", 10, 0], ids=["inherit", "dscp-10", "dscp-0"])
@pytest.mark.parametrize("outer", [4, 6])
@pytest.mark.parametrize("encap,extra", [("gue", ""), ("gre", "key = 7"), ("direct", "port = 5555"), ("gue", "tcp_mss_clamp = true")],
                         ids=["gue-fast-path", "gre-key-fast-path", "direct-fast-path", "gue-clamping-general-path"])
def test_udp_tunnel_dscp_policy(vecgate, tmp_path, outer, encap, extra, dscp):
    """`dscp = N` (the pipe model): the outer DSCP is the tunnel's, the ECN field the
    inner packet's (congestion marks still reach the far end); `dscp = "inherit"` is the
    uniform model. The inner packet leaves as it came."""
    sent = [inner_from_host(v, tc, i) for i, (v, tc) in enumerate((v, tc) for v in (4, 6) for tc in TCS)]
    value = '"inherit"' if dscp == "inherit" else dscp
    out0, out1, c, _ = run_pcap(vecgate, tmp_path, sent, test_udptun.tunnel(encap, outer, f"{extra}\ndscp = {value}"))
    assert len(out1) == len(sent) and not out0, c
    for p, s in zip(out1, sent):
        l3 = IP(raw(p)[14:]) if outer == 4 else IPv6(raw(p)[14:])
        inner_tc = tc_of(s[IP] if IP in s else s[IPv6])
        assert tc_of(l3) == outer_tc_for(dscp, inner_tc), (p.summary(), dscp, inner_tc)
        inner = raw(p)[-len(raw(s)) + 14:]
        assert tc_of(IP(inner) if inner[0] >> 4 == 4 else IPv6(inner)) == inner_tc, "the inner packet keeps its own"
        if outer == 4:
            assert ip4_checksum_ok(l3), p.summary()
        else:
            assert l3.fl == 0


def gue_from_peer(outer, outer_tc, inner, zero_checksum):
    """A GUE data packet from the peer around `inner` (variant 0, protocol by family)."""
    proto = 4 if inner.version == 4 else 41
    gue = bytes([0, proto, 0, 0]) + raw(inner)
    if outer == 4:
        return Ether(src=HOST_MAC, dst=GW_MAC0) / IP(src="198.18.1.2", dst="198.18.1.1", tos=outer_tc) / UDP(sport=40000, dport=6080, chksum=0) / Raw(gue)
    u = UDP(sport=40000, dport=6080, chksum=0) if zero_checksum else UDP(sport=40000, dport=6080)
    return Ether(src=HOST_MAC, dst=GW_MAC0) / IPv6(src="2001:db8:1::2", dst="2001:db8:1::1", tc=outer_tc) / u / Raw(gue)


def check_decap(out0, c, sent_cases, node, dscp_of):
    """`sent_cases`: (inner ecn, outer ecn, inner family) in order sent; what came out of
    eth0 is the inner packets RFC 6040 keeps, each with the combined ECN and its DSCP."""
    kept = [(i, o, v) for i, o, v in sent_cases if TABLE[(i, o)] is not None]
    assert len(out0) == len(kept), (c, [p.summary() for p in out0])
    for p, (i, o, v) in zip(out0, kept):
        l3 = IP(raw(p)[14:]) if v == 4 else IPv6(raw(p)[14:])
        assert tc_of(l3) == dscp_of(v) | TABLE[(i, o)], (p.summary(), i, o)
        if v == 4:
            assert ip4_checksum_ok(l3)
    dropped = len(sent_cases) - len(kept)
    marked = sum(1 for i, o, _ in kept if TABLE[(i, o)] != i)
    assert c.get((node, "ecn-ce-not-ect"), 0) == dropped, c
    assert c.get((node, "ecn-marked"), 0) == marked, c


# Over IPv6 the fast path takes only zero checksums (a tunnel that accepts them); the
# computed ones, the general path.
@pytest.mark.parametrize("outer,zero", [(4, True), (6, True), (6, False)], ids=["v4", "v6-zero-checksum", "v6-checksum"])
def test_udp_tunnel_decapsulation_combines_ecn_by_rfc_6040(vecgate, tmp_path, outer, zero):
    cases = [(i, o, v) for v in (4, 6) for (i, o) in CASES]
    # The same outer header twice in a row per case, so the second takes the fast path
    # where the first planned it (the hint and the plan's template).
    sent, order = [], []
    for i, o, v in cases:
        for _ in range(2):
            sent.append(gue_from_peer(outer, (AF41 if v == 4 else 0) | o, back_to_host(v, EF | i), zero))
            order.append((i, o, v))
    extra = "accept_zero_checksum = true" if outer == 6 and zero else ""
    out0, out1, c, _ = run_pcap(vecgate, tmp_path, sent, test_udptun.tunnel("gue", outer, extra))
    assert not out1, c
    check_decap(out0, c, order, f"gue{outer}-input", lambda v: EF)


# --- GTP-U -------------------------------------------------------------------------

@pytest.mark.parametrize("dscp4,dscp6", [(None, None), (46, "inherit"), ("inherit", 63)],
                         ids=["default", "v4-46", "v6-63"])
def test_gtpu_outer_traffic_class_by_the_dscp_policy(vecgate, tmp_path, dscp4, dscp6):
    """A GTP-U tunnel without `dscp` or with `dscp = "inherit"` sends the inner traffic
    class whole on its outer header; one with `dscp = N` that DSCP and the inner ECN
    field; each family both ways across the runs, the inner byte kept."""
    line = lambda d: "" if d is None else 'dscp = "inherit"' if d == "inherit" else f"dscp = {d}"
    sent = []
    for k, tc in enumerate(TCS):
        sent.append(Ether(src=HOST_MAC, dst=GW_MAC0) / IP(src="198.18.0.2", dst=test_gtpu.UE4, tos=tc) / UDP(sport=1000 + k, dport=9) / Raw(b"u" * 20))
        sent.append(Ether(src=HOST_MAC, dst=GW_MAC0) / IPv6(src="2001:db8::2", dst=test_gtpu.UE6, tc=tc) / UDP(sport=1000 + k, dport=9) / Raw(b"u" * 20))
    out0, out1, c, _ = run_pcap(vecgate, tmp_path, sent, test_gtpu.tunnels(v4=line(dscp4), v6=line(dscp6)))
    assert len(out1) == len(sent), c
    # The two tunnels' packets leave by two nodes: matched by inner family and port.
    want = {(4 if IP in s else 6, s[UDP].sport): tc_of(s[IP] if IP in s else s[IPv6]) for s in sent}
    seen = set()
    for p in out1:
        l3 = IP(raw(p)[14:]) if IP in p else IPv6(raw(p)[14:])
        inner = p[GTP_U_Header].payload
        key = (inner.version, inner[UDP].sport)
        dscp = (dscp4 if l3.version == 4 else dscp6) or "inherit"
        assert tc_of(l3) == outer_tc_for(dscp, want[key]), (p.summary(), dscp, want[key])
        assert tc_of(inner) == want[key]
        if l3.version == 4:
            assert ip4_checksum_ok(l3)
        seen.add(key)
    assert seen == set(want)


def test_tunnel_dscp_set_and_shown_through_ctl(vecgate, running):
    """`dscp` through the CLI and the JSON API on both tunnel kinds, shown by `show udp
    tunnels` / `show gtpu tunnels` (text and JSON); a bad value refused saying what is
    expected."""
    proc, sock = running
    r = ctl(vecgate, sock, "create", "udp", "tunnel", "local", "198.18.1.1", "remote", "198.18.1.9", "encap", "gue",
            "port", "5555", "dscp", "46")
    assert r.returncode == 0 and "created udp_tunnel1" in r.stdout, r.stdout + r.stderr
    r = ctl(vecgate, sock, "create", "udp", "tunnel", "local", "198.18.1.1", "remote", "198.18.1.9", "encap", "gue",
            "port", "5556", "dscp", "64")
    assert r.returncode != 0 and 'expected "inherit" or a DSCP 0 to 63' in (r.stdout + r.stderr), r.stdout + r.stderr
    req = {"op": "create_gtpu_tunnel", "local": "2001:db8:1::1", "remote": "2001:db8:1::9", "teid_in": 0x700, "teid_out": 0x701,
           "dscp": 10}
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(str(sock))
        s.sendall((json.dumps(req) + "\n").encode())
        reply = json.loads(s.makefile().readline())
    assert reply["ok"], reply
    gname = reply["data"]["name"]
    text = ctl(vecgate, sock, "show", "udp", "tunnels").stdout
    line = next(l for l in text.splitlines() if l.startswith("udp_tunnel1 "))
    assert " dscp 46 " in line, text
    assert " dscp " not in next(l for l in text.splitlines() if l.startswith("udp_tunnel0 ")), "inherit shows nothing"
    rows = {t["name"]: t for t in json.loads(ctl(vecgate, sock, "show", "udp", "tunnels", json_out=True).stdout)["data"]["tunnels"]}
    assert rows["udp_tunnel1"]["dscp"] == 46 and rows["udp_tunnel0"]["dscp"] == "inherit", rows
    text = ctl(vecgate, sock, "show", "gtpu", "tunnels").stdout
    assert " dscp 10 " in next(l for l in text.splitlines() if l.startswith(gname + " ")), text
    rows = {t["name"]: t for t in json.loads(ctl(vecgate, sock, "show", "gtpu", "tunnels", json_out=True).stdout)["data"]["tunnels"]}
    assert rows[gname]["dscp"] == 10 and rows["gtpu_tunnel0"]["dscp"] == "inherit", rows
    # Changed in place: `set udp tunnel … dscp`, `set gtpu tunnel … dscp` (the tunnel and
    # its counters stay), shown at once; a bad value refused.
    r = ctl(vecgate, sock, "set", "udp", "tunnel", "udp_tunnel1", "dscp", "inherit")
    assert r.returncode == 0 and "dscp 46 -> inherit" in r.stdout, r.stdout + r.stderr
    r = ctl(vecgate, sock, "set", "gtpu", "tunnel", gname, "dscp", "63")
    assert r.returncode == 0 and "dscp 10 -> 63" in r.stdout, r.stdout + r.stderr
    rows = {t["name"]: t for t in json.loads(ctl(vecgate, sock, "show", "udp", "tunnels", json_out=True).stdout)["data"]["tunnels"]}
    assert rows["udp_tunnel1"]["dscp"] == "inherit", rows
    rows = {t["name"]: t for t in json.loads(ctl(vecgate, sock, "show", "gtpu", "tunnels", json_out=True).stdout)["data"]["tunnels"]}
    assert rows[gname]["dscp"] == 63, rows
    r = ctl(vecgate, sock, "set", "udp", "tunnel", "udp_tunnel1", "dscp", "ef")
    assert r.returncode != 0 and 'expected "inherit" or a DSCP 0 to 63' in (r.stdout + r.stderr), r.stdout + r.stderr


def test_bad_tunnel_dscp_names_file_tunnel_and_field(vecgate, tmp_path):
    cfg = tmp_path / "bad.toml"
    base = '[[interface]]\nname = "pg0"\ntype = "pg"\nmac = "02:00:00:00:00:01"\naddresses = ["198.18.1.1/24"]\n'
    cfg.write_text(base + '[[udp_tunnel]]\nlocal = "198.18.1.1"\nremote = "198.18.1.2"\nencap = "gue"\ndscp = "ef"\n')
    r = subprocess.run([str(vecgate), "run", "--config", str(cfg), "--duration", "1"], capture_output=True, text=True, timeout=20)
    assert r.returncode != 0
    assert 'bad.toml: udp_tunnel[0].dscp: "ef": expected "inherit" or a DSCP 0 to 63' in r.stderr, r.stderr
    cfg.write_text(base + '[[gtpu_tunnel]]\nlocal = "198.18.1.1"\nremote = "198.18.1.2"\nteid_in = 1\nteid_out = 2\ndscp = 64\n')
    r = subprocess.run([str(vecgate), "run", "--config", str(cfg), "--duration", "1"], capture_output=True, text=True, timeout=20)
    assert r.returncode != 0
    assert 'bad.toml: gtpu_tunnel[0].dscp: 64: expected "inherit" or a DSCP 0 to 63' in r.stderr, r.stderr


def test_gtpu_decapsulation_combines_ecn_by_rfc_6040(vecgate, tmp_path):
    sent, order = [], []
    for i, o in CASES:
        inner4 = IP(src=test_gtpu.UE4, dst="198.18.0.2", tos=EF | i) / UDP(sport=9, dport=1000) / Raw(b"g" * 20)
        sent.append(test_gtpu.from_gnb4(GTP_U_Header(teid=0x100) / inner4))
        sent[-1][IP].tos = AF41 | o
        order.append((i, o, 4))
    for i, o in CASES:
        inner6 = IPv6(src=test_gtpu.UE6, dst="2001:db8::2", tc=EF | i) / UDP(sport=9, dport=1000) / Raw(b"g" * 20)
        sent.append(test_gtpu.from_gnb6(GTP_U_Header(teid=0x101) / inner6))
        sent[-1][IPv6].tc = o
        order.append((i, o, 6))
    out0, out1, c, _ = run_pcap(vecgate, tmp_path, sent, test_gtpu.tunnels())
    assert not out1, c
    check_decap([p for p in out0 if IP in p], c, order[:16], "gtpu4-input", lambda v: EF)
    check_decap([p for p in out0 if IPv6 in p], c, order[16:], "gtpu6-input", lambda v: EF)


# --- ESP ---------------------------------------------------------------------------

@pytest.mark.parametrize("outer", [4, 6])
def test_esp_outer_header_carries_the_inner_traffic_class(vecgate, tmp_path, outer):
    sent = []
    for k, tc in enumerate(TCS):
        for s in (test_ipsec.to_tunnel(k, 4), test_ipsec.to_tunnel(k, 6)):
            l3 = s[IP] if IP in s else s[IPv6]
            if l3.version == 4:
                l3.tos = tc
            else:
                l3.tc = tc
            sent.append(s)
    out0, out1, c, _ = run_pcap(vecgate, tmp_path, sent, test_ipsec.sa_config("aes-gcm-128", outer, False))
    assert len(out1) == len(sent), c
    local, remote = test_ipsec.ends(outer)
    peer = test_ipsec.scapy_sa("aes-gcm-128", outer, False, test_ipsec.OUT_SPI, 1, local, remote)
    for p, s in zip(out1, sent):
        l3 = test_ipsec.outer_l3(p, outer)
        want = tc_of(s[IP] if IP in s else s[IPv6])
        assert tc_of(l3) == want, p.summary()
        if outer == 4:
            assert ip4_checksum_ok(l3)
        # The inner packet keeps its own, as sent.
        assert tc_of(peer.decrypt(l3)) == want


@pytest.mark.parametrize("outer", [4, 6])
def test_esp_decryption_combines_ecn_by_rfc_6040(vecgate, tmp_path, outer):
    local, remote = test_ipsec.ends(outer)
    sent, order = [], []
    for v in (4, 6):
        for i, o in CASES:
            sa = test_ipsec.scapy_sa("aes-gcm-128", outer, False, test_ipsec.IN_SPI, 2, remote, local)
            if outer == 4:
                sa.tunnel_header.tos = AF41 | o
            else:
                sa.tunnel_header.tc = o
            inner = back_to_host(v, EF | i)
            enc = sa.encrypt(inner, seq_num=len(sent) + 1)
            sent.append(Ether(src=HOST_MAC, dst=GW_MAC0) / enc)
            order.append((i, o, v))
    out0, out1, c, _ = run_pcap(vecgate, tmp_path, sent, test_ipsec.sa_config("aes-gcm-128", outer, False))
    assert not out1, c
    # Every packet opened; those RFC 6040 drops are not counted decrypted.
    dropped = sum(1 for i, o, _ in order if TABLE[(i, o)] is None)
    assert c.get((f"esp{outer}-decrypt", "decrypted")) == len(sent) - dropped, c
    check_decap(out0, c, order, f"esp{outer}-decrypt", lambda v: EF)


# --- the load balancer's direct server return ----------------------------------------

@pytest.mark.parametrize("mode", ["ipip", "gre", "gue"])
def test_lb_encapsulation_carries_the_client_traffic_class(vecgate, tmp_path, mode):
    sent = []
    for k, tc in enumerate(TCS):
        p = test_lb_encap.client_packet(mode, 3000 + k)
        p[IP].tos = tc
        sent.append(p)
    out0, out1, c, _ = run_pcap(vecgate, tmp_path, sent, test_lb_encap.services())
    assert len(out1) == len(sent), c
    for p, s in zip(out1, sent):
        assert p[IP].tos == s[IP].tos, p.summary()
        assert ip4_checksum_ok(p[IP])
        # The client's packet inside, its own traffic class as sent.
        assert IP(test_lb_encap.inner_of(p)).tos == s[IP].tos
