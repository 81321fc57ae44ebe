#!/usr/bin/env bash
# The load balancer's encapsulation interop test's guest (tests/test_lb_encap_linux.py):
# prepare.sh's Debian kernel, and an initramfs of its own with the decapsulation modules
# (ipip, ip_gre, fou), busybox, Debian's `ip`, udp-echo and guest-init-lb.sh. Output:
# target/linux-peer/initrd-lb.gz.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
. "$HERE/initramfs.sh"
guest_initrd lb "$HERE/guest-init-lb.sh" "$HERE/udp-echo.c" "virtio_pci virtio_net ipip ip_gre fou" LB
