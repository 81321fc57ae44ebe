"""The soak run (issue 25; not a CI test): traffic through GTP-U and UDP tunnels at the
worker's full rate for a long time while the control plane adds and deletes routes and
tunnels without pause. What must hold:

- zero loss on the traffic the churn does not touch: every packet the generators send
  into the static tunnels (both directions) leaves the other side, counted exactly once
  the generators have sent their `count`;
- resident memory flat after warm-up (sampled every few seconds into a CSV, drawn as an
  SVG);
- no table growth beyond what the churn holds: the FIB, the GTP-U and UDP tunnel tables
  never hold more than the static entries plus the churn window, and are back to the
  static ones when the churn has deleted what it added.

Layout (every interface a packet generator or a discard sink, so the run needs no
network): `access0` and `core0` generate the unaffected traffic (users into a static
GTP-U tunnel and a static GUE tunnel; G-PDUs and GUE from the peers to the users), whose
output goes out of `core0` and `access0`; `churn0` generates traffic toward the churned
prefixes, which leaves by `sink0` (or is dropped while its route is away). So
`core0.tx == access0.rx` and `access0.tx == core0.rx` exactly at the end.

Usage: python3 scripts/soak.py --vecgate target/release/vecgate [--seconds 600]
       [--out DIR] [--svg docs/soak-rss.svg]
"""
import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time

# Tunnel peers behind sink0: more than the churn window, so no two live tunnels share
# one (a UDP tunnel is one per local, remote and encapsulation).
PEERS = 40


def config(sock, streams):
    s = f"""
[dataplane]
socket = "{sock}"
buffers = 16384

[[interface]]
name = "access0"
type = "pg"
mac = "02:00:00:00:00:01"
addresses = ["198.18.0.1/24"]

[[interface]]
name = "core0"
type = "pg"
mac = "02:00:00:00:00:02"
addresses = ["198.18.1.1/24"]

[[interface]]
name = "churn0"
type = "pg"
mac = "02:00:00:00:00:03"
addresses = ["198.18.2.1/24"]

[[interface]]
name = "sink0"
type = "pg"
mac = "02:00:00:00:00:04"
addresses = ["198.18.3.1/24"]

[[neighbour]]
interface = "access0"
ip = "198.18.0.2"
mac = "02:00:00:00:01:02"

[[neighbour]]
interface = "core0"
ip = "198.18.1.2"
mac = "02:00:00:00:02:02"

[[neighbour]]
interface = "core0"
ip = "198.18.1.5"
mac = "02:00:00:00:02:05"
"""
    for k in range(PEERS):
        s += f"""
[[neighbour]]
interface = "sink0"
ip = "198.18.3.{10 + k}"
mac = "02:00:00:00:04:{10 + k:02x}"
"""
    s += """
# The unaffected tunnels: GTP-U with 198.18.1.2 for 198.19.10.0/24, GUE with 198.18.1.5
# for 198.19.20.0/24.
[[gtpu_tunnel]]
local = "198.18.1.1"
remote = "198.18.1.2"
teid_in = 100
teid_out = 200
checksum = "software"
ue = "198.19.10.0/24"

[[udp_tunnel]]
local = "198.18.1.1"
remote = "198.18.1.5"
encap = "gue"
port = 6080
routes = ["198.19.20.0/24"]
"""
    for st in streams:
        s += "\n[[stream]]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in st.items())
    return s


def streams(rate, count):
    """The unaffected streams (A: users into GTP-U, C: users into GUE, B: G-PDUs to the
    users, D: GUE to the users) and the churn stream E; rate None: as fast as possible."""
    lim = {} if rate is None else {"rate": rate}
    cnt = {} if count is None else {"count": count}
    base = [
        {"name": "users-gtpu", "interface": "access0", "size": 256, "protocol": "udp", "src": "198.18.0.2", "dst": "198.19.10.5"},
        {"name": "users-gue", "interface": "access0", "size": 256, "protocol": "udp", "src": "198.18.0.2", "dst": "198.19.20.5"},
        {"name": "peer-gtpu", "interface": "core0", "size": 256, "protocol": "gtpu", "src": "198.18.1.2", "dst": "198.18.1.1",
         "teid": 100, "inner_src": "198.19.10.5", "inner_dst": "198.18.0.2"},
        {"name": "peer-gue", "interface": "core0", "size": 256, "protocol": "gue", "src": "198.18.1.5", "dst": "198.18.1.1",
         "dst_port": 6080, "inner_src": "198.19.20.5", "inner_dst": "198.18.0.2"},
    ]
    for b in base:
        b.update(lim)
        b.update(cnt)
    churn = {"name": "churn", "interface": "churn0", "size": 128, "protocol": "udp", "src": "198.18.2.2", "dst": "198.19.128.1",
             "rate": max(1, (rate or 100000) // 10)}
    if count is not None:
        churn["count"] = max(1, count // 10)
    return base + [churn]


class Gateway:
    def __init__(self, vecgate, cfg_text, workdir, nice):
        self.vecgate, self.dir = vecgate, workdir
        self.sock = os.path.join(workdir, "soak.sock")
        path = os.path.join(workdir, "soak.toml")
        with open(path, "w") as f:
            f.write(cfg_text.replace("__SOCK__", self.sock))
        self.log = open(os.path.join(workdir, "vecgate.log"), "w")
        cmd = ["nice", "-n", str(nice), vecgate, "run", "--config", path, "--interval", "0"]
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        for _ in range(200):
            if os.path.exists(self.sock):
                return
            if self.proc.poll() is not None:
                sys.exit(f"soak: vecgate exited: see {self.log.name}")
            time.sleep(0.05)
        sys.exit("soak: no control socket after 10 s")

    def ctl(self, *words, check=True):
        r = subprocess.run([self.vecgate, "ctl", "--socket", self.sock, "--json", *map(str, words)], capture_output=True, text=True)
        if check and r.returncode != 0:
            raise RuntimeError(f"ctl {' '.join(map(str, words))}: {r.stderr.strip()} {r.stdout.strip()}")
        return json.loads(r.stdout)["data"] if r.returncode == 0 else None

    def rss_kb(self):
        # The vecgate process is the child of `nice` (exec'd: same pid).
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def interfaces(gw):
    return {i["name"]: i for i in gw.ctl("show", "interfaces")}


def tables(gw):
    fib = len(gw.ctl("show", "ip", "fib"))
    gtpu = gw.ctl("show", "gtpu", "tunnels", "100000")["total"]
    udp = gw.ctl("show", "udp", "tunnels")
    udp = len(udp) if isinstance(udp, list) else len(udp.get("tunnels", []))
    return fib, gtpu, udp


def calibrate(vecgate, workdir, nice, seconds=5.0):
    """Packets per second per unaffected stream at full rate (no limit), in this run."""
    gw = Gateway(vecgate, config("__SOCK__", streams(None, None)), workdir, nice)
    try:
        time.sleep(1.0)
        a = interfaces(gw)
        t0 = time.time()
        time.sleep(seconds)
        b = interfaces(gw)
        dt = time.time() - t0
    finally:
        gw.stop()
    rx = sum(b[n]["rx_packets"] - a[n]["rx_packets"] for n in ("access0", "core0"))
    return rx / dt / 4


class Churn:
    """Adds and deletes routes, GTP-U tunnels and UDP tunnels toward sink0, keeping at
    most `window` of each alive (oldest deleted first)."""

    def __init__(self, gw, window):
        self.gw, self.window, self.k = gw, window, 0
        self.routes, self.gtpu, self.udp = [], [], []
        self.ops = 0

    def step(self):
        k, gw = self.k, self.gw
        self.k += 1
        peer = f"198.18.3.{10 + k % PEERS}"
        prefix = f"198.19.{128 + k % 32}.0/24"
        gw.ctl("ip", "route", "add", prefix, "via", peer)
        self.routes.append(prefix)
        before = {t["name"] for t in gw.ctl("show", "gtpu", "tunnels", "100000")["tunnels"]}
        gw.ctl("create", "gtpu", "tunnel", "local", "198.18.1.1", "remote", peer, "teid-in", 10000 + k, "teid-out", 20000 + k,
               "ue", f"198.19.{160 + k % 32}.0/24")
        after = {t["name"] for t in gw.ctl("show", "gtpu", "tunnels", "100000")["tunnels"]}
        self.gtpu += sorted(after - before)
        before = {t["name"] for t in udp_list(gw)}
        gw.ctl("create", "udp", "tunnel", "local", "198.18.1.1", "remote", peer, "encap", "gre", "key", 1000 + k,
               "route", f"198.19.{192 + k % 32}.0/24")
        after = {t["name"] for t in udp_list(gw)}
        self.udp += sorted(after - before)
        self.ops += 3
        while len(self.routes) > self.window:
            self.delete_oldest()

    def delete_oldest(self):
        gw = self.gw
        gw.ctl("ip", "route", "del", self.routes.pop(0), check=False)
        if self.gtpu:
            gw.ctl("delete", "gtpu", "tunnel", self.gtpu.pop(0))
        if self.udp:
            gw.ctl("delete", "udp", "tunnel", self.udp.pop(0))
        self.ops += 3

    def drain(self):
        while self.routes or self.gtpu or self.udp:
            if not self.routes:
                self.routes.append("198.19.255.0/24")  # nothing to delete: a no-op del
            self.delete_oldest()


def udp_list(gw):
    d = gw.ctl("show", "udp", "tunnels")
    return d if isinstance(d, list) else d.get("tunnels", [])


def svg(rows, path, warmup):
    """A small line chart of RSS (MiB) over time, the warm-up shaded."""
    w, h, m = 640, 240, 40
    t = [r["t"] for r in rows]
    y = [r["rss_kb"] / 1024 for r in rows]
    tmax, ymax = max(t) or 1, max(y) * 1.2 or 1
    px = lambda v: m + (w - 2 * m) * v / tmax  # noqa: E731
    py = lambda v: h - m - (h - 2 * m) * v / ymax  # noqa: E731
    pts = " ".join(f"{px(a):.1f},{py(b):.1f}" for a, b in zip(t, y))
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11">',
           f'<rect x="{m}" y="{m}" width="{px(warmup) - m:.1f}" height="{h - 2 * m}" fill="#eee"/>',
           f'<text x="{m + 4}" y="{m + 14}" fill="#666">warm-up</text>',
           f'<line x1="{m}" y1="{h - m}" x2="{w - m}" y2="{h - m}" stroke="#000"/>',
           f'<line x1="{m}" y1="{m}" x2="{m}" y2="{h - m}" stroke="#000"/>',
           f'<polyline fill="none" stroke="#c33" stroke-width="1.5" points="{pts}"/>',
           f'<text x="{w / 2}" y="{h - 8}" text-anchor="middle">seconds ({tmax:.0f} s run)</text>',
           f'<text x="12" y="{h / 2}" transform="rotate(-90 12 {h / 2})" text-anchor="middle">RSS MiB</text>']
    for v in (0, ymax / 2, ymax):
        out.append(f'<text x="{m - 4}" y="{py(v) + 4:.1f}" text-anchor="end">{v:.0f}</text>')
    out.append(f'<text x="{w - m}" y="{m - 8}" text-anchor="end">vecgate soak: resident memory under route and tunnel churn</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vecgate", default="target/release/vecgate")
    ap.add_argument("--seconds", type=int, default=600)
    ap.add_argument("--warmup", type=int, default=60)
    ap.add_argument("--window", type=int, default=16, help="routes and tunnels of each kind the churn keeps alive")
    ap.add_argument("--sample", type=float, default=5.0)
    ap.add_argument("--load", type=float, default=0.8, help="share of the calibrated full rate each stream is given")
    ap.add_argument("--nice", type=int, default=10)
    ap.add_argument("--out", default=None, help="folder for the CSV and logs (default: a temporary one)")
    ap.add_argument("--svg", default=None)
    a = ap.parse_args()
    work = a.out or tempfile.mkdtemp(prefix="vecgate-soak-")
    os.makedirs(work, exist_ok=True)

    per_stream = calibrate(a.vecgate, work, a.nice)
    rate = max(1000, int(per_stream * a.load))
    count = rate * a.seconds
    print(f"soak: full rate {per_stream:,.0f} packets/s per stream; running 4 x {rate:,} packets/s for {a.seconds} s"
          f" ({count:,} packets each), churn window {a.window}", flush=True)

    gw = Gateway(a.vecgate, config("__SOCK__", streams(rate, count)), work, a.nice)
    rows, failures = [], []
    t0 = time.time()
    try:
        static = tables(gw)
        churn = Churn(gw, a.window)
        next_sample = 0.0
        while True:
            now = time.time() - t0
            if now >= next_sample:
                ifs = interfaces(gw)
                fib, gtpu, udp = tables(gw)
                row = {"t": round(now, 1), "rss_kb": gw.rss_kb(), "fib": fib, "gtpu_tunnels": gtpu, "udp_tunnels": udp,
                       "churn_ops": churn.ops, **{f"{n}_{d}": ifs[n][f"{d}_packets"] for n in ifs for d in ("rx", "tx")}}
                rows.append(row)
                print(" ".join(f"{k}={v}" for k, v in row.items()), flush=True)
                # The churn holds at most `window` of each beyond the static tables (each
                # step: a route, a GTP-U tunnel with its UE route, a UDP tunnel with its
                # route: three FIB entries).
                if fib > static[0] + 3 * a.window or gtpu > static[1] + a.window + 1 or udp > static[2] + a.window + 1:
                    failures.append(f"t={now:.0f}: tables {fib}/{gtpu}/{udp} beyond static {static} + window {a.window}")
                next_sample += a.sample
                done = all(ifs[n]["rx_packets"] >= 2 * count for n in ("access0", "core0"))
                if now >= a.seconds and done:
                    break
                if now >= 3 * a.seconds:
                    failures.append(f"the generators had not sent their count after {now:.0f} s")
                    break
            churn.step()
        churn.drain()
        time.sleep(1.0)
        ifs = interfaces(gw)
        end_tables = tables(gw)
        rss_end = gw.rss_kb()
    finally:
        gw.stop()

    csv_path = os.path.join(work, "soak.csv")
    with open(csv_path, "w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        wr.writeheader()
        wr.writerows(rows)
    if a.svg:
        svg(rows, a.svg, a.warmup)

    up, down = (ifs["access0"]["rx_packets"], ifs["core0"]["tx_packets"]), (ifs["core0"]["rx_packets"], ifs["access0"]["tx_packets"])
    if up[0] != up[1] or down[0] != down[1]:
        failures.append(f"loss on unaffected traffic: users->core {up[0]} in, {up[1]} out; core->users {down[0]} in, {down[1]} out")
    if end_tables != static:
        failures.append(f"tables after the churn drained: {end_tables}, at the start {static}")
    warm = [r["rss_kb"] for r in rows if r["t"] >= a.warmup]
    growth = (max(warm) - min(warm)) if warm else 0
    if warm and growth > max(2048, min(warm) // 50):
        failures.append(f"RSS after warm-up grew {growth} KiB ({min(warm)} -> {max(warm)} KiB)")
    print(f"soak: {time.time() - t0:.0f} s, churn operations {churn.ops}; users->core {up[0]:,} in / {up[1]:,} out, "
          f"core->users {down[0]:,} in / {down[1]:,} out; churned traffic {ifs['churn0']['rx_packets']:,} in / "
          f"{ifs['sink0']['tx_packets']:,} out; tables (fib, gtpu, udp) start {static} end {end_tables}; "
          f"RSS after warm-up {min(warm) if warm else 0}-{max(warm) if warm else 0} KiB (end {rss_end} KiB); CSV {csv_path}")
    for f in failures:
        print("soak: FAIL:", f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
