#!/usr/bin/env python3
"""The load balancer against its kernel baseline over veth: kube-proxy's nftables rules
(nftables mode's layout: one verdict map keyed by address . protocol . port, a chain per
service choosing an endpoint at random, a chain per endpoint that DNATs, masquerade by
mark) in the Linux kernel of a namespace, and vecgate's lb4-nat in the same place, with
1, 1000 and 10 000 UDP services in one run. `vecgate trafgen` sends 64-byte UDP frames
to the last service's address from one veth and counts what comes back, translated to a
backend, on the other; the figure is the highest offered rate with no loss (bisection,
best of two 3-second trials per rate, trafgen_lab.py's search). A benchmark, not a test:
the figures go to docs/PERFORMANCE.md.

  scripts/lb_baseline.py [N ...]     # default: 1 1000 10000

One flow: the kernel's NAT rules see its first packet only (conntrack carries the rest),
and vecgate's session table holds it after the first; the number of services shows in
what a lookup touches. Namespaces and addresses as scripts/trafgen_lab.py (198.18.0.0/15
only); writes target/trafgen/lb-baseline.json.
"""
import ipaddress
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import trafgen_lab as tl  # noqa: E402
from netns import Lab  # noqa: E402

SIZE = 64
PORT = 53
BACKENDS = ["198.19.1.10", "198.19.2.10"]
VIP0 = ipaddress.IPv4Address("198.18.128.1")


def vips(n):
    return [str(VIP0 + i) for i in range(n)]


def nft_rules(n):
    """kube-proxy's nftables layout for n UDP services of two endpoints each."""
    out = ["table ip vg-kp", "delete table ip vg-kp", "table ip vg-kp {", "\tmap service-ips {",
           "\t\ttype ipv4_addr . inet_proto . inet_service : verdict", "\t\telements = {",
           ",\n".join(f"\t\t\t{v} . udp . {PORT} : goto svc-{i}" for i, v in enumerate(vips(n))), "\t\t}", "\t}",
           "\tchain services {", "\t\tip daddr . meta l4proto . th dport vmap @service-ips", "\t}",
           "\tchain nat-prerouting {", "\t\ttype nat hook prerouting priority dstnat; policy accept;", "\t\tjump services", "\t}",
           "\tchain mark-for-masquerade {", "\t\tmeta mark set meta mark | 0x00004000", "\t}",
           "\tchain nat-postrouting {", "\t\ttype nat hook postrouting priority srcnat; policy accept;",
           "\t\tmeta mark & 0x00004000 == 0 return", "\t\tmeta mark set meta mark ^ 0x00004000", "\t\tmasquerade fully-random", "\t}"]
    for i in range(n):
        out += [f"\tchain svc-{i} {{", "\t\tip saddr != 198.19.0.0/16 jump mark-for-masquerade",
                f"\t\tnumgen random mod 2 vmap {{ 0 : goto ep-{i}-0, 1 : goto ep-{i}-1 }}", "\t}"]
        for k, be in enumerate(BACKENDS):
            out += [f"\tchain ep-{i}-{k} {{", f"\t\tip saddr {be} jump mark-for-masquerade", f"\t\tmeta l4proto udp dnat to {be}:8080", "\t}"]
    out.append("}")
    return "\n".join(out) + "\n"


def vecgate_services(n):
    b = ", ".join(f'{{ addr = "{a}", port = 8080 }}' for a in BACKENDS)
    head = '\n[lb]\nsnat4 = "198.18.20.1"\n'
    return head + "".join(f"""
[[lb_service]]
name = "bench/svc{i}"
type = "cluster_ip"
vip = "{v}"
port = {PORT}
protocol = "udp"
backends = [{b}]
""" for i, v in enumerate(vips(n)))


class LbDut:
    """The kernel with kube-proxy's rules, or vecgate's LB, with n services."""

    def __init__(self, kind, n):
        self.kind, self.mode, self.n = kind, f"{n} services", n
        self.lab = Lab()
        self.tg, self.dut = tl.topology(self.lab)
        t1 = tl.mac_of(self.lab, self.tg, "t1")
        self.tmp = tl.OUT / f"lb-{kind}-{n}"
        self.tmp.mkdir(parents=True, exist_ok=True)
        t0 = time.time()
        if kind == "nftables":
            tl.kernel_router(self.lab, self.dut, t1)
            rules = self.tmp / "kp.nft"
            rules.write_text(nft_rules(n))
            self.lab.run(self.dut, "nft", "-f", str(rules), timeout=600)
        else:
            cfg, sock = tl.vecgate_config(t1, "route", self.tmp, tl.IO)
            path = self.tmp / "dut.toml"
            path.write_text(cfg + vecgate_services(n))
            self.proc = self.lab.spawn(self.dut, str(tl.BIN), "run", "--config", str(path), "--interval", "0", "--duration", "3600")
            deadline = time.time() + 120
            while not sock.exists():
                assert self.proc.poll() is None and time.time() < deadline, self.proc.communicate()
                time.sleep(0.05)
        self.load_s = round(time.time() - t0, 2)
        self.dst_mac = tl.mac_of(self.lab, self.dut, "g0")
        self.run(100, 0.5)  # warm-up: the flow's session / conntrack entry

    def run(self, rate, duration):
        r = self.lab.run(self.tg, "taskset", "-c", tl.GEN_CORE, str(tl.BIN), "trafgen", "--tx-if", "t0", "--rx-if", "t1",
                         "--size", str(SIZE), "--rate", str(rate), "--duration", str(duration), "--src", "198.18.0.2",
                         "--dst", vips(self.n)[-1], "--dst-port", str(PORT), "--dst-mac", self.dst_mac, "--json",
                         timeout=duration + 30)
        return json.loads(r.stdout)

    def close(self):
        self.lab.close()


def main(counts):
    rows = []
    for n in counts:
        for kind in ("nftables", "vecgate"):
            dut = LbDut(kind, n)
            try:
                r = tl.zero_loss_rate(dut)
                rows.append({"dut": kind, "services": n, "load_s": dut.load_s, "zero_loss_pps": r and r["rate"],
                             "generator_bound": bool(r and r["generator_bound"])})
                print(rows[-1], flush=True)
            finally:
                dut.close()
    tl.OUT.mkdir(parents=True, exist_ok=True)
    (tl.OUT / "lb-baseline.json").write_text(json.dumps(rows, indent=1))
    print("\n| services | nftables (kube-proxy rules) zero-loss pps | vecgate lb4-nat zero-loss pps | ratio | load s (nft / vecgate) |")
    print("|---|---|---|---|---|")
    for n in counts:
        k = next(r for r in rows if r["dut"] == "nftables" and r["services"] == n)
        v = next(r for r in rows if r["dut"] == "vecgate" and r["services"] == n)
        ratio = v["zero_loss_pps"] / k["zero_loss_pps"] if k["zero_loss_pps"] and v["zero_loss_pps"] else float("nan")
        mark = lambda r: f'{r["zero_loss_pps"]}{" (generator-bound)" if r["generator_bound"] else ""}'  # noqa: E731
        print(f"| {n} | {mark(k)} | {mark(v)} | {ratio:.2f} | {k['load_s']} / {v['load_s']} |")


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [1, 1000, 10000])
