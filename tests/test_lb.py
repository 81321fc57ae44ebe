"""Service load balancer, pcap mode: scapy builds client and backend packets, vecgate
runs them through lb4-nat / lb6-nat, scapy dissects the output and recomputes every
checksum. The client 198.18.0.2 / 2001:db8::2 is behind eth0; backends in 198.19.0.0/16
and 2001:db8:100::/48 are routed by 198.18.1.2 / 2001:db8:1::2 behind eth1; the node's
address there (198.18.1.1 / 2001:db8:1::1) is the source-translation address."""
from collections import Counter

import pytest

from conftest import GW_MAC0, GW_MAC1, HOST_MAC, ROUTER_MAC, reassembled6, run_pcap  # every frame enters through eth0

from scapy.all import (ICMP, IP, TCP, UDP, Ether, ICMPv6PacketTooBig, IPerror, IPerror6, IPv6, IPv6ExtHdrFragment, Raw, TCPerror, defragment, fragment,
                       fragment6, raw)

VIP = "198.18.128.10"
VIP6 = "2001:db8:80::10"
BACKENDS = ["198.19.1.10", "198.19.2.10", "198.19.3.10"]
BACKENDS6 = ["2001:db8:100::10", "2001:db8:100::20", "2001:db8:100::30"]
SNAT, SNAT6 = "198.18.1.1", "2001:db8:1::1"
CLIENT, CLIENT6 = "198.18.0.2", "2001:db8::2"


def services(extra=""):
    b4 = ", ".join(f'{{ addr = "{a}", port = 8080 }}' for a in BACKENDS)
    b6 = ", ".join(f'{{ addr = "{a}", port = 8080 }}' for a in BACKENDS6)
    return f"""
[lb]
snat4 = "{SNAT}"
snat6 = "{SNAT6}"

[[lb_service]]
name = "default/web"
type = "cluster_ip"
vip = "{VIP}"
port = 80
protocol = "tcp"
backends = [{b4}]

[[lb_service]]
name = "default/dns"
type = "cluster_ip"
vip = "{VIP}"
port = 53
protocol = "udp"
backends = [{b4}]

[[lb_service]]
name = "default/web6"
type = "cluster_ip"
vip = "{VIP6}"
port = 80
protocol = "tcp"
backends = [{b6}]

[[lb_service]]
name = "default/empty"
type = "cluster_ip"
vip = "198.18.128.11"
port = 80
protocol = "tcp"
{extra}
"""


def syn(sport, dst=VIP, dport=80):
    return Ether(src=HOST_MAC, dst=GW_MAC0) / IP(src=CLIENT, dst=dst) / TCP(sport=sport, dport=dport, flags="S", seq=1000) / Raw(b"hello")


def syn6(sport):
    return Ether(src=HOST_MAC, dst=GW_MAC0) / IPv6(src=CLIENT6, dst=VIP6) / TCP(sport=sport, dport=80, flags="S", seq=1000)


def recomputed(pkt, layer):
    """The layer's checksum as sent, and as scapy computes it over the same bytes."""
    p = pkt.copy()
    sent = p[layer].chksum
    del p[layer].chksum
    return sent, p.__class__(raw(p))[layer].chksum


def assert_checksums(p, *layers):
    """Each of `layers`' checksums in `p` is the one scapy computes over the same bytes."""
    for layer in layers:
        sent, fresh = recomputed(p, layer)
        assert sent == fresh, (layer, p.summary())


FLOWS = 300


def test_connections_spread_over_backends_translated_to_the_node(vecgate, tmp_path):
    _, out1, counters, _ = run_pcap(vecgate, tmp_path, [syn(20000 + i) for i in range(FLOWS)], services())
    assert len(out1) == FLOWS
    seen = Counter()
    for p in out1:
        assert p[Ether].dst == ROUTER_MAC and p[Ether].src == GW_MAC1
        assert p[IP].src == SNAT and p[IP].dst in BACKENDS and p[TCP].dport == 8080
        assert p[TCP].sport - 20000 in range(FLOWS) or p[TCP].sport >= 1024
        assert p[IP].ttl == 63 and bytes(p[Raw]) == b"hello"
        assert_checksums(p, IP, TCP)
        seen[p[IP].dst] += 1
    # Maglev spreads evenly: each of 3 backends within 1/3 ± 10 % of the flows.
    assert set(seen) == set(BACKENDS)
    assert all(abs(n - FLOWS / 3) < FLOWS * 0.1 for n in seen.values()), seen
    assert counters[("lb4-nat", "new-session")] == FLOWS


def test_gateways_listing_backends_in_any_order_choose_alike(vecgate, tmp_path):
    """Scale-out by ECMP across several gateways: a router may send a connection's
    packets to another gateway (a link down, a gateway added), which has no session for
    it and must pick the same backend. Each backend's Maglev slots follow its identity,
    not its place in the list (a controller may learn the endpoints in any order): two
    gateways given the backends in other orders send each of 300 connections, TCP and
    UDP, IPv4 and IPv6, to the same backend."""
    flows = [syn(20000 + i) for i in range(100)]
    flows += [Ether(src=HOST_MAC, dst=GW_MAC0) / IP(src=CLIENT, dst=VIP) / UDP(sport=30000 + i, dport=53) / Raw(b"q") for i in range(100)]
    flows += [syn6(40000 + i) for i in range(100)]

    def choices(text):
        _, out1, _, _ = run_pcap(vecgate, tmp_path, flows, text)
        assert len(out1) == 300
        return [(p[IP].dst if IP in p else p[IPv6].dst, (p[TCP] if TCP in p else p[UDP]).dport) for p in out1]

    first = choices(services())
    assert len(set(first)) == 6, "every backend of both families takes some"
    listed = services()
    for old, new in ((BACKENDS, BACKENDS[::-1]), (BACKENDS6, BACKENDS6[1:] + BACKENDS6[:1])):
        was = ", ".join(f'{{ addr = "{a}", port = 8080 }}' for a in old)
        assert was in listed
        listed = listed.replace(was, ", ".join(f'{{ addr = "{a}", port = 8080 }}' for a in new))
    assert listed != services()
    assert choices(listed) == first


def backends_of(vecgate, tmp_path, n):
    """Which backend and source port each of the first n flows of `syn` goes to (Maglev
    is deterministic, so a second run chooses the same)."""
    _, out1, _, _ = run_pcap(vecgate, tmp_path, [syn(20000 + i) for i in range(n)], services())
    return {p[TCP].sport: p[IP].dst for p in out1}


def test_replies_carry_the_service_address(vecgate, tmp_path):
    chosen = backends_of(vecgate, tmp_path, FLOWS)
    assert len(chosen) == FLOWS, "each connection keeps the client's port on the node address"
    # The SYNs, then (a vector later) each backend's SYN-ACK to the node's address.
    replies = [
        Ether(src=HOST_MAC, dst=GW_MAC0) / IP(src=chosen[20000 + i], dst=SNAT) / TCP(sport=8080, dport=20000 + i, flags="SA", seq=5, ack=1006) / Raw(b"world")
        for i in range(20)
    ]
    out0, out1, counters, _ = run_pcap(vecgate, tmp_path, [syn(20000 + i) for i in range(FLOWS)] + replies, services())
    back = [p for p in out0 if TCP in p]
    assert len(back) == 20
    for i, p in enumerate(back):
        assert (p[IP].src, p[TCP].sport, p[IP].dst, p[TCP].dport) == (VIP, 80, CLIENT, 20000 + i)
        assert p[TCP].flags == "SA" and bytes(p[Raw]) == b"world"
        assert_checksums(p, IP, TCP)
    assert counters[("lb4-nat", "reply-translated")] == 20


def test_udp_and_ipv6_services(vecgate, tmp_path):
    dns = [Ether(src=HOST_MAC, dst=GW_MAC0) / IP(src=CLIENT, dst=VIP) / UDP(sport=30000 + i, dport=53) / Raw(b"q" * 11) for i in range(30)]
    six = [syn6(40000 + i) for i in range(30)]
    _, out1, counters, _ = run_pcap(vecgate, tmp_path, dns + six, services())
    udp = [p for p in out1 if UDP in p]
    tcp6 = [p for p in out1 if IPv6 in p]
    assert len(udp) == 30 and len(tcp6) == 30
    for p in udp:
        assert p[IP].src == SNAT and p[IP].dst in BACKENDS and p[UDP].dport == 8080
        sent, fresh = recomputed(p, UDP)
        assert sent == fresh
    for p in tcp6:
        assert p[IPv6].src == SNAT6 and p[IPv6].dst in BACKENDS6 and p[TCP].dport == 8080
        sent, fresh = recomputed(p, TCP)
        assert sent == fresh
    assert len({p[IPv6].dst for p in tcp6}) == 3
    assert counters[("lb6-nat", "new-session")] == 30


def test_icmp_frag_needed_reaches_the_client_about_its_own_packet(vecgate, tmp_path):
    chosen = backends_of(vecgate, tmp_path, 1)
    backend = chosen[20000]
    # A router on the way to the backend cannot forward the translated packet.
    quoted = IP(src=SNAT, dst=backend, ttl=63, flags="DF") / TCP(sport=20000, dport=8080, flags="S", seq=1000) / Raw(b"hello")
    err = Ether(src=HOST_MAC, dst=GW_MAC0) / IP(src="198.18.1.2", dst=SNAT) / ICMP(type=3, code=4, nexthopmtu=1280) / raw(quoted)[:28]
    filler = [syn(21000 + i) for i in range(299)]
    out0, _, counters, _ = run_pcap(vecgate, tmp_path, [syn(20000)] + filler + [err], services())
    icmp = [p for p in out0 if ICMP in p]
    assert len(icmp) == 1, [p.summary() for p in out0]
    p = icmp[0]
    assert (p[IP].src, p[IP].dst, p[ICMP].type, p[ICMP].code, p[ICMP].nexthopmtu) == ("198.18.1.2", CLIENT, 3, 4, 1280)
    q = p[IPerror]
    assert (q.src, q.dst, q[TCPerror].sport, q[TCPerror].dport) == (CLIENT, VIP, 20000, 80)
    sent, fresh = recomputed(p, ICMP)
    assert sent == fresh
    qi = IP(raw(q))
    del qi.chksum
    assert IP(raw(qi)).chksum == q.chksum, "the quoted header's checksum"
    assert counters[("lb4-nat", "icmp-translated")] == 1


def test_icmpv6_packet_too_big_reaches_the_client_about_its_own_packet(vecgate, tmp_path):
    """PMTU discovery through the translation over IPv6: the error comes to the node's
    address by ip6-local, and the client gets it about the packet it sent."""
    _, out1, _, _ = run_pcap(vecgate, tmp_path, [syn6(40000)], services())
    assert len(out1) == 1
    sent = out1[0]
    backend, sport = sent[IPv6].dst, sent[TCP].sport
    quoted = IPv6(src=SNAT6, dst=backend, hlim=63) / TCP(sport=sport, dport=8080, flags="S", seq=1000)
    err = Ether(src=HOST_MAC, dst=GW_MAC0) / IPv6(src="2001:db8:1::2", dst=SNAT6) / ICMPv6PacketTooBig(mtu=1280) / raw(quoted)
    filler = [syn(21000 + i) for i in range(299)]
    out0, _, counters, _ = run_pcap(vecgate, tmp_path, [syn6(40000)] + filler + [err], services())
    ptb = [p for p in out0 if ICMPv6PacketTooBig in p]
    assert len(ptb) == 1, [p.summary() for p in out0]
    p = ptb[0]
    assert (p[IPv6].src, p[IPv6].dst, p[ICMPv6PacketTooBig].mtu) == ("2001:db8:1::2", CLIENT6, 1280)
    q = p[IPerror6]
    assert (q.src, q.dst, q[TCPerror].sport, q[TCPerror].dport) == (CLIENT6, VIP6, 40000, 80)
    sent_sum, fresh = recomputed(p, ICMPv6PacketTooBig)
    assert sent_sum == fresh, "the ICMPv6 checksum over the new addresses"
    assert counters[("lb6-nat", "icmp-translated")] == 1


LOCAL = f"""
[[lb_service]]
name = "default/web-local"
type = "load_balancer"
vip = "{VIP}"
port = 81
protocol = "tcp"
traffic_policy = "Local"
backends = [{{ addr = "{BACKENDS[0]}", port = 8080 }}]

[[lb_service]]
name = "default/web6-local"
type = "load_balancer"
vip = "{VIP6}"
port = 81
protocol = "tcp"
traffic_policy = "Local"
backends = [{{ addr = "{BACKENDS6[0]}", port = 8080 }}]
"""


def test_forwarded_icmp_errors_about_a_client_kept_connection_are_translated(vecgate, tmp_path):
    """`Local` policy keeps the client's address, so a router on the way to the backend
    addresses its error to the client, and it is forwarded through the node: the client
    must get it about the packet it sent (the service address and port), both families."""
    quoted4 = IP(src=CLIENT, dst=BACKENDS[0], ttl=63, flags="DF") / TCP(sport=20000, dport=8080, flags="S", seq=1000) / Raw(b"hello")
    quoted6 = IPv6(src=CLIENT6, dst=BACKENDS6[0], hlim=63) / TCP(sport=40000, dport=8080, flags="S", seq=1000)
    err4 = Ether(src=HOST_MAC, dst=GW_MAC0) / IP(src="198.18.1.2", dst=CLIENT, ttl=64) / ICMP(type=3, code=4, nexthopmtu=1280) / raw(quoted4)[:28]
    err6 = Ether(src=HOST_MAC, dst=GW_MAC0) / IPv6(src="2001:db8:1::2", dst=CLIENT6, hlim=64) / ICMPv6PacketTooBig(mtu=1280) / raw(quoted6)
    syn4 = syn(20000, dport=81)
    syn6_ = Ether(src=HOST_MAC, dst=GW_MAC0) / IPv6(src=CLIENT6, dst=VIP6) / TCP(sport=40000, dport=81, flags="S", seq=1000)
    filler = [syn(21000 + i) for i in range(298)]
    out0, out1, counters, _ = run_pcap(vecgate, tmp_path, [syn4, syn6_] + filler + [err4, err6], services(LOCAL))
    kept = [p for p in out1 if (IP in p and p[IP].src == CLIENT) or (IPv6 in p and p[IPv6].src == CLIENT6)]
    assert len(kept) == 2, "both connections keep the client's address"
    e4 = [p for p in out0 if ICMP in p]
    e6 = [p for p in out0 if ICMPv6PacketTooBig in p]
    assert len(e4) == 1 and len(e6) == 1, [p.summary() for p in out0]
    p4, p6 = e4[0], e6[0]
    assert (p4[IP].src, p4[IP].dst, p4[IP].ttl, p4[ICMP].nexthopmtu) == ("198.18.1.2", CLIENT, 63, 1280)
    q = p4[IPerror]
    assert (q.src, q.dst, q[TCPerror].sport, q[TCPerror].dport) == (CLIENT, VIP, 20000, 81)
    assert (p6[IPv6].src, p6[IPv6].dst, p6[IPv6].hlim, p6[ICMPv6PacketTooBig].mtu) == ("2001:db8:1::2", CLIENT6, 63, 1280)
    q6 = p6[IPerror6]
    assert (q6.src, q6.dst, q6[TCPerror].sport, q6[TCPerror].dport) == (CLIENT6, VIP6, 40000, 81)
    assert_checksums(p4, IP, ICMP)
    assert_checksums(p6, ICMPv6PacketTooBig)
    assert counters[("lb4-nat", "icmp-translated")] == 1
    assert counters[("lb6-nat", "icmp-translated")] == 1


def test_a_backend_balanced_to_itself_is_translated_to_the_node(vecgate, tmp_path):
    """Hairpin, both families: a `Local` service's backend connecting to the service and
    chosen itself gets its connection from the node's address (as kube-proxy masquerades
    it): a packet from its own address would be a martian to its kernel, and its reply
    would not come back through the gateway. The reply to the node is translated back to
    the service's address and port, every checksum valid."""
    b4, b6 = BACKENDS[0], BACKENDS6[0]
    out4 = Ether(src=HOST_MAC, dst=GW_MAC0) / IP(src=b4, dst=VIP) / TCP(sport=33000, dport=81, flags="S", seq=7) / Raw(b"self")
    out6 = Ether(src=HOST_MAC, dst=GW_MAC0) / IPv6(src=b6, dst=VIP6) / TCP(sport=33000, dport=81, flags="S", seq=7)
    _, out1, _, _ = run_pcap(vecgate, tmp_path, [out4, out6], services(LOCAL))
    sent4 = [p for p in out1 if IP in p]
    sent6 = [p for p in out1 if IPv6 in p]
    assert len(sent4) == 1 and len(sent6) == 1, [p.summary() for p in out1]
    p4, p6 = sent4[0], sent6[0]
    assert (p4[IP].src, p4[IP].dst, p4[TCP].dport) == (SNAT, b4, 8080), p4.summary()
    assert (p6[IPv6].src, p6[IPv6].dst, p6[TCP].dport) == (SNAT6, b6, 8080), p6.summary()
    assert_checksums(p4, IP, TCP)
    assert_checksums(p6, TCP)
    # The backend's SYN-ACK to the node's address and port, a vector later.
    r4 = Ether(src=HOST_MAC, dst=GW_MAC0) / IP(src=b4, dst=SNAT) / TCP(sport=8080, dport=p4[TCP].sport, flags="SA", seq=5, ack=8)
    r6 = Ether(src=HOST_MAC, dst=GW_MAC0) / IPv6(src=b6, dst=SNAT6) / TCP(sport=8080, dport=p6[TCP].sport, flags="SA", seq=5, ack=8)
    filler = [syn(21000 + i) for i in range(254)]
    _, out1, counters, _ = run_pcap(vecgate, tmp_path, [out4, out6] + filler + [r4, r6], services(LOCAL))
    # (The client is the backend, behind eth1.)
    back = [p for p in out1 if TCP in p and p[TCP].sport == 81]
    assert len(back) == 2, [p.summary() for p in out1]
    q4 = next(p for p in back if IP in p)
    q6 = next(p for p in back if IPv6 in p)
    assert (q4[IP].src, q4[TCP].sport, q4[IP].dst, q4[TCP].dport) == (VIP, 81, b4, 33000), q4.summary()
    assert (q6[IPv6].src, q6[TCP].sport, q6[IPv6].dst, q6[TCP].dport) == (VIP6, 81, b6, 33000), q6.summary()
    assert_checksums(q4, IP, TCP)
    assert_checksums(q6, TCP)
    assert counters[("lb4-nat", "reply-translated")] == 1
    assert counters[("lb6-nat", "reply-translated")] == 1


def test_refusals_are_counted_by_name(vecgate, tmp_path):
    truncated = Ether(src=HOST_MAC, dst=GW_MAC0) / IP(src=CLIENT, dst=VIP, proto=6) / Raw(b"\x4e\x20\x00")
    frag = Ether(src=HOST_MAC, dst=GW_MAC0) / IP(src=CLIENT, dst=VIP, flags="MF") / TCP(sport=1, dport=80) / Raw(b"x" * 8)
    gre = Ether(src=HOST_MAC, dst=GW_MAC0) / IP(src=CLIENT, dst=VIP, proto=47) / Raw(b"x" * 8)
    empty = syn(20000, dst="198.18.128.11")
    wrong_port = syn(20001, dport=81)
    elsewhere = syn(20002, dst="198.18.140.20")
    # Local policy, its only backend on another node.
    local_elsewhere = """
[[lb_service]]
name = "default/elsewhere"
type = "load_balancer"
vip = "198.18.140.20"
port = 80
protocol = "tcp"
traffic_policy = "Local"
backends = [{ addr = "198.19.1.10", port = 8080, local = false }]
"""
    out0, out1, counters, _ = run_pcap(vecgate, tmp_path, [truncated, frag, gre, empty, wrong_port, elsewhere], services(local_elsewhere))
    assert out1 == []
    assert counters[("lb4-nat", "truncated")] == 1
    # A fragment goes to reassembly (held there: its datagram never completes).
    assert counters[("lb4-nat", "to-reassembly")] == 1 and counters[("ip4-reassembly", "fragments")] == 1
    assert counters[("lb4-nat", "not-tcp-udp")] == 1
    assert counters[("lb4-nat", "no-backend")] == 1
    assert counters[("lb4-nat", "no-service")] == 1
    # Endpoints only on other nodes: dropped, as kube-proxy's "has no local endpoints" rule.
    assert counters[("lb4-nat", "no-local-backend")] == 1
    # A service without backends, and a port without a service: port unreachable, as
    # kube-proxy's reject rules answer.
    unreach = [p for p in out0 if ICMP in p]
    assert sorted((p[ICMP].type, p[ICMP].code, p[TCPerror].dport) for p in unreach) == [(3, 3, 80), (3, 3, 81)]


FRAGMENTED = f"""
[[lb_service]]
name = "default/dns6"
type = "cluster_ip"
vip = "{VIP6}"
port = 53
protocol = "udp"
backends = [{{ addr = "{BACKENDS6[0]}", port = 8080 }}]

[[lb_service]]
name = "default/dns-local"
type = "load_balancer"
vip = "{VIP}"
port = 54
protocol = "udp"
traffic_policy = "Local"
backends = [{{ addr = "{BACKENDS[0]}", port = 8080 }}]
"""


def whole_datagrams(frames, family):
    """The datagrams the frames make, fragments put together (scapy's reassembly);
    each frame first checked to be a well-formed packet that fits its 1500/1400-byte link."""
    net = IP if family == 4 else IPv6
    packets = [f[net] for f in frames if net in f]
    for p in packets:
        assert len(p) <= 1500, p.summary()
    if family == 4:
        return [p for p in defragment(packets)]
    return [p for p in packets if IPv6ExtHdrFragment not in p] + reassembled6([p for p in packets if IPv6ExtHdrFragment in p])


def test_fragmented_datagrams_are_reassembled_translated_and_fragmented_again(vecgate, tmp_path):
    """A client's UDP datagram too big for one frame comes in fragments, only the first
    with the ports that choose its session: the node reassembles them (in order or not),
    translates the whole datagram and fragments it again for the link to the backend
    (1400 bytes), IPv4 and IPv6 (as Linux's conntrack does; an IPv6 router would
    otherwise refuse it with Packet Too Big, which the client, which did fragment, could
    not act on). The backends' fragmented replies come back translated and fragmented
    again the same way: to the node's address (Cluster), and forwarded with the client's
    address kept (Local). Before, every fragment to a service was dropped."""
    body = bytes(range(256)) * 12  # 3072 bytes
    def client4(sport, dport=53):
        return IP(src=CLIENT, dst=VIP, id=sport) / UDP(sport=sport, dport=dport) / Raw(body)
    in_order = [Ether(src=HOST_MAC, dst=GW_MAC0) / f for f in fragment(client4(6000), fragsize=1400)]
    reversed_ = [Ether(src=HOST_MAC, dst=GW_MAC0) / f for f in reversed(fragment(client4(6001), fragsize=1000))]
    six = IPv6(src=CLIENT6, dst=VIP6) / IPv6ExtHdrFragment(id=6002) / UDP(sport=6002, dport=53) / Raw(body)
    six_frags = [Ether(src=HOST_MAC, dst=GW_MAC0) / f for f in fragment6(six, 1280)]
    local_query = Ether(src=HOST_MAC, dst=GW_MAC0) / IP(src=CLIENT, dst=VIP, id=1) / UDP(sport=6003, dport=54) / Raw(b"q")
    filler = [syn(21000 + i) for i in range(298)]
    # The replies a vector later: the Local backend's to the client, forwarded through
    # the node; the IPv6 backend's to the node's address and the client's port.
    local_reply = IP(src=BACKENDS[0], dst=CLIENT, id=77) / UDP(sport=8080, dport=6003) / Raw(body[::-1])
    six_reply = IPv6(src=BACKENDS6[0], dst=SNAT6) / IPv6ExtHdrFragment(id=78) / UDP(sport=8080, dport=6002) / Raw(body[::-1])
    replies = [Ether(src=HOST_MAC, dst=GW_MAC0) / f for f in fragment(local_reply, fragsize=1400) + fragment6(six_reply, 1280)]
    sent = in_order + reversed_ + six_frags + [local_query] + filler + replies
    out0, out1, counters, _ = run_pcap(vecgate, tmp_path, sent, services(LOCAL + FRAGMENTED))

    # To the backends: whole datagrams from the node's address, the client's bytes.
    to_backends = {}
    for p in whole_datagrams(out1, 4) + whole_datagrams(out1, 6):
        if UDP in p and p[UDP].dport == 8080:
            to_backends[p[UDP].sport] = p
    assert {6000, 6001, 6002, 6003} <= set(to_backends), sorted(to_backends)
    for sport in (6000, 6001, 6002):
        p = to_backends[sport]
        net = IPv6 if sport == 6002 else IP
        assert p[net].src == (SNAT6 if sport == 6002 else SNAT)
        assert bytes(p[UDP].payload) == body, sport
        sent_sum, fresh = recomputed(p, UDP)
        assert sent_sum == fresh, ("the UDP checksum over the whole datagram", sport)
    frags_out = [f for f in out1 if (IP in f and (f[IP].flags.MF or f[IP].frag)) or IPv6ExtHdrFragment in f]
    assert frags_out and all(len(f) - 14 <= 1400 for f in frags_out), "fragments fit the 1400-byte link"

    # To the client: each reply whole from the service address and port.
    back = {p[UDP].dport: p for p in whole_datagrams(out0, 4) + whole_datagrams(out0, 6) if UDP in p}
    assert (back[6003][IP].src, back[6003][UDP].sport) == (VIP, 54), back[6003].summary()
    assert (back[6002][IPv6].src, back[6002][UDP].sport) == (VIP6, 53), back[6002].summary()
    for port in (6002, 6003):
        assert bytes(back[port][UDP].payload) == body[::-1], port
        sent_sum, fresh = recomputed(back[port], UDP)
        assert sent_sum == fresh, ("the UDP checksum", port)

    nat4, nat6 = counters[("lb4-nat", "to-reassembly")], counters[("lb6-nat", "to-reassembly")]
    assert nat4 == len(in_order) + len(reversed_) + 3 and nat6 == len(six_frags), (nat4, nat6)
    assert counters[("ip4-reassembly", "reassembled")] == 3 and counters[("ip6-reassembly", "reassembled")] == 2, counters
    assert counters[("ip6-rewrite", "to-fragment")] == 2 and counters[("ip6-rewrite", "packet-too-big")] == 0
    assert counters[("lb4-nat", "reply-translated")] == 1 and counters[("lb6-nat", "reply-translated")] == 1
    drops = {k: v for k, v in counters.items() if v and k[0] in ("lb4-nat", "lb6-nat") and k[1] in ("extension-headers", "truncated", "not-tcp-udp")}
    assert not drops, drops


def test_ipv6_options_headers_are_carried_through_the_translation(vecgate, tmp_path):
    """IPv6 Hop-by-Hop and Destination Options headers before the transport header
    (a router alert, a tunnel encapsulation limit; Linux's conntrack NATs such packets):
    the connection is balanced and translated both ways with the headers as they came,
    and a datagram fragmented behind a Hop-by-Hop header is reassembled, translated and
    fragmented again keeping it. A Routing header is refused by name (translated, its
    segment list would name an address that is no longer the destination). Before, every
    such packet was dropped (`extension-headers`)."""
    from scapy.all import IPv6ExtHdrDestOpt, IPv6ExtHdrHopByHop, IPv6ExtHdrRouting, RouterAlert
    opts = IPv6ExtHdrHopByHop(options=[RouterAlert()]) / IPv6ExtHdrDestOpt()
    syn_opts = Ether(src=HOST_MAC, dst=GW_MAC0) / IPv6(src=CLIENT6, dst=VIP6) / opts / TCP(sport=41000, dport=80, flags="S", seq=9)
    body = bytes(range(256)) * 12
    big = IPv6(src=CLIENT6, dst=VIP6) / IPv6ExtHdrHopByHop() / IPv6ExtHdrFragment(id=6100) / UDP(sport=6100, dport=53) / Raw(body)
    big_frags = [Ether(src=HOST_MAC, dst=GW_MAC0) / f for f in fragment6(big, 1280)]
    routed = Ether(src=HOST_MAC, dst=GW_MAC0) / IPv6(src=CLIENT6, dst=VIP6) / IPv6ExtHdrRouting(addresses=["2001:db8::99"], segleft=0) / TCP(sport=41001, dport=80, flags="S")
    first = [syn_opts, routed] + big_frags
    _, out1, counters, _ = run_pcap(vecgate, tmp_path, first, services(FRAGMENTED))

    tcp = [p for p in out1 if TCP in p]
    assert len(tcp) == 1, [p.summary() for p in out1]
    p = tcp[0]
    assert (p[IPv6].src, p[TCP].dport) == (SNAT6, 8080) and p[IPv6].dst in BACKENDS6, p.summary()
    assert IPv6ExtHdrHopByHop in p and IPv6ExtHdrDestOpt in p, p.summary()
    assert raw(p[IPv6ExtHdrHopByHop])[:16] == raw(syn_opts[IPv6ExtHdrHopByHop])[:16], "both headers as they came"
    sent_sum, fresh = recomputed(p, TCP)
    assert sent_sum == fresh, "the TCP checksum over the new addresses"
    frags = [f for f in out1 if IPv6ExtHdrFragment in f]
    assert len(frags) == 3 and all(IPv6ExtHdrHopByHop in f for f in frags), [f.summary() for f in frags]
    whole = [d for d in whole_datagrams(out1, 6) if UDP in d]
    assert len(whole) == 1 and bytes(whole[0][UDP].payload) == body and whole[0][IPv6].src == SNAT6, [d.summary() for d in whole]
    sent_sum, fresh = recomputed(whole[0], UDP)
    assert sent_sum == fresh, "the UDP checksum over the whole datagram"
    assert counters[("lb6-nat", "extension-headers")] == 1, "the Routing header's"
    assert counters[("ip6-reassembly", "reassembled")] == 1

    # The backend's SYN-ACK with a Destination Options header, a vector later: to the
    # client from the service, the header kept.
    reply = (Ether(src=HOST_MAC, dst=GW_MAC0) / IPv6(src=p[IPv6].dst, dst=SNAT6) / IPv6ExtHdrDestOpt()
             / TCP(sport=8080, dport=p[TCP].sport, flags="SA", seq=5, ack=10))
    filler = [syn(21000 + i) for i in range(256 - len(first))]
    out0, _, counters, _ = run_pcap(vecgate, tmp_path, first + filler + [reply], services(FRAGMENTED))
    back = [q for q in out0 if TCP in q]
    assert len(back) == 1, [q.summary() for q in out0]
    q = back[0]
    assert (q[IPv6].src, q[TCP].sport, q[IPv6].dst, q[TCP].dport) == (VIP6, 80, CLIENT6, 41000), q.summary()
    assert IPv6ExtHdrDestOpt in q
    sent_sum, fresh = recomputed(q, TCP)
    assert sent_sum == fresh
    assert counters[("lb6-nat", "reply-translated")] == 1


def tunnel_to(tunnel, host):
    """The gateway's tunnel to the peer 198.18.1.2 (behind eth1) that `host` is behind:
    a GUE `[[udp_tunnel]]`, an IPsec SA pair (test_ipsec's) or a GTP-U tunnel."""
    from test_ipsec import sa_config
    if tunnel == "esp":
        return sa_config("aes-gcm-128", 4, False)
    if tunnel == "gtpu":
        return f"""
[[gtpu_tunnel]]
local = "198.18.1.1"
remote = "198.18.1.2"
teid_in = 0x100
teid_out = 0x200
ue = "{host}/32"
"""
    return f"""
[[udp_tunnel]]
local = "198.18.1.1"
remote = "198.18.1.2"
encap = "gue"
routes = ["{host}/32"]
"""


def from_tunnel(tunnel, inner):
    """`inner` as the peer sends it through `tunnel_to(tunnel, ...)`: scapy's GUE, its
    ESP SA or its GTP-U."""
    from scapy.contrib.gtp import GTP_U_Header
    from test_ipsec import IN_SPI, scapy_sa
    outer = Ether(src=HOST_MAC, dst=GW_MAC0) / IP(src="198.18.1.2", dst="198.18.1.1")
    if tunnel == "esp":
        return Ether(src=HOST_MAC, dst=GW_MAC0) / scapy_sa("aes-gcm-128", 4, False, IN_SPI, 2, "198.18.1.2", "198.18.1.1").encrypt(inner)
    if tunnel == "gtpu":
        return outer / UDP(sport=2152, dport=2152) / GTP_U_Header(teid=0x100) / inner
    return outer / UDP(sport=40000, dport=6080) / Raw(b"\x00\x04\x00\x00" + raw(inner))


def into_tunnel(tunnel, frames):
    """The one frame of `frames` the gateway sent into `tunnel_to(tunnel, ...)`, opened
    by scapy (GUE read, ESP decrypted with its SA, GTP-U's TEID checked): its inner packet."""
    from scapy.contrib.gtp import GTP_U_Header
    from test_ipsec import OUT_SPI, outer_l3, scapy_sa
    sent = [f for f in frames if IP in f and (f[IP].proto == 50 or (UDP in f and f[UDP].dport in (6080, 2152)))]
    assert len(sent) == 1, [f.summary() for f in frames]
    f = sent[0]
    assert (f[IP].src, f[IP].dst) == ("198.18.1.1", "198.18.1.2"), f.summary()
    if tunnel == "esp":
        return scapy_sa("aes-gcm-128", 4, False, OUT_SPI, 1, "198.18.1.1", "198.18.1.2").decrypt(outer_l3(f, 4))
    if tunnel == "gtpu":
        g = GTP_U_Header(raw(f[UDP].payload))
        assert g.teid == 0x200, g.summary()
        return IP(raw(g.payload))
    gue = raw(f[UDP].payload)
    assert f[UDP].dport == 6080 and gue[:2] == b"\x00\x04", "GUE carrying IPv4"
    return IP(gue[4:])


@pytest.mark.parametrize("tunnel", ["gue", "esp"])
def test_a_backend_behind_a_tunnel_is_reached_and_answers_through_it(vecgate, tmp_path, tunnel):
    """A backend whose route is a tunnel (a pod network on another site: GUE, or an
    IPsec ESP SA): the translated connection leaves inside the tunnel, and the backend's
    reply, arriving inside it to the node's address, is decapsulated (decrypted) and
    translated back to the service for the client. scapy reads the GUE and decrypts the
    ESP (its own SA), and seals the reply. The load balancer's output and input are the
    graph's, as any forwarded packet's."""
    far = "198.19.50.10" if tunnel == "gue" else "198.19.60.10"
    extra = tunnel_to(tunnel, far) + f"""
[[lb_service]]
name = "default/far"
type = "cluster_ip"
vip = "{VIP}"
port = 82
protocol = "tcp"
backends = [{{ addr = "{far}", port = 8080 }}]
"""
    syn_far = syn(42000, dport=82)
    _, out1, _, _ = run_pcap(vecgate, tmp_path, [syn_far], services(extra))
    inner = into_tunnel(tunnel, out1)
    assert (inner.src, inner.dst, inner[TCP].dport, bytes(inner[Raw])) == (SNAT, far, 8080, b"hello"), inner.summary()
    assert_checksums(inner, IP, TCP)
    # The SYN-ACK inside the tunnel, to the node's address and port, a vector later.
    answer = IP(src=far, dst=SNAT) / TCP(sport=8080, dport=inner[TCP].sport, flags="SA", seq=5, ack=1006) / Raw(b"world")
    filler = [syn(21000 + i) for i in range(255)]
    out0, _, counters, _ = run_pcap(vecgate, tmp_path, [syn_far] + filler + [from_tunnel(tunnel, answer)], services(extra))
    back = [p for p in out0 if TCP in p]
    assert len(back) == 1, [p.summary() for p in out0]
    p = back[0]
    assert (p[IP].src, p[TCP].sport, p[IP].dst, p[TCP].dport) == (VIP, 82, CLIENT, 42000), p.summary()
    assert p[TCP].flags == "SA" and bytes(p[Raw]) == b"world"
    assert_checksums(p, IP, TCP)
    assert counters[("gue4-input" if tunnel == "gue" else "esp4-decrypt", "decapsulated" if tunnel == "gue" else "decrypted")] == 1, \
        {k: v for k, v in counters.items() if v and k[0].startswith(("gue", "esp"))}
    assert counters[("lb4-nat", "reply-translated")] == 1


@pytest.mark.parametrize("tunnel", ["gue", "esp", "gtpu"])
def test_a_client_behind_a_tunnel_keeps_its_address_and_gets_the_reply_inside_it(vecgate, tmp_path, tunnel):
    """A `Local` service's client behind a tunnel (GUE, an IPsec ESP SA, or a GTP-U
    tunnel: a UE behind its gNB): its SYN, decapsulated (decrypted), reaches the backend
    with the client's address kept; the backend's reply, forwarded toward the client, is
    translated to the service on the way and leaves inside the tunnel, where scapy reads
    (decrypts) it. Before, a reply whose route led into a tunnel went to the tunnel
    untranslated, from the backend's address (the client's kernel would answer it with a
    reset)."""
    client = {"gue": "198.19.50.20", "esp": "198.19.60.20", "gtpu": "198.19.70.20"}[tunnel]
    first = from_tunnel(tunnel, IP(src=client, dst=VIP) / TCP(sport=43000, dport=81, flags="S", seq=3))
    reply = Ether(src=HOST_MAC, dst=GW_MAC0) / IP(src=BACKENDS[0], dst=client) / TCP(sport=8080, dport=43000, flags="SA", seq=5, ack=4)
    filler = [syn(21000 + i) for i in range(255)]
    _, out1, counters, _ = run_pcap(vecgate, tmp_path, [first] + filler + [reply], services(LOCAL + tunnel_to(tunnel, client)))
    to_backend = [p for p in out1 if TCP in p and p[IP].dst == BACKENDS[0] and p[TCP].sport == 43000]
    assert len(to_backend) == 1 and to_backend[0][IP].src == client, [p.summary() for p in out1]
    inner = into_tunnel(tunnel, out1)
    assert (inner.src, inner[TCP].sport, inner.dst, inner[TCP].dport) == (VIP, 81, client, 43000), inner.summary()
    assert_checksums(inner, IP, TCP)
    assert counters[("lb4-nat", "reply-translated")] == 1


def test_a_local_reply_meets_the_links_spd_in_the_clients_terms(vecgate, tmp_path):
    """A `Local` connection's reply leaving by a link with an SPD: translated first, so
    the policy that protects the service's traffic to the client (selector: the service
    address and port as the source) takes it, and scapy decrypts the reply from the
    service. Before, the SPD saw it untranslated, from the backend: the bypass policy
    sent it in the clear, from an address the client never dialled."""
    from scapy.layers.ipsec import ESP, SecurityAssociation
    key = bytes(range(20))
    client = "198.19.7.20"
    spd = f"""
[[ipsec_sa]]
index = 0
spi = 12289
direction = "outbound"
algorithm = "aes-gcm-128"
enc_key = "{key.hex()}"
local = "198.18.1.1"
remote = "198.18.1.2"

[[ipsec_spd]]
id = 1
interfaces = ["eth1"]

[[ipsec_policy]]
spd = 1
direction = "outbound"
priority = 100
action = "protect"
sa = 0
local = "{VIP}/32"
remote = "198.19.7.0/24"
protocol = "tcp"
local_ports = "81"

[[ipsec_policy]]
spd = 1
direction = "outbound"
priority = 50
action = "bypass"
remote = "198.19.0.0/16"
"""
    first = Ether(src=HOST_MAC, dst=GW_MAC0) / IP(src=client, dst=VIP) / TCP(sport=44000, dport=81, flags="S", seq=3)
    reply = Ether(src=HOST_MAC, dst=GW_MAC0) / IP(src=BACKENDS[0], dst=client) / TCP(sport=8080, dport=44000, flags="SA", seq=5, ack=4)
    filler = [syn(21000 + i) for i in range(255)]
    _, out1, counters, _ = run_pcap(vecgate, tmp_path, [first] + filler + [reply], services(LOCAL + spd))
    to_backend = [p for p in out1 if TCP in p and p[IP].dst == BACKENDS[0] and p[TCP].sport == 44000]
    assert len(to_backend) == 1 and to_backend[0][IP].src == client, "the SYN bypasses, the client's address kept"
    esp = [p for p in out1 if p[IP].proto == 50]
    clear = [p for p in out1 if TCP in p and p[IP].dst == client]
    assert len(esp) == 1 and not clear, [p.summary() for p in clear]
    sa = SecurityAssociation(ESP, spi=12289, crypt_algo="AES-GCM", crypt_key=key, tunnel_header=IP(src="198.18.1.1", dst="198.18.1.2"))
    inner = sa.decrypt(IP(raw(esp[0])[14:]))
    assert (inner.src, inner[TCP].sport, inner.dst, inner[TCP].dport) == (VIP, 81, client, 44000), inner.summary()
    assert_checksums(inner, IP, TCP)
    assert counters[("lb4-nat", "reply-translated")] == 1
