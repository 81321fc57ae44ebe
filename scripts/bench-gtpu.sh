#!/usr/bin/env bash
# The GTP-U benchmark report: every `vecgate bench gtpu*` case RUNS times (median, with
# min and max), as markdown rows. CASES picks a table:
#   matrix      — the four paths × inner 64/1492 B × checksum zero/software × 1 tunnel
#   scale       — decap with 1M tunnels and random TEIDs, encap with 1M tunnels (IPv6 UEs)
#   techniques  — each fast-path technique turned off alone, against all on
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-5}
PACKETS=${PACKETS:-10000000}
CASES=${CASES:-matrix}
cargo build --release -q -p vecgate
B=./target/release/vecgate

run() { # label, args...
    local label=$1; shift
    for i in $(seq "$RUNS"); do $B bench "$@" --packets "$PACKETS" --json 2>/dev/null; done > /tmp/vecgate-gtpu.jsonl
    python3 - "$label" <<'PY'
import json, statistics, sys
label = sys.argv[1]
runs = [json.loads(l) for l in open("/tmp/vecgate-gtpu.jsonl")]
runs.sort(key=lambda r: r["cycles_per_packet"])
med = runs[len(runs) // 2]
cpp = [r["cycles_per_packet"] for r in runs]
tunnel = [n for n in med["nodes"] if n["name"].startswith("gtpu")][0]
tn = sorted(next(n["cycles_per_packet"] for n in r["nodes"] if n["name"] == tunnel["name"]) for r in runs)
g = med["gtpu"]
print(f'| {label} | {statistics.median(cpp):.1f} [{min(cpp):.1f}–{max(cpp):.1f}] | {tunnel["name"]} {statistics.median(tn):.1f} [{tn[0]:.1f}–{tn[-1]:.1f}] '
      f'| {statistics.median(r["mpps"] for r in runs):.2f} | {g["rss_bytes"]/1e6:.0f} MB, load {g["load_seconds"]:.2f} s |')
PY
}

echo "| case | path cycles/packet, median [min–max] | tunnel node cycles/packet | Mpps | resident, load |"
echo "|---|---|---|---|---|"
case "$CASES" in
matrix)
    for s in gtpu4-encap gtpu4-decap gtpu6-encap gtpu6-decap; do
        for size in 64 1492; do
            for c in zero software; do
                run "$s inner $size B, checksum $c" "$s" --inner-size "$size" --checksum "$c"
            done
        done
    done ;;
scale)
    for s in gtpu4-decap gtpu6-decap; do
        run "$s, 1 tunnel" "$s"
        run "$s, 1M tunnels, random TEID" "$s" --tunnels 1000000
    done
    for s in gtpu4-encap gtpu6-encap; do
        run "$s, inner IPv6, 1 tunnel" "$s" --inner ip6
        run "$s, inner IPv6, 1M tunnels, random UE" "$s" --inner ip6 --tunnels 1000000
    done ;;
techniques)
    # One tunnel: the techniques that remove work (cycles here are noisy; scripts/instr.sh
    # gives the stable instruction counts). A million tunnels: the memory-level ones.
    for s in gtpu4-encap gtpu4-decap gtpu6-encap gtpu6-decap; do
        for t in "" lookup_cache skip_inner_input skip_outer_lookup encap_adjacency all; do
            if [ -z "$t" ]; then run "$s, all on" "$s"; else run "$s, $t off" "$s" --disable "$t"; fi
        done
    done
    for t in "" batch_lookup prefetch all; do
        if [ -z "$t" ]; then run "gtpu4-decap 1M, all on" gtpu4-decap --tunnels 1000000; else run "gtpu4-decap 1M, $t off" gtpu4-decap --tunnels 1000000 --disable "$t"; fi
    done
    for t in "" prefetch; do
        if [ -z "$t" ]; then run "gtpu4-encap 1M (inner IPv6), all on" gtpu4-encap --inner ip6 --tunnels 1000000; else run "gtpu4-encap 1M (inner IPv6), $t off" gtpu4-encap --inner ip6 --tunnels 1000000 --disable "$t"; fi
    done ;;
esac
