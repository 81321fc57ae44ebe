"""Structured logs: state changes through the typed API are logged once each (applied or
refused, with the operation), reads are not at the default level, RUST_LOG and
`[log] level` set the filter, and a bad level is refused naming the field."""
import json
import os
import re
import signal
import subprocess
import time

import pytest

from test_ctl import ctl


def run_and_drive(vecgate, tmp_path, env=None, config=None):
    sock = tmp_path / "vg.sock"
    args = [str(vecgate), "run", "--duration", "3", "--interval", "0", "--socket", str(sock)]
    if config:
        args += ["--config", str(config)]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})
    deadline = time.time() + 10
    while not sock.exists() and time.time() < deadline:
        time.sleep(0.05)
    assert ctl(vecgate, sock, "ip", "route", "add", "198.19.77.0/24", "via", "198.18.2.2").returncode == 0
    assert ctl(vecgate, sock, "ip", "route", "del", "198.19.99.0/24").returncode != 0
    assert ctl(vecgate, sock, "show", "runtime").returncode == 0
    _, err = proc.communicate(timeout=20)
    return err


def test_changes_are_logged_and_reads_are_not(vecgate, tmp_path):
    err = run_and_drive(vecgate, tmp_path, env={"RUST_LOG": ""})
    lines = err.splitlines()
    applied = [l for l in lines if "applied" in l and "op=ip_route_add" in l]
    refused = [l for l in lines if "request refused" in l and "op=ip_route_del" in l]
    assert len(applied) == 1 and "198.19.77.0/24" in applied[0], err
    assert len(refused) == 1 and "WARN" in refused[0], err
    assert not any("show_runtime" in l for l in lines), err
    assert any("dataplane started" in l for l in lines) and any("dataplane stopped" in l for l in lines), err
    # The default gateway's two GTP-U `ue` routes and its two services' addresses are
    # counted apart from its static routes.
    started = next(l for l in lines if "dataplane started" in l)
    assert "tunnel_routes=4" in started, started
    assert "\x1b[" not in err, "no colour codes when stderr is not a terminal"


def test_rust_log_overrides_and_warn_keeps_only_refusals(vecgate, tmp_path):
    err = run_and_drive(vecgate, tmp_path, env={"RUST_LOG": "warn"})
    assert "applied" not in err and "request refused" in err, err


def with_log(tmp_path, name, level):
    """The built-in default gateway with a `[log]` section."""
    from pathlib import Path
    base = (Path(__file__).parent.parent / "docs/examples/default-gateway.toml").read_text()
    p = tmp_path / name
    p.write_text(base + f'\n[log]\nlevel = "{level}"\n')
    return p


def test_config_log_level(vecgate, tmp_path):
    cfg = with_log(tmp_path, "debug.toml", "debug")
    err = run_and_drive(vecgate, tmp_path, env={"RUST_LOG": ""}, config=cfg)
    assert "op=show_runtime" in err, err
    bad = with_log(tmp_path, "bad.toml", "loud")
    r = subprocess.run([str(vecgate), "run", "--config", str(bad), "--duration", "1", "--socket", str(tmp_path / "b.sock")],
                       capture_output=True, text=True, timeout=20, env={**os.environ, "RUST_LOG": ""})
    assert r.returncode != 0 and "log.level" in r.stderr and "expected one of" in r.stderr, r.stderr
    # `vecgate check` refuses what `run` refuses (it said `ok`), and takes a good level.
    r = subprocess.run([str(vecgate), "check", "--config", str(bad)], capture_output=True, text=True, timeout=20)
    assert r.returncode == 1 and r.stdout == "" and f'{bad}: log.level: "loud": expected one of' in r.stderr, r
    for level in ["debug", "warn,control=debug"]:
        good = with_log(tmp_path, "good.toml", level)
        r = subprocess.run([str(vecgate), "check", "--config", str(good)], capture_output=True, text=True, timeout=20)
        assert r.returncode == 0 and r.stdout == f"{good}: ok\n", r


class LoggedGateway:
    """`vecgate run` on the default gateway's file (generators, a null sink) at the
    default level, its log read while it runs."""

    def __init__(self, vecgate, tmp_path, extra=""):
        from pathlib import Path
        self.bin = str(vecgate)
        self.sock = str(tmp_path / "vg.sock")
        self.cfg = tmp_path / "gw.toml"
        self.base = (Path(__file__).parent.parent / "docs/examples/default-gateway.toml").read_text()
        self.write_config(extra)
        self.log_path = tmp_path / "vecgate.log"
        self.proc = subprocess.Popen([self.bin, "run", "--config", str(self.cfg), "--interval", "0", "--socket", self.sock],
                                     stdout=subprocess.DEVNULL, stderr=self.log_path.open("w"),
                                     env={**os.environ, "RUST_LOG": ""})
        deadline = time.time() + 20
        while "dataplane started" not in self.log():
            assert self.proc.poll() is None and time.time() < deadline, self.log()
            time.sleep(0.05)

    def write_config(self, extra):
        self.cfg.write_text(self.base + extra)

    def log(self):
        return self.log_path.read_text()

    def lines(self, *words):
        """The log lines that hold every one of `words`."""
        return [l for l in self.log().splitlines() if all(w in l for w in words)]

    def ctl(self, *words, json_out=False):
        r = ctl(self.bin, self.sock, *words, json_out=json_out)
        assert r.returncode == 0, r.stderr + r.stdout
        return json.loads(r.stdout)["data"] if json_out else r.stdout

    def wait_for(self, *words):
        """Wait until a line with `words` is logged (SIGHUP is handled between vectors)."""
        deadline = time.time() + 20
        while not self.lines(*words):
            assert self.proc.poll() is None and time.time() < deadline, self.log()
            time.sleep(0.05)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=20)


@pytest.fixture
def gateway(vecgate, tmp_path):
    gw = LoggedGateway(vecgate, tmp_path)
    yield gw
    gw.stop()


def test_tunnel_add_and_remove_are_logged_once_naming_the_tunnel(gateway):
    gtpu = gateway.ctl("create", "gtpu", "tunnel", "local", "198.18.2.1", "remote", "198.18.2.9",
                       "teid-in", "0x7701", "teid-out", "0x7702")
    udp = gateway.ctl("create", "udp", "tunnel", "local", "198.18.2.1", "remote", "198.18.2.8", "encap", "gue")
    gtpu_name = re.search(r"gtpu_tunnel\d+", gtpu).group(0)
    udp_name = re.search(r"udp_tunnel\d+", udp).group(0)
    gateway.ctl("delete", "gtpu", "tunnel", gtpu_name)
    gateway.ctl("delete", "udp", "tunnel", udp_name)
    # Each line names the tunnel; the create lines also say what it is.
    for op, words in [("create_gtpu_tunnel", [gtpu_name, "198.18.2.1 -> 198.18.2.9", "0x7701", "0x7702"]),
                      ("delete_gtpu_tunnel", [gtpu_name]),
                      ("create_udp_tunnel", [udp_name, "198.18.2.1 -> 198.18.2.8", "gue"]),
                      ("delete_udp_tunnel", [udp_name])]:
        lines = gateway.lines("INFO", "applied", f"op={op}")
        assert len(lines) == 1, (op, gateway.log())
        assert all(re.search(rf"(^|\s){re.escape(w)}(\s|$)", lines[0]) for w in words), (words, lines[0])


def test_reload_logs_each_change_and_an_unchanged_reload_logs_none(gateway):
    gateway.write_config('\n[[route]]\nprefix = "198.18.200.0/24"\nvia = "198.18.2.2"\n')
    os.kill(gateway.proc.pid, signal.SIGHUP)
    gateway.wait_for("INFO", "reloaded", f"file={gateway.cfg}", "changes=1")
    applied = gateway.lines("INFO", "config applied")
    assert len(applied) == 1, gateway.log()
    assert all(w in applied[0] for w in ['action="added"', 'object="route"', "198.18.200.0/24 via 198.18.2.2"]), applied
    # The request's own line holds the reply whole, on one line.
    request = gateway.lines("INFO", "applied", "op=reload")
    assert len(request) == 1 and "1 change; added" in request[0] and "198.18.200.0/24 via 198.18.2.2" in request[0], gateway.log()

    # The same file again: a reload that changes nothing says so and logs no change.
    out = gateway.ctl("reload")
    assert "no changes" in out, out
    assert len(gateway.lines("INFO", "reloaded", "changes=0")) == 1, gateway.log()
    assert len(gateway.lines("config applied")) == 1, gateway.log()

    # Dropping it again: one removal, by name.
    gateway.write_config("")
    gateway.ctl("reload")
    removed = gateway.lines("INFO", "config applied", 'action="removed"')
    assert len(removed) == 1 and 'object="route"' in removed[0] and "198.18.200.0/24" in removed[0], gateway.log()
    assert len(gateway.lines("INFO", "reloaded", "changes=1")) == 2, gateway.log()


def test_interface_added_and_removed_at_run_time_are_logged(gateway):
    gateway.ctl("create", "interface", "sink7", "null", "mac", "02:00:00:00:07:07", "address", "198.18.7.1/24")
    gateway.ctl("ip", "route", "add", "198.19.7.0/24", "via", "198.18.7.2")
    gateway.ctl("delete", "interface", "sink7")
    added = gateway.lines("INFO", "interface added", "interface=sink7")
    removed = gateway.lines("INFO", "interface removed", "interface=sink7")
    assert len(added) == 1 and 'kind="null"' in added[0], gateway.log()
    # The route through it went with it, and the line says so.
    assert len(removed) == 1 and "routes=1" in removed[0], gateway.log()


def interface_rx(gateway, name):
    return next(r for r in gateway.ctl("show", "interfaces", json_out=True) if r["name"] == name)["rx_packets"]


def test_no_line_per_packet(gateway):
    """The generators forward, answer and drop (no route, TTL 1, blackhole) while the log
    stands still: only state changes are logged."""
    before = gateway.log()
    start = interface_rx(gateway, "pg0")
    deadline = time.time() + 60
    while interface_rx(gateway, "pg0") < start + 200_000:
        assert time.time() < deadline and gateway.proc.poll() is None, gateway.log()
        time.sleep(0.2)
    errors = gateway.ctl("show", "errors", json_out=True)
    assert sum(c["count"] for c in errors) > 0, "the stream must also be dropping packets"
    assert gateway.log() == before, gateway.log()[len(before):][:2000]
