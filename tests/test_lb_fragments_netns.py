"""UDP datagrams larger than the path MTU through the service load balancer, end to end:
a client namespace, vecgate over af_packet, three backend namespaces echoing with real
Linux UDP sockets. The client's kernel fragments its 3000- and 8000-byte requests on its
1500-byte link, and each backend's kernel fragments its whole echo, as kube-proxy's
peers do: conntrack defragments before the NAT there, so vecgate must reassemble a
service's fragments (ipN-reassembly), balance and translate the whole datagram, and
fragment it again on the way out. Each family, `Cluster` (SNAT: replies to the node's
address) and `Local` (the client's address kept: replies forwarded through vecgate),
with one worker and two, with small datagrams as the control in the same run; and a
backend's own large datagram, of no connection, forwarded as it is.

  client c ── a0/a1 ── vecgate (ns gw) ── bNg/e0 ── backend beN (N = 0..2)
  198.18.0.2           198.18.0.1         198.19.N+1.1 | 198.19.N+1.10
  2001:db8::2          2001:db8::1        2001:db8:N+1::1 | 2001:db8:N+1::10
"""
import select
import subprocess
import sys

import pytest

from netns import Vecgate, result
from test_lb_netns import PEER, VIP, VIP6, client

BACKENDS = {4: [f"198.19.{i + 1}.10" for i in range(3)], 6: [f"2001:db8:{i + 1}::10" for i in range(3)]}
CLIENT = {4: "198.18.0.2", 6: "2001:db8::2"}
SNAT = {4: "198.19.1.1", 6: "2001:db8:1::1"}
# Service port → backend port and policy: Cluster translates the source to the node's
# address, Local keeps the client's.
SERVICES = {53: (8053, "Cluster"), 54: (8054, "Local")}
# Above the 1500-byte links' MTU: three and six fragments each way.
LARGE = "3000,8000"
SMALL = "100"
COUNT = 20


def config(workers, backends=BACKENDS):
    """vecgate's links and the services (`backends`: their addresses by family)."""
    legs = "".join(f"""
[[interface]]
name = "b{i}"
type = "af_packet"
host_if = "b{i}g"
mac = "02:00:00:00:01:0{i}"
addresses = ["198.19.{i + 1}.1/24", "2001:db8:{i + 1}::1/64"]
""" for i in range(3))
    services = ""
    for family, vip in ((4, VIP), (6, VIP6)):
        for port, (backend_port, policy) in SERVICES.items():
            listed = ", ".join(f'{{ addr = "{a}", port = {backend_port} }}' for a in backends[family])
            services += f"""
[[lb_service]]
name = "default/dns{family}-{policy.lower()}"
type = "load_balancer"
vip = "{vip}"
port = {port}
protocol = "udp"
traffic_policy = "{policy}"
backends = [{listed}]
"""
    return f"""[dataplane]
workers = {workers}

[[interface]]
name = "a"
type = "af_packet"
host_if = "a1"
mac = "02:00:00:00:00:0a"
addresses = ["198.18.0.1/24", "2001:db8::1/64"]
{legs}
[lb]
snat4 = "{SNAT[4]}"
snat6 = "{SNAT[6]}"
{services}"""


def topology(lab):
    c, g = lab.ns("c"), lab.dataplane_ns("gw")
    lab.veth(c, "a0", g, "a1")
    lab.host(c, "a0", "198.18.0.2/24", "2001:db8::2/64", "198.18.0.1", "2001:db8::1")
    bes = []
    for i in range(3):
        b = lab.ns(f"be{i}")
        lab.veth(b, "e0", g, f"b{i}g")
        lab.host(b, "e0", f"{BACKENDS[4][i]}/24", f"{BACKENDS[6][i]}/64", f"198.19.{i + 1}.1", f"2001:db8:{i + 1}::1")
        bes.append(b)
    return c, g, bes


def started(p):
    """`p`, a lb_peer server, once it says READY (within 10 s)."""
    ready, _, _ = select.select([p.stdout], [], [], 10)
    assert ready and p.stdout.readline().strip() == "READY"
    return p


def echo_servers(lab, c, bes):
    """A UDP echo server on both backend ports in each backend namespace; neighbours
    learned both ways, in both families, before any datagram counts."""
    servers = []
    for i, b in enumerate(bes):
        # Its stdin open until result() closes it, which ends it.
        p = lab.spawn(b, sys.executable, str(PEER), "userve", f"be{i}", *(str(bp) for bp, _ in SERVICES.values()), stdin=subprocess.PIPE)
        servers.append(started(p))
    for i, b in enumerate(bes):
        for node in (f"198.19.{i + 1}.1", f"2001:db8:{i + 1}::1"):
            lab.run(b, "ping", "-c", "2", "-i", "0.2", "-W", "1", node, check=False)
            lab.run(c, "ping", "-c", "2", "-i", "0.2", "-W", "1", node, check=False)
    return servers


def spread_from(got, backend_port, source):
    """What each backend's echo server got on `backend_port` (`got`: its rows by backend
    name), once checked that every backend got some and all came from `source`."""
    seen = {name: [row for row in rows if row[0] == backend_port] for name, rows in got.items()}
    assert all(rows for rows in seen.values()), f"{backend_port}: {got}"
    assert {peer for rows in seen.values() for _, peer, _ in rows} == {source}, f"{backend_port}: {got}"
    return seen


def on_the_way(gw, family):
    """The counters of the nodes on a fragment's way, as text (a failed assertion shows
    text whole, a dict cut short), or why there are none (a worker that does not answer)."""
    try:
        errs = gw.errors()
    except AssertionError as e:
        return f"no counters: {e}"
    nodes = (f"lb{family}-nat", f"ip{family}-local", f"ip{family}-reassembly", f"ip{family}-fragment", "session-handoff")
    return str({k: v for k, v in sorted(errs.items()) if k[0] in nodes})


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("family", [4, 6], ids=["v4", "v6"])
def test_fragmented_datagrams_through_the_translation(lab, vecgate, tmp_path, family, workers):
    """Per policy, small datagrams then COUNT large ones (3000 and 8000 bytes in turn),
    each from a socket of its own connected to the service address and port (so only a
    reply from there is taken): every one comes back byte for byte. The backends got
    them whole, from the node's address (Cluster) or the client's (Local), spread over
    all three. lbN-nat dropped no fragment, and the reassembly node made the large
    datagrams whole. With two workers, the kernel's fanout hashes a datagram's fragments
    (no ports) by addresses alone, so one may be made whole on a worker that does not
    hold its session: it must reach the one that does, as an unfragmented packet is
    handed (session-handoff)."""
    c, g, bes = topology(lab)
    gw = Vecgate(lab, vecgate, g, config(workers), tmp_path, split_dataplane=True)
    servers = echo_servers(lab, c, bes)
    vip = VIP if family == 4 else VIP6
    # Both policies before judging, so that a failure shows each one's outcome.
    echoed = {(port, sizes): client(lab, c, "uecho", vip, port, n, sizes) for port in SERVICES for n, sizes in ((10, SMALL), (COUNT, LARGE))}
    assert all(e["answered"] == e["sent"] for e in echoed.values()), f"{echoed}; {on_the_way(gw, family)}"
    shown, errs = on_the_way(gw, family), gw.errors()
    code, _, _ = gw.stop()
    assert code == 0
    got = {f"be{i}": result(p)["got"] for i, p in enumerate(servers)}
    for port, (backend_port, policy) in SERVICES.items():
        seen = spread_from(got, backend_port, SNAT[family] if policy == "Cluster" else CLIENT[family])
        # Whole datagrams (the backends' kernels would reassemble pieces too), every one.
        sizes = sorted(size for rows in seen.values() for _, _, size in rows)
        large = [int(x) for x in LARGE.split(",")]
        assert sizes == sorted([int(SMALL)] * 10 + [large[i % 2] for i in range(COUNT)]), f"{port}: {got}"
    nat, reassembly = (f"lb{family}-nat", f"ip{family}-reassembly")
    assert not any(k[0] == nat and k[1] in ("fragment", "extension-headers", "truncated", "no-service", "icmp-not-translated") for k in errs), shown
    assert errs.get((nat, "new-session"), 0) >= 2 * (10 + COUNT), shown
    # The client's large requests to both services and the backends' large echoes to the
    # node's address (Cluster) at least; the Local echoes, forwarded, may be whole too.
    assert errs.get((reassembly, "reassembled"), 0) >= 3 * COUNT, shown
    # With two workers some datagrams were made whole away from their connection's
    # worker and handed to it (one worker has nowhere to hand them).
    handed = errs.get((nat, "to-session-worker"), 0)
    assert handed > 0 if workers == 2 else handed == 0, shown


@pytest.mark.parametrize("family", [4, 6], ids=["v4", "v6"])
def test_a_backends_own_large_datagram_passes_as_it_is(lab, vecgate, tmp_path, family):
    """A backend's own large datagram to the client, of no connection through the balancer
    (its own traffic, or a reply after its session expired): with a `Local` service,
    what is forwarded from a backend's address passes lbN-nat, which finds nothing to
    translate. It reaches the client whole, from the backend's address and port, as
    through kube-proxy, and the gateway keeps serving (a reassembled datagram left as
    it was, fragmented again on its way out, must not come back to be reassembled)."""
    c, g, bes = topology(lab)
    gw = Vecgate(lab, vecgate, g, config(1), tmp_path, split_dataplane=True)
    echo_servers(lab, c, bes)
    backend, size = BACKENDS[family][0], int(LARGE.split(",")[0])
    listener = started(lab.spawn(c, sys.executable, str(PEER), "urecv", "9999", "10"))
    sent = client(lab, bes[0], "usend", CLIENT[family], 9999, size, 8055)
    got = result(listener)
    assert got == {"from": backend, "port": 8055, "bytes": size, "sha256": sent["sha256"]}, f"{got}; {on_the_way(gw, family)}"
    # Still serving: a service's datagram after it is echoed.
    after = client(lab, c, "uecho", VIP if family == 4 else VIP6, 54, 1, LARGE)
    assert after["answered"] == 1, f"{after}; {on_the_way(gw, family)}"
    code, _, _ = gw.stop()
    assert code == 0
