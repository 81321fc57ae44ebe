#!/usr/bin/env bash
# Coverage-guided fuzzing (libFuzzer through cargo-fuzz, AddressSanitizer on) with the
# installed stable toolchain.
#
#   scripts/fuzz.sh                 every target in turn, 60 s each
#   scripts/fuzz.sh graph 600       one target for 10 minutes
#   scripts/fuzz.sh list            the target names
#   scripts/fuzz.sh merge graph     fold what runs grew (target/fuzz-corpus/graph) into the
#                                   committed corpus: libFuzzer's set-cover merge keeps
#                                   the inputs that add coverage to the seeds, as grown-*
#
# RUSTC_BOOTSTRAP=1 lets the stable compiler take cargo-fuzz's `-Zsanitizer=address`
# and coverage flags; it is set for the cargo-fuzz commands below only, never for the
# product build (see docs/ROBUSTNESS.md). cargo-fuzz sets RUSTFLAGS itself, which
# replaces the target-cpu of .cargo/config.toml, so the same flag is passed again here:
# the fuzzed code must be the code that runs (SSE4.2 CRC32C, AVX2 checksums).
#
# New inputs go to target/fuzz-corpus/<target> (writable, first); the committed seeds in
# fuzz/corpus/<target> are read, never written. Crashes land in fuzz/artifacts/<target>.
# FUZZ_ARGS adds libFuzzer flags (e.g. "-max_len=4096").
set -euo pipefail
cd "$(dirname "$0")/.."

TARGET=${1:-all}
SECONDS_EACH=${2:-60}
[ "$TARGET" = merge ] || [[ "$SECONDS_EACH" =~ ^[0-9]+$ ]] || { echo "fuzz.sh: SECONDS must be a whole number, got '$SECONDS_EACH'" >&2; exit 2; }

targets() { sed -n 's/^name = "\(.*\)"$/\1/p' fuzz/Cargo.toml | grep -v '^vecgate-fuzz$'; }

if [ "$TARGET" = list ]; then
    targets
    exit 0
fi
if [ "$TARGET" = merge ]; then
    t=${2:-}
    targets | grep -qx "$t" || { echo "fuzz.sh merge: no target '$t'; targets: $(targets | tr '\n' ' ')" >&2; exit 2; }
    seeds=fuzz/corpus/$t grown=grown-
    # The UPF target shares the pfcp target's corpus; its inputs are kept apart by name.
    [ "$t" = pfcp_upf ] && seeds=fuzz/corpus/pfcp grown=grown-upf-
    [ "$t" = upf_tables ] && seeds=fuzz/corpus/pfcp grown=grown-tables-
    # The two-worker and Local-service graph targets read the graph target's inputs.
    [ "$t" = graph_workers ] && seeds=fuzz/corpus/graph grown=grown-workers-
    [ "$t" = graph_local ] && seeds=fuzz/corpus/graph grown=grown-local-
    export RUSTFLAGS="-Ctarget-cpu=x86-64-v3"
    RUSTC_BOOTSTRAP=1 cargo fuzz build "$t"
    merged=$(mktemp -d)
    trap 'rm -rf "$merged"' EXIT
    # What stays whatever coverage says: seeds, regression inputs, other targets' growth.
    find "$seeds" -maxdepth 1 -type f ! -regex ".*/${grown}[0-9a-f]+" -exec cp {} "$merged" \;
    mkdir -p "target/fuzz-corpus/$t"
    "fuzz/target/x86_64-unknown-linux-gnu/release/$t" -merge=1 "$merged" "$seeds" "target/fuzz-corpus/$t"
    find "$seeds" -maxdepth 1 -type f -regex ".*/${grown}[0-9a-f]+" -delete
    for f in "$merged"/*; do
        b=$(basename "$f")
        [ -e "$seeds/$b" ] || cp "$f" "$seeds/$grown$(sha1sum "$f" | cut -c1-40)"
    done
    echo "fuzz.sh merge: $t: $(ls "$seeds" | grep -c "^$grown[0-9a-f]") grown inputs, $(du -sk "$seeds" | cut -f1) KiB in $seeds" >&2
    exit 0
fi
if [ "$TARGET" != all ] && ! targets | grep -qx "$TARGET"; then
    echo "fuzz.sh: no target '$TARGET'; targets: $(targets | tr '\n' ' ')" >&2
    exit 2
fi

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz.sh: installing cargo-fuzz" >&2
    cargo install cargo-fuzz --locked
fi

export RUSTFLAGS="-Ctarget-cpu=x86-64-v3"
fuzz() { RUSTC_BOOTSTRAP=1 cargo fuzz "$@"; }

run_one() {
    local t=$1 out=target/fuzz-corpus/$1 seeds=fuzz/corpus/$1
    # The UPF target reads PFCP messages: it starts from the pfcp target's seeds.
    [ "$t" = pfcp_upf ] || [ "$t" = upf_tables ] && seeds=fuzz/corpus/pfcp
    [ "$t" = graph_workers ] || [ "$t" = graph_local ] && seeds=fuzz/corpus/graph
    mkdir -p "$out" "$seeds"
    echo "== $t: ${SECONDS_EACH}s" >&2
    fuzz run "$t" "$out" "$seeds" -- \
        -max_total_time="$SECONDS_EACH" -timeout=10 -print_final_stats=1 ${FUZZ_ARGS:-}
}

if [ "$TARGET" = all ]; then
    fuzz build
    for t in $(targets); do run_one "$t"; done
else
    fuzz build "$TARGET"
    run_one "$TARGET"
fi
