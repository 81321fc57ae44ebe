"""ECMP live (issue 23): vecgate in a namespace routes 198.19.0.0/16 over two af_packet
links to two Linux hosts (B and C, both owning 198.19.0.1). Linux sockets count which
flows arrive where: each flow on one host only, the flows split by the weights; when C's
link goes down its flows move to B (B's stay), and when it is back every flow returns to
the link it had."""
import json
import sys
import time


from netns import Vecgate

SINK = r"""
import json, socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("198.19.0.1", 9000))
s.settimeout(0.2)
print("READY", flush=True)
seen, last, start = {}, None, time.time()
while time.time() - start < 20:
    try:
        data, (src, port) = s.recvfrom(2048)
    except socket.timeout:
        if last and time.time() - last > 1.5:
            break
        continue
    last = time.time()
    seen[port] = seen.get(port, 0) + 1
print(json.dumps(seen), flush=True)
"""

SEND = r"""
import socket, sys, time
flows, rounds = int(sys.argv[1]), int(sys.argv[2])
socks = []
for i in range(flows):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("198.18.0.2", 30000 + i))
    socks.append(s)
for r in range(rounds):
    for s in socks:
        s.sendto(b"ecmp" * 8, ("198.19.0.1", 9000))
        time.sleep(0.0005)
"""

FLOWS = 200
ROUNDS = 3


def config(b_mac, c_mac):
    return f"""
[[interface]]
name = "a"
type = "af_packet"
host_if = "a1"
mac = "02:00:00:00:00:0a"
addresses = ["198.18.0.1/24"]

[[interface]]
name = "b"
type = "af_packet"
host_if = "b1"
mac = "02:00:00:00:00:0b"
addresses = ["198.18.1.1/24"]

[[interface]]
name = "c"
type = "af_packet"
host_if = "c1"
mac = "02:00:00:00:00:0c"
addresses = ["198.18.2.1/24"]

[[neighbour]]
interface = "b"
ip = "198.18.1.2"
mac = "{b_mac}"

[[neighbour]]
interface = "c"
ip = "198.18.2.2"
mac = "{c_mac}"

[[route]]
prefix = "198.19.0.0/16"
paths = [{{ via = "198.18.1.2", weight = 1 }}, {{ via = "198.18.2.2", weight = 1 }}]
"""


def mac_of(lab, ns, ifname):
    out = lab.run(ns, "ip", "-j", "link", "show", ifname).stdout
    return json.loads(out)[0]["address"]


def send_and_count(lab, a, sinks):
    procs = []
    for ns in sinks:
        p = lab.spawn(ns, sys.executable, "-c", SINK)
        assert p.stdout.readline().strip() == "READY"
        procs.append(p)
    lab.run(a, sys.executable, "-c", SEND, str(FLOWS), str(ROUNDS), timeout=60)
    counts = []
    for p in procs:
        out, err = p.communicate(timeout=40)
        counts.append({int(k): v for k, v in json.loads(out.strip().splitlines()[-1]).items()})
    return counts


def test_flows_split_and_follow_a_link_down_and_up(lab, vecgate, tmp_path):
    a, g, b, c = lab.ns("a"), lab.dataplane_ns("gw"), lab.ns("b"), lab.ns("c")
    lab.veth(a, "a0", g, "a1")
    lab.veth(b, "b0", g, "b1")
    lab.veth(c, "c0", g, "c1")
    lab.run(a, "ip", "addr", "add", "198.18.0.2/24", "dev", "a0")
    lab.run(a, "ip", "route", "add", "198.19.0.0/16", "via", "198.18.0.1")
    for ns, ifname, addr in ((b, "b0", "198.18.1.2/24"), (c, "c0", "198.18.2.2/24")):
        lab.run(ns, "ip", "addr", "add", addr, "dev", ifname)
        lab.run(ns, "ip", "addr", "add", "198.19.0.1/32", "dev", ifname)
    gw = Vecgate(lab, vecgate, g, config(mac_of(lab, b, "b0"), mac_of(lab, c, "c0")), tmp_path)
    # A learns the gateway's MAC.
    lab.run(a, "ping", "-c", "2", "-i", "0.2", "-W", "1", "198.18.0.1", check=False)

    on_b, on_c = send_and_count(lab, a, (b, c))
    assert not set(on_b) & set(on_c), "a flow arrived at both hosts"
    assert len(on_b) + len(on_c) == FLOWS, (len(on_b), len(on_c))
    assert all(n == ROUNDS for n in list(on_b.values()) + list(on_c.values())), "a flow lost packets"
    # Weights 1:1 over 200 flows: sigma 3.5 %.
    assert abs(len(on_b) / FLOWS - 0.5) < 0.15, (len(on_b), len(on_c))
    shown = gw.ctl("show", "ip", "fib", "198.19.0.1")["data"]
    assert [p["weight"] for p in shown["paths"]] == [1, 1] and not any(p["skipped"] for p in shown["paths"]), shown

    # C's link down: the control plane reads it (every 200 ms) and skips the path.
    lab.run(g, "ip", "link", "set", "c1", "down")
    deadline = time.time() + 10
    while not gw.ctl("show", "ip", "fib", "198.19.0.1")["data"]["paths"][1]["skipped"]:
        assert time.time() < deadline, "the down link's path was not skipped"
        time.sleep(0.1)
    down_b, down_c = send_and_count(lab, a, (b, c))
    assert not down_c and len(down_b) == FLOWS and all(n == ROUNDS for n in down_b.values()), (len(down_b), len(down_c))

    # Back up: every flow on the link it had.
    lab.run(g, "ip", "link", "set", "c1", "up")
    deadline = time.time() + 10
    while gw.ctl("show", "ip", "fib", "198.19.0.1")["data"]["paths"][1]["skipped"]:
        assert time.time() < deadline, "the path did not come back"
        time.sleep(0.1)
    time.sleep(0.5)  # veth carrier settles
    again_b, again_c = send_and_count(lab, a, (b, c))
    assert set(again_b) == set(on_b) and set(again_c) == set(on_c), "flows did not return to their links"
    code, _, _ = gw.stop()
    assert code == 0
