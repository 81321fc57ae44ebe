#!/usr/bin/env bash
# Build what the Linux-peer interop tests boot: a stock Debian kernel (which, unlike this
# host's, has fou/GUE, GRE and IPIP) and a small initramfs with those modules, busybox,
# Debian's `ip`, and guest-init.sh. Output in target/linux-peer/ (kept between runs):
#   vmlinuz, initrd.gz
# Needs root for apt (qemu-system-x86, busybox-static, cpio, kmod) on a fresh machine.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
. "$HERE/initramfs.sh"
OUT="${LINUX_PEER_DIR:-$HERE/../../target/linux-peer}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd -P)"
cd "$OUT"
# apt's temporary files under /tmp can vanish mid-install on these machines.
export TMPDIR=/var/tmp DEBIAN_FRONTEND=noninteractive
need=()
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
[ -x /bin/busybox ] && /bin/busybox --list | grep -qx nc || need+=(busybox-static)
command -v cpio >/dev/null || need+=(cpio)
command -v depmod >/dev/null || need+=(kmod)
command -v cc >/dev/null || need+=(gcc libc6-dev)
if [ ${#need[@]} -gt 0 ]; then
    apt-get update -qq
    apt-get install -y -qq "${need[@]}" >/dev/null
fi
if [ ! -f vmlinuz ] || [ ! -d kpkg ]; then
    pkg=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
    [ -n "$pkg" ] || { echo "no linux-image package found in apt" >&2; exit 1; }
    rm -rf kpkg ./*.deb
    apt-get download "$pkg" >/dev/null
    dpkg-deb -x ./"${pkg}"_*.deb kpkg
    cp kpkg/boot/vmlinuz-* vmlinuz
fi
KV=$(ls kpkg/lib/modules | head -n1)
if [ -f initrd.gz ] && [ initrd.gz -nt "$HERE/guest-init.sh" ] && [ initrd.gz -nt "$HERE/udp-probe.c" ] && [ initrd.gz -nt "$HERE/initramfs.sh" ]; then
    echo "linux peer ready: $OUT (kernel $KV)"
    exit 0
fi
# modules.dep of the unpacked kernel, for modprobe -d kpkg.
depmod -b kpkg "$KV"
initramfs "$OUT/root" initrd.gz "$HERE/guest-init.sh" "$HERE/udp-probe.c" \
    "virtio_pci virtio_net fou fou6 ipip sit ip_gre ip6_tunnel ip6_gre"
echo "linux peer ready: $OUT (kernel $KV)"
