"""`vecgate trafgen` against a real device under test: a vecgate routing between two veth
pairs in namespaces, at a low fixed rate, over packet sockets and over AF_XDP (trafgen's
own interfaces and, in the second case, the router's too). Every packet must come back
exactly once with a valid trailer, and the report must be consistent with itself."""
import json

import pytest

from netns import Lab, Vecgate


@pytest.fixture
def lab():
    l = Lab()
    yield l
    l.close()


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
    assert 1900 <= r["sent"] <= 2000 and r["tx_failed"] == 0, r
    assert r["received"] == r["sent"] and r["lost"] == 0 and r["duplicates"] == 0 and r["corrupt"] == 0, r
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
