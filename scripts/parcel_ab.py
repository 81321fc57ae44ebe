#!/usr/bin/env python3
"""The parcel paths in the engine, two or more vecgate builds interleaved:
parcel_ab.py ROUNDS NAME=BINARY ... (the first is the baseline).

Each round runs every scenario below once per build (the builds' order alternating per
round, so drift hits all alike) and prints, per build and scenario, the median over the
rounds of the bench's median cycles per segment (per packet for ip4-forward), the ratio
ip4-forward / that (the issue's "× the per-segment rate of single packets"), and the
parcel nodes' median cycles per packet they saw. `fwd16-strict` passes
`--segment-check-in-transit` to every build but the baseline (which predates the flag).
`PARCEL_AB_ONLY=split16,join16` runs only the scenarios named (ip4-forward always); the
GSO-frame and IPv6 rows (`gso16`, `gso8k`, `join6-16`, `join6-8k`, `gso6-16`, `split6-16`,
`split6-16-off`, `split6-8k`, `fwd6-16`, and `fwd16-v256` / `fwd16-v16`, the forward at a
set vector size) run only when named, their flags being newer than the older
builds. `PARCEL_AB_WRAP="/tmp/quiet.sh"` puts that command in front of every bench run
(each run timed alone, the machine's other work free in between).
Used for docs/PERFORMANCE.md's parcel figures."""
import json
import os
import statistics
import subprocess
import sys

# `fwd16` runs each build's default vector: 16 parcels before 2026-12-03, 256 since.
SCENARIOS = [
    ("ip4-forward", ["ip4-forward", "--packets", "1000000"], False),
    ("fwd16", ["parcel-forward", "--segments", "16", "--packets", "100000"], False),
    ("fwd16-strict", ["parcel-forward", "--segments", "16", "--packets", "100000", "--segment-check-in-transit"], True),
    ("fwd16-off", ["parcel-forward", "--segments", "16", "--packets", "100000", "--no-segment-check"], False),
    ("fwd1", ["parcel-forward", "--segments", "1", "--packets", "500000"], False),
    ("split16", ["parcel-split", "--segments", "16", "--packets", "100000"], False),
    ("split16-off", ["parcel-split", "--segments", "16", "--packets", "100000", "--no-segment-check"], False),
    ("join16", ["parcel-join", "--segments", "16", "--packets", "1000000"], False),
    ("split8k", ["parcel-split", "--segment-size", "8000", "--segments", "8", "--packets", "50000"], False),
    ("split8k-off", ["parcel-split", "--segment-size", "8000", "--segments", "8", "--packets", "50000", "--no-segment-check"], False),
    ("join8k", ["parcel-join", "--segment-size", "8000", "--segments", "8", "--packets", "400000"], False),
    # Builds from 1320e7a on (`--gso`, `--family ip6`): not in PARCEL_AB_ONLY's default set.
    ("gso16", ["parcel-join", "--gso", "--segments", "16", "--packets", "100000"], False),
    ("gso8k", ["parcel-join", "--gso", "--segment-size", "8000", "--segments", "8", "--packets", "50000"], False),
    ("join6-16", ["parcel-join", "--family", "ip6", "--segments", "16", "--packets", "1000000"], False),
    ("join6-8k", ["parcel-join", "--family", "ip6", "--segment-size", "8000", "--segments", "8", "--packets", "400000"], False),
    ("gso6-16", ["parcel-join", "--family", "ip6", "--gso", "--segments", "16", "--packets", "100000"], False),
    # Builds from feat/split6 on (`parcel-split --family ip6`).
    ("split6-16", ["parcel-split", "--family", "ip6", "--segments", "16", "--packets", "100000"], False),
    ("split6-16-off", ["parcel-split", "--family", "ip6", "--segments", "16", "--packets", "100000", "--no-segment-check"], False),
    ("split6-8k", ["parcel-split", "--family", "ip6", "--segment-size", "8000", "--segments", "8", "--packets", "50000"], False),
    ("fwd6-16", ["parcel-forward", "--family", "ip6", "--segments", "16", "--packets", "100000"], False),
    # Builds from 2026-12-03 on (`--per-vector`): `parcel-forward` gets full vectors (256
    # parcels) by default, the older builds 16 parcels a vector; these rows set the count.
    ("fwd16-v256", ["parcel-forward", "--segments", "16", "--packets", "100000", "--per-vector", "256"], False),
    ("fwd16-v16", ["parcel-forward", "--segments", "16", "--packets", "100000", "--per-vector", "16"], False),
]
NEW = {"gso16", "gso8k", "join6-16", "join6-8k", "gso6-16", "split6-16", "split6-16-off", "split6-8k", "fwd6-16", "fwd16-v256", "fwd16-v16"}

# PARCEL_AB_WRAP: a command put in front of every bench run (parcel_abba.py too).
WRAP = os.environ.get("PARCEL_AB_WRAP", "").split()


def bench(binary, args):
    """One `vecgate bench` run: its median cycles a segment (a packet for ip4-forward) and
    the parcel nodes' median vectors."""
    out = subprocess.run([*WRAP, binary, "bench", *args, "--json", "--core", "1"], capture_output=True, text=True, check=True, timeout=300).stdout
    d = json.loads(out)
    v = d.get("median_cycles_per_segment", d.get("median_cycles_per_packet"))
    return v, {n["name"]: n.get("vector_median") for n in d["nodes"] if n["name"].startswith("parcel")}


def main():
    global SCENARIOS
    only = os.environ.get("PARCEL_AB_ONLY")
    if only:
        SCENARIOS = [s for s in SCENARIOS if s[0] == "ip4-forward" or s[0] in only.split(",")]
    else:
        SCENARIOS = [s for s in SCENARIOS if s[0] not in NEW]
    rounds = int(sys.argv[1])
    builds = [a.split("=", 1) for a in sys.argv[2:]]
    got = {}
    for r in range(rounds):
        for name, args, new_flag in SCENARIOS:
            for bn, binary in builds if r % 2 == 0 else builds[::-1]:
                a = [x for x in args if not (new_flag and bn == builds[0][0] and x == "--segment-check-in-transit")]
                got.setdefault((bn, name), []).append(bench(binary, a))
    for bn, _ in builds:
        base = statistics.median(v for v, _ in got[(bn, "ip4-forward")])
        for name, _, _ in SCENARIOS:
            runs = got[(bn, name)]
            m = statistics.median(v for v, _ in runs)
            nodes = {k: round(statistics.median(n[k] for _, n in runs if n.get(k) is not None), 1) for k in runs[0][1] if runs[0][1][k] is not None}
            print(f"{bn:6} {name:13} {m:8.1f} cycles/segment  {base / m:5.2f}x ip4-forward ({base:.1f})  {nodes}  runs {[round(v, 1) for v, _ in runs]}")


if __name__ == "__main__":
    main()
