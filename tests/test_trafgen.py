"""`vecgate trafgen` against a real device under test: a vecgate routing between two veth
pairs in namespaces, at a low fixed rate, over packet sockets and over AF_XDP (trafgen's
own interfaces and, in the second case, the router's too). Every packet must come back
exactly once with a valid trailer, and the report must be consistent with itself."""
import json
import os
import signal
import time

import pytest

from netns import Vecgate


def router(kind):
    return f"""
[[interface]]
name = "g0"
type = "{kind}"
host_if = "g0"
addresses = ["198.18.0.1/24"]

[[interface]]
name = "g1"
type = "{kind}"
host_if = "g1"
addresses = ["198.18.20.1/24"]

[[neighbour]]
interface = "g1"
ip = "198.18.20.2"
mac = "{{t1}}"

[[route]]
prefix = "198.19.0.0/16"
via = "198.18.20.2"
"""


@pytest.mark.parametrize("io", ["af_packet", "af_xdp"])
def test_trafgen_through_vecgate(lab, vecgate, tmp_path, io):
    tg, dut = lab.ns("tg"), lab.dataplane_ns("dut")
    lab.veth(tg, "t0", dut, "g0")
    lab.veth(tg, "t1", dut, "g1")
    t1 = lab.run(tg, "cat", "/sys/class/net/t1/address").stdout.strip()
    g0 = lab.run(dut, "cat", "/sys/class/net/g0/address").stdout.strip()
    gw = Vecgate(lab, vecgate, dut, router(io).replace("{t1}", t1), tmp_path)
    cmd = [str(vecgate), "trafgen", "--tx-if", "t0", "--rx-if", "t1", "--src", "198.18.0.2", "--dst", "198.19.0.1",
           "--dst-mac", g0, "--size", "1000", "--rate", "2000", "--duration", "1", "--json"]
    if io == "af_xdp":
        cmd.append("--af-xdp")
    r = json.loads(lab.run(tg, *cmd, timeout=30).stdout)
    # Paced by the clock for 1 s: the last tick may fall just past the end.
    assert 1900 <= r["sent"] <= 2000 and r["tx_failed"] == 0, f"{r}"
    assert r["received"] == r["sent"] and r["lost"] == 0 and r["duplicates"] == 0 and r["corrupt"] == 0, \
        f"{r}\nvecgate's interfaces: {gw.interfaces()}"
    lat = r["latency_ns"]
    assert 0 < lat["min"] <= lat["p50"] <= lat["p99"] <= lat["max"], lat
    assert lat["min"] <= lat["avg"] <= lat["max"], lat
    ifs = gw.interfaces()
    # Everything trafgen sent was forwarded (its count may be below the nominal 2000:
    # the pacing tolerance above).
    assert ifs["g1"]["tx_packets"] >= r["sent"] and ifs["g0"]["kind"] == io
    if io == "af_xdp":
        # trafgen removed its programs when it exited.
        assert "prog/xdp" not in lab.run(tg, "ip", "-d", "link", "show", "t1").stdout
    assert gw.stop()[0] == 0


def test_af_packet_ring_rides_out_a_stall(lab, vecgate, tmp_path):
    """A dataplane that is not scheduled for a while (a stolen CPU, a page fault storm)
    must find the packets that arrived meanwhile in its receive ring. At a low rate a
    TPACKET_V3 ring closes a block per retire period however few frames it holds, so
    what it rides out depends on its block count, not its bytes: with 32 blocks a
    50 ms stall lost about 140 of 2000 packets."""
    tg, dut = lab.ns("tg"), lab.dataplane_ns("dut")
    lab.veth(tg, "t0", dut, "g0")
    lab.veth(tg, "t1", dut, "g1")
    t1 = lab.run(tg, "cat", "/sys/class/net/t1/address").stdout.strip()
    g0 = lab.run(dut, "cat", "/sys/class/net/g0/address").stdout.strip()
    gw = Vecgate(lab, vecgate, dut, router("af_packet").replace("{t1}", t1), tmp_path)
    p = lab.spawn(tg, str(vecgate), "trafgen", "--tx-if", "t0", "--rx-if", "t1", "--src", "198.18.0.2",
                  "--dst", "198.19.0.1", "--dst-mac", g0, "--size", "1000", "--rate", "2000", "--duration", "1",
                  "--json")
    time.sleep(0.4)
    # `ip netns exec` execs the dataplane: the pid is vecgate's.
    os.kill(gw.proc.pid, signal.SIGSTOP)
    time.sleep(0.15)
    os.kill(gw.proc.pid, signal.SIGCONT)
    out, err = p.communicate(timeout=30)
    assert p.returncode == 0, err
    r = json.loads(out)
    ifs = gw.interfaces()
    device = dict(ifs["g0"]["device"])
    assert device.get("rx-kernel-drops", 0) == 0, f"{r}\n{ifs}"
    assert r["sent"] >= 1900 and r["received"] == r["sent"] and r["corrupt"] == 0, f"{r}\n{ifs}"
    # The stall shows in the latency: packets waited in the ring for it.
    assert r["latency_ns"]["max"] >= 100_000_000, r["latency_ns"]
    assert gw.stop()[0] == 0
