#!/usr/bin/env python3
"""What `session-handoff` costs a router with two workers over af_packet (each worker its
own socket in the fanout group): `vecgate trafgen` sends 64-byte UDP frames through g0 ->
g1 for 3 s at RATE; the per-node cycles a packet from `show runtime`. With `lb`, a NAT
service is configured too (the traffic is not its own: the steering check runs and keeps
every frame). A benchmark, not a test: the figures go to docs/PERFORMANCE.md.

  scripts/bench-session-handoff.py VECGATE [nolb|lb] [RATE]    # run as root
"""
import json
import pathlib
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests"))
from netns import Lab, Vecgate  # noqa: E402

BIN = sys.argv[1]
LB = len(sys.argv) > 2 and sys.argv[2] == "lb"
RATE = int(sys.argv[3]) if len(sys.argv) > 3 else 100000
cfg = """[dataplane]
workers = 2

[[interface]]
name = "g0"
type = "af_packet"
host_if = "g0"
addresses = ["198.18.0.1/24"]

[[interface]]
name = "g1"
type = "af_packet"
host_if = "g1"
addresses = ["198.18.20.1/24"]

[[neighbour]]
interface = "g1"
ip = "198.18.20.2"
mac = "{t1}"

[[route]]
prefix = "198.19.0.0/16"
via = "198.18.20.2"
"""
if LB:
    cfg += """
[lb]
snat4 = "198.18.20.1"

[[lb_service]]
name = "default/web"
type = "cluster_ip"
vip = "198.18.128.10"
port = 80
protocol = "tcp"
backends = [{ addr = "198.18.20.10", port = 8080 }, { addr = "198.18.20.11", port = 8080 }]
"""
tmp = pathlib.Path(tempfile.mkdtemp())
lab = Lab()
try:
    tg, dut = lab.ns("tg"), lab.dataplane_ns("dut")
    lab.veth(tg, "t0", dut, "g0")
    lab.veth(tg, "t1", dut, "g1")
    t1 = lab.run(tg, "cat", "/sys/class/net/t1/address").stdout.strip()
    g0 = lab.run(dut, "cat", "/sys/class/net/g0/address").stdout.strip()
    gw = Vecgate(lab, BIN, dut, cfg.replace("{t1}", t1), tmp, split_dataplane=True)
    cmd = [BIN, "trafgen", "--tx-if", "t0", "--rx-if", "t1", "--src", "198.18.0.2", "--dst", "198.19.0.1",
           "--dst-mac", g0, "--size", "64", "--rate", str(RATE), "--duration", "3", "--json"]
    lab.run(tg, *cmd[:-5], "--rate", "1000", "--duration", "1", "--json", timeout=30)
    gw.ctl("clear", "runtime")
    r = json.loads(lab.run(tg, *cmd, timeout=60).stdout)
    nodes = gw.ctl("show", "runtime")["data"]["nodes"]
    print(json.dumps({"lb": LB, "sent": r.get("sent"), "received": r.get("received"),
                      "cycles_per_packet": {n["name"]: round(n["cycles_per_packet"], 1) for n in nodes if n["packets"] > 1000}}))
finally:
    lab.close()
