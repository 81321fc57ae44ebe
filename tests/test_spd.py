"""The IPsec SPD through the binary: `[[ipsec_policy]]` / `[[ipsec_spd]]` in a config file
(refused by field name when wrong), and `vecgate ctl` / the JSON socket adding, deleting,
binding and showing policies on a running gateway, each change a new tables version.

The outbound SPD's packet path through the binary is in tests/test_spd_esp.py; the nodes
are also tested in `crates/spd/tests/nodes.rs` and measured by `crates/spd/benches/spd.rs`."""
import json
import socket
import subprocess
import time

import pytest

from conftest import ROOT
from test_ctl import ctl

# The gateway `vecgate run` starts without a config: pg0 (a generator) and null0.
DEFAULT = ROOT / "docs" / "examples" / "default-gateway.toml"


@pytest.fixture
def gateway(vecgate, tmp_path):
    """The default gateway plus an SPD bound to pg0 and one policy, from a config file."""
    yield from run_gateway(vecgate, tmp_path, flow_cache=65536)


def run_gateway(vecgate, tmp_path, flow_cache):
    sock = tmp_path / "vg.sock"
    cfg = tmp_path / "spd.toml"
    cfg.write_text(DEFAULT.read_text() + f"""
[spd]
flow_cache = {flow_cache}

[[ipsec_spd]]
id = 1
interfaces = ["pg0"]

[[ipsec_policy]]
spd = 1
direction = "outbound"
priority = 50
action = "protect"
sa = 7
remote = "198.19.0.0/16"
protocol = "udp"
remote_ports = "4000-4999"
""")
    proc = subprocess.Popen([str(vecgate), "run", "--config", str(cfg), "--duration", "30", "--interval", "0.5",
                             "--socket", str(sock)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 10
    while not sock.exists() and time.time() < deadline:
        time.sleep(0.05)
    assert sock.exists(), proc.stderr.read() if proc.poll() is not None else "control socket did not appear"
    yield sock
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


def show_spd(vecgate, sock):
    r = ctl(vecgate, sock, "show", "ipsec", "spd", json_out=True)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout)["data"]


def test_policies_added_deleted_and_shown(vecgate, gateway):
    sock = gateway
    d = show_spd(vecgate, sock)
    assert d["bindings"] == [{"interface": "pg0", "spd": 1}]
    [p] = d["policies"]
    assert (p["action"], p["sa"], p["remote"], p["remote_ports"]) == ("protect", 7, "198.19.0.0/16", "4000-4999")
    v0 = d["version"]
    r = ctl(vecgate, sock, "ipsec", "policy", "add", "spd", "1", "outbound", "priority", "90", "discard",
            "remote", "198.19.9.0-198.19.9.20")
    assert r.returncode == 0, r.stdout
    d = show_spd(vecgate, sock)
    assert d["version"] > v0
    # Listed in classification order: the higher priority first.
    assert [q["priority"] for q in d["policies"]] == [90, 50]
    new_id = d["policies"][0]["id"]
    text = ctl(vecgate, sock, "show", "ipsec", "spd").stdout
    assert "protect sa 7" in text and "discard" in text and "interface pg0 -> spd 1" in text
    # Bad requests name the field and what was expected; nothing changes.
    r = ctl(vecgate, sock, "ipsec", "policy", "add", "spd", "1", "outbound", "bypass", "remote", "198.19.0.1/16")
    assert r.returncode != 0 and "`remote`" in r.stderr and "no host bits" in r.stderr, r.stderr
    r = ctl(vecgate, sock, "ipsec", "policy", "add", "spd", "1", "inbound", "protect", "3", "local-ports", "80")
    assert r.returncode != 0 and "`protocol`" in r.stderr, r.stderr
    assert len(show_spd(vecgate, sock)["policies"]) == 2
    assert ctl(vecgate, sock, "ipsec", "policy", "del", str(new_id)).returncode == 0
    r = ctl(vecgate, sock, "ipsec", "policy", "del", str(new_id))
    assert r.returncode != 0 and "no such policy" in r.stderr
    assert [q["priority"] for q in show_spd(vecgate, sock)["policies"]] == [50]


def test_json_api_and_flow_cache(vecgate, gateway):
    sock = gateway

    def call(req):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(str(sock))
            s.sendall((json.dumps(req) + "\n").encode())
            buf = b""
            while not buf.endswith(b"\n"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                buf += chunk
        return json.loads(buf)

    r = call({"op": "ipsec_policy_add", "spd": 2, "direction": "inbound", "action": "bypass", "remote": "2001:db8::/32"})
    assert r["ok"], r
    r = call({"op": "ipsec_policy_add", "spd": 2, "direction": "inbound", "action": "bypass", "frob": 1})
    assert not r["ok"]
    assert call({"op": "ipsec_spd_bind", "spd": 2, "interface": "null0"})["ok"]
    r = call({"op": "ipsec_spd_bind", "spd": 2, "interface": "nope0"})
    assert not r["ok"] and "interface" in r["error"]
    # The worker allocated its caches when the SPD was bound at start-up and reports them.
    deadline = time.time() + 5
    while True:
        fc = call({"op": "show_ipsec_flow_cache"})["data"]["flow_cache"]
        if fc["size"] == 65536 or time.time() > deadline:
            break
        time.sleep(0.1)
    assert fc["size"] == 65536 and fc["workers"] == 1, fc
    assert call({"op": "show_ipsec_flow_cache"})["data"]["enabled"] is True
    assert {"hits", "misses", "stale", "overwrites", "wraps"} <= set(fc["ipv4"])
    assert call({"op": "ipsec_spd_unbind", "interface": "null0"})["ok"]
    assert not call({"op": "ipsec_spd_unbind", "interface": "null0"})["ok"]


def test_a_flow_cache_turned_off_is_shown_off(vecgate, tmp_path):
    """`[spd] flow_cache = 0`: `show ipsec flow-cache` says the cache is off (exit 0), not a
    table of zeros; its JSON says "enabled": false and keeps the counters' fields."""
    gen = run_gateway(vecgate, tmp_path, flow_cache=0)
    sock = next(gen)
    try:
        r = ctl(vecgate, sock, "show", "ipsec", "flow-cache")
        assert r.returncode == 0, r.stdout + r.stderr
        assert r.stdout.startswith("flow cache off ([spd] flow_cache = 0"), r.stdout
        r = ctl(vecgate, sock, "show", "ipsec", "flow-cache", json_out=True)
        assert r.returncode == 0, r.stdout + r.stderr
        data = json.loads(r.stdout)["data"]
        assert data["enabled"] is False, data
        assert data["flow_cache"]["size"] == 0 and {"hits", "misses"} <= set(data["flow_cache"]["ipv4"]), data
    finally:
        gen.close()


@pytest.mark.parametrize("extra, field, says", [
    ('[[ipsec_policy]]\nspd = 1\ndirection = "outbound"\naction = "protect"\n', "ipsec_policy[0].sa", "SA id"),
    ('[[ipsec_policy]]\nspd = 1\ndirection = "sideways"\naction = "bypass"\n', "ipsec_policy[0]", "outbound"),
    ('[[ipsec_spd]]\nid = 1\ninterfaces = ["eth7"]\n', "ipsec_spd[0].interfaces[0]", "eth7"),
    ('[spd]\nflow_cache = 1000\n', "spd.flow_cache", "power of two"),
])
def test_bad_config_is_refused_by_field(vecgate, tmp_path, extra, field, says):
    cfg = tmp_path / "bad.toml"
    cfg.write_text(DEFAULT.read_text() + "\n" + extra)
    r = subprocess.run([str(vecgate), "run", "--config", str(cfg), "--duration", "1", "--socket", str(tmp_path / "s")],
                       capture_output=True, text=True, timeout=30)
    out = r.stdout + r.stderr
    assert r.returncode != 0 and "bad.toml" in out and field in out and says in out, out
