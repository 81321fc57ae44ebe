"""Interop with the real Linux kernel's fou: a stock Debian kernel booted under qemu
(software emulation; this host's kernel has no fou) is vecgate's tunnel peer.

  host H (ns) ── veth ── vecgate (ns, also holds the TAP) ── tq0 ── qemu guest (Linux)
  198.18.200.1/.3/.5/.6          198.18.1.1        198.18.1.2
  2001:db8:200::1                2001:db8:1::1     2001:db8:1::2

The guest's tunnels (tests/linux_peer/guest-init.sh): IPIP in GUE and IPv6 (sit) in GUE
on port 5555, GRE in UDP (fou ipproto 47) on port 5556; over IPv6 outer headers (fou6),
IPv4 in GUE (ip6tnl) on port 5557 and GRE (ip6gre) in UDP on 5558; and GRE in UDP on
5559 with a key, checksums and sequence numbers, which Linux requires of what it
receives there (`csum seq`); and IPIP in GUE on 5560 from the guest's second address
198.18.1.3 with remote checksum offload (`encap-remcsum`). vecgate has the
matching udp_tunnels. The guest pings H and exchanges a UDP datagram with it through each tunnel;
H pings the guest's inner addresses. tests/linux_peer/prepare.sh installs qemu and
downloads the Debian kernel package (needs root and apt)."""
import pytest

import linux_guest
from netns import Vecgate, result, wait_for


@pytest.fixture(scope="module")
def linux_peer():
    return linux_guest.prepare("prepare.sh")


CONFIG = linux_guest.GATEWAY_LINKS + """
[[udp_tunnel]]
local = "198.18.1.1"
remote = "198.18.1.2"
encap = "gue"
port = 5555
routes = ["198.18.210.2/32", "2001:db8:210::2/128"]

[[udp_tunnel]]
local = "198.18.1.1"
remote = "198.18.1.2"
encap = "gre"
port = 5556
routes = ["198.18.211.2/32"]

[[udp_tunnel]]
local = "2001:db8:1::1"
remote = "2001:db8:1::2"
encap = "gue"
port = 5557
routes = ["198.18.212.2/32"]

[[udp_tunnel]]
local = "2001:db8:1::1"
remote = "2001:db8:1::2"
encap = "gre"
port = 5558
routes = ["198.18.213.2/32"]

[[udp_tunnel]]
local = "198.18.1.1"
remote = "198.18.1.2"
encap = "gre"
port = 5559
key = 9
gre_checksum = true
gre_sequence = true
routes = ["198.18.214.2/32"]

[[udp_tunnel]]
local = "198.18.1.1"
remote = "198.18.1.3"
encap = "gue"
port = 5560
routes = ["198.18.215.2/32"]
"""


def test_gue_and_gre_in_udp_with_the_linux_kernel(lab, vecgate, tmp_path, linux_peer):
    g, h = linux_guest.gateway_and_host(
        lab, ("198.18.200.1/24", "198.18.200.3/24", "198.18.200.5/24", "198.18.200.6/24", "198.18.200.7/24", "198.18.200.8/24"))
    gw = Vecgate(lab, vecgate, g, CONFIG, tmp_path)
    # The guest boots under emulation for a minute or so before it sends.
    echo = lab.peer(h, "udp-echo", 7000, 4, "--timeout", 200)
    log = tmp_path / "guest.log"
    qemu = linux_guest.boot(lab, g, linux_peer, "initrd.gz", log, linger=30)
    try:
        assert wait_for(log, "GUEST: checks done", qemu, 180), log.read_text(errors="replace")[-3000:]
        text = log.read_text(errors="replace")
        for check in ("gue-ping", "gue6-ping", "gre-ping", "gue-udp", "gre-udp", "gue-o6-ping", "gre-o6-ping", "gue-o6-udp",
                      "gre-opt-ping", "gue-rco-ping", "gue-rco-udp"):
            tunnel_counters = {k: v for k, v in gw.errors().items() if v and k[0].startswith("gue")}
            assert f"GUEST: {check} ok" in text, f"{check}\n{text[-3000:]}\n{tunnel_counters}"
        assert "udp-probe: reply guest-gue" in text and "udp-probe: reply guest-gre" in text
        assert "udp-probe: reply guest-gue-o6" in text and "udp-probe: reply guest-gue-rco" in text
        assert result(echo)["echoed"] == 4
        # H initiates through each tunnel (vecgate encapsulates first).
        for dst in ("198.18.210.2", "198.18.211.2", "2001:db8:210::2", "198.18.212.2", "198.18.213.2", "198.18.214.2"):
            r = lab.run(h, "ping", "-c", "3", "-W", "3", dst, check=False, timeout=30)
            assert r.returncode == 0, (dst, r.stdout, gw.errors())
        e = gw.errors()
        # The guest's UDP datagram through `guer` left its checksum to us.
        assert e.get(("gue4-input", "gue-remote-checksum-completed"), 0) >= 1, e
        assert e.get(("gue4-input", "decapsulated"), 0) >= 6 + 3 + 3 + 3, e
        assert e.get(("gue4-encap", "encapsulated"), 0) >= 6 + 3 + 3 + 3, e
        # Over IPv6: at least one packet of each of the guest's three checks (its first
        # ones can go while it resolves our address), and H's six pings and replies.
        assert e.get(("gue6-input", "decapsulated"), 0) >= 3 + 6, e
        assert e.get(("gue6-encap", "encapsulated"), 0) >= 3 + 6, e
        # Nothing refused. (A partial inner checksum from H's kernel is completed before
        # the outer IPv6 checksum covers it: counted, as information.)
        fine = ("decapsulated", "encapsulated", "inner-checksum-completed", "gue-remote-checksum-completed")
        assert not [k for k, v in e.items() if v and k[0].startswith("gue") and k[1] not in fine], e
    finally:
        qemu.kill()
        qemu.wait(10)
    assert gw.stop()[0] == 0
