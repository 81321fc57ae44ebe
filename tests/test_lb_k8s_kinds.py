"""`vecgate k8s` with the Service kinds beyond ClusterIP over IPv4 (tests/test_lb_k8s.py
covers those, with terminating endpoints): NodePort, LoadBalancer with external IPs and
an ingress address in its status, an IPv6 ClusterIP, sessionAffinity ClientIP, and a
Service annotated for direct server return (`vecgate.io/forwarding`), made with kubectl
on a real kube-apiserver. Real kube-proxy (nftables mode) on the same API
server is the differential oracle: for every Service port, the backends its service
chain jumps to are the backends vecgate's LB services made from that port take new
connections with, over both families. Linux clients then reach the NodePort, the
external and ingress addresses and the affine service through vecgate and through
kube-proxy's rules, and see the same backend sets."""
import re
import subprocess
from collections import Counter

from netns import sh
from test_lb_k8s import (BACKENDS, BIN_DIR, K8S, PEER, api, apply, controller, dataplane, endpoint, endpoint_slice,  # noqa: F401
                         kubectl, serve_backends, service, wait_for, who)

BACKENDS6 = ["2001:db8:100::10", "2001:db8:100::20"]
NAMES = {f"be{i}": a for i, a in enumerate(BACKENDS)}


def kube_proxy_chains(api_ns):
    """kube-proxy's backends per service port, both families: `service-<hash>-<ns>/<name>/<proto>/<port>`
    chains with a vmap to `endpoint-<hash>-…__<addr>/<port>` chains."""
    out = {}
    for family in ("ip", "ip6"):
        text = sh("ip", "netns", "exec", api_ns, "nft", "list", "table", family, "kube-proxy", check=False).stdout
        chain = None
        for line in text.splitlines():
            m = re.match(r"\s*chain service-\w+-(\S+) \{", line)
            if m:
                chain = m.group(1)
                out.setdefault(chain, set())
                continue
            if re.match(r"\s*chain ", line):
                chain = None
            if chain:
                for addr, tport in re.findall(r"endpoint-\w+-[^_\s]+__([0-9a-f.:]+)/(\d+)", line):
                    # Chain names spell IPv6 addresses with dots for colons.
                    out[chain].add((addr.replace(".", ":") if family == "ip6" else addr, int(tport)))
    return out


def ours(gw):
    """vecgate's LB services by name: the row, and the (addr, port) of its eligible backends."""
    rows = {r["name"]: r for r in gw.ctl("show", "lb", "services")["data"]}
    eligible = {}
    for b in gw.ctl("show", "lb", "backends")["data"]:
        if b["eligible"]:
            eligible.setdefault(b["service"], set()).add((b["addr"], b["port"]))
    return {n: (r, eligible.get(n, set())) for n, r in rows.items()}


def test_other_service_kinds_match_kube_proxy(api, lab, vecgate, tmp_path):
    api_ns, w = api
    c, gw = dataplane(lab, vecgate, tmp_path)
    http = [{"name": "http", "port": 8080, "protocol": "TCP"}]

    def port(node_port=None):
        p = {"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}
        return [p | ({"nodePort": node_port} if node_port else {})]

    six = endpoint_slice("six-1", "six", http, [endpoint(a) for a in BACKENDS6])
    six["addressType"] = "IPv6"
    # Direct server return asked for by annotation (the backends on the service's port;
    # the host kernel cannot decapsulate, so only the mapping is checked here).
    dsr = service("dsr", "198.18.128.43", [{"name": "http", "port": 80, "targetPort": 80, "protocol": "TCP"}])
    dsr["metadata"]["annotations"] = {"vecgate.io/forwarding": "gue", "vecgate.io/gue-port": "5555"}
    apply(api_ns, w, [
        service("np", "198.18.128.40", port(30080), type="NodePort"),
        endpoint_slice("np-1", "np", http, [endpoint(BACKENDS[0]), endpoint(BACKENDS[1])]),
        # An IPv6 external IP of an IPv4-only Service: kube-proxy serves it in no family.
        service("lbx", "198.18.128.41", port(30081), type="LoadBalancer", externalIPs=["198.18.140.1", "2001:db8:140::1"]),
        endpoint_slice("lbx-1", "lbx", http, [endpoint(BACKENDS[1]), endpoint(BACKENDS[2])]),
        service("six", "2001:db8:128::10", port(), ipFamilies=["IPv6"], ipFamilyPolicy="SingleStack"),
        six,
        service("sticky", "198.18.128.42", port(), sessionAffinity="ClientIP",
                sessionAffinityConfig={"clientIP": {"timeoutSeconds": 600}}),
        endpoint_slice("sticky-1", "sticky", http, [endpoint(a) for a in BACKENDS]),
        dsr,
        endpoint_slice("dsr-1", "dsr", [{"name": "http", "port": 80, "protocol": "TCP"}], [endpoint(a) for a in BACKENDS[:2]]),
    ])
    kubectl(api_ns, w, "patch", "service", "lbx", "--subresource=status", "--type=merge",
            # ipMode Proxy: its load balancer sends on to the nodes; kube-proxy leaves it alone.
            "-p", '{"status":{"loadBalancer":{"ingress":[{"ip":"198.18.141.1"},{"ip":"198.18.141.9","ipMode":"Proxy"}]}}}')
    r = subprocess.run([str(K8S / "proxy.sh"), str(w), "--bin", str(BIN_DIR)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    proc, log = controller(lab, vecgate, api_ns, w, gw, tmp_path)
    # Each Service port's LB services in vecgate: (type, address, port, affinity).
    want = {
        "np": {("node_port", "0.0.0.0", 30080), ("cluster_ip", "198.18.128.40", 80)},
        "lbx": {("node_port", "0.0.0.0", 30081), ("cluster_ip", "198.18.128.41", 80), ("load_balancer", "198.18.140.1", 80),
                ("load_balancer", "198.18.141.1", 80)},
        "six": {("cluster_ip", "2001:db8:128::10", 80)},
        "sticky": {("cluster_ip", "198.18.128.42", 80)},
        "dsr": {("cluster_ip", "198.18.128.43", 80)},
    }
    try:
        def synced():
            o = ours(gw)
            got = {}
            for name, (row, _) in o.items():
                m = re.match(r"default/(\w+):", name)
                if m and m.group(1) in want:
                    got.setdefault(m.group(1), set()).add((row["type"], row["vip"], row["port"]))
            return o if got == want else None
        mine = wait_for("the controller's sync of every kind", synced, timeout=60)

        def kp_synced():
            kp = kube_proxy_chains(api_ns)
            got = {k.split("/")[1]: v for k, v in kp.items() if k.startswith("default/") and k.split("/")[1] in want}
            return got if set(got) == set(want) and all(got.values()) else None
        kp = wait_for("kube-proxy's sync", kp_synced, timeout=60)
        expected = {"np": {(a, 8080) for a in BACKENDS[:2]}, "lbx": {(a, 8080) for a in BACKENDS[1:]},
                    "six": {(a, 8080) for a in BACKENDS6}, "sticky": {(a, 8080) for a in BACKENDS}, "dsr": {(a, 80) for a in BACKENDS[:2]}}
        for svc, backends in expected.items():
            assert kp[svc] == backends, (svc, kp[svc])
            for name, (row, eligible) in mine.items():
                if name.startswith(f"default/{svc}:"):
                    assert eligible == kp[svc], (name, eligible, kp[svc])
        sticky = [r for n, (r, _) in mine.items() if n.startswith("default/sticky:")][0]
        assert sticky["affinity"] == {"kind": "client_ip", "timeout_s": 600}, sticky
        assert all(r["affinity"] == {"kind": "none"} for n, (r, _) in mine.items() if not n.startswith("default/sticky:"))
        modes = {n: (r["forwarding"], r["gue_port"]) for n, (r, _) in mine.items() if n.startswith("default/")}
        assert modes.pop("default/dsr:http@198.18.128.43") == ("gue", 5555), mine
        assert set(modes.values()) == {("nat", 0)}, modes

        # Through vecgate: the node port on the gateway's own address, the external and
        # ingress addresses, and the affine service (one client: one backend).
        def through_vecgate(host, port, n=24):
            return Counter(a.split()[0] for a in who(lab, c, host, port, n)["answers"])
        assert set(through_vecgate("198.18.0.1", 30080)) == {"be0", "be1"}
        assert set(through_vecgate("198.18.140.1", 80)) == {"be1", "be2"}
        assert set(through_vecgate("198.18.141.1", 80)) == {"be1", "be2"}
        assert len(through_vecgate("198.18.128.42", 80)) == 1, "ClientIP affinity: every connection to one backend"

        # Through kube-proxy's rules in the API's namespace (the servers on its lo, a
        # route to the service and external addresses over a spare veth).
        N = ["ip", "netns", "exec", api_ns]
        sh(*N, "ip", "link", "add", "vk0", "type", "veth", "peer", "name", "vk1", check=False)
        sh(*N, "ip", "addr", "replace", "198.18.9.1/24", "dev", "vk0")
        sh(*N, "ip", "link", "set", "vk0", "up")
        sh(*N, "ip", "link", "set", "vk1", "up")
        sh(*N, "ip", "neigh", "replace", "198.18.9.2", "lladdr", "02:00:00:00:09:02", "dev", "vk0", "nud", "permanent")
        for net in ("198.18.128.0/20", "198.18.140.0/24", "198.18.141.0/24"):
            sh(*N, "ip", "route", "replace", net, "via", "198.18.9.2")
        for a in BACKENDS:
            sh(*N, "ip", "addr", "replace", f"{a}/32", "dev", "lo")
        serve_backends(lab, api_ns)

        def through_kube_proxy(host, port, n=24):
            inv = {a: n for n, a in NAMES.items()}
            return Counter(inv[a.split()[0]] for a in who(lab, api_ns, host, port, n)["answers"])
        assert set(through_kube_proxy("198.18.140.1", 80)) == {"be1", "be2"}
        assert set(through_kube_proxy("198.18.141.1", 80)) == {"be1", "be2"}
        assert len(through_kube_proxy("198.18.128.42", 80)) == 1
        # kube-proxy opens node ports on the node's primary address (its InternalIP).
        sh(*N, "ip", "addr", "replace", "198.18.8.1/32", "dev", "lo")
        assert set(through_kube_proxy("198.18.8.1", 30080)) == {"be0", "be1"}
    finally:
        proc.terminate()
        proc.wait(10)
    kubectl(api_ns, w, "delete", "service", "np", "lbx", "six", "sticky", "dsr")
    kubectl(api_ns, w, "delete", "endpointslice", "np-1", "lbx-1", "six-1", "sticky-1", "dsr-1")
    assert gw.stop()[0] == 0
