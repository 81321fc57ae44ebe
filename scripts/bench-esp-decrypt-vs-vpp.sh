#!/usr/bin/env bash
# vecgate's ESP decryption against fd.io VPP's, side by side. `vecgate bench esp4-decrypt
# --alg A --inner-size B --export DIR` writes the frame its benchmark sends over and over
# (a tunnel-mode ESP packet from 198.18.1.2 to 198.18.1.1, SPI 4096, sealed with the
# bench's keys: 0xa5 bytes, salt 0xa5a5a5a5, sequence number 1); VPP gets the same SA as
# the inbound SA of a route-based tunnel (an ipip tunnel protected by it, as vecgate's
# `ipsec_tunnel`: the SA found by its SPI, no SPD) and replays the same frame; then
# vecgate and VPP run in interleaved rounds on the same core. Prints the decryption
# node's TSC cycles per packet for both (vecgate's `esp4-decrypt` finds the SA and
# decrypts; VPP's `ipsec4-tun-input` finds it and `esp4-decrypt-tun` decrypts, so both
# VPP nodes are shown) and the whole path's; medians over the rounds. Anti-replay is off
# on both sides (the same packet again and again).
#
# Usage: scripts/bench-esp-decrypt-vs-vpp.sh [--rounds N] [--seconds S] [--packets N]
#            [--core C] [--alg aes-gcm-128|aes-gcm-256|null] [--inner-size B] [--bin PATH]
#            [--vpp DIR] [--json FILE]
#   --vpp DIR: as scripts/bench-ipsec-vs-vpp.sh (default $VPP_DIR, else ../shared/peers/vpp;
#              without one the script says so and exits 0).
# Needs root (hugepages, core pinning). Only one VPP benchmark at a time (a lock in /tmp).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
rounds=5
seconds=3
packets=20000000 # ≥ 1 s of vecgate a round: docs/PERFORMANCE.md, "Measuring on the shared VMs"
core=1
alg=aes-gcm-128
inner_size=64
. "$ROOT/scripts/lib/vpp.sh"
while [ $# -gt 0 ]; do
    if vpp_option "$@"; then
        shift 2
        continue
    fi
    case "$1" in
        --alg) case "$2" in aes-gcm-128 | aes-gcm-256 | null) alg=$2 ;; *) echo "bench-esp-decrypt-vs-vpp: --alg aes-gcm-128|aes-gcm-256|null, got '$2'" >&2; exit 2 ;; esac; shift 2 ;;
        --inner-size) inner_size=$2; shift 2 ;;
        -h | --help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "bench-esp-decrypt-vs-vpp: unknown argument $1" >&2; exit 2 ;;
    esac
done
log() { echo "bench-esp-decrypt-vs-vpp: $*" >&2; }

vpp_find
vpp_prepare bench-esp-decrypt-vs-vpp 64

args=(esp4-decrypt --alg "$alg" --inner-size "$inner_size")
"$bin" bench "${args[@]}" --export "$work" 2>/dev/null
# The SA's cipher in VPP's words: NULL is an SA with no algorithm (no IV, no ICV, as
# vecgate's `null`): what the nodes cost besides the cipher.
case "$alg" in
    null) cipher= ;;
    aes-gcm-128) cipher="crypto-alg $alg crypto-key $(printf 'a5%.0s' $(seq 16)) salt 0xa5a5a5a5" ;;
    aes-gcm-256) cipher="crypto-alg $alg crypto-key $(printf 'a5%.0s' $(seq 32)) salt 0xa5a5a5a5" ;;
esac

# The bench's topology (crates/vecgate/src/bench.rs, `esp_setup`): the ESP packet arrives
# on pg0 for 198.18.1.1 from the peer 198.18.1.2; its inner packet (198.18.0.2 to
# 198.19.0.1, UDP) is routed out of pg1 to a resolved neighbour (vecgate's null0).
run=$work/vpp
mkdir -p "$run"
cat >"$run/setup.cli" <<EOF
create packet-generator interface pg0 hw-addr 02:00:00:00:00:01
create packet-generator interface pg1 hw-addr 02:00:00:00:00:02
set interface mtu 9000 pg1
set interface state pg0 up
set interface state pg1 up
set interface ip address pg0 198.18.1.1/24
set interface ip address pg1 198.18.3.1/24
set ip neighbor pg1 198.18.3.2 02:00:00:00:03:02 static
ip route add 198.19.0.0/16 via 198.18.3.2 pg1
ipsec sa add 20 spi 4096 esp $cipher
ipsec sa add 21 spi 4097 esp $cipher
create ipip tunnel src 198.18.1.1 dst 198.18.1.2
ipsec tunnel protect ipip0 sa-in 20 sa-out 21
set interface unnumbered ipip0 use pg0
set interface state ipip0 up
packet-generator new name side limit 0 interface pg0 node ethernet-input pcap $work/frames.pcap limit 1000000000000
EOF
vpp_startup_conf 1G 32768 64M ""
vpp_start 120

results=$work/results.tsv
: >"$results"
log "VPP up; $rounds rounds of $alg, $inner_size-byte inner packets"
for r in $(seq "$rounds"); do
    printf 'vecgate\t' >>"$results"
    "$bin" bench "${args[@]}" --packets "$packets" --core "$core" --json >>"$results"
    vpp_round_windows "$run/round-$r.runtime"
    # Every packet decrypted and sent: no error counter but the transmit path's.
    if grep -qiE 'integrity|replay|no such|unknown|drop|fail' "$run/round-$r.runtime.errors"; then
        cat "$run/round-$r.runtime.errors" >&2
        log "VPP dropped packets in round $r (above)"
        exit 1
    fi
    printf 'vpp\t%s\n' "$run/round-$r.runtime" >>"$results"
done

PYTHONPATH="$ROOT/scripts/lib" python3 - "$results" "$json_out" "$alg" "$inner_size" <<'PY'
import glob, json, statistics as st, sys
from vpp_runtime import vpp_runtime

path, json_out, alg, size = sys.argv[1:5]
med = st.median
vg, vp = [], []
for line in open(path):
    who, rest = line.rstrip("\n").split("\t", 1)
    if who == "vecgate":
        d = json.loads(rest)
        node = [n for n in d["nodes"] if n["name"] == "esp4-decrypt"][0]
        vg.append(dict(node_mean=node["cycles_per_packet"], node=node["vector_median"], path=d["median_cycles_per_packet"]))
    else:
        nodes = vpp_runtime(rest)
        n_in = nodes.get("pg-input", (0, 0))[1]
        if nodes.get("esp4-decrypt-tun", (0, 0))[1] < n_in // 2:
            sys.exit(f"VPP's esp4-decrypt-tun took {nodes.get('esp4-decrypt-tun', (0, 0))[1]} of {n_in} packets")
        in_path = {k: v for k, v in nodes.items() if k != "pg-input" and v[1] >= n_in // 2}
        windows = [vpp_runtime(w) for w in sorted(glob.glob(rest + ".*")) if w[len(rest) + 1:].isdigit()]
        windows = [w for w in windows if "esp4-decrypt-tun" in w and "ipsec4-tun-input" in w]
        vp.append(dict(decrypt_mean=nodes["esp4-decrypt-tun"][0], tun_input_mean=nodes["ipsec4-tun-input"][0],
                       decrypt=med(w["esp4-decrypt-tun"][0] for w in windows),
                       tun_input=med(w["ipsec4-tun-input"][0] for w in windows),
                       path=sum(c * n for c, n in in_path.values()) / max(n_in, 1)))
c = dict(alg=alg, inner_size=int(size), rounds=len(vg),
         vecgate_node=med(r["node"] for r in vg), vecgate_node_mean=med(r["node_mean"] for r in vg),
         vpp_decrypt=med(r["decrypt"] for r in vp), vpp_tun_input=med(r["tun_input"] for r in vp),
         vpp_decrypt_mean=med(r["decrypt_mean"] for r in vp), vpp_tun_input_mean=med(r["tun_input_mean"] for r in vp),
         vecgate_path=med(r["path"] for r in vg), vpp_path=med(r["path"] for r in vp), vecgate_runs=vg, vpp_runs=vp)
both = c["vpp_decrypt"] + c["vpp_tun_input"]
print(f"vecgate vs VPP, ESP decryption ({alg}, {size}-byte inner packets), {len(vg)} interleaved rounds on one core.")
print("TSC cycles per packet, medians over the rounds: vecgate's median vector, VPP's median 0.25 s window (means in brackets)")
print(f"vecgate esp4-decrypt {c['vecgate_node']:.1f} ({c['vecgate_node_mean']:.1f})")
print(f"VPP esp4-decrypt-tun {c['vpp_decrypt']:.1f} ({c['vpp_decrypt_mean']:.1f}), ipsec4-tun-input {c['vpp_tun_input']:.1f} ({c['vpp_tun_input_mean']:.1f}), both {both:.1f}")
print(f"ratio: to esp4-decrypt-tun {c['vecgate_node'] / c['vpp_decrypt']:.2f}, to both {c['vecgate_node'] / both:.2f}")
print(f"path: vecgate {c['vecgate_path']:.1f}, VPP {c['vpp_path']:.1f}, ratio {c['vecgate_path'] / c['vpp_path']:.2f}")
if json_out:
    json.dump(c, open(json_out, "w"), indent=1)
PY
