"""vecgate as a router between two Linux hosts in network namespaces, over af_packet
interfaces on veth pairs: host A (198.18.0.2, 2001:db8::2) ⇄ vecgate ⇄ host B
(198.18.1.2, 2001:db8:1::2). The hosts' own kernels are the peers: they resolve
vecgate by ARP/ND, and their TCP stacks checksum every byte of a 10 MB transfer."""
import os
import subprocess
import time

import pytest

from netns import Lab, Vecgate, result, router_config, same_stream

TRANSFER = 10 * 1024 * 1024


def packet_config(ring):
    return router_config("af_packet", f'rx_ring = "{ring}"\n' if ring else "")


@pytest.mark.parametrize("ring", ["v3", "v2"])
def test_router_udp_and_tcp_both_families(lab, vecgate, tmp_path, ring):
    a, g, b = lab.two_hosts()
    gw = Vecgate(lab, vecgate, g, packet_config(ring), tmp_path)
    lab.warm_up(a)
    lab.udp_echoes_both_families(a, b, 7001, 200, 1200)
    lab.tcp_both_families(a, b, 7003, TRANSFER)
    ifs = gw.interfaces()
    assert ifs["a"]["rx_bytes"] >= 2 * TRANSFER
    assert ifs["b"]["tx_bytes"] >= 2 * TRANSFER
    # The senders' TSO frames crossed whole (virtio-net headers): far fewer frames than
    # 1500-byte segments, so frames much larger than the link MTU went through.
    assert ifs["a"]["rx_bytes"] / ifs["a"]["rx_packets"] > 3000, ifs["a"]
    errs = gw.errors()
    assert not any(k[1] in ("truncated", "to-fragment", "bad-checksum") for k in errs), errs
    assert all(v == 0 for k, v in ifs["a"]["device"] if k.startswith("rx-") and k != "rx-kernel-drops"), ifs["a"]["device"]
    code, out, _ = gw.stop()
    assert code == 0 and "final:" in out


def test_the_first_packet_to_an_unknown_neighbour_arrives(lab, vecgate, tmp_path):
    """vecgate has never heard from host B: a single ping from A, each family, is
    answered. The echo request waits in `ip-glean` while vecgate asks for B's MAC; B's
    kernel answers, the control plane publishes B, the request goes on. (Before the hold,
    the request itself became the ARP request / NS, and a lone ping was lost.)"""
    a, g, b = lab.two_hosts()
    gw = Vecgate(lab, vecgate, g, packet_config(None), tmp_path)
    for dst in ("198.18.1.2", "2001:db8:1::2"):
        r = lab.run(a, "ping", "-c", "1", "-W", "5", dst, check=False)
        assert r.returncode == 0, (dst, r.stdout, gw.errors())
    errs = gw.errors()
    held = errs.get(("ip-glean", "held"), 0)
    released = errs.get(("ip-glean-release", "released"), 0) + errs.get(("ip-glean", "released"), 0)
    # At least the two echo requests (A's kernel held its own for vecgate's MAC; vecgate,
    # answering A's ARP/ND, learned A before any reply came back).
    assert held >= 2 and released == held, errs
    assert errs.get(("ip-glean", "arp-request-sent"), 0) >= 1 and errs.get(("ip-glean", "ns-sent"), 0) >= 1, errs
    assert not [k for k, v in errs.items() if v and k[1] in ("hold-expired", "neighbour-unresolved", "hold-full")], errs
    code, _, _ = gw.stop()
    assert code == 0


def test_show_neighbours_lists_the_ones_being_solicited_with_their_held_packets(lab, vecgate, tmp_path):
    """Two datagrams from A to an address on B's link that nobody answers for: `show
    neighbours` lists it as incomplete (no MAC yet) with the two packets `ip-glean` holds
    and how long they have waited, beside A and B, learned. When the hold times out (3 s)
    the row is gone and both packets are dropped by name."""
    a, g, b = lab.two_hosts()
    gw = Vecgate(lab, vecgate, g, packet_config(None), tmp_path)
    lab.warm_up(a)
    send = "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); [s.sendto(b'x', ('198.18.1.77', 9)) for _ in range(2)]"
    lab.run(a, "python3", "-c", send)
    rows = {r["ip"]: r for r in gw.ctl("show", "neighbours")["data"]}
    ghost = rows.get("198.18.1.77")
    assert ghost and (ghost["incomplete"], ghost["mac"], ghost["interface"], ghost["held"]) == (True, "", "b", 2), rows
    assert 0 <= ghost["waiting_ms"] < 3000, ghost
    assert all(not rows[ip]["incomplete"] and rows[ip]["mac"] for ip in ("198.18.0.2", "198.18.1.2")), rows
    assert "incomplete, 2 packets held" in gw.ctl("show", "neighbours", json_out=False)
    # Dropped at the next look at the hold: the gateway's own every 0.5 s, or a packet to
    # glean (the hosts' own traffic may come first; the idle default gateway shows the look
    # costs nothing while nothing is held, test_ctl.py).
    expired = lambda e: e.get(("ip-glean", "hold-expired"), 0) + e.get(("ip-glean-release", "hold-expired"), 0)
    for _ in range(60):
        if expired(gw.errors()) >= 2:
            break
        time.sleep(0.1)
    assert expired(gw.errors()) == 2, gw.errors()
    assert "198.18.1.77" not in {r["ip"] for r in gw.ctl("show", "neighbours")["data"]}
    code, _, _ = gw.stop()
    assert code == 0


def test_link_down_and_interface_deleted_are_survived(lab, vecgate, tmp_path):
    a, g, b = lab.two_hosts()
    gw = Vecgate(lab, vecgate, g, packet_config(None), tmp_path)
    lab.warm_up(a)
    # Link down on B's side: traffic towards it fails and is counted, nothing crashes.
    lab.run(g, "ip", "link", "set", "b1", "down")
    echo = lab.peer(b, "udp-echo", 7010, 50)
    lab.peer_run(a, "udp-ping", "198.18.1.2", 7010, 20, 200)
    time.sleep(1.2)
    dev = dict(gw.interfaces()["b"]["device"])
    assert dev.get("link-down-events", 0) >= 1 and dev.get("tx-link-down", 0) >= 1, dev
    # Back up: the same flow works again.
    lab.run(g, "ip", "link", "set", "b1", "up")
    time.sleep(0.5)
    ping = lab.peer_run(a, "udp-ping", "198.18.1.2", 7010, 20, 200)
    assert ping["matched"] >= 18, ping
    # Deleted under us: counted, and vecgate keeps serving the other side.
    lab.run(g, "ip", "link", "del", "b1")
    time.sleep(1.2)
    dev = dict(gw.interfaces()["b"]["device"])
    assert dev.get("interface-gone", 0) >= 1, dev
    r = lab.run(a, "ping", "-c", "2", "-i", "0.2", "-W", "1", "198.18.0.1", check=False)
    assert r.returncode == 0, r.stdout
    echo.kill()
    code, out, _ = gw.stop()
    assert code == 0


def test_tap_leg_host_stack_as_neighbour(lab, vecgate, tmp_path):
    """vecgate creates a TAP device; its kernel side is moved into host B's namespace,
    so B's own stack is vecgate's neighbour on that link. TCP both ways (the TAP's TSO
    frames cross whole in each direction), UDP, both families; on SIGTERM the TAP device
    disappears with vecgate."""
    a, g, b = lab.ns("a"), lab.dataplane_ns("gw"), lab.ns("b")
    lab.veth(a, "a0", g, "a1")
    config = packet_config(None).replace('type = "af_packet"\nhost_if = "b1"', 'type = "tap"\nhost_if = "vgtap0"')
    assert 'type = "tap"' in config
    gw = Vecgate(lab, vecgate, g, config, tmp_path)
    lab.run(g, "ip", "link", "set", "vgtap0", "netns", b)
    lab.run(b, "ip", "link", "set", "vgtap0", "up")
    lab.host(a, "a0", "198.18.0.2/24", "2001:db8::2/64", "198.18.0.1", "2001:db8::1")
    lab.host(b, "vgtap0", "198.18.1.2/24", "2001:db8:1::2/64", "198.18.1.1", "2001:db8:1::1")
    lab.warm_up(a)
    lab.udp_echoes_both_families(a, b, 7201, 100, 1000)
    for src, dst_ns, dst, flag, port in ((a, b, "198.18.1.2", "", 7203), (b, a, "2001:db8::2", "--v6", 7204)):
        recv = lab.peer(dst_ns, "tcp-recv", port, *([flag] if flag else []))
        sent = lab.peer_run(src, "tcp-send", dst, port, TRANSFER)
        got = result(recv)
        assert same_stream(sent, got) and got["bytes"] == TRANSFER, (sent, got)
    t = gw.interfaces()["b"]
    assert t["kind"] == "tap"
    # TSO frames from B's stack arrived whole over the TAP (virtio-net header).
    assert t["rx_bytes"] / t["rx_packets"] > 3000, t
    assert not [v for k, v in t["device"] if v], t["device"]
    code, _, _ = gw.stop()
    assert code == 0
    time.sleep(0.3)
    gone = lab.run(b, "ip", "link", "show", "vgtap0", check=False)
    assert gone.returncode != 0, "the TAP device outlived vecgate"


def test_two_workers_share_the_load_and_keep_every_flow_intact(lab, vecgate, tmp_path):
    """workers = 2: each worker has its own socket per interface in a fanout group, the
    kernel hashes each flow to one of them. Twelve TCP transfers in parallel arrive intact
    (in-order delivery per flow keeps TCP from retransmitting storms), and both workers
    carried packets. Twelve, not six: the hash puts all of six flows on one worker in one
    run of 32 (it happened), all of twelve in one of 2,048."""
    a, g, b = lab.two_hosts()
    gw = Vecgate(lab, vecgate, g, "[dataplane]\nworkers = 2\n" + packet_config(None), tmp_path, split_dataplane=True)
    lab.warm_up(a)
    lab.tcp_transfers_at_once(a, b, 7300, 12)
    rt = gw.ctl("show", "runtime")["data"]
    per_worker = dict(rt["worker_rx"])
    assert sorted(per_worker) == [0, 1], per_worker
    assert all(n > 100 for n in per_worker.values()), per_worker
    code, _, _ = gw.stop()
    assert code == 0


# argv[1]: the destination MAC; 64 UDP flows (source ports 20000-20063) from a source
# with no route back (198.18.9.9) to host B.
SEND_FLOWS = """
import sys
from scapy.all import Ether, IP, UDP, Raw, sendp
sendp([Ether(dst=sys.argv[1]) / IP(src="198.18.9.9", dst="198.18.1.2") / UDP(sport=20000 + k, dport=7000) / Raw(b"drop")
       for k in range(64)], iface="a0", verbose=False)
"""


def test_two_workers_capture_their_drops_into_one_file(lab, vecgate, tmp_path):
    """workers = 2 (af_packet fanout): `pcap trace drop` takes what both workers drop
    into one pcapng file. Host A sends 64 flows from a source with no route back through
    a link with loose uRPF: both workers receive some, each datagram is dropped
    (`ip4-source-check: no-route`) and is in the one file, as tshark reads it."""
    a, g, b = lab.two_hosts()
    config = packet_config(None).replace('host_if = "a1"\n', 'host_if = "a1"\nurpf = "loose"\n', 1)
    gw = Vecgate(lab, vecgate, g, "[dataplane]\nworkers = 2\n" + config, tmp_path, split_dataplane=True)
    lab.warm_up(a)
    f = tmp_path / "drops.pcapng"
    out = gw.ctl("pcap", "trace", "drop", str(f), "1000", "node", "ip4-source-check", json_out=False)
    assert f"into {f}" in out and "per worker" not in out, out
    before = dict(gw.ctl("show", "runtime")["data"]["worker_rx"])
    lab.run(a, "python3", "-c", SEND_FLOWS, "02:00:00:00:00:0a")
    for _ in range(100):
        if gw.errors().get(("ip4-source-check", "no-route"), 0) >= 64:
            break
        time.sleep(0.1)
    assert gw.errors().get(("ip4-source-check", "no-route"), 0) == 64, gw.errors()
    after = dict(gw.ctl("show", "runtime")["data"]["worker_rx"])
    assert all(after[w] > before.get(w, 0) for w in (0, 1)), (before, after)
    gw.ctl("pcap", "trace", "drop", "off", json_out=False)  # the file closed whole
    t = subprocess.run(["tshark", "-r", str(f), "-T", "fields", "-E", "separator=|", "-e", "frame.comment", "-e", "udp.srcport"],
                       capture_output=True, text=True, timeout=30)
    recs = [l.split("|") for l in t.stdout.splitlines() if l.strip()]
    assert {c for c, _ in recs} == {"ip4-source-check: no-route, received on a"}, recs[:3]
    assert sorted(int(p) for _, p in recs) == list(range(20000, 20064)), recs
    assert not list(tmp_path.glob("drops.pcapng.*")), "one file, not one per worker"
    code, _, _ = gw.stop()
    assert code == 0


def test_route_churn_under_live_traffic_loses_nothing(lab, vecgate, tmp_path):
    """While UDP flows between the hosts, the control plane adds and deletes routes
    (each change recompiles and publishes the FIB to the worker): every datagram and
    every echo arrives."""
    import threading
    a, g, b = lab.two_hosts()
    gw = Vecgate(lab, vecgate, g, packet_config(None), tmp_path)
    lab.warm_up(a)
    changes = []

    def churn():
        for k in range(60):
            p = f"198.19.{k}.0/24"
            changes.append(gw.ctl("ip", "route", "add", p, "via", "198.18.1.2", json_out=False))
            changes.append(gw.ctl("ip", "route", "del", p, json_out=False))

    echo = lab.peer(b, "udp-echo", 7400, 400)
    t = threading.Thread(target=churn)
    t.start()
    ping = lab.peer_run(a, "udp-ping", "198.18.1.2", 7400, 400, 600, timeout=90)
    t.join(60)
    assert len(changes) == 120
    assert ping["matched"] == 400 and ping["corrupt"] == 0, ping
    assert result(echo)["echoed"] == 400
    fib = gw.ctl("show", "ip", "fib", json_out=False)
    assert "198.19." not in fib, "every churned route is gone again"
    code, _, _ = gw.stop()
    assert code == 0


def test_link_down_and_up_are_logged(lab, vecgate, tmp_path):
    """A host link going down and coming back is a state change: one log line each
    (from the check that counts link-down-events), with the host interface's name."""
    a, g, b = lab.two_hosts()
    gw = Vecgate(lab, vecgate, g, packet_config(None), tmp_path)
    fd = gw.proc.stderr.fileno()
    os.set_blocking(fd, False)
    log, partial = [], b""

    def wait_for(text):
        nonlocal partial
        deadline = time.time() + 20
        while not any(text in l for l in log):
            assert time.time() < deadline and gw.proc.poll() is None, (text, log)
            time.sleep(0.1)
            try:
                partial += os.read(fd, 65536)
            except BlockingIOError:
                continue
            *lines, partial = partial.split(b"\n")
            log.extend(l.decode() for l in lines)

    lab.run(g, "ip", "link", "set", "b1", "down")
    wait_for("link down host_if=b1")
    lab.run(g, "ip", "link", "set", "b1", "up")
    wait_for("link up host_if=b1")
    events = dict(gw.interfaces()["b"]["device"]).get("link-down-events", 0)
    assert events >= 1
    os.set_blocking(fd, True)
    code, _, err = gw.stop()
    assert code == 0
    log.extend((partial.decode() + (err or "")).splitlines())
    down = [l for l in log if "link down host_if=b1" in l]
    up = [l for l in log if "link up host_if=b1" in l]
    assert log.index(down[0]) < log.index(up[0]) and all("WARN" in l for l in down), log
    # a1 may be logged coming up at start (its carrier can follow vecgate's first read)
    # but never down: it did not go down.
    assert not any("link down host_if=a1" in l for l in log), log
    # One line per counted transition: as many down lines as link-down-events.
    assert len(down) == events and len(up) == events, (events, log)


# Sources host A claims, each in its own datagram to host B: its own, on B's subnet (the
# route back leaves by the other link), unroutable, and the router's own on either link.
SPOOFED = ["198.18.0.2", "198.18.1.77", "198.18.9.9", "198.18.1.1", "198.18.0.1"]

SEND_SPOOFED = """
import sys
from scapy.all import Ether, IP, UDP, Raw, sendp
dst_mac = sys.argv[1]
pkts = [Ether(dst=dst_mac) / IP(src=s, dst="198.18.1.2", ttl=64) / UDP(sport=4000, dport=7020) / Raw(s.encode())
        for s in sys.argv[2:]]
sendp(pkts, iface="a0", verbose=False)
"""


def arrivals(lab, a, b, dst_mac):
    """The datagrams of SPOOFED that reach host B through the router on A's link."""
    recv = lab.peer(b, "udp-collect", 7020, 60, stdin=subprocess.PIPE)
    lab.run(a, "python3", "-c", SEND_SPOOFED, dst_mac, *SPOOFED)
    time.sleep(0.5)  # what was sent is through the router, or dropped
    # result() closes the collector's stdin, which ends its collection
    return sorted(p for _, p in result(recv)["got"])


def linux_router(lab, mode):
    """Host A ⇄ a Linux router with `rp_filter` = `mode` (1 strict, 2 loose) on both
    links ⇄ host B, addressed as vecgate is in `router_config`."""
    a, r, b = lab.ns("a"), lab.ns("r"), lab.ns("b")
    lab.veth(a, "a0", r, "a1")
    lab.veth(b, "b0", r, "b1")
    lab.host(a, "a0", "198.18.0.2/24", "2001:db8::2/64", "198.18.0.1", "2001:db8::1")
    lab.host(b, "b0", "198.18.1.2/24", "2001:db8:1::2/64", "198.18.1.1", "2001:db8:1::1")
    for addr, dev in (("198.18.0.1/24", "a1"), ("198.18.1.1/24", "b1")):
        lab.run(r, "ip", "addr", "add", addr, "dev", dev)
    lab.run(r, "sysctl", "-qw", "net.ipv4.ip_forward=1")
    for dev in ("all", "default", "a1", "b1"):
        lab.run(r, "sysctl", "-qw", f"net.ipv4.conf.{dev}.rp_filter={mode}")
    for dev in ("all", "default", "b0"):
        lab.run(b, "sysctl", "-qw", f"net.ipv4.conf.{dev}.rp_filter=0")
    mac = lab.run(r, "cat", "/sys/class/net/a1/address").stdout.strip()
    return a, b, mac


@pytest.mark.parametrize("mode,rp_filter", [("strict", 1), ("loose", 2)])
def test_urpf_agrees_with_linux_rp_filter(lab, vecgate, tmp_path, mode, rp_filter):
    """The same spoofed datagrams from host A to host B, through a Linux router with
    `rp_filter` (1 strict, 2 loose; its own addresses as sources are martians either
    way) and through vecgate with `urpf` on A's link: the same ones arrive. Strict lets
    only A's own address through; loose lets B's subnet through too."""
    a, b, mac = linux_router(lab, rp_filter)
    lab.run(a, "ping", "-c", "2", "-i", "0.2", "-W", "1", "198.18.1.2", check=False)
    linux = arrivals(lab, a, b, mac)
    lab.close()

    lab2 = Lab()
    try:
        a, g, b = lab2.two_hosts()
        config = packet_config(None).replace('host_if = "a1"\n', f'host_if = "a1"\nurpf = "{mode}"\n', 1)
        gw = Vecgate(lab2, vecgate, g, config, tmp_path)
        lab2.warm_up(a)
        ours = arrivals(lab2, a, b, "02:00:00:00:00:0a")
        errs = gw.errors()
        code, _, _ = gw.stop()
    finally:
        lab2.close()
    want = {"strict": ["198.18.0.2"], "loose": ["198.18.0.2", "198.18.1.77"]}[mode]
    assert linux == want, (mode, linux)
    assert ours == linux, (mode, ours, errs)
    dropped = {k[1]: v for k, v in errs.items() if k[0] == "ip4-source-check" and v}
    assert dropped == ({"wrong-interface": 1, "no-route": 1, "own-address": 2} if mode == "strict"
                       else {"no-route": 1, "own-address": 2}), errs
    assert code == 0
