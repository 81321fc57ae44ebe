"""vecgate as a UPF driven over PFCP (N4) by an SMF built on scapy's PFCP layer
(tests/pfcp_smf.py): association, heartbeats both ways, association update, a session with
uplink and downlink PDRs installed in the UPF tables (`show pfcp sessions`), handover to
another gNB, deletion, release, and malformed requests answered with the right Cause and
Offending IE. Every message either side sent is then dissected by tshark, which must find
nothing malformed."""
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from pfcp_smf import Smf, all_ies, ies  # noqa: E402
from scapy.all import raw  # noqa: E402
from scapy.contrib.pfcp import (PFCP, PFCPSessionEstablishmentRequest, PFCPSessionModificationRequest, IE_CreatePDR,  # noqa: E402
                                IE_FAR_Id, IE_NodeId, IE_PDI, IE_PDR_Id, IE_Precedence, IE_SDF_Filter, IE_SourceInterface,
                                IE_UE_IP_Address)

ROOT = Path(__file__).resolve().parent.parent
GNB, GNB2 = "198.18.7.10", "198.18.7.11"


def free_udp_port():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.fixture
def upf(vecgate, tmp_path, request):
    """docs/examples/upf.toml on a free port, with its own control socket; a test's
    indirect parameter, when it has one, is the heartbeat interval in seconds."""
    yield from run_upf(vecgate, tmp_path, heartbeat=getattr(request, "param", None))


def run_upf(vecgate, tmp_path, pfcp_extra="", heartbeat=None):
    """Runs docs/examples/upf.toml with `pfcp_extra` lines added to its [pfcp] section
    (the file's last) and the heartbeat interval `heartbeat` (seconds) if given; yields
    the PFCP port and the control socket."""
    port = free_udp_port()
    sock = tmp_path / "upf.sock"
    text = (ROOT / "docs/examples/upf.toml").read_text()
    if heartbeat is not None:
        assert "heartbeat_interval = 10.0" in text
        text = text.replace("heartbeat_interval = 10.0", f"heartbeat_interval = {heartbeat}")
    text = text.replace('listen = "127.0.0.1:8805"', f'listen = "127.0.0.1:{port}"')
    text = text.replace('socket = "/tmp/vecgate-upf.sock"', f'socket = "{sock}"')
    assert f":{port}" in text and str(sock) in text
    cfg = tmp_path / "upf.toml"
    assert text.rstrip().splitlines()[-1].startswith("allowed_peers"), "[pfcp] is the last section"
    text = text.rstrip() + "\n" + pfcp_extra
    cfg.write_text(text + '\n[[neighbour]]\ninterface = "n3"\nip = "198.18.7.11"\nmac = "02:00:00:00:07:11"\n')
    proc = subprocess.Popen([str(vecgate), "run", "--config", str(cfg), "--duration", "60", "--interval", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 10
    while not sock.exists() and time.time() < deadline:
        time.sleep(0.05)
    assert sock.exists(), proc.stderr.read() if proc.poll() is not None else "no control socket"
    # The control socket is bound before the dataplane (and its PFCP socket) is built; a
    # request answered means the control loop runs and PFCP listens.
    r = subprocess.run([str(vecgate), "ctl", "--socket", str(sock), "show", "runtime"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    try:
        yield port, sock
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def ctl(vecgate, sock, *words):
    r = subprocess.run([str(vecgate), "ctl", "--socket", str(sock), "--json", *words], capture_output=True, text=True, timeout=20)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def tshark_clean(smf, tmp_path, port):
    """tshark dissects every message as PFCP with no malformed packet and no expert warning."""
    pcap = tmp_path / "n4.pcap"
    smf.write_pcap(pcap)
    out = subprocess.run(["tshark", "-r", str(pcap), "-d", f"udp.port=={port},pfcp", "-V"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "Malformed" not in text, text[-3000:]
    for bad in ("[Expert Info (Warning", "[Expert Info (Error"):
        assert bad not in text, text[text.index(bad) - 2000: text.index(bad) + 500]
    n = subprocess.run(["tshark", "-r", str(pcap), "-d", f"udp.port=={port},pfcp", "-Y", "pfcp", "-T", "fields", "-e", "pfcp.msg_type"],
                       capture_output=True, text=True, timeout=60).stdout.split()
    assert len(n) == len(smf.log), (n, len(smf.log))
    return n


def test_association_session_handover_deletion(vecgate, upf, tmp_path):
    port, sock = upf
    smf = Smf("127.0.0.1", port)
    r = smf.associate()
    i = ies(r)
    assert i["IE_Cause"].cause == 1
    assert i["IE_NodeId"].ipv4 == "127.0.0.1"
    f = i["IE_UPFunctionFeatures"]
    assert f.FTUP == 1 and f.EMPU == 1, f.show(dump=True)
    hb = smf.heartbeat()
    assert ies(hb)["IE_RecoveryTimeStamp"].timestamp == i["IE_RecoveryTimeStamp"].timestamp
    assoc = ctl(vecgate, sock, "show", "pfcp", "associations")["data"]["associations"]
    assert [(a["node_id"], a["state"]) for a in assoc] == [("127.0.0.1", "up")]

    r = smf.establish(0x1001, GNB, 0x200)
    assert r.seid == 0x1001, "the response carries the SMF's SEID"
    i = ies(r)
    assert i["IE_Cause"].cause == 1
    up_seid = i["IE_FSEID"].seid
    created = {ies_of(c)["IE_PDR_Id"].id: ies_of(c) for c in all_ies(r, "IE_CreatedPDR")}
    fteid = created[1]["IE_FTEID"]
    assert fteid.ipv4 == "198.18.7.2" and fteid.TEID != 0
    ue = created[2]["IE_UE_IP_Address"].ipv4
    assert ue.startswith("198.19.7."), ue
    sessions = ctl(vecgate, sock, "show", "pfcp", "sessions")["data"]
    assert sessions["total"] == 1 and sessions["sessions"][0]["seid"] == up_seid
    s = sessions["sessions"][0]
    assert s["installed"] and s["ue"] == [ue], s
    assert [(u["teid"], u["action"], u["peer"]) for u in s["uplink"]] == [(fteid.TEID, "forward", None)], s
    assert [(d["action"], d["peer"], d["teid_out"], d["qfi_out"]) for d in s["downlink"]] == [("forward", GNB, 0x200, 9)], s
    assert ctl(vecgate, sock, "show", "gtpu", "tunnels")["data"]["tunnels"] == [], "a session is no tunnel"

    r = smf.handover(up_seid, GNB2, 0x300)
    assert ies(r)["IE_Cause"].cause == 1
    s = ctl(vecgate, sock, "show", "pfcp", "sessions")["data"]["sessions"][0]
    assert [(d["peer"], d["teid_out"]) for d in s["downlink"]] == [(GNB2, 0x300)], s
    assert [u["teid"] for u in s["uplink"]] == [fteid.TEID], s

    r = smf.delete(up_seid)
    assert ies(r)["IE_Cause"].cause == 1
    assert ctl(vecgate, sock, "show", "pfcp", "sessions")["data"]["total"] == 0
    r = smf.release()
    assert ies(r)["IE_Cause"].cause == 1
    assert ctl(vecgate, sock, "show", "pfcp", "associations")["data"]["associations"] == []
    types = tshark_clean(smf, tmp_path, port)
    assert types == ["5", "6", "1", "2", "50", "51", "52", "53", "54", "55", "9", "10"], types


def ies_of(grouped):
    out = {}
    for ie in grouped.IE_list:
        out.setdefault(type(ie).__name__, ie)
    return out


def test_malformed_requests_get_the_right_cause(vecgate, upf, tmp_path):
    port, sock = upf
    smf = Smf("127.0.0.1", port)
    # Before any association: No established PFCP Association (72).
    r = smf.establish(0x2001, GNB, 0x200)
    assert ies(r)["IE_Cause"].cause == 72
    smf.associate()
    # No F-SEID: Mandatory IE missing (66), Offending IE = F-SEID (57).
    r = smf.request(PFCPSessionEstablishmentRequest(IE_list=[smf.node_id()]), seid=0)
    i = ies(r)
    assert (i["IE_Cause"].cause, i["IE_OffendingIE"].type) == (66, 57)
    # A Node ID whose length runs past the message: Invalid length (68), naming Node ID (60).
    smf.seq += 1
    body = raw(PFCP(version=1, S=1, seid=0, seq=smf.seq) / PFCPSessionEstablishmentRequest(IE_list=[IE_NodeId(id_type=0, ipv4="127.0.0.1")]))
    body = body[:18] + (200).to_bytes(2, "big") + body[20:]
    smf.send_raw(body)
    r = smf.recv()
    assert r.seq == smf.seq
    i = ies(r)
    assert (i["IE_Cause"].cause, i["IE_OffendingIE"].type) == (68, 60)
    # A session the UPF does not know: Session context not found (65).
    r = smf.delete(0xdead)
    assert ies(r)["IE_Cause"].cause == 65 and r.seid == 0
    # PFCP version 2: Version Not Supported Response (11) with our sequence number.
    smf.seq += 1
    v2 = bytearray(raw(PFCP(version=1, S=0, seq=smf.seq) / b""))
    v2[0] = (2 << 5)
    smf.send_raw(bytes(v2))
    r = smf.recv()
    assert (r.message_type, r.seq) == (11, smf.seq)
    # The three that could not be parsed (no F-SEID, the bad length, version 2) are
    # counted where an operator looks: show pfcp associations and the metrics.
    a = ctl(vecgate, sock, "show", "pfcp", "associations")
    assert a["data"]["stats"]["malformed"] == 3, a
    assert "malformed 3" in a["text"], a["text"]
    metrics = subprocess.run([str(vecgate), "ctl", "--socket", str(sock), "show", "metrics"], capture_output=True, text=True, timeout=20).stdout
    assert 'vecgate_pfcp_total{counter="malformed"} 3' in metrics, metrics
    assert 'vecgate_table_entries{table="pfcp_associations"} 1' in metrics, metrics
    # The last two requests are not PFCP tshark can read without complaint; the answers are.
    smf.log = [m for m in smf.log if m[0] != bytes(v2) and m[0] != body]
    tshark_clean(smf, tmp_path, port)


def test_sessions_the_dataplane_cannot_hold_are_refused(vecgate, tmp_path):
    """With room for one session, a second is refused with No resources available (75)
    and leaves nothing behind; a modification adding an SDF filter the dataplane does not
    compile is refused with Rule creation/modification failure (73) naming the SDF Filter
    (23), the session's rules unchanged; the first session is still installed and deleted
    with its usage; then a new session fits again."""
    gen = run_upf(vecgate, tmp_path, "max_sessions = 1\n")
    port, sock = next(gen)
    try:
        smf = Smf("127.0.0.1", port)
        smf.associate()
        r = smf.establish(0x3001, GNB, 0x200)
        assert ies(r)["IE_Cause"].cause == 1
        first = ies(r)["IE_FSEID"].seid
        installed = ctl(vecgate, sock, "show", "pfcp", "sessions")["data"]["sessions"]
        r = smf.establish(0x3002, GNB, 0x201)
        i = ies(r)
        assert i["IE_Cause"].cause == 75 and "IE_FSEID" not in i, r.show(dump=True)
        assert r.seid == 0x3002
        assert ctl(vecgate, sock, "show", "pfcp", "sessions")["data"]["sessions"] == installed
        ue = installed[0]["ue"][0]
        deny = IE_CreatePDR(IE_list=[
            IE_PDR_Id(id=5), IE_Precedence(precedence=10),
            IE_PDI(IE_list=[IE_SourceInterface(interface=1), IE_UE_IP_Address(V4=1, SD=1, ipv4=ue),
                            IE_SDF_Filter(FD=1, flow_description="deny out ip from any to assigned")]),
            IE_FAR_Id(id=2)])
        r = smf.request(PFCPSessionModificationRequest(IE_list=[deny]), seid=first)
        i = ies(r)
        assert (i["IE_Cause"].cause, i["IE_OffendingIE"].type) == (73, 23), r.show(dump=True)
        # TS 29.244 Table 7.5.5.1-1: with 73 the Failed Rule ID names the rule (PDR 5).
        assert (i["IE_FailedRuleId"].type, i["IE_FailedRuleId"].pdr_id) == (0, 5), r.show(dump=True)
        assert ctl(vecgate, sock, "show", "pfcp", "sessions")["data"]["sessions"] == installed
        assert installed[0]["installed"] and installed[0]["seid"] == first
        r = smf.delete(first)
        assert ies(r)["IE_Cause"].cause == 1 and all_ies(r, "IE_UsageReport_SDR"), r.show(dump=True)
        r = smf.establish(0x3003, GNB, 0x202)
        assert ies(r)["IE_Cause"].cause == 1
        tshark_clean(smf, tmp_path, port)
    finally:
        gen.close()


@pytest.mark.parametrize("upf", [0.2], indirect=True)
def test_upf_heartbeat_request_and_association_update_response(vecgate, upf, tmp_path):
    """The messages only the UPF starts or only an Association Update draws: its own
    Heartbeat Request (every heartbeat_interval, 0.2 s here) and the Association Update
    Response, dissected by tshark like the rest."""
    port, _ = upf
    smf = Smf("127.0.0.1", port)
    rts = ies(smf.associate())["IE_RecoveryTimeStamp"].timestamp
    r = smf.update_association()
    assert r.message_type == 8 and ies(r)["IE_Cause"].cause == 1, r.show(dump=True)
    hb = smf.wait_heartbeat(timeout=10)
    assert hb is not None, "no Heartbeat Request from the UPF"
    assert ies(hb)["IE_RecoveryTimeStamp"].timestamp == rts
    sent_by_upf = [PFCP(data).message_type for data, src, _ in smf.log if src[1] == port]
    assert 1 in sent_by_upf and 8 in sent_by_upf, sent_by_upf
    types = tshark_clean(smf, tmp_path, port)
    assert types[:2] == ["5", "6"] and {"1", "2", "7", "8"} <= set(types), types
