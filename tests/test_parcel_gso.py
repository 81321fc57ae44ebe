"""IP parcels between Linux hosts that speak UDP GSO/GRO (issue 20), in network
namespaces over veth, every link an af_packet interface:

  sender (UDP_SEGMENT 1000) ─ vecgate A ═ parcel link (MTU 9000) ═ vecgate B ─┬─ r: a UDP_GRO socket and a plain one
  198.18.10.2                 (join)                               (split)    └─ q: a plain socket, behind a link
                                                                                  without virtio-net headers

A takes the sender's GSO frames (virtio-net headers) and makes them parcels without
cutting them into datagrams; B sends each parcel toward r as one GSO frame (r's kernel
hands it whole to the UDP_GRO socket and segments it for the other) and toward q as
ordinary datagrams. Every segment must arrive intact and in order. Independent checks:
the Linux receivers; tshark and scapy (which recomputes each checksum) on q's leg; the
parcel leg read by tests/parcelpkt.py."""
import json
import shutil
import signal
import sys
import time
from pathlib import Path

import pytest

from conftest import tshark_clean
from netns import Vecgate, result
from parcelpkt import parse4
from test_parcel import udp_ok_by_scapy

from scapy.all import IP, UDP, raw, rdpcap

PEER = Path(__file__).resolve().parent / "gso_peer.py"
MESSAGES, SIZE, GSO = 20, 10500, 1000
SEGS = -(-SIZE // GSO)
EXPECTED = [[m, j, min(GSO, SIZE - j * GSO)] for m in range(MESSAGES) for j in range(SEGS)]

A_CONFIG = """
[[interface]]
name = "in"
type = "af_packet"
host_if = "a1"
mac = "02:00:00:00:0a:01"
addresses = ["198.18.10.1/24"]

[[interface]]
name = "p"
type = "af_packet"
host_if = "pa"
mac = "02:00:00:00:0a:02"
mtu = 9000
parcels = true
addresses = ["198.18.11.1/24"]

[[route]]
prefix = "198.18.12.0/23"
via = "198.18.11.2"

[[neighbour]]
interface = "p"
ip = "198.18.11.2"
mac = "02:00:00:00:0b:01"
"""

B_CONFIG = """
[[interface]]
name = "p"
type = "af_packet"
host_if = "pb"
mac = "02:00:00:00:0b:01"
mtu = 9000
parcels = true
addresses = ["198.18.11.2/24"]

[[interface]]
name = "out"
type = "af_packet"
host_if = "b1"
mac = "02:00:00:00:0b:02"
addresses = ["198.18.12.1/24"]

[[interface]]
name = "plain"
type = "af_packet"
host_if = "c1"
vnet_hdr = false
mac = "02:00:00:00:0b:03"
addresses = ["198.18.13.1/24"]

[[route]]
prefix = "198.18.10.0/24"
via = "198.18.11.1"

[[neighbour]]
interface = "p"
ip = "198.18.11.1"
mac = "02:00:00:00:0a:02"
"""


def host(lab, ns, ifname, addr, gw):
    lab.run(ns, "ip", "addr", "add", addr, "dev", ifname)
    lab.run(ns, "ip", "route", "add", "default", "via", gw)


def receiver(lab, ns, addr, port, gro):
    p = lab.spawn(ns, sys.executable, str(PEER), "recv", addr, str(port), "1" if gro else "0", str(len(EXPECTED)), "40")
    line = p.stdout.readline()
    assert line.strip() == "READY", f"receiver {port}: {line!r} {p.stderr.read() if p.poll() is not None else ''}"
    return p


def capture(lab, ns, ifname, path):
    """dumpcap (Wireshark's capture tool) on a link, stopped with SIGTERM by `stop`."""
    p = lab.spawn(ns, "dumpcap", "-q", "-i", ifname, "-s", "0", "-w", str(path))
    deadline = time.time() + 10
    while not (path.exists() and path.stat().st_size >= 24) and time.time() < deadline:
        time.sleep(0.1)
    return p


def stop(p):
    p.send_signal(signal.SIGTERM)
    p.wait(10)


def test_linux_gso_sender_to_gro_and_plain_receivers_through_a_parcel_link(lab, vecgate, tmp_path):
    if shutil.which("dumpcap") is None:
        pytest.fail("dumpcap is not installed (scripts/test.sh installs tshark, which brings it)")
    s, ga, gb, r, q = lab.ns("s"), lab.dataplane_ns("ga"), lab.dataplane_ns("gb"), lab.ns("r"), lab.ns("q")
    lab.veth(s, "s0", ga, "a1")
    lab.veth(ga, "pa", gb, "pb", mtu=9000)
    lab.veth(gb, "b1", r, "r0")
    lab.veth(gb, "c1", q, "q0")
    host(lab, s, "s0", "198.18.10.2/24", "198.18.10.1")
    host(lab, r, "r0", "198.18.12.2/24", "198.18.12.1")
    host(lab, q, "q0", "198.18.13.2/24", "198.18.13.1")
    a = Vecgate(lab, vecgate, ga, A_CONFIG, tmp_path, name="a")
    b = Vecgate(lab, vecgate, gb, B_CONFIG, tmp_path, name="b")
    for dst in ("198.18.12.2", "198.18.13.2"):  # ARP on every hop, and the path works
        for _ in range(10):
            ping = lab.run(s, "ping", "-c", "1", "-W", "1", dst, check=False)
            if ping.returncode == 0:
                break
        assert ping.returncode == 0, (ping.stdout, a.errors(), b.errors())
    parcels_pcap, plain_pcap = tmp_path / "parcel-leg.pcap", tmp_path / "q-leg.pcap"
    caps = [capture(lab, gb, "pb", parcels_pcap), capture(lab, q, "q0", plain_pcap)]
    gro = receiver(lab, r, "198.18.12.2", 9001, True)
    plain = receiver(lab, r, "198.18.12.2", 9002, False)
    split = receiver(lab, q, "198.18.13.2", 9003, False)
    for dst, port in (("198.18.12.2", 9001), ("198.18.12.2", 9002), ("198.18.13.2", 9003)):
        sent = lab.run(s, sys.executable, str(PEER), "send", dst, str(port), str(MESSAGES), str(SIZE), str(GSO))
        assert json.loads(sent.stdout)["bytes"] == MESSAGES * SIZE
    got = {name: result(p, timeout=60) for name, p in (("gro", gro), ("plain", plain), ("split", split))}
    time.sleep(0.5)
    for c in caps:
        stop(c)

    # Every segment, intact, in order, at each receiver.
    for name, g in got.items():
        assert g["damaged"] == [], (name, g["damaged"])
        assert g["segments"] == EXPECTED, f"{name}: {len(g['segments'])} segments, first difference at " \
            f"{next((i for i, (x, y) in enumerate(zip(g['segments'], EXPECTED)) if x != y), min(len(g['segments']), len(EXPECTED)))}"
    # The GRO socket read GSO frames whole: a read per parcel, not per segment.
    assert got["gro"]["gro_sizes"] == [GSO] and got["gro"]["reads"] <= 2 * MESSAGES, got["gro"]["reads"]
    assert got["plain"]["reads"] == len(EXPECTED) and got["split"]["reads"] == len(EXPECTED)

    # A made parcels from the GSO frames (8 + 3 segments: 9000 bytes hold 8 of 1000);
    # B sent those toward r as GSO frames and split those toward q.
    ea, eb = a.errors(), b.errors()
    assert ea.get(("parcel4-join", "gso-frames-joined")) == 3 * MESSAGES, ea
    assert ea.get(("parcel4-join", "parcels-from-gso")) == 6 * MESSAGES, ea
    assert eb.get(("parcel4-input", "parcels")) == 6 * MESSAGES, eb
    assert eb.get(("parcel4-input", "to-gso-frame")) == 4 * MESSAGES, eb
    assert eb.get(("parcel4-input", "to-split")) == 2 * MESSAGES, eb
    assert eb.get(("parcel4-split", "datagrams")) == MESSAGES * SEGS, eb
    assert not any(k[1] in ("bad-segment-checksum", "bad-udp-checksum", "no-buffer", "gso-frames-passed") for k in {**ea, **eb}), (ea, eb)

    # The parcel leg, read by our independent Python parser: 8 + 3 segments per message.
    parcels = [parse4(raw(f)[14:]) for f in rdpcap(str(parcels_pcap)) if IP in f and raw(f)[14] == 0x47]
    assert [p["nsegs"] for p in parcels] == [8, 3] * 3 * MESSAGES
    assert all(p["seg_len"] == GSO and p["ttl"] == 63 for p in parcels)
    # q's leg: ordinary datagrams, every checksum as scapy computes it, nothing tshark flags.
    datagrams = [f for f in rdpcap(str(plain_pcap)) if UDP in f and f[UDP].dport == 9003]
    assert len(datagrams) == len(EXPECTED)
    assert all(udp_ok_by_scapy(f) for f in datagrams)
    bad, _ = tshark_clean(plain_pcap)
    assert bad == []
    a.stop()
    b.stop()
