"""Time-based usage reporting in vecgate as a UPF, with scapy's PFCP layer as the SMF and
Linux hosts in network namespaces (the set-up of tests/test_upf_buffering.py).

A URR measuring volume and duration with a Measurement Period of 1 s: the UPF sends
periodic usage reports (trigger PERIO) whose Start Time / End Time tile the time with no
gap, each with its Duration Measurement; the uplink bytes sent are reported once, over
the periodic reports and the deletion's final one. tshark reads every PFCP message with
no warning."""


from test_pfcp_netns import DN, GNB_SEND_N, pcap_clean, py, receiver, received
from test_upf_buffering import setup

GNB = "198.18.7.10"


def test_a_measurement_period_sends_periodic_usage_reports(lab, vecgate, tmp_path):
    gnb, dn, v, smf = setup(lab, vecgate, tmp_path)
    s = smf("establish", cp_seid=0x91, gnb=GNB, gnb_teid=0x200, period=1)
    assert s["cause"] == 1, s
    r = receiver(lab, dn, "0.0.0.0", 7200, seconds=20, count=5)
    py(lab, gnb, GNB_SEND_N, s["teid"], s["ue"], 5, 300)
    assert len(received(r)) == 5, v.errors()

    reports = [smf("wait_report", timeout=10) for _ in range(4)]
    assert all(rep is not None and rep["report_type"] == ["USAR"] for rep in reports), reports
    usage = [rep["usage"][0] for rep in reports]
    times = [rep["times"][0] for rep in reports]
    assert all(u["triggers"] == ["PERIO"] for u in usage), usage
    for t in times:
        assert None not in (t["duration"], t["start"], t["end"]), t
        # Whole seconds, each rounded down: the traffic time is at most the window.
        assert t["duration"] <= t["end"] - t["start"] + 1, t
    # Time is measured continuously once traffic started: the last window is all traffic time.
    assert abs((times[-1]["end"] - times[-1]["start"]) - times[-1]["duration"]) <= 1, times
    # Each report measures from the end of the one before: no gap, no overlap.
    assert all(b["start"] == a["end"] for a, b in zip(times, times[1:])), times
    assert all(u["downlink"] == 0 for u in usage), usage

    d = smf("delete", seid=s["seid"])
    assert d["cause"] == 1 and d["usage"][0]["triggers"] == ["TERMR"], d
    assert sum(u["uplink"] for u in usage) + d["usage"][0]["uplink"] == 5 * 300, (usage, d)
    types = pcap_clean(smf, tmp_path)
    assert types.count("56") >= 4, types
