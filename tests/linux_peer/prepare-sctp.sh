#!/usr/bin/env bash
# The load balancer's SCTP interop test's guest (tests/test_lb_sctp_linux.py):
# prepare.sh's Debian kernel, and an initramfs of its own with the kernel's SCTP (sctp
# and its CRC32c), busybox, Debian's `ip`, sctp-peer and guest-init-sctp.sh. Output:
# target/linux-peer/initrd-sctp.gz.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
. "$HERE/initramfs.sh"
"$HERE/prepare.sh" >/dev/null
OUT="${LINUX_PEER_DIR:-$HERE/../../target/linux-peer}"
OUT="$(cd "$OUT" && pwd -P)"
cd "$OUT"
KV=$(ls kpkg/lib/modules | head -n1)
if [ -f initrd-sctp.gz ] && [ initrd-sctp.gz -nt "$HERE/guest-init-sctp.sh" ] && [ initrd-sctp.gz -nt "$HERE/sctp-peer.c" ] && [ initrd-sctp.gz -nt "$0" ] && [ initrd-sctp.gz -nt "$HERE/initramfs.sh" ]; then
    echo "linux SCTP peer ready: $OUT (kernel $KV)"
    exit 0
fi
initramfs "$OUT/root-sctp" initrd-sctp.gz "$HERE/guest-init-sctp.sh" "$HERE/sctp-peer.c" "virtio_pci virtio_net crc32c_generic sctp"
echo "linux SCTP peer ready: $OUT (kernel $KV)"
