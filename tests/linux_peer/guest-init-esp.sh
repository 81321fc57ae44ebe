#!/bin/busybox sh
# Init of the Linux peer guest in the ESP interop test (tests/test_ipsec_linux.py): the
# kernel's own IPsec (XFRM) with static keys, tunnel mode, against vecgate. The guest is
# 198.18.1.2 / 2001:db8:1::2 on eth0, vecgate 198.18.1.1 / 2001:db8:1::1; host H sits
# behind vecgate. SA pairs (vecgate -> guest SPI 0xN00, guest -> vecgate 0xN01):
#   1  AES-GCM-128 (rfc4106), IPv4 outer   inner 198.18.220.2 <-> 198.18.200.1 (H)
#   2  ChaCha20-Poly1305 (rfc7539esp), IPv6 outer, IPv6 inner
#                                          inner 2001:db8:221::2 <-> 2001:db8:200::1 (H)
#   3  AES-CBC + HMAC-SHA-256-128, IPv4 outer  inner 198.18.222.2 <-> 198.18.200.3 (H)
# Keys: the bytes test_ipsec_linux.py gives vecgate (KEYS below must match it).
# Then the guest's checks through each SA (ping, a UDP exchange, TCP), lines
# "GUEST: <check> ok|FAIL", "GUEST: checks done", `linger=N` seconds up for the host's
# checks, the XFRM counters, power off.
export PATH=/sbin:/bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
for m in virtio_pci virtio_net esp4 esp6 xfrm_user gcm ghash_generic ctr authenc seqiv echainiv \
         chacha20poly1305 chacha_generic poly1305_generic cbc hmac sha256_generic aes_generic drbg jitterentropy_rng crypto_null; do
    modprobe $m 2>/dev/null || echo "GUEST: modprobe $m (not a module here)"
done
IP=/sbin/ip
$IP link set lo up
$IP link set eth0 up
$IP addr add 198.18.1.2/24 dev eth0
$IP addr add 2001:db8:1::2/64 dev eth0 nodad
GCM=0x000102030405060708090a0b0c0d0e0f10111213
GCM_BACK=0x101112131415161718191a1b1c1d1e1f20212223
CHACHA=0x202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f40414243
CHACHA_BACK=0x303132333435363738393a3b3c3d3e3f404142434445464748494a4b4c4d4e4f50515253
CBC=0x404142434445464748494a4b4c4d4e4f
CBC_BACK=0x505152535455565758595a5b5c5d5e5f
HMAC=0x606162636465666768696a6b6c6d6e6f707172737475767778797a7b7c7d7e7f
HMAC_BACK=0x707172737475767778797a7b7c7d7e7f808182838485868788898a8b8c8d8e8f
state() { $IP xfrm state add "$@" || echo "GUEST: xfrm state $* FAIL"; }
policy() { $IP xfrm policy add "$@" || echo "GUEST: xfrm policy $* FAIL"; }
# 1: AES-GCM-128 over IPv4.
state src 198.18.1.1 dst 198.18.1.2 proto esp spi 0x100 reqid 1 mode tunnel aead 'rfc4106(gcm(aes))' $GCM 128
state src 198.18.1.2 dst 198.18.1.1 proto esp spi 0x101 reqid 1 mode tunnel aead 'rfc4106(gcm(aes))' $GCM_BACK 128
$IP addr add 198.18.220.2/32 dev lo
policy src 198.18.200.1/32 dst 198.18.220.2/32 dir in tmpl src 198.18.1.1 dst 198.18.1.2 proto esp reqid 1 mode tunnel
policy src 198.18.220.2/32 dst 198.18.200.1/32 dir out tmpl src 198.18.1.2 dst 198.18.1.1 proto esp reqid 1 mode tunnel
$IP route add 198.18.200.1/32 via 198.18.1.1 dev eth0 src 198.18.220.2
# 2: ChaCha20-Poly1305 over IPv6, IPv6 inside.
state src 2001:db8:1::1 dst 2001:db8:1::2 proto esp spi 0x200 reqid 2 mode tunnel aead 'rfc7539esp(chacha20,poly1305)' $CHACHA 128
state src 2001:db8:1::2 dst 2001:db8:1::1 proto esp spi 0x201 reqid 2 mode tunnel aead 'rfc7539esp(chacha20,poly1305)' $CHACHA_BACK 128
$IP addr add 2001:db8:221::2/128 dev lo
policy src 2001:db8:200::1/128 dst 2001:db8:221::2/128 dir in tmpl src 2001:db8:1::1 dst 2001:db8:1::2 proto esp reqid 2 mode tunnel
policy src 2001:db8:221::2/128 dst 2001:db8:200::1/128 dir out tmpl src 2001:db8:1::2 dst 2001:db8:1::1 proto esp reqid 2 mode tunnel
$IP -6 route add 2001:db8:200::1/128 via 2001:db8:1::1 dev eth0 src 2001:db8:221::2
# 3: AES-CBC + HMAC-SHA-256 over IPv4.
state src 198.18.1.1 dst 198.18.1.2 proto esp spi 0x300 reqid 3 mode tunnel enc 'cbc(aes)' $CBC auth-trunc 'hmac(sha256)' $HMAC 128
state src 198.18.1.2 dst 198.18.1.1 proto esp spi 0x301 reqid 3 mode tunnel enc 'cbc(aes)' $CBC_BACK auth-trunc 'hmac(sha256)' $HMAC_BACK 128
$IP addr add 198.18.222.2/32 dev lo
# H's side as a /24: H's UDP echo answers from its first address, whatever the probe's
# destination was, and the kernel holds what it decrypts to the policy's selectors.
policy src 198.18.200.0/24 dst 198.18.222.2/32 dir in tmpl src 198.18.1.1 dst 198.18.1.2 proto esp reqid 3 mode tunnel
policy src 198.18.222.2/32 dst 198.18.200.0/24 dir out tmpl src 198.18.1.2 dst 198.18.1.1 proto esp reqid 3 mode tunnel
$IP route add 198.18.200.3/32 via 198.18.1.1 dev eth0 src 198.18.222.2
echo "GUEST: ready"
check() {
    name=$1; shift
    if "$@" > /tmp/out 2>&1; then echo "GUEST: $name ok"; else echo "GUEST: $name FAIL"; fi
    cat /tmp/out
}
# The first ping resolves vecgate's address; three more must come back.
ping -c 1 -W 3 198.18.1.1 > /dev/null 2>&1
ping6 -c 1 -W 3 2001:db8:1::1 > /dev/null 2>&1
check esp-gcm-ping ping -c 3 -W 3 -I 198.18.220.2 198.18.200.1
check esp-gcm-udp udp-probe 198.18.200.1 7000 guest-esp-gcm
check esp-chacha6-ping ping6 -c 3 -W 3 -I 2001:db8:221::2 2001:db8:200::1
check esp-cbc-ping ping -c 3 -W 3 -I 198.18.222.2 198.18.200.3
check esp-cbc-udp udp-probe 198.18.200.3 7000 guest-esp-cbc
# 2 MiB of zeros over TCP through the GCM SA to H's tcp-recv (which hashes what it got).
check esp-gcm-tcp sh -c 'dd if=/dev/zero bs=65536 count=32 2>/dev/null | nc -w 20 198.18.200.1 7100'
echo "GUEST: checks done"
L=$(sed -n 's/.*linger=\([0-9]*\).*/\1/p' /proc/cmdline)
sleep ${L:-10}
$IP -s xfrm state | grep -E '^src|proto esp|lifetime current|bytes' | head -40
echo "GUEST: done"
poweroff -f
