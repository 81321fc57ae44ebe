#!/usr/bin/env bash
# The ESP interop test's guest (tests/test_ipsec_linux.py): prepare.sh's Debian kernel,
# and an initramfs of its own with the kernel's IPsec (esp4/esp6, xfrm_user) and the
# crypto modules the test's SAs use (GCM, ChaCha20-Poly1305, CBC + HMAC-SHA-256), busybox,
# Debian's `ip`, udp-probe and guest-init-esp.sh. Output: target/linux-peer/initrd-esp.gz.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
"$HERE/prepare.sh" >/dev/null
OUT="${LINUX_PEER_DIR:-$HERE/../../target/linux-peer}"
OUT="$(cd "$OUT" && pwd -P)"
cd "$OUT"
KV=$(ls kpkg/lib/modules | head -n1)
if [ -f initrd-esp.gz ] && [ initrd-esp.gz -nt "$HERE/guest-init-esp.sh" ] && [ initrd-esp.gz -nt "$0" ]; then
    echo "linux ESP peer ready: $OUT (kernel $KV)"
    exit 0
fi
R="$OUT/root-esp"
rm -rf "$R"
mkdir -p "$R"/{bin,sbin,proc,sys,dev,tmp,run,etc,lib/modules/"$KV",lib64,lib/x86_64-linux-gnu}
MODS="virtio_pci virtio_net esp4 esp6 xfrm_user gcm ghash_generic ctr authenc seqiv echainiv chacha20poly1305 chacha_generic
      poly1305_generic cbc hmac sha256_generic aes_generic drbg jitterentropy_rng crypto_null"
for m in $MODS; do
    # Built-in ones print no insmod line.
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
cc -O2 -static -o "$R/sbin/udp-probe" "$HERE/udp-probe.c"
cp "$HERE/guest-init-esp.sh" "$R/init"
chmod +x "$R/init"
(cd "$R" && find . | cpio -o -H newc --quiet | gzip -1) > initrd-esp.gz
echo "linux ESP peer ready: $OUT (kernel $KV)"
