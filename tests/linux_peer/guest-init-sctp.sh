#!/bin/busybox sh
# Init of the guest in the load balancer's SCTP interop test (tests/test_lb_sctp_linux.py):
# both SCTP ends are this kernel's SCTP, apart, talking only through vecgate. eth0
# (198.18.1.2 and 2001:db8:1::2, the root namespace) is the backend: sctp-peer servers on
# port 38412 and, once asked, on 38413 with dynamic address reconfiguration (ASCONF) and
# AUTH on. eth1 is moved into network namespace `c`, the client's: 198.18.0.2, .3, .4 and
# 2001:db8::2, ::3, ::4 on it, vecgate (198.18.0.1, 2001:db8::1) its gateway. Then
# "GUEST: ready", and a command per console line from the host (qemu's standard input),
# FAMILY 4 or 6, each answered by sctp-peer's result lines, then "GUEST: finished CMD FAMILY":
#   single FAMILY   a client bound to the first address (one) to the VIP's port 38412
#   multi FAMILY    a client bound to the first and second (multi-homed) to port 38412
#   asconf FAMILY   ASCONF and AUTH on in both namespaces, a 38413 server started; a
#                   client bound to the first and second adds the third halfway
#   done            power off
export PATH=/sbin:/bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
for m in virtio_pci virtio_net crc32c_generic sctp; do
    modprobe $m 2>/dev/null || echo "GUEST: modprobe $m (not a module here)"
done
[ -d /proc/sys/net/sctp ] || echo "GUEST: sctp FAIL (no /proc/sys/net/sctp)"
IP=/sbin/ip
BYTES=$(sed -n 's/.*bytes=\([0-9]*\).*/\1/p' /proc/cmdline)
$IP link set lo up
$IP link set eth0 up
$IP addr add 198.18.1.2/24 dev eth0
mkdir -p /run/netns
$IP netns add c || echo "GUEST: netns FAIL"
$IP link set eth1 netns c || echo "GUEST: eth1 FAIL"
$IP -n c link set lo up
$IP -n c link set eth1 up
$IP addr add 2001:db8:1::2/64 dev eth0 nodad
for a in 2 3 4; do
    $IP -n c addr add 198.18.0.$a/24 dev eth1
    $IP -n c addr add 2001:db8::$a/64 dev eth1 nodad
done
$IP -n c route add default via 198.18.0.1 || echo "GUEST: route FAIL"
$IP -n c -6 route add default via 2001:db8::1 || echo "GUEST: route6 FAIL"
sctp-peer server - 198.18.1.2 38412 &
sctp-peer server - 2001:db8:1::2 38412 &
# vecgate's addresses resolved both ways before the host's checks.
for a in 198.18.1.1 2001:db8:1::1; do ping -c 1 -W 3 $a > /dev/null 2>&1 || echo "GUEST: ping $a FAIL"; done
for a in 198.18.0.1 2001:db8::1; do $IP netns exec c ping -c 1 -W 3 $a > /dev/null 2>&1 || echo "GUEST: client ping $a FAIL"; done
echo "GUEST: ready"
while read -r cmd fam; do
    case "$fam" in
    4) VIP=198.18.128.10 BE=198.18.1.2 A=198.18.0.2 B=198.18.0.3 C=198.18.0.4 ;;
    6) VIP=2001:db8:128::10 BE=2001:db8:1::2 A=2001:db8::2 B=2001:db8::3 C=2001:db8::4 ;;
    esac
    case "$cmd" in
    single) sctp-peer client /run/netns/c $VIP 38412 ${BYTES:-204800} $A ;;
    multi) sctp-peer client /run/netns/c $VIP 38412 ${BYTES:-204800} $A,$B ;;
    asconf)
        sctp-peer server - $BE 38413 asconf &
        sleep 1
        sctp-peer client /run/netns/c $VIP 38413 ${BYTES:-204800} $A,$B $C ;;
    done) break ;;
    *) continue ;;
    esac
    echo "GUEST: finished $cmd $fam"
done
# The servers print an association's line at its end.
sleep 1
echo "GUEST: done"
poweroff -f
