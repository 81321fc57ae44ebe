"""The load balancer's encapsulation mode (direct server return) with a real Linux
backend: a stock Debian kernel booted under qemu (this host's kernel has no ipip, GRE or
fou) decapsulates what vecgate sends it and answers the client directly.

  client H (ns) ── h0/h1 ── vecgate (ns) ── bg/sg ─┐
  198.18.200.1              .254 | 198.18.1.1      ├─ br0 (ns s) ── tq0 ── qemu guest (Linux)
                                                   │                    198.18.1.2, VIPs on lo
  H's second leg h2 198.18.1.9 ────────── sh ──────┘

Services 198.18.128.20 (ipip), .21 (gre) and .22 (gue, port 5555), TCP 80 and UDP 53,
the guest their only backend (tests/linux_peer/guest-init-lb.sh: tunl0, gre0, fou). The
client's packets go through vecgate; the guest's answers, from the service address, come
to H's second leg over the shared segment, never through vecgate. H's first leg has an
MTU of 1400 so its packets fit the segment with their outer headers.
tests/linux_peer/prepare-lb.sh builds the guest (needs root and apt)."""
import json
import sys
from pathlib import Path

import pytest

import linux_guest
from netns import Vecgate, wait_for

PEER = Path(__file__).resolve().parent / "lb_peer.py"
VIPS = {"ipip": "198.18.128.20", "gre": "198.18.128.21", "gue": "198.18.128.22"}
GUEST = "198.18.1.2"


@pytest.fixture(scope="module")
def linux_peer():
    return linux_guest.prepare("prepare-lb.sh")


def config():
    services = ""
    for mode, vip in VIPS.items():
        port = "gue_port = 5555\n" if mode == "gue" else ""
        for proto, p in (("tcp", 80), ("udp", 53)):
            services += f"""
[[lb_service]]
name = "default/{mode}-{proto}"
type = "load_balancer"
vip = "{vip}"
port = {p}
protocol = "{proto}"
forwarding = "{mode}"
{port}backends = [{{ addr = "{GUEST}", port = {p} }}]
"""
    return f"""
[[interface]]
name = "peer"
type = "af_packet"
host_if = "bg"
mac = "02:00:00:00:ab:01"
addresses = ["198.18.1.1/24"]

[[interface]]
name = "h"
type = "af_packet"
host_if = "h1"
mac = "02:00:00:00:ab:02"
addresses = ["198.18.200.254/24"]

[lb]
snat4 = "198.18.1.1"
{services}"""


def peer(lab, ns, *args, timeout=90):
    r = lab.run(ns, sys.executable, str(PEER), *map(str, args), timeout=timeout)
    return json.loads(r.stdout.strip().splitlines()[-1])


def rx_bytes(lab, ns, dev):
    return int(lab.run(ns, "cat", f"/sys/class/net/{dev}/statistics/rx_bytes").stdout)


def test_direct_server_return_with_a_linux_backend(lab, vecgate, tmp_path, linux_peer):
    s, g, h = lab.ns("s"), lab.dataplane_ns("g"), lab.ns("h")
    lab.run(s, "ip", "link", "add", "br0", "type", "bridge")
    lab.run(s, "ip", "link", "set", "br0", "up")
    lab.run(s, "ip", "tuntap", "add", "dev", "tq0", "mode", "tap")
    lab.veth(s, "sg", g, "bg")
    lab.veth(s, "sh", h, "h2")
    for dev in ("tq0", "sg", "sh"):
        lab.run(s, "ip", "link", "set", dev, "master", "br0")
        lab.run(s, "ip", "link", "set", dev, "up")
    lab.veth(h, "h0", g, "h1", mtu=1400)
    lab.run(h, "ip", "addr", "add", "198.18.200.1/24", "dev", "h0")
    lab.run(h, "ip", "addr", "add", "198.18.1.9/24", "dev", "h2")
    lab.run(h, "ip", "route", "add", "198.18.128.0/24", "via", "198.18.200.254")
    # Answers from the service addresses arrive on h2, not the leg the route names.
    for conf in ("all", "default", "h0", "h2"):
        lab.run(h, "sysctl", "-qw", f"net.ipv4.conf.{conf}.rp_filter=0")
    gw = Vecgate(lab, vecgate, g, config(), tmp_path)
    log = tmp_path / "guest.log"
    qemu = linux_guest.boot(lab, s, linux_peer, "initrd-lb.gz", log, linger=120)
    try:
        # The guest boots under emulation for a minute or so.
        assert wait_for(log, "GUEST: ready", qemu, 240), log.read_text(errors="replace")[-3000:]
        text = log.read_text(errors="replace")
        assert "FAIL" not in text, text[-3000:]
        for mode, vip in VIPS.items():
            before = rx_bytes(lab, h, "h2")
            # 1 MiB each way over TCP, the answer from the service address (a connected
            # socket), every byte intact.
            e = peer(lab, h, "echo", vip, 80, 1024 * 1024)
            assert e["backend"] == "guest" and e["bytes"] == 1024 * 1024 and e["sent"] == e["got"], (mode, e, gw.errors())
            # The echoed MiB came over the direct leg.
            assert rx_bytes(lab, h, "h2") - before > 1024 * 1024, mode
            u = peer(lab, h, "uecho", vip, 53, 20)
            assert u == {"sent": 20, "answered": 20}, (mode, u, gw.errors())
        e = gw.errors()
        # Every client packet was encapsulated by lb4-nat.
        assert e.get(("lb4-nat", "encapsulated"), 0) >= 3 * (1024 * 1024 // 1400 + 20), e
        assert e.get(("lb4-nat", "new-session"), 0) == 3 * (1 + 20), e
        # vecgate's leg toward H carried none of the 3 MiB echoed (a few ARP and ICMP
        # frames at most).
        assert gw.interfaces()["h"]["tx_bytes"] < 64 * 1024, gw.interfaces()["h"]
        # Nothing dropped. (The client's kernel hands large TCP frames to af_packet: they
        # are segmented first and come back by the route, their sessions hit.)
        fine = ("new-session", "encapsulated", "gso-to-segment")
        assert not [k for k, v in e.items() if v and k[0] == "lb4-nat" and k[1] not in fine], e
        rows = gw.ctl("show", "lb", "services")["data"]
        assert sorted(r["forwarding"] for r in rows) == ["gre", "gre", "gue", "gue", "ipip", "ipip"]
    finally:
        qemu.kill()
        qemu.wait(10)
    assert gw.stop()[0] == 0
