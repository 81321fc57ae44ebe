#!/usr/bin/env bash
# vecgate's outbound SPD and ESP against fd.io VPP's, side by side (issue 18): the vpp-dev
# flow-cache thread's experiment. For each match position P and with / without the flow
# cache, `vecgate bench ipsec4-encrypt --policies P --position P` writes its frames
# (64-byte UDP over 1,024 flows) and its P policies (P-1 near misses, then the PROTECT one)
# to files; VPP gets the same policies in an SPD bound to its egress interface, the same
# AES-GCM-128 SA, and replays the same frames; then vecgate and VPP run in interleaved
# rounds on the same core. Prints, per case, the SPD node's and esp4-encrypt's TSC cycles
# per packet for both and their ratios; medians over the rounds.
#
# Usage: scripts/bench-ipsec-vs-vpp.sh [--rounds N] [--seconds S] [--packets N] [--core C]
#            [--positions "1 10 100 1000"] [--cache on|off|both] [--bin PATH] [--vpp DIR]
#            [--json FILE]
#   --vpp DIR: a VPP build laid out as bin/vpp, bin/vppctl, lib/ (default: $VPP_DIR, else
#              ../shared/peers/vpp next to the repository or its worktree's parent). Without
#              one the script says so and exits 0: the project does not need VPP.
# VPP's ESP packets leave by a third interface (pg2) without an SPD: VPP sends what
# esp4-encrypt made through ip4-lookup and the egress interface's output features again, so
# on the SPD's interface every ESP packet would be classified a second time (and dropped,
# matching no policy), where vecgate's esp4-encrypt hands its packets to ip4-rewrite. This
# way both SPD nodes see each packet once.
# Needs root (hugepages, core pinning). Only one VPP benchmark at a time (a lock in /tmp).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
rounds=3
seconds=3
packets=20000000  # ≥ 1 s of vecgate a round: docs/PERFORMANCE.md, "Measuring on the shared VMs"
core=1
positions="1 10 100 1000"
caches="on off"
. "$ROOT/scripts/lib/vpp.sh"
while [ $# -gt 0 ]; do
    if vpp_option "$@"; then
        shift 2
        continue
    fi
    case "$1" in
        --positions) positions=$2; shift 2 ;;
        --cache) case "$2" in both) caches="on off" ;; on | off) caches=$2 ;; *) echo "bench-ipsec-vs-vpp: --cache on|off|both" >&2; exit 2 ;; esac; shift 2 ;;
        -h | --help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "bench-ipsec-vs-vpp: unknown argument $1" >&2; exit 2 ;;
    esac
done
log() { echo "bench-ipsec-vs-vpp: $*" >&2; }

vpp_find
vpp_prepare bench-ipsec-vs-vpp 64

# `vecgate bench ipsec4-encrypt`'s topology (crates/vecgate/src/bench_ipsec.rs): pg0
# receives, the SPD is bound to the interface towards 198.19.0.0/16 (vecgate's null0, VPP's
# pg1); the SA's key and salt are the bench's (0xa5 bytes), SPI 4096.
KEY=$(printf 'a5%.0s' $(seq 16))
TOPO="create packet-generator interface pg0 hw-addr 02:00:00:00:00:01
create packet-generator interface pg1 hw-addr 02:00:00:00:00:02
create packet-generator interface pg2 hw-addr 02:00:00:00:00:03
set interface mtu 9000 pg1
set interface mtu 9000 pg2
set interface state pg0 up
set interface state pg1 up
set interface state pg2 up
set interface ip address pg0 198.18.0.1/24
set interface ip address pg1 198.18.1.1/24
set interface ip address pg2 198.18.2.1/24
set ip neighbor pg1 198.18.1.2 02:00:00:00:01:02 static
set ip neighbor pg2 198.18.2.2 02:00:00:00:02:02 static
ip route add 198.19.0.0/16 via 198.18.1.2 pg1
ipsec sa add 10 spi 4096 esp crypto-alg aes-gcm-128 crypto-key $KEY salt 0xa5a5a5a5 tunnel src 198.18.2.1 dst 198.18.2.2
ipsec spd add 1
set interface ipsec spd pg1 1"

# policies.txt (priority action local_ports remote_ports remote-prefix; UDP, local any)
# in VPP's words.
policies_cli() {
    python3 - "$1" <<'PY'
import ipaddress, sys
for line in open(sys.argv[1]):
    if line.startswith("#") or not line.strip():
        continue
    prio, action, lp, rp, remote = line.split()
    net = ipaddress.ip_network(remote)
    ports = lambda p: "0 - 65535" if p == "any" else f"{p.split('-')[0]} - {p.split('-')[-1]}"
    act = "protect sa 10" if action == "protect" else action
    print(f"ipsec policy add spd 1 priority {prio} outbound action {act} "
          f"local-ip-range 0.0.0.0 - 255.255.255.255 remote-ip-range {net[0]} - {net[-1]} "
          f"protocol 17 local-port-range {ports(lp)} remote-port-range {ports(rp)}")
PY
}

start_vpp() { # dir cache(on|off)
    local dir=$1 cache=$2
    run=$dir/vpp
    mkdir -p "$run"
    policies_cli "$dir/policies.txt" >"$dir/policies.cli"
    {
        echo "$TOPO"
        echo "exec $dir/policies.cli"
        echo "packet-generator new name side limit 0 interface pg0 node ethernet-input pcap $dir/frames.pcap limit 1000000000000"
    } >"$run/setup.cli"
    local flow_cache=off
    [ "$cache" = on ] && flow_cache=on
    vpp_startup_conf 1G 32768 64M "" "ipsec { ipv4-outbound-spd-flow-cache $flow_cache }"
    vpp_start 300
    local n
    n=$(ctl show ipsec all | grep -c 'type ip4-outbound' || true)
    [ "$n" = "$(grep -vc '^#' "$dir/policies.txt")" ] || { log "VPP holds $n outbound policies, not those of $dir/policies.txt"; exit 1; }
}

results=$work/results.tsv
: >"$results"
for cache in $caches; do
    nocache=()
    [ "$cache" = off ] && nocache=(--no-flow-cache)
    for p in $positions; do
        case=$cache-$p
        dir=$work/$case
        mkdir -p "$dir"
        args=(ipsec4-encrypt --policies "$p" --position "$p" --alg aes-gcm-128 --inner-size 64 "${nocache[@]}")
        "$bin" bench "${args[@]}" --export "$dir" 2>/dev/null
        start_vpp "$dir" "$cache"
        log "cache $cache, match at $p: VPP up, $rounds rounds"
        for r in $(seq "$rounds"); do
            printf '%s\t%s\t%s\tvecgate\t' "$cache" "$p" "$r" >>"$results"
            "$bin" bench "${args[@]}" --packets "$packets" --core "$core" --json >>"$results"
            vpp_round_windows "$dir/vpp-$r.runtime"
            if grep -qE 'no match|dropped|discard' "$dir/vpp-$r.runtime.errors"; then
                cat "$dir/vpp-$r.runtime.errors" >&2
                log "VPP dropped packets in round $r of $case (above)"
                exit 1
            fi
            printf '%s\t%s\t%s\tvpp\t%s\n' "$cache" "$p" "$r" "$dir/vpp-$r.runtime" >>"$results"
        done
        stop_vpp
    done
done

PYTHONPATH="$ROOT/scripts/lib" python3 - "$results" "$json_out" <<'PY'
import collections, glob, json, statistics as st, sys
from vpp_runtime import vpp_runtime

path, json_out = sys.argv[1], sys.argv[2]
med = st.median

vg = collections.defaultdict(list)
vp = collections.defaultdict(list)
order = []
for line in open(path):
    cache, pos, _, who, rest = line.rstrip("\n").split("\t", 4)
    key = (cache, int(pos))
    if key not in order:
        order.append(key)
    if who == "vecgate":
        vg[key].append(json.loads(rest))
    else:
        nodes = vpp_runtime(rest)
        n_in = nodes.get("pg-input", (0, 0))[1]
        in_path = {k: v for k, v in nodes.items() if k != "pg-input" and v[1] >= n_in // 2}
        windows = [vpp_runtime(w) for w in sorted(glob.glob(rest + ".*")) if w[len(rest) + 1:].isdigit()]
        windows = [w for w in windows if "ipsec4-output-feature" in w and "esp4-encrypt" in w]
        vp[key].append(dict(
            spd=nodes["ipsec4-output-feature"][0], encrypt=nodes["esp4-encrypt"][0],
            spd_window=med(w["ipsec4-output-feature"][0] for w in windows),
            encrypt_window=med(w["esp4-encrypt"][0] for w in windows),
            path=sum(c * n for c, n in in_path.values()) / max(n_in, 1)))

cpu = vg[order[0]][0]["cpu"] if order else ""
print(f"vecgate vs VPP, ipsec4-encrypt (AES-GCM-128, 64 B, 1,024 flows), interleaved rounds on one core ({cpu}).")
print("TSC cycles per packet, medians over the rounds. mean: over the whole run (VPP's show runtime, vecgate's runtime);")
print("robust: vecgate's median vector, VPP's median 0.25 s window (both less moved by a loaded host's preemption)")
print(f"{'cache':<5} {'match':>5} | {'SPD mean: vecgate':>17} {'VPP':>7} {'ratio':>5} | {'robust: vecgate':>15} {'VPP':>7} {'ratio':>5} |"
      f" {'esp4-encrypt mean: vecgate':>26} {'VPP':>7} {'ratio':>5} | {'robust: vecgate':>15} {'VPP':>7} {'ratio':>5}")
out = {"cpu": cpu, "cases": []}
for key in order:
    a, b = vg[key], vp[key]
    c = dict(cache=key[0], position=key[1],
             vecgate_spd=med(r["ipsec"]["spd_cycles_mean"] for r in a),
             vecgate_spd_median_vector=med(r["ipsec"]["spd_cycles"] for r in a),
             vpp_spd=med(x["spd"] for x in b), vpp_spd_window=med(x["spd_window"] for x in b),
             vecgate_encrypt=med(n["cycles_per_packet"] for r in a for n in r["nodes"] if n["name"] == "esp4-encrypt"),
             vecgate_encrypt_median_vector=med(r["ipsec"]["encrypt_cycles"] for r in a),
             vpp_encrypt=med(x["encrypt"] for x in b), vpp_encrypt_window=med(x["encrypt_window"] for x in b),
             vecgate_path=med(r["cycles_per_packet"] for r in a), vpp_path=med(x["path"] for x in b),
             vecgate_runs=[dict(spd=r["ipsec"]["spd_cycles_mean"], spd_median_vector=r["ipsec"]["spd_cycles"],
                                encrypt_median_vector=r["ipsec"]["encrypt_cycles"]) for r in a], vpp_runs=b)
    print(f"{key[0]:<5} {key[1]:>5} | {c['vecgate_spd']:>17.1f} {c['vpp_spd']:>7.1f} {c['vecgate_spd'] / c['vpp_spd']:>5.2f} |"
          f" {c['vecgate_spd_median_vector']:>15.1f} {c['vpp_spd_window']:>7.1f} {c['vecgate_spd_median_vector'] / c['vpp_spd_window']:>5.2f} |"
          f" {c['vecgate_encrypt']:>26.1f} {c['vpp_encrypt']:>7.1f} {c['vecgate_encrypt'] / c['vpp_encrypt']:>5.2f} |"
          f" {c['vecgate_encrypt_median_vector']:>15.1f} {c['vpp_encrypt_window']:>7.1f} {c['vecgate_encrypt_median_vector'] / c['vpp_encrypt_window']:>5.2f}")
    out["cases"].append(c)
if json_out:
    json.dump(out, open(json_out, "w"), indent=1)
PY
