"""Buffering Action Rules (BAR, TS 29.244 §5.2.3) in vecgate as a UPF, with scapy's PFCP
layer as the SMF and Linux hosts in network namespaces (the lab of test_upf_buffering.py):
gNB (198.18.7.10) ⇄ n3 — vecgate — n6 ⇄ data network host (198.18.8.2).

The SMF creates a session whose downlink FAR buffers under BAR 1 (Suggested Buffering
Packets Count 4, well below the worker's per-session room of 12): of ten packets to the
idle UE four are held and six dropped under `bar-limit`. The SMF answers the Downlink Data
Report with an Update BAR asking for extended buffering (DL Buffering Duration 60 s, DL
Buffering Suggested Packet Count 7): three more of the next five are held. Once the FAR
forwards, the gNB gets the seven held packets in the order sent (scapy dissects each
G-PDU). scapy reads the BAR features vecgate advertises; tshark reads every PFCP message,
the BAR IEs included, with no warning."""
import time



from test_pfcp_netns import GNB, UPF_N3, counter, pcap_clean, py, receiver, received
from test_upf_buffering import DN_SEND, PER_SESSION, held, setup, wait_held


def hold_limit(v):
    return v.ctl("show", "pfcp", "sessions")["data"]["sessions"][0]["downlink"][0]["hold_limit"]


def test_a_bar_bounds_what_is_held_and_a_report_response_extends_it(lab, vecgate, tmp_path):
    from scapy.all import IP, UDP
    from scapy.contrib.gtp import GTP_U_Header
    gnb, dn, v, smf = setup(lab, vecgate, tmp_path)
    assert {"DDND", "DLBD", "UDBC"} <= set(smf("associate")["features"]), "advertised, as scapy reads them"
    s = smf("establish", cp_seid=0x91, gnb=GNB, gnb_teid=0x200, buffer=True, bar={"delay": 2, "count": 4})
    assert s["cause"] == 1, s
    seid, ue = s["seid"], s["ue"]
    assert hold_limit(v) == 4
    smf("extend_buffering", unit=0, value=30, count=7)  # 30 × 2 s, 7 packets

    # Ten packets for the idle UE: the BAR's four are held, six dropped by name.
    py(lab, dn, DN_SEND, ue, 10, "a")
    assert counter(v, "upf-buffer", "bar-limit", 6) == 6, v.errors()
    assert wait_held(v, 4)["held"] == 4
    assert v.errors().get(("upf-buffer", "session-buffer-full"), 0) == 0
    rep = smf("wait_report", timeout=10)
    assert rep is not None and rep["report_type"] == ["DLDR"] and rep["dl_pdrs"] == [2], rep

    # The report's answer asked for extended buffering of up to 7 packets.
    for _ in range(100):
        if hold_limit(v) == 7:
            break
        time.sleep(0.1)
    assert hold_limit(v) == 7
    py(lab, dn, DN_SEND, ue, 5, "b")
    assert counter(v, "upf-buffer", "bar-limit", 8) == 8, v.errors()
    assert wait_held(v, 7)["held"] == 7
    assert smf("wait_report", timeout=1) is None, "no second report while buffering is extended"

    # Service request: the held ones reach the gNB in the order sent.
    r = receiver(lab, gnb, GNB, 2152, seconds=15, count=7)
    assert smf("forward", seid=seid, gnb=GNB, gnb_teid=0x400)["cause"] == 1
    payloads = []
    for src, d in received(r):
        g = GTP_U_Header(bytes.fromhex(d))
        assert src == UPF_N3 and g.gtp_type == 255 and g.teid == 0x400, g.show(dump=True)
        assert g[IP].dst == ue and g[UDP].dport == 7300
        payloads.append(bytes(g[UDP].payload).decode())
    assert payloads == [f"a-{n}" for n in range(4)] + [f"b-{n}" for n in range(3)], (payloads, v.errors())
    assert held(v)["held"] == 0 and held(v)["per_session"] == PER_SESSION
    types = pcap_clean(smf, tmp_path)
    assert types.count("56") == 1 and types.count("57") == 1, types
