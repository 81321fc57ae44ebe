"""A file with mistakes in several feature entries (`[[ipsec_sa]]`, `[[ipsec_policy]]`,
`[[lb_service]]`) and in a core section (a route written twice) reports all of them in one run, each line with
the file, the field path, the line and what was expected — from `vecgate run`, from
`vecgate ctl reload`, which changes nothing, and from `vecgate check`, which opens nothing."""
import subprocess
import time

GOOD = """[[interface]]
name = "pg0"
type = "pg"
mac = "02:00:00:00:00:01"
addresses = ["198.18.0.1/24"]
"""

BAD = GOOD + """
[[route]]
prefix = "198.19.0.0/16"
via = "198.18.0.2"

[[route]]
prefix = "198.19.0.0/16"
via = "198.18.0.3"

[[ipsec_sa]]
index = 1
spi = 5
direction = "inbound"
algorithm = "null"
local = "198.18.0.1"
remote = "198.18.0.9"

[[ipsec_sa]]
index = 2
spi = 1000
direction = "outbound"
algorithm = "aes-gcm-128"
enc_key = "0011"
local = "198.18.0.1"
remote = "198.18.0.9"

[[ipsec_policy]]
spd = 1
direction = "outbound"
action = "bypass"
remote = "198.19.0.0/33"

[[ipsec_policy]]
spd = 1
direction = "outbound"
action = "protect"

[[lb_service]]
name = "web"
type = "cluster_ip"
vip = "198.18.128.10"
port = 80
protocol = "tcp"
backends = [{ addr = "198.19.1.10", port = 8080, weight = 0 }]

[[lb_service]]
name = "web"
type = "cluster_ip"
vip = "198.18.128.11"
port = 80
protocol = "tcp"
"""

# (field, the line it is on, a word of what was expected)
WANT = [
    ("ipsec_sa[0].spi", 17, "256 or more"),
    ("ipsec_sa[1].enc_key", 28, "expected 20 bytes for aes-gcm-128"),
    ("ipsec_policy[0].remote", 36, "no host bits"),
    ("ipsec_policy[1].sa", 38, "SA id"),  # no `sa` written: the line of its table
    ("lb_service[0].backends[0].weight", 49, "expected 1 to 1000"),
    ("lb_service[1].name", 52, "expected each name once"),
]


def error_lines(text):
    """The error lines, each from its field on (the file's path is the test's folder)."""
    return [l.split("gw.toml: ", 1)[1] for l in text.splitlines() if "gw.toml: " in l]


def check_all_reported(lines, route_error):
    fields = [l.split(": ")[0] for l in lines]
    want = [f for f, _, _ in WANT] + (["route[1].prefix"] if route_error else [])
    assert sorted(fields) == sorted(want), "\n".join(lines)
    for field, line, says in WANT:
        l = next(l for l in lines if l.split(": ")[0] == field)
        assert f"(line {line})" in l and says in l, l
    if route_error:
        l = next(l for l in lines if "route[1].prefix" in l)
        assert "already route[0]'s prefix" in l and "(line 12)" in l, l


def test_run_reports_every_feature_entry_error_with_the_core_ones(vecgate, tmp_path):
    cfg = tmp_path / "gw.toml"
    cfg.write_text(BAD)
    r = subprocess.run([str(vecgate), "run", "--config", str(cfg), "--duration", "1", "--socket", str(tmp_path / "s")],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0
    check_all_reported(error_lines(r.stderr), route_error=True)


def test_reload_reports_every_feature_entry_error_and_changes_nothing(vecgate, tmp_path):
    sock = tmp_path / "vg.sock"
    cfg = tmp_path / "gw.toml"
    cfg.write_text(GOOD)
    proc = subprocess.Popen([str(vecgate), "run", "--config", str(cfg), "--duration", "30", "--interval", "10", "--socket", str(sock)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 10
        while not sock.exists() and time.time() < deadline:
            time.sleep(0.05)
        assert sock.exists(), "control socket did not appear"
        cfg.write_text(BAD)
        r = subprocess.run([str(vecgate), "ctl", "--socket", str(sock), "reload"], capture_output=True, text=True, timeout=20)
        assert r.returncode != 0, r.stdout
        lines = error_lines(r.stderr)
        check_all_reported(lines, route_error=True)
        r = subprocess.run([str(vecgate), "ctl", "--socket", str(sock), "show", "lb", "services"], capture_output=True, text=True,
                           timeout=20)
        assert r.returncode == 0 and "web" not in r.stdout, r.stdout
    finally:
        proc.kill()
        proc.wait()


def test_check_reports_what_run_reports_and_opens_no_interface(vecgate, tmp_path):
    cfg = tmp_path / "gw.toml"
    cfg.write_text(BAD)
    r = subprocess.run([str(vecgate), "check", "--config", str(cfg)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and r.stdout == "", r
    check_all_reported(error_lines(r.stderr), route_error=True)
    # A good file: ok, though its af_packet interface's host interface is not on this
    # machine (it is opened by `run` only).
    cfg.write_text(GOOD + """
[[interface]]
name = "up0"
type = "af_packet"
host_if = "vg-no-such-if"
mac = "02:00:00:00:00:02"
addresses = ["198.18.5.1/24"]
""")
    r = subprocess.run([str(vecgate), "check", "--config", str(cfg)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and r.stdout == f"{cfg}: ok\n", r
    # What only the feature stage sees (a node port on GTP-U's port) is found too.
    cfg.write_text(GOOD + """
[[lb_service]]
name = "gtp"
type = "node_port"
vip = "0.0.0.0"
port = 2152
protocol = "udp"
backends = [{ addr = "198.18.0.9", port = 2152 }]
""")
    r = subprocess.run([str(vecgate), "check", "--config", str(cfg)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and "lb_service[0]: service \"gtp\": port: 2152/udp" in r.stderr, r


def test_the_errors_the_docs_quote_are_the_ones_printed(vecgate, tmp_path):
    """README.md and docs/CONFIGURATION.md quote errors for a few mistakes; each quote is,
    word for word, what `vecgate check` prints for that mistake (a doc that drifted from
    the code shows an operator an error they will never see)."""
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent
    docs = (root / "README.md").read_text() + (root / "docs" / "CONFIGURATION.md").read_text()
    iface = 'name = "pg0"\ntype = "pg"\nmac = "02:00:00:00:00:01"\n'
    files = [
        f'[[interface]]\n{iface}addresses = ["198.18.0.1/24"]\n\n[[route]]\nprefix = "198.19.0.0/16"\ngateway = "198.18.0.2"\n',
        f'[[interface]]\n{iface}mtu = "1500"\naddresses = ["198.18.0.1/24"]\n',
        f'[[interface]]\n{iface}addresses = ["198.18.0.1/24"]\n\n[[route]]\nprefix = "198.19.0.0/16"\nvia = "198.18.9.9"\n',
    ]
    for text in files:
        (tmp_path / "gw.toml").write_text(text)
        r = subprocess.run([str(vecgate), "check", "--config", "gw.toml"], capture_output=True, text=True, timeout=30,
                           cwd=tmp_path)
        assert r.returncode == 1, r
        printed = r.stderr.strip().removeprefix("vecgate: ")
        assert printed in docs, f"the docs do not quote what is printed:\n{printed}"
