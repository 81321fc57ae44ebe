#!/bin/busybox sh
# Init of the guest in the load balancer's SCTP direct-server-return test
# (tests/test_lb_sctp_dsr_linux.py): a multi-homed client and two backends, each its own
# network namespace with its own SCTP stack, talking only through vecgate.
#   c   eth1 (vecgate's cli link): the client, 198.18.0.2 … .7 and 2001:db8::2 … ::7,
#       MTU 1400 (its packets fit the backends' links with an outer header), vecgate
#       (198.18.0.1, 2001:db8::1) its gateway.
#   b1  veth e0 to the root namespace: 198.18.2.2 and 2001:db8:2::2; b2 likewise on
#       198.18.3.0/24 and 2001:db8:3::/64. Each holds the service addresses
#       198.18.128.20 and 2001:db8:128::20 on lo, decapsulates IP-in-IP (the ipip and
#       ip6_tunnel modules' tunl0 and ip6tnl0, one of each in every namespace) and runs
#       sctp-peer servers on port 38412 of both; replies leave from the service address by
#       the default route (MTU 1400), through the root namespace and vecgate.
#   root  eth0 (vecgate's srv link): 198.18.1.2 and 2001:db8:1::2, forwarding between
#       vecgate (its default gateway) and the backends' veths.
# SCTP's timers short in c, b1 and b2 (an endpoint copies them when made): a failed path
# is left within a second, not minutes. Then "GUEST: ready", and a command per console
# line from the host (qemu's standard input), each answered by its lines, then
# "GUEST: finished CMD":
#   probe FAMILY A          a single-homed client bound to A, port $CPORT, 16 KiB echoed
#   failover FAMILY A1 A2   a client bound to A1 and A2, port $CPORT, bytes= echoed;
#                           halfway /sbin/sctp-failover moves it from A1 to A2
#   snmp                    each backend's SCTP counters (/proc/net/sctp/snmp), one line
#   done                    power off
export PATH=/sbin:/bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
for m in virtio_pci virtio_net crc32c_generic sctp veth ipip ip6_tunnel; do
    modprobe $m 2>/dev/null || echo "GUEST: modprobe $m (not a module here)"
done
[ -d /proc/sys/net/sctp ] || echo "GUEST: sctp FAIL (no /proc/sys/net/sctp)"
IP=/sbin/ip
BYTES=$(sed -n 's/.*bytes=\([0-9]*\).*/\1/p' /proc/cmdline)
CPORT=40000
VIP4=198.18.128.20 VIP6=2001:db8:128::20
mkdir -p /run/netns
# Short SCTP timers in namespace $1: RTO 100 ms to 1 s (first 300 ms), a path failed
# after 3 retransmissions, potentially failed (left for another) after its first.
sctp_timers() {
    $IP netns exec "$1" sh -c 'cd /proc/sys/net/sctp && echo 100 > rto_min && echo 1000 > rto_max &&
        echo 300 > rto_initial && echo 1000 > hb_interval && echo 3 > path_max_retrans && echo 0 > pf_retrans' ||
        echo "GUEST: sctp timers $1 FAIL"
}
$IP link set lo up
$IP link set eth0 up
$IP addr add 198.18.1.2/24 dev eth0
$IP addr add 2001:db8:1::2/64 dev eth0 nodad
$IP route add default via 198.18.1.1
$IP -6 route add default via 2001:db8:1::1
echo 1 > /proc/sys/net/ipv4/ip_forward
echo 1 > /proc/sys/net/ipv6/conf/all/forwarding
# Replies come from the service address, which routes back out eth0.
for f in /proc/sys/net/ipv4/conf/*/rp_filter; do echo 0 > "$f"; done
for n in 1 2; do
    b=b$n
    $IP netns add $b || echo "GUEST: netns $b FAIL"
    $IP link add $b type veth peer name e0 netns $b || echo "GUEST: veth $b FAIL"
    $IP link set $b up
    $IP addr add 198.18.$((n + 1)).1/24 dev $b
    $IP addr add 2001:db8:$((n + 1))::1/64 dev $b nodad
    $IP -n $b link set lo up
    $IP -n $b link set e0 up
    $IP -n $b addr add 198.18.$((n + 1)).2/24 dev e0
    $IP -n $b addr add 2001:db8:$((n + 1))::2/64 dev e0 nodad
    $IP -n $b addr add $VIP4/32 dev lo
    $IP -n $b addr add $VIP6/128 dev lo
    # The outer packets are up to 40 bytes longer than the client's, its replies not.
    $IP -n $b route add default via 198.18.$((n + 1)).1 mtu 1400 || echo "GUEST: $b route FAIL"
    $IP -n $b -6 route add default via 2001:db8:$((n + 1))::1 mtu 1400 || echo "GUEST: $b route6 FAIL"
    $IP -n $b link set tunl0 up || echo "GUEST: $b tunl0 FAIL"
    $IP -n $b link set ip6tnl0 up || echo "GUEST: $b ip6tnl0 FAIL"
    # The client's packets come in on the tunnel devices, from addresses routed by e0.
    $IP netns exec $b sh -c 'for f in /proc/sys/net/ipv4/conf/*/rp_filter; do echo 0 > "$f"; done'
    sctp_timers $b
    sctp-peer server /run/netns/$b $VIP4 38412 &
    sctp-peer server /run/netns/$b $VIP6 38412 &
done
$IP netns add c || echo "GUEST: netns c FAIL"
$IP link set eth1 netns c || echo "GUEST: eth1 FAIL"
$IP -n c link set lo up
$IP -n c link set eth1 mtu 1400 up
# The failover deletes 198.18.0.2 (or another, the first added): the others stay.
$IP netns exec c sh -c 'echo 1 > /proc/sys/net/ipv4/conf/eth1/promote_secondaries'
for a in 2 3 4 5 6 7; do
    $IP -n c addr add 198.18.0.$a/24 dev eth1
    $IP -n c addr add 2001:db8::$a/64 dev eth1 nodad
done
$IP -n c route add default via 198.18.0.1 || echo "GUEST: route FAIL"
$IP -n c -6 route add default via 2001:db8::1 || echo "GUEST: route6 FAIL"
sctp_timers c
# Run by the client (in c) halfway through its association, sctp-failover FAMILY A1 A2:
# once the backend holds both of the client's addresses as active paths (it verifies the
# second, listed in the INIT, by a HEARTBEAT: state 2 in /proc/net/sctp/remaddr, 3 while
# unconfirmed), the client's route takes A2 as its source and A1 leaves eth1. The client
# then sends from A2, and the backend's packets to A1 are lost until it fails over to A2.
cat > /sbin/sctp-failover <<'EOF'
#!/bin/sh
# busybox's sh runs its own `ip` applet for a bare `ip`: Debian's by path.
fam=$1 a1=$2 a2=$3
i=0
until [ "$(for b in b1 b2; do /sbin/ip netns exec $b cat /proc/net/sctp/remaddr; done | awk '$1 != "ADDR" {n++; if ($NF == 2) up++} END {print n + 0, up + 0}')" = "2 2" ]; do
    i=$((i + 1))
    if [ $i -gt 100 ]; then
        echo "GUEST: failover FAIL (no backend holds two active paths)"
        for b in b1 b2; do /sbin/ip netns exec $b cat /proc/net/sctp/remaddr; done
        exit 1
    fi
    sleep 0.1
done
if [ "$fam" = 4 ]; then
    /sbin/ip route replace default via 198.18.0.1 dev eth1 src $a2 && /sbin/ip addr del $a1/24 dev eth1
else
    /sbin/ip -6 route replace default via 2001:db8::1 dev eth1 src $a2 && /sbin/ip addr del $a1/64 dev eth1
fi
EOF
chmod +x /sbin/sctp-failover
# vecgate's addresses resolved both ways before the host's checks.
for a in 198.18.1.1 2001:db8:1::1; do ping -c 1 -W 3 $a > /dev/null 2>&1 || echo "GUEST: ping $a FAIL"; done
for a in 198.18.0.1 2001:db8::1; do $IP netns exec c ping -c 1 -W 3 $a > /dev/null 2>&1 || echo "GUEST: client ping $a FAIL"; done
echo "GUEST: ready"
while read -r cmd fam a1 a2; do
    case "$fam" in
    4) VIP=$VIP4 ;;
    6) VIP=$VIP6 ;;
    esac
    case "$cmd" in
    probe) sctp-peer client /run/netns/c $VIP 38412 16384 $a1 port=$CPORT ;;
    failover)
        sctp-peer client /run/netns/c $VIP 38412 ${BYTES:-204800} $a1,$a2 port=$CPORT \
            "halfway=/sbin/sctp-failover $fam $a1 $a2" ;;
    snmp)
        for b in b1 b2; do
            echo "GUEST: snmp $b $($IP netns exec $b cat /proc/net/sctp/snmp |
                awk '/^Sctp(CurrEstab|PassiveEstabs|Aborteds|Shutdowns|OutOfBlues) /{printf " %s=%s", $1, $2}')"
        done ;;
    done) break ;;
    *) continue ;;
    esac
    echo "GUEST: finished $cmd"
done
# The servers print an association's line at its end.
sleep 1
echo "GUEST: done"
poweroff -f
