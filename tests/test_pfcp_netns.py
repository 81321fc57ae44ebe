"""GTP-U traffic both ways through vecgate as a UPF set up over PFCP, between Linux hosts
in network namespaces: gNB (198.18.7.10) ⇄ n3 — vecgate — n6 ⇄ data network host
(198.18.8.2). scapy's PFCP layer plays the SMF on vecgate's loopback (tests/pfcp_smf.py);
scapy builds the uplink G-PDUs and dissects the downlink ones; the data network host uses
plain sockets. Then a handover moves the downlink to a second gNB address (the old one gets
an End Marker); a QER's gate
and MBR police the downlink; a URR's quota stops the traffic with a report, and a deletion
reports the volumes sent (every PFCP message read by tshark)."""
import json
import subprocess
import sys
import time
from pathlib import Path


from netns import Vecgate

HERE = Path(__file__).resolve().parent
UPF_N3, UPF_N6, GNB, GNB2, DN = "198.18.7.2", "198.18.8.1", "198.18.7.10", "198.18.7.11", "198.18.8.2"
UPF_N6_6, DN6 = "2001:db8:8::1", "2001:db8:8::2"
COUNT = 20

# vecgate's links (`upf_hosts`): n3 toward the gNB, n6 toward the data network host.
UPF_LINKS = f"""
[[interface]]
name = "n3"
type = "af_packet"
host_if = "n3"
mac = "02:00:00:00:07:02"
addresses = ["{UPF_N3}/24"]

[[interface]]
name = "n6"
type = "af_packet"
host_if = "n6"
mac = "02:00:00:00:08:01"
addresses = ["{UPF_N6}/24", "{UPF_N6_6}/64"]
"""

CONFIG = UPF_LINKS + f"""
[pfcp]
listen = "127.0.0.1:8805"
n3 = "{UPF_N3}"
ue_pool = "198.19.7.0/24"
ue_pool6 = "2001:db8:19::/48"
allowed_peers = ["127.0.0.1"]
smf_port = 0
"""

# The SMF, run inside vecgate's namespace: associate, one session, print what was chosen.
SMF = """
import json, sys
from pfcp_smf import Smf, all_ies, ies
smf = Smf("127.0.0.1", 8805)
assert ies(smf.associate())["IE_Cause"].cause == 1
r = smf.establish(0x77, sys.argv[1], 0x200)
i = ies(r)
assert i["IE_Cause"].cause == 1, r.show(dump=True)
out = {"seid": i["IE_FSEID"].seid}
for c in all_ies(r, "IE_CreatedPDR"):
    for ie in c.IE_list:
        if type(ie).__name__ == "IE_FTEID":
            out["teid"] = ie.TEID
        if type(ie).__name__ == "IE_UE_IP_Address":
            out["ue"] = ie.ipv4
if len(sys.argv) > 2:
    assert ies(smf.handover(out["seid"], sys.argv[2], 0x300))["IE_Cause"].cause == 1
print(json.dumps(out))
"""

# Uplink sender on the gNB: COUNT G-PDUs with TEID argv[1], inner UE → DN UDP 7200.
GNB_SEND = f"""
import socket, sys, time
from scapy.all import IP, UDP, raw
from scapy.contrib.gtp import GTP_U_Header
teid, ue = int(sys.argv[1]), sys.argv[2]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("{GNB}", 2152))
for n in range({COUNT}):
    s.sendto(raw(GTP_U_Header(teid=teid) / IP(src=ue, dst="{DN}") / UDP(sport=7300, dport=7200) / f"up-{{n}}".encode()), ("{UPF_N3}", 2152))
    time.sleep(0.01)
"""

# A UDP receiver: prints the JSON list of (source, payload) it got within a few seconds.
RECV = """
import json, socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], int(sys.argv[2])))
s.settimeout(0.5)
print("READY", flush=True)
got, end = [], time.time() + float(sys.argv[3])
while time.time() < end and len(got) < int(sys.argv[4]):
    try:
        d, a = s.recvfrom(65536)
        got.append([a[0], d.hex()])
    except socket.timeout:
        pass
print(json.dumps(got))
"""

DN_SEND = f"""
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("{DN}", 7200))
for n in range({COUNT}):
    s.sendto(f"down-{{n}}".encode(), (sys.argv[1], 7300))
    time.sleep(0.01)
"""


def py(lab, ns, code, *args, timeout=30):
    r = lab.run(ns, "env", f"PYTHONPATH={HERE}", sys.executable, "-c", code, *map(str, args), timeout=timeout)
    return r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""


def receiver(lab, ns, addr, port, seconds=8, count=COUNT):
    p = lab.spawn(ns, sys.executable, "-c", RECV, addr, str(port), str(seconds), str(count))
    assert p.stdout.readline().strip() == "READY"
    return p


def received(p):
    out, err = p.communicate(timeout=30)
    return json.loads(out.strip().splitlines()[-1])


def upf_hosts(lab, *gnb_addresses):
    """The gNB's, vecgate's and the data network host's namespaces, linked as drawn
    above (vecgate's ends are `n3` and `n6`), the gNB at `gnb_addresses`, the data network
    host routing the UE pools to vecgate: (gNB's, vecgate's, data network host's)."""
    gnb, upf, dn = lab.ns("gnb"), lab.dataplane_ns("upf"), lab.ns("dn")
    lab.veth(gnb, "g0", upf, "n3")
    lab.veth(dn, "d0", upf, "n6")
    for a in gnb_addresses:
        lab.run(gnb, "ip", "addr", "add", f"{a}/24", "dev", "g0")
    lab.run(dn, "ip", "addr", "add", f"{DN}/24", "dev", "d0")
    lab.run(dn, "ip", "route", "add", "198.19.0.0/16", "via", UPF_N6)
    return gnb, upf, dn


def test_gtpu_both_ways_through_a_pfcp_session(lab, vecgate, tmp_path):
    from scapy.all import IP, UDP
    from scapy.contrib.gtp import GTP_U_Header
    gnb, upf, dn = upf_hosts(lab, GNB, GNB2)
    v = Vecgate(lab, vecgate, upf, CONFIG, tmp_path, name="upf")
    # Neighbours learned both ways before the counted traffic.
    lab.run(gnb, "ping", "-c", "2", "-i", "0.2", "-W", "1", UPF_N3, check=False)
    lab.run(dn, "ping", "-c", "2", "-i", "0.2", "-W", "1", UPF_N6, check=False)

    s = json.loads(py(lab, upf, SMF, GNB))
    teid, ue = s["teid"], s["ue"]
    assert teid and ue.startswith("198.19.7."), s
    sessions = v.ctl("show", "pfcp", "sessions")["data"]
    assert sessions["total"] == 1 and sessions["sessions"][0]["installed"], sessions

    # Uplink: G-PDUs with the chosen TEID come out of n6 as plain UDP from the UE.
    r = receiver(lab, dn, "0.0.0.0", 7200)
    py(lab, gnb, GNB_SEND, teid, ue)
    up = received(r)
    assert len(up) == COUNT, (up, v.errors())
    assert {a for a, _ in up} == {ue}
    assert sorted(bytes.fromhex(d).decode() for _, d in up) == sorted(f"up-{n}" for n in range(COUNT))

    # Downlink: UDP to the UE reaches the gNB in GTP-U with the gNB's TEID.
    r = receiver(lab, gnb, GNB, 2152)
    py(lab, dn, DN_SEND, ue)
    down = received(r)
    assert len(down) == COUNT, (down, v.errors())
    for src, d in down:
        assert src == UPF_N3
        g = GTP_U_Header(bytes.fromhex(d))
        assert g.teid == 0x200 and g.gtp_type == 255, g.show(dump=True)
        inner = g[IP]
        assert (inner.src, inner.dst, inner[UDP].dport) == (DN, ue, 7300)
    e = v.errors()
    assert e.get(("upf4-uplink", "forwarded"), 0) >= COUNT, e
    assert e.get(("upf4-downlink", "encapsulated"), 0) >= COUNT, e


def test_handover_moves_the_downlink_to_the_new_gnb(lab, vecgate, tmp_path):
    from scapy.all import IP
    from scapy.contrib.gtp import GTP_U_Header
    gnb, upf, dn = upf_hosts(lab, GNB, GNB2)
    v = Vecgate(lab, vecgate, upf, CONFIG, tmp_path, name="upf")
    lab.run(gnb, "ping", "-c", "2", "-i", "0.2", "-W", "1", UPF_N3, check=False)
    lab.run(gnb, "ping", "-c", "2", "-i", "0.2", "-W", "1", "-I", GNB2, UPF_N3, check=False)  # vecgate learns GNB2 too
    lab.run(dn, "ping", "-c", "2", "-i", "0.2", "-W", "1", UPF_N6, check=False)
    old = receiver(lab, gnb, GNB, 2152, seconds=10)  # listening before the handover: the End Marker
    s = json.loads(py(lab, upf, SMF, GNB, GNB2))  # established toward GNB, then moved to GNB2
    new = receiver(lab, gnb, GNB2, 2152)
    py(lab, dn, DN_SEND, s["ue"])
    got_new, got_old = received(new), received(old)
    assert len(got_new) == COUNT, (got_new, v.errors())
    assert all(GTP_U_Header(bytes.fromhex(d)).teid == 0x300 and GTP_U_Header(bytes.fromhex(d))[IP].dst == s["ue"] for _, d in got_new)
    # The old gNB gets no G-PDU after the handover, and one End Marker (type 254, no
    # payload) on the TEID of the old path, from our N3 address.
    old_msgs = [(src, GTP_U_Header(bytes.fromhex(d))) for src, d in got_old]
    assert [(src, g.gtp_type, g.teid, g.length) for src, g in old_msgs] == [(UPF_N3, 254, 0x200, 0)], [g.show(dump=True) for _, g in old_msgs]
    recent = v.ctl("show", "pfcp", "sessions", json_out=False)
    assert "End Marker sent" in recent, recent


# --- the UPF dataplane's rules (QER, URR) with one long-lived SMF -------------------------

class SmfProc:
    """tests/pfcp_smf.py --serve inside vecgate's namespace: one association for the whole
    test, driven a JSON line at a time."""

    def __init__(self, lab, ns):
        self.p = lab.spawn(ns, "env", f"PYTHONPATH={HERE}", sys.executable, str(HERE / "pfcp_smf.py"), "--serve", "127.0.0.1", "8805",
                           stdin=subprocess.PIPE)

    def __call__(self, op, **args):
        self.p.stdin.write(json.dumps({"op": op, "args": args}) + "\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        assert line, self.p.stderr.read()
        return json.loads(line)


def upf_lab(lab, vecgate, tmp_path, workers=1, extra="", config=CONFIG):
    """The lab of upf_hosts with vecgate running `config` and the SMF associated.
    `workers`: vecgate's worker threads (af_packet gives each its own socket of a fanout
    group: the kernel hashes each flow to one worker). `extra`: more configuration."""
    gnb, upf, dn = upf_hosts(lab, GNB)
    if workers == 1:
        v = Vecgate(lab, vecgate, upf, config + extra, tmp_path, name="upf")
    else:
        v = Vecgate(lab, vecgate, upf, f"[dataplane]\nworkers = {workers}\n" + config + extra, tmp_path, name="upf", split_dataplane=True)
    # Both neighbours known to vecgate (it learns them from their ARP requests) before
    # any counted packet: a ping answered on each side.
    for ns, addr in ((gnb, UPF_N3), (dn, UPF_N6)):
        for _ in range(20):
            if lab.run(ns, "ping", "-c", "1", "-W", "1", addr, check=False).returncode == 0:
                break
        else:
            raise AssertionError(f"{addr} never answered a ping")
    smf = SmfProc(lab, upf)
    assert smf("associate")["cause"] == 1
    return gnb, upf, dn, v, smf


# A dual-stack UE's addresses (the IPv6 one of its /64), the SMF's choice.
DUAL_STACK_UE = {4: "198.19.7.60", 6: "2001:db8:19:1::1"}


def dn_ipv6(lab, dn):
    """The data network host on IPv6 too: DN6, its route to the UE pool's IPv6 prefixes
    by vecgate's N6, which it learned (a ping answered)."""
    lab.run(dn, "ip", "-6", "addr", "add", f"{DN6}/64", "dev", "d0", "nodad")
    lab.run(dn, "ip", "-6", "route", "add", "2001:db8:19::/48", "via", UPF_N6_6)
    for _ in range(20):
        if lab.run(dn, "ping", "-6", "-c", "1", "-W", "1", UPF_N6_6, check=False).returncode == 0:
            return
    raise AssertionError(f"{UPF_N6_6} never answered a ping")


# Uplink: argv[3] G-PDUs with TEID argv[1] from UE argv[2], each inner packet argv[4] bytes
# (IPv4 + UDP + payload) — what the URRs count.
GNB_SEND_N = f"""
import socket, sys
from scapy.all import IP, UDP, raw
from scapy.contrib.gtp import GTP_U_Header
teid, ue, n, size = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("{GNB}", 2152))
for i in range(n):
    inner = IP(src=ue, dst="{DN}") / UDP(sport=7300, dport=7200) / bytes(size - 28)
    assert len(raw(inner)) == size
    s.sendto(raw(GTP_U_Header(teid=teid) / inner), ("{UPF_N3}", 2152))
"""

# Downlink: argv[2] UDP datagrams of argv[3] payload bytes to the UE, as fast as they go.
DN_SEND_N = f"""
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("{DN}", 7200))
for i in range(int(sys.argv[2])):
    s.sendto(bytes(int(sys.argv[3])), (sys.argv[1], 7300))
"""


def gpdus(got):
    """The downlink G-PDUs among what the gNB received, dissected by scapy."""
    from scapy.contrib.gtp import GTP_U_Header
    return [g for g in (GTP_U_Header(bytes.fromhex(d)) for _, d in got) if g.gtp_type == 255]


def counter(v, node, name, want):
    """The counter once it reached `want` (the packets are on their way), or as it stands
    after 10 s."""
    for _ in range(100):
        n = v.errors().get((node, name), 0)
        if n >= want:
            return n
        time.sleep(0.1)
    return n


def pcap_clean(smf, tmp_path):
    """tshark reads every PFCP message of the association, vecgate's reports included, with
    no malformed packet and no expert warning."""
    pcap = tmp_path / "n4.pcap"
    n = smf("pcap", path=str(pcap))["messages"]
    out = subprocess.run(["tshark", "-r", str(pcap), "-V"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "Malformed" not in out.stdout, out.stdout[-3000:]
    for bad in ("[Expert Info (Warning", "[Expert Info (Error"):
        assert bad not in out.stdout, out.stdout[out.stdout.index(bad) - 2000:]
    types = subprocess.run(["tshark", "-r", str(pcap), "-Y", "pfcp", "-T", "fields", "-e", "pfcp.msg_type"],
                           capture_output=True, text=True, timeout=60).stdout.split()
    assert len(types) == n, (types, n)
    return types


def test_qer_gate_and_mbr_police_the_downlink(lab, vecgate, tmp_path):
    gnb, upf, dn, v, smf = upf_lab(lab, vecgate, tmp_path)
    s = smf("establish", cp_seid=0x51, gnb=GNB, gnb_teid=0x200)
    assert s["cause"] == 1, s
    seid, ue = s["seid"], s["ue"]

    def downlink(n, size, seconds=20):
        r = receiver(lab, gnb, GNB, 2152, seconds=seconds, count=n)
        py(lab, dn, DN_SEND_N, ue, n, size)
        return gpdus(received(r))

    assert len(downlink(COUNT, 100)) == COUNT, v.errors()
    # Gate closed for the downlink: each packet dropped by name, none forwarded.
    assert smf("update_qer", seid=seid, ul_open=True, dl_open=False, mbr_ul=100000, mbr_dl=200000)["cause"] == 1
    py(lab, dn, DN_SEND_N, ue, COUNT, 100)
    assert counter(v, "upf4-downlink", "gate-closed", COUNT) == COUNT, v.errors()
    assert v.errors()[("upf4-downlink", "forwarded")] == COUNT
    # Open again, with an MBR of 800 kbit/s (100 000 bytes/s; a bucket of 3000 bytes): a
    # burst of 300 datagrams of 1000 bytes sent back to back is cut down to its start, the
    # rest dropped by name — every packet either arrives or is counted.
    assert smf("update_qer", seid=seid, ul_open=True, dl_open=True, mbr_ul=100000, mbr_dl=800)["cause"] == 1
    got = downlink(300, 1000 - 28, seconds=10)
    dropped = v.errors().get(("upf4-downlink", "mbr-exceeded"), 0)
    assert dropped > 0 and len(got) + dropped == 300, (len(got), dropped)
    from scapy.all import IP
    assert all(g[IP].len == 1000 and g[IP].dst == ue for g in got)
    s = v.ctl("show", "pfcp", "sessions")["data"]["sessions"][0]
    assert s["downlink"][0]["qers"] == [[True, 100_000]], s
    assert pcap_clean(smf, tmp_path).count("53") == 2  # both modifications answered


# Path MTU discovery toward a UE: argv[2] bytes of UDP payload to argv[1] with DF, twice
# (the second after the ICMP error had time to arrive); prints the path MTU the kernel
# learned and whether the second send fit.
PMTU_SEND = """
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IP, 10, 2)  # IP_MTU_DISCOVER: IP_PMTUDISC_DO (DF set)
s.connect((sys.argv[1], 7300))
s.send(b"y" * int(sys.argv[2]))
time.sleep(1)
try:
    s.send(b"y" * int(sys.argv[2]))
    fit = True
except OSError:
    fit = False
print(s.getsockopt(socket.IPPROTO_IP, 14), fit)  # IP_MTU
"""


def test_a_downlink_packet_too_big_for_n3_tells_its_source(lab, vecgate, tmp_path):
    """A full-size datagram with DF to a UE does not fit N3 (1500) in GTP-U with the PDU
    Session Container (44 bytes of headers): the UPF answers the data network host with
    ICMP fragmentation needed naming 1456, as every tunnel does, so its path MTU
    discovery works (the packet was encapsulated and dropped as the gateway's own, the
    source never told: a black hole for full-size downlink)."""
    gnb, upf, dn, v, smf = upf_lab(lab, vecgate, tmp_path)
    s = smf("establish", cp_seid=0x61, gnb=GNB, gnb_teid=0x200)
    assert s["cause"] == 1, s
    out = py(lab, dn, PMTU_SEND, s["ue"], 1472)
    assert out == "1456 False", (out, v.errors())
    e = v.errors()
    assert e.get(("upf4-downlink", "inner-too-big")) == 1 and ("upf4-downlink", "encapsulated") not in e, e
    # What fits still goes: 1456 bytes of inner packet make a 1500-byte outer one.
    r = receiver(lab, gnb, GNB, 2152, count=1)
    py(lab, dn, DN_SEND_N, s["ue"], 1, 1456 - 28)
    got = gpdus(received(r))
    from scapy.all import IP
    assert [g[IP].len for g in got] == [1456], v.errors()


# An outbound transport-mode SA from N3 to the gNB, and N3's SPD PROTECTing the UPF's GTP-U
# to the gNB by it (everything else bypassed).
N3_TRANSPORT_SA = f"""
[[ipsec_sa]]
index = 6
spi = 0x600
direction = "outbound"
mode = "transport"
algorithm = "aes-gcm-128"
enc_key = "{'11' * 20}"
local = "{UPF_N3}"
remote = "{GNB}"

[[ipsec_spd]]
id = 1
interfaces = ["n3"]

[[ipsec_policy]]
spd = 1
direction = "outbound"
priority = 100
action = "protect"
sa = 6
remote = "{GNB}"
protocol = "udp"
remote_ports = "2152"

[[ipsec_policy]]
spd = 1
direction = "outbound"
priority = 10
action = "bypass"

[[ipsec_policy]]
spd = 1
direction = "inbound"
priority = 10
action = "bypass"
"""


def test_a_transport_sa_protecting_n3_takes_esp_off_the_downlink_path_mtu(lab, vecgate, tmp_path):
    """N3's SPD PROTECTs the UPF's GTP-U to the gNB by an outbound transport-mode SA
    (AES-GCM: 8 + 8 + 3 + 2 + 16 = 37 bytes at worst): the session's downlink path MTU is
    N3's 1500 less ESP and the 44 bytes of GTP-U headers, 1419, as for a configured GTP-U
    tunnel. A DF sender learns 1419 from the UPF's frag-needed (the Linux host's own path
    MTU discovery reads it); before, it was told 1456, and its 1456-byte packets left as
    ESP packets 37 bytes over the link."""
    gnb, upf, dn, v, smf = upf_lab(lab, vecgate, tmp_path, extra=N3_TRANSPORT_SA)
    s = smf("establish", cp_seid=0x62, gnb=GNB, gnb_teid=0x200)
    assert s["cause"] == 1, s
    out = py(lab, dn, PMTU_SEND, s["ue"], 1472)
    assert out == "1419 False", (out, v.errors())
    assert v.errors().get(("upf4-downlink", "inner-too-big")) == 1, v.errors()


# Uplink: one G-PDU with TEID argv[1] from UE argv[2], its inner packet argv[3] bytes, DF set
# when argv[4] is 1.
GNB_SEND_ONE = f"""
import socket, sys
from scapy.all import IP, UDP, raw
from scapy.contrib.gtp import GTP_U_Header
teid, ue, size, df = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
inner = IP(src=ue, dst="{DN}", flags="DF" if df else 0) / UDP(sport=7300, dport=7200) / bytes(size - 28)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("{GNB}", 0))  # the gNB's port 2152 is the test's receiver
s.sendto(raw(GTP_U_Header(teid=teid) / inner), ("{UPF_N3}", 2152))
"""


def test_an_uplink_packet_too_big_for_n9_tells_the_ue(lab, vecgate, tmp_path):
    """N9: the uplink FAR sends the UE's packets on in GTP-U to a peer UPF (on the N6
    link, 1500 bytes), which leaves 1456 bytes for the inner packet, as N3 leaves the
    downlink. One that fits arrives whole; a larger one with DF is answered with ICMP
    fragmentation needed naming 1456, which reaches the UE through its own downlink
    tunnel (it was re-encapsulated and dropped as the gateway's own, the UE never told);
    a larger one without DF arrives whole in fragmented outer packets, which the peer
    reassembles."""
    from scapy.all import ICMP, IP
    from scapy.contrib.gtp import GTP_U_Header
    peer = "198.18.8.3"
    gnb, upf, dn, v, smf = upf_lab(lab, vecgate, tmp_path)
    lab.run(dn, "ip", "addr", "add", f"{peer}/24", "dev", "d0")
    lab.run(dn, "ip", "route", "add", f"{UPF_N3}/32", "via", UPF_N6)  # the tunnel's source, for the reassembled datagrams
    lab.run(dn, "ping", "-c", "2", "-i", "0.2", "-W", "1", "-I", peer, UPF_N6, check=False)  # vecgate learns the peer
    s = smf("establish", cp_seid=0x62, gnb=GNB, gnb_teid=0x200, n9=[peer, 0x900])
    assert s["cause"] == 1, s
    at_peer = receiver(lab, dn, peer, 2152, count=2)
    at_ue = receiver(lab, gnb, GNB, 2152, count=1)
    for size, df in ((1456, 1), (1457, 1), (1457, 0)):
        py(lab, gnb, GNB_SEND_ONE, s["teid"], s["ue"], size, df)
    sent_on = [GTP_U_Header(bytes.fromhex(d)) for _, d in received(at_peer)]
    assert sorted((g.teid, g[IP].len, g[IP].src) for g in sent_on) == [(0x900, 1456, s["ue"]), (0x900, 1457, s["ue"])], v.errors()
    told = gpdus(received(at_ue))
    assert len(told) == 1, v.errors()
    icmp = told[0][IP]
    assert (told[0].teid, icmp.dst, icmp[ICMP].type, icmp[ICMP].code, icmp[ICMP].nexthopmtu) == (0x200, s["ue"], 3, 4, 1456), icmp.show(dump=True)
    e = v.errors()
    assert e.get(("upf4-uplink", "inner-too-big")) == 1 and e.get(("upf4-uplink", "fragment-outer")) == 1, e
    assert e.get(("upf4-uplink", "encapsulated")) == 2, e


def test_a_ue_cannot_send_from_an_address_not_its_own(lab, vecgate, tmp_path):
    """TS 29.244 §5.2.1: the SMF names the UE's address in the uplink PDR's PDI (as SMFs
    do; this one assigns the address itself), so a G-PDU whose inner source is another
    address matches no PDR. The data network host receives the UE's own datagrams only;
    the others are counted as `wrong-ue-source`, and `show pfcp sessions` shows the
    address the uplink checks. tshark reads the PFCP messages."""
    gnb, upf, dn, v, smf = upf_lab(lab, vecgate, tmp_path)
    ue = "198.19.7.50"
    s = smf("establish", cp_seid=0x71, gnb=GNB, gnb_teid=0x200, ue=ue)
    assert s["cause"] == 1, s
    shown = v.ctl("show", "pfcp", "sessions")["data"]["sessions"][0]
    assert (shown["ue"], shown["uplink"][0]["ue"]) == ([ue], [ue]), shown
    assert f"ue {ue}" in v.ctl("show", "pfcp", "sessions", json_out=False)
    r = receiver(lab, dn, "0.0.0.0", 7200, seconds=10, count=COUNT)
    # Another UE's address and one on the data network, then the UE's: the spoofed ones go
    # first, so any that got through would be among the first COUNT received.
    for src in ("198.19.7.51", "198.18.8.77", ue):
        py(lab, gnb, GNB_SEND_N, s["teid"], src, COUNT // 2 if src != ue else COUNT, 100)
    got = received(r)
    assert len(got) == COUNT and {a for a, _ in got} == {ue}, (got, v.errors())
    assert counter(v, "upf4-uplink", "wrong-ue-source", COUNT) == COUNT, v.errors()
    e = v.errors()
    assert (e.get(("upf4-uplink", "forwarded")), e.get(("upf4-uplink", "no-pdr"), 0)) == (COUNT, 0), e
    pcap_clean(smf, tmp_path)


# Downlink over IPv6: argv[2] UDP datagrams to the UE's IPv6 address argv[1].
DN6_SEND_N = f"""
import socket, sys
s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
s.bind(("{DN6}", 7200))
for i in range(int(sys.argv[2])):
    s.sendto(f"v6-{{i}}".encode(), (sys.argv[1], 7300))
"""


def test_a_dual_stack_session_sends_each_family_by_its_own_downlink_pdr(lab, vecgate, tmp_path):
    """TS 29.244 §5.2.1 on the downlink: the SMF gives a dual-stack UE one downlink PDR
    per family, the IPv4 one first in precedence, each with its FAR (TEIDs 0x200 and
    0x201). The data network host sends datagrams to both addresses; the gNB receives
    the IPv4 ones on TEID 0x200 and the IPv6 ones on 0x201 (scapy dissects the G-PDUs), none
    dropped. Before, the first PDR in precedence took the IPv6 packets too."""
    gnb, upf, dn, v, smf = upf_lab(lab, vecgate, tmp_path)
    dn_ipv6(lab, dn)
    ue, ue6 = DUAL_STACK_UE[4], DUAL_STACK_UE[6]
    s = smf("establish", cp_seid=0x81, gnb=GNB, gnb_teid=0x200, ue=ue, ue6=ue6)
    assert s["cause"] == 1, s
    shown = v.ctl("show", "pfcp", "sessions")["data"]["sessions"][0]
    assert [r["ue"] for r in shown["downlink"]] == [[ue], ["2001:db8:19:1::/64"]], shown
    r = receiver(lab, gnb, GNB, 2152, seconds=10, count=2 * COUNT)
    py(lab, dn, DN_SEND_N, ue, COUNT, 100)
    py(lab, dn, DN6_SEND_N, ue6, COUNT)
    from scapy.all import IP, IPv6
    by_teid = {}
    for g in gpdus(received(r)):
        inner = g[IPv6].dst if IPv6 in g else g[IP].dst if IP in g else None
        by_teid.setdefault(g.teid, []).append(inner)
    assert sorted(by_teid) == [0x200, 0x201], (by_teid, v.errors())
    assert by_teid[0x200] == [ue] * COUNT and by_teid[0x201] == [ue6] * COUNT, (by_teid, v.errors())
    e = v.errors()
    assert (e.get(("upf4-downlink", "forwarded")), e.get(("upf6-downlink", "forwarded"))) == (COUNT, COUNT), e
    assert not any(name == "no-pdr" for (_, name) in e), e
    pcap_clean(smf, tmp_path)


def test_urr_quota_stops_traffic_and_deletion_reports_the_volumes(lab, vecgate, tmp_path):
    gnb, upf, dn, v, smf = upf_lab(lab, vecgate, tmp_path)
    # Session 1: no quota. Volumes sent both ways must come back in the final report.
    s = smf("establish", cp_seid=0x61, gnb=GNB, gnb_teid=0x200)
    assert s["cause"] == 1, s
    r = receiver(lab, dn, "0.0.0.0", 7200, seconds=20, count=15)
    py(lab, gnb, GNB_SEND_N, s["teid"], s["ue"], 15, 300)
    assert len(received(r)) == 15, " ".join(f"{k[0]}:{k[1]}={n}" for k, n in sorted(v.errors().items()))
    r = receiver(lab, gnb, GNB, 2152, seconds=20, count=7)
    py(lab, dn, DN_SEND_N, s["ue"], 7, 172)  # 200-byte IPv4 packets
    assert len(gpdus(received(r))) == 7
    d = smf("delete", seid=s["seid"])
    assert d["cause"] == 1
    assert d["usage"] == [{"uplink": 15 * 300, "downlink": 7 * 200, "total": 15 * 300 + 7 * 200, "triggers": ["TERMR"]}], d

    # Session 2: a total quota of 5000 bytes. 20 uplink packets of 300 bytes pass it; the
    # UPF reports the quota (VOLQU) and the session's traffic stops, counted by name.
    s = smf("establish", cp_seid=0x62, gnb=GNB, gnb_teid=0x200, quota=5000)
    assert s["cause"] == 1, s
    before = v.errors().get(("upf4-uplink", "forwarded"), 0)
    # A sink on the DN host: with its port closed, the host would answer the first packets
    # with ICMP port unreachables to the UE, downlink bytes that count toward the quota.
    receiver(lab, dn, "0.0.0.0", 7200, seconds=10, count=20)
    py(lab, gnb, GNB_SEND_N, s["teid"], s["ue"], 20, 300)
    rep = smf("wait_report", timeout=10)
    assert rep is not None and rep["report_type"] == ["USAR"], rep
    assert "VOLQU" in rep["usage"][0]["triggers"] and rep["usage"][0]["uplink"] >= 5000, rep
    shown = v.ctl("show", "pfcp", "sessions")["data"]["sessions"][0]
    assert shown["uplink"][0]["urrs_exhausted"] == [True], shown
    # The packets after the one that crossed the quota pass or are stopped, depending on when
    # the stop was published: every one of the 20 is one or the other.
    for _ in range(100):
        e = v.errors()
        passed = e.get(("upf4-uplink", "forwarded"), 0) - before
        stopped = e.get(("upf4-uplink", "quota-exhausted"), 0)
        if passed + stopped >= 20:
            break
        time.sleep(0.1)
    assert passed + stopped == 20, e
    assert 5000 // 300 < passed <= 20, passed
    py(lab, gnb, GNB_SEND_N, s["teid"], s["ue"], 10, 300)
    assert counter(v, "upf4-uplink", "quota-exhausted", stopped + 10) == stopped + 10, v.errors()
    assert v.errors()[("upf4-uplink", "forwarded")] - before == passed
    d = smf("delete", seid=s["seid"])
    assert d["cause"] == 1
    # Every byte that passed is reported once: in the quota report, or (a packet that passed
    # while the stop was being published) in the final one.
    assert rep["usage"][0]["uplink"] + d["usage"][0]["uplink"] == passed * 300, (rep, d, passed)
    types = pcap_clean(smf, tmp_path)
    assert "56" in types and "57" in types, types  # the report and our answer
