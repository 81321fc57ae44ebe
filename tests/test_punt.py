"""Punt: packets for the gateway's own address on a host daemon's ports go whole to the
host's stack behind a tap; the host's replies come back through the tap and are routed
out. Linux's stack is the host, Linux's stack the client.

  ns A (client)                  ns G (vecgate)                        ns S (the host's stack)
  a0 198.18.3.1/24       ─veth─  g0 198.18.3.2/24 (af_packet)
     2001:db8:3::1/64               2001:db8:3::2/64
                                 tap "host" 198.18.250.1/30    ─tap─   vg-host 198.18.250.2/30
                                     2001:db8:250::1/64                 2001:db8:250::2/64
                                                                        lo: 198.18.3.2/32, 2001:db8:3::2/128
                                                                        A's subnets via the tap, from those

The tap's kernel side is moved to S, so G's kernel holds none of the gateway's addresses.
"""
import socket
import time

import pytest

from netns import Vecgate, result, same_stream

CONFIG = """
[[interface]]
name = "a"
type = "af_packet"
host_if = "g0"
mac = "02:00:00:00:3a:01"
addresses = ["198.18.3.2/24", "2001:db8:3::2/64"]

[[interface]]
name = "host"
type = "tap"
host_if = "vg-host"
mac = "02:00:00:00:3a:02"
addresses = ["198.18.250.1/30", "2001:db8:250::1/64"]

[punt]
interface = "host"
host4 = "198.18.250.2"
host6 = "2001:db8:250::2"
udp_ports = [500, 5000]
tcp_ports = [179]
"""

# Receive one datagram with IP_RECVTTL / IPV6_RECVHOPLIMIT and print the TTL it arrived with.
RECV_TTL = """
import socket, sys
v6 = sys.argv[1] == "6"
s = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET, socket.SOCK_DGRAM)
if v6:
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_RECVHOPLIMIT, 1)
else:
    s.setsockopt(socket.IPPROTO_IP, getattr(socket, "IP_RECVTTL", 12), 1)  # Linux value
s.bind(("::" if v6 else "0.0.0.0", 5000))
print("READY", flush=True)
s.settimeout(20)
data, anc, _, _ = s.recvmsg(2048, 256)
print(data.decode(), int.from_bytes(anc[0][2][:4], sys.byteorder), flush=True)
"""


def unreachable_reaches(gw, n):
    """`ip4-local port-unreachable` reaches n within 5 s (the worker counts as it runs)."""
    deadline = time.time() + 5
    while (got := gw.errors().get(("ip4-local", "port-unreachable"), 0)) < n and time.time() < deadline:
        time.sleep(0.05)
    return got


def host_stack(lab, g, ns, tap, net):
    """A host's stack in `ns` behind the gateway's tap `tap` (moved there from the
    gateway's namespace `g`), holding the gateway's addresses (198.18.3.2,
    2001:db8:3::2) as the punt link's host does, reached by 198.18.<net>.0/30 and
    2001:db8:<net>::/64; it and vecgate resolve each other on the tap."""
    lab.run(g, "ip", "link", "set", tap, "netns", ns)
    lab.run(ns, "ip", "link", "set", tap, "up")
    lab.run(ns, "ip", "addr", "add", f"198.18.{net}.2/30", "dev", tap)
    lab.run(ns, "ip", "addr", "add", f"2001:db8:{net}::2/64", "dev", tap, "nodad")
    lab.run(ns, "ip", "addr", "add", "198.18.3.2/32", "dev", "lo")
    lab.run(ns, "ip", "addr", "add", "2001:db8:3::2/128", "dev", "lo")
    lab.run(ns, "ip", "route", "add", "198.18.3.0/24", "via", f"198.18.{net}.1", "src", "198.18.3.2")
    lab.run(ns, "ip", "-6", "route", "add", "2001:db8:3::/64", "via", f"2001:db8:{net}::1", "src", "2001:db8:3::2")
    for dst in (f"198.18.{net}.1", f"2001:db8:{net}::1"):
        lab.run(ns, "ping", "-c", "2", "-i", "0.2", "-W", "1", dst, check=False)


def punt_lab(lab, vecgate, tmp_path, workers=1):
    a, g, s = lab.ns("a"), lab.dataplane_ns("gw"), lab.ns("s")
    lab.veth(a, "a0", g, "g0")
    lab.run(a, "ip", "addr", "add", "198.18.3.1/24", "dev", "a0")
    lab.run(a, "ip", "addr", "add", "2001:db8:3::1/64", "dev", "a0", "nodad")
    gw = Vecgate(lab, vecgate, g, f"[dataplane]\nworkers = {workers}\n" + CONFIG, tmp_path, split_dataplane=True)
    host_stack(lab, g, s, "vg-host", 250)
    # A resolves the gateway.
    for dst in ("198.18.3.2", "2001:db8:3::2"):
        lab.run(a, "ping", "-c", "2", "-i", "0.2", "-W", "1", dst, check=False)
    return a, s, gw


@pytest.mark.parametrize("workers", [1, 2])
def test_a_host_daemons_ports_reach_the_hosts_stack(lab, vecgate, tmp_path, workers):
    """With two workers, af_packet's fanout gives each its share of the uplink, and the
    tap is read by one: what either punts reaches the tap, what the host sends is sent
    by the worker that reads it."""
    a, s, gw = punt_lab(lab, vecgate, tmp_path, workers)
    # UDP to a punted port, both families: S's socket echoes every datagram.
    for dst, v6 in (("198.18.3.2", []), ("2001:db8:3::2", ["--v6"])):
        echo = lab.peer(s, "udp-echo", 500, 50, *v6)
        ping = lab.peer_run(a, "udp-ping", dst, 500, 50, 400)
        assert ping["matched"] == 50, (ping, gw.errors())
        assert result(echo)["echoed"] == 50
    # TCP to the daemon's port (A connects), and from it (S's daemon connects to A's
    # port 179: the replies come from that port), 2 MB each way.
    recv = lab.peer(s, "tcp-recv", 179)
    sent = lab.peer_run(a, "tcp-send", "198.18.3.2", 179, 2_000_000)
    assert same_stream(sent, result(recv)), (sent, gw.errors())
    recv = lab.peer(a, "tcp-recv", 179, "--v6")
    sent = lab.peer_run(s, "tcp-send", "2001:db8:3::1", 179, 2_000_000)
    assert same_stream(sent, result(recv)), (sent, gw.errors())
    # Delivered, not forwarded, both ways: a datagram with TTL / hop limit 1 sent to the
    # host's daemon arrives with it, and so does one the host sends from the gateway's
    # address (ip-punt-inject sends it as the gateway's own), as does one with 255.
    for fam, src, dst, frm, to, opt in ((4, a, s, "", "198.18.3.2", (socket.IPPROTO_IP, socket.IP_TTL)),
                                        (6, a, s, "", "2001:db8:3::2", (socket.IPPROTO_IPV6, socket.IPV6_UNICAST_HOPS)),
                                        (4, s, a, "198.18.3.2", "198.18.3.1", (socket.IPPROTO_IP, socket.IP_TTL)),
                                        (6, s, a, "2001:db8:3::2", "2001:db8:3::1", (socket.IPPROTO_IPV6, socket.IPV6_UNICAST_HOPS))):
        for ttl in (1, 255):
            r = lab.spawn(dst, "python3", "-c", RECV_TTL, str(fam))
            assert r.stdout.readline().strip() == "READY"
            send = (f"import socket; s = socket.socket(socket.AF_INET{'6' if fam == 6 else ''}, socket.SOCK_DGRAM); "
                    f"s.bind(('{frm}', 0)); s.setsockopt({opt[0]}, {opt[1]}, {ttl}); s.sendto(b'ttl', ('{to}', 5000))")
            lab.run(src, "python3", "-c", send)
            out, err = r.communicate(timeout=25)
            assert out.split() == ["ttl", str(ttl)], (fam, src, ttl, out, err, gw.errors())
    # The host's ping from the gateway's address: the echo replies are the host's.
    for dst in ("198.18.3.1", "2001:db8:3::1"):
        src = "198.18.3.2" if ":" not in dst else "2001:db8:3::2"
        p = lab.run(s, "ping", "-c", "3", "-i", "0.2", "-W", "2", "-I", src, dst, check=False, timeout=20)
        assert " 0% packet loss" in p.stdout, (p.stdout, gw.errors())
    # An error about a daemon's packet is the host's too: A refuses a datagram from S's
    # port 500 (port unreachable), and S's connected socket hears of it.
    for fam, frm, to in ((4, "198.18.3.2", "198.18.3.1"), (6, "2001:db8:3::2", "2001:db8:3::1")):
        refused = (f"import socket, time; s = socket.socket(socket.AF_INET{'6' if fam == 6 else ''}, socket.SOCK_DGRAM); "
                   f"s.bind(('{frm}', 500)); s.connect(('{to}', 9)); s.send(b'x'); s.settimeout(5)\n"
                   f"try:\n    s.recv(100); print('answered')\nexcept ConnectionRefusedError:\n    print('refused')\n"
                   f"except socket.timeout:\n    print('nothing')")
        out = lab.run(s, "python3", "-c", refused, timeout=20).stdout.strip()
        assert out == "refused", (fam, out, gw.errors())
    # A port no daemon was given: vecgate answers it (port unreachable), S never sees it.
    lab.run(a, "python3", "-c", "import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('198.18.3.2', 600))")
    assert unreachable_reaches(gw, 1) >= 1
    e = gw.errors()
    # 50 + 50 datagrams, the four TTL probes and the TCP segments (the kernel hands some
    # over coalesced); nothing dropped by the punt.
    assert e.get(("ip-punt", "punted"), 0) >= 100 + 4 + 2 * 20, e
    assert not [k for k, v in e.items() if v and k[0] == "ip-punt" and k[1] not in ("punted", "host-unresolved")], e
    # The host's replies, its TCP sender's segments and its TTL probes went as the gateway's.
    assert e.get(("ip-punt-inject", "injected"), 0) >= 100 + 4 + 2 * 20, e
    assert gw.stop()[0] == 0


def test_a_reload_changes_the_punted_ports_in_place(lab, vecgate, tmp_path):
    a, s, gw = punt_lab(lab, vecgate, tmp_path)
    gw.cfg.write_text(gw.cfg.read_text().replace("udp_ports = [500, 5000]", "udp_ports = [5000]"))
    r = gw.ctl("reload")["data"]
    assert [(c["action"], c["object"], c["name"]) for c in r["changes"]] == [("replaced", "setting", "punt to host")], r
    echo = lab.peer(s, "udp-echo", 5000, 20)
    ping = lab.peer_run(a, "udp-ping", "198.18.3.2", 5000, 20, 200)
    assert ping["matched"] == 20 and result(echo)["echoed"] == 20, (ping, gw.errors())
    # 500 is no longer the host's: vecgate answers it with port unreachable.
    before = gw.errors().get(("ip4-local", "port-unreachable"), 0)
    lab.run(a, "python3", "-c", "import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('198.18.3.2', 500))")
    assert unreachable_reaches(gw, before + 1) == before + 1
    # The section gone: nothing is punted.
    gw.cfg.write_text(gw.cfg.read_text().split("[punt]")[0])
    r = gw.ctl("reload")["data"]
    assert [(c["action"], c["name"]) for c in r["changes"]] == [("replaced", "punt off")], r
    lab.run(a, "python3", "-c", "import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('198.18.3.2', 5000))")
    assert unreachable_reaches(gw, before + 2) == before + 2
    assert gw.stop()[0] == 0


SECOND_HOST = """
[[interface]]
name = "host2"
type = "tap"
host_if = "vg-host2"
mac = "02:00:00:00:3a:03"
addresses = ["198.18.251.1/30", "2001:db8:251::1/64"]
"""


def punted_to(lab, a, hosts, n=20):
    """Send n datagrams to the gateway's port 500 over each family from A, with an echo
    daemon on every host in `hosts` (name -> namespace); returns the echoes A matched and
    how many each host echoed, by family."""
    got = {}
    for dst, v6 in (("198.18.3.2", []), ("2001:db8:3::2", ["--v6"])):
        echoes = {name: lab.peer(ns, "udp-echo", 500, n, *v6, "--timeout", "3") for name, ns in hosts.items()}
        ping = lab.peer_run(a, "udp-ping", dst, 500, n, 200)
        got[dst] = (ping["matched"], {name: result(e)["echoed"] for name, e in echoes.items()})
    return got


def two_host_lab(lab, vecgate, tmp_path, workers, punt=True):
    """punt_lab's A, gateway and S, and S2 behind a second tap ("host2"); `punt`: the
    gateway starts with [punt] toward S, else with none."""
    a, g, s, s2 = lab.ns("a"), lab.dataplane_ns("gw"), lab.ns("s"), lab.ns("s2")
    lab.veth(a, "a0", g, "g0")
    lab.run(a, "ip", "addr", "add", "198.18.3.1/24", "dev", "a0")
    lab.run(a, "ip", "addr", "add", "2001:db8:3::1/64", "dev", "a0", "nodad")
    links, section = CONFIG.split("[punt]")
    text = f"[dataplane]\nworkers = {workers}\n" + links + SECOND_HOST + ("\n[punt]" + section if punt else "")
    gw = Vecgate(lab, vecgate, g, text, tmp_path, split_dataplane=True)
    lab.run(g, "ip", "link", "set", "vg-host", "netns", s)
    lab.run(s, "ip", "link", "set", "vg-host", "up")
    lab.run(s, "ip", "addr", "add", "198.18.250.2/30", "dev", "vg-host")
    lab.run(s, "ip", "addr", "add", "2001:db8:250::2/64", "dev", "vg-host", "nodad")
    lab.run(s, "ip", "addr", "add", "198.18.3.2/32", "dev", "lo")
    lab.run(s, "ip", "addr", "add", "2001:db8:3::2/128", "dev", "lo")
    lab.run(s, "ip", "route", "add", "198.18.3.0/24", "via", "198.18.250.1", "src", "198.18.3.2")
    lab.run(s, "ip", "-6", "route", "add", "2001:db8:3::/64", "via", "2001:db8:250::1", "src", "2001:db8:3::2")
    for dst in ("198.18.250.1", "2001:db8:250::1"):
        lab.run(s, "ping", "-c", "2", "-i", "0.2", "-W", "1", dst, check=False)
    host_stack(lab, g, s2, "vg-host2", 251)
    for dst in ("198.18.3.2", "2001:db8:3::2"):
        lab.run(a, "ping", "-c", "2", "-i", "0.2", "-W", "1", dst, check=False)
    return a, s, s2, gw


@pytest.mark.parametrize("workers", [1, 2])
def test_a_reload_moves_the_punt_link_to_another_tap(lab, vecgate, tmp_path, workers):
    """`[punt] interface` changed by a reload: host-bound packets reach the new link's
    host and no longer the old one's, the new host's replies are sent as the gateway's
    (ip-punt-inject on its port), the old host's no longer are; the devices stay open and
    no counter starts again. Then back, and off."""
    a, s, s2, gw = two_host_lab(lab, vecgate, tmp_path, workers)
    hosts = {"s": s, "s2": s2}

    got = punted_to(lab, a, hosts)
    assert all(v == (20, {"s": 20, "s2": 0}) for v in got.values()), (got, gw.errors())
    before_e, before_i = gw.errors(), gw.interfaces()
    assert before_e.get(("ip-punt-inject", "injected"), 0) >= 40, before_e

    # Move it to host2.
    moved = gw.cfg.read_text().replace('interface = "host"\nhost4 = "198.18.250.2"\nhost6 = "2001:db8:250::2"',
                                       'interface = "host2"\nhost4 = "198.18.251.2"\nhost6 = "2001:db8:251::2"')
    assert moved != gw.cfg.read_text()
    gw.cfg.write_text(moved)
    r = gw.ctl("reload")["data"]
    assert [(c["action"], c["object"], c["name"]) for c in r["changes"]] == [("replaced", "setting", "punt to host2")], r
    got = punted_to(lab, a, hosts)
    assert all(v == (20, {"s": 0, "s2": 20}) for v in got.values()), (got, gw.errors())
    after_e, after_i = gw.errors(), gw.interfaces()
    # S2's replies went by ip-punt-inject (the gateway's own); counters went on from where
    # they were on every link: nothing was reopened or cleared.
    assert after_e[("ip-punt-inject", "injected")] >= before_e[("ip-punt-inject", "injected")] + 40, after_e
    assert after_e[("ip-punt", "punted")] >= before_e[("ip-punt", "punted")] + 40, after_e
    for name in ("a", "host", "host2"):
        for k in ("rx_packets", "tx_packets"):
            assert after_i[name][k] >= before_i[name][k], (name, k, before_i[name], after_i[name])
    assert after_i["a"]["rx_packets"] >= before_i["a"]["rx_packets"] + 40
    assert after_i["host2"]["tx_packets"] >= before_i["host2"]["tx_packets"] + 40
    # The old host's packets from the gateway's address are no longer the gateway's own.
    injected = after_e[("ip-punt-inject", "injected")]
    lab.run(s, "python3", "-c", "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
            "s.bind(('198.18.3.2', 0)); [s.sendto(b'x', ('198.18.3.1', 9)) for _ in range(5)]")
    time.sleep(0.5)
    assert gw.errors()[("ip-punt-inject", "injected")] == injected, gw.errors()

    # Back to host, then off: nothing reaches either host.
    gw.cfg.write_text(moved.replace('interface = "host2"\nhost4 = "198.18.251.2"\nhost6 = "2001:db8:251::2"',
                                    'interface = "host"\nhost4 = "198.18.250.2"\nhost6 = "2001:db8:250::2"'))
    r = gw.ctl("reload")["data"]
    assert [(c["action"], c["name"]) for c in r["changes"]] == [("replaced", "punt to host")], r
    got = punted_to(lab, a, hosts)
    assert all(v == (20, {"s": 20, "s2": 0}) for v in got.values()), (got, gw.errors())
    gw.cfg.write_text(gw.cfg.read_text().split("[punt]")[0])
    r = gw.ctl("reload")["data"]
    assert [(c["action"], c["name"]) for c in r["changes"]] == [("replaced", "punt off")], r
    got = punted_to(lab, a, hosts, n=5)
    assert all(v == (0, {"s": 0, "s2": 0}) for v in got.values()), (got, gw.errors())
    assert gw.stop()[0] == 0


@pytest.mark.parametrize("workers", [1, 2])
def test_a_reload_turns_punt_on_where_none_was_at_start_up(lab, vecgate, tmp_path, workers):
    """A gateway started without [punt]: a reload adding it makes host2 the punt link
    (its port pointed at ip-punt-inject, which every graph has): A's datagrams reach S2,
    S2's replies go as the gateway's own, and S hears nothing."""
    a, s, s2, gw = two_host_lab(lab, vecgate, tmp_path, workers, punt=False)
    hosts = {"s": s, "s2": s2}
    got = punted_to(lab, a, hosts, n=5)
    assert all(v == (0, {"s": 0, "s2": 0}) for v in got.values()), (got, gw.errors())
    gw.cfg.write_text(gw.cfg.read_text() + '\n[punt]\ninterface = "host2"\nhost4 = "198.18.251.2"\nhost6 = "2001:db8:251::2"\nudp_ports = [500]\n')
    r = gw.ctl("reload")["data"]
    assert [(c["action"], c["name"]) for c in r["changes"]] == [("replaced", "punt to host2")], r
    got = punted_to(lab, a, hosts)
    assert all(v == (20, {"s": 0, "s2": 20}) for v in got.values()), (got, gw.errors())
    assert gw.errors().get(("ip-punt-inject", "injected"), 0) >= 40, gw.errors()
    assert gw.stop()[0] == 0


def tcp_connects(lab, ns, dst, port):
    """Whether a TCP connection from `ns` to dst:port is accepted within 3 s."""
    probe = (f"import socket\ntry:\n    socket.create_connection(('{dst}', {port}), timeout=3).close(); print('connected')\n"
             f"except OSError as e:\n    print('failed', type(e).__name__)")
    return lab.run(ns, "python3", "-c", probe, timeout=20).stdout.strip() == "connected"


def test_a_port_added_at_run_time_reaches_a_tcp_server_on_the_host(lab, vecgate, tmp_path):
    """`vecgate ctl punt port add tcp 8022`: A's connections to the gateway's address on
    8022 reach a TCP server on the host (S) through the tap, both families, where before
    the gateway answered them itself; a reload that changes [punt] keeps the port; once
    deleted the gateway answers again."""
    a, s, gw = punt_lab(lab, vecgate, tmp_path)
    assert not tcp_connects(lab, a, "198.18.3.2", 8022), gw.errors()
    r = gw.ctl("punt", "port", "add", "tcp", "8022", "owner", "test")
    assert r["ok"] and r["data"]["changed"], r
    rows = {(p["protocol"], p["port"]): (p["file"], p.get("owner")) for p in gw.ctl("show", "punt")["data"]["ports"]}
    assert rows == {("udp", 500): (True, None), ("udp", 5000): (True, None), ("tcp", 179): (True, None), ("tcp", 8022): (False, "test")}, rows
    assert "tcp/8022     api (owner test)" in gw.ctl("show", "punt", json_out=False)
    metrics = gw.ctl("show", "metrics", json_out=False)
    assert 'vecgate_punt_port{protocol="tcp",port="8022",source="api",owner="test"} 1' in metrics, metrics
    assert 'vecgate_punt_port{protocol="tcp",port="179",source="file",owner=""} 1' in metrics, metrics
    for dst, v6 in (("198.18.3.2", []), ("2001:db8:3::2", ["--v6"])):
        recv = lab.peer(s, "tcp-recv", 8022, *v6)
        sent = lab.peer_run(a, "tcp-send", dst, 8022, 500_000)
        assert same_stream(sent, result(recv)), (dst, sent, gw.errors())
    # A reload changing [punt]'s own ports keeps the added one.
    gw.cfg.write_text(gw.cfg.read_text().replace("udp_ports = [500, 5000]", "udp_ports = [5000]"))
    r = gw.ctl("reload")["data"]
    assert [(c["action"], c["object"], c["name"]) for c in r["changes"]] == [("replaced", "setting", "punt to host")], r
    recv = lab.peer(s, "tcp-recv", 8022)
    sent = lab.peer_run(a, "tcp-send", "198.18.3.2", 8022, 500_000)
    assert same_stream(sent, result(recv)), (sent, gw.errors())
    # Deleted: the gateway answers again, S hears nothing (its server listens all the same).
    assert gw.ctl("punt", "port", "del", "tcp", "8022", "owner", "test")["ok"]
    server = lab.spawn(s, "python3", "-c", "import socket, time; s = socket.create_server(('0.0.0.0', 8022)); print('READY', flush=True); time.sleep(8)")
    try:
        assert server.stdout.readline().strip() == "READY"
        assert not tcp_connects(lab, a, "198.18.3.2", 8022), gw.errors()
    finally:
        server.kill()
        server.wait()
    assert "tcp/8022" not in gw.ctl("show", "punt", json_out=False)
    assert gw.stop()[0] == 0
