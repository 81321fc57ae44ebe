#!/bin/busybox sh
# Init of the Linux backend guest in the load balancer's encapsulation test
# (tests/test_lb_encap_linux.py): a direct-server-return backend as Katran and VPP's lb
# expect one. The guest is 198.18.1.2 on eth0, on a segment with vecgate (198.18.1.1)
# and with the client's second leg (198.18.1.9). It holds the service addresses on lo
# and decapsulates what vecgate sends it: IP-in-IP (the ipip module's tunl0), GRE
# (ip_gre's gre0) and GUE on UDP 5555 (fou, then tunl0); it answers the client directly
# through 198.18.1.9, never through vecgate. Servers: TCP port 80 (a line, then this
# backend's name, then every byte echoed) and a UDP echo on port 53 of each service
# address. Then "GUEST: ready", `linger=N` seconds up for the host's checks, the
# tunnel devices' counters, power off.
export PATH=/sbin:/bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
for m in virtio_pci virtio_net ipip ip_gre fou; do
    modprobe $m 2>/dev/null || echo "GUEST: modprobe $m (not a module here)"
done
IP=/sbin/ip
$IP link set lo up
$IP link set eth0 up
$IP addr add 198.18.1.2/24 dev eth0
VIPS="198.18.128.20 198.18.128.21 198.18.128.22"
for v in $VIPS; do $IP addr add $v/32 dev lo; done
$IP fou add port 5555 gue || echo "GUEST: fou FAIL"
$IP link set tunl0 up || echo "GUEST: tunl0 FAIL"
$IP link set gre0 up || echo "GUEST: gre0 FAIL"
# Packets come in on the tunnel devices from a client routed another way.
for f in /proc/sys/net/ipv4/conf/*/rp_filter; do echo 0 > "$f"; done
# Replies go to the client directly.
$IP route add 198.18.200.0/24 via 198.18.1.9 dev eth0
printf '#!/bin/sh\nread line\necho guest\nexec cat\n' > /sbin/echo-handler
chmod +x /sbin/echo-handler
nc -ll -p 80 -e /sbin/echo-handler &
for v in $VIPS; do udp-echo $v 53 & done
# Our address resolved at vecgate and the client's leg before the host's checks.
ping -c 1 -W 3 198.18.1.1 > /dev/null 2>&1
ping -c 1 -W 3 198.18.1.9 > /dev/null 2>&1
echo "GUEST: ready"
L=$(sed -n 's/.*linger=\([0-9]*\).*/\1/p' /proc/cmdline)
sleep ${L:-10}
$IP -s link show tunl0
$IP -s link show gre0
echo "GUEST: done"
poweroff -f
