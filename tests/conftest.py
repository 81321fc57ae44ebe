"""Shared fixtures: the vecgate binary, a scratch folder, and helpers to run a graph
offline over pcap files built and dissected by scapy (an independent implementation)."""
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from netns import Lab

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(os.environ.get("VECGATE_BIN", ROOT / "target" / "release" / "vecgate"))

# The gateway under test: eth0 faces the hosts that send, eth1 faces a router.
GW_MAC0 = "02:00:00:00:00:01"
GW_MAC1 = "02:00:00:00:00:02"
HOST_MAC = "02:fe:00:00:00:01"
ROUTER_MAC = "02:00:00:00:01:02"


@pytest.fixture(scope="session")
def vecgate():
    if not BIN.exists():
        subprocess.run(["cargo", "build", "--release", "-p", "vecgate"], cwd=ROOT, check=True)
    return BIN


@pytest.fixture
def lab():
    """Namespaces and veths for one test (netns.Lab), all deleted after it."""
    l = Lab()
    yield l
    l.close()


def gateway_config(tmp: Path, extra: str = "", eth0_extra: str = "") -> Path:
    cfg = tmp / "gw.toml"
    cfg.write_text(f"""
[dataplane]
buffers = 1024
icmp_errors_per_sec = 100000

[[interface]]
name = "eth0"
type = "pcap"
mac = "{GW_MAC0}"
mtu = 1500
addresses = ["198.18.0.1/24", "2001:db8::1/64"]
input = "in.pcap"
output = "out0.pcap"
{eth0_extra}

[[interface]]
name = "eth1"
type = "pcap"
mac = "{GW_MAC1}"
mtu = 1400
addresses = ["198.18.1.1/24", "2001:db8:1::1/64"]
output = "out1.pcap"

[[route]]
prefix = "198.19.0.0/16"
via = "198.18.1.2"

[[route]]
prefix = "2001:db8:100::/48"
via = "2001:db8:1::2"

[[route]]
prefix = "198.19.254.0/24"
blackhole = true

[[neighbour]]
interface = "eth1"
ip = "198.18.1.2"
mac = "{ROUTER_MAC}"

[[neighbour]]
interface = "eth1"
ip = "2001:db8:1::2"
mac = "{ROUTER_MAC}"

[[neighbour]]
interface = "eth0"
ip = "198.18.0.2"
mac = "{HOST_MAC}"

[[neighbour]]
interface = "eth0"
ip = "2001:db8::2"
mac = "{HOST_MAC}"
{extra}
""")
    return cfg


def write_pcap(path: Path, frames):
    """A classic pcap (Ethernet link type) of raw frames, any length, even broken ones."""
    import struct
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for i, fr in enumerate(frames):
            # A microsecond apart (the microseconds field stays below a second).
            f.write(struct.pack("<IIII", 1_700_000_000 + i // 1_000_000, i % 1_000_000, len(fr), len(fr)))
            f.write(fr)


def run_pcap(vecgate, tmp: Path, packets, extra: str = "", drops: Path = None, eth0_extra: str = ""):
    """Write `packets` (scapy or raw bytes) to in.pcap, run the graph, return
    (eth0 output, eth1 output, counters {(node, counter): count}); with `drops`, the
    dropped packets are captured there (`vecgate pcap --drops`)."""
    from scapy.all import rdpcap

    write_pcap(tmp / "in.pcap", [bytes(p) for p in packets])
    cfg = gateway_config(tmp, extra, eth0_extra)
    cmd = [str(vecgate), "pcap", "--config", str(cfg), "--json"] + (["--drops", str(drops)] if drops else [])
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    snap = json.loads(out.stdout)
    counters = {(c["node"], c["counter"]): c["count"] for c in snap["counters"]}
    out0 = rdpcap(str(tmp / "out0.pcap")) if (tmp / "out0.pcap").stat().st_size > 24 else []
    out1 = rdpcap(str(tmp / "out1.pcap")) if (tmp / "out1.pcap").stat().st_size > 24 else []
    return list(out0), list(out1), counters, snap


def ctl(vecgate, sock, *words):
    """`vecgate ctl` on the control socket `sock`: the completed process, whatever its status."""
    return subprocess.run([str(vecgate), "ctl", "--socket", str(sock), *words], capture_output=True, text=True, timeout=20)


def wait_for_socket(sock: Path):
    """Until `vecgate run` has bound its control socket `sock` (at most 10 s)."""
    deadline = time.time() + 10
    while not sock.exists() and time.time() < deadline:
        time.sleep(0.05)
    assert sock.exists(), "control socket did not appear"


def wait_for_tx(vecgate, sock, interface: str, at_least: int) -> int:
    """Until `interface` has sent `at_least` packets (polled for at most about 10 s):
    how many it has sent."""
    sent = 0
    for _ in range(100):
        rows = json.loads(ctl(vecgate, sock, "--json", "show", "interfaces").stdout)["data"]
        sent = next(r["tx_packets"] for r in rows if r["name"] == interface)
        if sent >= at_least:
            break
        time.sleep(0.1)
    return sent



def tunnel_moved_under_paced_traffic(vecgate, tmp: Path, link: str, tunnel: str, dst: str, sent: int, rate: int, change):
    """A tunnel moved in place while a paced stream flows into it: `vecgate run` with
    `pg0` sending `sent` packets at `rate` a second from 198.18.0.2 to `dst`, which
    `tunnel` (its TOML section, from 198.18.1.1 to 198.18.1.2) carries out of the pcap
    interface `link` (198.18.1.1/24, the peers 198.18.1.2 and 198.18.1.3 known). Once
    `link` has sent 50 packets, with seconds of the stream still to come, `change(sock)`
    runs (the `ctl` commands that move the tunnel, and their checks); then the run ends.
    The packets `link` sent, in order."""
    from scapy.all import rdpcap

    sock = tmp / "vg.sock"
    cfg = tmp / "gw.toml"
    cfg.write_text(f"""
[[interface]]
name = "pg0"
type = "pg"
mac = "02:00:00:00:00:01"
addresses = ["198.18.0.1/24"]

[[interface]]
name = "{link}"
type = "pcap"
mac = "02:00:00:00:00:02"
addresses = ["198.18.1.1/24"]
output = "{link}.pcap"

[[neighbour]]
interface = "{link}"
ip = "198.18.1.2"
mac = "02:00:00:00:01:02"

[[neighbour]]
interface = "{link}"
ip = "198.18.1.3"
mac = "02:00:00:00:01:03"
{tunnel}
[[stream]]
name = "into-tunnel"
interface = "pg0"
size = 100
count = {sent}
rate = {rate}
protocol = "udp"
src = "198.18.0.2"
dst = "{dst}"
""")
    proc = subprocess.Popen([str(vecgate), "run", "--config", str(cfg), "--duration", str(sent / rate + 4), "--interval", "0.5",
                             "--socket", str(sock)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_socket(sock)
        # The change once the tunnel has carried some packets (bounded wait; the
        # generator's rate leaves seconds of packets for after it).
        before = wait_for_tx(vecgate, sock, link, 50)
        assert 50 <= before < sent, before
        change(sock)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    return rdpcap(str(tmp / f"{link}.pcap"))


def one_switch(peers, old, new) -> int:
    """Where `peers` (each packet's peer, in order) go from `old` to `new`, which they do
    once: every packet before it to the old peer, every one after to the new."""
    assert set(peers) == {old, new}, set(peers)
    switch = peers.index(new)
    assert all(x == old for x in peers[:switch]) and all(x == new for x in peers[switch:]), peers
    return switch

def reassembled6(fragments):
    """scapy's own reassembly of IPv6 fragments (packets holding a Fragment header),
    grouped by source, destination and identification: the whole packets."""
    from scapy.all import IPv6, IPv6ExtHdrFragment, raw
    from scapy.layers.inet6 import defragment6
    by_id = {}
    for f in fragments:
        p = f[IPv6]
        by_id.setdefault((p.src, p.dst, p[IPv6ExtHdrFragment].id), []).append(p)
    return [IPv6(raw(defragment6(ps))) for ps in by_id.values()]


def tshark_clean(pcap: Path):
    """tshark dissects the capture with no malformed-packet or checksum warnings."""
    if shutil.which("tshark") is None:
        pytest.fail("tshark is not installed (scripts/test.sh installs it)")
    r = subprocess.run(
        ["tshark", "-r", str(pcap), "-o", "ip.check_checksum:TRUE", "-o", "udp.check_checksum:TRUE", "-o", "tcp.check_checksum:TRUE",
         "-T", "fields", "-e", "frame.number", "-e", "_ws.malformed", "-e", "_ws.expert.severity", "-e", "_ws.expert.message"],
        capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    bad = [l for l in r.stdout.splitlines() if "alformed" in l or "Bad checksum" in l or "incorrect" in l.lower()]
    return bad, r.stdout
