"""Interfaces added and removed while vecgate runs (`ctl create interface`, `ctl delete
interface`): a router that starts with one af_packet interface gains a second one on a
veth pair and a TAP device, forwards between Linux hosts through them (their kernels
are the peers: ARP/ND, ICMP, TCP checksums), loses one with the routes through it, and
gets it back under the same index. With one worker and with two (an af_packet socket
per worker in a fanout group; the TAP device on worker 0, the other sending to it)."""
import subprocess

import pytest

from netns import Vecgate, result, same_stream

START = """\
[dataplane]
workers = {workers}

[[interface]]
name = "a"
type = "af_packet"
host_if = "a1"
mac = "02:00:00:00:00:0a"
addresses = ["198.18.0.1/24", "2001:db8::1/64"]
"""

B_WORDS = ["create", "interface", "b", "af_packet", "host-if", "b1", "mac", "02:00:00:00:00:0b",
           "address", "198.18.1.1/24", "address", "2001:db8:1::1/64"]


def ctl_fails(gw, *words, code=2):
    """A refused request (status 2; 1: the words do not parse) and the error text."""
    r = subprocess.run([gw.bin, "ctl", "--socket", gw.sock, *words], capture_output=True, text=True, timeout=10)
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    return r.stderr


def udp_round_trips(lab, src, dst, port, flag=None, count=100):
    echo = lab.peer(dst[0], "udp-echo", port, count, *([flag] if flag else []))
    ping = lab.peer_run(src, "udp-ping", dst[1], port, count, 800)
    result(echo)
    return ping["matched"]


def fib_prefixes(gw):
    return {e["prefix"] for e in gw.ctl("show", "ip", "fib", "limit", "0")["data"]}


@pytest.mark.parametrize("workers", [1, 2])
def test_interfaces_added_and_removed_while_forwarding(lab, vecgate, tmp_path, workers):
    a, g, b = lab.two_hosts()
    gw = Vecgate(lab, vecgate, g, START.format(workers=workers), tmp_path, split_dataplane=True)
    assert set(gw.interfaces()) == {"a"}

    # b appears: its subnets are routed, and hosts on both sides talk through it.
    r = gw.ctl(*B_WORDS)["data"]
    assert r["name"] == "b" and r["kind"] == "af_packet"
    b_index = r["index"]
    assert "198.18.1.0/24" in fib_prefixes(gw)
    lab.run(a, "ping", "-c", "3", "-i", "0.2", "-W", "1", "198.18.1.2", check=False)
    lab.run(a, "ping", "-c", "3", "-i", "0.2", "-W", "1", "2001:db8:1::2", check=False)
    assert udp_round_trips(lab, a, (b, "198.18.1.2"), 7101) == 100
    assert udp_round_trips(lab, a, (b, "2001:db8:1::2"), 7102, "--v6") == 100
    recv = lab.peer(b, "tcp-recv", 7103)
    sent = lab.peer_run(a, "tcp-send", "198.18.1.2", 7103, 2 * 1024 * 1024)
    got = result(recv)
    assert same_stream(sent, got), (sent, got)
    # A route through it, to be taken along when it goes.
    gw.ctl("ip", "route", "add", "198.19.40.0/24", "via", "198.18.1.2")

    # A TAP device: the gateway's own kernel on the far side (a host routed via it).
    r = gw.ctl("create", "interface", "t", "tap", "host-if", "vgtap0", "mac", "02:00:00:00:00:0c", "address", "198.18.4.1/24")["data"]
    assert r["kind"] == "tap"
    lab.run(g, "ip", "addr", "add", "198.18.4.2/24", "dev", "vgtap0")
    lab.run(g, "ip", "link", "set", "vgtap0", "up")
    lab.run(g, "ip", "route", "add", "198.18.0.0/24", "via", "198.18.4.1", "dev", "vgtap0")
    # The first packet resolves the far side (vecgate drops it meanwhile, as VPP does).
    lab.run(a, "ping", "-c", "2", "-i", "0.2", "-W", "1", "198.18.4.2", check=False)
    ping = lab.run(a, "ping", "-c", "5", "-i", "0.2", "-W", "2", "198.18.4.2", check=False)
    assert ping.returncode == 0 and " 0% packet loss" in ping.stdout, ping.stdout
    ifs = gw.interfaces()
    assert ifs["t"]["rx_packets"] >= 5 and ifs["t"]["tx_packets"] >= 5, ifs["t"]

    # Requests that cannot be met change nothing and say why.
    assert "start-up" in ctl_fails(gw, "create", "interface", "p", "pg", code=1)
    err = ctl_fails(gw, "create", "interface", "b", "null", "mac", "02:00:00:00:00:0d")
    assert '"b" used twice' in err, err
    err = ctl_fails(gw, "create", "interface", "x", "null", "mac", "02:00:00:00:00:0d", "address", "198.18.1.9/25")
    assert "overlaps" in err and "of b" in err, err
    err = ctl_fails(gw, "create", "interface", "x", "af_packet", "host-if", "nosuchif0")
    assert "host_if" in err and "nosuchif0" in err, err
    err = ctl_fails(gw, "create", "interface", "x", "null", "mtu", "10", "mac", "02:00:00:00:00:0d")
    assert "mtu" in err, err
    # A host interface a vecgate interface has already (a's, b's, or the TAP vecgate made):
    # a second socket would receive, and forward, every frame again.
    for taken, owner in [("a1", "a"), ("b1", "b"), ("vgtap0", "t")]:
        err = ctl_fails(gw, "create", "interface", "x", "af_packet", "host-if", taken, "mac", "02:00:00:00:00:0d")
        assert f'"{taken}" is already {owner}\'s host interface' in err, err
    assert set(gw.interfaces()) == {"a", "b", "t"}

    # b goes: the route through it and its subnets with it; a then cannot reach b.
    r = gw.ctl("delete", "interface", "b")["data"]
    assert r["index"] == b_index
    assert r["routes"] == ["198.19.40.0/24 via 198.18.1.2"], r
    assert "198.18.1.2" in r["neighbours"], r
    assert set(gw.interfaces()) == {"a", "t"}
    prefixes = fib_prefixes(gw)
    assert "198.18.1.0/24" not in prefixes and "198.19.40.0/24" not in prefixes, prefixes
    ping = lab.run(a, "ping", "-c", "2", "-i", "0.2", "-W", "1", "198.18.1.2", check=False)
    assert ping.returncode != 0, ping.stdout
    assert any(c == "no-route" and v > 0 for (_, c), v in gw.errors().items()), gw.errors()

    # b comes back in its old slot, and forwards again.
    r = gw.ctl(*B_WORDS)["data"]
    assert r["index"] == b_index
    lab.run(a, "ping", "-c", "3", "-i", "0.2", "-W", "1", "198.18.1.2", check=False)
    assert udp_round_trips(lab, a, (b, "198.18.1.2"), 7104) == 100
    assert gw.ctl("delete", "interface", "t")["data"]["routes"] == []
    code, out, _ = gw.stop()
    assert code == 0 and "final:" in out
