#!/usr/bin/env bash
# The ESP interop test's guest (tests/test_ipsec_linux.py): prepare.sh's Debian kernel,
# and an initramfs of its own with the kernel's IPsec (esp4/esp6, xfrm_user) and the
# crypto modules the test's SAs use (GCM, ChaCha20-Poly1305, CBC + HMAC-SHA-256), busybox,
# Debian's `ip`, udp-probe and guest-init-esp.sh. Output: target/linux-peer/initrd-esp.gz.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
. "$HERE/initramfs.sh"
guest_initrd esp "$HERE/guest-init-esp.sh" "$HERE/udp-probe.c" \
    "virtio_pci virtio_net esp4 esp6 xfrm_user gcm ghash_generic ctr authenc seqiv echainiv chacha20poly1305 chacha_generic
     poly1305_generic cbc hmac sha256_generic aes_generic drbg jitterentropy_rng crypto_null" ESP
