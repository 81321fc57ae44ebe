#!/usr/bin/env python3
"""The controller at scale, a measurement (not a CI test): a real kube-apiserver in its
own namespace holds SERVICES ClusterIP Services with ENDPOINTS endpoints each (one
EndpointSlice per Service); `vecgate k8s` programs a running gateway (null interface)
from them. Prints one JSON object:

  create_s          kubectl create of every object (the API server's own cost)
  initial_sync_ms   controller start → every LB service programmed (list both kinds,
                    one request per LB service with its backends), from its log
  event_ms          per endpoint change, kubectl patch sent → `show lb backends` shows
                    it (median, p90, max over EVENTS changes, one at a time)
  event_apply_us    the controller's own event → request applied (median, max)
  restart_sync_ms   a restarted controller: adopt what the gateway holds, relist,
                    apply nothing (changes=0), from its log
  check             the periodic check of a gateway that is the same process: the
                    controller's own time for one (`gateway checked` at debug: show
                    instance, show lb digests, every applied service's digest compared;
                    median, max), the reply bytes it reads (and what `show lb services`,
                    the rows the check read before digests, would be), the gateway's CPU
                    time to answer each (its non-worker threads, /proc, over --repeat
                    requests with no controller running), and a backend's weight set by
                    hand → set back (ms, by the check)

Usage (root): tests/k8s/scale.py [--services 10000] [--endpoints 10] [--events 50]
          [--vecgate target/release/vecgate]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
BIN_DIR = Path.home() / ".cache" / "vecgate-k8s"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--services", type=int, default=10000)
    ap.add_argument("--endpoints", type=int, default=10)
    ap.add_argument("--events", type=int, default=50)
    ap.add_argument("--vecgate", default=str(ROOT / "target" / "release" / "vecgate"))
    ap.add_argument("--repeat", type=int, default=20)
    a = ap.parse_args()
    subprocess.run([str(HERE / "build.sh"), str(BIN_DIR)], check=True, stdout=subprocess.DEVNULL)
    w = Path(tempfile.mkdtemp(prefix="vgscale"))
    ns = f"vgscale{os.getpid() % 100000}"
    procs = []
    env = dict(os.environ, K8S_SERVICE_CIDR4="198.18.128.0/17")
    subprocess.run([str(HERE / "start.sh"), str(w), "--netns", ns, "--bin", str(BIN_DIR)], check=True, env=env, stdout=subprocess.DEVNULL)
    N = ["ip", "netns", "exec", ns]

    def kubectl(*args, stdin=None):
        r = subprocess.run([*N, str(BIN_DIR / "kubectl"), "--kubeconfig", str(w / "admin.kubeconfig"), *args],
                           input=stdin, capture_output=True, text=True, timeout=1800)
        if r.returncode != 0:
            sys.exit(f"kubectl {args[:3]}: {r.stderr}")
        return r.stdout

    def endpoint_addr(s, i):
        n = s * a.endpoints + i
        return f"198.19.{n // 250 % 250}.{n % 250 + 1}"

    try:
        kubectl("apply", "-f", str(HERE / "rbac.yaml"))
        t0 = time.time()
        chunk = []

        def flush():
            if chunk:
                kubectl("create", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": chunk}))
                chunk.clear()

        for s in range(a.services):
            name = f"s{s}"
            chunk.append({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": "default"},
                          "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]}})
            eps = [{"addresses": [endpoint_addr(s, i)], "conditions": {"ready": True}} for i in range(a.endpoints)]
            chunk.append({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                          "metadata": {"name": f"{name}-1", "namespace": "default",
                                       "labels": {"kubernetes.io/service-name": name,
                                                  "endpointslice.kubernetes.io/managed-by": "vecgate-scale"}},
                          "addressType": "IPv4", "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}], "endpoints": eps})
            if len(chunk) >= 1000:
                flush()
        flush()
        create_s = time.time() - t0

        sock = w / "gw.sock"
        cfg = w / "gw.toml"
        cfg.write_text(f'[dataplane]\nsocket = "{sock}"\n\n[[interface]]\nname = "eth0"\ntype = "null"\n'
                       f'mac = "02:00:00:00:00:01"\naddresses = ["198.18.0.1/24"]\n\n[lb]\nsnat4 = "198.18.0.1"\n')
        gw = subprocess.Popen([a.vecgate, "run", "--config", str(cfg), "--interval", "0"], stdout=subprocess.DEVNULL, stderr=open(w / "gw.log", "w"))
        procs.append(gw)
        while not sock.exists():
            time.sleep(0.05)

        def ctl(*words):
            r = subprocess.run([a.vecgate, "ctl", "--socket", str(sock), "--json", *words], capture_output=True, text=True, timeout=120)
            return json.loads(r.stdout)

        def controller(log):
            p = subprocess.Popen([*N, a.vecgate, "k8s", "--socket", str(sock), "--kubeconfig", str(w / "vecgate.kubeconfig")],
                                 stdout=open(log, "w"), stderr=subprocess.STDOUT, env=dict(os.environ, RUST_LOG="info,k8s=debug"))
            procs.append(p)
            return p

        def wait_line(log, what, timeout=1800):
            end = time.time() + timeout
            while time.time() < end:
                m = [l for l in Path(log).read_text().splitlines() if what in l]
                if m:
                    return m[0]
                time.sleep(0.2)
            sys.exit(f"no {what!r} in {log}")

        log1 = w / "k8s-1.log"
        c1 = controller(log1)
        line = wait_line(log1, "initial sync done")
        initial_ms = float(re.search(r"\bms=([\d.]+)", line).group(1))
        services = ctl("show", "lb", "services")["data"]
        assert len(services) >= a.services, len(services)  # and the API server's own `kubernetes` service

        # One endpoint change at a time: endpoint 0 of service s goes not ready, then
        # ready again (two real changes per service; a patch to the value it has is no event).
        event_ms = []
        for e in range(a.events):
            s = (e // 2 * 7919) % a.services
            ready = e % 2 == 1
            t = time.time()
            kubectl("patch", "endpointslice", f"s{s}-1", "--type=json",
                    "-p", json.dumps([{"op": "replace", "path": "/endpoints/0/conditions", "value": {"ready": ready}}]))
            svc = [x["name"] for x in services if x["name"].startswith(f"default/s{s}:")][0]
            addr = endpoint_addr(s, 0)
            deadline = time.time() + 60
            while True:
                rows = [r for r in ctl("show", "lb", "backends", svc)["data"] if r["addr"] == addr]
                if rows and rows[0]["conditions"]["ready"] == ready:
                    break
                if time.time() > deadline:
                    sys.exit(f"event {e}: {svc} backend {addr} not ready={ready} after 60 s: {rows}")
                time.sleep(0.002)
            event_ms.append((time.time() - t) * 1e3)
        lines = [l for l in log1.read_text().splitlines() if "event applied" in l]
        apply_us = [int(re.search(r"\bus=(\d+)", l).group(1)) for l in lines]
        changes = [int(re.search(r"changes=(\d+)", l).group(1)) for l in lines]

        # A backend reweighted by hand: the check sets it back (every 5 s).
        hs = 4242 % a.services
        svc = [x["name"] for x in services if x["name"].startswith(f"default/s{hs}:")][0]
        addr = endpoint_addr(hs, 3 % a.endpoints)
        t = time.time()
        ctl("lb", "backend", "set", svc, addr, "8080", "weight", "7")
        while [r["weight"] for r in ctl("show", "lb", "backends", svc)["data"] if r["addr"] == addr] != [1]:
            if time.time() - t > 30:
                sys.exit(f"{svc} backend {addr}: weight not set back after 30 s")
            time.sleep(0.01)
        restore_ms = (time.time() - t) * 1e3
        time.sleep(11)  # a few more checks, each finding nothing
        checks = [int(re.search(r"\bus=(\d+)", l).group(1)) for l in log1.read_text().splitlines() if "gateway checked" in l]
        restored = sum(1 for l in log1.read_text().splitlines() if "LB service not as the controller applied it" in l)

        c1.terminate()
        c1.wait(30)

        # The gateway's side of one check, no controller running: reply bytes and the
        # CPU time of its threads other than the workers, per request.
        import socket

        def cpu_s():
            total = 0
            for t_ in Path(f"/proc/{gw.pid}/task").iterdir():
                st = (t_ / "stat").read_text()
                comm = st[st.index("(") + 1:st.rindex(")")]
                if not comm.startswith("vecgate-worker"):
                    f = st[st.rindex(")") + 2:].split()
                    total += int(f[11]) + int(f[12])  # utime, stime
            return total / os.sysconf("SC_CLK_TCK")

        def ask(op, n):
            c0, t0, size = cpu_s(), time.time(), 0
            for _ in range(n):
                with socket.socket(socket.AF_UNIX) as so:
                    so.connect(str(sock))
                    so.sendall(json.dumps({"op": op}).encode() + b"\n")
                    buf = b""
                    while not buf.endswith(b"\n"):
                        chunk = so.recv(1 << 20)
                        if not chunk:
                            break
                        buf += chunk
                    size = len(buf)
                    json.loads(buf)
            return {"bytes": size, "wall_ms": round((time.time() - t0) / n * 1e3, 2), "gateway_cpu_ms": round((cpu_s() - c0) / n * 1e3, 2)}

        check = {
            "controller_us": {"median": statistics.median(checks) if checks else None, "max": max(checks) if checks else None,
                              "n": len(checks)},
            "show_instance": ask("show_instance", a.repeat),
            "show_lb_digests": ask("show_lb_digests", a.repeat),
            "show_lb_services (the rows read before)": ask("show_lb_services", max(a.repeat // 4, 2)),
            "hand_weight_restored_ms": round(restore_ms, 1),
            "restored_logged": restored,
        }
        log2 = w / "k8s-2.log"
        t = time.time()
        controller(log2)
        line = wait_line(log2, "initial sync done")
        restart_ms = float(re.search(r"\bms=([\d.]+)", line).group(1))
        restart_changes = int(re.search(r"changes=(\d+)", line).group(1))
        ev = sorted(event_ms)
        print(json.dumps({
            "services": a.services, "endpoints": a.endpoints,
            "create_s": round(create_s, 1),
            "initial_sync_ms": round(initial_ms, 1),
            "events": len(ev), "event_changes": sorted(set(changes)),
            "event_ms": {"median": round(statistics.median(ev), 1), "p90": round(ev[int(len(ev) * 0.9) - 1], 1), "max": round(ev[-1], 1)},
            "event_apply_us": {"median": statistics.median(apply_us) if apply_us else None, "max": max(apply_us) if apply_us else None},
            "restart_sync_ms": round(restart_ms, 1), "restart_changes": restart_changes,
            "restart_wall_s": round(time.time() - t, 1),
            "check": check,
        }))
    finally:
        for p in procs:
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        subprocess.run([str(HERE / "stop.sh"), str(w)], stdout=subprocess.DEVNULL)


if __name__ == "__main__":
    main()
