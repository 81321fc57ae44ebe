#!/usr/bin/env bash
# The load balancer's SCTP interop test's guest (tests/test_lb_sctp_linux.py):
# prepare.sh's Debian kernel, and an initramfs of its own with the kernel's SCTP (sctp
# and its CRC32c), busybox, Debian's `ip`, sctp-peer and guest-init-sctp.sh. Output:
# target/linux-peer/initrd-sctp.gz.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
. "$HERE/initramfs.sh"
guest_initrd sctp "$HERE/guest-init-sctp.sh" "$HERE/sctp-peer.c" "virtio_pci virtio_net crc32c_generic sctp" SCTP
