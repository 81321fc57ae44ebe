"""A multi-homed SCTP client through direct server return (IP-in-IP) with two dataplane
workers, end to end in network namespaces: the client namespace holds 39 addresses
(198.18.0.2-.40, 2001:db8::2-::28) behind one veth to vecgate (`workers = 2`, af_packet
fanout: the kernel gives each worker its share by a hash of the 5-tuple); vecgate's
other leg goes to a capture namespace whose kernel answers nothing (the backends would
have to decapsulate, and this host has no ipip module): a raw socket there reads each
outer packet's destination, the backend, and the client's packet inside it.

40 associations, each from its own source port, built by scapy: an INIT from address A
listing A and B, a COOKIE ECHO and DATA from A with the backend's tag T, then (once
vecgate has sent those: a real client waits for the COOKIE ACK) a HEARTBEAT and DATA
from B with T, then DATA from A again. Checked: every packet of an association went to
one backend, its bytes unchanged (tshark reads each tag and a good CRC32c);
`show lb sessions` has one row per association with its tag, that backend and A (its
latest address), both workers hold some; `sctp-path-changed` counted 2 per association
(A to B, B to A) over both workers; `new-session` one per association, plus one for
each whose INIT and COOKIE ECHO were steered to different workers (the INIT by its
client endpoint, the COOKIE ECHO by its tag: the INIT's 5-tuple row stays on its
worker); no other load-balancer counter. Last, each B sends an INIT of its own (tag 0,
the same port), which goes by its 5-tuple: the rows it makes show that for some
associations B's 5-tuple belongs to the other worker and Maglev sends it to another
backend, so the run did cross workers where a 5-tuple session would have gone wrong.

It fails if B's tagged packets go by their own 5-tuple, to the worker of (B, port) and
the backend Maglev picks for it: with the binary before the sessions were keyed by the
tag (before 1a5052e5) 25 of the 40 associations (27 over IPv6) had packets at two
backends; with the tag keying but tagged packets steered by their client endpoint
(`lb::steer`'s association_worker never consulted), the 10 (17) whose B is the other
worker's and whose B's own pick is another backend, as the last INITs show. vecgate's
flow hash and Maglev are deterministic, so those counts are the same every run."""
import ipaddress
import os
import random
import select
import subprocess
import sys
import time

import pytest

from netns import Vecgate
from test_lb_encap import service

from scapy.all import (IP, SCTP, Ether, IPv6, SCTPChunkCookieEcho, SCTPChunkData, SCTPChunkHeartbeatReq, SCTPChunkInit, SCTPChunkParamHeartbeatInfo,
                       SCTPChunkParamIPv4Addr, SCTPChunkParamIPv6Addr, raw, wrpcap)

CLIENT_MAC, GW_A_MAC, GW_R_MAC, SINK_MAC = "02:fe:00:00:00:01", "02:00:00:00:00:0a", "02:00:00:00:00:0b", "02:00:00:00:01:02"
NODE, NODE6 = "198.18.1.1", "2001:db8:1::1"
BACKENDS = ["198.19.1.10", "198.19.2.10", "198.19.3.10"]
BACKENDS6 = ["2001:db8:100::10", "2001:db8:100::20", "2001:db8:100::30"]
VIP, VIP6 = "198.18.128.30", "2001:db8:80::30"
NGAP = 38412
ASSOCIATIONS = 40
CLIENTS = [f"198.18.0.{i}" for i in range(2, 41)]
CLIENTS6 = [f"2001:db8::{i:x}" for i in range(2, 41)]

CONFIG = f"""[dataplane]
workers = 2

[[interface]]
name = "a"
type = "af_packet"
host_if = "a1"
mac = "{GW_A_MAC}"
addresses = ["198.18.0.1/24", "2001:db8::1/64"]

[[interface]]
name = "r"
type = "af_packet"
host_if = "r0g"
mac = "{GW_R_MAC}"
addresses = ["{NODE}/24", "{NODE6}/64"]

[[route]]
prefix = "198.19.0.0/16"
via = "198.18.1.2"

[[route]]
prefix = "2001:db8:100::/48"
via = "2001:db8:1::2"

# The capture namespace answers no ARP or ND: its MAC is given.
[[neighbour]]
interface = "r"
ip = "198.18.1.2"
mac = "{SINK_MAC}"

[[neighbour]]
interface = "r"
ip = "2001:db8:1::2"
mac = "{SINK_MAC}"

[lb]
snat4 = "{NODE}"
snat6 = "{NODE6}"
# An INIT's 5-tuple row left on its worker (the COOKIE ECHO went to the other) stays
# for the whole test, so the rows and new-session agree however slow the machine is.
timeouts = {{ sctp_cookie_wait_ms = 600000 }}
""" + service("core/amf", "cluster_ip", VIP, NGAP, "sctp", "ipip", BACKENDS) + service("core/amf6", "cluster_ip", VIP6, NGAP, "sctp", "ipip", BACKENDS6)

# Sends raw frames on argv[1]: each stdin line holds hex frames separated by spaces,
# sent in order; "sent N" after each line.
SENDER = r"""
import socket, sys
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((sys.argv[1], 0))
print("READY", flush=True)
for line in sys.stdin:
    frames = line.split()
    for f in frames:
        s.send(bytes.fromhex(f))
    print("sent", len(frames), flush=True)
"""

# Every encapsulated frame (IPv4 protocol 4, IPv6 next header 41) that arrives on
# argv[1], one hex line each, for at most argv[2] seconds.
CAPTURE = r"""
import select, socket, sys, time
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
s.bind((sys.argv[1], 0))
print("READY", flush=True)
end = time.monotonic() + float(sys.argv[2])
while time.monotonic() < end:
    if not select.select([s], [], [], 0.5)[0]:
        continue
    f, addr = s.recvfrom(65535)
    if addr[2] == socket.PACKET_OUTGOING:
        continue
    if (f[12:14] == b"\x08\x00" and f[23] == 4) or (f[12:14] == b"\x86\xdd" and f[20] == 41):
        print(f.hex(), flush=True)
"""


class Lines:
    """A helper process's output, a line at a time, each read waiting at most a bound."""

    def __init__(self, proc):
        self.proc, self.fd, self.buf = proc, proc.stdout.fileno(), b""

    def read(self, seconds):
        deadline = time.monotonic() + seconds
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                return None
            chunk = os.read(self.fd, 1 << 16)
            if not chunk:
                return None
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode()


def helper(lab, ns, code, *args):
    """A helper snippet running in `ns`, returned once it is ready."""
    p = lab.spawn(ns, sys.executable, "-c", code, *map(str, args), stdin=subprocess.PIPE)
    out = Lines(p)
    line = out.read(15)
    assert line == "READY", f"helper did not start: {line!r} {p.poll()}"
    return p, out


def topology(lab, six):
    """client ─ vecgate (two workers) ─ capture namespace; the client's 39 addresses on
    its veth (not needed to send raw frames: they say what the client is)."""
    c, g, sink = lab.ns("c"), lab.dataplane_ns("gw"), lab.dataplane_ns("sink")
    lab.veth(c, "a0", g, "a1")
    lab.veth(g, "r0g", sink, "r0")
    lab.run(c, "ip", "link", "set", "a0", "address", CLIENT_MAC)
    lab.run(sink, "ip", "link", "set", "r0", "address", SINK_MAC)
    for a in CLIENTS6 if six else CLIENTS:
        lab.run(c, "ip", "addr", "add", f"{a}/64" if six else f"{a}/24", "dev", "a0", *(["nodad"] if six else []))
    return c, g, sink


def associations(six):
    """Each association's first and second addresses (different, the pairs varied),
    source port, and the backend's and client's tags (random, fixed by the seed)."""
    clients = CLIENTS6 if six else CLIENTS
    rng = random.Random(73)
    tags = rng.sample(range(1, 1 << 32), 2 * ASSOCIATIONS)
    out = []
    for i in range(ASSOCIATIONS):
        a = clients[i % len(clients)]
        b = clients[(i * 7 + 11) % len(clients)]
        if b == a:
            b = clients[(i + 1) % len(clients)]
        out.append({"a": a, "b": b, "sport": 40000 + i, "tag": tags[2 * i], "init_tag": tags[2 * i + 1]})
    return out


def frames(assoc, six):
    """An association's packets by phase: the handshake and DATA from A, HEARTBEAT and
    DATA from B, DATA from A again."""
    net, vip, param = (IPv6, VIP6, SCTPChunkParamIPv6Addr) if six else (IP, VIP, SCTPChunkParamIPv4Addr)

    def pkt(src, tag, chunk):
        return Ether(src=CLIENT_MAC, dst=GW_A_MAC) / net(src=src, dst=vip) / SCTP(sport=assoc["sport"], dport=NGAP, tag=tag) / chunk

    a, b, t = assoc["a"], assoc["b"], assoc["tag"]
    init = SCTPChunkInit(init_tag=assoc["init_tag"], a_rwnd=65536, n_out_streams=2, n_in_streams=2, init_tsn=1, params=[param(addr=a), param(addr=b)])
    return [
        [pkt(a, 0, init), pkt(a, t, SCTPChunkCookieEcho(cookie=b"c" * 32)), pkt(a, t, SCTPChunkData(tsn=1, data=b"one"))],
        [pkt(b, t, SCTPChunkHeartbeatReq(params=[SCTPChunkParamHeartbeatInfo(data=b"path-two")])), pkt(b, t, SCTPChunkData(tsn=2, data=b"two"))],
        [pkt(a, t, SCTPChunkData(tsn=3, data=b"three"))],
    ]


def outer(frame, six):
    """A captured frame's outer destination (the backend) and the packet it carries."""
    o = Ether(frame)
    assert (o.dst, o.src) == (SINK_MAC, GW_R_MAC), o.summary()
    if six:
        assert o[IPv6].src == NODE6 and o[IPv6].nh == 41, o.summary()
        return o[IPv6].dst, frame[14 + 40:14 + 40 + o[IPv6].plen]
    ihl = (frame[14] & 15) * 4
    assert o[IP].src == NODE and o[IP].proto == 4 and o[IP].flags.DF, o.summary()
    return o[IP].dst, frame[14 + ihl:14 + o[IP].len]


def canon(addr):
    return str(ipaddress.ip_address(addr))


@pytest.mark.parametrize("six", [False, True], ids=["v4", "v6"])
def test_a_multihomed_sctp_association_keeps_its_backend_across_two_workers(lab, vecgate, tmp_path, six):
    c, g, sink = topology(lab, six)
    gw = Vecgate(lab, vecgate, g, CONFIG, tmp_path, split_dataplane=True)
    node = "lb6-nat" if six else "lb4-nat"
    _, captured = helper(lab, sink, CAPTURE, "r0", 120)
    sender, sender_says = helper(lab, c, SENDER, "a0")

    assocs = associations(six)
    by_phase = list(zip(*(frames(a, six) for a in assocs)))
    # The client's packet (IP and on) -> (association, phase, index).
    origin = {}
    for phase, per_assoc in enumerate(by_phase):
        for k, pkts in enumerate(per_assoc):
            for j, p in enumerate(pkts):
                origin[raw(p)[14:]] = (k, phase, j)
    assert len(origin) == 6 * ASSOCIATIONS

    def send(pkts):
        """Send `pkts` (each association's in order) and return the frames vecgate sent
        for them, once they all came: what the next phase sends follows them."""
        sender.stdin.write(" ".join(raw(p).hex() for p in pkts) + "\n")
        sender.stdin.flush()
        assert sender_says.read(30) == f"sent {len(pkts)}"
        got = []
        while len(got) < len(pkts):
            line = captured.read(30)
            assert line is not None, (f"{len(got)} of {len(pkts)} came", gw.errors())
            got.append(bytes.fromhex(line))
        return got

    backend_of = {}  # association -> the outer destinations of its packets
    inners = []
    for phase, per_assoc in enumerate(by_phase):
        for f in send([p for pkts in per_assoc for p in pkts]):
            backend, inner = outer(f, six)
            assert inner in origin, f"not a packet the client sent, unchanged: {Ether(f).summary()}"
            k, ph, _ = origin.pop(inner)
            assert ph == phase, (k, ph, phase)
            backend_of.setdefault(k, set()).add(backend)
            inners.append(inner)
    assert not origin, f"{len(origin)} packets never came"
    spread = {k: sorted(v) for k, v in backend_of.items() if len(v) != 1}
    assert not spread, f"associations whose packets went to several backends: {spread}"
    backend = {k: canon(next(iter(v))) for k, v in backend_of.items()}
    assert set(backend.values()) <= set(BACKENDS6 if six else BACKENDS)
    assert len(set(backend.values())) > 1, backend

    # tshark on the client's packets as vecgate carried them: every tag, a good CRC32c.
    net = IPv6 if six else IP
    link = raw(Ether(src=GW_R_MAC, dst=SINK_MAC, type=0x86DD if six else 0x0800))
    wrpcap(str(tmp_path / "inner.pcap"), [Ether(link + i) for i in inners])
    r = subprocess.run(["tshark", "-r", str(tmp_path / "inner.pcap"), "-o", "sctp.checksum:CRC 32c", "-T", "fields",
                        "-e", "sctp.verification_tag", "-e", "sctp.checksum.status", "-e", "_ws.malformed"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    read = [line.split("\t") for line in r.stdout.splitlines()]
    assert read == [[f"{net(i)[SCTP].tag:#010x}", "1", ""] for i in inners], r.stdout

    # One tagged row per association, established, with its backend and A (its latest
    # address).
    rows = gw.ctl("show", "lb", "sessions", "limit", "1000")["data"]["sessions"]
    tagged = {r["vtag"]: r for r in rows if "vtag" in r}
    assert sorted(tagged) == sorted(a["tag"] for a in assocs), rows
    worker_of_tag = {}
    for k, a in enumerate(assocs):
        r = tagged[a["tag"]]
        got = (canon(r["client"]), r["client_port"], canon(r["vip"]), r["vip_port"], r["protocol"], canon(r["backend"]), r["backend_port"], r["state"])
        assert got == (canon(a["a"]), a["sport"], canon(VIP6 if six else VIP), NGAP, 132, backend[k], NGAP, "sctp_established"), r
        worker_of_tag[k] = r["worker"]
    assert set(worker_of_tag.values()) == {0, 1}, "both workers hold associations"
    # The rest: INITs' 5-tuple rows left on the other worker than their tag's, with the
    # association's backend (the COOKIE ECHO took the INIT's Maglev pick there).
    by_client = {(canon(a["a"]), a["sport"]): k for k, a in enumerate(assocs)}
    worker_of_a = dict(worker_of_tag)
    left = [r for r in rows if "vtag" not in r]
    for r in left:
        k = by_client.get((canon(r["client"]), r["client_port"]))
        assert k is not None and canon(r["backend"]) == backend[k] and r["worker"] != worker_of_tag[k], r
        assert r["state"] == "sctp_cookie_wait", r
        worker_of_a[k] = r["worker"]
    assert len(rows) == ASSOCIATIONS + len(left)

    errs = gw.errors()
    assert errs.get((node, "sctp-path-changed"), 0) == 2 * ASSOCIATIONS, errs
    assert errs.get((node, "new-session"), 0) == ASSOCIATIONS + len(left), (len(left), errs)
    assert errs.get((node, "encapsulated"), 0) == 6 * ASSOCIATIONS, errs
    moved = {k: v for k, v in errs.items() if k[0] in ("lb4-nat", "lb6-nat") and k[1] not in ("new-session", "encapsulated", "sctp-path-changed")}
    assert not moved, moved
    # The workers handed packets over (the kernel's fanout hash is not the steering's).
    assert errs.get(("session-handoff", "handed-off"), 0) > 0, errs
    assert errs.get(("session-handoff", "lane-full"), 0) == 0, errs

    # Each B's own INIT goes by its 5-tuple: where B's packets would have gone without
    # the tag. Some went to the other worker than A's, and to another backend.
    probes = send([frames({**a, "a": a["b"], "b": a["a"]}, six)[0][0] for a in assocs])
    own_backend = {}
    for f in probes:
        b, inner = outer(f, six)
        k = next(k for k, a in enumerate(assocs) if a["sport"] == net(inner)[SCTP].sport)
        own_backend[k] = canon(b)
    rows = gw.ctl("show", "lb", "sessions", "limit", "1000")["data"]["sessions"]
    worker_of_b = {}
    for r in rows:
        for k, a in enumerate(assocs):
            if "vtag" not in r and (canon(r["client"]), r["client_port"]) == (canon(a["b"]), a["sport"]):
                worker_of_b[k] = r["worker"]
    assert sorted(worker_of_b) == list(range(ASSOCIATIONS)), rows
    other_worker = [k for k in worker_of_b if worker_of_b[k] != worker_of_a[k]]
    other_backend = [k for k in own_backend if own_backend[k] != backend[k]]
    both = set(other_worker) & set(other_backend)
    print(f"B on the other worker: {len(other_worker)}, B's own backend another: {len(other_backend)}, both: {len(both)}")
    assert other_worker and other_backend and both, (worker_of_a, worker_of_b, backend, own_backend)
    assert gw.stop()[0] == 0
