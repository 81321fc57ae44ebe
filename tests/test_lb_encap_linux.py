"""The load balancer's encapsulation mode (direct server return) with a real Linux
backend: a stock Debian kernel booted under qemu (this host's kernel has no ipip, GRE or
fou) decapsulates what vecgate sends it and answers the client directly, and path MTU
discovery works on those answers.

  client H (ns) ── h0/h1 ── vecgate (ns) ── bg/sg ─┐
  198.18.200.1, .20-.22    .254 | 198.18.1.1       ├─ br0 (ns s) ── tq0 ── qemu guest (Linux)
         │ hr                                      │                    198.18.1.2, VIPs on lo
         │ MTU 1300    router R (ns) ── rs/sr ─────┘
         └──── rh ──── 198.18.201.254 | 198.18.1.9
  198.18.201.1

Services 198.18.128.20 (ipip), .21 (gre) and .22 (gue, port 5555), TCP 80 and UDP 53,
the guest their only backend (tests/linux_peer/guest-init-lb.sh: tunl0, gre0, fou). The
client's packets go through vecgate; the guest's answers, from the service address, go
to R over the shared segment and on to H, never through vecgate. H's first leg has an
MTU of 1400 so its packets fit the segment with their outer headers.

Path MTU discovery: R's link to H has an MTU of 1300, below the guest's full-size TCP
segments (H's MSS: 1360), which Linux sends with DF. R answers them with frag-needed
(MTU 1300) to its source, the service address, which R routes to vecgate. vecgate must
carry that error inside the service's outer headers to the backend holding the
connection (`icmp-to-backend`), unchanged, so that the guest's kernel, decapsulating
it, finds its socket (service address port 80 ↔ client), lowers its path MTU to the
client and retransmits smaller segments. Translated to the backend's own address
instead (vecgate before it), the error matches no socket: the guest never learns, the
1 MiB echo stalls. Linux keeps a learned path MTU per destination (ten minutes), so
each mode's echo comes from a client address of its own (198.18.200.20, .21, .22).
tests/linux_peer/prepare-lb.sh builds the guest (needs root and apt)."""
import json
import re
import sys
from pathlib import Path

import pytest

import linux_guest
from netns import Vecgate, wait_for

PEER = Path(__file__).resolve().parent / "lb_peer.py"
VIPS = {"ipip": "198.18.128.20", "gre": "198.18.128.21", "gue": "198.18.128.22"}
GUEST = "198.18.1.2"
# Each mode's echo client: a destination whose path MTU the guest has not learned yet.
CLIENTS = {"ipip": "198.18.200.20", "gre": "198.18.200.21", "gue": "198.18.200.22"}
# R's link to H, below H's (1400) and the guest's segments (1400 with H's MSS).
NARROW_MTU = 1300
# Bounds a stalled echo (without the error reaching the guest); a good one takes seconds.
ECHO_SECONDS = 30


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


def icmp_dest_unreachs_sent(lab, ns):
    """The namespace's kernel's ICMP destination unreachables sent (/proc/net/snmp,
    per namespace; frag-needed is one)."""
    head, values = [l.split() for l in lab.run(ns, "cat", "/proc/net/snmp").stdout.splitlines() if l.startswith("Icmp:")]
    return int(dict(zip(head, values))["OutDestUnreachs"])


class Guest(linux_guest.Console):
    def path_mtu(self, addr):
        """The path MTU the guest's kernel learned toward `addr` (None: none learned)
        and its `ip route get` line."""
        new = self.command(f"route {addr}", lambda new: "GUEST: finished route" in new, seconds=30)
        rows = [l for l in new if l.startswith(f"GUEST: route {addr} ")]
        assert len(rows) == 1, (addr, new, self.tail())
        m = re.search(r"\bmtu (\d+)", rows[0])
        return (int(m[1]) if m else None), rows[0]


def test_direct_server_return_with_a_linux_backend(lab, vecgate, tmp_path, linux_peer):
    s, g, h, router = lab.ns("s"), lab.dataplane_ns("g"), lab.ns("h"), lab.ns("r")
    lab.run(s, "ip", "link", "add", "br0", "type", "bridge")
    lab.run(s, "ip", "link", "set", "br0", "up")
    lab.run(s, "ip", "tuntap", "add", "dev", "tq0", "mode", "tap")
    lab.veth(s, "sg", g, "bg")
    lab.veth(s, "sr", router, "rs")
    for dev in ("tq0", "sg", "sr"):
        lab.run(s, "ip", "link", "set", dev, "master", "br0")
        lab.run(s, "ip", "link", "set", dev, "up")
    lab.veth(h, "h0", g, "h1", mtu=1400)
    lab.veth(router, "rh", h, "hr", mtu=NARROW_MTU)
    lab.run(h, "ip", "addr", "add", "198.18.200.1/24", "dev", "h0")
    for a in CLIENTS.values():
        lab.run(h, "ip", "addr", "add", f"{a}/24", "dev", "h0")
    lab.run(h, "ip", "addr", "add", "198.18.201.1/24", "dev", "hr")
    lab.run(h, "ip", "route", "add", "198.18.128.0/24", "via", "198.18.200.254")
    # Answers from the service addresses arrive on hr, not the leg the route names.
    for conf in ("all", "default", "h0", "hr"):
        lab.run(h, "sysctl", "-qw", f"net.ipv4.conf.{conf}.rp_filter=0")
    # R: the guest's way to the clients; its errors about the guest's answers go to their
    # source, the service addresses, through vecgate.
    lab.run(router, "ip", "addr", "add", "198.18.1.9/24", "dev", "rs")
    lab.run(router, "ip", "addr", "add", "198.18.201.254/24", "dev", "rh")
    lab.run(router, "ip", "route", "add", "198.18.200.0/24", "via", "198.18.201.1")
    lab.run(router, "ip", "route", "add", "198.18.128.0/24", "via", "198.18.1.1")
    lab.run(router, "sysctl", "-qw", "net.ipv4.ip_forward=1")
    gw = Vecgate(lab, vecgate, g, config(), tmp_path)
    log = tmp_path / "guest.log"
    qemu = linux_guest.boot(lab, s, linux_peer, "initrd-lb.gz", log, linger=0, console_in=True)
    guest = Guest(qemu, log)
    try:
        # The guest boots under emulation (seconds here, a minute on a slow machine).
        assert wait_for(log, "GUEST: ready", qemu, 240), guest.tail()
        text = log.read_text(errors="replace")
        assert "FAIL" not in text, text[-3000:]
        for mode, vip in VIPS.items():
            client = CLIENTS[mode]
            # A destination the guest knows no path MTU for: R's error must teach it.
            assert guest.path_mtu(client)[0] is None, (mode, guest.path_mtu(client))
            before, errors_before, rx_before = icmp_dest_unreachs_sent(lab, router), gw.errors(), rx_bytes(lab, h, "hr")
            # 1 MiB each way over TCP, the answer from the service address (a connected
            # socket), every byte intact: the guest's full-size segments cannot pass R,
            # so only once the guest has lowered its path MTU.
            e = peer(lab, h, "echo", vip, 80, 1024 * 1024, client, ECHO_SECONDS)
            sent_by_r = icmp_dest_unreachs_sent(lab, router) - before
            errors = gw.errors()
            to_backend = errors.get(("lb4-nat", "icmp-to-backend"), 0) - errors_before.get(("lb4-nat", "icmp-to-backend"), 0)
            lb = {k[1]: v for k, v in errors.items() if k[0] == "lb4-nat" and v}
            why = f"{mode}: echo {e}, R's destination unreachables {sent_by_r}, icmp-to-backend {to_backend}, lb4-nat {lb}"
            assert e["backend"] == "guest" and e["bytes"] == 1024 * 1024 and e["sent"] == e["got"], why
            # The echoed MiB came over the direct leg, through R.
            assert rx_bytes(lab, h, "hr") - rx_before > 1024 * 1024, mode
            # R sent frag-needed to the service address, vecgate carried it to the
            # backend, and the guest's kernel took it: its path MTU to this client.
            assert sent_by_r >= 1 and to_backend >= 1, why
            assert guest.path_mtu(client)[0] == NARROW_MTU, (mode, guest.path_mtu(client))
            u = peer(lab, h, "uecho", vip, 53, 20)
            assert u == {"sent": 20, "answered": 20, "missing": []}, (mode, u, gw.errors())
        e = gw.errors()
        # Every client packet was encapsulated by lb4-nat.
        assert e.get(("lb4-nat", "encapsulated"), 0) >= 3 * (1024 * 1024 // 1400 + 20), e
        assert e.get(("lb4-nat", "new-session"), 0) == 3 * (1 + 20), e
        # vecgate's leg toward H carried none of the 3 MiB echoed (a few ARP and ICMP
        # frames at most).
        assert gw.interfaces()["h"]["tx_bytes"] < 64 * 1024, gw.interfaces()["h"]
        # Nothing dropped, no error translated. (The client's kernel hands large TCP
        # frames to af_packet: they are segmented first and come back by the route,
        # their sessions hit.)
        fine = ("new-session", "encapsulated", "gso-to-segment", "icmp-to-backend")
        assert not [k for k, v in e.items() if v and k[0] == "lb4-nat" and k[1] not in fine], e
        rows = gw.ctl("show", "lb", "services")["data"]
        assert sorted(r["forwarding"] for r in rows) == ["gre", "gre", "gue", "gue", "ipip", "ipip"]
        qemu.stdin.write(b"done\n")
        qemu.stdin.flush()
        qemu.wait(60)
    finally:
        if qemu.poll() is None:
            qemu.kill()
        qemu.wait(10)
    assert gw.stop()[0] == 0
