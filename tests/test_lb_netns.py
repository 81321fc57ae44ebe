"""The service load balancer end to end: a client namespace, vecgate over af_packet,
three backend namespaces running real (Python) TCP servers. The client's and backends'
own kernels are the peers: every connection is a Linux TCP connection to the service
address, answered from behind vecgate's translation."""
import json
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from netns import Vecgate

PEER = Path(__file__).resolve().parent / "lb_peer.py"
VIP = "198.18.128.10"
NODE_B = ["198.19.1.1", "198.19.2.1", "198.19.3.1"]
BACKENDS = ["198.19.1.10", "198.19.2.10", "198.19.3.10"]


def config(extra=""):
    legs = "".join(f"""
[[interface]]
name = "b{i}"
type = "af_packet"
host_if = "b{i}g"
mac = "02:00:00:00:01:0{i}"
addresses = ["{NODE_B[i]}/24"]
""" for i in range(3))
    backends = ", ".join(f'{{ addr = "{a}", port = 8080 }}' for a in BACKENDS)
    return f"""
[[interface]]
name = "a"
type = "af_packet"
host_if = "a1"
mac = "02:00:00:00:00:0a"
addresses = ["198.18.0.1/24"]
{legs}
[lb]
snat4 = "198.19.1.1"

[[lb_service]]
name = "default/web"
type = "cluster_ip"
vip = "{VIP}"
port = 80
protocol = "tcp"
backends = [{backends}]
{extra}"""


def lb_service(name, vip, port, backends, policy="Cluster"):
    """A `load_balancer` TCP service's table; its backends listen on 8080."""
    listed = ", ".join(f'{{ addr = "{a}", port = 8080 }}' for a in backends)
    return f"""
[[lb_service]]
name = "default/{name}"
type = "load_balancer"
vip = "{vip}"
port = {port}
protocol = "tcp"
traffic_policy = "{policy}"
backends = [{listed}]
"""


# The same backends behind the same address, port 81, keeping the client's address.
LOCAL_SERVICE = lb_service("web-local", VIP, 81, BACKENDS, "Local")


def topology(lab):
    c, g = lab.ns("c"), lab.dataplane_ns("gw")
    lab.veth(c, "a0", g, "a1")
    lab.run(c, "ip", "addr", "add", "198.18.0.2/24", "dev", "a0")
    lab.run(c, "ip", "route", "add", "default", "via", "198.18.0.1")
    bes = []
    for i in range(3):
        b = lab.ns(f"be{i}")
        lab.veth(b, "e0", g, f"b{i}g")
        lab.run(b, "ip", "addr", "add", f"{BACKENDS[i]}/24", "dev", "e0")
        lab.run(b, "ip", "route", "add", "default", "via", NODE_B[i])
        bes.append(b)
    return c, g, bes


def serve(lab, ns, name):
    p = lab.spawn(ns, sys.executable, str(PEER), "serve", name, "8080")
    import select
    ready, _, _ = select.select([p.stdout], [], [], 10)
    assert ready and p.stdout.readline().strip() == "READY"
    return p


def serve_all(lab, c, bes):
    """A server in each backend namespace; neighbours learned both ways before counting."""
    for i, b in enumerate(bes):
        serve(lab, b, f"be{i}")
    for a in NODE_B:
        lab.run(c, "ping", "-c", "2", "-i", "0.2", "-W", "1", a, check=False)
    for i, b in enumerate(bes):
        lab.run(b, "ping", "-c", "2", "-i", "0.2", "-W", "1", NODE_B[i], check=False)


def client(lab, ns, *args, timeout=90):
    r = lab.run(ns, sys.executable, str(PEER), *map(str, args), timeout=timeout)
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_connections_spread_intact_and_stick(lab, vecgate, tmp_path):
    c, g, bes = topology(lab)
    gw = Vecgate(lab, vecgate, g, config(), tmp_path)
    serve_all(lab, c, bes)

    # 120 connections: every backend answers with a fair share, each saw the node's
    # address (SNAT), and the client saw the service address as its peer every time.
    # (Linux's connect() takes every other port from a random start: over all such runs
    # of this client's ports, pcap-measured, the least-chosen backend had 21 of 120, and 5
    # of 60, which once failed the 8-of-60 this asserted, in a full suite run; 15 of 120,
    # an eighth, still catches a backend left with a fraction of its third.)
    r = client(lab, c, "who", VIP, 80, 120)
    names = Counter(a.split()[0] for a in r["answers"])
    assert set(names) == {"be0", "be1", "be2"}, r
    assert all(n >= 15 for n in names.values()), names
    assert all(a.split()[1] == "198.19.1.1" and a.split()[2] == VIP for a in r["answers"]), r

    # A 2 MB transfer each way through the translation, bytes intact.
    e = client(lab, c, "echo", VIP, 80, 2 * 1024 * 1024)
    assert e["bytes"] == 2 * 1024 * 1024 and e["sent"] == e["got"], e

    # Draining: a terminating backend gets no new connections.
    gw.ctl("lb", "backend", "set", "default/web", BACKENDS[1], "8080", "terminating")
    r = client(lab, c, "who", VIP, 80, 30)
    names = Counter(a.split()[0] for a in r["answers"])
    assert "be1" not in names and set(names) == {"be0", "be2"}, names
    # Removed and added back: it takes connections again.
    gw.ctl("lb", "backend", "del", "default/web", BACKENDS[1], "8080")
    gw.ctl("lb", "backend", "add", "default/web", BACKENDS[1], "8080")
    r = client(lab, c, "who", VIP, 80, 60)
    assert "be1" in Counter(a.split()[0] for a in r["answers"])
    rows = gw.ctl("show", "lb", "backends")["data"]
    assert sorted(r["addr"] for r in rows) == sorted(BACKENDS)
    errs = gw.errors()
    assert errs.get(("lb4-nat", "new-session"), 0) >= 150, errs
    assert not any(k[0] == "lb4-nat" and k[1] in ("session-table-full", "truncated", "reply-tuple-in-use") for k in errs), errs
    code, _, _ = gw.stop()
    assert code == 0


def test_an_open_connection_keeps_its_backend_while_backends_drain(lab, vecgate, tmp_path):
    """A long transfer runs while every backend in turn becomes terminating: whichever
    backend it is on keeps it (draining), so it ends intact, and no session was chosen
    again."""
    c, g, bes = topology(lab)
    gw = Vecgate(lab, vecgate, g, config(), tmp_path)
    serve_all(lab, c, bes)
    n = 16 * 1024 * 1024
    p = lab.spawn(c, sys.executable, str(PEER), "echo", VIP, "80", str(n))
    time.sleep(0.3)
    for a in BACKENDS:
        gw.ctl("lb", "backend", "set", "default/web", a, "8080", "terminating")
        time.sleep(0.1)
    out, err = p.communicate(timeout=90)
    e = json.loads(out.strip().splitlines()[-1])
    assert e["bytes"] == n and e["sent"] == e["got"], (e, err)
    errs = gw.errors()
    assert errs.get(("lb4-nat", "backend-gone"), 0) == 0, errs
    # With every backend terminating, the serving ones still take new connections.
    r = client(lab, c, "who", VIP, 80, 10)
    assert len(r["answers"]) == 10
    rows = gw.ctl("show", "lb", "backends")["data"]
    assert all(r["conditions"]["terminating"] and r["eligible"] for r in rows), rows
    code, _, _ = gw.stop()
    assert code == 0


def test_local_policy_keeps_the_client_address(lab, vecgate, tmp_path):
    """externalTrafficPolicy Local: no source translation, so each backend sees the
    client's own address; its replies (routed back through vecgate, their destination the
    client) are translated on the forwarding path, so the client still sees the VIP."""
    c, g, bes = topology(lab)
    gw = Vecgate(lab, vecgate, g, config(LOCAL_SERVICE), tmp_path)
    serve_all(lab, c, bes)
    r = client(lab, c, "who", VIP, 81, 30)
    assert len({a.split()[0] for a in r["answers"]}) == 3, r
    assert all(a.split()[1] == "198.18.0.2" and a.split()[2] == VIP for a in r["answers"]), r
    e = client(lab, c, "echo", VIP, 81, 2 * 1024 * 1024)
    assert e["bytes"] == 2 * 1024 * 1024 and e["sent"] == e["got"], e
    # The Cluster service on the same address still translates to the node.
    r = client(lab, c, "who", VIP, 80, 10)
    assert all(a.split()[1] == "198.19.1.1" for a in r["answers"]), r
    errs = gw.errors()
    assert errs.get(("lb4-nat", "reply-translated"), 0) >= 60, errs
    code, _, _ = gw.stop()
    assert code == 0


def test_two_workers_translate_every_reply(lab, vecgate, tmp_path):
    """Two workers, each with its own af_packet socket in the fanout group: the kernel
    hashes a connection's client packets and its backend's replies (other addresses and
    ports) to either worker, and sessions are per worker. `session-handoff` moves each to
    the worker with the session (lb::steer), so every connection, with SNAT and with the
    client's address kept, is answered from the service address and a transfer is
    intact."""
    c, g, bes = topology(lab)
    gw = Vecgate(lab, vecgate, g, "[dataplane]\nworkers = 2\n" + config(LOCAL_SERVICE), tmp_path, split_dataplane=True)
    serve_all(lab, c, bes)
    for port, src in ((80, "198.19.1.1"), (81, "198.18.0.2")):
        r = client(lab, c, "who", VIP, port, 60)
        assert len(r["answers"]) == 60 and len({a.split()[0] for a in r["answers"]}) == 3, r
        assert all(a.split()[1] == src and a.split()[2] == VIP for a in r["answers"]), r
        e = client(lab, c, "echo", VIP, port, 2 * 1024 * 1024)
        assert e["bytes"] == 2 * 1024 * 1024 and e["sent"] == e["got"], e
    errs = gw.errors()
    assert errs.get(("lb4-nat", "reply-translated"), 0) >= 120, errs
    # Both workers took connections, and replies crossed between them.
    assert errs.get(("session-handoff", "handed-off"), 0) > 0, errs
    assert not any(k[0] == "lb4-nat" and k[1] in ("no-service", "snat-ports-exhausted", "reply-tuple-in-use") for k in errs), errs
    code, _, _ = gw.stop()
    assert code == 0


@pytest.mark.parametrize("workers", [1, 2])
def test_a_backend_balanced_to_itself_is_answered_through_the_node(lab, vecgate, tmp_path, workers):
    """Hairpin: a backend connecting to a service that picks that backend itself. With the
    client's address kept (`Local`) the packet would reach it from its own address (a
    martian its kernel drops) and its reply would never pass the gateway; as kube-proxy
    masquerades such a connection, vecgate translates its source to the node's address,
    so the connection works and the backend sees the node as its peer. Another client of
    the same service keeps its address."""
    c, g, bes = topology(lab)
    only_be0 = lb_service("self", VIP, 82, BACKENDS[:1], "Local")
    gw = Vecgate(lab, vecgate, g, f"[dataplane]\nworkers = {workers}\n" + config(LOCAL_SERVICE + only_be0), tmp_path, split_dataplane=True)
    serve_all(lab, c, bes)
    r = client(lab, bes[0], "who", VIP, 82, 10)
    assert len(r["answers"]) == 10, r
    assert all(a.split() == ["be0", "198.19.1.1", VIP] for a in r["answers"]), r
    e = client(lab, bes[0], "echo", VIP, 82, 1024 * 1024)
    assert e["bytes"] == 1024 * 1024 and e["sent"] == e["got"], e
    # The Local service with every backend: be0's connections that land on be0 are
    # translated, those on the others keep be0's address.
    r = client(lab, bes[0], "who", VIP, 81, 30)
    seen = {tuple(a.split()[:2]) for a in r["answers"]}
    assert ("be0", "198.19.1.1") in seen and {n for n, _ in seen} == {"be0", "be1", "be2"}, r
    assert all(src == ("198.19.1.1" if n == "be0" else BACKENDS[0]) for n, src in seen), r
    r = client(lab, c, "who", VIP, 82, 5)
    assert all(a.split() == ["be0", "198.18.0.2", VIP] for a in r["answers"]), r
    code, _, _ = gw.stop()
    assert code == 0


def test_cluster_policy_without_a_snat_address_keeps_the_client_address(lab, vecgate, tmp_path):
    """`Cluster` with no `[lb] snat4` to translate to: the client's address is kept, as
    with `Local`, so the backends' replies come forwarded to the client, and are
    translated back on the forwarding path: the client still sees the service address."""
    c, g, bes = topology(lab)
    text = config()
    assert '[lb]\nsnat4 = "198.19.1.1"\n' in text
    gw = Vecgate(lab, vecgate, g, text.replace('[lb]\nsnat4 = "198.19.1.1"\n', ""), tmp_path)
    serve_all(lab, c, bes)
    r = client(lab, c, "who", VIP, 80, 30)
    assert len({a.split()[0] for a in r["answers"]}) == 3, r
    assert all(a.split()[1] == "198.18.0.2" and a.split()[2] == VIP for a in r["answers"]), r
    errs = gw.errors()
    assert errs.get(("lb4-nat", "reply-translated"), 0) >= 30, errs
    code, _, _ = gw.stop()
    assert code == 0


def test_a_local_service_given_its_backends_afterwards_translates_replies(lab, vecgate, tmp_path):
    """A `Local` service added without backends, then its backends one request each (as
    `vecgate k8s` does for a Service that comes before its EndpointSlice): the first
    backend whose replies come forwarded turns the reply path on, so the client still
    sees the service address (the path was only set by service changes, and the
    backends' replies reached the client untranslated, which reset them)."""
    c, g, bes = topology(lab)
    gw = Vecgate(lab, vecgate, g, config(), tmp_path)
    serve_all(lab, c, bes)
    gw.ctl("lb", "service", "add", "default/late", "load_balancer", VIP, "82", "tcp", "policy", "local")
    for a in BACKENDS:
        gw.ctl("lb", "backend", "add", "default/late", a, "8080")
    r = client(lab, c, "who", VIP, 82, 30)
    assert len({a.split()[0] for a in r["answers"]}) == 3, r
    assert all(a.split()[1] == "198.18.0.2" and a.split()[2] == VIP for a in r["answers"]), r
    code, _, _ = gw.stop()
    assert code == 0


# Services on the node's own addresses (Kubernetes: an external IP or load balancer
# address that is the node's): the client-facing address, and the SNAT address itself.
OWN_ADDRESS_SERVICES = lb_service("ext", "198.18.0.1", 80, BACKENDS) + lb_service("on-snat", "198.19.1.1", 81, BACKENDS)


@pytest.mark.parametrize("workers", [1, 2])
def test_a_service_on_an_address_of_the_node(lab, vecgate, tmp_path, workers):
    """A service address that is one of the gateway's own is served by `ip4-local`, as a
    node port is: no route takes the address, so the gateway still answers pings there,
    and a port without a service is refused as before. Connections spread over the
    backends and come back from the address the client dialled, with two workers too."""
    c, g, bes = topology(lab)
    text = config(OWN_ADDRESS_SERVICES)
    gw = Vecgate(lab, vecgate, g, f"[dataplane]\nworkers = {workers}\n" + text, tmp_path, split_dataplane=True)
    serve_all(lab, c, bes)
    for vip, port in (("198.18.0.1", 80), ("198.19.1.1", 81)):
        r = client(lab, c, "who", vip, port, 30)
        assert len(r["answers"]) == 30 and len({a.split()[0] for a in r["answers"]}) == 3, r
        assert all(a.split()[1] == "198.19.1.1" and a.split()[2] == vip for a in r["answers"]), r
    e = client(lab, c, "echo", "198.18.0.1", 80, 2 * 1024 * 1024)
    assert e["bytes"] == 2 * 1024 * 1024 and e["sent"] == e["got"], e
    # The address is still the gateway's: pings answered, and no route took it.
    lab.run(c, "ping", "-c", "3", "-i", "0.2", "-W", "2", "198.18.0.1")
    fib = gw.ctl("show", "ip", "fib", "198.18.0.1")["data"]
    assert fib["kind"] == "local", fib
    # A port with no service there: refused (ICMP port unreachable), not left hanging.
    probe = "import socket\ntry:\n socket.create_connection(('198.18.0.1', 82), timeout=5)\n print('open')\n" \
            "except ConnectionRefusedError:\n print('refused')\n"
    assert lab.run(c, sys.executable, "-c", probe).stdout.strip() == "refused"
    errs = gw.errors()
    assert errs.get(("lb4-nat", "new-session"), 0) >= 61, errs
    assert not any(k[0] == "lb4-nat" and k[1] in ("snat-ports-exhausted", "reply-tuple-in-use") for k in errs), errs
    code, _, _ = gw.stop()
    assert code == 0


VIP6 = "2001:db8:80::10"


def pmtu_topology(lab, narrow_router=True):
    """client ─ vecgate ─ router ─ backend, the router's way to the backend narrower
    (a locked route MTU of 1280) than the client's and vecgate's links (1500), or
    (`narrow_router` false) vecgate's link to the router narrower (1280)."""
    c, g, r, be = lab.ns("c"), lab.dataplane_ns("gw"), lab.ns("r"), lab.ns("be")
    lab.veth(c, "a0", g, "a1")
    lab.veth(g, "r0g", r, "r0", mtu=1500 if narrow_router else 1280)
    lab.veth(r, "r1", be, "e0")
    lab.host(c, "a0", "198.18.0.2/24", "2001:db8::2/64", "198.18.0.1", "2001:db8::1")
    lab.host(be, "e0", "198.19.2.10/24", "2001:db8:2::10/64", "198.19.2.1", "2001:db8:2::1")
    lab.run(r, "sysctl", "-qw", "net.ipv4.ip_forward=1")
    lab.run(r, "sysctl", "-qw", "net.ipv6.conf.all.forwarding=1")
    lab.run(r, "ip", "addr", "add", "198.19.1.2/24", "dev", "r0")
    lab.run(r, "ip", "addr", "add", "2001:db8:1::2/64", "dev", "r0", "nodad")
    lab.run(r, "ip", "addr", "add", "198.19.2.1/24", "dev", "r1")
    lab.run(r, "ip", "addr", "add", "2001:db8:2::1/64", "dev", "r1", "nodad")
    lab.run(r, "ip", "route", "add", "default", "via", "198.19.1.1")
    lab.run(r, "ip", "-6", "route", "add", "default", "via", "2001:db8:1::1")
    if narrow_router:
        # A locked route MTU applies to forwarded packets too (the link's would not).
        lab.run(r, "ip", "route", "add", "198.19.2.10/32", "dev", "r1", "mtu", "lock", "1280")
        lab.run(r, "ip", "-6", "route", "add", "2001:db8:2::10/128", "dev", "r1", "mtu", "lock", "1280")
    return c, g, r, be


def pmtu_config(r_mtu=1500):
    def svc(name, vip, port, policy):
        return lb_service(name, vip, port, ["2001:db8:2::10" if ":" in vip else "198.19.2.10"], policy)
    return f"""
[[interface]]
name = "a"
type = "af_packet"
host_if = "a1"
mac = "02:00:00:00:00:0a"
addresses = ["198.18.0.1/24", "2001:db8::1/64"]

[[interface]]
name = "r"
type = "af_packet"
host_if = "r0g"
mac = "02:00:00:00:00:0b"
addresses = ["198.19.1.1/24", "2001:db8:1::1/64"]
mtu = {r_mtu}

[[route]]
prefix = "198.19.2.0/24"
via = "198.19.1.2"

[[route]]
prefix = "2001:db8:2::/64"
via = "2001:db8:1::2"

[lb]
snat4 = "198.19.1.1"
snat6 = "2001:db8:1::1"
""" + svc("web", VIP, 80, "Cluster") + svc("web-local", VIP, 81, "Local") + svc("web6", VIP6, 80, "Cluster") + svc("web6-local", VIP6, 81, "Local")


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("narrow", ["router", "vecgate"])
@pytest.mark.parametrize("vip", [VIP, VIP6], ids=["v4", "v6"])
def test_path_mtu_discovery_through_the_translation(lab, vecgate, tmp_path, vip, narrow, workers):
    """A router beyond vecgate cannot forward the client's full-size segments to the
    backend and says so (frag-needed / packet too big) to their source: vecgate's own
    address for a source-translated connection (`Cluster`, by ipN-local), the client's
    for one that kept it (`Local`, forwarded through vecgate). Either way the client's
    kernel must get the error about the packet it sent, to the service address, lower
    its path MTU and retransmit: the upload completes intact only if it did. The same
    when vecgate's own link to the router is the narrow one: its error about the
    translated packet goes the same ways. With two workers, the errors are steered to the
    worker that holds the connection's session, as its replies are."""
    c, g, r, be = pmtu_topology(lab, narrow_router=narrow == "router")
    text = f"[dataplane]\nworkers = {workers}\n" + pmtu_config(1500 if narrow == "router" else 1280)
    gw = Vecgate(lab, vecgate, g, text, tmp_path, split_dataplane=True)
    serve(lab, be, "be")
    v6 = ":" in vip
    lab.run(be, "ping", "-6" if v6 else "-4", "-c", "2", "-i", "0.2", "-W", "1", "2001:db8:2::1" if v6 else "198.19.2.1", check=False)
    lab.run(c, "ping", "-6" if v6 else "-4", "-c", "2", "-i", "0.2", "-W", "1", "2001:db8::1" if v6 else "198.18.0.1", check=False)
    for port, source in ((80, "2001:db8:1::1" if v6 else "198.19.1.1"), (81, "2001:db8::2" if v6 else "198.18.0.2")):
        lab.run(c, "ip", "route", "flush", "cache", check=False)
        lab.run(c, "ip", "-6" if v6 else "-4", "route", "flush", "cache", check=False)
        r_who = client(lab, c, "who", vip, port, 1)
        assert r_who["answers"] == [f"be {source} {vip}"], r_who
        e = client(lab, c, "echo", vip, port, 2 * 1024 * 1024)
        assert e["bytes"] == 2 * 1024 * 1024 and e["sent"] == e["got"], (port, e)
        # The client's kernel took the error: its path MTU to the service address.
        route = lab.run(c, "ip", "route", "get", vip).stdout
        assert "mtu 1280" in route, (port, route)
        lab.run(c, "ip", "route", "flush", "cache", check=False)
        lab.run(c, "ip", "-6", "route", "flush", "cache", check=False)
    errs = gw.errors()
    node = "lb6-nat" if v6 else "lb4-nat"
    assert errs.get((node, "icmp-translated"), 0) >= 2, errs
    assert errs.get((node, "icmp-not-translated"), 0) == 0, errs
    code, _, _ = gw.stop()
    assert code == 0
