"""ECMP (issue 23): a prefix with several weighted next hops; each flow leaves by one of
them, chosen by its flow hash, the flows split near the weights, and a path whose next
hop is unresolved gets none. Packets are built by scapy, run through the graph from a
pcap, and the three output captures dissected by scapy and checked clean by tshark (an
independent dissector), for IPv4, IPv6 and a UDP tunnel's outer packets."""
import subprocess
from collections import Counter, defaultdict

from scapy.all import IP, UDP, Ether, IPv6, Raw, rdpcap

from conftest import GW_MAC0, GW_MAC1, HOST_MAC, ROUTER_MAC, gateway_config, tshark_clean, write_pcap

GW_MAC2 = "02:00:00:00:00:03"
MAC_B = "02:00:00:00:02:02"

# eth2: a second link out; 198.20.0.0/16 and 2001:db8:300::/48 go 3:1 over eth1 and eth2,
# with a third path on eth2 whose next hop (198.18.2.3, 2001:db8:2::3) never resolves.
ECMP = f"""
[[interface]]
name = "eth2"
type = "pcap"
mac = "{GW_MAC2}"
mtu = 1500
addresses = ["198.18.2.1/24", "2001:db8:2::1/64"]
output = "out2.pcap"

[[neighbour]]
interface = "eth2"
ip = "198.18.2.2"
mac = "{MAC_B}"

[[neighbour]]
interface = "eth2"
ip = "2001:db8:2::2"
mac = "{MAC_B}"

[[route]]
prefix = "198.20.0.0/16"
paths = [{{ via = "198.18.1.2", weight = 3 }}, {{ via = "198.18.2.2", weight = 1 }}, {{ via = "198.18.2.3", weight = 4 }}]

[[route]]
prefix = "2001:db8:300::/48"
paths = [{{ via = "2001:db8:1::2", weight = 3 }}, {{ via = "2001:db8:2::2" }}, {{ via = "2001:db8:2::3", weight = 4 }}]
"""

FLOWS = 1200


def run(vecgate, tmp, packets, extra=""):
    write_pcap(tmp / "in.pcap", [bytes(p) for p in packets])
    cfg = gateway_config(tmp, ECMP + extra)
    r = subprocess.run([str(vecgate), "pcap", "--config", str(cfg), "--json"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    outs = {}
    for i in (0, 1, 2):
        f = tmp / f"out{i}.pcap"
        outs[i] = list(rdpcap(str(f))) if f.exists() and f.stat().st_size > 24 else []
        if outs[i]:
            bad, text = tshark_clean(f)
            assert not bad, text
    return outs


def flows(pkts, layer):
    """Packets per flow: (src, dst, sport, dport) of the `layer` header and the UDP after it."""
    seen = Counter()
    for p in pkts:
        ip = p[layer]
        seen[(ip.src, ip.dst, ip[UDP].sport, ip[UDP].dport)] += 1
    return seen


def check_split(first, second, layer, want_first, n, what):
    """`first` and `second`: the packets that left by eth1 and eth2, three per flow."""
    on1, on2 = flows(first, layer), flows(second, layer)
    assert not set(on1) & set(on2), f"{what}: a flow left by both links"
    assert len(on1) + len(on2) == n, (what, len(on1), len(on2))
    assert all(c == 3 for c in list(on1.values()) + list(on2.values())), f"{what}: a flow's packets were split or lost"
    share = len(on1) / n
    # Binomial spread over 600 flows: sigma 1.8 %; the buckets add at most 0.2 %.
    assert abs(share - want_first) < 0.08, f"{what}: {share:.3f} of the flows on eth1, the weights say {want_first}"


def test_ipv4_and_ipv6_flows_split_by_weight_each_on_one_link(vecgate, tmp_path):
    pkts = []
    for _ in range(3):
        for i in range(FLOWS):
            if i % 2 == 0:
                pkts.append(Ether(src=HOST_MAC, dst=GW_MAC0) / IP(src="198.18.0.2", dst=f"198.20.{i % 7}.{i % 200 + 1}", ttl=64)
                            / UDP(sport=20000 + i, dport=443) / Raw(b"e" * 20))
            else:
                pkts.append(Ether(src=HOST_MAC, dst=GW_MAC0) / IPv6(src="2001:db8::2", dst=f"2001:db8:300::{i % 9 + 1}", hlim=64)
                            / UDP(sport=20000 + i, dport=443) / Raw(b"e" * 20))
    outs = run(vecgate, tmp_path, pkts)
    assert not outs[0]
    for pkts_on, mac, gw in ((outs[1], ROUTER_MAC, GW_MAC1), (outs[2], MAC_B, GW_MAC2)):
        assert pkts_on, "every link has flows"
        for p in pkts_on:
            assert p[Ether].dst == mac and p[Ether].src == gw, p.summary()
            assert (p[IP].ttl if IP in p else p[IPv6].hlim) == 63
    # The unresolved third path is skipped: nothing solicits it, nothing waits for it.
    assert all(UDP in p for p in outs[2]), "only forwarded UDP leaves eth2 (no ARP or ND for the skipped path)"
    # Weights 3:1 among the paths that can send (the third's 4 not counted).
    for layer, what in ((IP, "IPv4"), (IPv6, "IPv6")):
        check_split([p for p in outs[1] if layer in p], [p for p in outs[2] if layer in p], layer, 0.75, FLOWS // 2, what)


TUNNEL = """
[[udp_tunnel]]
local = "198.18.0.1"
remote = "198.20.9.9"
encap = "gue"
routes = ["198.19.50.0/24"]
"""


def test_a_tunnels_outer_packets_spread_by_their_entropy_ports(vecgate, tmp_path):
    """The tunnel's remote is behind the ECMP route: each inner flow gets its own outer
    source port, and the outer packets, looked up by their own flow hash, spread."""
    pkts = [Ether(src=HOST_MAC, dst=GW_MAC0) / IP(src="198.18.0.2", dst="198.19.50.7") / UDP(sport=3000 + i, dport=9) / Raw(b"t" * 30)
            for _ in range(3) for i in range(FLOWS)]
    outs = run(vecgate, tmp_path, pkts, TUNNEL)
    assert not outs[0]
    inner_on = defaultdict(set)
    for link in (1, 2):
        for p in outs[link]:
            assert p[IP].dst == "198.20.9.9" and p[UDP].dport == 6080, p.summary()
            # The GUE payload (scapy does not dissect GUE): a 4-byte header, then the inner IPv4.
            inner = IP(bytes(p[UDP].payload)[4:])
            assert inner.dst == "198.19.50.7"
            inner_on[inner[UDP].sport].add((link, p[UDP].sport))
    assert len(inner_on) == FLOWS
    assert all(len(v) == 1 for v in inner_on.values()), "an inner flow changed link or outer port"
    outer = [(p[IP].src, p[IP].dst) for p in outs[1] + outs[2]]
    assert set(outer) == {("198.18.0.1", "198.20.9.9")}
    check_split(outs[1], outs[2], IP, 0.75, FLOWS, "outer")
    assert len({p[UDP].sport for p in outs[1]}) > 100 and len({p[UDP].sport for p in outs[2]}) > 50, "outer ports spread on each link"
