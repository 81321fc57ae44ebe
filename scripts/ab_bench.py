#!/usr/bin/env python3
"""Two vecgate builds on the same bench scenarios, interleaved: ab_bench.py A B [ROUNDS].

Each round runs `vecgate bench <scenario> --json --core 1` with both binaries (the order
alternating per round, so drift hits both alike) and prints, per scenario, the medians of
one node's cycles per packet and of the whole graph's, and their ratios A/B. Used for the
per-tunnel counters' cost (docs/PERFORMANCE.md): A as committed, B with the counting
taken out."""
import json
import os
import statistics
import subprocess
import sys

# Scenario -> the node whose cycles are compared.
SCENARIOS = {"gtpu4-encap": "gtpu4-encap", "gtpu4-decap": "gtpu4-input", "ip4-forward": "ethernet-input"}
# AB_SET=lb: the load balancer's scenarios (label: bench arguments), 10 000 flows as in
# docs/PERFORMANCE.md; compared: the LB nodes together ("lb4-*", weighted by the packets
# each saw: lb4-nat alone since it encapsulates too, lb4-nat + lb4-encap before).
LB = {
    f"{s} --services {n}": f"{s} --services {n} --backends 10 --flows 10000 --packets 2000000"
    for s, counts in (("lb4-nat", (1, 10000)), ("lb4-encap", (1, 1000, 10000)))
    for n in counts
}
if os.environ.get("AB_SET") == "lb":
    SCENARIOS = {label: "lb4-*" for label in LB}
# AB_SET=ip6: the IPv6 lookup on the small table and on the million routes (2 M packets
# a run: loading the routes takes seconds, and a round must fit the quiet window).
IP6 = {"ip6-forward": "ip6-forward", "ip6-forward-1m": "ip6-forward-1m --packets 2000000"}
if os.environ.get("AB_SET") == "ip6":
    # A small table's forwarded packets are looked up in ethernet-input, a million routes'
    # in the lookup node (a vector at once).
    SCENARIOS = {"ip6-forward": "ethernet-input", "ip6-forward-1m": "ip6-lookup"}


def run(binary, scenario, node):
    args = {**LB, **IP6}.get(scenario, scenario).split()
    out = subprocess.run([binary, "bench", *args, "--json", "--core", "1"], capture_output=True, text=True, check=True).stdout
    d = json.loads(out)
    if node.endswith("*"):
        cycles = sum(n["cycles_per_packet"] * n["packets"] for n in d["nodes"] if n["name"].startswith(node[:-1]))
        return cycles / max(d["packets"], 1), d["cycles_per_packet"]
    return next(n for n in d["nodes"] if n["name"] == node)["cycles_per_packet"], d["cycles_per_packet"]


def main():
    a, b = sys.argv[1], sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 15
    got = {(x, s): ([], []) for x in (a, b) for s in SCENARIOS}
    for r in range(rounds):
        for s, node in SCENARIOS.items():
            for x in (a, b) if r % 2 == 0 else (b, a):
                n, g = run(x, s, node)
                got[(x, s)][0].append(n)
                got[(x, s)][1].append(g)
    for s, node in SCENARIOS.items():
        na, ga = (statistics.median(v) for v in got[(a, s)])
        nb, gb = (statistics.median(v) for v in got[(b, s)])
        print(f"{s:12} {node:12} node {na:7.2f} / {nb:7.2f} = {na / nb:.4f}   graph {ga:7.2f} / {gb:7.2f} = {ga / gb:.4f}")


if __name__ == "__main__":
    main()
