"""`vecgate ctl reload` and SIGHUP: a changed file is validated whole and applied as a
difference, under load, without losing a packet of what did not change."""
import json
import signal
import subprocess
import time

import pytest

from test_ctl import ctl

# A generator on pg0 sends a bounded stream to 198.19.1.0/24 (route `steady`, never
# changed); the reloads change everything around it.
BASE = """
[dataplane]
buffers = 8192

[[interface]]
name = "pg0"
type = "pg"
mac = "02:00:00:00:00:01"
addresses = ["198.18.0.1/24", "2001:db8::1/64"]

[[interface]]
name = "null0"
type = "null"
mac = "02:00:00:00:00:03"
addresses = ["198.18.2.1/24", "2001:db8:2::1/64"]

[[interface]]
name = "null1"
type = "null"
mac = "02:00:00:00:00:04"
addresses = ["198.18.3.1/24"]

[[neighbour]]
interface = "null0"
ip = "198.18.2.2"
mac = "02:00:00:00:02:02"

[[route]]
prefix = "198.19.1.0/24"
via = "198.18.2.2"
"""

# Version A and version B differ in routes, neighbours and tunnels.
A = """
[[route]]
prefix = "198.19.50.0/24"
via = "198.18.2.2"

[[route]]
prefix = "198.19.60.0/24"
blackhole = true

[[gtpu_tunnel]]
local = "198.18.3.1"
remote = "198.18.3.9"
teid_in = 100
teid_out = 200
ue = "198.19.70.1/32"
"""

B = """
[[neighbour]]
interface = "null1"
ip = "198.18.3.2"
mac = "02:00:00:00:03:02"

[[route]]
prefix = "198.19.60.0/24"
via = "198.18.3.2"

[[route]]
prefix = "198.19.80.0/24"
interface = "gtpu_tunnel1"

[[gtpu_tunnel]]
local = "198.18.3.1"
remote = "198.18.3.9"
teid_in = 100
teid_out = 200
ue = "198.19.70.1/32"

[[gtpu_tunnel]]
local = "198.18.3.1"
remote = "198.18.3.10"
teid_in = 101
teid_out = 201

[[udp_tunnel]]
local = "198.18.3.1"
remote = "198.18.3.11"
encap = "gue"
routes = ["198.19.90.0/24"]
"""


STREAM = """
[[stream]]
name = "steady"
interface = "pg0"
size = 64
count = {count}
rate = {rate}
protocol = "udp"
src = "198.18.0.2"
dst = "198.19.1.1"
"""


def write(path, extra, count=0, rate=1):
    path.write_text(BASE + (STREAM.format(count=count, rate=rate) if count else "") + extra)


def fib(vecgate, sock):
    r = ctl(vecgate, sock, "show", "ip", "fib", json_out=True)
    assert r.returncode == 0, r.stderr
    return {e["prefix"]: e for e in json.loads(r.stdout)["data"]}


def reload(vecgate, sock, *file):
    r = ctl(vecgate, sock, "reload", *file, json_out=True)
    return r.returncode, json.loads(r.stdout)


def changes(reply):
    return {(c["action"], c["object"], c["name"]) for c in reply["data"]["changes"]}


@pytest.fixture
def gateway(vecgate, tmp_path):
    procs = []

    def start(extra, count=0, rate=1):
        cfg = tmp_path / "gw.toml"
        write(cfg, extra, count, rate)
        sock = tmp_path / "vg.sock"
        # Output to a file: every reload logs its changes, and an unread pipe would fill
        # and stall the control loop that writes them.
        log = open(tmp_path / "vecgate.log", "w")
        p = subprocess.Popen([str(vecgate), "run", "--config", str(cfg), "--interval", "0", "--duration", "60",
                              "--socket", str(sock)], stdout=log, stderr=subprocess.STDOUT, text=True)
        procs.append(p)
        deadline = time.time() + 10
        while ctl(vecgate, sock, "show", "runtime").returncode != 0:
            assert time.time() < deadline and p.poll() is None, "gateway did not start"
            time.sleep(0.1)
        return cfg, sock, p

    yield start
    for p in procs:
        p.terminate()
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()


def test_reload_applies_the_difference(vecgate, gateway):
    cfg, sock, _ = gateway(A)
    before = fib(vecgate, sock)
    assert "198.19.50.0/24" in before and before["198.19.60.0/24"]["kind"] == "blackhole"
    code, r = reload(vecgate, sock)
    assert code == 0 and r["data"]["changes"] == [], r
    write(cfg, B)
    code, r = reload(vecgate, sock)
    assert code == 0, r
    got = changes(r)
    assert ("removed", "route", "198.19.50.0/24 via 198.18.2.2") in got, got
    assert ("replaced", "route", "198.19.60.0/24 via 198.18.3.2") in got, got
    assert ("added", "neighbour", "198.18.3.2 02:00:00:00:03:02 on null1") in got, got
    assert ("added", "gtpu_tunnel", "gtpu_tunnel1 (teid-in 101)") in got, got
    assert ("added", "udp_tunnel", "udp_tunnel0 (remote 198.18.3.11)") in got, got
    # The route names the file's second tunnel, which runs as gtpu_tunnel1.
    assert ("added", "route", "198.19.80.0/24 into gtpu_tunnel1") in got, got
    # The unchanged tunnel (and its UE route) stays: not removed, not replaced.
    assert not any(c[1] == "gtpu_tunnel" and "teid-in 100" in c[2] for c in got), got
    assert len(got) == 6, got
    after = fib(vecgate, sock)
    assert "198.19.50.0/24" not in after
    assert after["198.19.60.0/24"]["kind"] != "blackhole"
    assert "198.19.90.0/24" in after and "198.19.80.0/24" in after
    tunnels = json.loads(ctl(vecgate, sock, "show", "gtpu", "tunnels", json_out=True).stdout)["data"]
    assert tunnels["total"] == 2
    # And back: B's objects go, A's return.
    write(cfg, A)
    code, r = reload(vecgate, sock)
    assert code == 0, r
    got = changes(r)
    assert ("removed", "udp_tunnel", "udp_tunnel0 (remote 198.18.3.11)") in got, got
    assert ("removed", "gtpu_tunnel", "gtpu_tunnel1 (teid-in 101)") in got, got
    assert ("removed", "neighbour", "198.18.3.2") in got, got
    assert ("added", "route", "198.19.50.0/24 via 198.18.2.2") in got, got
    assert ("replaced", "route", "198.19.60.0/24 blackhole") in got, got
    assert fib(vecgate, sock).keys() == before.keys()


def test_a_bad_file_changes_nothing(vecgate, gateway):
    cfg, sock, _ = gateway(A)
    before = fib(vecgate, sock)
    # A valid route and an invalid tunnel: the route must not be applied either.
    cfg.write_text(cfg.read_text() + '\n[[route]]\nprefix = "198.19.99.0/24"\nvia = "198.18.2.2"\n'
                   '\n[[gtpu_tunnel]]\nlocal = "198.18.3.1"\nremote = "198.18.3.12"\nteid_in = 0\nteid_out = 5\n')
    code, r = reload(vecgate, sock)
    assert code == 2 and not r["ok"], r
    assert "gtpu_tunnel[1]" in r["error"] and "gw.toml" in r["error"], r["error"]
    assert fib(vecgate, sock) == before
    # What only a restart can change is refused by field: a packet generator's
    # interface opens at start-up only.
    write(cfg, A)
    cfg.write_text(cfg.read_text().replace('name = "pg0"\ntype = "pg"', 'name = "pg0"\ntype = "pg"\nmtu = 1400'))
    code, r = reload(vecgate, sock)
    assert code == 2 and "interface[0]" in r["error"] and "restart" in r["error"], r
    assert fib(vecgate, sock) == before
    # A file that does not parse names its line.
    cfg.write_text("[[route]\n")
    code, r = reload(vecgate, sock)
    assert code == 2 and "gw.toml" in r["error"], r
    # Reloading another file: it names that file.
    missing = cfg.parent / "nope.toml"
    code, r = reload(vecgate, sock, str(missing))
    assert code == 2 and "nope.toml" in r["error"], r


def test_reload_adds_replaces_and_removes_interfaces(vecgate, gateway):
    cfg, sock, _ = gateway(A)
    # null1 changes (its MTU), null2 is new, and the routes through null1 come back.
    text = cfg.read_text().replace('name = "null1"\ntype = "null"', 'name = "null1"\ntype = "null"\nmtu = 1400')
    text += '\n[[interface]]\nname = "null2"\ntype = "null"\nmac = "02:00:00:00:00:05"\naddresses = ["198.18.5.1/24"]\n'
    text += '\n[[route]]\nprefix = "198.19.55.0/24"\nvia = "198.18.5.2"\n'
    cfg.write_text(text)
    code, r = reload(vecgate, sock)
    assert code == 0, r
    got = changes(r)
    assert ("replaced", "interface", "null1") in got and ("added", "interface", "null2") in got, got
    assert ("added", "route", "198.19.55.0/24 via 198.18.5.2") in got, got
    rows = {i["name"]: i for i in json.loads(ctl(vecgate, sock, "show", "interfaces", json_out=True).stdout)["data"]}
    assert rows["null1"]["mtu"] == 1400 and "198.18.5.1/24" in rows["null2"]["addresses"], rows
    f = fib(vecgate, sock)
    assert "198.18.5.0/24" in f and "198.19.55.0/24" in f
    # The tunnel from null1's address still runs (re-created with it or kept).
    tunnels = json.loads(ctl(vecgate, sock, "show", "gtpu", "tunnels", json_out=True).stdout)["data"]
    assert tunnels["total"] == 1, tunnels
    # Back to A: null2 and its route go, null1 returns to its first form.
    write(cfg, A)
    code, r = reload(vecgate, sock)
    assert code == 0, r
    got = changes(r)
    assert ("removed", "interface", "null2") in got and ("replaced", "interface", "null1") in got, got
    assert ("removed", "route", "198.19.55.0/24 via 198.18.5.2") in got, got
    rows = {i["name"]: i for i in json.loads(ctl(vecgate, sock, "show", "interfaces", json_out=True).stdout)["data"]}
    assert set(rows) == {"pg0", "null0", "null1"} and rows["null1"]["mtu"] == 1500, rows
    assert "198.18.5.0/24" not in fib(vecgate, sock)


def test_file_owns_what_it_declares(vecgate, gateway):
    cfg, sock, _ = gateway(A)
    # A route made with ctl, never in the file: reload leaves it.
    assert ctl(vecgate, sock, "ip", "route", "add", "198.19.123.0/24", "via", "198.18.2.2").returncode == 0
    # A route of the file removed with ctl: reload puts it back.
    assert ctl(vecgate, sock, "ip", "route", "del", "198.19.50.0/24").returncode == 0
    code, r = reload(vecgate, sock)
    assert code == 0, r
    assert changes(r) == {("added", "route", "198.19.50.0/24 via 198.18.2.2")}
    f = fib(vecgate, sock)
    assert "198.19.123.0/24" in f and "198.19.50.0/24" in f


def test_sighup_reloads(vecgate, gateway):
    cfg, sock, p = gateway(A)
    write(cfg, B)
    p.send_signal(signal.SIGHUP)
    deadline = time.time() + 10
    while "198.19.90.0/24" not in fib(vecgate, sock):
        assert time.time() < deadline, "SIGHUP did not reload"
        time.sleep(0.1)
    assert p.poll() is None, "the gateway must keep running after SIGHUP"


def interface(vecgate, sock, name):
    rows = json.loads(ctl(vecgate, sock, "show", "interfaces", json_out=True).stdout)["data"]
    return next(r for r in rows if r["name"] == name)


def test_reload_under_load_loses_nothing_unchanged(vecgate, gateway):
    count, rate = 300_000, 100_000
    cfg, sock, _ = gateway(A, count, rate)
    flips = 0
    deadline = time.time() + 30
    while True:
        pg = next(n for n in json.loads(ctl(vecgate, sock, "show", "runtime", json_out=True).stdout)["data"]["nodes"]
                  if n["name"] == "pg-input")
        if pg["packets"] >= count:
            break
        assert time.time() < deadline, "the stream did not finish"
        write(cfg, B if flips % 2 == 0 else A, count, rate)
        code, r = reload(vecgate, sock)
        assert code == 0 and r["data"]["changes"], r
        flips += 1
        time.sleep(0.05)
    assert flips >= 5, "reloads must have happened while the stream ran"
    time.sleep(0.3)
    # Every packet of the unchanged route left by null0; nothing was dropped anywhere.
    assert interface(vecgate, sock, "null0")["tx_packets"] == count
    errs = json.loads(ctl(vecgate, sock, "show", "errors", json_out=True).stdout)["data"]
    assert not [e for e in errs if e["count"] > 0 and e["node"] in ("ip4-lookup", "ip4-rewrite", "error-drop")], errs


FEATURES_A = """
[lb]
snat4 = "198.18.2.1"

[[lb_service]]
name = "web"
type = "cluster_ip"
vip = "198.18.200.10"
port = 80
protocol = "tcp"
backends = [{ addr = "198.18.2.10", port = 8080 }, { addr = "198.18.2.11", port = 8080 }]

[[ipsec_sa]]
index = 7
spi = 4097
direction = "outbound"
algorithm = "aes-gcm-128"
enc_key = "000102030405060708090a0b0c0d0e0f10111213"
local = "198.18.3.1"
remote = "198.18.3.20"

[[ipsec_spd]]
id = 1
interfaces = ["null1"]

[[ipsec_policy]]
spd = 1
direction = "outbound"
priority = 10
action = "protect"
sa = 7
remote = "198.19.40.0/24"
"""


def test_reload_feature_sections(vecgate, gateway):
    cfg, sock, _ = gateway(FEATURES_A)
    spd = json.loads(ctl(vecgate, sock, "show", "ipsec", "spd", json_out=True).stdout)["data"]
    v0 = spd["version"]
    # Unchanged: nothing touched (the SPD version would move with any policy change).
    code, r = reload(vecgate, sock)
    assert code == 0 and r["data"]["changes"] == [], r
    assert json.loads(ctl(vecgate, sock, "show", "ipsec", "spd", json_out=True).stdout)["data"]["version"] == v0
    # B: a backend more, a new key for SA 7, a second policy, the binding moved to null0.
    b = (FEATURES_A.replace('{ addr = "198.18.2.11", port = 8080 }]',
                            '{ addr = "198.18.2.11", port = 8080 }, { addr = "198.18.2.12", port = 8080 }]')
         .replace("10111213", "10111214")
         .replace('interfaces = ["null1"]', 'interfaces = ["null0"]')
         + '\n[[ipsec_policy]]\nspd = 1\ndirection = "outbound"\npriority = 5\naction = "bypass"\n')
    write(cfg, b)
    code, r = reload(vecgate, sock)
    assert code == 0, r
    got = changes(r)
    assert ("replaced", "lb_service", "web") in got, got
    assert ("replaced", "ipsec_sa", "SA 7") in got, got
    assert ("removed", "ipsec_spd", "binding of null1") in got, got
    assert ("added", "ipsec_spd", "spd 1 on null0") in got, got
    assert sum(1 for c in got if c[:2] == ("added", "ipsec_policy")) == 1, got
    assert len(got) == 5, got
    backends = json.loads(ctl(vecgate, sock, "show", "lb", "backends", json_out=True).stdout)["data"]
    assert "198.18.2.12" in json.dumps(backends)
    spd = json.loads(ctl(vecgate, sock, "show", "ipsec", "spd", json_out=True).stdout)["data"]
    assert len(spd["policies"]) == 2 and spd["version"] > v0
    assert [x["interface"] for x in spd["bindings"]] == ["null0"], spd["bindings"]
    # Back to A: the bypass policy goes, the first stays.
    write(cfg, FEATURES_A)
    code, r = reload(vecgate, sock)
    assert code == 0, r
    assert sum(1 for c in changes(r) if c[:2] == ("removed", "ipsec_policy")) == 1, changes(r)
    spd = json.loads(ctl(vecgate, sock, "show", "ipsec", "spd", json_out=True).stdout)["data"]
    assert len(spd["policies"]) == 1


def test_urpf_changes_in_place(vecgate, gateway):
    """An interface's `urpf` changes by a reload in place, even on a generator link that
    opens at start-up only (anything else changed there would be refused), and by `set
    interface … urpf` until the next reload applies the file's again."""
    cfg, sock, _ = gateway(A)

    def modes():
        r = ctl(vecgate, sock, "show", "interfaces", json_out=True)
        return {i["name"]: i["urpf"] for i in json.loads(r.stdout)["data"]}

    assert modes() == {"pg0": "off", "null0": "off", "null1": "off"}
    strict_pg0 = BASE.replace('name = "pg0"\ntype = "pg"\n', 'name = "pg0"\ntype = "pg"\nurpf = "strict"\n', 1)
    assert strict_pg0 != BASE
    cfg.write_text(strict_pg0 + A)
    code, r = reload(vecgate, sock)
    assert code == 0 and changes(r) == {("replaced", "setting", "interface pg0: urpf = strict")}, r
    assert modes()["pg0"] == "strict"
    r = ctl(vecgate, sock, "set", "interface", "null1", "urpf", "loose")
    assert r.returncode == 0 and "null1: urpf loose" in r.stdout, r.stdout + r.stderr
    r = ctl(vecgate, sock, "set", "interface", "null1", "urpf", "sometimes")
    assert r.returncode != 0 and "expected strict, loose or off" in r.stdout + r.stderr
    r = ctl(vecgate, sock, "set", "interface", "nosuch", "urpf", "loose")
    assert r.returncode != 0 and "nosuch" in r.stdout + r.stderr
    assert modes() == {"pg0": "strict", "null0": "off", "null1": "loose"}
    show = ctl(vecgate, sock, "show", "interfaces").stdout
    assert "urpf strict" in show and "urpf loose" in show, show
    # The file again: null1 back to off, pg0 stays strict, nothing else changes.
    code, r = reload(vecgate, sock)
    assert code == 0 and changes(r) == {("replaced", "setting", "interface null1: urpf = off")}, r
    assert modes() == {"pg0": "strict", "null0": "off", "null1": "off"}
    # A bad value names the file, the field and what was expected.
    cfg.write_text(BASE.replace('type = "pg"\n', 'type = "pg"\nurpf = "yes"\n', 1) + A)
    code, r = reload(vecgate, sock)
    assert code != 0 and "urpf" in r["error"] and "gw.toml" in r["error"], r


INBOUND_SA = """
[[ipsec_sa]]
index = 8
spi = 8193
direction = "inbound"
algorithm = "aes-gcm-128"
enc_key = "000102030405060708090a0b0c0d0e0f10111213"
local = "198.18.3.1"
remote = "198.18.3.20"
"""


def test_an_inbound_sas_urpf_changes_in_place(vecgate, gateway):
    """An inbound SA's `urpf` changes by a reload in place (keys and replay window stay:
    crates/ipsec/tests/esp_nodes.rs checks the window), and by `ipsec sa set … urpf`
    until the next reload applies the file's again; an outbound SA refuses it by name."""
    cfg, sock, _ = gateway(FEATURES_A + INBOUND_SA)

    def modes():
        r = ctl(vecgate, sock, "show", "ipsec", "sa", json_out=True)
        return {s["index"]: s["urpf"] for s in json.loads(r.stdout)["data"]["sas"]}

    assert modes() == {7: "off", 8: "off"}
    write(cfg, FEATURES_A + INBOUND_SA + 'urpf = "strict"\n')
    code, r = reload(vecgate, sock)
    assert code == 0 and changes(r) == {("replaced", "ipsec_sa", "SA 8 (urpf in place)")}, r
    assert modes() == {7: "off", 8: "strict"}
    r = ctl(vecgate, sock, "ipsec", "sa", "set", "8", "urpf", "loose")
    assert r.returncode == 0 and "SA 8: urpf loose" in r.stdout, r.stdout + r.stderr
    assert "urpf loose" in ctl(vecgate, sock, "show", "ipsec", "sa").stdout
    r = ctl(vecgate, sock, "ipsec", "sa", "set", "7", "urpf", "strict")
    assert r.returncode != 0 and "expected off except on an inbound tunnel-mode SA" in r.stdout + r.stderr, r.stdout + r.stderr
    r = ctl(vecgate, sock, "ipsec", "sa", "set", "9", "urpf", "strict")
    assert r.returncode != 0 and "index 9: no such SA" in r.stdout + r.stderr, r.stdout + r.stderr
    assert modes() == {7: "off", 8: "loose"}
    # The file again: back to strict, nothing else touched.
    code, r = reload(vecgate, sock)
    assert code == 0 and changes(r) == {("replaced", "ipsec_sa", "SA 8 (urpf in place)")}, r
    assert modes() == {7: "off", 8: "strict"}
    code, r = reload(vecgate, sock)
    assert code == 0 and r["data"]["changes"] == [], r
    # Anything else changed replaces the SA.
    write(cfg, FEATURES_A + INBOUND_SA.replace("8193", "8194") + 'urpf = "strict"\n')
    code, r = reload(vecgate, sock)
    assert code == 0 and changes(r) == {("replaced", "ipsec_sa", "SA 8")}, r


SOURCES = """
[lb]
snat4 = "198.18.2.1"

[[lb_service]]
name = "edge"
type = "load_balancer"
vip = "198.18.201.10"
port = 443
protocol = "tcp"
source_ranges = [RANGES]
backends = [{ addr = "198.18.2.10", port = 8443 }]
"""


def test_reload_changes_a_services_source_ranges(vecgate, gateway):
    def ranges(sock):
        rows = json.loads(ctl(vecgate, sock, "show", "lb", "services", json_out=True).stdout)["data"]
        [edge] = [r for r in rows if r["name"] == "edge"]
        return edge["source_ranges"]

    cfg, sock, _ = gateway(SOURCES.replace("RANGES", '"198.18.50.0/24", "198.18.51.0/24"'))
    assert sorted(ranges(sock)) == ["198.18.50.0/24", "198.18.51.0/24"]
    # The same ranges in another order: a set, nothing to do.
    write(cfg, SOURCES.replace("RANGES", '"198.18.51.0/24", "198.18.50.0/24"'))
    code, r = reload(vecgate, sock)
    assert code == 0 and r["data"]["changes"] == [], r
    # Other ranges: the service is replaced (its sessions meet the new ranges).
    write(cfg, SOURCES.replace("RANGES", '"198.18.60.0/24", "198.18.61.0/24"'))
    code, r = reload(vecgate, sock)
    assert code == 0, r
    assert changes(r) == {("replaced", "lb_service", "edge")}, r
    assert sorted(ranges(sock)) == ["198.18.60.0/24", "198.18.61.0/24"]
    # A bad range refuses the whole file, naming the field; the running ranges stay.
    write(cfg, SOURCES.replace("RANGES", '"198.18.60.1/24"'))
    code, r = reload(vecgate, sock)
    assert code != 0 and "lb_service[0].source_ranges[0]" in r["error"], r
    assert sorted(ranges(sock)) == ["198.18.60.0/24", "198.18.61.0/24"]
    # None: every source again.
    write(cfg, SOURCES.replace("source_ranges = [RANGES]\n", ""))
    code, r = reload(vecgate, sock)
    assert code == 0 and changes(r) == {("replaced", "lb_service", "edge")}, r
    assert ranges(sock) == []
