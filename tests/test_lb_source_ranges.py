"""A load_balancer service's `source_ranges` (Kubernetes' loadBalancerSourceRanges) end to
end: vecgate over af_packet between a client namespace with two addresses and three
backend namespaces running real (Python) TCP servers. A Linux TCP connection from the
address inside the ranges completes through the translation; one from the address
outside them gets nothing (its SYNs dropped, `source-not-allowed` counted). Then the
ranges change (the service deleted and added again, as `vecgate k8s` does): a
connection opened under the old ranges, now outside them, is answered no more, and the
other address is served. The same client to a cluster_ip service is served from both."""
import subprocess
import sys


from netns import Vecgate
from test_lb_netns import BACKENDS, VIP, config, lb_service, serve_all, topology

LB_VIP = "198.18.129.10"
INSIDE, OUTSIDE = "198.18.0.2", "198.18.0.66"

# One `who` connection from SRC: the answer line, or "none" when no connection was made
# (connect timed out) or nothing came back.
WHO = """
import socket, sys
src, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
s = socket.socket()
s.bind((src, 0))
s.settimeout(3)
try:
    s.connect((host, port))
    s.sendall(b"who\\n")
    print(s.makefile().readline().strip() or "none")
except OSError:
    print("none")
"""

# A connection from SRC held open: each line on stdin sends 64 bytes of an echo and
# prints whether they came back ("ok") or not ("none") within 3 s.
HOLD = """
import socket, sys
src, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
s = socket.socket()
s.bind((src, 0))
s.settimeout(5)
s.connect((host, port))
s.sendall(b"echo 1000000\\n")
f = s.makefile("rb")
f.readline()
print("connected", flush=True)
s.settimeout(3)
for _ in sys.stdin:
    s.sendall(b"x" * 64)
    got = b""
    try:
        while len(got) < 64:
            b = s.recv(64 - len(got))
            if not b:
                break
            got += b
    except OSError:
        pass
    print("ok" if got == b"x" * 64 else "none", flush=True)
"""


def who(lab, c, src, host, port=80):
    r = lab.run(c, sys.executable, "-c", WHO, src, host, str(port), timeout=30)
    return r.stdout.strip()


def test_only_sources_in_the_ranges_connect(lab, vecgate, tmp_path):
    c, g, bes = topology(lab)
    lab.run(c, "ip", "addr", "add", f"{OUTSIDE}/24", "dev", "a0")
    ranged = lb_service("web-ext", LB_VIP, 80, BACKENDS) + 'source_ranges = ["198.18.0.0/28", "2001:db8:50::/48"]\n'
    # The IPv6 range is of the other family: refused, naming the entry and the field.
    cfg = tmp_path / "bad.toml"
    cfg.write_text(config(ranged))
    r = subprocess.run([str(vecgate), "check", "--config", str(cfg)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and "lb_service[1].source_ranges[1]: 2001:db8:50::/48: expected a prefix of the vip's family (IPv4)" in r.stdout + r.stderr, r
    ranged = lb_service("web-ext", LB_VIP, 80, BACKENDS) + 'source_ranges = ["198.18.0.0/28"]\n'
    gw = Vecgate(lab, vecgate, g, config(ranged), tmp_path)
    serve_all(lab, c, bes)
    rows = {r["name"]: r for r in gw.ctl("show", "lb", "services")["data"]}
    assert rows["default/web-ext"]["source_ranges"] == ["198.18.0.0/28"] and rows["default/web"]["source_ranges"] == [], rows
    text = gw.ctl("show", "lb", "services", json_out=False)
    assert "198.18.0.0/28" in text and " any" in text, text

    answer = who(lab, c, INSIDE, LB_VIP)
    assert answer.split()[0] in ("be0", "be1", "be2") and answer.split()[1] == "198.19.1.1", answer
    assert who(lab, c, OUTSIDE, LB_VIP) == "none"
    dropped = gw.errors().get(("lb4-nat", "source-not-allowed"), 0)
    assert dropped >= 1, gw.errors()
    # The cluster IP service filters nobody.
    for src in (INSIDE, OUTSIDE):
        assert who(lab, c, src, VIP).split()[0] in ("be0", "be1", "be2")

    # A connection from INSIDE, held open across the change of ranges.
    hold = lab.spawn(c, sys.executable, "-c", HOLD, INSIDE, LB_VIP, "80", stdin=subprocess.PIPE)
    assert hold.stdout.readline().strip() == "connected"

    def echo():
        hold.stdin.write("\n")
        hold.stdin.flush()
        return hold.stdout.readline().strip()

    assert echo() == "ok"
    gw.ctl("lb", "service", "del", "default/web-ext")
    gw.ctl("lb", "service", "add", "default/web-ext", "load_balancer", LB_VIP, "80", "tcp",
           *[w for a in BACKENDS for w in ("backend", f"{a}:8080")], "source-range", "198.18.0.64/26")
    assert gw.ctl("show", "lb", "services", "default/web-ext")["data"][0]["source_ranges"] == ["198.18.0.64/26"]
    assert echo() == "none", "the connection made under the old ranges passes no more"
    assert gw.errors().get(("lb4-nat", "source-not-allowed"), 0) > dropped
    hold.stdin.close()
    assert who(lab, c, INSIDE, LB_VIP) == "none"
    answer = who(lab, c, OUTSIDE, LB_VIP)
    assert answer.split()[0] in ("be0", "be1", "be2"), answer
    code, _, _ = gw.stop()
    assert code == 0
