#!/usr/bin/env python3
"""The checksum draft's experiment (draft-murakami-dmm-udp-checksum-impact-gtpu), here:
`vecgate trafgen` sends 1492-byte IPv4 packets into a device under test over a veth,
the device routes them (or encapsulates them in IPv6 GTP-U) out of a second veth, and
trafgen receives them and reports loss and latency. The device is vecgate on one pinned
worker core, or the Linux kernel routing the same traffic. Everything runs in network
namespaces this script creates and deletes, with 198.18.0.0/15 and 2001:db8::/32
addresses only.

  scripts/trafgen_lab.py draft      # zero / software / offload at 100 pps and at the
                                    # highest zero-loss rate of zero (found by search)
  scripts/trafgen_lab.py compare    # highest zero-loss rates: kernel routing, vecgate
                                    # routing, vecgate GTP-U, in one run
  scripts/trafgen_lab.py profile    # vecgate's per-node cycles at 100 kpps, routing and
                                    # GTP-U, over af_packet and over af_xdp, in one run

IO=af_xdp runs vecgate's interfaces as af_xdp instead of af_packet (draft, compare);
TRAFGEN_IO=af_xdp gives trafgen AF_XDP sockets too.

Writes JSON to target/trafgen/<mode>.json and prints Markdown tables.
"""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from netns import Lab, sh  # noqa: E402

BIN = Path(os.environ.get("VECGATE_BIN", ROOT / "target" / "release" / "vecgate"))
OUT = ROOT / "target" / "trafgen"
SIZE = int(os.environ.get("SIZE", "1492"))
GEN_CORE, DUT_CORE = "0", 1
ROUNDS = int(os.environ.get("ROUNDS", "3"))
# compare: also record vecgate's per-node cycles at a fixed 100 kpps.
PROFILE = os.environ.get("PROFILE", "0") == "1"
# vecgate's receive ring in the lab: v2 (a frame handed over at once; no GSO here) or v3.
RING = os.environ.get("RING", "v2")
# vecgate's interface kind: af_packet or af_xdp.
IO = os.environ.get("IO", "af_packet")
# trafgen's own sockets: af_packet (default) or af_xdp.
TRAFGEN_IO = os.environ.get("TRAFGEN_IO", "af_packet")


def mac_of(lab, ns, ifname):
    return lab.run(ns, "cat", f"/sys/class/net/{ifname}/address").stdout.strip()


def topology(lab):
    tg, dut = lab.ns("tg"), lab.dataplane_ns("dut")
    sh("ip", "netns", "exec", tg, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1")
    lab.veth(tg, "t0", dut, "g0")
    lab.veth(tg, "t1", dut, "g1", mtu=1600)
    return tg, dut


def vecgate_config(t1_mac, mode, tmp, io):
    sock = tmp / "dut.sock"
    tunnel = ""
    if mode == "route":
        route = 'via = "198.18.20.2"'
    else:
        route = 'interface = "gtpu_tunnel0"'
        tunnel = f"""
[[gtpu_tunnel]]
local = "2001:db8:20::1"
remote = "2001:db8:20::2"
teid_in = 256
teid_out = 512
checksum = "{mode}"
"""
    ring = 'rx_ring = "v2"\nrx_frame_size = 4096\nrx_frames = 4096\n' if RING == "v2" and io == "af_packet" else ""
    return f"""
[dataplane]
socket = "{sock}"
worker_core = {DUT_CORE}
busy_poll = true

[[interface]]
name = "g0"
type = "{io}"
host_if = "g0"
{ring}addresses = ["198.18.0.1/24"]

[[interface]]
name = "g1"
type = "{io}"
host_if = "g1"
{ring}mtu = 1600
addresses = ["198.18.20.1/24", "2001:db8:20::1/64"]

[[neighbour]]
interface = "g1"
ip = "198.18.20.2"
mac = "{t1_mac}"

[[neighbour]]
interface = "g1"
ip = "2001:db8:20::2"
mac = "{t1_mac}"

[[neighbour]]
interface = "g0"
ip = "198.18.0.2"
mac = "02:00:00:00:00:99"
{tunnel}
[[route]]
prefix = "198.19.0.0/16"
{route}
""", sock


def kernel_router(lab, dut, t1_mac):
    for cmd in (["sysctl", "-qw", "net.ipv4.ip_forward=1"],
                ["ip", "addr", "add", "198.18.0.1/24", "dev", "g0"],
                ["ip", "addr", "add", "198.18.20.1/24", "dev", "g1"],
                ["ip", "neigh", "replace", "198.18.20.2", "lladdr", t1_mac, "dev", "g1", "nud", "permanent"],
                ["ip", "route", "add", "198.19.0.0/16", "via", "198.18.20.2"]):
        lab.run(dut, *cmd)


def trafgen(lab, tg, dst_mac, rate, duration):
    r = lab.run(tg, "taskset", "-c", GEN_CORE, str(BIN), "trafgen", "--tx-if", "t0", "--rx-if", "t1", "--size", str(SIZE),
                "--rate", str(rate), "--duration", str(duration), "--src", "198.18.0.2", "--dst", "198.19.0.1",
                "--dst-mac", dst_mac, "--json", *(["--af-xdp"] if TRAFGEN_IO == "af_xdp" else []), timeout=duration + 30)
    return json.loads(r.stdout)


class Dut:
    """A device under test in the lab: vecgate in one mode, or the kernel."""

    def __init__(self, kind, mode=None, io=IO):
        self.kind, self.mode, self.io = kind, mode, io
        self.lab = Lab()
        self.tg, self.dut = topology(self.lab)
        t1 = mac_of(self.lab, self.tg, "t1")
        self.tmp = OUT / f"lab-{kind}-{mode}-{io}"
        self.tmp.mkdir(parents=True, exist_ok=True)
        if kind == "kernel":
            kernel_router(self.lab, self.dut, t1)
            self.dst_mac = mac_of(self.lab, self.dut, "g0")
        else:
            cfg, sock = vecgate_config(t1, mode, self.tmp, io)
            path = self.tmp / "dut.toml"
            path.write_text(cfg)
            self.proc = self.lab.spawn(self.dut, str(BIN), "run", "--config", str(path), "--interval", "0", "--duration", "3600")
            deadline = time.time() + 10
            while not sock.exists():
                assert self.proc.poll() is None and time.time() < deadline, self.proc.communicate()
                time.sleep(0.05)
            self.dst_mac = mac_of(self.lab, self.dut, "g0")
        trafgen(self.lab, self.tg, self.dst_mac, 100, 0.5)  # warm-up

    def run(self, rate, duration):
        return trafgen(self.lab, self.tg, self.dst_mac, rate, duration)

    def profile(self, rate=100_000, duration=3.0):
        """vecgate's own TSC accounting at a fixed offered rate: cycles per packet of each
        node, receive and transmit (syscalls, copies) included. perf's hardware counters
        are not available in this VM."""
        ctl = [str(BIN), "ctl", "--socket", str(self.tmp / "dut.sock"), "--json"]
        subprocess.run(ctl + ["clear", "runtime"], capture_output=True, timeout=10)
        r = self.run(rate, duration)
        s = json.loads(subprocess.run(ctl + ["show", "runtime"], capture_output=True, text=True, timeout=10).stdout)["data"]
        nodes = {n["name"]: round(n["cycles_per_packet"], 1) for n in s["nodes"] if n["packets"]}
        rx = sum(p["counters"]["rx_packets"] for p in s["ports"])
        busy = sum(n["cycles"] for n in s["nodes"])
        return {"offered_pps": rate, "lost": r["lost"], "nodes": nodes, "packets": rx,
                "cycles_per_packet_busy": round(busy / max(rx, 1), 1)}

    def close(self):
        self.lab.close()


def zero_loss_rate(dut, lo=10_000, hi=2_000_000, duration=3.0, steps=10):
    """Highest rate with no loss (best of two trials per rate), by bisection on a log scale. A run where the generator
    could not reach the offered rate but lost nothing counts at the rate it reached, and
    marks the result generator-bound (the device was not the limit)."""
    best, bound = None, False
    for _ in range(steps):
        mid = int((lo * hi) ** 0.5)
        # Best of two trials: a host-level hiccup of this shared VM must not end the
        # search on its own.
        r = dut.run(mid, duration)
        if r["lost"] or r["tx_failed"]:
            r = dut.run(mid, duration)
        print(f"  {dut.kind}/{dut.mode}: {mid} pps -> sent {r['sent']} lost {r['lost']} (tx {r['tx_pps']:.0f} pps)", flush=True)
        lossless = r["lost"] == 0 and r["tx_failed"] == 0
        if lossless and r["tx_pps"] < 0.97 * mid:
            bound = True
            if not best or r["tx_pps"] > best["rate"]:
                best = r | {"rate": int(r["tx_pps"])}
            hi = mid
        elif lossless:
            best, lo = r | {"rate": mid}, mid
        else:
            hi = mid
        if hi / lo < 1.04:
            break
    return best and best | {"generator_bound": bound}


def table(title, r):
    l = r.get("latency_ns") or {}
    loss = "No packet loss" if r["lost"] == 0 else "%.3f%% packet loss" % r["loss_percent"]
    return (f"{title}: {loss} "
            f"({r['sent']} sent)\n\n"
            "| Avg latency (ns) | Min latency (ns) | Max latency (ns) | p50 (ns) | p99 (ns) | p99.9 (ns) |\n"
            "|---:|---:|---:|---:|---:|---:|\n"
            f"| {l.get('avg', '-'):,} | {l.get('min', '-'):,} | {l.get('max', '-'):,} | {l.get('p50', '-'):,} | {l.get('p99', '-'):,} | {l.get('p999', '-'):,} |\n")


def draft():
    results = {}
    zero = Dut("vecgate", "zero")
    try:
        rate = zero_loss_rate(zero)["rate"]
        # The search's runs are short: confirm the rate holds for a whole 10 s run, and
        # back off 10 % at a time until it does.
        for _ in range(6):
            r = zero.run(rate, 10.0)
            print(f"  confirm {rate} pps for 10 s: lost {r['lost']}", flush=True)
            if r["lost"] == 0 and r["tx_failed"] == 0:
                break
            rate = int(rate * 0.9)
    finally:
        zero.close()
    print(f"highest zero-loss rate with checksum zero: {rate} pps", flush=True)
    # Rounds interleave the modes so slow drifts of the machine hit all of them. This VM's
    # host pauses it now and then (latencies of 0.1–1 s, a burst of loss) in any mode;
    # each mode reports its least disturbed round (no loss, then lowest average), and
    # every round is kept in the JSON.
    rounds = {m: {"low": [], "high": []} for m in ("zero", "software", "offload")}
    for _ in range(ROUNDS):
        for mode in rounds:
            d = Dut("vecgate", mode)
            try:
                rounds[mode]["low"].append(d.run(100, 10.0))
                rounds[mode]["high"].append(d.run(rate, 10.0))
            finally:
                d.close()
    for mode, rs in rounds.items():
        results[mode] = {}
        for key, runs in rs.items():
            by_avg = sorted(runs, key=lambda r: (r["lost"], (r.get("latency_ns") or {}).get("avg", 1 << 62)))
            results[mode][key] = by_avg[0] | {"rounds": runs}
    out = {"size": SIZE, "high_rate": rate, "results": results}
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "draft.json").write_text(json.dumps(out, indent=2))
    (OUT / "draft.svg").write_text(svg(out))
    for label, key in (("INPUT: 100 pps", "low"), (f"INPUT: {rate} pps", "high")):
        print(f"\n#### {label}, {SIZE}-byte packets\n")
        for mode in ("zero", "software", "offload"):
            print(table({"zero": "No checksum calculation", "software": "Software checksum calculation",
                         "offload": "UDP checksum offload"}[mode], results[mode][key]))
    print("\n| rate | mode | every round: loss (packets), average latency (ns), max latency (ns) |\n|---|---|---|")
    for key, label in (("low", "100 pps"), ("high", f"{rate} pps")):
        for mode in ("zero", "software", "offload"):
            cells = [f"{r['lost']}, {(r.get('latency_ns') or {}).get('avg', 0):,}, {(r.get('latency_ns') or {}).get('max', 0):,}"
                     for r in results[mode][key]["rounds"]]
            print(f"| {label} | {mode} | {' · '.join(cells)} |")
    return out


def svg(out):
    """Average latency per checksum mode at both rates, as bars (log scale), with loss."""
    modes = ("zero", "software", "offload")
    colors = {"zero": "#4c72b0", "software": "#dd8452", "offload": "#55a868"}
    import math
    w, h, left, top, bottom = 640, 320, 70, 40, 60
    vals = [out["results"][m][k]["latency_ns"]["avg"] for k in ("low", "high") for m in modes]
    top_v = 10 ** math.ceil(math.log10(max(vals) * 1.2))
    bot_v = 10 ** math.floor(math.log10(min(vals) / 1.2))
    def y(v):
        return top + (h - top - bottom) * (1 - (math.log10(v) - math.log10(bot_v)) / (math.log10(top_v) - math.log10(bot_v)))
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
             f'<text x="{w/2}" y="20" text-anchor="middle" font-size="14">vecgate IPv6 GTP-U encap, {out["size"]}-byte packets: average latency (ns, log scale)</text>']
    d = 10 ** math.floor(math.log10(bot_v))
    v = bot_v
    while v <= top_v:
        parts.append(f'<line x1="{left}" x2="{w-10}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#ddd"/><text x="{left-5}" y="{y(v)+4:.1f}" text-anchor="end">{v:,.0f}</text>')
        v *= 10
    groups = (("low", "100 pps"), ("high", f"{out['high_rate']:,} pps"))
    gw = (w - left - 20) / 2
    for gi, (key, label) in enumerate(groups):
        x0 = left + 10 + gi * gw
        for mi, m in enumerate(modes):
            r = out["results"][m][key]
            v = r["latency_ns"]["avg"]
            bx = x0 + 20 + mi * (gw - 40) / 3
            bw = (gw - 40) / 3 - 10
            parts.append(f'<rect x="{bx:.1f}" y="{y(v):.1f}" width="{bw:.1f}" height="{h - bottom - y(v):.1f}" fill="{colors[m]}"/>')
            parts.append(f'<text x="{bx + bw/2:.1f}" y="{y(v)-4:.1f}" text-anchor="middle">{v:,}</text>')
            parts.append(f'<text x="{bx + bw/2:.1f}" y="{h-bottom+14}" text-anchor="middle">{m}</text>')
            parts.append(f'<text x="{bx + bw/2:.1f}" y="{h-bottom+28}" text-anchor="middle" fill="#a00">loss {r["loss_percent"]:.2f}%</text>')
        parts.append(f'<text x="{x0 + gw/2:.1f}" y="{h-8}" text-anchor="middle" font-weight="bold">{label}</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def compare():
    out = {}
    for kind, mode in (("kernel", None), ("vecgate", "route"), ("vecgate", "software")):
        d = Dut(kind, mode)
        try:
            out[f"{kind}-{mode or 'route'}"] = zero_loss_rate(d)
            if kind == "vecgate" and PROFILE:
                out[f"{kind}-{mode}"]["profile"] = d.profile()
        finally:
            d.close()
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "compare.json").write_text(json.dumps(out, indent=2))
    k = out["kernel-route"]["rate"] if out["kernel-route"] else 0
    print("\n| device under test | highest zero-loss rate (pps) | ratio to kernel routing |\n|---|---:|---:|")
    for name, r in out.items():
        rate = r["rate"] if r else 0
        print(f"| {name} | {rate:,} | {rate / k:.2f} |" if k else f"| {name} | {rate:,} | - |")
    return out


def profile():
    """Per-node cycles at a fixed 100 kpps: af_packet against af_xdp, routing and GTP-U
    (software checksum), interleaved rounds in one run."""
    out = {}
    for rnd in range(ROUNDS):
        for io in ("af_packet", "af_xdp"):
            for mode in ("route", "software"):
                d = Dut("vecgate", mode, io)
                try:
                    p = d.profile()
                finally:
                    d.close()
                out.setdefault(f"{io}-{mode}", []).append(p)
                print(f"  round {rnd} {io}/{mode}: {p}", flush=True)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "profile.json").write_text(json.dumps(out, indent=2))
    print("\n| interfaces / path | input | graph | interface-tx | total busy cycles/packet | lost |\n|---|---:|---:|---:|---:|---:|")
    for name, runs in out.items():
        best = min(runs, key=lambda p: p["cycles_per_packet_busy"])
        n = best["nodes"]
        inp = sum(v for k, v in n.items() if k.endswith("-input") and k.startswith(("af_", "tap")))
        tx = n.get("interface-tx", 0)
        graph = best["cycles_per_packet_busy"] - inp - tx
        print(f"| {name} | {inp:,.0f} | {graph:,.0f} | {tx:,.0f} | {best['cycles_per_packet_busy']:,.0f} | {best['lost']} |")
    return out


if __name__ == "__main__":
    if os.geteuid() != 0:
        sys.exit("needs root (network namespaces)")
    {"draft": draft, "compare": compare, "profile": profile}[sys.argv[1] if len(sys.argv) > 1 else "draft"]()
