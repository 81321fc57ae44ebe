#!/usr/bin/env bash
# The load balancer's SCTP direct-server-return interop test's guest
# (tests/test_lb_sctp_dsr_linux.py): prepare.sh's Debian kernel, and an initramfs of its
# own with the kernel's SCTP (sctp and its CRC32c), veth and the IP-in-IP decapsulation
# modules (ipip, ip6_tunnel), busybox, Debian's `ip`, sctp-peer and
# guest-init-sctp-dsr.sh. Output: target/linux-peer/initrd-sctp-dsr.gz.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
. "$HERE/initramfs.sh"
guest_initrd sctp-dsr "$HERE/guest-init-sctp-dsr.sh" "$HERE/sctp-peer.c" \
    "virtio_pci virtio_net crc32c_generic sctp veth ipip ip6_tunnel" "SCTP direct-server-return"
