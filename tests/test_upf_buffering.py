"""Downlink buffering in vecgate as a UPF, with scapy's PFCP layer as the SMF (an
independent implementation of TS 29.244) and Linux hosts in network namespaces:
gNB (198.18.7.10) ⇄ n3 — vecgate — n6 ⇄ data network host (198.18.8.2).

A session whose downlink FAR buffers and notifies (BUFF + NOCP, a UE in idle mode):
the data network's packets to the UE are held, the SMF gets one Downlink Data Report
naming the PDR, what does not fit the per-session room is dropped by name; once the
SMF makes the FAR forward toward the gNB's F-TEID, the held packets reach the gNB first,
in the order sent, then the newer ones (scapy dissects every G-PDU). A deleted session's
held packets are freed and counted. tshark reads every PFCP message with no warning."""
import time


from test_pfcp_netns import DN, GNB, UPF_LINKS, UPF_N3, counter, pcap_clean, py, receiver, received, upf_lab

PER_SESSION = 12

CONFIG = UPF_LINKS + f"""
[pfcp]
listen = "127.0.0.1:8805"
n3 = "{UPF_N3}"
ue_pool = "198.19.7.0/24"
allowed_peers = ["127.0.0.1"]
smf_port = 0
buffer_packets = 64
buffer_per_session = {PER_SESSION}
"""

# argv[2] numbered UDP datagrams to the UE argv[1], payload argv[3] + the number, 5 ms
# apart (the order they leave in is the order the gNB must see).
DN_SEND = f"""
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("{DN}", 7200))
for n in range(int(sys.argv[2])):
    s.sendto(f"{{sys.argv[3]}}-{{n}}".encode(), (sys.argv[1], 7300))
    time.sleep(0.005)
"""


def setup(lab, vecgate, tmp_path):
    gnb, _, dn, v, smf = upf_lab(lab, vecgate, tmp_path, config=CONFIG)
    return gnb, dn, v, smf


def held(v):
    return v.ctl("show", "pfcp", "sessions")["data"]["buffered"]


def wait_held(v, want):
    for _ in range(100):
        b = held(v)
        if b["held"] >= want:
            return b
        time.sleep(0.1)
    return b


def test_buffered_downlink_reaches_the_gnb_in_order_after_the_far_forwards(lab, vecgate, tmp_path):
    from scapy.all import IP, UDP
    from scapy.contrib.gtp import GTP_U_Header
    gnb, dn, v, smf = setup(lab, vecgate, tmp_path)
    s = smf("establish", cp_seid=0x81, gnb=GNB, gnb_teid=0x200, buffer=True)
    assert s["cause"] == 1, s
    seid, ue = s["seid"], s["ue"]
    shown = v.ctl("show", "pfcp", "sessions")["data"]["sessions"][0]
    assert shown["downlink"][0]["action"] == "buffer", shown

    # The UE is idle: 15 packets come for it, 12 fit its room, 3 are dropped by name.
    sent = 15
    py(lab, dn, DN_SEND, ue, sent, "held")
    rep = smf("wait_report", timeout=10)
    assert rep is not None and rep["report_type"] == ["DLDR"] and rep["dl_pdrs"] == [2], rep
    b = wait_held(v, PER_SESSION)
    assert b == {"held": PER_SESSION, "capacity": 64, "per_session": PER_SESSION}, b
    assert counter(v, "upf-buffer", "session-buffer-full", sent - PER_SESSION) == sent - PER_SESSION, v.errors()
    assert v.errors().get(("upf-buffer", "held")) == PER_SESSION
    assert smf("wait_report", timeout=1) is None, "one Downlink Data Report for the episode"

    # Service request: the FAR forwards to the gNB's new TEID. The held packets come
    # first, in the order sent, then newer ones.
    r = receiver(lab, gnb, GNB, 2152, seconds=15, count=PER_SESSION + 5)
    assert smf("forward", seid=seid, gnb=GNB, gnb_teid=0x400)["cause"] == 1
    py(lab, dn, DN_SEND, ue, 5, "new")
    got = received(r)
    payloads = []
    for src, d in got:
        g = GTP_U_Header(bytes.fromhex(d))
        assert src == UPF_N3 and g.gtp_type == 255 and g.teid == 0x400, g.show(dump=True)
        assert (g[IP].src, g[IP].dst, g[UDP].dport) == (DN, ue, 7300)
        payloads.append(bytes(g[UDP].payload).decode())
    want = [f"held-{n}" for n in range(PER_SESSION)] + [f"new-{n}" for n in range(5)]
    assert payloads == want, (payloads, v.errors())
    e = v.errors()
    assert e.get(("upf-buffer", "released")) == PER_SESSION, e
    assert held(v)["held"] == 0

    # A second idle session's held packets are freed when it is deleted, counted.
    s2 = smf("establish", cp_seid=0x82, gnb=GNB, gnb_teid=0x201, buffer=True)
    assert s2["cause"] == 1, s2
    py(lab, dn, DN_SEND, s2["ue"], 4, "gone")
    assert wait_held(v, 4)["held"] == 4
    assert smf("wait_report", timeout=10)["dl_pdrs"] == [2]
    assert smf("delete", seid=s2["seid"])["cause"] == 1
    assert counter(v, "upf-buffer", "discarded", 4) == 4, v.errors()
    assert held(v)["held"] == 0
    types = pcap_clean(smf, tmp_path)
    assert types.count("56") == 2 and types.count("57") == 2, types  # the two reports and our answers
