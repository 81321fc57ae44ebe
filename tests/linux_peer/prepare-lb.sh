#!/usr/bin/env bash
# The load balancer's encapsulation interop test's guest (tests/test_lb_encap_linux.py):
# prepare.sh's Debian kernel, and an initramfs of its own with the decapsulation modules
# (ipip, ip_gre, fou), busybox, Debian's `ip`, udp-echo and guest-init-lb.sh. Output:
# target/linux-peer/initrd-lb.gz.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
"$HERE/prepare.sh" >/dev/null
OUT="${LINUX_PEER_DIR:-$HERE/../../target/linux-peer}"
OUT="$(cd "$OUT" && pwd -P)"
cd "$OUT"
KV=$(ls kpkg/lib/modules | head -n1)
if [ -f initrd-lb.gz ] && [ initrd-lb.gz -nt "$HERE/guest-init-lb.sh" ] && [ initrd-lb.gz -nt "$HERE/udp-echo.c" ] && [ initrd-lb.gz -nt "$0" ]; then
    echo "linux LB peer ready: $OUT (kernel $KV)"
    exit 0
fi
R="$OUT/root-lb"
rm -rf "$R"
mkdir -p "$R"/{bin,sbin,proc,sys,dev,tmp,run,etc,lib/modules/"$KV",lib64,lib/x86_64-linux-gnu}
for m in virtio_pci virtio_net ipip ip_gre fou; do
    modprobe -d kpkg -S "$KV" --show-depends "$m" 2>/dev/null | awk '$1=="insmod"{print $2}' || true
done | sort -u | while read -r f; do
    rel=${f#"$OUT/kpkg/"}
    mkdir -p "$R/$(dirname "$rel")"
    cp "$f" "$R/$rel"
done
cp kpkg/lib/modules/"$KV"/modules.{order,builtin,builtin.modinfo} "$R/lib/modules/$KV/" 2>/dev/null || true
depmod -b "$R" "$KV"
cp /bin/busybox "$R/bin/busybox"
for a in $(/bin/busybox --list); do [ -e "$R/bin/$a" ] || ln -s busybox "$R/bin/$a"; done
rm -f "$R/bin/ip"
cp "$(command -v ip)" "$R/sbin/ip"
for l in $(ldd "$(command -v ip)" | awk '/=>/{print $3} /ld-linux/{print $1}'); do cp -L "$l" "$R$l"; done
ln -sf ../bin/busybox "$R/sbin/modprobe"
cc -O2 -static -o "$R/sbin/udp-echo" "$HERE/udp-echo.c"
cp "$HERE/guest-init-lb.sh" "$R/init"
chmod +x "$R/init"
(cd "$R" && find . | cpio -o -H newc --quiet | gzip -1) > initrd-lb.gz
echo "linux LB peer ready: $OUT (kernel $KV)"
