#!/usr/bin/env bash
# Cycles per packet of several `vecgate bench` scenarios measured in one run: the
# scenarios (and builds) interleaved round by round, so that a host that speeds up or
# slows down between rounds moves them all; medians, ranges and the extra over the first
# scenario (the baseline) per build, and the host's steal time over the run.
#
# The "held" extra divides out the host's speed: each run is scaled by how long a control
# node that does the same work in every scenario (--control, default interface-output:
# forwarded packets no longer pass ip4-lookup, tunnelled ones do) took in
# it against the baseline's run of the same round. The host here changes its clock from
# run to run far more than the differences measured; the control node's share does not.
#
# The "vector median" columns take each node's median vector (by cycles per packet, each
# vector weighing its packets) instead of its mean, summed over the nodes: a vector the
# host stopped the worker in (steal) moves a mean by thousands of cycles and a median not
# at all. Its extra is the median over rounds of the difference to the baseline's run in
# the same round; the nodes are shown by their median vectors too.
#
# "held vec" does both: each run's vector-median sum, scaled by the control node's median
# vector against the baseline's run of the same round, less the baseline's; the median
# over rounds. Of these columns it moves least when the host changes speed between runs.
#
# Usage: scripts/bench-compare.sh [--rounds N] [--packets N] [--control NODE] [--bin PATH]... BASELINE SCENARIO...
#   e.g. scripts/bench-compare.sh --rounds 5 ip4-forward gue4-encap gre-udp4-encap gue4-decap
#   --bin twice compares two builds (e.g. one built from an older commit in a worktree).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=5
packets=3000000
control=interface-output
bins=()
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) rounds=$2; shift 2 ;;
        --packets) packets=$2; shift 2 ;;
        --control) control=$2; shift 2 ;;
        --bin) bins+=("$2"); shift 2 ;;
        *) break ;;
    esac
done
[ $# -ge 2 ] || { sed -n '2,15p' "$0"; exit 2; }
if [ ${#bins[@]} -eq 0 ]; then
    cargo build --release -q -p vecgate
    bins=(target/release/vecgate)
fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
cpu_times() { awk '/^cpu /{print $2+$3+$4+$5+$6+$7+$8+$9, $9}' /proc/stat; }
read -r total0 steal0 <<<"$(cpu_times)"
for r in $(seq "$rounds"); do
    for s in "$@"; do
        for b in "${bins[@]}"; do
            printf '%s\t%s\t' "$b" "$s" >>"$out"
            "$b" bench "$s" --packets "$packets" --core 1 --json >>"$out"
        done
    done
done
read -r total1 steal1 <<<"$(cpu_times)"
python3 - "$out" "$1" "$((total1 - total0))" "$((steal1 - steal0))" "$control" <<'PY'
import collections, json, statistics, sys
path, base, total, steal, control = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
runs = collections.defaultdict(list)
medians = collections.defaultdict(list)
# Per round, in order: the control node's cycles/packet (None if the scenario has none).
controls = collections.defaultdict(list)
controls_vec = collections.defaultdict(list)
nodes = collections.defaultdict(lambda: collections.defaultdict(list))
cpu = ""
for line in open(path):
    b, s, j = line.rstrip("\n").split("\t", 2)
    d = json.loads(j)
    cpu = d["cpu"]
    runs[(b, s)].append(d["cycles_per_packet"])
    medians[(b, s)].append(d.get("median_cycles_per_packet", float("nan")))  # older builds: none
    controls[(b, s)].append(next((n["cycles_per_packet"] for n in d["nodes"] if n["name"] == control), None))
    controls_vec[(b, s)].append(next((n.get("vector_median") for n in d["nodes"] if n["name"] == control), None))
    for n in d["nodes"]:
        if n["name"] not in ("pg-input", "interface-tx", "interface-output", "ethernet-input"):
            nodes[(b, s)][n["name"]].append(n.get("vector_median") or n["cycles_per_packet"])


def held_extra(b, s, totals=runs, control_of=controls):
    """Median over rounds of the scenario's cycles scaled to the baseline run's speed
    (by the control node), less the baseline's."""
    out = []
    for t, c, t0, c0 in zip(totals[(b, s)], control_of[(b, s)], totals[(b, base)], control_of[(b, base)]):
        if c and c0:
            # The scale first: exactly 1 for the baseline against itself.
            out.append(t * (c0 / c) - t0)
    return signed(statistics.median(out)) if out else "-"


def signed(x):
    # + 0.0 turns a rounded -0.0 into 0.0.
    return f"{round(x, 1) + 0.0:+.1f}"


def median_extra(b, s):
    """Median over rounds of the vector-median cycles less the baseline's run's."""
    return signed(statistics.median(m - m0 for m, m0 in zip(medians[(b, s)], medians[(b, base)])))


print(f"{cpu}; host steal over the run {100 * steal / max(total, 1):.1f} %")
for b in dict.fromkeys(k[0] for k in runs):
    ref = statistics.median(runs[(b, base)])
    ref_min = min(runs[(b, base)])
    print(f"\n{b}")
    # The host only ever adds time (steal, other tenants), so the quickest round is the
    # least disturbed one: its extra is shown beside the median's.
    print(f"{'scenario':<18} {'cycles/packet':>14} {'range':>15} {'extra':>8} {'ratio':>6} {'min extra':>10} {'held extra':>11} {'vec median':>11} {'vec extra':>10} {'held vec':>9}  nodes (median vectors)")
    for s in dict.fromkeys(k[1] for k in runs if k[0] == b):
        v = runs[(b, s)]
        m = statistics.median(v)
        per_node = " ".join(f"{k} {statistics.median(x):.1f}" for k, x in nodes[(b, s)].items())
        vm = statistics.median(medians[(b, s)])
        print(f"{s:<18} {m:>14.1f} {min(v):>7.1f}-{max(v):<7.1f} {m - ref:>+8.1f} {m / ref:>6.2f} {min(v) - ref_min:>+10.1f} {held_extra(b, s):>11} {vm:>11.1f} {median_extra(b, s):>10} {held_extra(b, s, medians, controls_vec):>9}  {per_node}")
PY
