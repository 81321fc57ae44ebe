"""ESP interop with the Linux kernel's IPsec (XFRM): a stock Debian kernel under qemu
(this host's kernel has no ESP) with static tunnel-mode SAs, against vecgate's
route-based ESP tunnels, both directions, three algorithms:

  host H (ns) ── veth ── vecgate (ns, also holds the TAP) ── tq0 ── qemu guest (Linux XFRM)
  198.18.200.1, .3               198.18.1.1                 198.18.1.2
  2001:db8:200::1                2001:db8:1::1              2001:db8:1::2

  SA pair 1: AES-GCM-128 over IPv4, inner 198.18.220.2 <-> 198.18.200.1
  SA pair 2: ChaCha20-Poly1305 over IPv6, inner 2001:db8:221::2 <-> 2001:db8:200::1
  SA pair 3: AES-CBC + HMAC-SHA-256 over IPv4, inner 198.18.222.2 <-> 198.18.200.3

The guest (tests/linux_peer/guest-init-esp.sh) pings H, exchanges a UDP datagram and sends
2 MiB over TCP through its SAs; H pings the guest's inner addresses (vecgate encrypts
first). Both sides count: vecgate's decrypt/encrypt counters, the guest's replies.
ESP in UDP is not checked here (the kernel takes it only on a socket an IKE daemon set
up); tests/linux_peer/prepare-esp.sh builds the guest (needs root and apt)."""
import hashlib

import pytest

import linux_guest
from netns import Vecgate, result, wait_for

# The guest's keys (guest-init-esp.sh): vecgate -> guest first, then guest -> vecgate.
GCM = ("000102030405060708090a0b0c0d0e0f10111213", "101112131415161718191a1b1c1d1e1f20212223")
CHACHA = ("202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f40414243",
          "303132333435363738393a3b3c3d3e3f404142434445464748494a4b4c4d4e4f50515253")
CBC = ("404142434445464748494a4b4c4d4e4f", "505152535455565758595a5b5c5d5e5f")
HMAC = ("606162636465666768696a6b6c6d6e6f707172737475767778797a7b7c7d7e7f",
        "707172737475767778797a7b7c7d7e7f808182838485868788898a8b8c8d8e8f")


@pytest.fixture(scope="module")
def linux_esp_peer():
    return linux_guest.prepare("prepare-esp.sh")


def sa_pair(index, spi, alg, local, remote, route, enc, integ=("", "")):
    return f"""
[[ipsec_sa]]
index = {index}
spi = {spi}
direction = "outbound"
algorithm = "{alg}"
enc_key = "{enc[0]}"
integ_key = "{integ[0]}"
local = "{local}"
remote = "{remote}"
routes = ["{route}"]

[[ipsec_sa]]
index = {index + 1}
spi = {spi + 1}
direction = "inbound"
algorithm = "{alg}"
enc_key = "{enc[1]}"
integ_key = "{integ[1]}"
local = "{local}"
remote = "{remote}"
"""


CONFIG = linux_guest.GATEWAY_LINKS \
    + sa_pair(0, 0x100, "aes-gcm-128", "198.18.1.1", "198.18.1.2", "198.18.220.2/32", GCM) \
    + sa_pair(2, 0x200, "chacha20-poly1305", "2001:db8:1::1", "2001:db8:1::2", "2001:db8:221::2/128", CHACHA) \
    + sa_pair(4, 0x300, "aes-cbc-sha256", "198.18.1.1", "198.18.1.2", "198.18.222.2/32", CBC, HMAC)


def test_esp_with_the_linux_kernel_both_ways(lab, vecgate, tmp_path, linux_esp_peer):
    g, h = linux_guest.gateway_and_host(lab, ("198.18.200.1/24", "198.18.200.3/24"))
    gw = Vecgate(lab, vecgate, g, CONFIG, tmp_path)
    echo = lab.peer(h, "udp-echo", 7000, 2, "--timeout", 200)
    log = tmp_path / "guest.log"
    qemu = linux_guest.boot(lab, g, linux_esp_peer, "initrd-esp.gz", log, linger=30)
    try:
        # The guest boots under emulation for a minute or so; the TCP receiver waits 20 s
        # for its connection, so it starts when the guest is up.
        assert wait_for(log, "GUEST: ready", qemu, 180), log.read_text(errors="replace")[-3000:]
        tcp = lab.peer(h, "tcp-recv", 7100)
        assert wait_for(log, "GUEST: checks done", qemu, 180), log.read_text(errors="replace")[-3000:]
        text = log.read_text(errors="replace")
        esp = lambda: {k: v for k, v in gw.errors().items() if v and k[0].startswith("esp")}
        assert "FAIL" not in text.split("GUEST: ready")[0], text[-3000:]  # every XFRM state and policy taken
        for check in ("esp-gcm-ping", "esp-gcm-udp", "esp-chacha6-ping", "esp-cbc-ping", "esp-cbc-udp", "esp-gcm-tcp"):
            assert f"GUEST: {check} ok" in text, f"{check}\n{text[-3000:]}\n{esp()}"
        assert "udp-probe: reply guest-esp-gcm" in text and "udp-probe: reply guest-esp-cbc" in text
        assert result(echo)["echoed"] == 2
        got = result(tcp, timeout=60)
        zeros = bytes(2 << 20)
        assert (got["bytes"], got["sha256"]) == (len(zeros), hashlib.sha256(zeros).hexdigest()), got
        # H initiates through each SA: vecgate encrypts, the kernel decrypts and answers.
        for dst in ("198.18.220.2", "2001:db8:221::2", "198.18.222.2"):
            r = lab.run(h, "ping", "-c", "3", "-W", "3", dst, check=False, timeout=30)
            assert r.returncode == 0, (dst, r.stdout, esp())
        e = gw.errors()
        # In: the guest's pings (3 per SA), UDP (1 per IPv4 SA), H's pings' replies (3
        # per SA), the TCP segments. Out: the replies to the guest's pings (2 per SA:
        # the first request is dropped while vecgate resolves H's address, as for any
        # first packet to a new neighbour), to its UDP, H's pings (3 per SA), TCP acks.
        assert e.get(("esp4-decrypt", "decrypted"), 0) >= 3 + 1 + 3 + 3 + 1 + 3 + 32, e
        assert e.get(("esp6-decrypt", "decrypted"), 0) >= 3 + 3, e
        assert e.get(("esp4-encrypt", "encrypted"), 0) >= 2 + 1 + 3 + 2 + 1 + 3, e
        assert e.get(("esp6-encrypt", "encrypted"), 0) >= 2 + 3, e
        fine = ("decrypted", "encrypted", "inner-checksum-completed")
        assert not [k for k, v in e.items() if v and k[0].startswith("esp") and k[1] not in fine], e
    finally:
        qemu.kill()
        qemu.wait(10)
    assert gw.stop()[0] == 0
