"""vecgate as a UPF answers a G-PDU whose TEID no PFCP session has with a GTP-U Error
Indication (TS 29.281 §7.3.1) to its sender, rate-limited at the `[gtpu]` reply rate,
the rest counted. scapy builds the G-PDUs and dissects the answers, tshark reads them
with no warning (pcap in, pcap out: no session is needed to have no session)."""
import subprocess

from scapy.all import IP, UDP, raw
from scapy.contrib.gtp import GTP_U_Header, GTPHeader

from conftest import tshark_clean, run_pcap
from test_gtpu import from_gnb4, inner4, udp_checksum_ok

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
    p = out1[0]
    assert p[IP].src == "198.18.1.1" and p[IP].dst == "198.18.1.2" and p[UDP].dport == 2152 and udp_checksum_ok(p)
    h = GTPHeader(raw(p[UDP].payload))
    assert h.gtp_type == 26 and h.teid == 0 and h.S == 1
    body = raw(p[UDP].payload)
    # UDP Port extension with the G-PDU's source port, then TEID Data I and GTP-U Peer Address.
    assert body[11] == 0x40 and int.from_bytes(body[13:15], "big") == 40000
    ies = body[16:]
    assert ies[0] == 16 and int.from_bytes(ies[1:5], "big") == 0xabcdef
    assert ies[5] == 133 and int.from_bytes(ies[6:8], "big") == 4 and bytes(ies[8:12]) == bytes([198, 18, 1, 1])
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
