"""`vecgate k8s` against a real kube-apiserver v1.31, with real kube-proxy (nftables mode,
node n1, feature gates at their defaults) on the same API server as the differential
oracle, for two things kube-proxy does beyond the endpoints' conditions:

- topology-aware routing: EndpointSlices with `hints.forZones` made by hand and node n1
  labelled `topology.kubernetes.io/zone`; the cluster traffic of a Service goes to the
  endpoints hinted for the node's zone when every ready endpoint is hinted and one is
  for that zone, else to all; Local policies are not filtered. The label changed or
  removed under running proxies: both re-evaluate (vecgate without a restart), and a
  restarted controller finds nothing to change;
- the labels that hand an object to another proxy: a Service or EndpointSlice labelled
  `service.kubernetes.io/service-proxy-name` (any value) or `service.kubernetes.io/headless`
  is ignored by both; relabelled, it leaves both and comes back when the label goes.
  `--service-proxy-name NAME` makes vecgate serve exactly the objects labelled NAME.

For every Service port, the endpoints kube-proxy's service (or local) chain jumps to are
the backends vecgate's LB services of that port take new connections with."""
import re

from test_lb_k8s import (BACKENDS, api, apply, changes_of, controller, ensure_kube_proxy, kube_proxy_backends,  # noqa: F401
                         kubectl, service, small_gateway, wait_for)

ZONE = "topology.kubernetes.io/zone"
PROXY_NAME = "service.kubernetes.io/service-proxy-name"
HEADLESS = "service.kubernetes.io/headless"
HTTP = [{"name": "http", "port": 8080, "protocol": "TCP"}]
A, B, C = BACKENDS  # 198.19.{1,2,3}.10


def port(node_port=None):
    p = {"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}
    return [p | ({"nodePort": node_port} if node_port else {})]


def ep(addr, zones=None, ready=True, node="n1"):
    """An endpoint hinted for `zones` (None: no hints)."""
    e = {"addresses": [addr], "conditions": {"ready": ready, "serving": ready, "terminating": False}, "nodeName": node}
    if zones is not None:
        e["hints"] = {"forZones": [{"name": z} for z in zones]}
    return e


def eslice(name, svc, endpoints, labels=None):
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": name, "namespace": "default",
                         "labels": {"kubernetes.io/service-name": svc, "endpointslice.kubernetes.io/managed-by": "vecgate-test",
                                    **(labels or {})}},
            "addressType": "IPv4", "ports": HTTP, "endpoints": endpoints}


def labelled(obj, labels):
    obj["metadata"].setdefault("labels", {}).update(labels)
    return obj


def ours(gw):
    """vecgate's choice per LB service: the (addr, port) of the backends taking new
    connections (`eligible`), and every LB service's id."""
    ids = {r["name"]: r["id"] for r in gw.ctl("show", "lb", "services")["data"]}
    got = {n: set() for n in ids}
    for b in gw.ctl("show", "lb", "backends")["data"]:
        if b["eligible"]:
            got.setdefault(b["service"], set()).add((b["addr"], b["port"]))
    return got, ids


def by_port(api_ns, gw, kind, names, want):
    """Both proxies' choice for the Services `names`, once each says `want`: kube-proxy's
    chains (`kind`: "service" for cluster, "local" for a Local policy's), vecgate's LB
    services of that kind (`cluster_ip` services for "service", the node port's for
    "local"). Returns (kube-proxy's, vecgate's) by Service name; a Service kube-proxy has
    no (or an emptied) chain for, or vecgate no LB service, is absent."""
    def both():
        # A chain kube-proxy stopped using is flushed at once, deleted later: empty.
        kp = {k.split("/")[1]: v for k, v in kube_proxy_backends(api_ns, kind).items()
              if k.startswith("default/") and k.split("/")[1] in names and v}
        mine, _ = ours(gw)
        at = "@nodeport4" if kind == "local" else "@198.18."
        vg = {}
        for n, v in mine.items():
            m = re.match(r"default/([\w-]+):", n)
            if m and m.group(1) in names and at in n:
                vg[m.group(1)] = v
        last[:] = [kp, vg]
        return (kp, vg) if kp == vg == want else None
    last = []
    try:
        return wait_for(f"both proxies' {kind} endpoints", both, timeout=60)
    except AssertionError as e:
        raise AssertionError(f"{e}: want {want}, kube-proxy {last[0]}, vecgate {last[1]}") from None


def eps(*addrs):
    return {(a, 8080) for a in addrs}


def test_topology_hints_select_the_same_endpoints_as_kube_proxy(api, lab, vecgate, tmp_path):
    api_ns, w = api
    gw = small_gateway(lab, vecgate, tmp_path)
    kubectl(api_ns, w, "label", "node", "n1", f"{ZONE}=zone-a", "--overwrite")
    apply(api_ns, w, [
        # every endpoint hinted, two for zone-a, one for zone-b
        service("zoned", "198.18.128.70", port()),
        eslice("zoned-1", "zoned", [ep(A, ["zone-a"]), ep(B, ["zone-b"]), ep(C, ["zone-a"], node="n2")]),
        # one ready endpoint without hints: no filtering (a non-ready one without any
        # would not count)
        service("unhinted", "198.18.128.71", port()),
        eslice("unhinted-1", "unhinted", [ep(A, ["zone-a"]), ep(B, ["zone-b"]), ep(C)]),
        # hinted for other zones only (for zone-a: not ready): no filtering while in zone-a
        service("elsewhere", "198.18.128.72", port()),
        eslice("elsewhere-1", "elsewhere", [ep(A, ["zone-a"], ready=False), ep(B, ["zone-b"]), ep(C, ["zone-b", "zone-c"])]),
        # externalTrafficPolicy Local: the node port's endpoints are this node's, of any
        # zone; the cluster IP's are filtered
        service("zlocal", "198.18.128.73", port(30090), type="NodePort", externalTrafficPolicy="Local"),
        eslice("zlocal-1", "zlocal", [ep(A, ["zone-a"]), ep(B, ["zone-b"]), ep(C, ["zone-a"], node="n2")]),
    ])
    names = {"zoned", "unhinted", "elsewhere", "zlocal"}
    ensure_kube_proxy(w)
    proc, log = controller(lab, vecgate, api_ns, w, gw, tmp_path)
    try:
        zone_a = {"zoned": eps(A, C), "unhinted": eps(A, B, C), "elsewhere": eps(B, C), "zlocal": eps(A, C)}
        by_port(api_ns, gw, "service", names, zone_a)
        by_port(api_ns, gw, "local", {"zlocal"}, {"zlocal": eps(A, B)})
        _, ids = ours(gw)

        # The node moves to zone-b: re-evaluated without a restart, every LB service kept
        # (backend requests only).
        kubectl(api_ns, w, "label", "node", "n1", f"{ZONE}=zone-b", "--overwrite")
        zone_b = {"zoned": eps(B), "unhinted": eps(A, B, C), "elsewhere": eps(B, C), "zlocal": eps(B)}
        by_port(api_ns, gw, "service", names, zone_b)
        by_port(api_ns, gw, "local", {"zlocal"}, {"zlocal": eps(A, B)})
        assert ours(gw)[1] == ids
        assert "node zone changed" in log.read_text()

        # zone-c: `elsewhere`'s C alone; then a zone no endpoint is hinted for: all.
        kubectl(api_ns, w, "label", "node", "n1", f"{ZONE}=zone-c", "--overwrite")
        by_port(api_ns, gw, "service", names, {"zoned": eps(A, B, C), "unhinted": eps(A, B, C), "elsewhere": eps(C), "zlocal": eps(A, B, C)})

        # The controller restarted in zone-c: it finds the gateway as it should be.
        proc.terminate()
        proc.wait(10)
        proc, log = controller(lab, vecgate, api_ns, w, gw, tmp_path)
        lines = wait_for("the restarted controller's sync", lambda: [l for l in log.read_text().splitlines() if "initial sync done" in l])
        assert changes_of(lines[0]) == 0, lines

        # A hint added to the one endpoint without: now filtered (an EndpointSlice event).
        kubectl(api_ns, w, "label", "node", "n1", f"{ZONE}=zone-a", "--overwrite")
        by_port(api_ns, gw, "service", names, zone_a)
        kubectl(api_ns, w, "patch", "endpointslice", "unhinted-1", "--type=json",
                "-p", '[{"op":"add","path":"/endpoints/2/hints","value":{"forZones":[{"name":"zone-b"}]}}]')
        by_port(api_ns, gw, "service", names, zone_a | {"unhinted": eps(A)})

        # The label removed: no zone, no filtering anywhere.
        kubectl(api_ns, w, "label", "node", "n1", f"{ZONE}-")
        by_port(api_ns, gw, "service", names, {"zoned": eps(A, B, C), "unhinted": eps(A, B, C), "elsewhere": eps(B, C), "zlocal": eps(A, B, C)})
        assert ours(gw)[1] == ids
        assert "change refused" not in log.read_text() and proc.poll() is None, log.read_text()
    finally:
        proc.terminate()
        proc.wait(10)
    kubectl(api_ns, w, "delete", "service", *sorted(names))
    kubectl(api_ns, w, "delete", "endpointslice", *sorted(f"{n}-1" for n in names))
    assert gw.stop()[0] == 0


def test_objects_of_another_proxy_are_left_to_it(api, lab, vecgate, tmp_path):
    api_ns, w = api
    gw = small_gateway(lab, vecgate, tmp_path)
    apply(api_ns, w, [
        service("mine", "198.18.128.80", port()),
        eslice("mine-1", "mine", [ep(A)]),
        # another proxy's Service (its slice unlabelled, as one made by hand): nothing
        labelled(service("theirs", "198.18.128.81", port()), {PROXY_NAME: "other-proxy"}),
        eslice("theirs-1", "theirs", [ep(A), ep(B)]),
        # labelled headless (it has a cluster IP all the same): nothing
        labelled(service("hl", "198.18.128.82", port()), {HEADLESS: ""}),
        eslice("hl-1", "hl", [ep(C)]),
        # one of two slices another proxy's: the other's endpoints only
        service("half", "198.18.128.83", port()),
        eslice("half-1", "half", [ep(A)]),
        eslice("half-2", "half", [ep(B)], labels={PROXY_NAME: "other-proxy"}),
    ])
    names = {"mine", "theirs", "hl", "half"}
    ensure_kube_proxy(w)
    proc, log = controller(lab, vecgate, api_ns, w, gw, tmp_path)
    try:
        by_port(api_ns, gw, "service", names, {"mine": eps(A), "half": eps(A)})

        # The label removed: both serve it; put back (another value): both drop it, and
        # vecgate's LB service is deleted.
        kubectl(api_ns, w, "label", "service", "theirs", f"{PROXY_NAME}-")
        by_port(api_ns, gw, "service", names, {"mine": eps(A), "half": eps(A), "theirs": eps(A, B)})
        kubectl(api_ns, w, "label", "service", "theirs", f"{PROXY_NAME}=yet-another")
        by_port(api_ns, gw, "service", names, {"mine": eps(A), "half": eps(A)})
        assert not [n for n in ours(gw)[1] if n.startswith("default/theirs:")]
        # The same for a slice: half-2 unlabelled, then labelled again.
        kubectl(api_ns, w, "label", "endpointslice", "half-2", f"{PROXY_NAME}-")
        by_port(api_ns, gw, "service", names, {"mine": eps(A), "half": eps(A, B)})
        kubectl(api_ns, w, "label", "endpointslice", "half-2", f"{HEADLESS}=")
        by_port(api_ns, gw, "service", names, {"mine": eps(A), "half": eps(A)})

        # --service-proxy-name other-proxy: exactly the objects labelled so (the LB
        # services of the others deleted); kube-proxy's view is not that proxy's.
        kubectl(api_ns, w, "label", "service", "theirs", f"{PROXY_NAME}=other-proxy", "--overwrite")
        kubectl(api_ns, w, "label", "endpointslice", "theirs-1", f"{PROXY_NAME}=other-proxy")
        proc.terminate()
        proc.wait(10)
        proc, log = controller(lab, vecgate, api_ns, w, gw, tmp_path, extra=("--service-proxy-name", "other-proxy"))

        def named():
            mine, _ = ours(gw)
            return mine if set(mine) == {"default/theirs:http@198.18.128.81"} else None
        assert wait_for("the named proxy's objects only", named) == {"default/theirs:http@198.18.128.81": eps(A, B)}
        assert "change refused" not in log.read_text() and proc.poll() is None, log.read_text()
    finally:
        proc.terminate()
        proc.wait(10)
    kubectl(api_ns, w, "delete", "service", *sorted(names))
    kubectl(api_ns, w, "delete", "endpointslice", "mine-1", "theirs-1", "hl-1", "half-1", "half-2")
    assert gw.stop()[0] == 0
