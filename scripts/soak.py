"""The soak run (issue 25; not a CI test): traffic through GTP-U and UDP tunnels, a load
balancer service, an IPsec SPD-protected flow and a PFCP session at the worker's full
rate for a long time while the control plane adds and deletes routes, tunnels, services
and backends, SAs and SPD policies, and PFCP sessions without pause. What must hold:

- zero loss on the traffic the churn does not touch: every packet the generators send
  into the static tunnels (both directions), to the static service, into the static
  SA's policy and into the static PFCP session leaves the other side, counted exactly
  once the generators have sent their `count`;
- resident memory flat after warm-up (sampled every few seconds into a CSV, drawn as an
  SVG);
- no table growth beyond what the churn holds: the FIB, the GTP-U and UDP tunnel tables,
  the load balancer's services and sessions, the SAs and SPD policies and the PFCP
  sessions never hold more than the static entries plus the churn window, and are back
  to the static ones when the churn has deleted what it added.

Layout (every interface a packet generator or a discard sink, so the run needs no
network): `access0` and `core0` generate the unaffected tunnel traffic (users into a
static GTP-U tunnel and a static GUE tunnel; G-PDUs and GUE from the peers to the
users), whose output goes out of `core0` and `access0`; `lbc0` sends clients' UDP to the
static service `soak/stable`, translated to its backends out of `lbb0`; `ipc0` sends a
flow the static outbound policy protects with the static SA, encrypted out of `esp0`
(the SPD is bound there); `n3` sends G-PDUs of the static PFCP session (set up by the
SMF of tests/pfcp_smf.py over loopback, with an F-TEID and UE address of its own
choosing), decapsulated out of `n6`, and `n6` sends its downlink to the UE address,
encapsulated out of `n3`; `churn0` generates traffic toward the churned prefixes and
services, which leaves by `sink0` (or is dropped while its route or service is away).
So `core0.tx == access0.rx`, `access0.tx == core0.rx`, `lbb0.tx == lbc0.rx`,
`esp0.tx == ipc0.rx` exactly at the end, and `n6.tx == n3.rx`, `n3.tx == n6.rx` less
the packets that came before the static session was set up (counted by `upf4-uplink`
and `upf4-downlink`, which must count none after it; the Error Indications that
answered the early G-PDUs left by `n3` too).

Usage: python3 scripts/soak.py --vecgate target/release/vecgate [--seconds 600]
       [--out DIR] [--svg docs/soak-rss.svg]
"""
import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
from pfcp_smf import Smf, ies  # noqa: E402  (the tests' SMF, scapy's PFCP)
from test_pfcp import free_udp_port  # noqa: E402

# Tunnel peers behind sink0: more than the churn window, so no two live tunnels share
# one (a UDP tunnel is one per local, remote and encapsulation).
PEERS = 40
# Source ports the static service's and the protected flow's generators turn through:
# that many load balancer sessions and flow cache entries.
FLOWS = 64
# Destinations the churned services' generator turns through (198.18.129.1 + i): a
# churned service's address is one of them, so each gets traffic while it lives.
CHURN_VIPS = 32
# The static PFCP session: an F-TEID and a UE address the SMF assigns (no CHOOSE), so the
# generator can be configured before it exists. The TEID is far from the UPF's own (1 up,
# reused densely) and the churned GTP-U tunnels' (10000 up).
PFCP_TEID = 0x7F000001
PFCP_UE = "198.19.7.200"
GNB = "198.18.7.10"


def config(sock, streams, pfcp_port, workers=1):
    s = f"""
[dataplane]
socket = "{sock}"
buffers = 16384
workers = {workers}

[[interface]]
name = "access0"
type = "pg"
mac = "02:00:00:00:00:01"
addresses = ["198.18.0.1/24"]

[[interface]]
name = "core0"
type = "pg"
mac = "02:00:00:00:00:02"
addresses = ["198.18.1.1/24"]

[[interface]]
name = "churn0"
type = "pg"
mac = "02:00:00:00:00:03"
addresses = ["198.18.2.1/24"]

[[interface]]
name = "sink0"
type = "pg"
mac = "02:00:00:00:00:04"
addresses = ["198.18.3.1/24"]

[[interface]]
name = "lbc0"
type = "pg"
mac = "02:00:00:00:00:05"
addresses = ["198.18.4.1/24"]

[[interface]]
name = "lbb0"
type = "pg"
mac = "02:00:00:00:00:06"
addresses = ["198.18.5.1/24"]

[[interface]]
name = "ipc0"
type = "pg"
mac = "02:00:00:00:00:07"
addresses = ["198.18.6.1/24"]

[[interface]]
name = "esp0"
type = "pg"
mac = "02:00:00:00:00:08"
addresses = ["198.18.10.1/24"]

[[interface]]
name = "n3"
type = "pg"
mac = "02:00:00:00:07:02"
addresses = ["198.18.7.2/24"]

[[interface]]
name = "n6"
type = "pg"
mac = "02:00:00:00:08:01"
addresses = ["198.18.8.1/24"]

[[neighbour]]
interface = "access0"
ip = "198.18.0.2"
mac = "02:00:00:00:01:02"

[[neighbour]]
interface = "core0"
ip = "198.18.1.2"
mac = "02:00:00:00:02:02"

[[neighbour]]
interface = "core0"
ip = "198.18.1.5"
mac = "02:00:00:00:02:05"

[[neighbour]]
interface = "lbc0"
ip = "198.18.4.2"
mac = "02:00:00:00:05:02"

[[neighbour]]
interface = "lbb0"
ip = "198.18.5.2"
mac = "02:00:00:00:06:02"

[[neighbour]]
interface = "ipc0"
ip = "198.18.6.2"
mac = "02:00:00:00:07:03"

[[neighbour]]
interface = "esp0"
ip = "198.18.10.2"
mac = "02:00:00:00:0a:02"

[[neighbour]]
interface = "n3"
ip = "{GNB}"
mac = "02:00:00:00:07:10"

[[neighbour]]
interface = "n6"
ip = "198.18.8.2"
mac = "02:00:00:00:08:02"
"""
    for k in range(PEERS):
        s += f"""
[[neighbour]]
interface = "sink0"
ip = "198.18.3.{10 + k}"
mac = "02:00:00:00:04:{10 + k:02x}"
"""
    s += f"""
# The unaffected tunnels: GTP-U with 198.18.1.2 for 198.19.10.0/24, GUE with 198.18.1.5
# for 198.19.20.0/24.
[[gtpu_tunnel]]
local = "198.18.1.1"
remote = "198.18.1.2"
teid_in = 100
teid_out = 200
checksum = "software"
ue = "198.19.10.0/24"

[[udp_tunnel]]
local = "198.18.1.1"
remote = "198.18.1.5"
encap = "gue"
port = 6080
routes = ["198.19.20.0/24"]

# The unaffected service: its backends behind lbb0, the node's address there the SNAT
# source. The churned services' backends are behind sink0.
[[route]]
prefix = "198.19.64.0/24"
via = "198.18.5.2"

[[route]]
prefix = "198.19.65.0/24"
via = "198.18.3.10"

[lb]
snat4 = "198.18.5.1"
timeouts = {{ udp_ms = 10000 }}

[[lb_service]]
name = "soak/stable"
type = "cluster_ip"
vip = "198.18.128.10"
port = 53
protocol = "udp"
backends = [{{ addr = "198.19.64.10", port = 5353 }}, {{ addr = "198.19.64.11", port = 5353 }}]

# The unaffected protected flow: 198.18.6.0/24 to 198.19.96.0/24 (UDP) leaves by esp0,
# whose SPD protects it with SA 1 (the churned policies name other SAs).
[[route]]
prefix = "198.19.96.0/22"
via = "198.18.10.2"

[spd]
flow_cache = 65536

[[ipsec_sa]]
index = 1
spi = 4097
direction = "outbound"
algorithm = "aes-gcm-128"
enc_key = "000102030405060708090a0b0c0d0e0f10111213"
local = "198.18.10.1"
remote = "198.18.10.2"

[[ipsec_spd]]
id = 1
interfaces = ["esp0"]

[[ipsec_policy]]
spd = 1
direction = "outbound"
priority = 100
action = "protect"
sa = 1
local = "198.18.6.0/24"
remote = "198.19.96.0/24"
protocol = "udp"

# The data network behind n6, where the PFCP sessions' uplink goes.
[[route]]
prefix = "198.18.9.0/24"
via = "198.18.8.2"

[pfcp]
listen = "127.0.0.1:{pfcp_port}"
node_id = "127.0.0.1"
n3 = "198.18.7.2"
ue_pool = "198.19.7.0/24"
smf_port = 0
allowed_peers = ["127.0.0.1"]
"""
    for st in streams:
        st = dict(st)
        mod = st.pop("modify", None)
        s += "\n[[stream]]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in st.items())
        if mod:
            s += "[[stream.modify]]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in mod.items())
    return s


# The unaffected streams, each with the interface it enters by and the one its packets
# leave by.
PATHS = {"users-gtpu": ("access0", "core0"), "users-gue": ("access0", "core0"), "peer-gtpu": ("core0", "access0"),
         "peer-gue": ("core0", "access0"), "lb-clients": ("lbc0", "lbb0"), "protected": ("ipc0", "esp0"),
         "pfcp-uplink": ("n3", "n6"), "pfcp-downlink": ("n6", "n3")}


def streams(rate, count):
    """The unaffected streams (A: users into GTP-U, C: users into GUE, B: G-PDUs to the
    users, D: GUE to the users, the static service's clients, the protected flow, the
    static PFCP session's uplink and downlink) and the churn streams (toward the churned
    routes, toward the churned services); rate None: as fast as possible."""
    lim = {} if rate is None else {"rate": rate}
    cnt = {} if count is None else {"count": count}
    base = [
        {"name": "users-gtpu", "interface": "access0", "size": 256, "protocol": "udp", "src": "198.18.0.2", "dst": "198.19.10.5"},
        {"name": "users-gue", "interface": "access0", "size": 256, "protocol": "udp", "src": "198.18.0.2", "dst": "198.19.20.5"},
        {"name": "peer-gtpu", "interface": "core0", "size": 256, "protocol": "gtpu", "src": "198.18.1.2", "dst": "198.18.1.1",
         "teid": 100, "inner_src": "198.19.10.5", "inner_dst": "198.18.0.2"},
        {"name": "peer-gue", "interface": "core0", "size": 256, "protocol": "gue", "src": "198.18.1.5", "dst": "198.18.1.1",
         "dst_port": 6080, "inner_src": "198.19.20.5", "inner_dst": "198.18.0.2"},
        {"name": "lb-clients", "interface": "lbc0", "size": 256, "protocol": "udp", "src": "198.18.4.2", "dst": "198.18.128.10",
         "src_port": 20000, "dst_port": 53, "modify": {"field": "src-port", "increment": FLOWS}},
        {"name": "protected", "interface": "ipc0", "size": 256, "protocol": "udp", "src": "198.18.6.2", "dst": "198.19.96.5",
         "src_port": 30000, "dst_port": 4000, "modify": {"field": "src-port", "increment": FLOWS}},
        {"name": "pfcp-uplink", "interface": "n3", "size": 256, "protocol": "gtpu", "src": GNB, "dst": "198.18.7.2",
         "teid": PFCP_TEID, "inner_src": PFCP_UE, "inner_dst": "198.18.9.5"},
        {"name": "pfcp-downlink", "interface": "n6", "size": 256, "protocol": "udp", "src": "198.18.9.5", "dst": PFCP_UE},
    ]
    for b in base:
        b.update(lim)
        b.update(cnt)
    crate = max(1, (rate or 100000) // 10)
    churn = [{"name": "churn", "interface": "churn0", "size": 128, "protocol": "udp", "src": "198.18.2.2", "dst": "198.19.128.1",
              "rate": crate},
             {"name": "churn-services", "interface": "churn0", "size": 128, "protocol": "udp", "src": "198.18.2.3",
              "dst": "198.18.129.1", "dst_port": 80, "rate": crate, "modify": {"field": "dst", "increment": CHURN_VIPS}}]
    if count is not None:
        for c in churn:
            c["count"] = max(1, count // 10)
    return base + churn


class Gateway:
    def __init__(self, vecgate, cfg_text, workdir, nice):
        self.vecgate, self.dir = vecgate, workdir
        self.sock = os.path.join(workdir, "soak.sock")
        path = os.path.join(workdir, "soak.toml")
        with open(path, "w") as f:
            f.write(cfg_text.replace("__SOCK__", self.sock))
        self.log = open(os.path.join(workdir, "vecgate.log"), "w")
        cmd = ["nice", "-n", str(nice), vecgate, "run", "--config", path, "--interval", "0"]
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        for _ in range(200):
            if os.path.exists(self.sock):
                break
            if self.proc.poll() is not None:
                sys.exit(f"soak: vecgate exited: see {self.log.name}")
            time.sleep(0.05)
        else:
            sys.exit("soak: no control socket after 10 s")
        # The control socket is bound before the dataplane (and PFCP's socket): a request
        # answered means both are up.
        self.ctl("show", "runtime")

    def ctl(self, *words, check=True):
        r = subprocess.run([self.vecgate, "ctl", "--socket", self.sock, "--json", *map(str, words)], capture_output=True, text=True)
        if check and r.returncode != 0:
            raise RuntimeError(f"ctl {' '.join(map(str, words))}: {r.stderr.strip()} {r.stdout.strip()}")
        return json.loads(r.stdout)["data"] if r.returncode == 0 else None

    def rss_kb(self):
        # The vecgate process is the child of `nice` (exec'd: same pid).
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def interfaces(gw):
    return {i["name"]: i for i in gw.ctl("show", "interfaces")}


def errors(gw, node):
    """The counters of one node, by name."""
    return {e["counter"]: e["count"] for e in gw.ctl("show", "errors", "all") if e["node"] == node}


def upf_drops(gw):
    """What upf4-uplink and upf4-downlink did with packets other than forward them (before
    the static session: Error Indications for the G-PDUs, or drops as `no-session`; after
    it: nothing), by node and counter."""
    return {(n, k): v for n in ("upf4-uplink", "upf4-downlink") for k, v in errors(gw, n).items()
            if k not in ("forwarded", "encapsulated") and v}


TABLES = ("fib", "gtpu_tunnels", "udp_tunnels", "lb_services", "lb_sessions", "ipsec_sas", "ipsec_policies", "pfcp_sessions")


def tables(gw):
    return {
        "fib": len(gw.ctl("show", "ip", "fib", "limit", "0")),
        "gtpu_tunnels": gw.ctl("show", "gtpu", "tunnels", "100000")["total"],
        "udp_tunnels": len(udp_list(gw)),
        "lb_services": len(lb_services(gw)),
        "lb_sessions": gw.ctl("show", "lb", "sessions", "limit", "1")["total"],
        "ipsec_sas": len(ipsec_sas(gw)),
        "ipsec_policies": len(gw.ctl("show", "ipsec", "spd")["policies"]),
        "pfcp_sessions": gw.ctl("show", "pfcp", "sessions")["total"],
    }


def table_bounds(static, window):
    """What the churn may hold beyond the static entries: each step a route, a GTP-U
    tunnel with its UE route, a UDP tunnel with its route and a service with its address's
    route (four FIB entries); a service, an SA and a policy, a PFCP session (whose UE
    address is in the pool's one route); the static service's sessions (one per source
    port of its generator) and the churned services' (one per destination of theirs, a
    second while a deleted service's ages out)."""
    extra = {"fib": 4 * window, "gtpu_tunnels": window + 1, "udp_tunnels": window + 1, "lb_services": window + 1,
             "ipsec_sas": window + 1, "ipsec_policies": window + 1, "pfcp_sessions": window + 1}
    b = {k: static[k] + v for k, v in extra.items()}
    b["lb_sessions"] = FLOWS + 2 * CHURN_VIPS
    return b


def calibrate(vecgate, workdir, nice, workers, seconds=5.0):
    """Packets per second per unaffected stream at full rate (no limit), in this run."""
    gw = Gateway(vecgate, config("__SOCK__", streams(None, None), free_udp_port(), workers), workdir, nice)
    try:
        time.sleep(1.0)
        a = interfaces(gw)
        t0 = time.time()
        time.sleep(seconds)
        b = interfaces(gw)
        dt = time.time() - t0
    finally:
        gw.stop()
    # What left the far side, not what the generators made: with several workers the
    # first one makes every interface's packets and what the others cannot take is
    # dropped on its way to them (`lane-full`).
    tx = sum(b[n]["tx_packets"] - a[n]["tx_packets"] for n in ("access0", "core0"))
    return tx / dt / 4


class Pfcp:
    """The SMF of tests/pfcp_smf.py on loopback: the static session (F-TEID and UE address
    assigned by the SMF, the QER's MBR raised past the generator's rate) and the churned
    ones (F-TEID and UE address chosen by the UPF)."""

    def __init__(self, port):
        self.smf = Smf("127.0.0.1", port)
        self.smf.sock.settimeout(30)  # a gateway at low priority on a loaded machine may be slow
        if ies(self.smf.associate())["IE_Cause"].cause != 1:
            raise RuntimeError("PFCP association refused")
        self.cp_seid = 0x5000

    def establish_static(self):
        body = self.smf.establish_request(0x1, GNB, 0x100, ue=PFCP_UE)
        for pdr in (ie for ie in body.IE_list if type(ie).__name__ == "IE_CreatePDR"):
            for ie in pdr.IE_list:
                if type(ie).__name__ == "IE_PDI":
                    for sub in ie.IE_list:
                        if type(sub).__name__ == "IE_FTEID":
                            sub.CH, sub.CHID, sub.TEID, sub.ipv4 = 0, 0, PFCP_TEID, "198.18.7.2"
        for qer in (ie for ie in body.IE_list if type(ie).__name__ == "IE_CreateQER"):
            for ie in qer.IE_list:
                if type(ie).__name__ == "IE_MBR":
                    ie.ul, ie.dl = 400_000_000, 400_000_000  # kbit/s: no policing of the generator
        r = ies(self.smf.request(body, seid=0))
        if r["IE_Cause"].cause != 1:
            raise RuntimeError(f"the static PFCP session was refused: cause {r['IE_Cause'].cause}")
        return r["IE_FSEID"].seid

    def establish(self):
        self.cp_seid += 1
        r = ies(self.smf.establish(self.cp_seid, GNB, 0x200 + self.cp_seid % 1000))
        self.forget()
        if r["IE_Cause"].cause != 1:
            raise RuntimeError(f"PFCP session establishment refused: cause {r['IE_Cause'].cause}")
        return r["IE_FSEID"].seid

    def delete(self, seid):
        r = ies(self.smf.delete(seid))
        self.forget()
        if r["IE_Cause"].cause != 1:
            raise RuntimeError(f"PFCP session deletion refused: cause {r['IE_Cause'].cause}")

    def forget(self):
        # The SMF keeps every message for tshark, and the reports it answered: not over hours.
        self.smf.log.clear()
        self.smf.reports.clear()
        self.smf.heartbeats.clear()


class Churn:
    """Adds and deletes routes, GTP-U tunnels, UDP tunnels toward sink0, services (and
    their backends), SAs with an SPD policy each, and PFCP sessions, keeping at most
    `window` of each alive (oldest deleted first). Each step also adds a backend to the
    newest service but one, marks its first backend terminating and deletes the added
    one again."""

    def __init__(self, gw, window, pfcp):
        self.gw, self.window, self.k, self.pfcp = gw, window, 0, pfcp
        self.routes, self.gtpu, self.udp, self.services, self.ipsec, self.sessions = [], [], [], [], [], []
        self.ops = Counter()

    @property
    def total(self):
        return sum(self.ops.values())

    def step(self):
        k, gw = self.k, self.gw
        self.k += 1
        peer = f"198.18.3.{10 + k % PEERS}"
        prefix = f"198.19.{128 + k % 32}.0/24"
        gw.ctl("ip", "route", "add", prefix, "via", peer)
        self.routes.append(prefix)
        before = {t["name"] for t in gw.ctl("show", "gtpu", "tunnels", "100000")["tunnels"]}
        gw.ctl("create", "gtpu", "tunnel", "local", "198.18.1.1", "remote", peer, "teid-in", 10000 + k, "teid-out", 20000 + k,
               "ue", f"198.19.{160 + k % 32}.0/24")
        after = {t["name"] for t in gw.ctl("show", "gtpu", "tunnels", "100000")["tunnels"]}
        self.gtpu += sorted(after - before)
        before = {t["name"] for t in udp_list(gw)}
        gw.ctl("create", "udp", "tunnel", "local", "198.18.1.1", "remote", peer, "encap", "gre", "key", 1000 + k,
               "route", f"198.19.{192 + k % 32}.0/24")
        after = {t["name"] for t in udp_list(gw)}
        self.udp += sorted(after - before)
        self.ops.update(route_add=1, gtpu_add=1, udp_add=1)

        # A service on one of the churned addresses, then its elder's backends churned.
        name = f"soak/churn-{k}"
        vip = f"198.18.129.{1 + k % CHURN_VIPS}"
        gw.ctl("lb", "service", "add", name, "cluster_ip", vip, 80, "udp", "backend", f"198.19.65.{1 + k % 200}:80")
        self.services.append(name)
        self.ops.update(lb_service_add=1)
        if len(self.services) >= 2:
            elder, first = self.services[-2], f"198.19.65.{1 + (k - 1) % 200}"
            extra = f"198.19.65.{201 + k % 50}"
            gw.ctl("lb", "backend", "add", elder, extra, 80)
            gw.ctl("lb", "backend", "set", elder, first, 80, "terminating")
            gw.ctl("lb", "backend", "del", elder, extra, 80)
            self.ops.update(lb_backend_add=1, lb_backend_set=1, lb_backend_del=1)

        # An SA and a policy for it: every other one covers the protected flow at a lower
        # priority than its own policy (so its flow cache entries are revalidated), the
        # rest other remotes at a higher one.
        sa = 1000 + k % 64
        gw.ctl("ipsec", "sa", "add", sa, "spi", 0x10000 + k, "outbound", "alg", "aes-gcm-128",
               "enc-key", "%040x" % (k + 1), "local", "198.18.10.1", "remote", "198.18.10.2")
        sel = ["priority", 10, "protect", sa, "remote", "198.19.96.0/23"] if k % 2 else \
            ["priority", 200, "protect", sa, "remote", f"198.19.{97 + k % 3}.{k % 256}/32"]
        before = {p["id"] for p in gw.ctl("show", "ipsec", "spd")["policies"]}
        gw.ctl("ipsec", "policy", "add", "spd", 1, "outbound", *sel, "protocol", "udp")
        after = {p["id"] for p in gw.ctl("show", "ipsec", "spd")["policies"]}
        self.ipsec.append((sorted(after - before), sa))
        self.ops.update(ipsec_sa_add=1, ipsec_policy_add=1)

        self.sessions.append(self.pfcp.establish())
        self.ops.update(pfcp_session_add=1)
        while len(self.routes) > self.window:
            self.delete_oldest()

    def delete_oldest(self):
        gw = self.gw
        if self.routes:
            gw.ctl("ip", "route", "del", self.routes.pop(0))
            self.ops.update(route_del=1)
        if self.gtpu:
            gw.ctl("delete", "gtpu", "tunnel", self.gtpu.pop(0))
            self.ops.update(gtpu_del=1)
        if self.udp:
            gw.ctl("delete", "udp", "tunnel", self.udp.pop(0))
            self.ops.update(udp_del=1)
        if self.services:
            gw.ctl("lb", "service", "del", self.services.pop(0))
            self.ops.update(lb_service_del=1)
        if self.ipsec:
            ids, sa = self.ipsec.pop(0)
            for i in ids:
                gw.ctl("ipsec", "policy", "del", i)
            gw.ctl("ipsec", "sa", "del", sa)
            self.ops.update(ipsec_policy_del=1, ipsec_sa_del=1)
        if self.sessions:
            self.pfcp.delete(self.sessions.pop(0))
            self.ops.update(pfcp_session_del=1)

    def drain(self):
        while self.routes or self.gtpu or self.udp or self.services or self.ipsec or self.sessions:
            self.delete_oldest()

    def rates(self, seconds):
        return ", ".join(f"{k} {v / seconds:.2f}/s" for k, v in sorted(self.ops.items()))


def udp_list(gw):
    d = gw.ctl("show", "udp", "tunnels")
    return d if isinstance(d, list) else d.get("tunnels", [])


def lb_services(gw):
    d = gw.ctl("show", "lb", "services")
    return d if isinstance(d, list) else d.get("services", [])


def ipsec_sas(gw):
    d = gw.ctl("show", "ipsec", "sa")
    return d if isinstance(d, list) else d.get("sas", [])


def svg(rows, path, warmup):
    """A small line chart of RSS (MiB) over time, the warm-up shaded."""
    w, h, m = 640, 240, 40
    t = [r["t"] for r in rows]
    y = [r["rss_kb"] / 1024 for r in rows]
    tmax, ymax = max(t) or 1, max(y) * 1.2 or 1
    px = lambda v: m + (w - 2 * m) * v / tmax  # noqa: E731
    py = lambda v: h - m - (h - 2 * m) * v / ymax  # noqa: E731
    pts = " ".join(f"{px(a):.1f},{py(b):.1f}" for a, b in zip(t, y))
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11">',
           f'<rect x="{m}" y="{m}" width="{px(warmup) - m:.1f}" height="{h - 2 * m}" fill="#eee"/>',
           f'<text x="{m + 4}" y="{m + 14}" fill="#666">warm-up</text>',
           f'<line x1="{m}" y1="{h - m}" x2="{w - m}" y2="{h - m}" stroke="#000"/>',
           f'<line x1="{m}" y1="{m}" x2="{m}" y2="{h - m}" stroke="#000"/>',
           f'<polyline fill="none" stroke="#c33" stroke-width="1.5" points="{pts}"/>',
           f'<text x="{w / 2}" y="{h - 8}" text-anchor="middle">seconds ({tmax:.0f} s run)</text>',
           f'<text x="12" y="{h / 2}" transform="rotate(-90 12 {h / 2})" text-anchor="middle">RSS MiB</text>']
    for v in (0, ymax / 2, ymax):
        out.append(f'<text x="{m - 4}" y="{py(v) + 4:.1f}" text-anchor="end">{v:.0f}</text>')
    out.append(f'<text x="{w - m}" y="{m - 8}" text-anchor="end">vecgate soak: resident memory under route and tunnel churn</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vecgate", default="target/release/vecgate")
    ap.add_argument("--seconds", type=int, default=600)
    ap.add_argument("--warmup", type=int, default=60)
    ap.add_argument("--window", type=int, default=16, help="entries of each kind the churn keeps alive")
    ap.add_argument("--sample", type=float, default=5.0)
    ap.add_argument("--load", type=float, default=0.8, help="share of the calibrated full rate each stream is given")
    ap.add_argument("--nice", type=int, default=10)
    ap.add_argument("--out", default=None, help="folder for the CSV and logs (default: a temporary one)")
    ap.add_argument("--svg", default=None)
    ap.add_argument("--workers", type=int, default=1,
                    help="dataplane workers: the generators' interfaces are the first worker's, software RSS hands the others their share")
    a = ap.parse_args()
    work = a.out or tempfile.mkdtemp(prefix="vecgate-soak-")
    os.makedirs(work, exist_ok=True)

    per_stream = calibrate(a.vecgate, work, a.nice, a.workers)
    rate = max(1000, int(per_stream * a.load))
    count = rate * a.seconds
    print(f"soak: full rate {per_stream:,.0f} packets/s per stream; running {len(PATHS)} x {rate:,} packets/s for {a.seconds} s"
          f" ({count:,} packets each), churn window {a.window}", flush=True)

    pfcp_port = free_udp_port()
    gw = Gateway(a.vecgate, config("__SOCK__", streams(rate, count), pfcp_port, a.workers), work, a.nice)
    rows, failures = [], []
    t0 = time.time()
    try:
        # The static session, then what upf4-uplink and upf4-downlink counted of the packets
        # that came before it (no session; G-PDUs answered by Error Indications, which leave
        # by n3): they must count none after.
        pfcp = Pfcp(pfcp_port)
        pfcp.establish_static()
        time.sleep(0.5)
        early = upf_drops(gw)
        static = tables(gw)
        bounds = table_bounds(static, a.window)
        churn = Churn(gw, a.window, pfcp)
        peak = dict(static)
        next_sample = 0.0
        while True:
            now = time.time() - t0
            if now >= next_sample:
                ifs = interfaces(gw)
                tab = tables(gw)
                row = {"t": round(now, 1), "rss_kb": gw.rss_kb(), **tab, "churn_ops": churn.total,
                       **{f"{n}_{d}": ifs[n][f"{d}_packets"] for n in ifs for d in ("rx", "tx")}}
                rows.append(row)
                print(" ".join(f"{k}={v}" for k, v in row.items()), flush=True)
                peak = {k: max(peak[k], tab[k]) for k in TABLES}
                over = {k: (tab[k], bounds[k]) for k in TABLES if tab[k] > bounds[k]}
                if over:
                    failures.append(f"t={now:.0f}: tables beyond static + window (now, bound): {over}")
                next_sample += a.sample
                sent = Counter(PATHS[n][0] for n in PATHS)
                done = all(ifs[i]["rx_packets"] >= n * count for i, n in sent.items())
                if now >= a.seconds and done:
                    break
                if now >= 3 * a.seconds:
                    failures.append(f"the generators had not sent their count after {now:.0f} s")
                    break
            churn.step()
        churn_secs = time.time() - t0
        churn.drain()
        time.sleep(1.0)
        ifs = interfaces(gw)
        late = upf_drops(gw)
        fc = gw.ctl("show", "ipsec", "flow-cache")["flow_cache"]["ipv4"]
        lbc = {k: v for k, v in errors(gw, "lb4-nat").items() if v}
        # Every node's counters at the end: what a failure names as the cause.
        counted = {(e["node"], e["counter"]): e["count"] for e in gw.ctl("show", "errors", "all") if e["count"]}
        # The churned services' sessions go with them or age out ([lb] timeouts.udp_ms):
        # wait for what is left of them, the static service's own counted apart.
        deadline = time.time() + 15
        while True:
            end_tables = tables(gw)
            stable = gw.ctl("show", "lb", "sessions", "service", "soak/stable", "limit", "1")["total"]
            if end_tables["lb_sessions"] == stable or time.time() > deadline:
                break
            time.sleep(1.0)
        rss_end = gw.rss_kb()
    finally:
        gw.stop()

    csv_path = os.path.join(work, "soak.csv")
    with open(csv_path, "w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        wr.writeheader()
        wr.writerows(rows)
    if a.svg:
        svg(rows, a.svg, a.warmup)

    up, down = (ifs["access0"]["rx_packets"], ifs["core0"]["tx_packets"]), (ifs["core0"]["rx_packets"], ifs["access0"]["tx_packets"])
    lb, esp = (ifs["lbc0"]["rx_packets"], ifs["lbb0"]["tx_packets"]), (ifs["ipc0"]["rx_packets"], ifs["esp0"]["tx_packets"])
    n3 = (ifs["n3"]["rx_packets"], ifs["n6"]["tx_packets"])
    ei = early.get(("upf4-uplink", "error-indications-sent"), 0)
    n6 = (ifs["n6"]["rx_packets"], ifs["n3"]["tx_packets"] - ei)
    pre = sum(v for (n, _), v in early.items() if n == "upf4-uplink")
    pre_dl = sum(v for (n, _), v in early.items() if n == "upf4-downlink")
    if up[0] != up[1] or down[0] != down[1]:
        failures.append(f"loss on unaffected traffic: users->core {up[0]} in, {up[1]} out; core->users {down[0]} in, {down[1]} out")
    if lb[0] != lb[1]:
        failures.append(f"loss on the static service: {lb[0]} in, {lb[1]} out to its backends")
    if esp[0] != esp[1]:
        failures.append(f"loss on the protected flow: {esp[0]} in, {esp[1]} out encrypted")
    if late != early:
        failures.append(f"the UPF nodes counted after the static session was set up: {early} then {late}")
    if n3[0] != n3[1] + pre:
        failures.append(f"loss on the static PFCP session's uplink: {n3[0]} in, {n3[1]} out, {pre} before the session")
    if n6[0] != n6[1] + pre_dl:
        failures.append(f"loss on the static PFCP session's downlink: {n6[0]} in, {n6[1]} out (Error Indications left out),"
                        f" {pre_dl} before the session")
    end_tables = dict(end_tables, lb_sessions=end_tables["lb_sessions"] - stable)
    want = dict(static, lb_sessions=0)
    if end_tables != want:
        failures.append(f"tables after the churn drained (the static service's sessions left out): {end_tables}, want {want}")
    warm = [r["rss_kb"] for r in rows if r["t"] >= a.warmup]
    growth = (max(warm) - min(warm)) if warm else 0
    if warm and growth > max(2048, min(warm) // 50):
        failures.append(f"RSS after warm-up grew {growth} KiB ({min(warm)} -> {max(warm)} KiB)")
    print(f"soak: {time.time() - t0:.0f} s, churn operations {churn.total} ({churn.total / churn_secs:.1f}/s: "
          f"{churn.rates(churn_secs)}); users->core {up[0]:,} in / {up[1]:,} out, core->users {down[0]:,} in / {down[1]:,} out; "
          f"service {lb[0]:,} in / {lb[1]:,} out; protected {esp[0]:,} in / {esp[1]:,} out; PFCP uplink {n3[0]:,} in / "
          f"{n3[1]:,} out ({pre:,} before the session), downlink {n6[0]:,} in / {n6[1]:,} out ({pre_dl:,} before); "
          f"churned traffic {ifs['churn0']['rx_packets']:,} in / "
          f"{ifs['sink0']['tx_packets']:,} out; tables start {static}, peak {peak}, end {end_tables} "
          f"(+ {stable} sessions of the static service); SPD flow cache {fc}; lb4-nat {lbc}; RSS after warm-up {min(warm) if warm else 0}-"
          f"{max(warm) if warm else 0} KiB (end {rss_end} KiB); CSV {csv_path}")
    for f in failures:
        print("soak: FAIL:", f)
    if failures:
        print("soak: every node's nonzero counters at the end:", ", ".join(f"{n} {c} {v:,}" for (n, c), v in sorted(counted.items())))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
