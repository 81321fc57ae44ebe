#!/usr/bin/env python3
"""Two vecgate builds in A B B A quartets, for a host whose speed swings between phases
(docs/PERFORMANCE.md's parcel part): parcel_abba.py ROUNDS A B SCENARIO...

A SCENARIO is a row name of scripts/parcel_ab.py (`ip4-forward`, `split16`, `split6-16`,
...). Each round runs, per scenario, A, B, B, A back to back, each run as parcel_ab.py
runs it (`PARCEL_AB_WRAP=/tmp/quiet.sh` times each alone), and takes B's two runs over
A's two (the bench's median cycles a segment; a packet for ip4-forward) as the round's
ratio. Prints
per scenario the median of the round ratios, each build's fastest run and the median of
its runs; ratios against ip4-forward are of the fastest runs, which share the host's
fast phase."""
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from parcel_ab import SCENARIOS, bench  # noqa: E402


def run(binary, args):
    return bench(binary, args)[0]


def main():
    rounds, a, b, names = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4:]
    rows = {n: args for n, args, _ in SCENARIOS}
    got = {n: ([], [], []) for n in names}
    for _ in range(rounds):
        for n in names:
            a1, b1, b2, a2 = run(a, rows[n]), run(b, rows[n]), run(b, rows[n]), run(a, rows[n])
            got[n][0].extend([a1, a2])
            got[n][1].extend([b1, b2])
            got[n][2].append((b1 + b2) / (a1 + a2))
    fwd = {k: min(v) for k, v in zip("ab", got["ip4-forward"][:2])} if "ip4-forward" in got else None
    for n in names:
        av, bv, r = got[n]
        line = f"{n:14} B/A median of rounds {statistics.median(r):.3f} (rounds {min(r):.3f}-{max(r):.3f})  fastest A {min(av):7.1f} B {min(bv):7.1f} ({min(bv) / min(av):.3f})  median A {statistics.median(av):7.1f} B {statistics.median(bv):7.1f}"
        if fwd and n != "ip4-forward":
            line += f"  vs ip4-forward (fastest) A {fwd['a'] / min(av):.2f}x B {fwd['b'] / min(bv):.2f}x"
        print(line, flush=True)


if __name__ == "__main__":
    main()
