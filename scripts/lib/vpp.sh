# shellcheck shell=bash
# What the scripts that run fd.io VPP beside vecgate share (scripts/bench-vs-vpp.sh,
# scripts/bench-ipsec-vs-vpp.sh, scripts/bench-esp-decrypt-vs-vpp.sh;
# scripts/bench-lb-vs-vpp.sh runs the first): finding the VPP build, root, the lock,
# hugepages, keeping off the measured core, starting VPP and stopping it, a measured
# round of its stream, the options they all take. Sourced before the caller parses its
# options (its functions use the caller's `log`); reads $ROOT, $vpp (--vpp, or empty),
# $bin (--bin, or empty), $core and, for a round, $seconds.

# The options every VPP script takes, `--rounds N`, `--seconds S`, `--packets N`, `--core C`,
# `--bin PATH`, `--vpp DIR` and `--json FILE`: the variable set from the next argument
# (the caller shifts both), or status 1 for another option. The last three start empty
# ($vpp: $VPP_DIR); the others' defaults are each script's.
bin=
vpp=${VPP_DIR:-}
json_out=
vpp_option() { # option value
    case "$1" in
        --rounds) rounds=$2 ;;
        --seconds) seconds=$2 ;;
        --packets) packets=$2 ;;
        --core) core=$2 ;;
        --bin) bin=$2 ;;
        --vpp) vpp=$2 ;;
        --json) json_out=$2 ;;
        *) return 1 ;;
    esac
}

# $vpp: the VPP build (bin/vpp, bin/vppctl, lib/) from --vpp, $VPP_DIR or
# ../shared/peers/vpp; without one, says so and exits 0 (the project does not need
# VPP). $bin: vecgate, built if not given. Needs root and VPP's libraries.
vpp_find() {
    if [ -z "$vpp" ]; then
        vpp=$ROOT/../shared/peers/vpp
        # A git worktree one level further down finds the same folder.
        [ -x "$vpp/bin/vpp" ] || [ ! -x "$ROOT/../../shared/peers/vpp/bin/vpp" ] || vpp=$ROOT/../../shared/peers/vpp
    fi
    if [ ! -x "$vpp/bin/vpp" ] || [ ! -x "$vpp/bin/vppctl" ]; then
        log "no VPP build at $vpp (bin/vpp, bin/vppctl): skipped. Set VPP_DIR or --vpp; docs/PERFORMANCE.md \"Against VPP, side by side\" says how to build one."
        exit 0
    fi
    vpp=$(cd "$vpp" && pwd -P)
    [ "$(id -u)" = 0 ] || { log "needs root (hugepages, core pinning)"; exit 1; }
    if [ -z "$bin" ]; then
        cargo build --release -q -p vecgate
        bin=$ROOT/target/release/vecgate
    fi
    export LD_LIBRARY_PATH="$vpp/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    if ldd "$vpp/bin/vpp" 2>/dev/null | grep -q 'not found'; then
        log "VPP's shared libraries do not all resolve (ldd $vpp/bin/vpp); on Debian: apt-get install libssl3 libbpf1 libxdp1 libelf1 zlib1g"
        exit 1
    fi
}

HP_SYS=/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages
HP_FREE=/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages
hp_old=
vpp_pid=
vpp_shm=

# One VPP benchmark at a time (the lock /tmp/vpp-peer-bench.lock, waited for up to
# 900 s). Makes $work (/tmp/NAME.XXXXXX, kept when the run fails) and $vpp_shm (the
# prefix of VPP's shared memory, for startup.conf's api-segment), gets NEED free 2 MiB
# hugepages (the old count restored at exit), stops VPP at exit, and moves this shell
# (so vppctl too) off the measured $core.
vpp_prepare() { # name need
    local name=$1 need=$2
    exec 9>/tmp/vpp-peer-bench.lock
    flock -w 900 9 || { log "another VPP benchmark holds /tmp/vpp-peer-bench.lock"; exit 1; }
    work=$(mktemp -d "/tmp/$name.XXXXXX")
    vpp_shm=${name//-/}$$
    trap vpp_cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    if [ "$(cat $HP_FREE)" -lt "$need" ]; then
        hp_old=$(cat $HP_SYS)
        echo $((hp_old + need - $(cat $HP_FREE))) >"$HP_SYS"
        [ "$(cat $HP_FREE)" -ge "$need" ] || { log "could not get $need free 2 MiB hugepages"; exit 1; }
    fi
    local others
    others=$(seq 0 $(($(nproc --all) - 1)) | grep -vx "$core" | paste -sd, -)
    [ -z "$others" ] || taskset -pc "$others" $$ >/dev/null
}

stop_vpp() {
    if [ -n "$vpp_pid" ] && kill -0 "$vpp_pid" 2>/dev/null; then
        kill -TERM "$vpp_pid" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$vpp_pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$vpp_pid" 2>/dev/null || true
        wait "$vpp_pid" 2>/dev/null || true
    fi
    vpp_pid=
    # Guarded: an empty prefix would name all of /dev/shm.
    [ -z "$vpp_shm" ] || rm -f "/dev/shm/$vpp_shm"* 2>/dev/null || true
}

vpp_cleanup() {
    local rc=$?
    set +e
    stop_vpp
    [ -z "$hp_old" ] || echo "$hp_old" >"$HP_SYS"
    if [ $rc -ne 0 ]; then log "run files kept in $work"; else rm -rf "$work"; fi
    exit $rc
}

ctl() { "$vpp/bin/vppctl" -s "$run/cli.sock" "$@"; }

# $run/startup.conf: VPP on $core, its sockets, log and stats in $run, its shared memory
# under $vpp_shm, the setup in $run/setup.cli; HEAP the main heap, BUFFERS a NUMA node's
# (on 2 MiB pages), STATSEG the stats segment's size, PLUGINS what to enable (every
# plugin off otherwise), then any further lines as they are.
vpp_startup_conf() { # heap buffers statseg plugins [line]...
    local heap=$1 buffers=$2 statseg=$3 plugins=$4
    shift 4
    {
        echo "unix { nodaemon nosyslog runtime-dir $run cli-listen $run/cli.sock log $run/vpp.log startup-config $run/setup.cli }"
        echo "api-segment { prefix $vpp_shm }"
        echo "socksvr { socket-name $run/api.sock }"
        echo "statseg { socket-name $run/stats.sock size $statseg }"
        echo "cpu { main-core $core }"
        echo "memory { main-heap-size $heap }"
        echo "buffers { buffers-per-numa $buffers page-size 2M }"
        echo "plugins { path $vpp/lib/vpp_plugins plugin default { disable } ${plugins:+$plugins }}"
        for line in "$@"; do echo "$line"; done
    } >"$run/startup.conf"
}

# Starts VPP on $run/startup.conf (whose startup-config makes the packet-generator
# stream `side`) and waits until that stream exists; exits if VPP dies, takes longer
# than TIMEOUT seconds, or refused any of its setup.
vpp_start() { # timeout
    local timeout=$1
    "$vpp/bin/vpp" -c "$run/startup.conf" >"$run/vpp.out" 2>&1 </dev/null &
    vpp_pid=$!
    local t0=$SECONDS
    until [ -S "$run/cli.sock" ] && ctl show packet-generator 2>/dev/null | grep -qw side; do
        kill -0 "$vpp_pid" 2>/dev/null || { log "VPP exited during start-up:"; tail -n 20 "$run/vpp.out" >&2; exit 1; }
        [ $((SECONDS - t0)) -lt "$timeout" ] || { log "VPP did not come up within $timeout s"; exit 1; }
        sleep 0.2
    done
    if grep -qiE 'unknown input|error|failed|invalid' "$run/vpp.out"; then
        grep -iE 'unknown input|error|failed|invalid' "$run/vpp.out" | head >&2
        log "VPP refused part of the setup (see above)"
        exit 1
    fi
    vpp_up_seconds=$((SECONDS - t0))
}

# One round of the stream `side`: the round's `show runtime` into OUT after $seconds, then
# 0.25 s windows (OUT.1, OUT.2 …: against a loaded host's preemption, VPP has no
# per-vector figures, so the windows' median stands next to vecgate's median vector),
# and `show errors` into OUT.errors (cleared at the start).
vpp_round_windows() { # out-file
    ctl clear errors >/dev/null
    ctl packet-generator enable-stream side >/dev/null
    sleep 1
    ctl clear runtime >/dev/null
    sleep "$seconds"
    ctl show runtime >"$1"
    for w in $(seq $((seconds * 4))); do
        ctl clear runtime >/dev/null
        sleep 0.25
        ctl show runtime >"$1.$w"
    done
    ctl packet-generator disable-stream side >/dev/null
    ctl show errors >"$1.errors"
    sleep 0.3
}
