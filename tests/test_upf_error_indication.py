"""vecgate as a UPF answers a G-PDU whose TEID no PFCP session has with a GTP-U Error
Indication (TS 29.281 §7.3.1) to its sender, rate-limited at the `[gtpu]` reply rate,
the rest counted. scapy builds the G-PDUs and dissects the answers, tshark reads them
with no warning (pcap in, pcap out: no session is needed to have no session)."""
import subprocess

from scapy.all import UDP, raw
from scapy.contrib.gtp import GTP_U_Header

from conftest import tshark_clean, run_pcap
from test_gtpu import assert_error_indication, from_gnb4, inner4

UPF = """
[pfcp]
listen = "127.0.0.1:0"
n3 = "198.18.1.1"
ue_pool = "198.19.7.0/24"
"""


def test_unknown_teid_gets_an_error_indication_from_the_upf(vecgate, tmp_path):
    pkts = [from_gnb4(GTP_U_Header(teid=0xabcdef) / inner4(), sport=40000)]
    _, out1, c, _ = run_pcap(vecgate, tmp_path, pkts, UPF)
    assert c[("upf4-uplink", "error-indications-sent")] == 1, c
    assert c.get(("gtpu4-input", "error-indications-sent"), 0) == 0, "the UPF's node answers, once"
    assert len(out1) == 1
    assert_error_indication(out1[0], teid=0xabcdef, sport=40000)
    bad, text = tshark_clean(tmp_path / "out1.pcap")
    assert not bad, text
    v = subprocess.run(["tshark", "-r", str(tmp_path / "out1.pcap"), "-V"], capture_output=True, text=True, timeout=60).stdout
    assert "Message Type: Error indication (0x1a)" in v and "TEID Data I: 0x00abcdef" in v, v[-2000:]


def test_a_burst_of_unknown_teids_is_answered_at_the_reply_rate(vecgate, tmp_path):
    n = 150
    pkts = [from_gnb4(GTP_U_Header(teid=0x9000 + i) / inner4(), sport=40000 + i) for i in range(n)]
    _, out1, c, _ = run_pcap(vecgate, tmp_path, pkts, UPF + "\n[gtpu]\nreplies_per_sec = 10\n")
    sent = c.get(("upf4-uplink", "error-indications-sent"), 0)
    # The bucket's burst (10) and what the rate earned while the burst went through.
    assert 10 <= sent < n, c
    assert sent + c.get(("upf4-uplink", "no-session"), 0) == n, c
    assert len(out1) == sent
    teids = [int.from_bytes(raw(p[UDP].payload)[17:21], "big") for p in out1]
    assert teids == sorted(teids) and teids[:10] == [0x9000 + i for i in range(10)], teids
