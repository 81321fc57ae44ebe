#!/usr/bin/env python3
"""IP parcels' throughput (issue 20): the IETF 115 report's table as segments/s and Gbit/s
per segment size and count, in the engine and over veth between Linux hosts that use UDP
GSO/GRO, against Linux's own forwarding of the same traffic in the same run.

  sudo scripts/parcel_throughput.py [--bin target/release/vecgate] [--out DIR] [--repeat 3] [--seconds 3]

In the engine: `vecgate bench parcel-forward|parcel-split|parcel-join` per size and count
(segment check on, the default), ip4-forward before and after as the baseline; the rate is
the graph's (TSC / median cycles per segment), so the replay device's copy of each frame is
left out; each figure is the median of --repeat runs.

Over veth (namespaces and veth pairs made here and removed after; 198.18.0.0/15 only):
  vecgate path: sender ─ vecgate A (join; GSO frames become parcels) ═ parcel link ═ vecgate B (GSO frames out) ─ receiver
  Linux path:   sender ─ a Linux router (ip_forward; GSO frames pass whole) ─ receiver
The sender sends N x B bytes per send() with UDP_SEGMENT = B, the receiver reads with
UDP_GRO; the figure is the segments the receiver got per second. Writes results.json,
table.md and parcels.svg (a plot with no external assets) into --out."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from netns import Lab, Vecgate  # noqa: E402

PEER = ROOT / "tests" / "gso_peer.py"
SIZES = (1280, 2000, 4000, 8000)


def counts(size):
    """Segments per parcel (or per GSO send): 1, 16 and 32 where they fit 64 000 bytes."""
    return [n for n in (1, 8, 16, 32) if n * size <= 64000 and (n != 8 or size == 8000)]


def bench(binary, args):
    r = subprocess.run([binary, "bench", *args, "--json"], capture_output=True, text=True, timeout=300)
    if r.returncode:
        raise SystemExit(f"bench {args}: {r.stderr}")
    return json.loads(r.stdout)


def in_engine(binary, repeat):
    rows, base = [], []
    for rnd in range(repeat):
        base.append(bench(binary, ["ip4-forward", "--packets", "2000000"])["median_cycles_per_packet"])
        for size in SIZES:
            for n in counts(size):
                for sc in ("parcel-forward", "parcel-split", "parcel-join"):
                    packets = 400000 if sc == "parcel-join" else max(400000 // n, 2000)
                    r = bench(binary, [sc, "--packets", str(packets), "--segment-size", str(size), "--segments", str(n)])
                    rows.append({"scenario": sc, "size": size, "n": n, "round": rnd, "cycles": r["median_cycles_per_segment"],
                                 "tsc_hz": r["tsc_hz"], "wall_segments_per_sec": r["segments_per_sec"]})
    base.append(bench(binary, ["ip4-forward", "--packets", "2000000"])["median_cycles_per_packet"])
    ip4 = statistics.median(base)
    table = []
    for size in SIZES:
        for n in counts(size):
            for sc in ("parcel-forward", "parcel-split", "parcel-join"):
                runs = [r for r in rows if (r["scenario"], r["size"], r["n"]) == (sc, size, n)]
                cyc = statistics.median(r["cycles"] for r in runs)
                rate = runs[0]["tsc_hz"] / cyc
                table.append({"scenario": sc, "size": size, "n": n, "cycles_per_segment": cyc, "segments_per_sec": rate,
                              "gbps": rate * size * 8 / 1e9, "vs_ip4_forward": ip4 / cyc,
                              "wall_segments_per_sec": statistics.median(r["wall_segments_per_sec"] for r in runs)})
    return {"ip4_forward_cycles": ip4, "ip4_forward_runs": base, "rows": table}


VG_A = """[dataplane]
large_buffers = 1024
medium_buffers = 2048
[[interface]]
name = "in"
type = "af_packet"
host_if = "a1"
mac = "02:00:00:00:0a:01"
mtu = 9000
addresses = ["198.18.20.1/24"]

[[interface]]
name = "p"
type = "af_packet"
host_if = "pa"
mac = "02:00:00:00:0a:02"
mtu = 65535
parcels = true
addresses = ["198.18.21.1/24"]

[[route]]
prefix = "198.18.22.0/24"
via = "198.18.21.2"

[[neighbour]]
interface = "p"
ip = "198.18.21.2"
mac = "02:00:00:00:0b:01"
"""

VG_B = """[dataplane]
large_buffers = 1024
medium_buffers = 2048
[[interface]]
name = "p"
type = "af_packet"
host_if = "pb"
mac = "02:00:00:00:0b:01"
mtu = 65535
parcels = true
addresses = ["198.18.21.2/24"]

[[interface]]
name = "out"
type = "af_packet"
host_if = "b1"
mac = "02:00:00:00:0b:02"
mtu = 9000
addresses = ["198.18.22.1/24"]

[[route]]
prefix = "198.18.20.0/24"
via = "198.18.21.1"

[[neighbour]]
interface = "p"
ip = "198.18.21.1"
mac = "02:00:00:00:0a:02"
"""


def host(lab, ns, ifname, addr, gw):
    lab.run(ns, "ip", "addr", "add", addr, "dev", ifname)
    lab.run(ns, "ip", "route", "add", "default", "via", gw)


def ping_until(lab, ns, dst):
    for _ in range(20):
        if lab.run(ns, "ping", "-c", "1", "-W", "1", dst, check=False).returncode == 0:
            return
    raise SystemExit(f"no path to {dst}")


def measure(lab, sender, receiver, dst, port, size, n, seconds):
    sink = lab.spawn(receiver, sys.executable, str(PEER), "sink", dst, str(port), "1", str(seconds))
    assert sink.stdout.readline().strip() == "READY"
    lab.run(sender, sys.executable, str(PEER), "blast", dst, str(port), str(n * size), str(size), str(seconds + 1.5), timeout=seconds + 30)
    out, _ = sink.communicate(timeout=30)
    r = json.loads(out.strip().splitlines()[-1])
    return r["segments"] / r["seconds"] if r["seconds"] else 0.0


def over_veth(binary, repeat, seconds, tmp):
    lab = Lab()
    try:
        s, ga, gb, r = lab.ns("ts"), lab.dataplane_ns("tga"), lab.dataplane_ns("tgb"), lab.ns("tr")
        lab.veth(s, "s0", ga, "a1", mtu=9000)
        lab.veth(ga, "pa", gb, "pb", mtu=65535)
        lab.veth(gb, "b1", r, "r0", mtu=9000)
        host(lab, s, "s0", "198.18.20.2/24", "198.18.20.1")
        host(lab, r, "r0", "198.18.22.2/24", "198.18.22.1")
        s2, lr, r2 = lab.ns("ls"), lab.ns("lr"), lab.ns("lrx")
        lab.veth(s2, "s0", lr, "l0", mtu=9000)
        lab.veth(lr, "l1", r2, "r0", mtu=9000)
        host(lab, s2, "s0", "198.18.30.2/24", "198.18.30.1")
        host(lab, r2, "r0", "198.18.31.2/24", "198.18.31.1")
        lab.run(lr, "ip", "addr", "add", "198.18.30.1/24", "dev", "l0")
        lab.run(lr, "ip", "addr", "add", "198.18.31.1/24", "dev", "l1")
        lab.run(lr, "sysctl", "-qw", "net.ipv4.ip_forward=1")
        ping_until(lab, s2, "198.18.31.2")
        rows, errs = [], {}
        for size in SIZES:
            # A fresh pair per segment size: `Vecgate` runs each for at most 300 s.
            a = Vecgate(lab, binary, ga, VG_A, tmp, name=f"tput-a-{size}", split_dataplane=True)
            b = Vecgate(lab, binary, gb, VG_B, tmp, name=f"tput-b-{size}", split_dataplane=True)
            ping_until(lab, s, "198.18.22.2")
            for n in counts(size):
                vg, lx = [], []
                for k in range(repeat):
                    # Alternate which path goes first, so drift in the machine's load
                    # falls on both.
                    order = [(vg, s, r, "198.18.22.2"), (lx, s2, r2, "198.18.31.2")]
                    for acc, snd, rcv, dst in order if k % 2 == 0 else order[::-1]:
                        acc.append(measure(lab, snd, rcv, dst, 9100, size, n, seconds))
                vgm, lxm = statistics.median(vg), statistics.median(lx)
                rows.append({"size": size, "n": n, "vecgate_segments_per_sec": vgm, "linux_segments_per_sec": lxm,
                             "vecgate_gbps": vgm * size * 8 / 1e9, "linux_gbps": lxm * size * 8 / 1e9,
                             "ratio": vgm / lxm if lxm else None, "vecgate_runs": vg, "linux_runs": lx})
                print(f"veth {size} B x {n}: vecgate {vgm / 1e3:.0f} k segments/s, Linux {lxm / 1e3:.0f} k", file=sys.stderr)
            for gw in (a, b):
                for k, v in gw.errors().items():
                    if v and "parcel" in k[0]:
                        errs[f"{k[0]}/{k[1]}"] = errs.get(f"{k[0]}/{k[1]}", 0) + v
                gw.stop()
        # Frames that went on whole for want of a large buffer were not measured as parcels.
        if errs.get("parcel4-join/gso-frames-passed"):
            print(f"warning: {errs['parcel4-join/gso-frames-passed']} GSO frames passed whole (raise large_buffers)", file=sys.stderr)
        return {"rows": rows, "parcel_counters": errs}
    finally:
        lab.close()


def svg(result):
    """Two bar charts: per-segment rate against ip4-forward in the engine (forward, split,
    join at the largest count), and Gbit/s over veth (vecgate against Linux)."""
    w, h, pad = 900, 330, 50
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{2 * h}" font-family="sans-serif" font-size="12">',
           f'<rect width="{w}" height="{2 * h}" fill="white"/>']

    def chart(y0, title, groups, series, colors, fmt):
        top = max([v for g in groups for v in g[1]] + [1e-9])
        out.append(f'<text x="{pad}" y="{y0 + 20}" font-size="14" font-weight="bold">{title}</text>')
        base, height = y0 + h - 40, h - 80
        out.append(f'<line x1="{pad}" y1="{base}" x2="{w - 10}" y2="{base}" stroke="black"/>')
        gw = (w - pad - 20) / max(len(groups), 1)
        bw = gw * 0.8 / len(series)
        for gi, (label, vals) in enumerate(groups):
            gx = pad + gi * gw + gw * 0.1
            for si, v in enumerate(vals):
                bh = height * v / top
                x = gx + si * bw
                out.append(f'<rect x="{x:.1f}" y="{base - bh:.1f}" width="{bw - 2:.1f}" height="{bh:.1f}" fill="{colors[si]}"/>')
                out.append(f'<text x="{x + bw / 2:.1f}" y="{base - bh - 3:.1f}" text-anchor="middle" font-size="10">{fmt(v)}</text>')
            out.append(f'<text x="{gx + gw * 0.4:.1f}" y="{base + 15}" text-anchor="middle">{label}</text>')
        for si, name in enumerate(series):
            lx = w - 200
            ly = y0 + 20 + 16 * si
            out.append(f'<rect x="{lx}" y="{ly - 10}" width="12" height="12" fill="{colors[si]}"/><text x="{lx + 18}" y="{ly}">{name}</text>')

    eng = result.get("in_engine")
    if eng:
        groups = []
        for size in SIZES:
            n = max(counts(size))
            vals = [next(r["vs_ip4_forward"] for r in eng["rows"] if (r["scenario"], r["size"], r["n"]) == (sc, size, n))
                    for sc in ("parcel-forward", "parcel-split", "parcel-join")]
            groups.append((f"{size} B x {n}", vals))
        chart(0, "In the engine: per-segment rate / ip4-forward's per-packet rate", groups, ["forward", "split", "join"],
              ["#3465a4", "#f57900", "#73d216"], lambda v: f"{v:.2f}x")
    veth = result.get("over_veth")
    if veth:
        groups = [(f"{r['size']} B x {r['n']}", [r["vecgate_gbps"], r["linux_gbps"]]) for r in veth["rows"]]
        chart(h, "Over veth, UDP GSO sender to UDP_GRO receiver: Gbit/s of segments", groups, ["vecgate (parcel link)", "Linux router"],
              ["#3465a4", "#888a85"], lambda v: f"{v:.1f}")
    out.append("</svg>")
    return "\n".join(out)


def table(result):
    lines = []
    eng = result.get("in_engine")
    if eng:
        lines += [f"In the engine (ip4-forward median {eng['ip4_forward_cycles']:.1f} cycles/packet in the same run):", "",
                  "| scenario | B | N | cycles/segment | M segments/s (graph) | Gbit/s (graph) | vs ip4-forward |", "|---|---|---|---|---|---|---|"]
        for r in eng["rows"]:
            lines.append(f"| {r['scenario'][7:]} | {r['size']} | {r['n']} | {r['cycles_per_segment']:.1f} | {r['segments_per_sec'] / 1e6:.2f} | "
                         f"{r['gbps']:.1f} | {r['vs_ip4_forward']:.2f}x |")
        lines.append("")
    veth = result.get("over_veth")
    if veth:
        lines += ["Over veth (receiver's segments/s, median of runs alternating the two paths):", "",
                  "| B | N | vecgate k segments/s | Gbit/s | Linux k segments/s | Gbit/s | vecgate / Linux |", "|---|---|---|---|---|---|---|"]
        for r in veth["rows"]:
            ratio = f"{r['ratio']:.2f}" if r["ratio"] else "-"
            lines.append(f"| {r['size']} | {r['n']} | {r['vecgate_segments_per_sec'] / 1e3:.0f} | {r['vecgate_gbps']:.2f} | "
                         f"{r['linux_segments_per_sec'] / 1e3:.0f} | {r['linux_gbps']:.2f} | {ratio} |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=str(ROOT / "target" / "release" / "vecgate"))
    ap.add_argument("--out", default="parcel-throughput")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--skip-engine", action="store_true")
    ap.add_argument("--skip-veth", action="store_true")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    result = {"cpu": subprocess.run(["sh", "-c", "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2"], capture_output=True, text=True).stdout.strip(),
              "cores": os.cpu_count(), "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    if not a.skip_engine:
        result["in_engine"] = in_engine(a.bin, a.repeat)
    if not a.skip_veth:
        if os.geteuid() != 0:
            raise SystemExit("over veth needs root (network namespaces)")
        result["over_veth"] = over_veth(a.bin, a.repeat, a.seconds, out.resolve())
    (out / "results.json").write_text(json.dumps(result, indent=1))
    (out / "table.md").write_text(table(result))
    (out / "parcels.svg").write_text(svg(result))
    print(table(result))


if __name__ == "__main__":
    main()
