#!/bin/busybox sh
# Init of the Linux backend guest in the load balancer's encapsulation test
# (tests/test_lb_encap_linux.py): a direct-server-return backend as Katran and VPP's lb
# expect one. The guest is 198.18.1.2 on eth0, on a segment with vecgate (198.18.1.1)
# and with router R (198.18.1.9), its way to the clients (198.18.200.0/24). It holds the
# service addresses on lo and decapsulates what vecgate sends it: IP-in-IP (the ipip
# module's tunl0), GRE (ip_gre's gre0) and GUE on UDP 5555 (fou, then tunl0), the
# clients' packets and the ICMP errors about its answers alike; it answers the client
# directly through R, never through vecgate. Servers: TCP port 80 (a line, then this
# backend's name, then every byte echoed) and a UDP echo on port 53 of each service
# address. Then "GUEST: ready", and a command per console line from the host (qemu's
# standard input), each answered by its lines, then "GUEST: finished CMD":
#   route ADDR   "GUEST: route ADDR <ip route get ADDR, on one line>" (a path MTU
#                learned from a frag-needed shows as "mtu N")
#   done         the tunnel devices' counters, "GUEST: done", power off
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
# Replies go to the client directly, through R.
$IP route add 198.18.200.0/24 via 198.18.1.9 dev eth0
printf '#!/bin/sh\nread line\necho guest\nexec cat\n' > /sbin/echo-handler
chmod +x /sbin/echo-handler
nc -ll -p 80 -e /sbin/echo-handler &
for v in $VIPS; do udp-echo $v 53 & done
# Our address resolved at vecgate and R before the host's checks.
ping -c 1 -W 3 198.18.1.1 > /dev/null 2>&1
ping -c 1 -W 3 198.18.1.9 > /dev/null 2>&1
echo "GUEST: ready"
while read -r cmd arg; do
    case "$cmd" in
    route) echo "GUEST: route $arg $($IP route get "$arg" | tr -s '\n ' '  ')" ;;
    done) break ;;
    *) continue ;;
    esac
    echo "GUEST: finished $cmd"
done
$IP -s link show tunl0
$IP -s link show gre0
echo "GUEST: done"
poweroff -f
