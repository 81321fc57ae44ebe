"""Two vecgate instances as the two ends of a GTP-U tunnel, between Linux hosts in
network namespaces: host A ⇄ gNB-side vecgate ⇄ middle link ⇄ UPF-side vecgate ⇄ host B.
TCP (10 MB, checksummed by both hosts' stacks) and UDP cross inside GTP-U, over IPv4
and IPv6 outer headers, for each outer checksum mode. The hosts keep their offloads on,
so their TSO frames reach the gNB whole and are segmented in software before
encapsulation. A capture of the middle link is dissected by tshark."""
import subprocess
import time

import pytest

from netns import Vecgate, result

TRANSFER = 10 * 1024 * 1024
MIDDLE_MTU = 1600  # room for the tunnel headers around 1500-byte inner packets


def side(name, host_if, host_addr4, host_addr6, mid_if, mid4, mid6, peer4, peer6, teid_in, teid_out, far4, far6, outer, mode,
         mid_mtu=MIDDLE_MTU, tunnel_extra=""):
    local, remote = (mid4, peer4) if outer == 4 else (mid6, peer6)
    return f"""
[[interface]]
name = "host"
type = "af_packet"
host_if = "{host_if}"
mac = "02:00:00:00:{name}:01"
addresses = ["{host_addr4}", "{host_addr6}"]

[[interface]]
name = "mid"
type = "af_packet"
host_if = "{mid_if}"
mac = "02:00:00:00:{name}:02"
mtu = {mid_mtu}
addresses = ["{mid4}/24", "{mid6}/64"]

[[gtpu_tunnel]]
local = "{local}"
remote = "{remote}"
teid_in = {teid_in}
teid_out = {teid_out}
decap_next = "ip"
checksum = "{mode}"
{'accept_zero_checksum = true' if outer == 6 and mode == "zero" else ''}
{tunnel_extra}

[[route]]
prefix = "{far4}"
interface = "gtpu_tunnel0"

[[route]]
prefix = "{far6}"
interface = "gtpu_tunnel0"
"""


def build(lab, vecgate, tmp_path, outer, mode, mid_mtu=MIDDLE_MTU, tunnel_extra=""):
    a, gnb, upf, b = lab.ns("a"), lab.dataplane_ns("gnb"), lab.dataplane_ns("upf"), lab.ns("b")
    lab.veth(a, "a0", gnb, "a1")
    lab.veth(gnb, "n1", upf, "u1", mtu=mid_mtu)
    lab.veth(b, "b0", upf, "b1")
    lab.host(a, "a0", "198.18.0.2/24", "2001:db8::2/64", "198.18.0.1", "2001:db8::1")
    lab.host(b, "b0", "198.18.1.2/24", "2001:db8:1::2/64", "198.18.1.1", "2001:db8:1::1")
    g = Vecgate(lab, vecgate, gnb, side("0a", "a1", "198.18.0.1/24", "2001:db8::1/64", "n1", "198.18.10.1", "2001:db8:10::1",
                                        "198.18.10.2", "2001:db8:10::2", 0x100, 0x200, "198.18.1.0/24", "2001:db8:1::/64", outer, mode,
                                        mid_mtu, tunnel_extra),
                tmp_path, name="gnb")
    u = Vecgate(lab, vecgate, upf, side("0b", "b1", "198.18.1.1/24", "2001:db8:1::1/64", "u1", "198.18.10.2", "2001:db8:10::2",
                                        "198.18.10.1", "2001:db8:10::1", 0x200, 0x100, "198.18.0.0/24", "2001:db8::/64", outer, mode,
                                        mid_mtu, tunnel_extra),
                tmp_path, name="upf")
    return a, gnb, upf, b, g, u


# The test's own payloads are random bytes: show them to tshark as data, so its
# heuristic dissectors (Thrift, …) do not read protocols into them.
AS_DATA = [a for p in ("tcp.port==7103", "tcp.port==7104", "udp.port==7101", "udp.port==7102") for a in ("-d", f"{p},data")]


def capture(lab, ns, ifname, path, seconds):
    return lab.spawn(ns, "tshark", "-q", "-i", ifname, "-w", str(path), "-a", f"duration:{seconds}", "-c", "3000", "-f", "udp port 2152")


@pytest.mark.parametrize("outer", [4, 6])
@pytest.mark.parametrize("mode", ["zero", "software", "offload"])
def test_tcp_and_udp_through_gtpu_between_two_vecgates(lab, vecgate, tmp_path, outer, mode):
    if outer == 4 and mode == "offload":
        pytest.skip("offload is an IPv6-outer mode (config refuses it over IPv4)")
    a, gnb, upf, b, g, u = build(lab, vecgate, tmp_path, outer, mode)
    for dst in ("198.18.1.2", "2001:db8:1::2"):
        lab.run(a, "ping", "-c", "4", "-i", "0.2", "-W", "1", dst, check=False)
    pcap = tmp_path / "middle.pcap"
    cap = capture(lab, upf, "u1", pcap, 60)
    time.sleep(1.0)
    why = lambda: (g.errors(), u.errors(), g.interfaces(), u.interfaces())
    lab.udp_echoes_both_families(a, b, 7101, 100, 1400, timeout=60, why=why)
    lab.tcp_both_families(a, b, 7103, TRANSFER, why=why)
    try:
        cap.wait(20)  # 3000 packets are well within the transfers
    except subprocess.TimeoutExpired:
        cap.send_signal(2)
        cap.wait(10)
    ge, ue = g.errors(), u.errors()
    assert ge.get(("gtpu4-encap" if outer == 4 else "gtpu6-encap", "encapsulated"), 0) > 1000, ge
    assert ue.get(("gtpu4-input" if outer == 4 else "gtpu6-input", "decapsulated"), 0) > 1000, ue
    # The hosts' TSO frames were segmented before encapsulation.
    assert ge.get(("ip-gso-segment", "segments"), 0) > 1000, ge
    for e in (ge, ue):
        assert not [k for k, v in e.items() if v and k[1] in ("bad-udp-checksum", "to-fragment", "no-buffer", "bad-gso-frame")], e

    fields = subprocess.run(["tshark", "-r", str(pcap), *AS_DATA, "-T", "fields", "-E", "occurrence=f", "-e", "gtp.teid", "-e", "udp.checksum", "-e", "_ws.malformed",
                             "-e", "ipv6.src" if outer == 6 else "ip.src"], capture_output=True, text=True, timeout=60)
    assert fields.returncode == 0, fields.stderr
    rows = [l.split("\t") for l in fields.stdout.splitlines() if l.strip()]
    assert len(rows) > 100, fields.stdout[:500]
    assert all(r[0] == "0x00000200" and r[3] == ("198.18.10.1" if outer == 4 else "2001:db8:10::1") for r in rows), rows[:3]
    if any(r[2] for r in rows):
        detail = subprocess.run(["tshark", "-r", str(pcap), *AS_DATA, "-Y", "_ws.malformed", "-V"], capture_output=True, text=True, timeout=60)
        raise AssertionError("tshark found malformed packets:\n" + detail.stdout[-3000:])
    checksums = [int(r[1], 16) for r in rows]
    if mode == "zero":
        assert all(c == 0 for c in checksums)
    else:
        assert all(c != 0 for c in checksums)
    if mode == "software":
        # Every checksum, outer UDP and inner TCP/UDP alike, is complete on the wire.
        r = subprocess.run(["tshark", "-r", str(pcap), *AS_DATA, "-o", "udp.check_checksum:TRUE", "-o", "tcp.check_checksum:TRUE",
                            "-o", "ip.check_checksum:TRUE", "-T", "fields", "-e", "_ws.expert.message"],
                           capture_output=True, text=True, timeout=60)
        bad = [l for l in r.stdout.splitlines() if "Bad checksum" in l or "incorrect" in l.lower()]
        assert not bad, bad[:5]
    for v in (g, u):
        code, _, _ = v.stop()
        assert code == 0


def test_tunnel_churn_under_live_traffic_loses_nothing(lab, vecgate, tmp_path):
    """While UDP crosses gtpu_tunnel0 between the hosts, both gateways create and delete
    other tunnels, each with a UE route (every change publishes new GTP-U and FIB
    tables to the worker): every datagram and every echo arrives, and the churned
    tunnels are gone again."""
    import threading
    a, gnb, upf, b, g, u = build(lab, vecgate, tmp_path, 4, "zero")
    lab.run(a, "ping", "-c", "4", "-i", "0.2", "-W", "1", "198.18.1.2", check=False)
    changes = []

    def churn(gw, local, remote):
        for k in range(40):
            out = gw.ctl("create", "gtpu", "tunnel", "local", local, "remote", remote, "teid-in", str(0x1000 + k),
                         "teid-out", str(0x2000 + k), "ue", f"198.19.{k}.0/24", json_out=False)
            name = out.split()[1] if len(out.split()) > 1 else ""  # "created NAME <what it is>"
            changes.append(out)
            changes.append(gw.ctl("delete", "gtpu", "tunnel", name, json_out=False))

    echo = lab.peer(b, "udp-echo", 7120, 400)
    threads = [threading.Thread(target=churn, args=(g, "198.18.10.1", "198.18.10.2")),
               threading.Thread(target=churn, args=(u, "198.18.10.2", "198.18.10.1"))]
    for t in threads:
        t.start()
    ping = lab.peer_run(a, "udp-ping", "198.18.1.2", 7120, 400, 600, timeout=150)
    for t in threads:
        t.join(60)
    assert len(changes) == 160, changes[:4]
    assert ping["matched"] == 400 and ping["corrupt"] == 0, ping
    assert result(echo)["echoed"] == 400
    for gw in (g, u):
        tunnels = gw.ctl("show", "gtpu", "tunnels", json_out=False)
        assert "gtpu_tunnel0" in tunnels and "gtpu_tunnel1 " not in tunnels, tunnels
        assert "198.19." not in gw.ctl("show", "ip", "fib", json_out=False)


@pytest.mark.parametrize("how", ["pmtud", "mss-clamp"])
def test_tcp_through_a_tunnel_over_1500_byte_links(lab, vecgate, tmp_path, how):
    """Every link is 1500 bytes, so the hosts' 1500-byte packets do not fit the tunnel
    (inner MTU 1500 - 36 = 1464 over IPv4). With path MTU discovery the gNB answers
    with ICMP frag-needed / packet-too-big carrying 1464, the senders' kernels lower
    their path MTU and the transfers adapt; with MSS clamping the SYNs already announce
    segments that fit, and no ICMP is needed. Either way 10 MB per family arrive intact."""
    clamp = how == "mss-clamp"
    a, gnb, upf, b, g, u = build(lab, vecgate, tmp_path, 4, "software", mid_mtu=1500,
                                 tunnel_extra="tcp_mss_clamp = true" if clamp else "")
    for dst in ("198.18.1.2", "2001:db8:1::2"):
        lab.run(a, "ping", "-c", "2", "-i", "0.2", "-W", "1", dst, check=False)
    lab.tcp_both_families(a, b, 7203, TRANSFER, why=lambda: (g.errors(), u.errors()))
    ge, ue = g.errors(), u.errors()
    if clamp:
        # Both SYNs (a's into the tunnel at the gNB, b's SYN-ACK into it at the UPF)
        # were clamped, and nothing was ever too big.
        assert ge.get(("gtpu4-encap", "mss-clamped"), 0) >= 2 and ue.get(("gtpu4-encap", "mss-clamped"), 0) >= 2, (ge, ue)
        assert ge.get(("gtpu4-encap", "inner-too-big"), 0) == 0, ge
    else:
        assert ge.get(("gtpu4-encap", "inner-too-big"), 0) >= 1, ge
        assert ge.get(("ip4-icmp-error", "sent"), 0) >= 1 and ge.get(("ip6-icmp-error", "sent"), 0) >= 1, ge
        # The hosts learned the tunnel's MTU from our ICMP.
        for dst in ("198.18.1.2", "2001:db8:1::2"):
            cache = lab.run(a, "ip", "route", "get", dst).stdout
            assert "mtu 1464" in cache, cache
    for v in (g, u):
        code, _, _ = v.stop()
        assert code == 0
