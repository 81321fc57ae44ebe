"""GTP-U traffic both ways through vecgate as a UPF set up over PFCP, between Linux hosts
in network namespaces: gNB (198.18.7.10) ⇄ n3 — vecgate — n6 ⇄ data network host
(198.18.8.2). scapy's PFCP layer plays the SMF on vecgate's loopback (tests/pfcp_smf.py);
scapy builds the uplink G-PDUs and dissects the downlink ones; the data network host uses
plain sockets. Then a handover moves the downlink to a second gNB address."""
import json
import sys
import time
from pathlib import Path

import pytest

from netns import Lab, Vecgate

HERE = Path(__file__).resolve().parent
UPF_N3, UPF_N6, GNB, GNB2, DN = "198.18.7.2", "198.18.8.1", "198.18.7.10", "198.18.7.11", "198.18.8.2"
COUNT = 20

CONFIG = f"""
[[interface]]
name = "n3"
type = "af_packet"
host_if = "n3"
mac = "02:00:00:00:07:02"
addresses = ["{UPF_N3}/24"]

[[interface]]
name = "n6"
type = "af_packet"
host_if = "n6"
mac = "02:00:00:00:08:01"
addresses = ["{UPF_N6}/24"]

[pfcp]
listen = "127.0.0.1:8805"
n3 = "{UPF_N3}"
ue_pool = "198.19.7.0/24"
allowed_peers = ["127.0.0.1"]
"""

# The SMF, run inside vecgate's namespace: associate, one session, print what was chosen.
SMF = """
import json, sys
from pfcp_smf import Smf, all_ies, ies
smf = Smf("127.0.0.1", 8805)
assert ies(smf.associate())["IE_Cause"].cause == 1
r = smf.establish(0x77, sys.argv[1], 0x200)
i = ies(r)
assert i["IE_Cause"].cause == 1, r.show(dump=True)
out = {"seid": i["IE_FSEID"].seid}
for c in all_ies(r, "IE_CreatedPDR"):
    for ie in c.IE_list:
        if type(ie).__name__ == "IE_FTEID":
            out["teid"] = ie.TEID
        if type(ie).__name__ == "IE_UE_IP_Address":
            out["ue"] = ie.ipv4
if len(sys.argv) > 2:
    assert ies(smf.handover(out["seid"], sys.argv[2], 0x300))["IE_Cause"].cause == 1
print(json.dumps(out))
"""

# Uplink sender on the gNB: COUNT G-PDUs with TEID argv[1], inner UE → DN UDP 7200.
GNB_SEND = f"""
import socket, sys, time
from scapy.all import IP, UDP, raw
from scapy.contrib.gtp import GTP_U_Header
teid, ue = int(sys.argv[1]), sys.argv[2]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("{GNB}", 2152))
for n in range({COUNT}):
    s.sendto(raw(GTP_U_Header(teid=teid) / IP(src=ue, dst="{DN}") / UDP(sport=7300, dport=7200) / f"up-{{n}}".encode()), ("{UPF_N3}", 2152))
    time.sleep(0.01)
"""

# A UDP receiver: prints the JSON list of (source, payload) it got within a few seconds.
RECV = """
import json, socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], int(sys.argv[2])))
s.settimeout(0.5)
print("READY", flush=True)
got, end = [], time.time() + float(sys.argv[3])
while time.time() < end and len(got) < int(sys.argv[4]):
    try:
        d, a = s.recvfrom(65536)
        got.append([a[0], d.hex()])
    except socket.timeout:
        pass
print(json.dumps(got))
"""

DN_SEND = f"""
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("{DN}", 7200))
for n in range({COUNT}):
    s.sendto(f"down-{{n}}".encode(), (sys.argv[1], 7300))
    time.sleep(0.01)
"""


@pytest.fixture
def lab():
    l = Lab()
    yield l
    l.close()


def py(lab, ns, code, *args, timeout=30):
    r = lab.run(ns, "env", f"PYTHONPATH={HERE}", sys.executable, "-c", code, *map(str, args), timeout=timeout)
    return r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""


def receiver(lab, ns, addr, port, seconds=8, count=COUNT):
    p = lab.spawn(ns, sys.executable, "-c", RECV, addr, str(port), str(seconds), str(count))
    assert p.stdout.readline().strip() == "READY"
    return p


def received(p):
    out, err = p.communicate(timeout=30)
    return json.loads(out.strip().splitlines()[-1])


def test_gtpu_both_ways_through_a_pfcp_session(lab, vecgate, tmp_path):
    from scapy.all import IP, UDP
    from scapy.contrib.gtp import GTP_U_Header
    gnb, upf, dn = lab.ns("gnb"), lab.dataplane_ns("upf"), lab.ns("dn")
    lab.veth(gnb, "g0", upf, "n3")
    lab.veth(dn, "d0", upf, "n6")
    lab.run(gnb, "ip", "addr", "add", f"{GNB}/24", "dev", "g0")
    lab.run(gnb, "ip", "addr", "add", f"{GNB2}/24", "dev", "g0")
    lab.run(dn, "ip", "addr", "add", f"{DN}/24", "dev", "d0")
    lab.run(dn, "ip", "route", "add", "198.19.0.0/16", "via", UPF_N6)
    v = Vecgate(lab, vecgate, upf, CONFIG, tmp_path, name="upf")
    # Neighbours learned both ways before the counted traffic.
    lab.run(gnb, "ping", "-c", "2", "-i", "0.2", "-W", "1", UPF_N3, check=False)
    lab.run(dn, "ping", "-c", "2", "-i", "0.2", "-W", "1", UPF_N6, check=False)

    s = json.loads(py(lab, upf, SMF, GNB))
    teid, ue = s["teid"], s["ue"]
    assert teid and ue.startswith("198.19.7."), s
    sessions = v.ctl("show", "pfcp", "sessions")["data"]
    assert sessions["total"] == 1 and sessions["sessions"][0]["tunnel"], sessions

    # Uplink: G-PDUs with the chosen TEID come out of n6 as plain UDP from the UE.
    r = receiver(lab, dn, "0.0.0.0", 7200)
    py(lab, gnb, GNB_SEND, teid, ue)
    up = received(r)
    assert len(up) == COUNT, (up, v.errors())
    assert {a for a, _ in up} == {ue}
    assert sorted(bytes.fromhex(d).decode() for _, d in up) == sorted(f"up-{n}" for n in range(COUNT))

    # Downlink: UDP to the UE reaches the gNB in GTP-U with the gNB's TEID.
    r = receiver(lab, gnb, GNB, 2152)
    py(lab, dn, DN_SEND, ue)
    down = received(r)
    assert len(down) == COUNT, (down, v.errors())
    for src, d in down:
        assert src == UPF_N3
        g = GTP_U_Header(bytes.fromhex(d))
        assert g.teid == 0x200 and g.gtp_type == 255, g.show(dump=True)
        inner = g[IP]
        assert (inner.src, inner.dst, inner[UDP].dport) == (DN, ue, 7300)
    e = v.errors()
    assert e.get(("gtpu4-input", "decapsulated"), 0) >= COUNT, e
    assert e.get(("gtpu4-encap", "encapsulated"), 0) >= COUNT, e


def test_handover_moves_the_downlink_to_the_new_gnb(lab, vecgate, tmp_path):
    from scapy.all import IP
    from scapy.contrib.gtp import GTP_U_Header
    gnb, upf, dn = lab.ns("gnb"), lab.dataplane_ns("upf"), lab.ns("dn")
    lab.veth(gnb, "g0", upf, "n3")
    lab.veth(dn, "d0", upf, "n6")
    lab.run(gnb, "ip", "addr", "add", f"{GNB}/24", "dev", "g0")
    lab.run(gnb, "ip", "addr", "add", f"{GNB2}/24", "dev", "g0")
    lab.run(dn, "ip", "addr", "add", f"{DN}/24", "dev", "d0")
    lab.run(dn, "ip", "route", "add", "198.19.0.0/16", "via", UPF_N6)
    v = Vecgate(lab, vecgate, upf, CONFIG, tmp_path, name="upf")
    lab.run(gnb, "ping", "-c", "2", "-i", "0.2", "-W", "1", UPF_N3, check=False)
    lab.run(gnb, "ping", "-c", "2", "-i", "0.2", "-W", "1", "-I", GNB2, UPF_N3, check=False)  # vecgate learns GNB2 too
    lab.run(dn, "ping", "-c", "2", "-i", "0.2", "-W", "1", UPF_N6, check=False)
    s = json.loads(py(lab, upf, SMF, GNB, GNB2))  # established toward GNB, then moved to GNB2
    old, new = receiver(lab, gnb, GNB, 2152), receiver(lab, gnb, GNB2, 2152)
    py(lab, dn, DN_SEND, s["ue"])
    got_new, got_old = received(new), received(old)
    assert len(got_new) == COUNT, (got_new, v.errors())
    assert all(GTP_U_Header(bytes.fromhex(d)).teid == 0x300 and GTP_U_Header(bytes.fromhex(d))[IP].dst == s["ue"] for _, d in got_new)
    # No G-PDU to the old gNB (End Markers are not sent yet: asked for, listed, not mapped).
    assert [d for _, d in got_old if GTP_U_Header(bytes.fromhex(d)).gtp_type == 255] == []
    recent = v.ctl("show", "pfcp", "sessions", json_out=False)
    assert "End Marker" in recent, recent
