#!/usr/bin/env bash
# Build what the Linux-peer interop tests boot: a stock Debian kernel (which, unlike this
# host's, has fou/GUE, GRE and IPIP) and a small initramfs with those modules, busybox,
# Debian's `ip`, and guest-init.sh. Output in target/linux-peer/ (kept between runs):
#   vmlinuz, initrd.gz
# Needs root for apt (qemu-system-x86, busybox-static, cpio, kmod) on a fresh machine.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
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
if [ -f initrd.gz ] && [ initrd.gz -nt "$HERE/guest-init.sh" ] && [ initrd.gz -nt "$HERE/udp-probe.c" ]; then
    echo "linux peer ready: $OUT (kernel $KV)"
    exit 0
fi
R="$OUT/root"
rm -rf "$R"
mkdir -p "$R"/{bin,sbin,proc,sys,dev,tmp,run,etc,lib/modules/"$KV",lib64,lib/x86_64-linux-gnu}
depmod -b kpkg "$KV"
MODS="virtio_pci virtio_net fou fou6 ipip sit ip_gre ip6_tunnel ip6_gre"
for m in $MODS; do
    modprobe -d kpkg -S "$KV" --show-depends "$m" | awk '$1=="insmod"{print $2}'
done | sort -u | while read -r f; do
    rel=${f#"$OUT/kpkg/"}
    mkdir -p "$R/$(dirname "$rel")"
    cp "$f" "$R/$rel"
done
cp kpkg/lib/modules/"$KV"/modules.{order,builtin,builtin.modinfo} "$R/lib/modules/$KV/" 2>/dev/null || true
depmod -b "$R" "$KV"
cp /bin/busybox "$R/bin/busybox"
for a in $(/bin/busybox --list); do [ -e "$R/bin/$a" ] || ln -s busybox "$R/bin/$a"; done
# busybox's own `ip` lacks fou and encap options: Debian's iproute2 with its libraries.
rm -f "$R/bin/ip"
cp "$(command -v ip)" "$R/sbin/ip"
for l in $(ldd "$(command -v ip)" | awk '/=>/{print $3} /ld-linux/{print $1}'); do cp -L "$l" "$R$l"; done
ln -sf ../bin/busybox "$R/sbin/modprobe"
cc -O2 -static -o "$R/sbin/udp-probe" "$HERE/udp-probe.c"
cp "$HERE/guest-init.sh" "$R/init"
chmod +x "$R/init"
(cd "$R" && find . | cpio -o -H newc --quiet | gzip -1) > initrd.gz
echo "linux peer ready: $OUT (kernel $KV)"
