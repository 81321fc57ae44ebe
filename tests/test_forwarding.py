"""Whole-graph golden tests: scapy builds the input, vecgate runs it offline
(`vecgate pcap`), scapy and tshark dissect what came out."""
import pytest

from conftest import GW_MAC0, GW_MAC1, HOST_MAC, ROUTER_MAC, run_pcap, tshark_clean

from scapy.all import ARP, ICMP, IP, UDP, TCP, Ether, Raw, IPv6, ICMPv6EchoRequest, ICMPv6EchoReply, \
    ICMPv6ND_NS, ICMPv6ND_NA, ICMPv6NDOptSrcLLAddr, ICMPv6DestUnreach, ICMPv6TimeExceeded, ICMPv6PacketTooBig, \
    IPv6ExtHdrHopByHop, HBHOptUnknown, ICMPv6ParamProblem, IPerror, UDPerror, raw


def eth0(payload):
    return Ether(src=HOST_MAC, dst=GW_MAC0) / payload


def with_raw_option(ip_pkt, option: bytes):
    """An IPv4 packet with `option` bytes (a multiple of 4) inserted as its options and a
    correct header checksum: only the option itself is wrong."""
    from scapy.utils import checksum
    b = bytearray(raw(ip_pkt))
    hdr = bytearray(b[:20]) + bytearray(option)
    hdr[0] = 0x40 | (len(hdr) // 4)
    total = len(hdr) + len(b) - 20
    hdr[2:4] = total.to_bytes(2, "big")
    hdr[10:12] = b"\x00\x00"
    hdr[10:12] = checksum(bytes(hdr)).to_bytes(2, "big")
    return raw(Ether(src=HOST_MAC, dst=GW_MAC0, type=0x0800)) + bytes(hdr) + bytes(b[20:])


def checksums_valid(pkt):
    """Recompute every checksum with scapy and compare with what vecgate wrote."""
    fresh = pkt.__class__(raw(pkt))
    for layer in (IP, UDP, TCP, ICMP):
        if fresh.haslayer(layer) and hasattr(fresh[layer], "chksum"):
            l = fresh[layer]
            if layer is UDP and l.chksum == 0:
                continue
            got = l.chksum
            l2 = l.copy()
            del l2.chksum
            # Rebuild from the enclosing IP to get the right pseudo-header.
            if layer is IP:
                want = IP(raw(fresh[IP].copy().__class__(raw(fresh[IP])))).chksum
                c = fresh[IP].copy()
                del c.chksum
                want = IP(raw(c)).chksum
            else:
                ipc = fresh[IP].copy() if fresh.haslayer(IP) else fresh[IPv6].copy()
                del ipc[layer].chksum
                want = ipc.__class__(raw(ipc))[layer].chksum
            if got != want:
                return False
    return True


def test_ipv4_forwarding_rewrites_and_keeps_checksums(vecgate, tmp_path):
    pkts = [eth0(IP(src="198.18.0.2", dst=f"198.19.0.{i}", ttl=64) / UDP(sport=1000 + i, dport=9) / Raw(b"x" * 18)) for i in range(1, 33)]
    out0, out1, c, _ = run_pcap(vecgate, tmp_path, pkts)
    assert len(out1) == 32 and len(out0) == 0
    for i, p in enumerate(out1, start=1):
        assert p[Ether].src == GW_MAC1 and p[Ether].dst == ROUTER_MAC
        assert p[IP].ttl == 63 and p[IP].dst == f"198.19.0.{i}"
        assert p[UDP].sport == 1000 + i and bytes(p[Raw]) == b"x" * 18
        assert checksums_valid(p), p.show(dump=True)
    bad, _ = tshark_clean(tmp_path / "out1.pcap")
    assert not bad, bad


def test_ipv4_malformed_is_dropped_with_named_counters(vecgate, tmp_path):
    good = eth0(IP(src="198.18.0.2", dst="198.19.0.9") / UDP(sport=1, dport=2) / Raw(b"abcd"))
    bad_csum = eth0(IP(src="198.18.0.2", dst="198.19.0.9", chksum=0x1234) / UDP(sport=1, dport=2))
    ihl4 = bytearray(raw(good))
    ihl4[14] = 0x44
    bad_version = bytearray(raw(good))
    bad_version[14] = 0x65
    long_total = eth0(IP(src="198.18.0.2", dst="198.19.0.9", len=200) / UDP(sport=1, dport=2))
    truncated = raw(good)[:14 + 12]
    short_frame = raw(good)[:10]
    bad_option = with_raw_option(IP(src="198.18.0.2", dst="198.19.0.9") / UDP(sport=1, dport=2), b"\x07\x09\x00\x00")
    multicast_src = eth0(IP(src="224.0.0.5", dst="198.19.0.9") / UDP())
    # RFC 1812 §5.3.7's martians: network 0, loopback, reserved.
    martians = [eth0(IP(src=a, dst="198.19.0.9") / UDP()) for a in ("0.0.0.0", "127.0.0.1", "240.0.0.1")]
    blackhole = eth0(IP(src="198.18.0.2", dst="198.19.254.7") / UDP())
    unknown_type = Ether(src=HOST_MAC, dst=GW_MAC0, type=0x88b5) / Raw(b"\x00" * 46)
    other_mac = Ether(src=HOST_MAC, dst="02:aa:bb:cc:dd:ee") / IP(src="198.18.0.2", dst="198.19.0.9") / UDP()
    vlan = raw(Ether(src=HOST_MAC, dst=GW_MAC0, type=0x8100) / Raw(b"\x00\x05\x08\x00" + raw(IP(src="198.18.0.2", dst="198.19.0.9") / UDP())))
    out0, out1, c, _ = run_pcap(vecgate, tmp_path, [good, bad_csum, bytes(ihl4), bytes(bad_version), long_total, truncated,
                                                   short_frame, bad_option, multicast_src, blackhole, unknown_type, other_mac, vlan] + martians)
    assert len(out1) == 1 and out1[0][IP].dst == "198.19.0.9"
    assert c[("ip4-input", "bad-checksum")] == 1
    assert c[("ip4-input", "bad-ihl")] == 1
    assert c[("ip4-input", "bad-version")] == 1
    assert c[("ip4-input", "truncated")] == 2  # total length beyond the frame; header cut short
    assert c[("ethernet-input", "truncated")] == 1
    assert c[("ip4-input", "bad-option")] == 1
    assert c[("ip4-input", "bad-source")] == 4
    assert c[("ip4-lookup", "blackhole")] == 1
    assert c[("ethernet-input", "unknown-ethertype")] == 1
    assert c[("ethernet-input", "l2-mismatch")] == 1
    assert c[("ethernet-input", "vlan-no-subif")] == 1


def test_ipv4_icmp_errors(vecgate, tmp_path):
    ttl1 = eth0(IP(src="198.18.0.2", dst="198.19.3.3", ttl=1, id=77) / UDP(sport=5555, dport=33434) / Raw(b"q" * 20))
    no_route = eth0(IP(src="198.18.0.2", dst="198.18.200.1") / UDP(sport=5556, dport=9))
    too_big_df = eth0(IP(src="198.18.0.2", dst="198.19.0.5", flags="DF") / UDP(sport=5557, dport=9) / Raw(b"b" * 1400))
    too_big = eth0(IP(src="198.18.0.2", dst="198.19.0.5") / UDP(sport=5558, dport=9) / Raw(b"b" * 1400))
    udp_to_gw = eth0(IP(src="198.18.0.2", dst="198.18.0.1") / UDP(sport=5559, dport=7777))
    gre_to_gw = eth0(IP(src="198.18.0.2", dst="198.18.0.1", proto=47) / Raw(b"\x00" * 8))
    # Never an error about an ICMP error.
    err_about_err = eth0(IP(src="198.18.0.2", dst="198.19.0.5", ttl=1) / ICMP(type=3, code=1) / Raw(b"\x00" * 28))
    out0, out1, c, _ = run_pcap(vecgate, tmp_path, [ttl1, no_route, too_big_df, too_big, udp_to_gw, gre_to_gw, err_about_err])
    # Without DF the packet is fragmented to the 1400-byte MTU (RFC 791): the pieces
    # put back together by offset are the original datagram, TTL decremented once.
    assert len(out1) == 2, [p.summary() for p in out1]
    frags = sorted(out1, key=lambda p: p[IP].frag)
    assert [(p[IP].flags.MF, p[IP].frag) for p in frags] == [(1, 0), (0, (1400 - 20) // 8)]
    assert all(p[IP].len <= 1400 and p[IP].id == too_big[IP].id and p[IP].ttl == 63 for p in frags)
    for p in frags:  # each fragment's own header checksum, as scapy computes it
        hdr = p[IP].copy()
        del hdr.chksum
        assert IP(raw(hdr)).chksum == p[IP].chksum
    assert b"".join(bytes(p[IP].payload)[:p[IP].len - 20] for p in frags) == bytes(too_big[IP].payload)
    # Different paths leave in graph order, not arrival order: index by (type, code).
    kinds = sorted((p[ICMP].type, p[ICMP].code) for p in out0)
    assert kinds == [(3, 0), (3, 2), (3, 3), (3, 4), (11, 0)], kinds
    by = {(p[ICMP].type, p[ICMP].code): p for p in out0}
    for p in out0:
        assert p[Ether].dst == HOST_MAC and p[Ether].src == GW_MAC0
        assert p[IP].dst == "198.18.0.2" and p[IP].src == "198.18.0.1"
        assert p[IP].ttl == 64, "the gateway's own error, not forwarded"
        assert checksums_valid(p), p.show(dump=True)
        assert p[IP].len <= 576
    # The quote is the offending packet as received (TTL 1 untouched, ID kept).
    q = by[(11, 0)][IPerror]
    assert q.ttl == 1 and q.id == 77 and by[(11, 0)][UDPerror].dport == 33434
    assert by[(3, 4)][ICMP].nexthopmtu == 1400
    assert c[("ip4-rewrite", "to-fragment")] == 1
    assert c[("ip4-fragment", "fragments")] == 2
    assert c[("ip4-icmp-error", "suppressed")] == 1
    assert c[("ip4-icmp-error", "sent")] == 5
    bad, _ = tshark_clean(tmp_path / "out0.pcap")
    assert not bad, bad


def test_icmp_error_rate_limit(vecgate, tmp_path):
    pkts = [eth0(IP(src="198.18.0.2", dst="198.19.3.3", ttl=1) / UDP(sport=i, dport=9)) for i in range(300)]
    extra = ""
    out0, _, c, _ = run_pcap(vecgate, tmp_path, pkts, extra)
    # The burst allowance is 100: the rest is counted, not sent.
    assert len(out0) == c[("ip4-icmp-error", "sent")]
    assert c[("ip4-icmp-error", "sent")] + c[("ip4-icmp-error", "rate-limited")] == 300
    assert c[("ip4-icmp-error", "rate-limited")] >= 150


def test_echo_and_arp_for_gateway(vecgate, tmp_path):
    ping = eth0(IP(src="198.18.0.2", dst="198.18.0.1") / ICMP(id=0x77, seq=3) / Raw(b"ping-payload"))
    arp_req = Ether(src="02:fe:00:00:00:09", dst="ff:ff:ff:ff:ff:ff") / ARP(op=1, hwsrc="02:fe:00:00:00:09", psrc="198.18.0.9", pdst="198.18.0.1")
    arp_other = Ether(src="02:fe:00:00:00:09", dst="ff:ff:ff:ff:ff:ff") / ARP(op=1, hwsrc="02:fe:00:00:00:09", psrc="198.18.0.9", pdst="198.18.0.77")
    out0, out1, c, _ = run_pcap(vecgate, tmp_path, [ping, arp_req, arp_other])
    assert len(out0) == 2
    rep = next(p for p in out0 if p.haslayer(ICMP))
    arp = next(p for p in out0 if p.haslayer(ARP))
    assert rep[ICMP].type == 0 and rep[ICMP].id == 0x77 and rep[ICMP].seq == 3 and bytes(rep[Raw]) == b"ping-payload"
    assert rep[IP].src == "198.18.0.1" and rep[IP].dst == "198.18.0.2"
    # The gateway's own packet: the TTL it was given, not one less as if forwarded.
    assert rep[IP].ttl == 64
    assert checksums_valid(rep)
    a = arp[ARP]
    assert a.op == 2 and a.psrc == "198.18.0.1" and a.hwsrc == GW_MAC0 and a.pdst == "198.18.0.9" and a.hwdst == "02:fe:00:00:00:09"
    assert arp[Ether].dst == "02:fe:00:00:00:09"
    assert c[("arp-input", "replies-sent")] == 1
    assert c[("arp-input", "not-for-us")] == 1
    assert c[("ip4-local", "echo-replies")] == 1


def test_ipv6_forwarding_and_errors(vecgate, tmp_path):
    fwd = [eth0(IPv6(src="2001:db8::2", dst=f"2001:db8:100::{i:x}", hlim=64) / UDP(sport=2000 + i, dport=9) / Raw(b"y" * 10)) for i in range(1, 9)]
    hl1 = eth0(IPv6(src="2001:db8::2", dst="2001:db8:100::99", hlim=1) / UDP(sport=1, dport=2))
    no_route = eth0(IPv6(src="2001:db8::2", dst="2001:db8:77::1") / UDP(sport=1, dport=2))
    too_big = eth0(IPv6(src="2001:db8::2", dst="2001:db8:100::5") / UDP(sport=1, dport=2) / Raw(b"z" * 1400))
    out0, out1, c, _ = run_pcap(vecgate, tmp_path, fwd + [hl1, no_route, too_big])
    assert len(out1) == 8
    for i, p in enumerate(out1, start=1):
        assert p[IPv6].hlim == 63 and p[Ether].dst == ROUTER_MAC and p[Ether].src == GW_MAC1
        u = p[UDP].chksum
        c2 = p[IPv6].copy()
        del c2[UDP].chksum
        assert IPv6(raw(c2))[UDP].chksum == u
    types = sorted(type(p[IPv6].payload).__name__ for p in out0)
    assert types == ["ICMPv6DestUnreach", "ICMPv6PacketTooBig", "ICMPv6TimeExceeded"], types
    ptb = next(p for p in out0 if p.haslayer(ICMPv6PacketTooBig))
    assert ptb[ICMPv6PacketTooBig].mtu == 1400
    for p in out0:
        assert p[IPv6].dst == "2001:db8::2" and p[IPv6].src == "2001:db8::1"
        assert p[IPv6].hlim == 64, "the gateway's own error, not forwarded"
        assert len(raw(p[IPv6])) <= 1280
        ck = p[IPv6].payload.cksum
        c2 = p[IPv6].copy()
        del c2.payload.cksum
        assert IPv6(raw(c2)).payload.cksum == ck
    bad, _ = tshark_clean(tmp_path / "out0.pcap")
    assert not bad, bad
    bad, _ = tshark_clean(tmp_path / "out1.pcap")
    assert not bad, bad


def test_ipv6_echo_nd_and_hop_by_hop(vecgate, tmp_path):
    ping = eth0(IPv6(src="2001:db8::2", dst="2001:db8::1") / ICMPv6EchoRequest(id=9, seq=4, data=b"hello6"))
    ns = Ether(src="02:fe:00:00:00:07", dst="33:33:ff:00:00:01") / IPv6(src="2001:db8::7", dst="ff02::1:ff00:1", hlim=255) / \
        ICMPv6ND_NS(tgt="2001:db8::1") / ICMPv6NDOptSrcLLAddr(lladdr="02:fe:00:00:00:07")
    ns_bad_hlim = Ether(src="02:fe:00:00:00:07", dst="33:33:ff:00:00:01") / IPv6(src="2001:db8::7", dst="ff02::1:ff00:1", hlim=64) / \
        ICMPv6ND_NS(tgt="2001:db8::1")
    # Unknown hop-by-hop option with action 10: discard and send parameter problem.
    hbh = eth0(IPv6(src="2001:db8::2", dst="2001:db8:100::1") / IPv6ExtHdrHopByHop(options=[HBHOptUnknown(otype=0x87, optdata=b"ab")]) / UDP())
    # Action 01: discard silently.
    hbh_quiet = eth0(IPv6(src="2001:db8::2", dst="2001:db8:100::1") / IPv6ExtHdrHopByHop(options=[HBHOptUnknown(otype=0x47, optdata=b"ab")]) / UDP())
    # ::1 never arrives from a link (RFC 4291 §2.5.3): not forwarded, not answered.
    loopback_src = eth0(IPv6(src="::1", dst="2001:db8:100::1") / UDP())
    loopback_ping = eth0(IPv6(src="::1", dst="2001:db8::1") / ICMPv6EchoRequest(id=10, seq=1))
    out0, out1, c, _ = run_pcap(vecgate, tmp_path, [ping, ns, ns_bad_hlim, hbh, hbh_quiet, loopback_src, loopback_ping])
    assert c[("ip6-input", "bad-source")] == 2
    assert len(out1) == 0
    assert len(out0) == 3
    rep = next(p for p in out0 if p.haslayer(ICMPv6EchoReply))
    assert rep.haslayer(ICMPv6EchoReply) and rep[ICMPv6EchoReply].id == 9 and rep[ICMPv6EchoReply].data == b"hello6"
    assert rep[IPv6].hlim == 64
    na = next(p for p in out0 if p.haslayer(ICMPv6ND_NA))
    assert na.haslayer(ICMPv6ND_NA) and na[ICMPv6ND_NA].tgt == "2001:db8::1" and na[ICMPv6ND_NA].S == 1
    assert na[IPv6].hlim == 255 and na[IPv6].dst == "2001:db8::7" and na[Ether].dst == "02:fe:00:00:00:07"
    pp = next(p for p in out0 if p.haslayer(ICMPv6ParamProblem))
    assert pp.haslayer(ICMPv6ParamProblem) and pp[ICMPv6ParamProblem].code == 2 and pp[ICMPv6ParamProblem].ptr == 42
    assert c[("ip6-local", "icmp-malformed")] == 1
    assert c[("ip6-input", "option-discard")] == 1
    assert c[("ip6-local", "learned")] == 1
    bad, _ = tshark_clean(tmp_path / "out0.pcap")
    assert not bad, bad


def test_unresolved_next_hop_sends_arp_and_ns(vecgate, tmp_path):
    extra = """
[[route]]
prefix = "198.19.50.0/24"
via = "198.18.1.50"

[[route]]
prefix = "2001:db8:500::/48"
via = "2001:db8:1::50"
"""
    p4 = eth0(IP(src="198.18.0.2", dst="198.19.50.1") / UDP())
    p6 = eth0(IPv6(src="2001:db8::2", dst="2001:db8:500::1") / UDP())
    attached = eth0(IP(src="198.18.0.2", dst="198.18.1.77") / UDP())
    out0, out1, c, _ = run_pcap(vecgate, tmp_path, [p4, p6, attached], extra)
    assert len(out1) == 3
    arps = sorted((p for p in out1 if p.haslayer(ARP)), key=lambda p: p[ARP].pdst)
    assert [a[ARP].pdst for a in arps] == ["198.18.1.50", "198.18.1.77"]
    assert arps[0][ARP].psrc == "198.18.1.1" and arps[0][Ether].dst == "ff:ff:ff:ff:ff:ff" and arps[0][ARP].op == 1
    ns = next(p for p in out1 if p.haslayer(ICMPv6ND_NS))
    assert ns.haslayer(ICMPv6ND_NS) and ns[ICMPv6ND_NS].tgt == "2001:db8:1::50"
    assert ns[IPv6].dst == "ff02::1:ff00:50" and ns[Ether].dst == "33:33:ff:00:00:50" and ns[IPv6].hlim == 255
    assert c[("ip-glean", "arp-request-sent")] == 2
    assert c[("ip-glean", "ns-sent")] == 1
    # The three packets were held for their next hops while the solicitations went out
    # in buffers of their own; nobody answered, so the end of the run dropped them.
    assert c[("ip-glean", "held")] == 3 and c[("ip-glean", "solicitations-added")] == 3
    assert c[("ip-glean-release", "hold-flushed")] == 3


def test_garbage_never_crashes(vecgate, tmp_path):
    import random
    rnd = random.Random(1234)
    pkts = []
    base = [raw(eth0(IP(src="198.18.0.2", dst="198.19.0.9") / UDP() / Raw(b"x" * 30))),
            raw(eth0(IPv6(src="2001:db8::2", dst="2001:db8::1") / IPv6ExtHdrHopByHop() / ICMPv6EchoRequest())),
            raw(Ether(src=HOST_MAC, dst="ff:ff:ff:ff:ff:ff") / ARP(pdst="198.18.0.1"))]
    for _ in range(3000):
        b = bytearray(rnd.choice(base))
        for _ in range(rnd.randint(1, 6)):
            b[rnd.randrange(12, len(b))] = rnd.randrange(256)
        pkts.append(bytes(b[: rnd.randint(1, len(b))]))
    out0, out1, c, snap = run_pcap(vecgate, tmp_path, pkts)
    rx = next(p for p in snap["ports"] if p["name"] == "eth0")["counters"]["rx_packets"]
    assert rx == 3000
    dropped = next(n for n in snap["nodes"] if n["name"] == "error-drop")["packets"]
    sent = sum(p["counters"]["tx_packets"] for p in snap["ports"])
    # Nothing accepted is silently lost: every packet was sent or dropped with a reason
    # (ICMP errors and replies reuse the buffer of the packet that caused them; a packet
    # held for its next hop is solicited for in a buffer of its own).
    added = sum(c["count"] for c in snap["counters"] if c["node"] == "ip-glean" and c["counter"] == "solicitations-added")
    assert dropped + sent - added == 3000
    assert snap["pool"]["regular_free"] == snap["pool"]["regular_total"]


def test_jumbo_frames_use_large_buffers(vecgate, tmp_path):
    # 9000-byte IPv4 and IPv6 packets: larger than a regular buffer, carried whole in the
    # large class, routed, checksums intact.
    cfg_mtu = 'mtu = 9000'
    big4 = eth0(IP(src="198.18.0.2", dst="198.19.0.44") / UDP(sport=7, dport=9) / Raw(bytes(range(256)) * 35))
    big6 = eth0(IPv6(src="2001:db8::2", dst="2001:db8:100::44") / UDP(sport=7, dport=9) / Raw(bytes(range(256)) * 34))
    from conftest import gateway_config
    import subprocess, json
    from scapy.all import rdpcap
    from conftest import write_pcap
    write_pcap(tmp_path / "in.pcap", [raw(big4), raw(big6)])
    cfg = gateway_config(tmp_path)
    cfg.write_text(cfg.read_text().replace("mtu = 1500", cfg_mtu).replace("mtu = 1400", cfg_mtu))
    r = subprocess.run([str(vecgate), "pcap", "--config", str(cfg), "--json"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    out1 = rdpcap(str(tmp_path / "out1.pcap"))
    assert len(out1) == 2
    p4 = next(p for p in out1 if p.haslayer(IP))
    p6 = next(p for p in out1 if p.haslayer(IPv6))
    assert len(p4) == len(big4) and p4[IP].ttl == 63 and bytes(p4[Raw]) == bytes(range(256)) * 35
    assert checksums_valid(p4)
    assert len(p6) == len(big6) and p6[IPv6].hlim == 63
    snap = json.loads(r.stdout)
    assert snap["pool"]["large_free"] == snap["pool"]["large_total"]


def dropped_records(capture):
    """tshark's reading of a capture of drops: per record, its comment (why it was
    dropped), its protocols and the fields the test looks at."""
    import subprocess
    r = subprocess.run(["tshark", "-r", str(capture), "-T", "fields", "-E", "separator=|", "-e", "frame.comment",
                        "-e", "frame.protocols", "-e", "ip.src", "-e", "ip.dst", "-e", "ip.checksum", "-e", "ipv6.dst",
                        "-e", "eth.type", "-e", "arp.opcode"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return [dict(zip(["comment", "protocols", "src", "dst", "checksum", "dst6", "ethertype", "arp"], l.split("|")))
            for l in r.stdout.splitlines() if l.strip()]


def test_drops_are_captured_with_their_reasons(vecgate, tmp_path):
    """`vecgate pcap --drops F`: every dropped packet is in F (pcapng), tshark finds in
    each record's comment the node and counter that dropped it, and dissects the packet
    as it was when dropped: frames that `ethernet-input` and `arp-input` drop as Ethernet,
    the others as IP packets without a link header."""
    bad_csum = eth0(IP(src="198.18.0.2", dst="198.19.0.9", chksum=0x1234) / UDP(sport=1, dport=2))
    blackhole = eth0(IP(src="198.18.0.2", dst="198.19.254.7") / UDP())
    martian = eth0(IP(src="127.0.0.1", dst="198.19.0.11") / UDP())
    unknown_type = Ether(src=HOST_MAC, dst=GW_MAC0, type=0x88b5) / Raw(b"\x00" * 46)
    martian6 = eth0(IPv6(src="ff02::1", dst="2001:db8:100::9") / UDP(sport=1, dport=2))
    # An ARP request for an address that is not the gateway's.
    not_ours = Ether(src=HOST_MAC, dst="ff:ff:ff:ff:ff:ff") / ARP(op=1, hwsrc=HOST_MAC, psrc="198.18.0.2", pdst="198.18.0.77")
    # Not dropped: forwarded, and an ICMP time exceeded made of the packet itself.
    good = eth0(IP(src="198.18.0.2", dst="198.19.0.9") / UDP(sport=1, dport=2) / Raw(b"abcd"))
    ttl1 = eth0(IP(src="198.18.0.2", dst="198.19.0.10", ttl=1) / UDP(sport=1, dport=2))
    drops = tmp_path / "drops.pcapng"
    packets = [bad_csum, ttl1, good, blackhole, martian, unknown_type, martian6, not_ours]
    out0, out1, c, snap = run_pcap(vecgate, tmp_path, packets, drops=drops)
    assert len(out1) == 1 and len(out0) == 1
    recs = dropped_records(drops)
    # Every packet `error-drop` freed is a record.
    freed = next(n["packets"] for n in snap["nodes"] if n["name"] == "error-drop")
    assert len(recs) == freed == 6, (freed, recs)
    by_reason = {}
    for r in recs:
        by_reason.setdefault(r["comment"].split(",")[0], []).append(r)
    for reason, rs in by_reason.items():
        node, counter = reason.split(": ")
        assert c.get((node, counter), 0) == len(rs), (reason, len(rs), c)
        assert all(r["comment"].endswith("received on eth0") for r in rs), rs
    r = by_reason["ip4-input: bad-checksum"][0]
    assert r["protocols"].startswith("raw:ip") and r["checksum"] == "0x1234" and r["dst"] == "198.19.0.9", r
    assert by_reason["ip4-input: bad-source"][0]["src"] == "127.0.0.1"
    assert by_reason["ip4-lookup: blackhole"][0]["dst"] == "198.19.254.7"
    r = by_reason["ip6-input: bad-source"][0]
    assert r["protocols"].startswith("raw:ipv6") and r["dst6"] == "2001:db8:100::9", r
    r = by_reason["ethernet-input: unknown-ethertype"][0]
    assert r["protocols"].startswith("eth:") and r["ethertype"] == "0x88b5", r
    # `arp-input` saw the ARP payload; the record has its Ethernet header back.
    r = by_reason["arp-input: not-for-us"][0]
    assert r["protocols"].startswith("eth:ethertype:arp") and r["arp"] == "1", r


URPF_ROUTES = """
[[route]]
prefix = "198.18.64.0/24"
via = "198.18.0.9"

[[route]]
prefix = "198.18.128.0/24"
paths = [{ via = "198.18.0.9" }, { via = "198.18.1.2" }]

[[route]]
prefix = "198.18.129.0/24"
paths = [{ via = "198.18.1.2" }, { via = "198.18.1.3" }]
"""


@pytest.mark.parametrize("mode", ["strict", "loose", "off"])
def test_urpf_drops_spoofed_sources_by_mode(vecgate, tmp_path, mode):
    """`urpf` on eth0 (RFC 3704): each packet from eth0 to a routed destination, by its
    source: on eth0's subnet, routed back by eth0, by an ECMP route with a path by eth0
    (all pass); routed back by eth1 only, singly or by ECMP (strict drops); no route, a
    blackhole (strict and loose drop); one of the gateway's own addresses (strict and
    loose drop; without uRPF it is forwarded). Echo requests to the gateway from a good
    source are still answered."""
    def udp(src, dst="198.19.0.9"):
        return eth0(IP(src=src, dst=dst) / UDP(sport=7, dport=9) / Raw(src.encode()))

    def udp6(src):
        return eth0(IPv6(src=src, dst="2001:db8:100::9") / UDP(sport=7, dport=9) / Raw(src.encode()))

    good = ["198.18.0.2", "198.18.64.5", "198.18.128.5"]
    wrong_if = ["198.19.0.5", "198.18.129.5"]
    no_route = ["198.18.77.1", "198.19.254.3"]
    own = ["198.18.0.1", "198.18.1.1"]
    good6, wrong_if6, own6 = ["2001:db8::2"], ["2001:db8:100::5"], ["2001:db8::1"]
    ping = eth0(IP(src="198.18.0.2", dst="198.18.0.1") / ICMP(type=8, id=1, seq=1))
    pkts = [udp(a) for a in good + wrong_if + no_route + own] + [udp6(a) for a in good6 + wrong_if6 + own6] + [ping]
    out0, out1, c, _ = run_pcap(vecgate, tmp_path, pkts, extra=URPF_ROUTES, eth0_extra=f'urpf = "{mode}"')
    forwarded = sorted(bytes(p[Raw]).decode() for p in out1 if p.haslayer(UDP) and p.haslayer(Raw))
    passes = {"strict": good + good6, "loose": good + wrong_if + good6 + wrong_if6,
              "off": good + wrong_if + no_route + own + good6 + wrong_if6 + own6}[mode]
    assert forwarded == sorted(passes), (mode, forwarded)
    replies = [p for p in out0 if p.haslayer(ICMP) and p[ICMP].type == 0]
    assert len(replies) == 1 and replies[0][IP].dst == "198.18.0.2"
    check = lambda counter: c.get(("ip4-source-check", counter), 0) + c.get(("ip6-source-check", counter), 0)
    want = {"strict": (3, 2, 3), "loose": (0, 2, 3), "off": (0, 0, 0)}[mode]
    assert (check("wrong-interface"), check("no-route"), check("own-address")) == want, c
