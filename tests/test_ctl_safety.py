"""What a new user and an operator hit first (issue 24): an instance's control socket is
its own, the CLI and the JSON API refuse what the config refuses, and a closed output
pipe ends the CLI quietly."""
import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from test_ctl import ctl, running  # noqa: F401  (fixture)


def start(vecgate, sock, duration="20"):
    return subprocess.Popen([str(vecgate), "run", "--duration", duration, "--interval", "0", "--socket", str(sock)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_second_instance_on_a_live_socket_refuses_and_leaves_it(vecgate, running):
    proc, sock = running
    inode = os.stat(sock).st_ino
    second = start(vecgate, sock)
    out, err = second.communicate(timeout=20)
    assert second.returncode != 0, "the second instance ran on a socket in use"
    assert "another vecgate is running" in err and str(sock) in err, err
    # The first instance's socket is still there and still answers.
    assert sock.exists() and os.stat(sock).st_ino == inode
    r = ctl(vecgate, sock, "show", "interfaces")
    assert r.returncode == 0 and "pg0" in r.stdout, r.stderr


def test_a_stale_socket_is_replaced_and_removed_on_exit(vecgate, tmp_path):
    sock = tmp_path / "stale.sock"
    import socket as s
    stale = s.socket(s.AF_UNIX, s.SOCK_STREAM)
    stale.bind(str(sock))
    stale.close()  # bound, never listening: nothing answers
    proc = start(vecgate, sock, duration="1.5")
    proc.communicate(timeout=20)
    assert proc.returncode == 0
    assert not sock.exists(), "the instance left its socket behind"


def test_exiting_instance_keeps_a_socket_that_is_not_its_own(vecgate, tmp_path):
    sock = tmp_path / "vg.sock"
    first = start(vecgate, sock, duration="2")
    deadline = time.time() + 10
    while not sock.exists() and time.time() < deadline:
        time.sleep(0.05)
    assert sock.exists()
    # Someone replaces the file while the first runs (an operator, or a later instance
    # after a stale-socket check): the first must not delete it on exit.
    os.unlink(sock)
    import socket as s
    other = s.socket(s.AF_UNIX, s.SOCK_STREAM)
    other.bind(str(sock))
    other.listen(1)
    try:
        first.communicate(timeout=20)
        assert sock.exists(), "the exiting instance removed a socket it did not bind"
    finally:
        other.close()


def test_closed_output_pipe_is_not_a_panic(vecgate):
    r, w = os.pipe()
    os.close(r)  # every write to w now fails with EPIPE
    p = subprocess.run([str(vecgate), "ctl", "help"], stdout=w, stderr=subprocess.PIPE, text=True, timeout=20)
    os.close(w)
    assert p.returncode != 101 and "panicked" not in p.stderr, p.stderr


def test_ctl_refuses_what_the_typed_api_refuses(vecgate, running):
    proc, sock = running
    r = ctl(vecgate, sock, "create", "gtpu", "tunnel", "local", "198.18.0.1", "remote", "198.18.0.9", "teid-in", "5")
    assert r.returncode != 0 and "teid-out <n> is required" in (r.stdout + r.stderr)
    r = ctl(vecgate, sock, "create", "gtpu", "tunnel", "local", "198.18.0.1", "remote", "198.18.0.9", "teid-out", "5")
    assert r.returncode != 0 and "teid-in <n> is required" in (r.stdout + r.stderr)
    r = ctl(vecgate, sock, "create", "gtpu", "tunnel", "local", "198.18.0.1", "remote", "198.18.0.9",
            "teid-in", "4294967296", "teid-out", "5")
    assert r.returncode != 0 and "out of range" in (r.stdout + r.stderr)
    # The JSON API reaches the same validation: TEID 0 toward the peer is refused.
    req = {"op": "create_gtpu_tunnel", "local": "198.18.0.1", "remote": "198.18.0.9", "teid_in": 5, "teid_out": 0}
    import socket as s
    c = s.socket(s.AF_UNIX, s.SOCK_STREAM)
    c.connect(str(sock))
    c.sendall((json.dumps(req) + "\n").encode())
    reply = json.loads(c.makefile().readline())
    c.close()
    assert not reply["ok"] and "teid_out 0" in reply["error"], reply


def test_trace_add_zero_and_stopping_no_capture_are_errors(vecgate, running):
    proc, sock = running
    r = ctl(vecgate, sock, "trace", "add", "pg-input", "0")
    assert r.returncode != 0 and "at least 1" in (r.stdout + r.stderr), r.stdout + r.stderr
    r = ctl(vecgate, sock, "pcap", "trace", "off", "pg0")
    assert r.returncode != 0 and "no capture running on pg0" in (r.stdout + r.stderr), r.stdout + r.stderr


def test_one_error_style_and_documented_exit_codes(vecgate, running, tmp_path):
    proc, sock = running
    # 1: the request could not be made (a typo, with the nearest command; no help dump).
    r = ctl(vecgate, sock, "shwo", "runtime")
    assert r.returncode == 1 and r.stderr.startswith("vecgate: ") and "did you mean: show runtime?" in r.stderr, r.stderr
    assert "commands:" not in r.stderr
    # 2: the gateway refused it; the reason on stderr with the same prefix, nothing on stdout.
    r = ctl(vecgate, sock, "ip", "route", "del", "198.19.99.0/24")
    assert r.returncode == 2 and r.stderr.startswith("vecgate: ") and r.stdout == "", (r.stdout, r.stderr)
    # "no such node" lists the input nodes there are.
    r = ctl(vecgate, sock, "trace", "add", "nosuch-input", "5")
    assert r.returncode == 2 and "input nodes: " in r.stderr and "pg-input" in r.stderr, r.stderr
    # --json anywhere on the line.
    r = subprocess.run([str(vecgate), "ctl", "--socket", str(sock), "show", "interfaces", "--json"], capture_output=True, text=True, timeout=20)
    assert r.returncode == 0 and json.loads(r.stdout)["ok"] is True, r.stdout + r.stderr


def test_exit_codes_are_the_documented_ones_whatever_refuses(vecgate, running, tmp_path):
    """0 done, 1 nothing asked of the gateway, 2 the gateway refused: as `vecgate ctl --help`
    and README.md say. A command line clap refuses exits 1 like bad command words (clap's
    own 2 would read as a refusal), and a refusal with --json is 2 with the reply on stdout."""
    proc, sock = running
    run = lambda *a: subprocess.run([str(vecgate), "ctl", *a], capture_output=True, text=True, timeout=20)
    # No command words, an unknown option: nothing was asked.
    for args in (["--socket", str(sock)], ["--socket", str(sock), "--bogus", "show", "runtime"], ["--no-such-flag"]):
        r = run(*args)
        assert r.returncode == 1 and r.stdout == "" and "error:" in r.stderr, (args, r.returncode, r.stderr)
    # A gateway that is not there: 1 too, even for a request it would refuse.
    r = run("--socket", str(tmp_path / "none.sock"), "ip", "route", "del", "198.19.99.0/24")
    assert r.returncode == 1 and "no vecgate is running" in r.stderr, r.stderr
    # Refused, with --json: 2, and the reply says why on stdout.
    r = run("--socket", str(sock), "--json", "ip", "route", "del", "198.19.99.0/24")
    reply = json.loads(r.stdout)
    assert r.returncode == 2 and reply["ok"] is False and reply["error"], (r.returncode, r.stdout)
    assert run("--socket", str(sock), "help").returncode == 0
    # The codes are in ctl's help and the README.
    h = run("--help")
    assert h.returncode == 0 and "Exit status:" in h.stdout, h.stdout
    for code, says in (("0", "the gateway did what was asked"), ("1", "nothing was asked of the gateway"),
                       ("2", "the gateway answered and refused")):
        assert any(l.strip().startswith(f"{code}  {says}") for l in h.stdout.splitlines()), (code, h.stdout)
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    for code, says in (("0", "the gateway did what was asked"), ("1", "nothing was asked of the gateway"),
                       ("2", "the gateway answered and refused")):
        assert f"| {code} | {says}" in readme, code


def test_a_show_of_a_section_the_gateway_lacks_says_it_is_off(vecgate, running):
    """The default gateway has no [pfcp] and no [punt]: `show pfcp …` and `show punt` answer
    (exit 0) that the feature is off, in text and with "enabled": false in JSON."""
    proc, sock = running
    for words, text in ((("show", "pfcp", "associations"), "pfcp off (no [pfcp] section"),
                        (("show", "pfcp", "sessions"), "pfcp off (no [pfcp] section"),
                        (("show", "punt"), "punt off (no [punt] section)")):
        r = ctl(vecgate, sock, *words)
        assert r.returncode == 0 and r.stdout.startswith(text) and r.stderr == "", (words, r.returncode, r.stdout, r.stderr)
        r = ctl(vecgate, sock, *words, json_out=True)
        reply = json.loads(r.stdout)
        assert r.returncode == 0 and reply["ok"] and reply["data"]["enabled"] is False, (words, r.stdout)


def test_cannot_connect_says_whether_nothing_runs_or_the_socket_is_stale(vecgate, tmp_path):
    r = ctl(vecgate, tmp_path / "none.sock", "show", "runtime")
    assert r.returncode == 1 and "no vecgate is running" in r.stderr, r.stderr
    import socket as s
    stale = tmp_path / "stale.sock"
    x = s.socket(s.AF_UNIX, s.SOCK_STREAM)
    x.bind(str(stale))
    x.close()
    r = ctl(vecgate, stale, "show", "runtime")
    assert r.returncode == 1 and "is stale" in r.stderr, r.stderr
