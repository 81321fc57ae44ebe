"""`vecgate k8s` against a real kube-apiserver v1.31 (built by tests/k8s/build.sh, started
in its own network namespace by tests/k8s/start.sh): Services and EndpointSlices made
with kubectl reach the running gateway's load balancer, one endpoint changed is one
backend request, and Linux clients in namespaces reach the backends the slices name.
Real kube-proxy in nftables mode, on the same API server, is the differential oracle:
the same objects must select the same backends through both.

The controller runs as the user vecgate-lb with only tests/k8s/rbac.yaml's ClusterRole,
so the test also shows that role is enough."""
import json
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import pytest

from netns import Vecgate, sh

K8S = Path(__file__).resolve().parent / "k8s"
PEER = Path(__file__).resolve().parent / "lb_peer.py"
BIN_DIR = Path.home() / ".cache" / "vecgate-k8s"
NODE_B = ["198.19.1.1", "198.19.2.1", "198.19.3.1"]
BACKENDS = ["198.19.1.10", "198.19.2.10", "198.19.3.10"]


@pytest.fixture(scope="module")
def api():
    """The API server in namespace vgk8s<pid>; yields (namespace, workdir)."""
    r = subprocess.run([str(K8S / "build.sh"), str(BIN_DIR)], capture_output=True, text=True, timeout=3600)
    assert r.returncode == 0, r.stderr[-2000:]
    w = Path(tempfile.mkdtemp(prefix="vgk8s"))
    ns = f"vgk8s{__import__('os').getpid() % 100000}"
    sh("ip", "netns", "del", ns, check=False)
    try:
        r = subprocess.run([str(K8S / "start.sh"), str(w), "--netns", ns, "--bin", str(BIN_DIR)], capture_output=True, text=True, timeout=180)
        assert r.returncode == 0, r.stdout + r.stderr
        kubectl(ns, w, "apply", "-f", str(K8S / "rbac.yaml"), "-f", str(K8S / "node.yaml"))
        kubectl(ns, w, "patch", "node", "n1", "--subresource=status", "--type=merge",
                "-p", '{"status":{"addresses":[{"type":"InternalIP","address":"198.18.8.1"}]}}')
        yield ns, w
    finally:
        subprocess.run([str(K8S / "stop.sh"), str(w)], capture_output=True, timeout=60)


def kubectl(ns, w, *args, stdin=None):
    r = subprocess.run(["ip", "netns", "exec", ns, str(BIN_DIR / "kubectl"), "--kubeconfig", str(w / "admin.kubeconfig"), *args],
                       input=stdin, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"kubectl {' '.join(args)}: {r.stderr}"
    return r.stdout


def apply(ns, w, objects):
    kubectl(ns, w, "apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))


def service(name, vip, ports, **spec):
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": "default"},
            "spec": {"type": "ClusterIP", "clusterIP": vip, "ports": ports, **spec}}


def endpoint(addr, ready=True, serving=None, terminating=False, node="n1"):
    serving = ready if serving is None else serving
    return {"addresses": [addr], "conditions": {"ready": ready, "serving": serving, "terminating": terminating}, "nodeName": node}


def endpoint_slice(name, svc, ports, endpoints):
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": name, "namespace": "default",
                         "labels": {"kubernetes.io/service-name": svc, "endpointslice.kubernetes.io/managed-by": "vecgate-test"}},
            "addressType": "IPv4", "ports": ports, "endpoints": endpoints}


def dataplane(lab, vecgate, tmp):
    """Client namespace, gateway, three backend namespaces running lb_peer servers."""
    c, g = lab.ns("c"), lab.dataplane_ns("gw")
    lab.veth(c, "a0", g, "a1")
    lab.run(c, "ip", "addr", "add", "198.18.0.2/24", "dev", "a0")
    lab.run(c, "ip", "route", "add", "default", "via", "198.18.0.1")
    legs = ""
    for i in range(3):
        b = lab.ns(f"be{i}")
        lab.veth(b, "e0", g, f"b{i}g")
        lab.run(b, "ip", "addr", "add", f"{BACKENDS[i]}/24", "dev", "e0")
        lab.run(b, "ip", "route", "add", "default", "via", NODE_B[i])
        legs += f"""
[[interface]]
name = "b{i}"
type = "af_packet"
host_if = "b{i}g"
mac = "02:00:00:00:01:0{i}"
addresses = ["{NODE_B[i]}/24"]
"""
    cfg = f"""
[[interface]]
name = "a"
type = "af_packet"
host_if = "a1"
mac = "02:00:00:00:00:0a"
addresses = ["198.18.0.1/24"]
{legs}
[lb]
snat4 = "198.19.1.1"
"""
    gw = Vecgate(lab, vecgate, g, cfg, tmp)
    import select
    for i in range(3):
        p = lab.spawn(f"{lab.prefix}-be{i}", sys.executable, str(PEER), "serve", f"be{i}", "8080")
        ready, _, _ = select.select([p.stdout], [], [], 10)
        assert ready and p.stdout.readline().strip() == "READY"
    for i in range(3):
        lab.run(c, "ping", "-c", "2", "-i", "0.2", "-W", "1", NODE_B[i], check=False)
        lab.run(f"{lab.prefix}-be{i}", "ping", "-c", "2", "-i", "0.2", "-W", "1", NODE_B[i], check=False)
    return c, gw


def controller(lab, vecgate, api_ns, w, gw, tmp, node="n1", extra=()):
    log = open(tmp / "k8s.log", "w")
    named = ["--node-name", node] if node else []
    p = lab.spawn_to(api_ns, log, str(vecgate), "k8s", "--socket", gw.sock, "--kubeconfig", str(w / "vecgate.kubeconfig"), *named, *extra)
    return p, tmp / "k8s.log"


def wait_for(what, pred, timeout=30):
    end = time.time() + timeout
    while True:
        v = pred()
        if v:
            return v
        assert time.time() < end, f"timed out waiting for {what}"
        time.sleep(0.1)


def backends(gw, name):
    """(addr, port) → (conditions, eligible) of an LB service, or None if it is absent."""
    names = {r["name"] for r in gw.ctl("show", "lb", "services")["data"]}
    if name not in names:
        return None
    return {(r["addr"], r["port"]): (r["conditions"], r["eligible"]) for r in gw.ctl("show", "lb", "backends")["data"] if r["service"] == name}


def serve_backends(lab, ns):
    """A TCP server on port 8080 of every address in BACKENDS (on `ns`'s loopback) for two
    minutes, answering each connection with "ADDRESS CLIENT" (whom it reached, who came):
    ready when this returns."""
    server = lab.spawn(ns, sys.executable, "-c", f"""
import socket, threading, time
def serve(a):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind((a, 8080)); s.listen(64)
    while True:
        c, p = s.accept(); c.settimeout(5); c.recv(64); c.sendall(f"{{a}} {{p[0]}}\\n".encode()); c.close()
for a in {BACKENDS!r}:
    threading.Thread(target=serve, args=(a,), daemon=True).start()
print("READY", flush=True)
time.sleep(120)
""")
    assert server.stdout.readline().strip() == "READY"
    return server


def who(lab, ns, host, port, count):
    r = lab.run(ns, sys.executable, str(PEER), "who", host, str(port), str(count), timeout=90)
    return json.loads(r.stdout.strip().splitlines()[-1])


def event_lines(log):
    return [l for l in log.read_text().splitlines() if "event applied" in l]


def changes_of(line):
    return int(re.search(r"changes=(\d+)", line).group(1))


WEB = "default/web:http@198.18.128.10"


def test_controller_programs_the_lb_with_one_change_per_endpoint(api, lab, vecgate, tmp_path):
    api_ns, w = api
    c, gw = dataplane(lab, vecgate, tmp_path)
    http = [{"name": "http", "port": 8080, "protocol": "TCP"}]
    apply(api_ns, w, [service("web", "198.18.128.10", [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]),
                      endpoint_slice("web-1", "web", http, [endpoint(a) for a in BACKENDS])])
    proc, log = controller(lab, vecgate, api_ns, w, gw, tmp_path)
    try:
        got = wait_for("the first sync", lambda: (b := backends(gw, WEB)) and len(b) == 3 and b)
        assert set(got) == {(a, 8080) for a in BACKENDS}
        svc = [r for r in gw.ctl("show", "lb", "services")["data"] if r["name"] == WEB][0]
        assert (svc["type"], svc["vip"], svc["port"], svc["protocol"]) == ("cluster_ip", "198.18.128.10", 80, "tcp")
        assert "initial sync done" in log.read_text()

        # Linux TCP clients reach every backend through the translation.
        r = who(lab, c, "198.18.128.10", 80, 45)
        assert set(a.split()[0] for a in r["answers"]) == {"be0", "be1", "be2"}, r

        # One endpoint removed: one backend request, the service itself untouched.
        kubectl(api_ns, w, "patch", "endpointslice", "web-1", "--type=json", "-p", '[{"op":"remove","path":"/endpoints/1"}]')
        wait_for("the removal", lambda: (b := backends(gw, WEB)) is not None and len(b) == 2)
        assert set(backends(gw, WEB)) == {(BACKENDS[0], 8080), (BACKENDS[2], 8080)}
        assert [r["id"] for r in gw.ctl("show", "lb", "services")["data"] if r["name"] == WEB] == [svc["id"]]
        lines = wait_for("the event log", lambda: event_lines(log))
        assert [changes_of(l) for l in lines] == [1], lines
        r = who(lab, c, "198.18.128.10", 80, 30)
        assert set(a.split()[0] for a in r["answers"]) == {"be0", "be2"}, r

        # Terminating: kept as a backend (its flows drain), no new connections.
        kubectl(api_ns, w, "patch", "endpointslice", "web-1", "--type=json",
                "-p", '[{"op":"replace","path":"/endpoints/1/conditions","value":{"ready":false,"serving":true,"terminating":true}}]')
        wait_for("the terminating endpoint", lambda: backends(gw, WEB).get((BACKENDS[2], 8080), ({}, True))[1] is False)
        assert backends(gw, WEB)[(BACKENDS[2], 8080)][0] == {"ready": False, "serving": True, "terminating": True}
        assert [changes_of(l) for l in event_lines(log)] == [1, 1]
        r = who(lab, c, "198.18.128.10", 80, 20)
        assert set(a.split()[0] for a in r["answers"]) == {"be0"}, r

        # A second port on the Service: one LB service added, the first untouched.
        kubectl(api_ns, w, "patch", "service", "web", "--type=json",
                "-p", '[{"op":"add","path":"/spec/ports/-","value":{"name":"alt","port":81,"targetPort":8081,"protocol":"TCP"}}]')
        kubectl(api_ns, w, "patch", "endpointslice", "web-1", "--type=json",
                "-p", '[{"op":"add","path":"/ports/-","value":{"name":"alt","port":8080,"protocol":"TCP"}}]')
        alt = "default/web:alt@198.18.128.10"
        wait_for("the second port", lambda: (b := backends(gw, alt)) is not None and len(b) == 2)
        r = who(lab, c, "198.18.128.10", 81, 10)
        assert set(a.split()[0] for a in r["answers"]) == {"be0"}, r
        assert [r["id"] for r in gw.ctl("show", "lb", "services")["data"] if r["name"] == WEB] == [svc["id"]]

        # The slice deleted: no backends; the Service deleted: its LB services go.
        kubectl(api_ns, w, "delete", "endpointslice", "web-1")
        wait_for("the slice deletion", lambda: backends(gw, WEB) == {})
        kubectl(api_ns, w, "delete", "service", "web")
        wait_for("the service deletion", lambda: backends(gw, WEB) is None and backends(gw, alt) is None)
        assert proc.poll() is None, log.read_text()
    finally:
        proc.terminate()
        proc.wait(10)
    text = log.read_text()
    assert "change refused" not in text and "object ignored" not in text, text
    assert gw.stop()[0] == 0


def test_backends_changed_by_hand_are_restored(api, lab, vecgate, tmp_path):
    """`vecgate ctl lb backend set` on a managed LB service, in place (same address and
    port, the service's row unchanged): another weight, then draining. The controller's
    periodic check sees it by the service's digest (`show lb digests`) and sets the
    backend back as its EndpointSlice says, within a check or two, without a Kubernetes
    event; traffic reaches every backend again."""
    api_ns, w = api
    c, gw = dataplane(lab, vecgate, tmp_path)
    http = [{"name": "http", "port": 8080, "protocol": "TCP"}]
    apply(api_ns, w, [service("hand", "198.18.128.40", [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]),
                      endpoint_slice("hand-1", "hand", http, [endpoint(a) for a in BACKENDS])])
    name = "default/hand:http@198.18.128.40"
    proc, log = controller(lab, vecgate, api_ns, w, gw, tmp_path)

    def rows():
        return {r["addr"]: r for r in gw.ctl("show", "lb", "backends", name)["data"]}

    def digest():
        return gw.ctl("show", "lb", "digests")["data"].get(name)

    try:
        wait_for("the first sync", lambda: (b := backends(gw, name)) and len(b) == 3)
        applied = digest()
        assert re.fullmatch(r"[0-9a-f]{16}", applied or ""), applied
        ready = {"ready": True, "serving": True, "terminating": False}

        # (The ctl's reply says each change was made; the check may undo it at once.)
        assert gw.ctl("lb", "backend", "set", name, BACKENDS[0], "8080", "weight", "5")["ok"]
        wait_for("the weight set back", lambda: rows()[BACKENDS[0]]["weight"] == 1, timeout=20)
        assert digest() == applied
        assert log.read_text().count("LB service not as the controller applied it") == 1, log.read_text()

        assert gw.ctl("lb", "backend", "set", name, BACKENDS[1], "8080", "terminating")["ok"]
        wait_for("the drained backend set back", lambda: rows()[BACKENDS[1]]["conditions"] == ready, timeout=20)
        assert rows()[BACKENDS[1]]["eligible"] is True and digest() == applied
        assert log.read_text().count("LB service not as the controller applied it") == 2, log.read_text()

        r = who(lab, c, "198.18.128.40", 80, 45)
        assert set(a.split()[0] for a in r["answers"]) == {"be0", "be1", "be2"}, r
        # Nothing else was touched: no Kubernetes event, no refusal.
        assert event_lines(log) == [] and "change refused" not in log.read_text(), log.read_text()
        assert proc.poll() is None, log.read_text()
    finally:
        proc.terminate()
        proc.wait(10)
    assert "restored: 2" in log.read_text(), log.read_text()[-2000:]
    kubectl(api_ns, w, "delete", "service", "hand")
    kubectl(api_ns, w, "delete", "endpointslice", "hand-1")
    assert gw.stop()[0] == 0


def managed_ids(gw):
    """The controller's LB services in the gateway: name → id."""
    return {r["name"]: r["id"] for r in gw.ctl("show", "lb", "services")["data"] if r["name"].startswith("default/")}


def test_restarts_converge(api, lab, vecgate, tmp_path):
    """What an operator restarts under live services: the controller (it reads the gateway
    back and changes nothing, local backends included), and the gateway under a running
    controller (no Kubernetes event says so: the controller finds the LB services it
    applied gone and applies every Service again)."""
    api_ns, w = api
    c, gw = dataplane(lab, vecgate, tmp_path)
    http = [{"name": "http", "port": 8080, "protocol": "TCP"}]
    tcp80 = [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]
    apply(api_ns, w, [service("rs", "198.18.128.50", tcp80, externalIPs=["198.18.140.5"]),
                      endpoint_slice("rs-1", "rs", http, [endpoint(a) for a in BACKENDS])])
    rs = "default/rs:http@198.18.128.50"
    proc, log = controller(lab, vecgate, api_ns, w, gw, tmp_path)
    try:
        wait_for("the first sync", lambda: (b := backends(gw, rs)) and len(b) == 3)
        ids = managed_ids(gw)

        # The controller restarted: nothing to change, every LB service kept as it was.
        proc.terminate()
        proc.wait(10)
        proc, log = controller(lab, vecgate, api_ns, w, gw, tmp_path)
        lines = wait_for("the restarted controller's sync", lambda: [l for l in log.read_text().splitlines() if "initial sync done" in l])
        assert changes_of(lines[0]) == 0, lines
        assert managed_ids(gw) == ids

        # Restarted with another Maglev table size: the services it finds were added with
        # the old one, so each is replaced (the size is not taken as what it asks for now).
        proc.terminate()
        proc.wait(10)
        proc, log = controller(lab, vecgate, api_ns, w, gw, tmp_path, extra=("--table-size", "1009"))
        lines = wait_for("the resized sync", lambda: [l for l in log.read_text().splitlines() if "initial sync done" in l])
        rows = {r["name"]: r for r in gw.ctl("show", "lb", "services")["data"] if r["name"] in ids}
        assert changes_of(lines[0]) == 2 * len(ids), lines  # each deleted and added again
        assert {(r["table_size"], r["configured_table_size"]) for r in rows.values()} == {(1009, 1009)}, rows
        assert len(backends(gw, rs)) == 3
        ids = managed_ids(gw)

        # The gateway restarted under the running controller: back from its config file
        # alone, then the controller's services again, without a Kubernetes event. The
        # controller tells by the gateway's instance (pid and start time), not by reading
        # every LB service back every 5 s.
        before = gw.ctl("show", "instance")["data"]
        gw.restart()
        after = gw.ctl("show", "instance")["data"]
        assert before["instance"] != after["instance"], (before, after)
        for i in range(3):
            lab.run(c, "ping", "-c", "2", "-i", "0.2", "-W", "1", NODE_B[i], check=False)
            lab.run(f"{lab.prefix}-be{i}", "ping", "-c", "2", "-i", "0.2", "-W", "1", NODE_B[i], check=False)
        wait_for("the LB services applied again", lambda: set(managed_ids(gw)) == set(ids) and len(backends(gw, rs)) == 3)
        assert "gateway resynced" in log.read_text()
        r = who(lab, c, "198.18.128.50", 80, 30)
        assert set(a.split()[0] for a in r["answers"]) == {"be0", "be1", "be2"}, r
        assert proc.poll() is None, log.read_text()
    finally:
        proc.terminate()
        proc.wait(10)
    kubectl(api_ns, w, "delete", "service", "rs")
    kubectl(api_ns, w, "delete", "endpointslice", "rs-1")
    assert gw.stop()[0] == 0


def test_an_external_address_moved_between_services_is_applied_once_freed(api, lab, vecgate, tmp_path):
    """An external address moved from one Service to another, added to the second first:
    refused while the first holds it, applied once the first lets it go, without another
    event of the second."""
    api_ns, w = api
    c, gw = dataplane(lab, vecgate, tmp_path)
    http = [{"name": "http", "port": 8080, "protocol": "TCP"}]
    tcp80 = [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]
    apply(api_ns, w, [service("mv", "198.18.128.52", tcp80, externalIPs=["198.18.140.6"]),
                      endpoint_slice("mv-1", "mv", http, [endpoint(a) for a in BACKENDS[1:]]),
                      service("mv2", "198.18.128.53", tcp80),
                      endpoint_slice("mv2-1", "mv2", http, [endpoint(BACKENDS[0])])])
    ext, ext2 = "default/mv:http@198.18.140.6", "default/mv2:http@198.18.140.6"
    proc, log = controller(lab, vecgate, api_ns, w, gw, tmp_path)
    try:
        wait_for("the first sync", lambda: backends(gw, ext) and backends(gw, "default/mv2:http@198.18.128.53"))
        kubectl(api_ns, w, "patch", "service", "mv2", "--type=merge", "-p", '{"spec":{"externalIPs":["198.18.140.6"]}}')
        wait_for("the refusal", lambda: "change refused" in log.read_text())
        assert backends(gw, ext2) is None
        kubectl(api_ns, w, "patch", "service", "mv", "--type=json", "-p", '[{"op":"remove","path":"/spec/externalIPs"}]')
        wait_for("the address passed to mv2", lambda: backends(gw, ext) is None and backends(gw, ext2) is not None)
        assert set(backends(gw, ext2)) == {(BACKENDS[0], 8080)}
        r = who(lab, c, "198.18.140.6", 80, 10)
        assert set(a.split()[0] for a in r["answers"]) == {"be0"}, r
        assert proc.poll() is None, log.read_text()
    finally:
        proc.terminate()
        proc.wait(10)
    kubectl(api_ns, w, "delete", "service", "mv", "mv2")
    kubectl(api_ns, w, "delete", "endpointslice", "mv-1", "mv2-1")
    assert gw.stop()[0] == 0


def test_a_table_size_the_lb_refuses_stops_the_controller_at_start(vecgate, tmp_path):
    """--table-size 1000 (not a prime) would make every LB service invalid, and the
    controller made none, saying nothing: it now refuses to start, naming the option,
    before it reads a kubeconfig or reaches a gateway."""
    r = subprocess.run([str(vecgate), "k8s", "--socket", str(tmp_path / "none.sock"), "--kubeconfig", str(tmp_path / "none"),
                        "--table-size", "1000"], capture_output=True, text=True, timeout=30)
    assert r.returncode != 0 and "--table-size 1000: expected 0 (sized by the backends) or a prime" in r.stderr, r.stderr


def test_a_controller_without_a_node_name_says_what_that_costs(api, lab, vecgate, tmp_path):
    """Without --node-name no endpoint is local (kube-proxy always has its node): Local
    policies would send nothing, so the controller says so at start."""
    api_ns, w = api
    c, gw = dataplane(lab, vecgate, tmp_path)
    proc, log = controller(lab, vecgate, api_ns, w, gw, tmp_path, node=None)
    try:
        wait_for("the first sync", lambda: "initial sync done" in log.read_text())
        assert "no --node-name: no endpoint is this node's" in log.read_text(), log.read_text()
    finally:
        proc.terminate()
        proc.wait(10)
    assert gw.stop()[0] == 0


def kube_proxy_backends(api_ns, policy="service"):
    """kube-proxy's choice per service port: the endpoints its service chains jump to
    (nftables mode: `service-<hash>-<ns>/<name>/<proto>/<port>` chains with a vmap to
    `endpoint-<hash>-<ns>/<name>/<proto>/<port>__<addr>/<port>` chains); `policy="local"`:
    its `local-…` chains (a Local traffic policy's, this node's endpoints)."""
    text = sh("ip", "netns", "exec", api_ns, "nft", "list", "table", "ip", "kube-proxy").stdout
    out = {}
    chain = None
    for line in text.splitlines():
        m = re.match(rf"\s*chain {policy}-\w+-(\S+) \{{", line)
        if m:
            chain = m.group(1)
            out.setdefault(chain, set())
            continue
        if re.match(r"\s*chain ", line):
            chain = None
        if chain:
            for ns_, name, proto, port, addr, tport in re.findall(r"endpoint-\w+-([^/\s]+)/([^/\s]+)/(\w+)/(\w*)__([\d.]+)/(\d+)", line):
                out[chain].add((addr, int(tport)))
    return out


def ensure_kube_proxy(w):
    """kube-proxy (nftables mode, node n1) on the module's API server, started once."""
    pid = w / "kube-proxy.pid"
    if pid.exists() and Path(f"/proc/{pid.read_text().strip()}").exists():
        return
    r = subprocess.run([str(K8S / "proxy.sh"), str(w), "--bin", str(BIN_DIR)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


def kube_proxy_filter_verdict(api_ns, vip, port):
    """kube-proxy's verdict for a service port it does not send to an endpoint (its
    `no-endpoint-services` map: `drop` or `goto reject-chain`), or None."""
    text = sh("ip", "netns", "exec", api_ns, "nft", "list", "map", "ip", "kube-proxy", "no-endpoint-services", check=False).stdout
    m = re.search(re.escape(f"{vip} . tcp . {port}") + r'(?: comment "[^"]*")? : (drop|goto reject-chain)', text)
    return m.group(1) if m else None


def connect_once(lab, ns, host, port):
    """One TCP connection attempt: connected, refused (an RST or ICMP unreachable) or
    no answer."""
    code = f"""
import socket
s = socket.socket(); s.settimeout(3)
try:
    s.connect(({host!r}, {port})); print("connected")
except socket.timeout:
    print("no answer")
except ConnectionRefusedError:
    print("refused")
"""
    return lab.run(ns, sys.executable, "-c", code, timeout=30).stdout.strip()


def test_internal_traffic_policy_local_without_local_endpoints_drops_as_kube_proxy(api, lab, vecgate, tmp_path):
    """internalTrafficPolicy: Local with endpoints on other nodes only: kube-proxy drops
    what this node sends to the cluster IP ("has no local endpoints"), it does not refuse
    it; vecgate's LB service holds the endpoints as not local and drops too (counted
    no-local-backend). With a local endpoint, both send to it alone."""
    api_ns, w = api
    c, gw = dataplane(lab, vecgate, tmp_path)
    http = [{"name": "http", "port": 8080, "protocol": "TCP"}]
    tcp80 = [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]
    apply(api_ns, w, [
        service("itl", "198.18.128.60", tcp80, internalTrafficPolicy="Local"),
        endpoint_slice("itl-1", "itl", http, [endpoint(BACKENDS[1], node="n2"), endpoint(BACKENDS[2], node="n2")]),
        service("itl2", "198.18.128.61", tcp80, internalTrafficPolicy="Local"),
        endpoint_slice("itl2-1", "itl2", http, [endpoint(BACKENDS[0]), endpoint(BACKENDS[1], node="n2")]),
    ])
    ensure_kube_proxy(w)
    proc, log = controller(lab, vecgate, api_ns, w, gw, tmp_path)
    itl, itl2 = "default/itl:http@198.18.128.60", "default/itl2:http@198.18.128.61"
    try:
        def eligible(name):
            b = backends(gw, name)
            return b and {a for (a, _), (_, e) in b.items() if e}
        wait_for("the controller's sync", lambda: backends(gw, itl) and len(backends(gw, itl)) == 2 and eligible(itl2))
        assert eligible(itl) == set() and eligible(itl2) == {BACKENDS[0]}
        assert wait_for("kube-proxy's drop", lambda: kube_proxy_filter_verdict(api_ns, "198.18.128.60", 80)) == "drop"
        kp = wait_for("kube-proxy's itl2",
                      lambda: {k: v for k, v in kube_proxy_backends(api_ns, "local").items() if k == "default/itl2/tcp/http" and v})
        assert kp["default/itl2/tcp/http"] == {(BACKENDS[0], 8080)}, kp

        assert connect_once(lab, c, "198.18.128.60", 80) == "no answer"
        errors = gw.errors()
        assert errors.get(("lb4-nat", "no-local-backend"), 0) >= 1 and errors.get(("lb4-nat", "no-backend"), 0) == 0, errors
        r = who(lab, c, "198.18.128.61", 80, 10)
        assert {a.split()[0] for a in r["answers"]} == {"be0"}, r
        assert "change refused" not in log.read_text() and proc.poll() is None, log.read_text()
    finally:
        proc.terminate()
        proc.wait(10)
    kubectl(api_ns, w, "delete", "service", "itl", "itl2")
    kubectl(api_ns, w, "delete", "endpointslice", "itl-1", "itl2-1")
    assert gw.stop()[0] == 0


def test_kube_proxy_nftables_selects_the_same_backends(api, lab, vecgate, tmp_path):
    api_ns, w = api
    c, gw = dataplane(lab, vecgate, tmp_path)
    http = [{"name": "http", "port": 8080, "protocol": "TCP"}]
    tcp80 = [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]
    apply(api_ns, w, [
        # two ready, one terminating: the ready ones
        service("mixed", "198.18.128.30", tcp80),
        endpoint_slice("mixed-1", "mixed", http, [endpoint(BACKENDS[0]), endpoint(BACKENDS[1]), endpoint(BACKENDS[2], False, True, True)]),
        # none ready: the serving terminating one, not the one that stopped serving
        service("draining", "198.18.128.31", tcp80),
        endpoint_slice("draining-1", "draining", http, [endpoint(BACKENDS[1], False, True, True), endpoint(BACKENDS[2], False, False, True)]),
        # endpoints split over two slices
        service("split", "198.18.128.32", tcp80),
        endpoint_slice("split-1", "split", http, [endpoint(BACKENDS[0])]),
        endpoint_slice("split-2", "split", http, [endpoint(BACKENDS[2])]),
        # ready while terminating (publishNotReadyAddresses): new connections as any ready one
        service("pnr", "198.18.128.33", tcp80, publishNotReadyAddresses=True),
        endpoint_slice("pnr-1", "pnr", http, [endpoint(BACKENDS[0], True, True, True), endpoint(BACKENDS[1])]),
    ])
    ensure_kube_proxy(w)
    proc, log = controller(lab, vecgate, api_ns, w, gw, tmp_path)
    want = {"mixed": {BACKENDS[0], BACKENDS[1]}, "draining": {BACKENDS[1]}, "split": {BACKENDS[0], BACKENDS[2]},
            "pnr": {BACKENDS[0], BACKENDS[1]}}
    try:
        def ours():
            rows = gw.ctl("show", "lb", "backends")["data"]
            got = {}
            for r in rows:
                got.setdefault(r["service"].split("/")[1].split(":")[0], set())
                if r["eligible"]:
                    got[r["service"].split("/")[1].split(":")[0]].add((r["addr"], r["port"]))
            return got if set(want) <= set(got) else None
        vg = wait_for("the controller's sync", ours)

        def theirs():
            kp = kube_proxy_backends(api_ns)
            got = {k.split("/")[1]: v for k, v in kp.items() if k.startswith("default/") and k.split("/")[1] in want}
            return got if set(got) == set(want) else None
        kp = wait_for("kube-proxy's sync", theirs)
        for svc in want:
            assert {a for a, _ in kp[svc]} == want[svc], (svc, kp)
            assert kp[svc] == vg[svc], (svc, kp[svc], vg[svc])

        # Traffic through both: Linux clients reach the same backend sets. kube-proxy's
        # side: servers on the API namespace's lo, a client there, a route to the service
        # range over a spare veth (the lab's recipe).
        N = ["ip", "netns", "exec", api_ns]
        sh(*N, "ip", "link", "add", "vk0", "type", "veth", "peer", "name", "vk1", check=False)
        sh(*N, "ip", "addr", "replace", "198.18.9.1/24", "dev", "vk0")
        sh(*N, "ip", "link", "set", "vk0", "up")
        sh(*N, "ip", "link", "set", "vk1", "up")
        sh(*N, "ip", "neigh", "replace", "198.18.9.2", "lladdr", "02:00:00:00:09:02", "dev", "vk0", "nud", "permanent")
        sh(*N, "ip", "route", "replace", "198.18.128.0/20", "via", "198.18.9.2")
        for a in BACKENDS:
            sh(*N, "ip", "addr", "replace", f"{a}/32", "dev", "lo")
        serve_backends(lab, api_ns)
        names = {f"be{i}": a for i, a in enumerate(BACKENDS)}
        for svc, vip in (("mixed", "198.18.128.30"), ("draining", "198.18.128.31"), ("split", "198.18.128.32"), ("pnr", "198.18.128.33")):
            through_vecgate = {names[a.split()[0]] for a in who(lab, c, vip, 80, 24)["answers"]}
            through_kube_proxy = {a.split()[0] for a in who(lab, api_ns, vip, 80, 24)["answers"]}
            assert through_vecgate == through_kube_proxy == want[svc], (svc, through_vecgate, through_kube_proxy)
    finally:
        proc.terminate()
        proc.wait(10)
    kubectl(api_ns, w, "delete", "service", "mixed", "draining", "split", "pnr")
    kubectl(api_ns, w, "delete", "endpointslice", "mixed-1", "draining-1", "split-1", "split-2", "pnr-1")
    assert gw.stop()[0] == 0


def http_get(ns, host, port, path="/"):
    """One GET from inside `ns`: (status, JSON body or None, headers lower-cased), or
    None when nothing listens (connection refused)."""
    code = f"""
import http.client, json, sys
c = http.client.HTTPConnection({host!r}, {port}, timeout=15)
try:
    c.request("GET", {path!r})
except ConnectionRefusedError:
    print("null"); sys.exit()
r = c.getresponse(); body = r.read()
try:
    body = json.loads(body)
except ValueError:
    body = None
print(json.dumps([r.status, body, {{k.lower(): v for k, v in r.getheaders()}}]))
"""
    r = sh("ip", "netns", "exec", ns, sys.executable, "-c", code)
    return json.loads(r.stdout.strip().splitlines()[-1])


def small_gateway(lab, vecgate, tmp):
    """A gateway with one link and a load balancer: enough for the controller to program."""
    c, g = lab.ns("c"), lab.dataplane_ns("gw")
    lab.veth(c, "a0", g, "a1")
    cfg = """
[[interface]]
name = "a"
type = "af_packet"
host_if = "a1"
mac = "02:00:00:00:00:0a"
addresses = ["198.18.0.1/24"]

[lb]
snat4 = "198.18.0.1"
"""
    return Vecgate(lab, vecgate, g, cfg, tmp)


HC_PORT = 32101          # the Service's healthCheckNodePort
OUR_HEALTHZ = 10266      # ours beside kube-proxy's 127.0.0.1:10256 in the API namespace


def test_health_check_node_port_answers_as_kube_proxy(api, lab, vecgate, tmp_path):
    """A LoadBalancer Service with externalTrafficPolicy Local: the controller listens on
    its healthCheckNodePort and answers a load balancer's checks as kube-proxy does, and
    real kube-proxy (nftables mode, node n1, on the same API server) is the differential
    oracle: for each state of the Service's slice both give the same status, the same JSON
    fields and the same headers. Both run in the API server's namespace: kube-proxy
    listens on the node's primary address (198.18.8.1, its nftables-mode default
    --nodeport-addresses), ours on 127.0.0.1 (--health-check-bind-address), the same port.
    A local ready endpoint: 200, localEndpoints 1; not ready (terminating) or on another
    node: 503, 0; two: 200, 2. The proxy health server (/healthz, on a port beside
    kube-proxy's) says 503 and nodeEligible false while the Node carries the cluster
    autoscaler's ToBeDeletedByClusterAutoscaler taint, as kube-proxy's (compared), 200
    without; it answers 200 while the gateway answers, 503 once it has been gone for
    --healthz-timeout (1 s here) after a request found it unreachable, and the Service's
    check then says serviceProxyHealthy false, 503. The Service deleted: its
    port closes (kube-proxy's too)."""
    api_ns, w = api
    gw = small_gateway(lab, vecgate, tmp_path)
    http = [{"name": "http", "port": 8080, "protocol": "TCP"}]
    tcp80 = [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]
    hc = service("hc", "198.18.128.70", tcp80, type="LoadBalancer", externalTrafficPolicy="Local", healthCheckNodePort=HC_PORT)

    def hc_slice(*endpoints):
        return endpoint_slice("hc-1", "hc", http, list(endpoints))

    apply(api_ns, w, [hc, hc_slice(endpoint(BACKENDS[0]))])
    ensure_kube_proxy(w)
    proc, log = controller(lab, vecgate, api_ns, w, gw, tmp_path, extra=(
        "--health-check-bind-address", "127.0.0.1", "--healthz-bind-address", f"127.0.0.1:{OUR_HEALTHZ}", "--healthz-timeout", "1"))
    fields = ("content-type", "x-content-type-options", "x-load-balancing-endpoint-weight")

    def both(status, count):
        """Ours and kube-proxy's answers once both are (status, count); they must agree."""
        def answers():
            ours, theirs = http_get(api_ns, "127.0.0.1", HC_PORT), http_get(api_ns, "198.18.8.1", HC_PORT)
            ok = all(a and (a[0], (a[1] or {}).get("localEndpoints")) == (status, count) for a in (ours, theirs))
            return (ours, theirs) if ok else None
        ours, theirs = wait_for(f"{status} with {count} local endpoints from both", answers, timeout=30)
        assert ours[1] == theirs[1] == {"service": {"namespace": "default", "name": "hc"}, "localEndpoints": count,
                                        "serviceProxyHealthy": True}, (ours, theirs)
        assert [ours[2].get(h) for h in fields] == [theirs[2].get(h) for h in fields] == ["application/json", "nosniff", str(count)]
    try:
        both(200, 1)
        status, body, _ = http_get(api_ns, "127.0.0.1", OUR_HEALTHZ, "/healthz")
        assert status == 200 and body["nodeEligible"] is True, body
        assert http_get(api_ns, "127.0.0.1", OUR_HEALTHZ, "/livez")[0] == 200
        assert http_get(api_ns, "127.0.0.1", OUR_HEALTHZ, "/nothing")[0] == 404
        assert "health check port open" in log.read_text()

        apply(api_ns, w, [hc_slice(endpoint(BACKENDS[0], False, True, True))])   # terminating, still serving
        both(503, 0)
        apply(api_ns, w, [hc_slice(endpoint(BACKENDS[0], node="n2"))])           # on another node
        both(503, 0)
        apply(api_ns, w, [hc_slice(endpoint(BACKENDS[0]), endpoint(BACKENDS[1]), endpoint(BACKENDS[2], node="n2"))])
        both(200, 2)

        # The node tainted for removal by the cluster autoscaler: /healthz 503 with
        # nodeEligible false from both (kube-proxy's on 127.0.0.1:10256), /livez and the
        # Service's check unchanged; the taint removed, 200 again.
        def healthz(eligible):
            want = (200 if eligible else 503, eligible)

            def pair():
                ours = http_get(api_ns, "127.0.0.1", OUR_HEALTHZ, "/healthz")
                theirs = http_get(api_ns, "127.0.0.1", 10256, "/healthz")
                return all(a and a[1] and (a[0], a[1]["nodeEligible"]) == want for a in (ours, theirs))
            wait_for(f"/healthz {want} from both", pair, timeout=30)
        kubectl(api_ns, w, "taint", "node", "n1", "ToBeDeletedByClusterAutoscaler=1700000000:NoSchedule")
        try:
            healthz(False)
            assert http_get(api_ns, "127.0.0.1", OUR_HEALTHZ, "/livez")[0] == http_get(api_ns, "127.0.0.1", 10256, "/livez")[0] == 200
            both(200, 2)
        finally:
            kubectl(api_ns, w, "taint", "node", "n1", "ToBeDeletedByClusterAutoscaler-")
        healthz(True)

        # The gateway gone: unhealthy once a request finds it unreachable (here the next
        # event's, the other node's endpoint removed; else the 5 s check's) and the timeout.
        assert gw.stop()[0] == 0
        t0 = time.time()
        apply(api_ns, w, [hc_slice(endpoint(BACKENDS[0]), endpoint(BACKENDS[1]))])
        wait_for("/healthz 503", lambda: http_get(api_ns, "127.0.0.1", OUR_HEALTHZ, "/healthz")[0] == 503, timeout=30)
        assert time.time() - t0 >= 1
        status, body, _ = http_get(api_ns, "127.0.0.1", HC_PORT)
        assert (status, body["localEndpoints"], body["serviceProxyHealthy"]) == (503, 2, False), body
        assert http_get(api_ns, "127.0.0.1", OUR_HEALTHZ, "/livez")[0] == 503

        kubectl(api_ns, w, "delete", "service", "hc")
        wait_for("our port closed", lambda: http_get(api_ns, "127.0.0.1", HC_PORT) is None)
        wait_for("kube-proxy's port closed", lambda: http_get(api_ns, "198.18.8.1", HC_PORT) is None)
        assert proc.poll() is None, log.read_text()
    finally:
        proc.terminate()
        proc.wait(10)
        kubectl(api_ns, w, "delete", "service", "hc", "--ignore-not-found")
        kubectl(api_ns, w, "delete", "endpointslice", "hc-1", "--ignore-not-found")
    text = log.read_text()
    assert "cannot be bound" not in text and "change refused" not in text and "watch failed" not in text, text


HC6_PORT = 32102


def test_dual_stack_health_check_counts_one_family_as_kube_proxy(api, lab, vecgate, tmp_path):
    """A dual-stack LoadBalancer Service with externalTrafficPolicy Local, real kube-proxy
    (nftables, node n1) as the oracle. kube-proxy v1.31 runs a proxier per family, each
    with a health server counting its own family's local endpoints; both try to bind the
    one healthCheckNodePort and one holds it. So its localEndpoints is one family's count,
    never the sum: with two local pods each in both families, both answer 200 with 2
    (the same body and headers). With local endpoints in one family only, kube-proxy says
    200/2 for one family and 503/0 for the other (the one whose proxier holds the port
    counts; which one varies from run to run: IPv4 when this test runs alone, IPv6 after
    the test above here); ours says 200/2 for either (the family with endpoints). Our controller runs in
    a namespace of its own, reaching the API server over a veth, so that its listener does
    not take the port kube-proxy's proxiers race for."""
    api_ns, w = api
    c, g = lab.ns("c"), lab.dataplane_ns("gw")
    lab.veth(c, "a0", g, "a1")
    gw = Vecgate(lab, vecgate, g, """
[[interface]]
name = "a"
type = "af_packet"
host_if = "a1"
mac = "02:00:00:00:00:0a"
addresses = ["198.18.0.1/24", "2001:db8::1/64"]

[lb]
snat4 = "198.18.0.1"
snat6 = "2001:db8::1"
""", tmp_path)
    k = lab.ns("k")
    lab.veth(k, "k0", api_ns, f"{lab.prefix[-6:]}k1")
    lab.run(k, "ip", "addr", "add", "198.18.9.2/30", "dev", "k0")
    lab.run(api_ns, "ip", "addr", "add", "198.18.9.1/30", "dev", f"{lab.prefix[-6:]}k1")
    lab.run(k, "ip", "route", "add", "198.18.8.1/32", "via", "198.18.9.1")
    kubeconfig = tmp_path / "vecgate-k.kubeconfig"
    kubeconfig.write_text(re.sub(r"https://127\.0\.0\.1:(\d+)", r"https://198.18.8.1:\1", (w / "vecgate.kubeconfig").read_text()))

    http = [{"name": "http", "port": 8080, "protocol": "TCP"}]
    tcp80 = [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]
    svc = service("hc6", "198.18.128.72", tcp80, type="LoadBalancer", externalTrafficPolicy="Local", healthCheckNodePort=HC6_PORT,
                  clusterIPs=["198.18.128.72", "2001:db8:128::72"], ipFamilies=["IPv4", "IPv6"], ipFamilyPolicy="RequireDualStack")
    pods = [("198.19.1.10", "2001:db8:19:1::10"), ("198.19.1.11", "2001:db8:19:1::11"), ("198.19.2.10", "2001:db8:19:2::10")]

    def slices(v4_nodes, v6_nodes):
        """The two family slices; pod i's endpoints on v4_nodes[i] / v6_nodes[i]."""
        s4 = endpoint_slice("hc6-v4", "hc6", http, [endpoint(p[0], node=n) for p, n in zip(pods, v4_nodes)])
        s6 = endpoint_slice("hc6-v6", "hc6", http, [endpoint(p[1], node=n) for p, n in zip(pods, v6_nodes)])
        s6["addressType"] = "IPv6"
        return [s4, s6]

    local, away = ["n1", "n1", "n2"], ["n2", "n2", "n2"]
    apply(api_ns, w, [svc, *slices(local, local)])
    ensure_kube_proxy(w)
    log = open(tmp_path / "k8s.log", "w")
    proc = lab.spawn_to(k, log, str(vecgate), "k8s", "--socket", gw.sock, "--kubeconfig", str(kubeconfig), "--node-name", "n1",
                        "--health-check-bind-address", "127.0.0.1", "--healthz-bind-address", "127.0.0.1:10266")
    fields = ("content-type", "x-content-type-options", "x-load-balancing-endpoint-weight")

    def answer(a):
        return a and (a[0], (a[1] or {}).get("localEndpoints"))

    def settled(want_ours, theirs_ok):
        """Both answers once ours is want_ours and theirs passes theirs_ok."""
        def pair():
            ours, theirs = http_get(k, "127.0.0.1", HC6_PORT), http_get(api_ns, "198.18.8.1", HC6_PORT)
            return (ours, theirs) if answer(ours) == want_ours and theirs_ok(answer(theirs)) else None
        return wait_for(f"ours {want_ours}", pair, timeout=40)
    try:
        # Two local pods, each in both families: 2 from both, not 4.
        ours, theirs = settled((200, 2), lambda a: a == (200, 2))
        assert ours[1] == theirs[1] == {"service": {"namespace": "default", "name": "hc6"}, "localEndpoints": 2,
                                        "serviceProxyHealthy": True}, (ours, theirs)
        assert [ours[2].get(h) for h in fields] == [theirs[2].get(h) for h in fields] == ["application/json", "nosniff", "2"]
        # One family local only, each in turn: kube-proxy counts the family that holds
        # its port (the other says 0), ours the family with endpoints.
        one = (200, 2), (503, 0)
        seen = {}
        for name, (v4_nodes, v6_nodes) in {"IPv4": (local, away), "IPv6": (away, local)}.items():
            # From both families local (200, 2 from both), so that kube-proxy's answer
            # before it syncs the change is (200, 2).
            apply(api_ns, w, slices(local, local))
            settled((200, 2), lambda a: a == (200, 2))
            apply(api_ns, w, slices(v4_nodes, v6_nodes))
            settled((200, 2), lambda a: a in one)
            # kube-proxy's answer before its sync (200, 2) is one of the two: its 503 is
            # waited for (its sync takes about a second), else it says 200.
            end, last = time.time() + 8, None
            while time.time() < end and last != (503, 0):
                last = answer(http_get(api_ns, "198.18.8.1", HC6_PORT))
                time.sleep(0.2)
            seen[name] = last
        assert sorted(seen.values()) == sorted(one), f"kube-proxy counts one family: {seen}"
        holder = next(f for f, a in seen.items() if a == (200, 2))
        print(f"kube-proxy's {holder} proxier holds the health check port: {seen}")
        kp_log = (w / "kube-proxy.log").read_text()
        assert "dual-stack" in kp_log, "kube-proxy runs both families' proxiers"
        assert proc.poll() is None, (tmp_path / "k8s.log").read_text()
    finally:
        proc.terminate()
        proc.wait(10)
        kubectl(api_ns, w, "delete", "service", "hc6", "--ignore-not-found")
        kubectl(api_ns, w, "delete", "endpointslice", "hc6-v4", "hc6-v6", "--ignore-not-found")
    text = (tmp_path / "k8s.log").read_text()
    assert "cannot be bound" not in text and "change refused" not in text and "watch failed" not in text, text


def test_load_balancer_source_ranges_filter_the_ingress_address(api, lab, vecgate, tmp_path):
    """A LoadBalancer Service with loadBalancerSourceRanges and an ingress address in its
    status (set as a cloud controller would): the ingress address's LB service carries
    the ranges (`show lb services`), the cluster IP's none; the client inside them is
    served; a change of the ranges reaches the gateway."""
    api_ns, w = api
    c, gw = dataplane(lab, vecgate, tmp_path)
    http = [{"name": "http", "port": 8080, "protocol": "TCP"}]
    tcp80 = [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]
    apply(api_ns, w, [service("rg", "198.18.128.54", tcp80, type="LoadBalancer", loadBalancerSourceRanges=["198.18.0.0/28"]),
                      endpoint_slice("rg-1", "rg", http, [endpoint(a) for a in BACKENDS])])
    kubectl(api_ns, w, "patch", "service", "rg", "--subresource=status", "--type=merge",
            "-p", '{"status":{"loadBalancer":{"ingress":[{"ip":"198.18.140.7"}]}}}')
    ing, cip = "default/rg:http@198.18.140.7", "default/rg:http@198.18.128.54"
    proc, log = controller(lab, vecgate, api_ns, w, gw, tmp_path)

    def ranges():
        rows = {r["name"]: r for r in gw.ctl("show", "lb", "services")["data"]}
        return rows.get(ing, {}).get("source_ranges"), rows.get(cip, {}).get("source_ranges")

    try:
        wait_for("the ingress address with its ranges", lambda: ranges() == (["198.18.0.0/28"], []))
        r = who(lab, c, "198.18.140.7", 80, 5)
        assert len(r["answers"]) == 5, r
        kubectl(api_ns, w, "patch", "service", "rg", "--type=merge", "-p", '{"spec":{"loadBalancerSourceRanges":["198.18.0.64/26"]}}')
        wait_for("the new ranges", lambda: ranges() == (["198.18.0.64/26"], []))
        assert proc.poll() is None, log.read_text()
    finally:
        proc.terminate()
        proc.wait(10)
    kubectl(api_ns, w, "delete", "service", "rg")
    kubectl(api_ns, w, "delete", "endpointslice", "rg-1")
    assert gw.stop()[0] == 0
