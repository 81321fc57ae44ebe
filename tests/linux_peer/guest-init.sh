#!/bin/busybox sh
# Init of the Linux peer guest in the interop tests. The guest is 198.18.1.2 on eth0;
# vecgate is 198.18.1.1 on the same link. Tunnels to vecgate, all through Linux's fou:
#   gue1   IPIP in GUE, port 5555        inner 198.18.210.2 <-> 198.18.200.1 (host H)
#   gue6   IPv6 (sit) in GUE, port 5555  inner 2001:db8:210::2 <-> 2001:db8:200::1 (host H)
#   fgre1  GRE in UDP (fou ipproto 47), port 5556  inner 198.18.211.2 <-> 198.18.200.3 (H)
#   fgrek  the same on port 5559 with key 9, checksums and sequence numbers both ways
#          (csum, seq: Linux drops what arrives without them or out of order)
#                                                  inner 198.18.214.2 <-> 198.18.200.7 (H)
#   guer   IPIP in GUE from 198.18.1.3, port 5560, with outer checksums and remote
#          checksum offload (encap-remcsum)    inner 198.18.215.2 <-> 198.18.200.8 (H)
# and over IPv6 outer headers (guest 2001:db8:1::2, vecgate 2001:db8:1::1):
#   gueo6  IPv4 (ip6tnl ipip6) in GUE, port 5557       inner 198.18.212.2 <-> 198.18.200.5 (H)
#   fgreo6 GRE (ip6gre) in UDP (fou ipproto 47), 5558  inner 198.18.213.2 <-> 198.18.200.6 (H)
# Then the guest's own checks (pings and a UDP exchange through each tunnel), lines
# "GUEST: <check> ok|FAIL", "GUEST: checks done", and it stays up `linger=N` seconds
# (kernel command line) for the host's checks before powering off.
export PATH=/sbin:/bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
for m in virtio_pci virtio_net fou fou6 ipip sit ip_gre ip6_tunnel ip6_gre; do
    modprobe $m || echo "GUEST: modprobe $m FAIL"
done
IP=/sbin/ip
$IP link set lo up
$IP link set eth0 up
$IP addr add 198.18.1.2/24 dev eth0
$IP fou add port 5555 gue
$IP link add gue1 type ipip remote 198.18.1.1 local 198.18.1.2 ttl 64 encap gue encap-sport auto encap-dport 5555
$IP addr add 198.18.210.2/32 dev gue1
$IP link set gue1 up
$IP route add 198.18.200.1/32 dev gue1
$IP link add gue6 type sit remote 198.18.1.1 local 198.18.1.2 ttl 64 encap gue encap-sport auto encap-dport 5555
$IP addr add 2001:db8:210::2/128 dev gue6
$IP link set gue6 up
$IP -6 route add 2001:db8:200::1/128 dev gue6
$IP fou add port 5556 ipproto 47
$IP link add fgre1 type gre remote 198.18.1.1 local 198.18.1.2 ttl 64 encap fou encap-sport auto encap-dport 5556
$IP addr add 198.18.211.2/32 dev fgre1
$IP link set fgre1 up
$IP route add 198.18.200.3/32 dev fgre1
$IP fou add port 5559 ipproto 47
$IP link add fgrek type gre remote 198.18.1.1 local 198.18.1.2 ttl 64 key 9 csum seq encap fou encap-sport auto encap-dport 5559
$IP addr add 198.18.214.2/32 dev fgrek
$IP link set fgrek up
$IP route add 198.18.200.7/32 dev fgrek
$IP addr add 198.18.1.3/24 dev eth0
$IP fou add port 5560 gue
$IP link add guer type ipip remote 198.18.1.1 local 198.18.1.3 ttl 64 encap gue encap-sport auto encap-dport 5560 encap-csum encap-remcsum
$IP addr add 198.18.215.2/32 dev guer
$IP link set guer up
$IP route add 198.18.200.8/32 dev guer
$IP addr add 2001:db8:1::2/64 dev eth0 nodad
$IP fou add port 5557 gue -6
$IP link add gueo6 type ip6tnl mode ipip6 remote 2001:db8:1::1 local 2001:db8:1::2 encap gue encap-sport auto encap-dport 5557
$IP addr add 198.18.212.2/32 dev gueo6
$IP link set gueo6 up
$IP route add 198.18.200.5/32 dev gueo6
$IP fou add port 5558 ipproto 47 -6
$IP link add fgreo6 type ip6gre remote 2001:db8:1::1 local 2001:db8:1::2 encap fou encap-sport auto encap-dport 5558
$IP addr add 198.18.213.2/32 dev fgreo6
$IP link set fgreo6 up
$IP route add 198.18.200.6/32 dev fgreo6
echo "GUEST: ready"
check() {
    name=$1; shift
    if "$@" > /tmp/out 2>&1; then echo "GUEST: $name ok"; else echo "GUEST: $name FAIL"; fi
    cat /tmp/out
}
check gue-ping ping -c 3 -W 3 198.18.200.1
check gue6-ping ping6 -c 3 -W 3 2001:db8:200::1
check gre-ping ping -c 3 -W 3 198.18.200.3
check gue-udp udp-probe 198.18.200.1 7000 guest-gue
check gre-udp udp-probe 198.18.200.3 7000 guest-gre
check gue-o6-ping ping -c 3 -W 3 198.18.200.5
check gre-o6-ping ping -c 3 -W 3 198.18.200.6
check gue-o6-udp udp-probe 198.18.200.5 7000 guest-gue-o6
check gre-opt-ping ping -c 3 -W 3 198.18.200.7
# The ping first: vecgate drops the packet that makes it resolve H's new address, and
# udp-probe sends one datagram (ICMP carries no partial checksum: no offload there).
check gue-rco-ping ping -c 3 -W 3 198.18.200.8
check gue-rco-udp udp-probe 198.18.200.8 7000 guest-gue-rco
echo "GUEST: checks done"
L=$(sed -n 's/.*linger=\([0-9]*\).*/\1/p' /proc/cmdline)
sleep ${L:-10}
$IP -s link show gue1 | head -6
$IP -s link show fgre1 | head -6
$IP -s link show fgrek | head -6
$IP -s link show guer | head -6
$IP -s link show gueo6 | head -6
$IP -s link show fgreo6 | head -6
echo "GUEST: done"
poweroff -f
