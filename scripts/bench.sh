#!/usr/bin/env bash
# The benchmark report's numbers: every `vecgate bench` scenario RUNS times (median
# reported, min and max shown), then the criterion benches. Output: markdown rows.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-7}
PACKETS=${PACKETS:-20000000}
cargo build --release -p vecgate >/dev/null
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); TSC: $(./target/release/vecgate bench ip4-forward --packets 1000000 --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["tsc_hz"]/1e9)') GHz"
echo
echo "| scenario | cycles/packet (graph), median [min–max] | total cycles/packet | Mpps (median) | per node (median run) |"
echo "|---|---|---|---|---|"
for s in ip4-forward ip6-forward ip4-forward-1m ip6-forward-1m; do
    for i in $(seq "$RUNS"); do ./target/release/vecgate bench "$s" --packets "$PACKETS" --json 2>/dev/null; done > "/tmp/vecgate-bench-$s.jsonl"
    python3 - "$s" <<'PY'
import json, statistics, sys
s = sys.argv[1]
runs = [json.loads(l) for l in open(f"/tmp/vecgate-bench-{s}.jsonl")]
runs.sort(key=lambda r: r["cycles_per_packet"])
med = runs[len(runs) // 2]
cpp = [r["cycles_per_packet"] for r in runs]
nodes = ", ".join(f'{n["name"]} {n["cycles_per_packet"]:.1f}' for n in med["nodes"] if n["name"] != "pg-input")
print(f'| {s} | {statistics.median(cpp):.1f} [{min(cpp):.1f}–{max(cpp):.1f}] | {med["total_cycles_per_packet"]:.1f} | {statistics.median(r["mpps"] for r in runs):.2f} | {nodes} |')
PY
done
