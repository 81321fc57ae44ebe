"""The Prometheus endpoint: a running instance scraped over HTTP, the text parsed by the
`prometheus_client` package's OpenMetrics parser (an independent implementation), and
the figures checked against what the gateway is doing."""
import json
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


@pytest.fixture
def metrics_instance(vecgate, tmp_path):
    sock, port = tmp_path / "vg.sock", free_port()
    proc = subprocess.Popen([str(vecgate), "run", "--duration", "30", "--interval", "0", "--socket", str(sock),
                             "--metrics", f"127.0.0.1:{port}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 10
    while not sock.exists() and time.time() < deadline:
        time.sleep(0.05)
    assert sock.exists(), "control socket did not appear"
    yield f"http://127.0.0.1:{port}/metrics", sock
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


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
