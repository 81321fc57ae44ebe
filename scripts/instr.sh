#!/usr/bin/env bash
# Instructions per packet spent in graph nodes (every `Runner::run`, the generator's
# input node included), counted by callgrind: stable where cycle counts swing with the
# host. Usage: scripts/instr.sh <bench scenario> [bench options...]
set -euo pipefail
cd "$(dirname "$0")/.."
PACKETS=${PACKETS:-300000}
cargo build --release -q -p vecgate
out=$(mktemp)
valgrind --tool=callgrind --callgrind-out-file="$out" --toggle-collect='*Runner*run*' \
    ./target/release/vecgate bench "$@" --packets "$PACKETS" --json >/dev/null 2>&1
python3 - "$out" "$PACKETS" "$*" <<'PY'
import re, sys
path, packets, label = sys.argv[1], int(sys.argv[2]), sys.argv[3]
total = 0
for line in open(path):
    m = re.match(r"^(summary|totals):\s+(\d+)", line)
    if m:
        total = int(m.group(2))
# The bench warms up on max(packets/10, 1024) packets rounded up to whole pairs of vectors.
warm = -(-max(packets // 10, 1024) // 512) * 512
print(f"{label}: {total / (packets + warm):.0f} instructions/packet in graph nodes")
PY
rm -f "$out"
