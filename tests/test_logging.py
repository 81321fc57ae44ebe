"""Structured logs: state changes through the typed API are logged once each (applied or
refused, with the operation), reads are not at the default level, RUST_LOG and
`[log] level` set the filter, and a bad level is refused naming the field."""
import os
import subprocess
import time

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
