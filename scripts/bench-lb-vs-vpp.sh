#!/usr/bin/env bash
# vecgate's load balancer in encapsulation mode against fd.io VPP's lb plugin, side by side
# (issue 19): `vecgate bench lb4-encap --services N` (N UDP services of B backends each, GRE
# to the backend from the node's address) and VPP's `lb vip ... encap gre4` with the same N
# VIPs and backends, both forwarding the same frames (vecgate writes one period of its
# scenario's frames to a pcap: F flows over N VIPs; VPP's packet generator replays that
# file), in interleaved rounds on the same core. Prints per VIP count both path figures
# (TSC cycles per packet, the generator excluded), their ratio, and both sides' nodes;
# medians over the rounds. VPP's VIPs are whole addresses (`lb4-gre4`, the issue's
# reference node); vecgate's services are address, port and protocol (every frame is UDP
# to port 53, so both choose among the same backends for the same packets). With
# `--modes "gre4 nat4"` (the default) the same VIP counts run again in NAT mode:
# `vecgate bench lb4-nat` (kube-proxy's translation, the client's address to the node's
# too) against VPP's `encap nat4 type clusterip` VIPs (`lb4-nat4-port`, the destination
# only).
#
# Usage: scripts/bench-lb-vs-vpp.sh [--rounds N] [--seconds S] [--packets N] [--core C]
#            [--vips "1 1000"] [--modes "gre4 nat4"] [--backends B] [--flows F] [--bin PATH]
#            [--lb-sessions N|vpp|default] (vecgate's session slots: scripts/bench-vs-vpp.sh)
#            [--vpp DIR] [--json FILE]
#   --vpp DIR: a VPP build laid out as bin/vpp, bin/vppctl, lib/ (default: $VPP_DIR, else
#              ../shared/peers/vpp next to the repository or its worktree's parent). Without
#              one the script says so and exits 0: the project does not need VPP.
# Needs root (hugepages, core pinning). Only one VPP benchmark at a time (a lock in /tmp).
set -euo pipefail
# The runs themselves are scripts/bench-vs-vpp.sh's `lb4-gre4-N` scenarios; this picks the
# VIP counts and the LB's defaults.
packets=20000000  # ≥ 1 s of vecgate a round: docs/PERFORMANCE.md, "Measuring on the shared VMs"
vips="1 1000"
modes="gre4 nat4"
args=()
while [ $# -gt 0 ]; do
    case "$1" in
        --vips) vips=$2; shift 2 ;;
        --modes) modes=$2; shift 2 ;;
        --packets) packets=$2; shift 2 ;;
        -h | --help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        --rounds | --seconds | --core | --bin | --vpp | --json | --backends | --flows | --lb-sessions) args+=("$1" "$2"); shift 2 ;;
        *) echo "bench-lb-vs-vpp: unexpected argument $1" >&2; exit 2 ;;
    esac
done
scenarios=()
for m in $modes; do
    case "$m" in
        gre4 | nat4) for n in $vips; do scenarios+=("lb4-$m-$n"); done ;;
        *) echo "bench-lb-vs-vpp: --modes takes gre4 and nat4, not $m" >&2; exit 2 ;;
    esac
done
exec "$(dirname "$0")/bench-vs-vpp.sh" --packets "$packets" "${args[@]}" "${scenarios[@]}"
