"""Clients and backends behind tunnels, through the service load balancer with one worker
and two: a GUE peer (scapy's packets in RFC 8086's header, from a plain UDP socket: the
host kernel has no FOU module) sends each flow's datagrams to the services from the inner
prefix the gateway routes into the tunnel; real Linux UDP sockets echo them in three
backend namespaces, and the replies go back into the tunnel. Likewise a client behind an
IPsec peer whose link has an SPD (ESP in UDP: scapy seals and opens), a UE behind the
gateway's UPF (a PFCP session from scapy's SMF, G-PDUs from scapy's gNB), whose replies
leave by the UE pool's route, `upf4-downlink`, and, the other way round, a backend behind
a GUE tunnel (a pod on another site: scapy answers inside it).

With two workers, af_packet's fanout hashes a packet that arrives in a tunnel by its
*outer* header, so it comes out of the tunnel on a worker of that hash, while the load
balancer keeps a connection's session on the worker of its client's address and port,
where the replies are steered (`lb::steer`): a client's packet, a router's ICMP error or
a backend's reply met on the other worker must go on to that one, or a `Local` reply goes
back untranslated, an error is dropped, a `Cluster` reply finds no session.
`lbN-nat` hands them on (`resume-handoff`, `to-session-worker`).

  client c ── a0/a1 ── vecgate (ns gw) ── bNg/e0 ── backend beN (N = 0..2)
  198.18.0.2           198.18.0.1         198.19.N+1.1 | 198.19.N+1.10
  inside GUE: 198.18.100.2 / 2001:db8:100::2
"""
import subprocess
import sys

import pytest

from netns import Vecgate, result
from test_lb_fragments_netns import BACKENDS, CLIENT, SERVICES, SNAT, echo_servers, on_the_way, spread_from, started, topology
from test_lb_fragments_netns import config as lb_config
from test_lb_netns import PEER, VIP, VIP6, client
from test_pfcp_netns import CONFIG as UPF_CONFIG
from test_pfcp_netns import DN, DN6, DUAL_STACK_UE as UE, GNB, UPF_N3, UPF_N6, UPF_N6_6, dn_ipv6, upf_lab

INNER = {4: "198.18.100.2", 6: "2001:db8:100::2"}
FLOWS = 24
# The MTU a router behind the tunnel reports for the replies (PMTU discovery).
MTU = 1300


def config(workers):
    return lb_config(workers) + """
[[udp_tunnel]]
local = "198.18.0.1"
remote = "198.18.0.2"
encap = "gue"
routes = ["198.18.100.0/24", "2001:db8:100::/64"]
"""


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("family", [4, 6], ids=["v4", "v6"])
def test_clients_behind_a_tunnel_get_their_replies_translated(lab, vecgate, tmp_path, family, workers):
    """FLOWS flows to each service (`Cluster` and `Local`), two datagrams each, every
    outer packet with its flow's own source port: every datagram comes back inside the
    tunnel from the service's address and port to the flow (scapy reads it, checksums
    recomputed). A router behind the tunnel answers each flow's second reply with a
    frag-needed / packet too big: translated, it reaches the backend's kernel, which
    caches the MTU. The backends saw the node's address (`Cluster`) or the client's inner
    one (`Local`), spread over all three; one session per flow. With two workers some
    flows came out of the tunnel on the other worker and were handed over (and the
    second datagram of such a flow too: it made no session where it came out)."""
    c, g, bes = topology(lab)
    # The backends checksum their replies in full: a partial checksum (veth's offload)
    # would reach the client still pending inside the tunnel, where no kernel fills it
    # in for a socket that reads the inner packet as payload.
    for b in bes:
        lab.run(b, "ethtool", "-K", "e0", "tx", "off")
    gw = Vecgate(lab, vecgate, g, config(workers), tmp_path, split_dataplane=True)
    servers = echo_servers(lab, c, bes)
    vip = VIP if family == 4 else VIP6
    echoed = {port: client(lab, c, "tunnelecho", "gue", "198.18.0.2", "198.18.0.1", INNER[family], vip, port, FLOWS, MTU) for port in SERVICES}
    assert all(e["answered"] == e["sent"] == 2 * FLOWS for e in echoed.values()), f"{echoed}; {on_the_way(gw, family)}"
    # Each backend's kernel took the routers' errors, translated to be about its own
    # answers: the path to the client (Local) and to the node's address (Cluster) has
    # the router's MTU in its cache.
    for b in bes:
        for dst in (INNER[family], SNAT[family]):
            route = lab.run(b, "ip", f"-{family}", "route", "get", dst).stdout
            assert f"mtu {MTU}" in route, f"{b}: {route}; {on_the_way(gw, family)}"
    shown, errs = on_the_way(gw, family), gw.errors()
    code, _, _ = gw.stop()
    assert code == 0
    got = {f"be{i}": result(p)["got"] for i, p in enumerate(servers)}
    for port, (backend_port, policy) in SERVICES.items():
        seen = spread_from(got, backend_port, SNAT[family] if policy == "Cluster" else INNER[family])
        assert sum(len(rows) for rows in seen.values()) == 2 * FLOWS, f"{port}: {got}"
    nat = f"lb{family}-nat"
    assert errs.get((nat, "new-session"), 0) == len(SERVICES) * FLOWS, shown
    handed = errs.get((nat, "to-session-worker"), 0)
    assert handed > 0 if workers == 2 else handed == 0, shown
    assert errs.get(("resume-handoff", "handed-off"), 0) == handed, errs
    assert sum(e["errors"] for e in echoed.values()) == len(SERVICES) * FLOWS, echoed
    assert errs.get((nat, "icmp-translated"), 0) == len(SERVICES) * FLOWS, shown
    assert errs.get(("resume-handoff", "lane-full"), 0) == 0, errs


def esp_config(workers):
    """The services, and the client's IPsec peer on link `a` (198.18.0.2, ESP in UDP,
    test_ipsec's AES-GCM keys) with SPD 1 bound there: the inner prefix in and out by the
    SAs, the link's own traffic (pings, the ESP packets themselves) in the clear."""
    from test_ipsec import IN_SPI, OUT_SPI, keys
    (ek, _), (ek2, _) = keys("aes-gcm-128", 1), keys("aes-gcm-128", 2)
    sas = "".join(f"""
[[ipsec_sa]]
index = {index}
spi = {spi}
direction = "{direction}"
algorithm = "aes-gcm-128"
enc_key = "{key.hex()}"
local = "198.18.0.1"
remote = "198.18.0.2"
udp_encap = true
""" for index, spi, direction, key in ((0, OUT_SPI, "outbound", ek), (1, IN_SPI, "inbound", ek2)))
    policies = "".join(f"""
[[ipsec_policy]]
spd = 1
direction = "{direction}"
priority = {priority}
action = "{action}"
{f"sa = {sa}" if sa is not None else ""}
remote = "{remote}"
""" for direction, priority, action, sa, remote in (
        ("inbound", 100, "protect", 1, "198.18.100.0/24"), ("inbound", 50, "bypass", None, "198.18.0.0/24"),
        ("outbound", 100, "protect", 0, "198.18.100.0/24"), ("outbound", 50, "bypass", None, "198.18.0.0/24")))
    return lb_config(workers) + sas + f"""
[[ipsec_spd]]
id = 1
interfaces = ["a"]
{policies}
[[route]]
prefix = "198.18.100.0/24"
via = "198.18.0.2"
"""


@pytest.mark.parametrize("workers", [1, 2])
def test_a_client_behind_an_ipsec_peer_gets_its_replies_translated(lab, vecgate, tmp_path, workers):
    """FLOWS flows to each service from behind the IPsec peer, two datagrams each, all in
    one outer flow (ESP in UDP, 4500 to 4500): every one comes back sealed by the outbound
    SA (scapy opens it) from the service's address and port. The link's SPD checks each
    decrypted packet against the inbound policy of its SA, once, on the worker that
    decrypted it; one handed on to its session's worker continues at that worker's lookup
    (entering there as a frame received on `a`, a plain packet of the protected prefix,
    its inbound SPD would drop it). The replies meet the outbound SPD in the client's
    terms (protected), from the service's address."""
    c, g, bes = topology(lab)
    for b in bes:
        lab.run(b, "ethtool", "-K", "e0", "tx", "off")
    gw = Vecgate(lab, vecgate, g, esp_config(workers), tmp_path, split_dataplane=True)
    servers = echo_servers(lab, c, bes)
    echoed = {port: client(lab, c, "tunnelecho", "esp", "198.18.0.2", "198.18.0.1", INNER[4], VIP, port, FLOWS) for port in SERVICES}
    errs = gw.errors()
    assert all(e["answered"] == e["sent"] == 2 * FLOWS for e in echoed.values()), f"{echoed}; {errs}"
    code, _, _ = gw.stop()
    assert code == 0
    got = {f"be{i}": result(p)["got"] for i, p in enumerate(servers)}
    for port, (backend_port, policy) in SERVICES.items():
        seen = spread_from(got, backend_port, SNAT[4] if policy == "Cluster" else INNER[4])
        assert sum(len(rows) for rows in seen.values()) == 2 * FLOWS, f"{port}: {got}"
    assert errs.get(("lb4-nat", "new-session"), 0) == len(SERVICES) * FLOWS, errs
    assert errs.get(("esp4-encrypt", "encrypted"), 0) >= len(SERVICES) * 2 * FLOWS, errs
    assert not any(k[0].startswith("ipsec4") and k[1] not in ("protected", "bypassed", "checked") for k in errs), errs
    handed = errs.get(("lb4-nat", "to-session-worker"), 0)
    assert handed > 0 if workers == 2 else handed == 0, errs

# A pod behind a GUE tunnel to be0 (198.19.1.10), the services' one backend.
POD = "198.18.50.10"


def pod_config(workers):
    return lb_config(workers, {4: [POD], 6: BACKENDS[6]}) + f"""
[[udp_tunnel]]
local = "198.19.1.1"
remote = "{BACKENDS[4][0]}"
encap = "gue"
routes = ["{POD}/32"]
"""


@pytest.mark.parametrize("workers", [1, 2])
def test_a_backend_behind_a_tunnel_answers_through_the_translation(lab, vecgate, tmp_path, workers):
    """FLOWS datagrams to each service from sockets of their own (Linux's), their one
    backend a pod behind a GUE tunnel (scapy echoes inside it, each flow's answer from an
    outer port of its own): every one answered from the service's address and port. The
    pod saw the node's address (`Cluster`) or the client's (`Local`). With two workers the
    kernel's fanout puts an answer on the worker of its outer header: those whose session
    is the other worker's (the client's, or the SNAT port's) are handed to it."""
    c, g, bes = topology(lab)
    gw = Vecgate(lab, vecgate, g, pod_config(workers), tmp_path, split_dataplane=True)
    pod = started(lab.spawn(bes[0], sys.executable, str(PEER), "tunnelserve", BACKENDS[4][0], "198.19.1.1",
                            *(str(bp) for bp, _ in SERVICES.values()), stdin=subprocess.PIPE))
    for ns, node in ((bes[0], "198.19.1.1"), (c, "198.18.0.1")):
        lab.run(ns, "ping", "-c", "2", "-i", "0.2", "-W", "1", node, check=False)
    echoed = {port: client(lab, c, "uecho", VIP, port, FLOWS) for port in SERVICES}
    errs = gw.errors()
    assert all(e["answered"] == e["sent"] for e in echoed.values()), f"{echoed}; {errs}"
    code, _, _ = gw.stop()
    assert code == 0
    got = result(pod)["got"]
    for port, (backend_port, policy) in SERVICES.items():
        seen = spread_from({"pod": got}, backend_port, SNAT[4] if policy == "Cluster" else CLIENT[4])
        assert len(seen["pod"]) == FLOWS, f"{port}: {got}"
    assert errs.get(("lb4-nat", "reply-translated"), 0) == len(SERVICES) * FLOWS, errs
    handed = errs.get(("lb4-nat", "to-session-worker"), 0)
    assert handed > 0 if workers == 2 else handed == 0, errs

def services_for_ues(family):
    """The two services (`Cluster`, `Local`) on the family's VIP with the data network
    host as their backend; the node's N6 address for SNAT."""
    vip, dn = (VIP, DN) if family == 4 else (VIP6, DN6)
    listed = "".join(f"""
[[lb_service]]
name = "default/ue-{policy.lower()}"
type = "load_balancer"
vip = "{vip}"
port = {port}
protocol = "udp"
traffic_policy = "{policy}"
backends = [{{ addr = "{dn}", port = {backend_port} }}]
""" for port, (backend_port, policy) in SERVICES.items())
    return f"""
[lb]
snat4 = "{UPF_N6}"
snat6 = "{UPF_N6_6}"
{listed}"""


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("family", [4, 6], ids=["v4", "v6"])
def test_a_ue_behind_the_upf_gets_its_replies_translated(lab, vecgate, tmp_path, family, workers):
    """A UE's flows to each service through its PFCP session (dual stack: the IPv6 flows
    from an address of its /64), two datagrams each: every one comes back to the gNB in a
    G-PDU with the family's downlink TEID (0x200 IPv4, 0x201 IPv6), from the service's
    address and port (scapy reads it, checksums recomputed). The backend saw the node's N6
    address (`Cluster`) or the UE's (`Local`, whose replies reach `lbN-nat` on their way to
    the UE pool's route and go on to `upfN-downlink` translated). With two workers all
    G-PDUs share one outer 5-tuple (the kernel's fanout puts them on one worker), so the
    flows of the other worker's client ports were handed over."""
    gnb, upf, dn, v, smf = upf_lab(lab, vecgate, tmp_path, workers, extra=services_for_ues(family), config=UPF_CONFIG)
    # Whole checksums from the backend (see test_clients_behind_a_tunnel_...).
    lab.run(dn, "ethtool", "-K", "d0", "tx", "off")
    if family == 6:
        dn_ipv6(lab, dn)
    server = started(lab.spawn(dn, sys.executable, str(PEER), "userve", "dn", *(str(bp) for bp, _ in SERVICES.values()), stdin=subprocess.PIPE))
    s = smf("establish", cp_seid=0x77, gnb=GNB, gnb_teid=0x200, ue=UE[4], ue6=UE[6])
    assert s["cause"] == 1, s
    ue = UE[family]
    tunnel = f"gtpu:{s['teid']}:{0x200 if family == 4 else 0x201}"
    echoed = {port: client(lab, gnb, "tunnelecho", tunnel, GNB, UPF_N3, ue, VIP if family == 4 else VIP6, port, FLOWS) for port in SERVICES}
    errs = v.errors()
    assert all(e["answered"] == e["sent"] == 2 * FLOWS for e in echoed.values()), f"{echoed}; {errs}"
    code, _, _ = v.stop()
    assert code == 0
    got = result(server)["got"]
    for port, (backend_port, policy) in SERVICES.items():
        seen = spread_from({"dn": got}, backend_port, (UPF_N6 if family == 4 else UPF_N6_6) if policy == "Cluster" else ue)
        assert len(seen["dn"]) == 2 * FLOWS, f"{port}: {got}"
    nat = f"lb{family}-nat"
    assert errs.get((nat, "new-session"), 0) == len(SERVICES) * FLOWS, errs
    assert errs.get((f"upf{family}-downlink", "encapsulated"), 0) >= len(SERVICES) * 2 * FLOWS, errs
    handed = errs.get((nat, "to-session-worker"), 0)
    assert handed > 0 if workers == 2 else handed == 0, errs
