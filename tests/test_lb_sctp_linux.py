"""SCTP through the load balancer's NAT mode between two real SCTP stacks, IPv4 and IPv6:
a stock Debian kernel's SCTP under qemu (this host's kernel has none), the client in a
network namespace of the guest behind its second NIC, the backend in the guest's root
namespace behind its first, the two reaching each other only through vecgate.

  guest netns c: client ── eth1 ── tq1 ── vecgate (ns) ── tq0 ── eth0 :guest, the backend
  198.18.0.2 (.3, .4)              198.18.0.1 | 198.18.1.1          198.18.1.2
  2001:db8::2 (::3, ::4)           2001:db8::1 | 2001:db8:1::1       2001:db8:1::2

Services 198.18.128.10 and 2001:db8:128::10, SCTP ports 38412 and 38413, NAT (SNAT to
vecgate's backend-side address), the guest their one backend
(tests/linux_peer/guest-init-sctp.sh and sctp-peer.c; prepare-sctp.sh builds it). The
host runs the guest's clients through qemu's console, one association at a time, and
reads vecgate's counters and sessions around each:

- single: a client bound to one address. 200 KiB echoed intact both ways, one session,
  then a graceful SHUTDOWN (the server reads its end of stream, not a reset) that leaves
  the session `sctp_closed`. Linux's INIT from one bound address lists no address, so
  nothing is removed.
- multi: a client bound to two addresses (sctp_bindx before connect) lists both in its
  INIT. vecgate removes them (`sctp-addresses-removed` 1), so the server's kernel holds
  ONE peer address, the translated source (SCTP_GET_PEER_ADDRS). Had they stayed, it
  would hold three (the source and the two listed; seen with the removal disabled),
  the two listed ones reachable only around the NAT.
- asconf: ASCONF and AUTH on at both ends (net.sctp.addip_enable, auth_enable). The
  client's INIT offers ASCONF and ASCONF-ACK among its Supported Extensions, which
  vecgate takes out (`sctp-asconf-unlisted` 1). The server's kernel, not seeing them,
  offers none in its INIT ACK (Linux lists ASCONF in an INIT ACK only for a peer that
  did). The client adds a third address to the association halfway (sctp_bindx ADD on
  the connected socket succeeds locally), and because its peer did not list ASCONF it
  sends no ASCONF for it (RFC 5061 §4.2.7; Linux marks a peer ASCONF-capable from that
  list only): `sctp-asconf-dropped` stays 0, the second half echoes intact, and the
  server still holds one peer address. With the edit disabled (vecgate built with
  remove_multihoming doing nothing) the client does send ASCONF for the new address,
  which vecgate's drop of ASCONF chunks catches (`sctp-asconf-dropped` 2 in that run),
  the unlisted count is 0, and the server holds three peer addresses: each asserted
  below.

Every lbN-nat counter other than those named stays 0 (no drop).
"""
import re
import time

import pytest

import linux_guest
from netns import Vecgate, wait_for

PORT, ASCONF_PORT = 38412, 38413
BYTES = 200 * 1024
FAMILIES = {
    4: {"vip": "198.18.128.10", "backend": "198.18.1.2", "snat": "198.18.1.1", "client": ["198.18.0.2", "198.18.0.3", "198.18.0.4"]},
    6: {"vip": "2001:db8:128::10", "backend": "2001:db8:1::2", "snat": "2001:db8:1::1", "client": ["2001:db8::2", "2001:db8::3", "2001:db8::4"]},
}
CLIENT_LINE = re.compile(r"GUEST: client (\d+) ok bytes=(\d+) local-addrs=(\S*) \(\d+\) peer-addrs=(\S*) \(\d+\) add-rc=(\d+) end=(.*)$")
SERVER_LINE = re.compile(r"GUEST: server (\d+) bytes=(\d+) peers=(\d+) max=(\d+) peer-addrs=(\S*) end=(.*)$")


@pytest.fixture(scope="module")
def linux_peer():
    return linux_guest.prepare("prepare-sctp.sh")


def config():
    services = "".join(f"""
[[lb_service]]
name = "core/amf{fam}:{port}"
type = "cluster_ip"
vip = "{f['vip']}"
port = {port}
protocol = "sctp"
forwarding = "nat"
backends = [{{ addr = "{f['backend']}", port = {port} }}]
""" for fam, f in FAMILIES.items() for port in (PORT, ASCONF_PORT))
    return linux_guest.two_tap_links(0xac) + f"""
[lb]
snat4 = "{FAMILIES[4]['snat']}"
snat6 = "{FAMILIES[6]['snat']}"
# An association's session kept past its SHUTDOWN COMPLETE for the test to read it.
timeouts = {{ sctp_closed_ms = 300000 }}
{services}"""


class Guest(linux_guest.Console):
    def run(self, cmd, fam):
        """`cmd` for `fam` in the guest: (its client's result line, its server's), matched."""
        finished = f"GUEST: finished {cmd} {fam}"
        # The server prints at its association's end, as the client finishes.
        new = self.command(f"{cmd} {fam}", lambda new: finished in new and any(map(SERVER_LINE.match, new)))
        client = [m for m in map(CLIENT_LINE.match, new) if m]
        server = [m for m in map(SERVER_LINE.match, new) if m]
        assert finished in new and len(client) == 1 and len(server) == 1 and not [l for l in new if "FAIL" in l], \
            (cmd, fam, self.tail())
        return client[0], server[0]


def closed_session(gw, fam, port, seen):
    """The association's session (the one on `port` not in `seen`), once vecgate has
    seen its SHUTDOWN COMPLETE (it follows the client's end within a round trip)."""
    f = FAMILIES[fam]
    deadline = time.time() + 30
    while True:
        rows = [r for r in gw.ctl("show", "lb", "sessions", "limit", "1000")["data"]["sessions"]
                if r["protocol"] == 132 and r["vip"] == f["vip"] and r["vip_port"] == port and r["client_port"] not in seen]
        if (len(rows) == 1 and rows[0]["state"] == "sctp_closed") or time.time() > deadline:
            return rows
        time.sleep(0.2)


def test_sctp_nat_between_linux_endpoints(lab, vecgate, tmp_path, linux_peer):
    g = lab.dataplane_ns("g")
    for tap in ("tq0", "tq1"):
        lab.run(g, "ip", "tuntap", "add", "dev", tap, "mode", "tap")
        lab.run(g, "ip", "link", "set", tap, "up")
    gw = Vecgate(lab, vecgate, g, config(), tmp_path)
    log = tmp_path / "guest.log"
    qemu = linux_guest.boot(lab, g, linux_peer, "initrd-sctp.gz", log, linger=0, taps=("tq0", "tq1"), console_in=True,
                            append=f"bytes={BYTES}")
    guest = Guest(qemu, log)
    seen = set()
    try:
        # The guest boots under emulation (seconds here, a minute on a slow machine).
        assert wait_for(log, "GUEST: ready", qemu, 240), log.read_text(errors="replace")[-3000:]
        assert not [l for l in guest.lines() if "FAIL" in l], guest.lines()
        # What each association must move besides new-session and reply-translated.
        expected = {"single": {}, "multi": {"sctp-addresses-removed": 1},
                    "asconf": {"sctp-addresses-removed": 1, "sctp-asconf-unlisted": 1}}
        # ASCONF last: the guest turns it on for good.
        for cmd, port, bound in (("single", PORT, 1), ("multi", PORT, 2), ("asconf", ASCONF_PORT, 3)):
            for fam, f in FAMILIES.items():
                node = f"lb{fam}-nat"
                local = f["client"][:bound]
                before = gw.errors()
                client, server = guest.run(cmd, fam)
                after = gw.errors()
                moved = {k[1]: after[k] - before.get(k, 0) for k in after if k[0] == node and after[k] != before.get(k, 0)}
                # Every byte back, bound where asked (the third added to the association),
                # the service the client's one peer; the bindx ADD succeeded.
                assert (int(client[1]), int(client[2]), client[3].split(","), client[4], client[5]) == \
                    (port, BYTES, local, f["vip"], "0"), client.group(0)
                # Its read after its SHUTDOWN: the association over (the peer's SHUTDOWN
                # ACK came), not reset by an ABORT.
                assert client[6] in ("eof", "Transport endpoint is not connected"), client.group(0)
                # The server: everything echoed, ONE peer address (the translation's source)
                # at the start and throughout, the association ended by the client's
                # SHUTDOWN (end of stream, not a reset).
                assert (int(server[1]), int(server[2]), int(server[3]), int(server[4]), server[5], server[6]) == \
                    (port, BYTES, 1, 1, f["snat"], "eof"), server.group(0)
                rows = closed_session(gw, fam, port, seen)
                assert len(rows) == 1 and rows[0]["state"] == "sctp_closed", rows
                r = rows[0]
                assert (r["client"], r["backend"], r["source"]) == (local[0], f["backend"], f["snat"]), r
                seen.add(r["client_port"])
                assert moved.pop("new-session") == 1 and moved.pop("reply-translated") > 0, moved
                # No drop (an ASCONF among them), and only the removals expected.
                assert moved == expected[cmd], (cmd, moved)
        qemu.stdin.write(b"done 4\n")
        qemu.stdin.flush()
        qemu.wait(60)
    finally:
        if qemu.poll() is None:
            qemu.kill()
        qemu.wait(10)
    assert gw.stop()[0] == 0
