#!/usr/bin/env bash
# vecgate against fd.io VPP, side by side: for each scenario, `vecgate bench` and VPP's
# packet generator forward the same frames (vecgate writes one period of its scenario's
# frames to a pcap; both replay that file) through the same configuration (for the
# large-FIB scenarios the same route file, loaded into both), in interleaved rounds on
# the same core. Prints per scenario both path figures (TSC cycles per packet, the
# generator excluded), their ratio, and the nodes of both; medians over the rounds.
#
# Usage: scripts/bench-vs-vpp.sh [--rounds N] [--seconds S] [--packets N] [--core C]
#                                [--bin PATH] [--vpp DIR] [--json FILE] SCENARIO...
#   SCENARIO: ip4-forward ip6-forward ip4-forward-1m ip6-forward-1m
#             gtpu4-encap gtpu4-decap gtpu6-encap gtpu6-decap   (default: all of them)
#             lb4-gre4-N: `bench lb4-encap --services N` against VPP's lb plugin
#             (`--backends B --flows F`; scripts/bench-lb-vs-vpp.sh runs these)
#             lb4-nat4-N: `bench lb4-nat --services N` (kube-proxy's NAT) against the
#             same plugin's NAT mode (`encap nat4 type clusterip`, node `lb4-nat4-port`)
#   --lb-sessions N|vpp|default: vecgate's session slots in the LB scenarios (`bench
#              --lb-sessions`). `vpp` (the default): as many as VPP's flow table has
#              entries (its buckets, sized below for the flows, times 4), so both tables
#              spread the same flows over the same capacity; `default`: vecgate's
#              configured default (`lb.limits.sessions`, a million slots of 64 bytes).
#   --vpp DIR: a VPP build laid out as bin/vpp, bin/vppctl, lib/ (default: $VPP_DIR, else
#              ../shared/peers/vpp next to the repository or its worktree's parent). Without one the script says
#              so and exits 0: the project does not need VPP. docs/PERFORMANCE.md says how
#              to build one.
# Needs root (hugepages, core pinning). Only one run at a time (a lock in /tmp).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
rounds=5
seconds=3
packets=5000000
core=1
backends=10
flows=10000
lb_sessions=vpp
. "$ROOT/scripts/lib/vpp.sh"
while [ $# -gt 0 ]; do
    if vpp_option "$@"; then
        shift 2
        continue
    fi
    case "$1" in
        --backends) backends=$2; shift 2 ;;
        --flows) flows=$2; shift 2 ;;
        --lb-sessions) lb_sessions=$2; shift 2 ;;
        -h | --help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        -*) echo "bench-vs-vpp: unknown option $1" >&2; exit 2 ;;
        *) break ;;
    esac
done
scenarios=("$@")
[ ${#scenarios[@]} -gt 0 ] || scenarios=(ip4-forward ip6-forward gtpu4-encap gtpu4-decap gtpu6-encap gtpu6-decap ip4-forward-1m ip6-forward-1m)
log() { echo "bench-vs-vpp: $*" >&2; }

# VPP's flow table: buckets of 4 entries, a power of two of them with room for 4 entries
# a flow (lb_cli below); vecgate's session table is given as many slots unless told.
vpp_buckets=1024
while [ "$vpp_buckets" -lt $((4 * flows)) ]; do vpp_buckets=$((vpp_buckets * 2)); done
case "$lb_sessions" in
    vpp) lb_opt=(--lb-sessions $((vpp_buckets * 4))) ;;
    default) lb_opt=() ;;
    *[!0-9]* | '') echo "bench-vs-vpp: --lb-sessions takes a number, vpp or default, not $lb_sessions" >&2; exit 2 ;;
    *) lb_opt=(--lb-sessions "$lb_sessions") ;;
esac

vpp_find
# VPP needs ~20 pages; the large tables' mtries and a 64k-frame pcap stream more.
vpp_prepare bench-vs-vpp 300

# The topology of `vecgate bench` (crates/vecgate/src/bench.rs, BASE): pg0 receives,
# the second interface (vecgate's null0, VPP's pg1) sends to four neighbours.
TOPO='create packet-generator interface pg0 hw-addr 02:00:00:00:00:01
create packet-generator interface pg1 hw-addr 02:00:00:00:00:02
set interface mtu 9000 pg1
set interface state pg0 up
set interface state pg1 up
set interface ip address pg0 198.18.0.1/24
set interface ip address pg0 2001:db8::1/64
set interface ip address pg1 198.18.1.1/24
set interface ip address pg1 2001:db8:1::1/64
set ip neighbor pg1 198.18.1.2 02:00:00:00:01:02 static
set ip neighbor pg1 198.18.1.3 02:00:00:00:01:03 static
set ip neighbor pg1 198.18.1.4 02:00:00:00:01:04 static
set ip neighbor pg1 198.18.1.5 02:00:00:00:01:05 static
set ip neighbor pg1 2001:db8:1::2 02:00:00:00:01:02 static
set ip neighbor pg1 2001:db8:1::3 02:00:00:00:01:03 static
set ip neighbor pg1 2001:db8:1::4 02:00:00:00:01:04 static
set ip neighbor pg1 2001:db8:1::5 02:00:00:00:01:05 static
ip route add 198.19.0.0/16 via 198.18.1.2 pg1
ip route add 198.19.1.0/24 via 198.18.1.3 pg1
ip route add 198.19.128.0/17 via 198.18.1.4 pg1
ip route add 198.19.2.0/23 via 198.18.1.5 pg1
ip route add 2001:db8:100::/48 via 2001:db8:1::2 pg1
ip route add 2001:db8:100:1::/64 via 2001:db8:1::3 pg1
ip route add 2001:db8:200::/40 via 2001:db8:1::4 pg1
ip route add 2001:db8:101::/48 via 2001:db8:1::5 pg1'
# `vecgate bench gtpuN-*`: tunnel 1 (TEID in 1, out 0x80000001) from the second
# interface's address to 198.18.1.2 / 2001:db8:1::2; encap routes UE 198.18.128.0 into it.
gtpu_cli() { # outer-family encap|decap
    local src=198.18.1.1 dst=198.18.1.2
    [ "$1" = 6 ] && { src=2001:db8:1::1; dst=2001:db8:1::2; }
    echo "create gtpu tunnel src $src dst $dst teid 1 tteid 2147483649 encap-vrf-id 0 decap-next ip4"
    echo "set interface unnumbered gtpu_tunnel0 use pg0"
    [ "$2" = encap ] && echo "ip route add 198.18.128.0/32 via gtpu_tunnel0"
    return 0
}

# `vecgate bench lb4-encap --services N --backends B` (crates/vecgate/src/bench.rs,
# lb_setup): VIP i is 198.18.128.0 + i, its backends 198.19.0.0 + i*B + j + 1 (routed out
# of pg1), the node's address 198.18.1.1 the outer source. VPP's per-worker flow table
# gets room for every flow (its default, 1024 buckets, would evict them). `bench lb4-nat`
# (NAT): the same VIPs and backends, UDP port 53 to the backends' port 8053; VPP's NAT
# VIPs are per port (`lb4-nat4-port`: the destination address and port rewritten).
lb_cli() { # vips gre4|nat4
    python3 - "$1" "$backends" "$vpp_buckets" "$2" <<'PY'
import ipaddress, sys
n, b, buckets = (int(x) for x in sys.argv[1:4])
mode = sys.argv[4]
print(f"lb conf ip4-src-address 198.18.1.1 buckets {buckets} timeout 60")
vip0, be0 = int(ipaddress.IPv4Address("198.18.128.0")), int(ipaddress.IPv4Address("198.19.0.0"))
for i in range(n):
    vip = ipaddress.IPv4Address(vip0 + i)
    ases = " ".join(str(ipaddress.IPv4Address(be0 + (i * b + j) % 65000 + 1)) for j in range(b))
    if mode == "gre4":
        print(f"lb vip {vip}/32 encap gre4 new_len 1024")
        print(f"lb as {vip}/32 {ases}")
    else:
        print(f"lb vip {vip}/32 protocol udp port 53 encap nat4 type clusterip target_port 8053 new_len 1024")
        print(f"lb as {vip}/32 protocol udp port 53 {ases}")
PY
}

start_vpp() { # scenario dir
    local s=$1 dir=$2
    run=$dir/vpp
    mkdir -p "$run"
    {
        echo "$TOPO"
        case "$s" in
            gtpu4-encap) gtpu_cli 4 encap ;;
            gtpu4-decap) gtpu_cli 4 decap ;;
            gtpu6-encap) gtpu_cli 6 encap ;;
            gtpu6-decap) gtpu_cli 6 decap ;;
            lb4-gre4-*)
                lb_cli "${s#lb4-gre4-}" gre4 >"$dir/lb.cli"
                echo "exec $dir/lb.cli"
                ;;
            lb4-nat4-*)
                lb_cli "${s#lb4-nat4-}" nat4 >"$dir/lb.cli"
                echo "exec $dir/lb.cli"
                ;;
        esac
        [ -f "$dir/routes.txt" ] && echo "exec $dir/routes.cli"
        echo "packet-generator new name side limit 0 interface pg0 node ethernet-input pcap $dir/frames.pcap limit 1000000000000"
    } >"$run/setup.cli"
    if [ -f "$dir/routes.txt" ]; then
        # The same route file, in VPP's words (every next hop is on pg1).
        awk '/^[^#]/ && NF >= 3 && $2 == "via" { print "ip route add " $1 " via " $3 " pg1" }' "$dir/routes.txt" >"$dir/routes.cli"
    fi
    vpp_startup_conf 3G 131072 1G "plugin gtpu_plugin.so { enable } plugin lb_plugin.so { enable }"
    vpp_start 600
    log "$s: VPP up in $vpp_up_seconds s ($(ctl show version | head -n1 | tr -d '\r'))"
}

vpp_round() { # out-file
    ctl packet-generator enable-stream side >/dev/null
    sleep 1
    ctl clear runtime >/dev/null
    sleep "$seconds"
    ctl show runtime >"$1"
    ctl packet-generator disable-stream side >/dev/null
    sleep 0.3
}

results=$work/results.tsv
: >"$results"
tsc_hz=
for s in "${scenarios[@]}"; do
    case "$s" in
        ip4-forward | ip6-forward | ip4-forward-1m | ip6-forward-1m | gtpu4-encap | gtpu4-decap | gtpu6-encap | gtpu6-decap)
            bench=("$s") ;;
        lb4-gre4-[1-9]*)
            bench=(lb4-encap --services "${s#lb4-gre4-}" --backends "$backends" --flows "$flows" "${lb_opt[@]}") ;;
        lb4-nat4-[1-9]*)
            bench=(lb4-nat --services "${s#lb4-nat4-}" --backends "$backends" --flows "$flows" "${lb_opt[@]}") ;;
        *) log "unknown scenario $s"; exit 2 ;;
    esac
    dir=$work/$s
    mkdir -p "$dir"
    "$bin" bench "${bench[@]}" --export "$dir" 2>/dev/null
    routes_opt=()
    [ -f "$dir/routes.txt" ] && routes_opt=(--route-file "$dir/routes.txt")
    start_vpp "$s" "$dir"
    tsc_hz=$(ctl show clock verbose | sed -n 's/.*clocks\/sec \([0-9.]*\).*/\1/p' | head -n1)
    for r in $(seq "$rounds"); do
        printf '%s\tvecgate\t%s\t' "$s" "$r" >>"$results"
        "$bin" bench "${bench[@]}" --frames "$dir/frames.pcap" "${routes_opt[@]}" --packets "$packets" --core "$core" --json >>"$results"
        vpp_round "$dir/vpp-$r.runtime"
        printf '%s\tvpp\t%s\t%s\n' "$s" "$r" "$dir/vpp-$r.runtime" >>"$results"
    done
    stop_vpp
done

PYTHONPATH="$ROOT/scripts/lib" python3 - "$results" "$json_out" "$tsc_hz" <<'PY'
import collections, json, re, statistics as st, sys
from vpp_runtime import vpp_runtime

path, json_out, tsc_hz = sys.argv[1], sys.argv[2], sys.argv[3]

vg = collections.defaultdict(list)  # scenario -> [report]
vp = collections.defaultdict(list)  # scenario -> [(path, {node: clk/pkt})]
order = []
for line in open(path):
    s, who, _, rest = line.rstrip("\n").split("\t", 3)
    if s not in order:
        order.append(s)
    if who == "vecgate":
        vg[s].append(json.loads(rest))
    else:
        nodes = vpp_runtime(rest)
        n_in = nodes.get("pg-input", (0, 0))[1]
        in_path = {k: v for k, v in nodes.items() if k != "pg-input" and v[1] >= n_in // 2}
        total = sum(c * n for c, n in in_path.values()) / max(n_in, 1)
        vp[s].append((total, {k: c * n / max(n_in, 1) for k, (c, n) in in_path.items()}))

med = st.median
out = {"cpu": vg[order[0]][0]["cpu"] if order else "", "tsc_hz": tsc_hz, "scenarios": []}
print(f"vecgate vs VPP, interleaved rounds on one core ({out['cpu']}); TSC cycles per packet, generator excluded; medians")
print(f"{'scenario':<16} {'vecgate':>8} {'VPP':>8} {'ratio':>6}   range vecgate / VPP")
rows = []
for s in order:
    a = [r["cycles_per_packet"] for r in vg[s]]
    b = [x[0] for x in vp[s]]
    delivered = all(r["delivered"] == r["packets"] for r in vg[s])
    rows.append((s, a, b))
    print(f"{s:<16} {med(a):>8.1f} {med(b):>8.1f} {med(a) / med(b):>6.2f}   [{min(a):.1f}-{max(a):.1f}] / [{min(b):.1f}-{max(b):.1f}]"
          + ("" if delivered else "  (vecgate lost packets!)"))
    vnodes = collections.defaultdict(list)
    for r in vg[s]:
        for n in r["nodes"]:
            if n["name"] != "pg-input":
                vnodes[n["name"]].append(n["cycles_per_packet"] * n["packets"] / max(r["packets"], 1))
    pnodes = collections.defaultdict(list)
    for _, nd in vp[s]:
        for k, v in nd.items():
            pnodes[k].append(v)
    out["scenarios"].append(dict(
        scenario=s, vecgate=med(a), vpp=med(b), ratio=med(a) / med(b), vecgate_runs=a, vpp_runs=b,
        vecgate_nodes={k: med(v) for k, v in vnodes.items()}, vpp_nodes={k: med(v) for k, v in pnodes.items()}))
print()
for sc in out["scenarios"]:
    print(f"{sc['scenario']}: cycles per packet by node (per generated packet, a node visited twice counts twice)")
    vn = sorted(sc["vecgate_nodes"].items(), key=lambda kv: -kv[1])
    pn = sorted(sc["vpp_nodes"].items(), key=lambda kv: -kv[1])
    for i in range(max(len(vn), len(pn))):
        l = f"{vn[i][0]:<22} {vn[i][1]:>6.1f}" if i < len(vn) else " " * 29
        r = f"{pn[i][0]:<26} {pn[i][1]:>6.1f}" if i < len(pn) else ""
        print(f"  {l}    {r}")
if json_out:
    json.dump(out, open(json_out, "w"), indent=1)
PY
