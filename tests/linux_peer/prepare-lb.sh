#!/usr/bin/env bash
# The load balancer's encapsulation interop test's guest (tests/test_lb_encap_linux.py):
# prepare.sh's Debian kernel, and an initramfs of its own with the decapsulation modules
# (ipip, ip_gre, fou), busybox, Debian's `ip`, udp-echo and guest-init-lb.sh. Output:
# target/linux-peer/initrd-lb.gz.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
. "$HERE/initramfs.sh"
"$HERE/prepare.sh" >/dev/null
OUT="${LINUX_PEER_DIR:-$HERE/../../target/linux-peer}"
OUT="$(cd "$OUT" && pwd -P)"
cd "$OUT"
KV=$(ls kpkg/lib/modules | head -n1)
if [ -f initrd-lb.gz ] && [ initrd-lb.gz -nt "$HERE/guest-init-lb.sh" ] && [ initrd-lb.gz -nt "$HERE/udp-echo.c" ] && [ initrd-lb.gz -nt "$0" ] && [ initrd-lb.gz -nt "$HERE/initramfs.sh" ]; then
    echo "linux LB peer ready: $OUT (kernel $KV)"
    exit 0
fi
initramfs "$OUT/root-lb" initrd-lb.gz "$HERE/guest-init-lb.sh" "$HERE/udp-echo.c" "virtio_pci virtio_net ipip ip_gre fou"
echo "linux LB peer ready: $OUT (kernel $KV)"
