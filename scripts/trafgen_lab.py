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
# vecgate's receive ring in the lab: v2 (a frame handed over at once; no GSO here) or v3.
RING = os.environ.get("RING", "v2")


def mac_of(lab, ns, ifname):
    return lab.run(ns, "cat", f"/sys/class/net/{ifname}/address").stdout.strip()


def topology(lab):
    tg, dut = lab.ns("tg"), lab.dataplane_ns("dut")
    sh("ip", "netns", "exec", tg, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1")
    lab.veth(tg, "t0", dut, "g0")
    lab.veth(tg, "t1", dut, "g1", mtu=1600)
    return tg, dut


def vecgate_config(t1_mac, mode, tmp):
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
    ring = 'rx_ring = "v2"\nrx_frame_size = 4096\nrx_frames = 4096\n' if RING == "v2" else ""
    return f"""
[dataplane]
socket = "{sock}"
worker_core = {DUT_CORE}
busy_poll = true

[[interface]]
name = "g0"
type = "af_packet"
host_if = "g0"
{ring}addresses = ["198.18.0.1/24"]

[[interface]]
name = "g1"
type = "af_packet"
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
                "--dst-mac", dst_mac, "--json", timeout=duration + 30)
    return json.loads(r.stdout)


class Dut:
    """A device under test in the lab: vecgate in one mode, or the kernel."""

    def __init__(self, kind, mode=None):
        self.kind, self.mode = kind, mode
        self.lab = Lab()
        self.tg, self.dut = topology(self.lab)
        t1 = mac_of(self.lab, self.tg, "t1")
        self.tmp = OUT / f"lab-{kind}-{mode}"
        self.tmp.mkdir(parents=True, exist_ok=True)
        if kind == "kernel":
            kernel_router(self.lab, self.dut, t1)
            self.dst_mac = mac_of(self.lab, self.dut, "g0")
        else:
            cfg, sock = vecgate_config(t1, mode, self.tmp)
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

    def close(self):
        self.lab.close()


def zero_loss_rate(dut, lo=10_000, hi=2_000_000, duration=3.0, steps=9):
    """Highest offered rate with no loss, by bisection on a log-ish scale."""
    best = None
    for _ in range(steps):
        mid = int((lo * hi) ** 0.5)
        r = dut.run(mid, duration)
        ok = r["lost"] == 0 and r["tx_failed"] == 0 and r["tx_pps"] >= 0.97 * mid
        print(f"  {dut.kind}/{dut.mode}: {mid} pps -> sent {r['sent']} lost {r['lost']} (tx {r['tx_pps']:.0f} pps)", flush=True)
        if ok:
            best, lo = r | {"rate": mid}, mid
        else:
            hi = mid
        if hi / lo < 1.05:
            break
    return best


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
        high = zero_loss_rate(zero)
    finally:
        zero.close()
    rate = high["rate"]
    print(f"highest zero-loss rate with checksum zero: {rate} pps", flush=True)
    for mode in ("zero", "software", "offload"):
        d = Dut("vecgate", mode)
        try:
            results[mode] = {"low": d.run(100, 10.0), "high": d.run(rate, 10.0)}
        finally:
            d.close()
    out = {"size": SIZE, "high_rate": rate, "results": results}
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "draft.json").write_text(json.dumps(out, indent=2))
    for label, key in (("INPUT: 100 pps", "low"), (f"INPUT: {rate} pps", "high")):
        print(f"\n#### {label}, {SIZE}-byte packets\n")
        for mode in ("zero", "software", "offload"):
            print(table({"zero": "No checksum calculation", "software": "Software checksum calculation",
                         "offload": "UDP checksum offload"}[mode], results[mode][key]))
    return out


def compare():
    out = {}
    for kind, mode in (("kernel", None), ("vecgate", "route"), ("vecgate", "software")):
        d = Dut(kind, mode)
        try:
            out[f"{kind}-{mode or 'route'}"] = zero_loss_rate(d)
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


if __name__ == "__main__":
    if os.geteuid() != 0:
        sys.exit("needs root (network namespaces)")
    {"draft": draft, "compare": compare}[sys.argv[1] if len(sys.argv) > 1 else "draft"]()
