"""A multi-homed SCTP association through the load balancer's direct server return
(IP-in-IP), failing over from the client's first address to its second, between real
SCTP stacks, IPv4 and IPv6: a stock Debian kernel's SCTP under qemu (this host's kernel
has no SCTP and no ipip), the client and two backends each in a network namespace of the
guest, so each has its own SCTP stack.

  guest netns c: client ── eth1 ── tq1 ── vecgate (ns) ── tq0 ── eth0 :guest root ─┬─ veth ── netns b1
  198.18.0.2 … .7                  198.18.0.1 | 198.18.1.1         198.18.1.2      │   198.18.2.2
  2001:db8::2 … ::7                2001:db8::1 | 2001:db8:1::1      2001:db8:1::2   └─ veth ── netns b2
                                                                                        198.18.3.2

Services 198.18.128.20 and 2001:db8:128::20, SCTP port 38412, `forwarding = "ipip"`,
backends b1 and b2 (tests/linux_peer/guest-init-sctp-dsr.sh, sctp-peer.c;
prepare-sctp-dsr.sh builds it). Each backend holds the service address on lo and
decapsulates (tunl0, ip6tnl0); its replies leave from the service address, untranslated,
routed back through vecgate. The client always sends from port 40000, so an address
names one 5-tuple. Per family:

- probe: single-homed associations from the client's addresses in turn, each echoed and
  shut down, tell which backend each address's 5-tuple lands on (the server line of b1
  or b2, and the session's backend in `show lb sessions`), until two land on different
  backends: A1 and A2.
- failover: a client bound to A1 and A2 (sctp_bindx) connects from A1; its INIT lists A2
  and passes unmodified, so the backend holds both as the client's addresses. Halfway,
  once the backend has verified A2 (both paths active), the client's route takes A2 as
  its source and A1 leaves its interface: the client sends from A2, and the backend's
  packets to A1 are lost until it fails over to A2 (short SCTP timers: within a second).
  Checked: every byte echoed intact and a graceful SHUTDOWN at both ends; ONE backend, A1's,
  served the association (its server's line: both client addresses, every byte, end of
  stream) and the other saw nothing (its kernel's SCTP counters: no association, no
  out-of-the-blue packet, no abort); `lbN-nat` made one session (the INIT's), counted
  the path change (`sctp-path-changed`) and dropped nothing; `show lb sessions` holds
  the association keyed by its verification tag (`vtag`), the client's latest address
  A2, the backend A1's, closed.

Why it can fail: with sessions keyed by the 5-tuple (vecgate before the association
key), the first packet from A2 is a new 5-tuple, which Maglev sends to the OTHER backend
(the probe made sure of it); that backend's kernel has no such association and answers
the out-of-the-blue DATA or SACK with an ABORT that reflects the client's tag, which the
client's kernel accepts: the association is reset mid-transfer.
"""
import re
import time

import pytest

import linux_guest
from netns import Vecgate, wait_for

PORT, CLIENT_PORT = 38412, 40000
BYTES = 200 * 1024
# What a probe echoes (guest-init-sctp-dsr.sh's probe).
PROBE_BYTES = 16384
BACKENDS = {"b1": {4: "198.18.2.2", 6: "2001:db8:2::2"}, "b2": {4: "198.18.3.2", 6: "2001:db8:3::2"}}
FAMILIES = {
    4: {"vip": "198.18.128.20", "client": [f"198.18.0.{i}" for i in range(2, 8)]},
    6: {"vip": "2001:db8:128::20", "client": [f"2001:db8::{i}" for i in range(2, 8)]},
}
CLIENT_LINE = re.compile(r"GUEST: client (\d+) (ok|FAIL)(.*)$")
CLIENT_OK = re.compile(r"GUEST: client (\d+) ok bytes=(\d+) local-addrs=(\S*) \(\d+\) peer-addrs=(\S*) \(\d+\) add-rc=\d+ end=(.*)$")
SERVER_LINE = re.compile(r"GUEST: server (\d+) ns=(b\d) bytes=(\d+) peers=(\d+) max=(\d+) peer-addrs=(\S*) end=(.*)$")
SNMP_LINE = re.compile(r"GUEST: snmp (b\d) (.*)$")
# lbN-nat counters the failover may move, none a drop. The ICMP ones: once A1 has left
# the client's interface, the client's kernel answers the backend's packets to A1 with
# ICMP host unreachable (IPv4: a packet to an address it does not hold, not forwarding),
# addressed to the service; vecgate passes it on to the backend or not, as it finds a
# session for the packet it quotes.
FAILOVER_COUNTERS = {"new-session", "encapsulated", "sctp-path-changed", "icmp-translated", "icmp-not-translated"}


@pytest.fixture(scope="module")
def linux_peer():
    return linux_guest.prepare("prepare-sctp-dsr.sh")


def config():
    services = "".join(f"""
[[lb_service]]
name = "core/amf{fam}"
type = "load_balancer"
vip = "{f['vip']}"
port = {PORT}
protocol = "sctp"
forwarding = "ipip"
backends = [{{ addr = "{BACKENDS['b1'][fam]}", port = {PORT} }}, {{ addr = "{BACKENDS['b2'][fam]}", port = {PORT} }}]
""" for fam, f in FAMILIES.items())
    routes = "".join(f"""
[[route]]
prefix = "{prefix}"
via = "{via}"
""" for prefix, via in (("198.18.2.0/24", "198.18.1.2"), ("198.18.3.0/24", "198.18.1.2"),
                        ("2001:db8:2::/64", "2001:db8:1::2"), ("2001:db8:3::/64", "2001:db8:1::2")))
    return linux_guest.two_tap_links(0xad) + f"""{routes}
[lb]
snat4 = "198.18.1.1"
snat6 = "2001:db8:1::1"
# An association's session kept past its SHUTDOWN COMPLETE for the test to read it.
timeouts = {{ sctp_closed_ms = 300000 }}
{services}"""


class Guest(linux_guest.Console):
    def association(self, cmd):
        """`cmd` (probe or failover) in the guest: its client's line, its server's (either
        backend's) and every line it printed."""
        verb = cmd.split()[0]
        # The server prints at its association's end, as the client finishes.
        new = self.command(cmd, lambda new: f"GUEST: finished {verb}" in new and any(map(SERVER_LINE.match, new)))
        client = [m for m in map(CLIENT_LINE.match, new) if m]
        server = [m for m in map(SERVER_LINE.match, new) if m]
        assert f"GUEST: finished {verb}" in new and len(client) == 1 and len(server) == 1, (cmd, self.tail())
        return client[0], server[0], new

    def snmp(self):
        """Each backend's kernel SCTP counters: {"b1": {"SctpPassiveEstabs": n, …}, …}."""
        new = self.command("snmp", lambda new: "GUEST: finished snmp" in new, seconds=30)
        rows = {m[1]: dict((k, int(v)) for k, v in (kv.split("=") for kv in m[2].split())) for m in map(SNMP_LINE.match, new) if m}
        assert set(rows) == {"b1", "b2"}, (new, self.tail())
        return rows


def sessions(gw, fam):
    f = FAMILIES[fam]
    return [r for r in gw.ctl("show", "lb", "sessions", "limit", "1000")["data"]["sessions"]
            if r["protocol"] == 132 and r["vip"] == f["vip"] and r["vip_port"] == PORT]


def association_closed(gw, fam, client, backend):
    """The sessions from `client` (its latest address) and CLIENT_PORT to `backend`, once
    the one there is closed (vecgate sees the SHUTDOWN COMPLETE within a round trip of the
    client's end). A2's probe went to the other backend: not among them."""
    deadline = time.time() + 30
    while True:
        rows = [r for r in sessions(gw, fam) if (r["client"], r["client_port"], r["backend"]) == (client, CLIENT_PORT, backend)]
        if (len(rows) == 1 and rows[0]["state"] == "sctp_closed") or time.time() > deadline:
            return rows
        time.sleep(0.2)


def counters(gw):
    return {(c["node"], c["counter"]): (c["severity"], c["count"]) for c in gw.ctl("show", "errors")["data"]}


def probe(guest, gw, fam):
    """The backend each client address's 5-tuple lands on, probed in turn until two
    differ: (A1, A2, A1's backend)."""
    f = FAMILIES[fam]
    landed = {}
    for a in f["client"]:
        client, server, new = guest.association(f"probe {fam} {a}")
        assert client[2] == "ok" and server[7] == "eof" and int(server[3]) == PROBE_BYTES, (a, new)
        landed[a] = server[2]
        # vecgate's choice, as its session table tells it, is where the server saw it.
        rows = [r for r in sessions(gw, fam) if r["client"] == a and r["client_port"] == CLIENT_PORT]
        assert [r["backend"] for r in rows] == [BACKENDS[landed[a]][fam]], (a, landed[a], rows)
        if len(set(landed.values())) == 2:
            first = f["client"][0]
            return first, a, landed[first]
    pytest.fail(f"every client address's 5-tuple lands on one backend: {landed}")


def test_sctp_multihoming_failover_through_direct_server_return(lab, vecgate, tmp_path, linux_peer):
    g = lab.dataplane_ns("g")
    for tap in ("tq0", "tq1"):
        lab.run(g, "ip", "tuntap", "add", "dev", tap, "mode", "tap")
        lab.run(g, "ip", "link", "set", tap, "up")
    gw = Vecgate(lab, vecgate, g, config(), tmp_path)
    log = tmp_path / "guest.log"
    qemu = linux_guest.boot(lab, g, linux_peer, "initrd-sctp-dsr.gz", log, linger=0, taps=("tq0", "tq1"), console_in=True,
                            append=f"bytes={BYTES}")
    guest = Guest(qemu, log)
    try:
        # The guest boots under emulation (seconds here, a minute on a slow machine).
        assert wait_for(log, "GUEST: ready", qemu, 240), guest.tail()
        assert not [l for l in guest.lines() if "FAIL" in l], guest.lines()
        for fam, f in FAMILIES.items():
            node = f"lb{fam}-nat"
            a1, a2, served = probe(guest, gw, fam)
            other = "b2" if served == "b1" else "b1"
            snmp_before, before = guest.snmp(), counters(gw)
            client, server, new = guest.association(f"failover {fam} {a1} {a2}")
            snmp_after, after = guest.snmp(), counters(gw)
            moved = {k[1]: after[k][1] - before.get(k, (None, 0))[1] for k in after
                     if k[0] == node and after[k][1] != before.get(k, (None, 0))[1]}
            snmp = {b: {k: v - snmp_before[b][k] for k, v in snmp_after[b].items() if k != "SctpCurrEstab"} for b in snmp_after}
            # The client's and the server's lines first: a reset shows there.
            why = (client.group(0), server.group(0), snmp, moved, fam, a1, a2, served, new)
            # Every byte back, then the client's SHUTDOWN answered (end of stream, no reset).
            ok = CLIENT_OK.match(client.group(0))
            assert ok and (int(ok[1]), int(ok[2]), ok[4]) == (PORT, BYTES, f["vip"]), why
            assert ok[5] in ("eof", "Transport endpoint is not connected"), why
            # A1's backend served it whole: both client addresses known from the INIT,
            # every byte echoed, ended by the client's SHUTDOWN.
            assert (int(server[1]), server[2], int(server[3]), int(server[4]), server[7]) == (PORT, served, BYTES, 2, "eof"), why
            assert sorted(server[6].split(",")) == sorted([a1, a2]), why
            # The other backend's kernel saw no association and no packet of one (an
            # out-of-the-blue packet is what it would abort).
            assert snmp[other] == {"SctpPassiveEstabs": 0, "SctpAborteds": 0, "SctpShutdowns": 0, "SctpOutOfBlues": 0}, why
            assert (snmp[served]["SctpPassiveEstabs"], snmp[served]["SctpAborteds"], snmp[served]["SctpOutOfBlues"]) == (1, 0, 0), why
            # One session (the INIT's, then the association's), the path change counted,
            # every packet encapsulated, nothing else (no drop).
            assert moved.get("new-session") == 1 and moved.get("sctp-path-changed", 0) >= 1 and moved.get("encapsulated", 0) > 0, why
            assert set(moved) <= FAILOVER_COUNTERS, why
            # Nowhere a drop counter moved.
            drops = {k: v[1] - before.get(k, (None, 0))[1] for k, v in after.items() if v[0] != "info" and v[1] != before.get(k, (None, 0))[1]}
            assert not drops, (drops, why)
            # The association's session: keyed by its tag, the client's latest address
            # (A2), A1's backend, closed by the SHUTDOWN COMPLETE.
            rows = association_closed(gw, fam, a2, BACKENDS[served][fam])
            assert len(rows) == 1 and "vtag" in rows[0] and rows[0]["state"] == "sctp_closed", (rows, sessions(gw, fam), why)
        qemu.stdin.write(b"done\n")
        qemu.stdin.flush()
        qemu.wait(60)
    finally:
        if qemu.poll() is None:
            qemu.kill()
        qemu.wait(10)
    assert gw.stop()[0] == 0
