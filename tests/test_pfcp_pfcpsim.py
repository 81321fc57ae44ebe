"""vecgate as the UPF of pfcpsim (omec-project v1.4.4, an SMF simulator in Go built on
go-pfcp: an implementation independent of ours and of scapy). Network namespaces: the SMF
(198.18.7.1) reaches vecgate's PFCP socket (198.18.7.2:8805) over a kernel veth; vecgate's
N3 address is 198.18.9.2 on an interface of its own. pfcpsim associates, creates two
sessions (2 PDRs, 2 FARs, 2 URRs, 3 QERs each, its own F-TEIDs), modifies them toward a
gNB, deletes them and releases the association; each step must succeed on pfcpsim's side
and be seen in `show pfcp`. pfcpsim is built by tests/pfcpsim/build.sh (Go module proxy);
without Go the test is skipped."""
import subprocess
import time
from pathlib import Path

import pytest

from netns import Vecgate

HERE = Path(__file__).resolve().parent
BIN = Path.home() / ".cache" / "vecgate-pfcpsim"

CONFIG = """
[[interface]]
name = "n3"
type = "null"
mac = "02:00:00:00:09:02"
addresses = ["198.18.9.2/24"]

[[neighbour]]
interface = "n3"
ip = "198.18.9.10"
mac = "02:00:00:00:09:10"

[pfcp]
listen = "198.18.7.2:8805"
n3 = "198.18.9.2"
allowed_peers = ["198.18.7.1"]
"""


@pytest.fixture(scope="module")
def pfcpsim():
    r = subprocess.run([str(HERE / "pfcpsim" / "build.sh"), str(BIN)], capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        pytest.skip(f"pfcpsim not built: {r.stderr.strip()[-300:]}")
    return BIN


def test_pfcpsim_drives_vecgate(lab, vecgate, pfcpsim, tmp_path):
    smf, upf = lab.ns("smf"), lab.dataplane_ns("upf")
    lab.veth(smf, "s0", upf, "u0")
    lab.run(smf, "ip", "addr", "add", "198.18.7.1/24", "dev", "s0")
    lab.run(upf, "ip", "addr", "add", "198.18.7.2/24", "dev", "u0")
    v = Vecgate(lab, vecgate, upf, CONFIG, tmp_path, name="upf")
    sim_log = open(tmp_path / "pfcpsim.log", "w")
    lab.spawn_to(smf, sim_log, str(pfcpsim / "pfcpsim"), "--interface", "s0")
    time.sleep(2)

    def ctl(*args):
        r = lab.run(smf, str(pfcpsim / "pfcpctl"), "-s", "localhost:54321", *args, timeout=60, check=False)
        assert r.returncode == 0, (args, r.stdout, r.stderr, (tmp_path / "pfcpsim.log").read_text()[-2000:])
        return r.stdout + r.stderr

    ctl("service", "configure", "--remote-peer-addr", "198.18.7.2", "--n3-addr", "198.18.9.2")
    ctl("service", "associate")
    assert [a["node_id"] for a in v.ctl("show", "pfcp", "associations")["data"]["associations"]] == ["198.18.7.1"]
    ue = ["--ue-pool", "198.19.7.0/24", "--gnb-addr", "198.18.9.10"]
    ctl("session", "create", "--count", "2", "--baseID", "1", *ue, "--app-filter", "udp:198.19.0.0/16:80-88:allow:100", "--qfi", "9")
    s = v.ctl("show", "pfcp", "sessions")["data"]
    assert s["total"] == 2, s
    assert all((r["pdrs"], r["fars"], r["urrs"], r["qers"]) == (2, 2, 2, 3) for r in s["sessions"]), s
    ctl("session", "modify", "--count", "2", "--baseID", "1", *ue)
    s = v.ctl("show", "pfcp", "sessions")["data"]
    # pfcpsim's F-TEIDs: TEID = session id (1, then 11); the modification points the
    # downlink at the gNB.
    assert all(r["installed"] for r in s["sessions"]), s
    assert sorted(u["teid"] for r in s["sessions"] for u in r["uplink"]) == [1, 11], s
    assert {(d["action"], d["peer"]) for r in s["sessions"] for d in r["downlink"]} == {("forward", "198.18.9.10")}, s
    ctl("session", "delete", "--count", "2", "--baseID", "1")
    assert v.ctl("show", "pfcp", "sessions")["data"]["total"] == 0
    ctl("service", "disassociate")
    assert v.ctl("show", "pfcp", "associations")["data"]["associations"] == []
    sim_log.flush()
    log = (tmp_path / "pfcpsim.log").read_text()
    assert "2 sessions deleted" in log or "sessions deleted" in log, log[-2000:]
