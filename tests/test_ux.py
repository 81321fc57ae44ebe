"""What a new user and an operator hit first (issue 24): a bad config file reports all
its errors in one run with their lines; a GTP-U handover made with `vecgate ctl set gtpu
tunnel` while traffic flows moves the tunnel's packets to the new peer and TEID with none
lost (scapy dissects the encapsulated packets: an independent implementation); the live
view shows rates in 100 columns, `run --json` one object per line; without privileges,
the control socket and an af_packet interface each say once what to do."""
import json
import subprocess
from pathlib import Path

from conftest import ctl, one_switch, tunnel_moved_under_paced_traffic
from scapy.all import IP, UDP
from scapy.contrib.gtp import GTP_U_Header

SENT = 2000
RATE = 400  # packets per second: the stream lasts five seconds


def test_a_bad_file_reports_every_error_with_its_line(vecgate, tmp_path):
    cfg = tmp_path / "bad.toml"
    cfg.write_text("""[[interface]]
name = "pg0"
type = "pg"
mac = "02:00:00:00:00:01"
addresses = ["198.18.0.300/24"]

[[interface]]
name = "pg1"
type = "pg"
mac = "02:00:00:00:00:02"
addresses = ["198.18.1.1/24"]

[[neighbour]]
interface = "pg1"
ip = "198.18.1.2"
mac = "ff:ff:ff:ff:ff:ff"

[[gtpu_tunnel]]
local = "198.18.1.1"
remote = "198.18.1.9"
teid_in = 256
teid_out = 5

[[gtpu_tunnel]]
local = "198.18.1.1"
remote = "198.18.1.10"
teid_in = 256
teid_out = 6
""")
    r = subprocess.run([str(vecgate), "run", "--config", str(cfg), "--duration", "1", "--socket", str(tmp_path / "s")],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0
    lines = [l for l in r.stderr.splitlines() if "bad.toml" in l]
    # The address first (the interfaces must be right before neighbours and tunnels are checked).
    assert len(lines) == 1 and "interface[0].addresses[0]" in lines[0] and "(line 5)" in lines[0], r.stderr
    assert '"198.18.0.300" is not an IPv4 or IPv6 address' in lines[0] and lines[0].count("expected") == 1, r.stderr
    cfg.write_text(cfg.read_text().replace("198.18.0.300/24", "198.18.0.1/24"))
    r = subprocess.run([str(vecgate), "run", "--config", str(cfg), "--duration", "1", "--socket", str(tmp_path / "s")],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0
    lines = [l for l in r.stderr.splitlines() if "bad.toml" in l]
    assert len(lines) == 2, r.stderr
    assert "neighbour[0].mac" in lines[0] and "broadcast" in lines[0] and "(line 16)" in lines[0], r.stderr
    assert "gtpu_tunnel[1].teid_in" in lines[1] and "already the key of gtpu_tunnel[0]" in lines[1], r.stderr
    assert "(line 27)" in lines[1] and "4294967295" not in r.stderr, r.stderr


def test_gtpu_handover_moves_packets_to_the_new_peer_and_loses_none(vecgate, tmp_path):
    tunnel = """
[[gtpu_tunnel]]
local = "198.18.1.1"
remote = "198.18.1.2"
teid_in = 256
teid_out = 8
ue = "198.18.200.1/32"
"""

    def handover(sock):
        r = ctl(vecgate, sock, "set", "gtpu", "tunnel", "gtpu_tunnel0", "remote", "198.18.1.3", "teid-out", "0x1234")
        assert r.returncode == 0, r.stderr
        assert "remote 198.18.1.2 -> 198.18.1.3" in r.stdout and "0x8 -> 0x1234" in r.stdout, r.stdout
        r = ctl(vecgate, sock, "show", "gtpu", "tunnel", "teid", "256")
        assert r.returncode == 0 and "198.18.1.1 -> 198.18.1.3" in r.stdout and "out 0x1234" in r.stdout, r.stdout

    sent = tunnel_moved_under_paced_traffic(vecgate, tmp_path, "n3", tunnel, "198.18.200.1", SENT, RATE, handover)
    gpdus = [p for p in sent if GTP_U_Header in p]
    assert len(gpdus) == SENT, f"{len(gpdus)} of {SENT} packets encapsulated"
    peers = [(p[IP].dst, p[GTP_U_Header].teid) for p in gpdus]
    old = ("198.18.1.2", 8)
    new = ("198.18.1.3", 0x1234)
    assert one_switch(peers, old, new) > 0
    for p in gpdus:
        inner = p[GTP_U_Header].payload
        assert p[UDP].dport == 2152 and inner[IP].dst == "198.18.200.1" and inner[IP].src == "198.18.0.2"


def test_run_json_prints_rates_one_object_per_line(vecgate, tmp_path):
    r = subprocess.run([str(vecgate), "run", "--json", "--duration", "2.6", "--interval", "0.5", "--socket", str(tmp_path / "s")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) >= 3, r.stdout
    views = [json.loads(l) for l in lines]  # every line is one JSON object
    for v in views[1:]:
        assert 0.4 < v["interval_s"] < 1.5, v["interval_s"]
        pg0 = next(i for i in v["interfaces"] if i["name"] == "pg0")
        assert pg0["rx_pps"] > 0 and pg0["rx_packets"] > 0
        eth = next(n for n in v["nodes"] if n["name"] == "ethernet-input")
        assert eth["cycles_per_packet"] > 0 and 1 <= eth["packets_per_vector"] <= 256
    # Rates, not totals: the totals grow from view to view while each rate is per second.
    totals = [next(i for i in v["interfaces"] if i["name"] == "pg0")["rx_packets"] for v in views]
    assert totals == sorted(totals) and totals[-1] > totals[1]


def test_live_view_fits_100_columns_and_says_why_cycles_differ(vecgate, tmp_path):
    r = subprocess.run([str(vecgate), "run", "--duration", "1.6", "--interval", "0.5", "--socket", str(tmp_path / "s")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    live = r.stdout.split("\nfinal:")[0]
    assert "pkt/s" in live and "Pkts/vec" in live and "vecgate bench" in live, live
    wide = [l for l in live.splitlines() if len(l) > 100]
    assert not wide, wide


def test_without_privileges_it_says_what_to_do(vecgate, tmp_path):
    """As an unprivileged user: the control socket in /run and an af_packet interface are
    refused, each said once with what to do."""
    import os
    import shutil
    import tempfile
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        import pytest
        pytest.skip("needs root to drop to nobody")
    d = Path(tempfile.mkdtemp(prefix="vg-ux-"))
    try:
        os.chmod(d, 0o755)
        cfg = d / "gw.toml"
        cfg.write_text('[[interface]]\nname = "a"\ntype = "af_packet"\nhost_if = "lo"\nmac = "02:00:00:00:00:01"\n'
                       'addresses = ["198.18.0.1/24"]\n')
        os.chmod(cfg, 0o644)
        binary = d / "vecgate"
        shutil.copy(vecgate, binary)
        os.chmod(binary, 0o755)
        r = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", str(binary), "run", "--config",
                            str(cfg), "--duration", "1", "--socket", "/run/vg-ux-test.sock"],
                           capture_output=True, text=True, timeout=30)
    finally:
        shutil.rmtree(d)
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert r.stderr.count("cannot create the control socket: permission denied") == 1, r.stderr
    assert "--socket" in r.stderr
    assert "interface[0].host_if" in r.stderr and "CAP_NET_RAW" in r.stderr and "setcap" in r.stderr, r.stderr
    assert r.stderr.count("CAP_NET_RAW") == 1, r.stderr
