"""`show lb sessions` on live connections: Linux TCP clients in a namespace connect to a
ClusterIP through vecgate (af_packet) to three backend namespaces; every connection's
row names the backend that answered it (the backends say who they are), the client's
address, the service address and the node's address the backend saw."""
from collections import Counter


from netns import Vecgate
from test_lb_netns import BACKENDS, VIP, client, config, serve_all, topology


def test_sessions_list_each_connection_with_its_backend(lab, vecgate, tmp_path):
    c, g, bes = topology(lab)
    gw = Vecgate(lab, vecgate, g, config(), tmp_path)
    serve_all(lab, c, bes)
    assert gw.ctl("show", "lb", "sessions")["data"] == {"sessions": [], "total": 0}

    r = client(lab, c, "who", VIP, 80, 24)
    answered = Counter(BACKENDS[int(a.split()[0][2:])] for a in r["answers"])
    d = gw.ctl("show", "lb", "sessions", "limit", "1000")["data"]
    assert d["total"] == 24 == len(d["sessions"]), d
    rows = d["sessions"]
    assert Counter(s["backend"] for s in rows) == answered
    for s in rows:
        assert (s["client"], s["vip"], s["vip_port"], s["protocol"]) == ("198.18.0.2", VIP, 80, 6), s
        assert (s["backend_port"], s["source"]) == (8080, "198.19.1.1"), s
        # The connections were closed: each ages out on its closing timeout (FIN seen,
        # 120 s) or its reset timeout (RST seen, 10 s). Linux answers a segment that
        # arrives after its socket is gone (a FIN the server retransmits because the
        # client's ACK came late on a loaded machine) with a RST, so either can be right.
        limit = {"closing": 120_000, "reset": 10_000}
        assert s["state"] in limit and 0 < s["expires_in_ms"] <= limit[s["state"]], s
    assert len({s["client_port"] for s in rows}) == 24

    # Bounded: 5 rows, the total still counted; by service; refusals name the field.
    d = gw.ctl("show", "lb", "sessions", "service", "default/web", "limit", "5")["data"]
    assert (len(d["sessions"]), d["total"]) == (5, 24)
    text = gw.ctl("show", "lb", "sessions", "limit", "2", json_out=False)
    assert "default/web" in text and "2 of 24 connections" in text, text
    import subprocess
    for words, want in ((["service", "nope"], 'service "nope": no such service'),
                        (["limit", "100001"], "limit: 100001: expected at most 100000"),
                        (["limit", "x"], 'limit "x": expected a number of rows')):
        p = subprocess.run([gw.bin, "ctl", "--socket", gw.sock, "show", "lb", "sessions", *words], capture_output=True, text=True)
        assert p.returncode != 0 and want in p.stderr, p.stderr

    # The service deleted and another added, which takes its id: the old connections live
    # on until they expire, but they are not the new service's.
    gw.ctl("lb", "service", "del", "default/web")
    gw.ctl("lb", "service", "add", "default/other", "cluster_ip", "198.18.128.99", "81", "udp")
    rows = {s["id"]: s["name"] for s in gw.ctl("show", "lb", "services")["data"]}
    assert list(rows.values()) == ["default/other"], rows
    assert gw.ctl("show", "lb", "sessions")["data"]["total"] == 24
    assert gw.ctl("show", "lb", "sessions", "service", "default/other")["data"] == {"sessions": [], "total": 0}
    text = gw.ctl("show", "lb", "sessions", "limit", "2", json_out=False)
    assert "(deleted)" in text and "default/other" not in text, text
    assert gw.stop()[0] == 0
