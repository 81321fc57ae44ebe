"""The Prometheus endpoint: a running instance scraped over HTTP, the text parsed by the
`prometheus_client` package's OpenMetrics parser (an independent implementation), and
the figures checked against what the gateway is doing."""
import json
import re
import socket
import subprocess
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from test_ctl import ctl


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def scrape(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.headers.get("Content-Type", ""), r.read().decode()


def samples(text):
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def start_default_gateway(vecgate, tmp_path, *extra):
    """The built-in default gateway with its metrics endpoint: (process, metrics URL, socket)."""
    sock, port = tmp_path / "vg.sock", free_port()
    proc = subprocess.Popen([str(vecgate), "run", "--duration", "30", "--interval", "0", "--socket", str(sock),
                             "--metrics", f"127.0.0.1:{port}", *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.time() + 10
    while not sock.exists() and time.time() < deadline:
        time.sleep(0.05)
    assert sock.exists(), "control socket did not appear"
    # The socket is bound first, the metrics listener after the dataplane is built.
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.05)
    return proc, f"http://127.0.0.1:{port}/metrics", sock


def stop(proc):
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture
def metrics_instance(vecgate, tmp_path):
    """The default gateway, counting per tunnel (`--tunnel-counters`; off by default)."""
    proc, url, sock = start_default_gateway(vecgate, tmp_path, "--tunnel-counters")
    yield url, sock
    stop(proc)


def test_per_tunnel_counters_are_off_by_default_and_the_gateway_says_so(vecgate, tmp_path):
    """Without `tunnel_counters`, the default gateway's tunnels carry traffic but nothing
    is counted per tunnel: no tunnel series in the scrape (a gauge says counting is off),
    and the tunnel listings say so instead of showing counts."""
    proc, url, sock = start_default_gateway(vecgate, tmp_path)
    try:
        errs = {}
        deadline = time.time() + 20
        while not (errs.get(("gtpu4-encap", "encapsulated")) and errs.get(("gue4-encap", "encapsulated"))):
            assert time.time() < deadline, errs
            time.sleep(0.2)
            data = json.loads(ctl(vecgate, sock, "show", "errors", json_out=True).stdout)["data"]
            errs = {(e["node"], e["counter"]): e["count"] for e in data}
        got = samples(scrape(url)[1])
        assert [v for _, v in got["vecgate_tunnel_counters_enabled"]] == [0], got.get("vecgate_tunnel_counters_enabled")
        tunnel_series = {n for n in got if n.startswith("vecgate_tunnel_") and n != "vecgate_tunnel_counters_enabled"}
        assert not tunnel_series, tunnel_series
        for kind, title in (("gtpu", "GTP-U"), ("udp", "UDP")):
            r = ctl(vecgate, sock, "show", kind, "tunnels", json_out=True)
            rows = json.loads(r.stdout)["data"]["tunnels"]
            assert rows and all(row["counters"] is None for row in rows), rows
            text = ctl(vecgate, sock, "show", kind, "tunnels").stdout
            assert f"{title} tunnels (per-tunnel counters off: set [metrics] tunnel_counters = true)" in text, text
            assert " packets " not in text, text
    finally:
        stop(proc)


def test_scrape_parses_and_counts_what_the_gateway_does(vecgate, metrics_instance):
    url, sock = metrics_instance
    time.sleep(0.5)
    ctype, first = scrape(url)
    assert ctype.startswith("application/openmetrics-text"), ctype
    a = samples(first)
    time.sleep(1.0)
    b = samples(scrape(url)[1])

    def value(s, name, **want):
        got = [v for labels, v in s.get(name, []) if all(labels.get(k) == x for k, x in want.items())]
        assert got, (name, want, sorted(s)[:40])
        return sum(got)

    # The default gateway's generators feed ip4-lookup; its packet count grows between scrapes.
    assert value(b, "vecgate_node_packets_total", node="ip4-lookup") > value(a, "vecgate_node_packets_total", node="ip4-lookup") > 0
    assert value(b, "vecgate_node_cycles_total", node="ip4-lookup") > 0
    # Named counters carry node and reason; the default gateway sends packets with no route.
    assert value(b, "vecgate_errors_total", node="ip4-lookup", reason="no-route") > 0
    assert value(b, "vecgate_interface_rx_packets_total", interface="pg0") > 0
    assert value(b, "vecgate_buffers", **{"class": "regular", "state": "total"}) > 0
    # Table sizes match what ctl reports.
    fib = json.loads(ctl(vecgate, sock, "show", "ip", "fib", json_out=True).stdout)["data"]
    assert value(b, "vecgate_table_entries", table="gtpu_tunnels") >= 1
    assert value(b, "vecgate_table_entries", table="routes") >= 1 and len(fib) >= 1
    # The same text through the typed API (ctl show metrics).
    r = ctl(vecgate, sock, "show", "metrics")
    assert r.returncode == 0 and "vecgate_node_packets_total" in r.stdout


def series_order_key(series):
    """The order vecgate documents for a family's series: as text, but runs of digits by
    their value (`worker="2"` before `worker="10"`), a run before or after another character
    as its first digit would be."""
    out = []
    for run in re.findall(r"\d+|\D", series):
        if run.isdigit():
            v = run.lstrip("0")
            out.append((ord("0"), len(v), v, len(run)))
        else:
            out.append((ord(run),))
    return out


def test_two_calls_list_the_same_series_in_the_documented_order(vecgate, tmp_path):
    """`show metrics` twice (and a scrape): the same series in the same places, each
    family's series sorted by their labels, numbers by value; only the figures move."""
    proc, url, sock = start_default_gateway(vecgate, tmp_path)
    try:
        time.sleep(0.5)
        texts = [ctl(vecgate, sock, "show", "metrics").stdout, ctl(vecgate, sock, "show", "metrics").stdout, scrape(url)[1]]
    finally:
        stop(proc)
    keys = [[line.rsplit(" ", 1)[0] for line in t.splitlines() if not line.startswith("#")] for t in texts]
    assert len(keys[0]) > 50, texts[0][:2000]
    assert keys[0] == keys[1] == keys[2], "series moved between calls"
    families, fam = [], None
    for line in texts[0].splitlines():
        if line.startswith("# TYPE "):
            fam = []
            families.append((line.split()[2], fam))
        elif not line.startswith("#"):
            fam.append(line.rsplit(" ", 1)[0])
    for name, series in families:
        assert series == sorted(series, key=series_order_key), (name, series)
    # Families in the order docs/CONFIGURATION.md gives.
    order = [n for n, _ in families]
    want = ["vecgate_node_calls", "vecgate_errors", "vecgate_interface_rx_packets", "vecgate_worker_loops", "vecgate_buffers",
            "vecgate_table_entries", "vecgate_tunnel_counters_enabled"]
    assert [order.index(f) for f in want] == sorted(order.index(f) for f in want), order


def test_only_get_metrics_is_served(vecgate, metrics_instance):
    url, _ = metrics_instance
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(url.replace("/metrics", "/other"), timeout=10)
    assert e.value.code == 404
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(urllib.request.Request(url, data=b"x", method="POST"), timeout=10)
    assert e.value.code == 405


def test_bad_metrics_address_is_refused(vecgate, tmp_path):
    r = subprocess.run([str(vecgate), "run", "--duration", "1", "--interval", "0", "--socket", str(tmp_path / "s"),
                        "--metrics", "localhost"], capture_output=True, text=True, timeout=20)
    assert r.returncode != 0 and "--metrics" in r.stderr and "expected ADDRESS:PORT" in r.stderr, r.stderr


def test_graph_page_draws_the_running_graph_in_a_real_browser(vecgate, metrics_instance, tmp_path):
    """`/graph` in headless Chromium (Debian's): the page loads with no external assets,
    draws every node of the running graph, and refreshes itself."""
    import re
    import shutil
    url, sock = metrics_instance
    browser = shutil.which("chromium")
    assert browser, "chromium is installed by scripts/test.sh"
    graph_url = url.replace("/metrics", "/graph")
    r = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                        "--disable-background-networking", "--disable-component-update", "--disable-sync",
                        f"--user-data-dir={tmp_path / 'chromium'}", "--virtual-time-budget=4000", "--dump-dom", graph_url],
                       capture_output=True, text=True, timeout=120)
    dom = r.stdout
    refreshes = re.search(r'data-refreshes="(\d+)"', dom)
    assert refreshes and int(refreshes.group(1)) >= 2, dom[-2000:]
    drawn = dict(re.findall(r'data-name="([^"]+)" data-pps="([^"]+)"', dom))
    expected = {n["name"] for n in json.loads(ctl(vecgate, sock, "show", "graph", json_out=True).stdout)["data"]["nodes"]}
    assert set(drawn) == expected, (sorted(set(drawn) ^ expected))
    assert float(drawn["ip4-lookup"]) > 0 and float(drawn["gtpu4-input"]) > 0
    # Edges are drawn between existing nodes only.
    edges = re.findall(r'data-from="([^"]+)" data-to="([^"]+)"', dom)
    assert ("ethernet-input", "ip4-input") in edges and all(a in expected and b in expected for a, b in edges)


def test_show_graph_text_lists_every_node_with_rates(vecgate, metrics_instance):
    _, sock = metrics_instance
    ctl(vecgate, sock, "show", "graph")
    time.sleep(0.5)
    r = ctl(vecgate, sock, "show", "graph")
    assert r.returncode == 0
    rows = {l.split()[0]: l.split() for l in r.stdout.splitlines()[1:] if not l.startswith("--")}
    assert "ip4-lookup" in rows and "ethernet-input*" in rows["pg-input"], r.stdout
    # A column-0 node is an input; its rate over the last half second is non-zero.
    assert rows["pg-input"][1] != "0", r.stdout


def test_grafana_dashboard_queries_name_metrics_the_endpoint_serves(vecgate, metrics_instance):
    """docs/grafana/vecgate-dashboard.json is valid JSON whose every panel query names
    only metrics a live scrape has (a renamed metric breaks the dashboard, and this)."""
    import re
    from pathlib import Path
    url, _ = metrics_instance
    dash = json.loads((Path(__file__).parent.parent / "docs/grafana/vecgate-dashboard.json").read_text())
    # Every family the endpoint declares (some have no samples here: the default
    # gateway's pg and null devices keep no device counters).
    served = set()
    for fam in text_string_to_metric_families(scrape(url)[1]):
        served |= {fam.name, fam.name + "_total"} if fam.type == "counter" else {fam.name}
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    assert len(dash["panels"]) >= 5 and all(p["title"] for p in dash["panels"])
    names = {m for e in exprs for m in re.findall(r"\bvecgate_[a-z_]+", e)}
    # prometheus-client leaves out a family with no series: device counters exist only
    # for kernel-backed devices (af_packet, af_xdp), not the default gateway's pg and
    # null. That one is checked against the code that registers it instead.
    device_only = {"vecgate_interface_device_total"}
    code = (Path(__file__).parent.parent / "crates/control/src/metrics.rs").read_text()
    assert all(f'"{n.removeprefix("vecgate_").removesuffix("_total")}"' in code for n in device_only)
    assert names and names <= served | device_only, names - served - device_only
    # The issue's third main view, per-tunnel traffic: rates of the per-kind totals and
    # of the busiest tunnels' own series (grouped by tunnel), each in both directions.
    def directions(metric, by):
        got = set()
        for e in exprs:
            if not re.search(rf"\brate\({metric}\{{", e) or not re.search(rf"by \([^)]*\b{by}\b", e):
                continue
            pinned = re.findall(r'direction="(rx|tx)"', e)
            got |= set(pinned) if pinned else ({"rx", "tx"} if re.search(r"by \([^)]*\bdirection\b", e) else set())
        return got
    for metric, by in [("vecgate_tunnel_kind_bytes_total", "kind"), ("vecgate_tunnel_bytes_total", "tunnel"),
                       ("vecgate_tunnel_packets_total", "tunnel")]:
        assert directions(metric, by) == {"rx", "tx"}, (metric, by, exprs)


def test_per_tunnel_counters(vecgate, metrics_instance):
    """The default gateway's GTP-U tunnels carry traffic both ways: each tunnel's counts
    (read from the workers without stopping them) add up to the encap and decap nodes'
    own counters, and the scrape has a series per kind and per busiest tunnel."""
    url, sock = metrics_instance
    time.sleep(1.0)
    assert [v for _, v in samples(scrape(url)[1])["vecgate_tunnel_counters_enabled"]] == [1]
    # Stop the generators' effect on the comparison: read both sides close together,
    # then check the tunnel sums against counters read after them (never below them).
    rows = json.loads(ctl(vecgate, sock, "show", "gtpu", "tunnels", json_out=True).stdout)["data"]["tunnels"]
    errs = json.loads(ctl(vecgate, sock, "show", "errors", json_out=True).stdout)["data"]
    count = lambda node, c: sum(e["count"] for e in errs if e["node"] == node and e["counter"] == c)
    rx = sum(r["counters"]["rx_packets"] for r in rows)
    tx = sum(r["counters"]["tx_packets"] for r in rows)
    decap = count("gtpu4-input", "decapsulated") + count("gtpu6-input", "decapsulated")
    encap = count("gtpu4-encap", "encapsulated") + count("gtpu6-encap", "encapsulated")
    assert rx > 0 and tx > 0, rows
    assert rx <= decap and tx <= encap, (rx, decap, tx, encap)
    # Read while the generators run: the tunnel counts, read first, trail by at most
    # what arrived in between (well under a second of traffic at the default rates).
    assert decap - rx < max(decap // 2, 1000) and encap - tx < max(encap // 2, 1000), (rx, decap, tx, encap)
    for r in rows:
        c = r["counters"]
        if c["rx_packets"]:
            assert c["rx_bytes"] >= 20 * c["rx_packets"], c  # inner IP packets
    text = ctl(vecgate, sock, "show", "gtpu", "tunnels").stdout
    assert "rx " in text and "packets" in text
    # The default gateway's GUE tunnel: the same agreement.
    urows = json.loads(ctl(vecgate, sock, "show", "udp", "tunnels", json_out=True).stdout)["data"]["tunnels"]
    errs = json.loads(ctl(vecgate, sock, "show", "errors", json_out=True).stdout)["data"]
    urx = sum(r["counters"]["rx_packets"] for r in urows)
    utx = sum(r["counters"]["tx_packets"] for r in urows)
    udecap = count("gue4-input", "decapsulated") + count("gue6-input", "decapsulated")
    uencap = count("gue4-encap", "encapsulated") + count("gue6-encap", "encapsulated")
    assert 0 < urx <= udecap and 0 < utx <= uencap, (urx, udecap, utx, uencap)
    assert udecap - urx < max(udecap // 2, 1000) and uencap - utx < max(uencap // 2, 1000), (urx, udecap, utx, uencap)
    got = samples(scrape(url)[1])
    kinds = {(l["kind"], l["direction"]): v for l, v in got["vecgate_tunnel_kind_packets_total"]}
    assert kinds[("udp", "rx")] >= urx and kinds[("udp", "tx")] >= utx, kinds
    assert kinds[("gtpu", "rx")] >= rx and kinds[("gtpu", "tx")] >= tx, kinds
    per = got["vecgate_tunnel_packets_total"]
    names = {l["tunnel"] for l, _ in per}
    assert names and names <= {r["name"] for r in rows} | {r["name"] for r in urows}, (names, rows)
    assert len(names) <= 10


TOP_TUNNELS_CONFIG = """
[metrics]
listen = "127.0.0.1:{port}"
top_tunnels = {top}
tunnel_counters = true

[[interface]]
name = "pg0"
type = "pg"
mac = "02:00:00:00:00:01"
addresses = ["198.18.0.1/24"]

[[interface]]
name = "null0"
type = "null"
mac = "02:00:00:00:00:03"
addresses = ["198.18.2.1/24"]

[[neighbour]]
interface = "null0"
ip = "198.18.2.2"
mac = "02:00:00:00:02:02"

[[route]]
prefix = "198.19.200.0/24"
via = "198.18.2.2"

[[route]]
prefix = "198.19.1.0/24"
via = "198.18.2.2"
"""


def top_tunnels_config(port, top, tunnels=0):
    text = TOP_TUNNELS_CONFIG.format(port=port, top=top)
    for i in range(tunnels):
        text += f"""
[[gtpu_tunnel]]
local = "198.18.2.1"
remote = "198.19.200.{10 + i}"
teid_in = {100 + i}
teid_out = {200 + i}
ue = "198.19.10.{i}/32"
"""
    return text


def downlink(tunnel, count):
    """UDP to a tunnel's UE: encapsulated into it (its tx)."""
    return f"""
[[stream]]
name = "down{tunnel}"
interface = "pg0"
size = 100
count = {count}
rate = 20000
protocol = "udp"
src = "198.18.0.2"
dst = "198.19.10.{tunnel}"
"""


def uplink(tunnel, count):
    """G-PDUs from a tunnel's peer: decapsulated out of it (its rx)."""
    return f"""
[[stream]]
name = "up{tunnel}"
interface = "pg0"
size = 150
count = {count}
rate = 20000
protocol = "gtpu"
src = "198.19.200.{10 + tunnel}"
dst = "198.18.2.1"
teid = {100 + tunnel}
inner_src = "198.19.10.{tunnel}"
inner_dst = "198.19.1.1"
"""


def test_top_tunnels_from_the_file_keeps_only_the_busiest(vecgate, tmp_path):
    """`[metrics] listen` and `top_tunnels` from a config file: six tunnels, two of them
    (top_tunnels = 2) get series of their own, the busiest by bytes both ways (tunnel 3:
    3000 packets in; tunnel 1: 1000 in and 1000 out; tunnel 0 only 500 in; 2, 4 and 5 idle),
    beside the per-kind totals, which count every tunnel."""
    port, sock, cfg = free_port(), tmp_path / "vg.sock", tmp_path / "vecgate.toml"
    cfg.write_text(top_tunnels_config(port, 2, tunnels=6) + downlink(3, 3000) + downlink(1, 1000) + uplink(1, 1000)
                   + downlink(0, 500))
    proc = subprocess.Popen([str(vecgate), "run", "--config", str(cfg), "--duration", "60", "--interval", "0",
                             "--socket", str(sock)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        # Wait for every stream to be through the tunnels (the per-kind totals say so).
        deadline = time.time() + 30
        while True:
            assert proc.poll() is None, proc.stderr.read()
            try:
                got = samples(scrape(url)[1])
            except (urllib.error.URLError, ConnectionError):
                got = {}
            kinds = {(l["kind"], l["direction"]): v for l, v in got.get("vecgate_tunnel_kind_packets_total", [])}
            if kinds.get(("gtpu", "tx"), 0) >= 4500 and kinds.get(("gtpu", "rx"), 0) >= 1000:
                break
            assert time.time() < deadline, (kinds, sorted(got))
            time.sleep(0.2)
        assert kinds[("gtpu", "tx")] == 4500 and kinds[("gtpu", "rx")] == 1000, kinds
        per = {(l["tunnel"], l["direction"]): v for l, v in got["vecgate_tunnel_packets_total"]}
        assert {t for t, _ in per} == {"gtpu_tunnel3", "gtpu_tunnel1"}, per
        assert per[("gtpu_tunnel3", "tx")] == 3000 and per[("gtpu_tunnel3", "rx")] == 0, per
        assert per[("gtpu_tunnel1", "tx")] == 1000 and per[("gtpu_tunnel1", "rx")] == 1000, per
        assert all(l["kind"] == "gtpu" for l, _ in got["vecgate_tunnel_bytes_total"])
        assert {l["tunnel"] for l, _ in got["vecgate_tunnel_bytes_total"]} == {"gtpu_tunnel3", "gtpu_tunnel1"}
        # All six tunnels exist; the table gauge counts them all.
        tables = {l["table"]: v for l, v in got["vecgate_table_entries"]}
        assert tables["gtpu_tunnels"] == 6, tables
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_top_tunnels_over_the_limit_is_refused(vecgate, tmp_path):
    cfg = tmp_path / "vecgate.toml"
    cfg.write_text(top_tunnels_config(free_port(), 1001))
    r = subprocess.run([str(vecgate), "run", "--config", str(cfg), "--duration", "1", "--socket", str(tmp_path / "s")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0, r.stdout + r.stderr
    assert "metrics.top_tunnels" in r.stderr and "1001" in r.stderr and "1000" in r.stderr, r.stderr
    # The limit itself is accepted.
    cfg.write_text(top_tunnels_config(free_port(), 1000))
    r = subprocess.run([str(vecgate), "run", "--config", str(cfg), "--duration", "1", "--socket", str(tmp_path / "s")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
