"""`vecgate run` with live stats and `vecgate ctl` over the control socket: the text CLI
and the JSON API reach the same typed operations."""
import json
import os
import re
import socket
import subprocess
import time
from pathlib import Path

import pytest


def ctl(vecgate, sock, *words, json_out=False, cwd=None):
    args = [str(vecgate), "ctl", "--socket", str(sock)] + (["--json"] if json_out else []) + list(words)
    r = subprocess.run(args, capture_output=True, text=True, timeout=20, cwd=cwd)
    return r


@pytest.fixture
def running(vecgate, tmp_path):
    sock = tmp_path / "vg.sock"
    # stdout to /dev/null: nothing reads it, and a full pipe would stall the live view and
    # with it the control loop (a test past ~10 s on a loaded machine timed out so).
    proc = subprocess.Popen([str(vecgate), "run", "--duration", "30", "--interval", "0.5", "--socket", str(sock)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 10
    # The socket is bound before the dataplane is built: wait for the first answer, so
    # the tests' "has run for a while" sleeps start when the gateway runs.
    while (not sock.exists() or ctl(vecgate, sock, "show", "interfaces").returncode != 0) and time.time() < deadline:
        time.sleep(0.05)
    assert sock.exists(), "control socket did not appear"
    yield proc, sock
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


def test_default_gateway_runs_and_answers(vecgate, running):
    proc, sock = running
    assert oct(os.stat(sock).st_mode & 0o777) == "0o600"
    time.sleep(1.0)
    r = ctl(vecgate, sock, "show", "runtime")
    assert r.returncode == 0, r.stderr
    for node in ["pg-input", "ethernet-input", "ip4-lookup", "ip4-rewrite", "ip6-lookup",
                 "ip4-local", "ip6-local", "ip4-icmp-error", "interface-output"]:
        assert node in r.stdout, (node, r.stdout)
    # Well-formed packets go from ethernet-input straight to the lookups, and forwarded
    # ones past ipN-rewrite (the lookup rewrites them; the gateway's own replies go
    # straight out); ipN-input and ip6-rewrite, which take the rest, are in the graph all
    # the same.
    graph = {n["name"] for n in json.loads(ctl(vecgate, sock, "show", "graph", json_out=True).stdout)["data"]["nodes"]}
    assert {"ip4-input", "ip6-input", "ip6-rewrite"} <= graph, graph
    j = json.loads(ctl(vecgate, sock, "show", "runtime", json_out=True).stdout)
    nodes = {n["name"]: n for n in j["data"]["nodes"]}
    assert nodes["ip4-lookup"]["packets"] > 1000
    assert nodes["ip4-rewrite"]["cycles_per_packet"] > 0
    # Nothing is held for a next hop: the gateway's look at held packets (every 0.5 s)
    # sends its worker nothing, so no node counts it.
    assert nodes.get("ip-glean-input", {}).get("packets", 0) == 0, nodes.get("ip-glean-input")
    errs = json.loads(ctl(vecgate, sock, "show", "errors", json_out=True).stdout)["data"]
    names = {(e["node"], e["counter"]) for e in errs}
    assert ("ip4-rewrite", "ttl-expired") in names and ("ip4-lookup", "no-route") in names
    assert ("ip4-local", "echo-replies") in names and ("ip6-local", "echo-replies") in names
    # The default gateway's own traffic earns no warning (its pings stay under the reply
    # rate limit): a newcomer's first `show errors` has nothing to worry about.
    warned = [(e["node"], e["counter"]) for e in errs if e["severity"] != "info"]
    assert warned == [], warned
    r = ctl(vecgate, sock, "show", "interfaces")
    assert "pg0" in r.stdout and "198.18.0.1/24" in r.stdout and "null0" in r.stdout


def test_routes_added_and_deleted_live(vecgate, running):
    proc, sock = running
    r = ctl(vecgate, sock, "ip", "route", "add", "198.19.77.0/24", "via", "198.18.2.2")
    assert r.returncode == 0, r.stdout + r.stderr
    fib = json.loads(ctl(vecgate, sock, "show", "ip", "fib", json_out=True).stdout)["data"]
    assert any(e["prefix"] == "198.19.77.0/24" and e["kind"] == "via" for e in fib)
    r = ctl(vecgate, sock, "ip", "route", "add", "198.19.78.0/24", "via", "203.0.113.1")
    assert r.returncode == 2 and "not on a connected subnet" in r.stderr
    r = ctl(vecgate, sock, "ip", "route", "add", "198.19.79.1/24", "via", "198.18.2.2")
    assert r.returncode == 2 and "host bits" in r.stderr
    assert ctl(vecgate, sock, "ip", "route", "del", "198.19.77.0/24").returncode == 0
    fib = json.loads(ctl(vecgate, sock, "show", "ip", "fib", json_out=True).stdout)["data"]
    assert not any(e["prefix"] == "198.19.77.0/24" for e in fib)
    assert ctl(vecgate, sock, "ip", "route", "del", "198.19.77.0/24").returncode != 0
    # Traffic kept flowing through the route change: the sink keeps receiving.
    a = json.loads(ctl(vecgate, sock, "show", "interfaces", json_out=True).stdout)["data"]
    time.sleep(0.5)
    b = json.loads(ctl(vecgate, sock, "show", "interfaces", json_out=True).stdout)["data"]
    tx = lambda rows: next(r for r in rows if r["name"] == "null0")["tx_packets"]
    assert tx(b) > tx(a)


def test_trace_and_json_api(vecgate, running):
    proc, sock = running
    r = ctl(vecgate, sock, "trace", "add", "pg-input", "5")
    assert r.returncode == 0, r.stdout
    assert ctl(vecgate, sock, "trace", "add", "ip4-lookup", "5").returncode != 0
    time.sleep(0.5)
    r = ctl(vecgate, sock, "show", "trace")
    assert "Packet 1" in r.stdout and "ethernet-input" in r.stdout, r.stdout
    # An EtherType as tcpdump and VPP write it, never a Rust enum's name (`type Ipv4`),
    # nor an Option's (`Some(…)`). The traced packets' later steps may come a loop later
    # on a loaded machine: wait for ethernet-input's own record.
    deadline = time.time() + 10
    while not re.search(r"^ +\d+ ethernet-input ", r.stdout, re.M) and time.time() < deadline:
        time.sleep(0.2)
        r = ctl(vecgate, sock, "show", "trace")
    assert re.search(r"type (0x0800 \(IPv4\)|0x86dd \(IPv6\)) len ", r.stdout), r.stdout
    assert not re.search(r"type Ipv[46]|\bGPdu\b|Some\(|\bNone\b", r.stdout), r.stdout
    # Raw JSON on the socket, no CLI involved.
    s = socket.socket(socket.AF_UNIX)
    s.connect(str(sock))
    s.sendall(b'{"op":"show_errors","all":true}\n{"op":"no_such_op"}\n')
    f = s.makefile()
    first = json.loads(f.readline())
    second = json.loads(f.readline())
    s.close()
    assert first["ok"] and any(c["counter"] == "bad-checksum" for c in first["data"])
    assert not second["ok"] and "bad request" in second["error"]
    assert ctl(vecgate, sock, "clear", "runtime").returncode == 0


def test_bad_config_names_file_field_and_expectation(vecgate, tmp_path):
    cfg = tmp_path / "bad.toml"
    cfg.write_text('[[interface]]\nname = "pg0"\ntype = "pg"\nmac = "02:00:00:00:00:01"\naddresses = ["198.18.0.1/33"]\n')
    r = subprocess.run([str(vecgate), "run", "--config", str(cfg), "--duration", "1"], capture_output=True, text=True, timeout=20)
    assert r.returncode != 0
    assert "bad.toml" in r.stderr and "interface[0].addresses[0]" in r.stderr and "expected" in r.stderr, r.stderr
    cfg.write_text('[[interface]]\nname = "pg0"\ntype = "pg"\nmac = "02:00:00:00:00:01"\naddresses = ["198.18.0.1/24"]\n'
                   '[[route]]\nprefix = "198.19.0.0/16"\nvia = "198.18.9.9"\n')
    r = subprocess.run([str(vecgate), "run", "--config", str(cfg), "--duration", "1"], capture_output=True, text=True, timeout=20)
    assert r.returncode != 0 and "route[0]" in r.stderr and "198.18.9.9" in r.stderr, r.stderr


def test_run_without_arguments_prints_live_stats(vecgate, tmp_path):
    # The newcomer's command, bounded: the default gateway with live per-node stats.
    r = subprocess.run([str(vecgate), "run", "--duration", "2.5", "--socket", str(tmp_path / "s.sock")],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("ip4-lookup") >= 2, r.stdout[-2000:]
    assert "cycles/packet" in r.stdout


def test_gtpu_tunnels_live(vecgate, running):
    """The default gateway runs GTP-U; tunnels are created, shown, routed into and
    deleted under traffic through the CLI and the JSON API."""
    proc, sock = running
    time.sleep(1.0)
    nodes = {n["name"]: n for n in json.loads(ctl(vecgate, sock, "show", "runtime", json_out=True).stdout)["data"]["nodes"]}
    for n in ["gtpu4-input", "gtpu6-input", "gtpu4-encap", "gtpu6-encap"]:
        assert nodes[n]["packets"] > 100, (n, nodes[n])
    r = ctl(vecgate, sock, "create", "gtpu", "tunnel", "local", "198.18.1.1", "remote", "198.18.1.9", "teid-in", "0x500",
            "teid-out", "0x600", "qfi", "5", "ue", "198.19.101.0/24", "mtu", "1300", "fragment", "outer", "mss-clamp")
    assert r.returncode == 0 and "created gtpu_tunnel2" in r.stdout, r.stdout + r.stderr
    r = ctl(vecgate, sock, "create", "gtpu", "tunnel", "local", "198.18.1.1", "remote", "198.18.1.9", "teid-in", "0x501",
            "teid-out", "1", "mtu", "100")
    assert r.returncode != 0 and "mtu" in (r.stdout + r.stderr) and "576" in (r.stdout + r.stderr)
    # Same local endpoint and TEID again: refused, naming the existing tunnel.
    r = ctl(vecgate, sock, "create", "gtpu", "tunnel", "local", "198.18.1.1", "remote", "198.18.1.9", "teid-in", "0x500",
            "teid-out", "1")
    assert r.returncode != 0 and "gtpu_tunnel2" in (r.stdout + r.stderr)
    r = ctl(vecgate, sock, "ip", "route", "add", "198.19.102.0/24", "interface", "gtpu_tunnel2")
    assert r.returncode == 0, r.stdout + r.stderr
    fib = ctl(vecgate, sock, "show", "ip", "fib").stdout
    assert "198.19.102.0/24" in fib and "gtpu_tunnel2" in fib
    j = json.loads(ctl(vecgate, sock, "show", "gtpu", "tunnels", json_out=True).stdout)["data"]
    assert j["total"] == 3
    t = [x for x in j["tunnels"] if x["name"] == "gtpu_tunnel2"][0]
    assert (t["teid_in"], t["teid_out"], t["qfi"], t["ue"]) == (0x500, 0x600, 5, "198.19.101.0/24")
    assert t["mtu"] == {"mtu": 1300, "fragment": "outer", "mss_clamp": True} and 576 <= t["inner_mtu"] <= 1300, t
    assert "fragment outer mss-clamp" in ctl(vecgate, sock, "show", "gtpu", "tunnels").stdout
    r = ctl(vecgate, sock, "delete", "gtpu", "tunnel", "gtpu_tunnel2")
    assert r.returncode == 0, r.stdout + r.stderr
    fib = ctl(vecgate, sock, "show", "ip", "fib").stdout
    assert "198.19.102.0/24" not in fib
    before = {n["name"]: n["packets"] for n in json.loads(ctl(vecgate, sock, "show", "runtime", json_out=True).stdout)["data"]["nodes"]}
    time.sleep(0.5)
    after = {n["name"]: n["packets"] for n in json.loads(ctl(vecgate, sock, "show", "runtime", json_out=True).stdout)["data"]["nodes"]}
    assert after["gtpu4-encap"] > before["gtpu4-encap"], "the default tunnels keep carrying traffic"
    errs = {(e["node"], e["counter"]): e["count"] for e in json.loads(ctl(vecgate, sock, "show", "errors", json_out=True).stdout)["data"]}
    assert errs.get(("gtpu4-encap", "no-tunnel"), 0) == 0 and errs.get(("gtpu4-input", "unknown-teid"), 0) == 0


def test_pcap_trace_captures_any_interface(vecgate, running, tmp_path):
    """`pcap trace` wraps an interface of any kind: here the generator pg0 (received
    frames) and the null sink null0 (sent frames); tshark reads both captures."""
    proc, sock = running
    here = tmp_path / "here"
    here.mkdir()
    rx_file, tx_file = tmp_path / "pg0.pcap", here / "null0.pcap"
    assert ctl(vecgate, sock, "pcap", "trace", "pg0", str(rx_file), "50").returncode == 0
    # A relative path is the shell's (ctl's working directory), not the gateway's.
    assert ctl(vecgate, sock, "pcap", "trace", "null0", "null0.pcap", "40", cwd=here).returncode == 0
    r = ctl(vecgate, sock, "pcap", "trace", "nosuch0", str(tmp_path / "x.pcap"))
    assert r.returncode != 0 and "nosuch0" in (r.stdout + r.stderr)
    deadline = time.time() + 10
    counts = {}
    while time.time() < deadline:
        for f in (rx_file, tx_file):
            t = subprocess.run(["tshark", "-r", str(f), "-T", "fields", "-e", "frame.number", "-e", "ip.dst", "-e", "ipv6.dst"],
                               capture_output=True, text=True, timeout=30)
            counts[f] = [l for l in t.stdout.splitlines() if l.strip()]
        if len(counts[rx_file]) == 50 and len(counts[tx_file]) == 40:
            break
        time.sleep(0.3)
    assert len(counts[rx_file]) == 50 and len(counts[tx_file]) == 40, {k.name: len(v) for k, v in counts.items()}
    # Sent frames went to the router on null0: its networks behind it.
    assert all(("198.19." in l) or ("2001:db8:100:" in l) for l in counts[tx_file]), counts[tx_file][:3]
    # Both captures ended at their frame counts: stopping one now says so.
    r = ctl(vecgate, sock, "pcap", "trace", "off", "pg0")
    assert r.returncode != 0 and "no capture running on pg0" in (r.stdout + r.stderr), r.stdout + r.stderr


def test_pcap_trace_drop_captures_what_a_node_drops_and_why(vecgate, running, tmp_path):
    """`pcap trace drop`: a blackhole route for one of the default gateway's generated
    destinations makes `ip4-lookup` drop its datagrams (`blackhole`). A capture of that
    node's drops holds 20 of them, each with its reason, and tshark dissects each as a
    UDP datagram (an IP packet without a link header). Filters naming what the graph
    lacks are refused by name and leave the running capture be."""
    proc, sock = running
    f = tmp_path / "drops.pcapng"
    r = ctl(vecgate, sock, "pcap", "trace", "drop", str(f), "20", "node", "ip4-lookup")
    assert r.returncode == 0 and "packets dropped by ip4-lookup" in r.stdout, r.stdout + r.stderr
    for words, want in ((["node", "nosuch"], "nosuch"), (["error", "no-such-counter"], "no-such-counter"),
                        (["node", "ip4-lookup", "error", "ttl-expired"], "ttl-expired"), (["0"], "at least 1")):
        r = ctl(vecgate, sock, "pcap", "trace", "drop", str(f), *words)
        assert r.returncode != 0 and want in (r.stdout + r.stderr), (words, r.stdout + r.stderr)
    assert ctl(vecgate, sock, "ip", "route", "add", "198.19.1.1/32", "blackhole").returncode == 0
    deadline = time.time() + 15
    recs = []
    while time.time() < deadline:
        t = subprocess.run(["tshark", "-r", str(f), "-T", "fields", "-E", "separator=|", "-e", "frame.comment",
                            "-e", "frame.protocols", "-e", "ip.dst"], capture_output=True, text=True, timeout=30)
        recs = [l.split("|") for l in t.stdout.splitlines() if l.strip()]
        if len(recs) >= 20:
            break
        time.sleep(0.3)
    assert len(recs) == 20, recs
    assert all(c == "ip4-lookup: blackhole, received on pg0" and p.startswith("raw:ip:udp") and d == "198.19.1.1" for c, p, d in recs), recs[:3]
    # The capture ended at its count: stopping it now says so.
    r = ctl(vecgate, sock, "pcap", "trace", "drop", "off")
    assert r.returncode != 0 and "no capture of drops running" in (r.stdout + r.stderr), r.stdout + r.stderr


def test_udp_tunnels_live(vecgate, running):
    """The default gateway runs a GUE tunnel (udp_tunnel0) both ways; more UDP tunnels are
    created through the CLI and the JSON API with routes, a duplicate refused by name,
    routed into, shown and deleted with their routes while its traffic flows."""
    proc, sock = running
    time.sleep(1.0)
    nodes = {n["name"]: n for n in json.loads(ctl(vecgate, sock, "show", "runtime", json_out=True).stdout)["data"]["nodes"]}
    for n in ["gue4-input", "gue4-encap"]:
        assert nodes[n]["packets"] > 100, (n, nodes[n])
    r = ctl(vecgate, sock, "create", "udp", "tunnel", "local", "198.18.1.1", "remote", "198.18.1.9", "encap", "gue",
            "port", "5555", "route", "198.19.103.0/24")
    assert r.returncode == 0 and "created udp_tunnel1" in r.stdout, r.stdout + r.stderr
    r = ctl(vecgate, sock, "create", "udp", "tunnel", "local", "198.18.1.1", "remote", "198.18.1.9", "encap", "direct", "port", "5555")
    assert r.returncode != 0 and "udp_tunnel1" in (r.stdout + r.stderr)
    r = ctl(vecgate, sock, "create", "udp", "tunnel", "local", "198.18.1.1", "remote", "198.18.1.9", "encap", "gue", "port", "2152")
    assert r.returncode != 0 and "2152" in (r.stdout + r.stderr)
    # The JSON API takes the config's fields.
    req = {"op": "create_udp_tunnel", "local": "2001:db8:1::1", "remote": "2001:db8:1::9", "encap": "gre", "key": 7,
           "routes": ["2001:db8:300::/48"]}
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(str(sock))
        s.sendall((json.dumps(req) + "\n").encode())
        reply = json.loads(s.makefile().readline())
    assert reply["ok"] and reply["data"]["name"] == "udp_tunnel2", reply
    assert ctl(vecgate, sock, "ip", "route", "add", "198.19.104.0/24", "interface", "udp_tunnel1").returncode == 0
    fib = ctl(vecgate, sock, "show", "ip", "fib").stdout
    assert "198.19.103.0/24" in fib and "198.19.104.0/24" in fib and "udp_tunnel1" in fib and "2001:db8:300::/48" in fib
    j = json.loads(ctl(vecgate, sock, "show", "udp", "tunnels", json_out=True).stdout)["data"]
    rows = {t["name"]: t for t in j["tunnels"]}
    assert rows["udp_tunnel1"]["port"] == 5555 and rows["udp_tunnel1"]["encap"] == "gue"
    assert rows["udp_tunnel2"]["port"] == 4754 and rows["udp_tunnel2"]["key"] == 7 and rows["udp_tunnel2"]["checksum"] == "software"
    for name in ("udp_tunnel1", "udp_tunnel2"):
        r = ctl(vecgate, sock, "delete", "udp", "tunnel", name)
        assert r.returncode == 0, r.stdout + r.stderr
    fib = ctl(vecgate, sock, "show", "ip", "fib").stdout
    assert "udp_tunnel1" not in fib and "udp_tunnel2" not in fib and "198.19.104.0/24" not in fib
    assert "198.19.150.0/24" in fib, "the default tunnel's route stays"
    assert ctl(vecgate, sock, "delete", "udp", "tunnel", "udp_tunnel1").returncode != 0
    errs = {(e["node"], e["counter"]): e["count"] for e in json.loads(ctl(vecgate, sock, "show", "errors", json_out=True).stdout)["data"]}
    assert errs.get(("gue4-input", "no-tunnel"), 0) == 0 and errs.get(("gue4-encap", "no-tunnel"), 0) == 0, errs


def test_show_lb_sessions_names_states_as_the_json_does(vecgate, running):
    """The text's state column says what the JSON's `state` says (`udp_new`, not the Rust
    variant's `udpnew`), row for row."""
    proc, sock = running
    time.sleep(0.5)
    j = json.loads(ctl(vecgate, sock, "show", "lb", "sessions", "limit", "20", json_out=True).stdout)
    text, sessions = j["text"].splitlines(), j["data"]["sessions"]
    assert sessions, j
    header = text[0]
    col = header.index("state")
    states = [row[col:].split()[0] for row in text[1:1 + len(sessions)]]
    assert states == [s["state"] for s in sessions], (states, sessions)
    assert "udp_new" in states, states


def test_show_ip_fib_keeps_its_columns_with_long_interface_names(vecgate, running):
    """The default gateway routes into ipsec_tunnel1 and gtpu_tunnel0 (longer than the
    Interface column's header): every row's Adj still ends under its header."""
    proc, sock = running
    r = ctl(vecgate, sock, "show", "ip", "fib")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    header = next(l for l in lines if l.startswith("Prefix"))
    end = header.index("Adj") + len("Adj")
    rows = lines[lines.index(header) + 1:]
    assert any("ipsec_tunnel1" in l for l in rows), r.stdout
    for l in rows:
        assert l[:end].endswith(("-", *"0123456789")) and l[end:end + 1] in ("", " "), f"out of line:\n{header}\n{l}"
