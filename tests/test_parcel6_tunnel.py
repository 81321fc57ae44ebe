"""IPv6 parcels (RFC 2675 jumbo option, Payload Length = segment length) carried whole
through a UDP tunnel over 1500-byte links (issue 20), as IPv4 parcels are in
test_parcel_tunnel.py: gateway A encapsulates each parcel (GUE over IPv6, GRE-in-UDP over
IPv4) and, under `fragment = "outer"`, fragments the outer packet to the link; B
reassembles, decapsulates and forwards the parcel whole toward its parcel link or splits
it elsewhere. Checks: scapy reassembles A's outer fragments on its own (defragment /
defragment6) and finds the parcel byte for byte (read by tests/parcelpkt.py); B's
datagrams checked by scapy (recomputed checksums) and tshark. Under `fragment = "inner"`,
or when a parcel is longer than one outer IP packet can be, the parcel is split into its
datagrams before the tunnel: never Packet Too Big, which its source could not act on."""
import struct

import pytest
from conftest import HOST_MAC, reassembled6, tshark_clean, write_pcap
from parcelpkt import parcel6, parse6
from test_parcel import segs, udp_ok_by_scapy
from test_parcel_tunnel import frames, run

from scapy.all import GRE, IP, UDP, Ether, IPv6, IPv6ExtHdrFragment, defragment, raw

A_MAC, B_MAC, NEXT_MAC = "02:00:00:00:0a:01", "02:00:00:00:0b:01", "02:00:00:00:0c:01"
SRC, SPLIT_DST, WHOLE_DST = "2001:db8:0:1::2", "2001:db8:60::9", "2001:db8:61::9"
# Outer family and encapsulation per case: the tunnel's ends, the node names, what
# names an inner IPv6 packet after the outer UDP header.
OUTERS = {
    "gue-over-ipv6": dict(local="2001:db8:1::1", remote="2001:db8:1::2", encap="gue", node="gue6", port=6080, inner=b"\x00\x29\x00\x00"),
    "gre-over-ipv4": dict(local="198.18.1.1", remote="198.18.1.2", encap="gre", node="gue4", port=4754, inner=b"\x00\x00\x86\xdd"),
}


def gateway_a(outer, fragment):
    o = OUTERS[outer]
    return f"""
[dataplane]
buffers = 1024

[[interface]]
name = "eth0"
type = "pcap"
mac = "02:00:00:00:0a:00"
mtu = 9000
addresses = ["2001:db8:0:1::1/64"]
input = "in.pcap"

[[interface]]
name = "eth1"
type = "pcap"
mac = "{A_MAC}"
mtu = 1500
addresses = ["198.18.1.1/24", "2001:db8:1::1/64"]
output = "tunnel.pcap"

[[neighbour]]
interface = "eth1"
ip = "{o['remote']}"
mac = "{B_MAC}"

[[udp_tunnel]]
local = "{o['local']}"
remote = "{o['remote']}"
encap = "{o['encap']}"
fragment = "{fragment}"
routes = ["2001:db8:60::/47"]
"""


def gateway_b(outer):
    o = OUTERS[outer]
    return f"""
[dataplane]
buffers = 1024

[[interface]]
name = "eth0"
type = "pcap"
mac = "{B_MAC}"
mtu = 1500
addresses = ["198.18.1.2/24", "2001:db8:1::2/64"]
input = "tunnel.pcap"

[[interface]]
name = "eth1"
type = "pcap"
mac = "02:00:00:00:0b:02"
mtu = 1500
addresses = ["2001:db8:2::1/64"]
output = "split.pcap"

[[interface]]
name = "eth2"
type = "pcap"
mac = "02:00:00:00:0b:03"
mtu = 65535
parcels = true
addresses = ["2001:db8:3::1/64"]
output = "whole.pcap"

[[udp_tunnel]]
local = "{o['remote']}"
remote = "{o['local']}"
encap = "{o['encap']}"

[[route]]
prefix = "2001:db8:60::/48"
via = "2001:db8:2::2"

[[route]]
prefix = "2001:db8:61::/48"
via = "2001:db8:3::2"

[[neighbour]]
interface = "eth1"
ip = "2001:db8:2::2"
mac = "{NEXT_MAC}"

[[neighbour]]
interface = "eth2"
ip = "2001:db8:3::2"
mac = "{NEXT_MAC}"
"""


def parcels(n=8, size=1000):
    """Two IPv6 parcels of `n` x `size` B, one per route at B (split, whole)."""
    split_parts, whole_parts = segs(n, size), [s[::-1] for s in segs(n, size, last=size // 2)]
    pkts = [parcel6(SRC, SPLIT_DST, 40000, 9000, split_parts), parcel6(SRC, WHOLE_DST, 40001, 9001, whole_parts)]
    return pkts, split_parts, whole_parts


def write_in(tmp_path, pkts):
    path = tmp_path / "in.pcap"
    write_pcap(path, [bytes(Ether(src=HOST_MAC, dst="02:00:00:00:0a:00", type=0x86DD)) + p for p in pkts])
    # A snapshot length that admits frames over 64 KiB (tcpdump's default, 262144): pcap
    # readers refuse a record longer than the file's.
    with open(path, "r+b") as f:
        f.seek(16)
        f.write(struct.pack("<I", 262144))


def reassembled(outer, fragments):
    """scapy's own reassembly of A's outer fragments: the whole outer packets."""
    if outer == "gre-over-ipv4":
        return [p for p in defragment(fragments) if UDP in p]
    return reassembled6(fragments)


def inner_of(outer, pkt):
    """The inner packet after the outer UDP header and the tunnel header (4 bytes)."""
    o = OUTERS[outer]
    udp = pkt[UDP]
    assert udp.dport == o["port"] and raw(udp.payload)[:4] == o["inner"]
    return raw(udp.payload)[4:]


@pytest.mark.parametrize("outer", sorted(OUTERS))
def test_ipv6_parcels_cross_a_1500_byte_tunnel_whole_in_outer_fragments(vecgate, tmp_path, outer):
    node = OUTERS[outer]["node"]
    pkts, split_parts, whole_parts = parcels()
    write_in(tmp_path, pkts)
    ca = run(vecgate, tmp_path, "a", gateway_a(outer, "outer"))
    assert ca[("parcel6-input", "to-tunnel")] == 2, ca
    assert ca[(f"{node}-encap", "fragment-outer")] == 2, ca
    assert ca.get(("ip6-icmp-error", "sent"), 0) == 0 and ca.get((f"{node}-encap", "inner-too-big"), 0) == 0, ca
    # On the tunnel link: outer fragments no larger than the link, which scapy puts
    # back together, each holding one parcel byte for byte (its hop limit one less).
    outer_frames = frames(tmp_path / "tunnel.pcap")
    assert len(outer_frames) == 12 and all(len(raw(f)) - 14 <= 1500 for f in outer_frames)
    if outer == "gre-over-ipv4":
        assert all(f[IP].flags.MF or f[IP].frag for f in outer_frames)
    else:
        assert all(IPv6ExtHdrFragment in f for f in outer_frames)
    whole = reassembled(outer, outer_frames)
    assert len(whole) == 2
    for got, sent in zip(whole, pkts):
        inner = inner_of(outer, got)
        assert parse6(inner)["hlim"] == 63
        assert inner[:7] == sent[:7] and inner[8:] == sent[8:]

    cb = run(vecgate, tmp_path, "b", gateway_b(outer))
    family = "ip4" if outer == "gre-over-ipv4" else "ip6"
    assert cb[(f"{family}-reassembly", "reassembled")] == 2, cb
    assert cb[(f"{node}-input", "decapsulated")] == 2, cb
    assert cb[("parcel6-input", "parcels")] == 2 and cb[("parcel6-input", "segments")] == 16, cb
    # Toward the parcel link, the parcel as it left the source (two hops on).
    out2 = frames(tmp_path / "whole.pcap")
    assert len(out2) == 1
    got = raw(out2[0])[14:]
    info = parse6(got)
    assert info["segments"] == whole_parts and info["hlim"] == 62 and got[24:40] == pkts[1][24:40]
    # Elsewhere, its datagrams, each checksum as scapy computes it.
    out1 = frames(tmp_path / "split.pcap")
    assert [bytes(f[UDP].payload) for f in out1] == split_parts
    assert all(f[IPv6].dst == SPLIT_DST and f[IPv6].hlim == 62 and f[UDP].dport == 9000 and udp_ok_by_scapy(f) for f in out1)
    bad, _ = tshark_clean(tmp_path / "split.pcap")
    assert bad == []


@pytest.mark.parametrize("outer", sorted(OUTERS))
def test_inner_fragment_policy_splits_an_ipv6_parcel_before_the_tunnel(vecgate, tmp_path, outer):
    node = OUTERS[outer]["node"]
    pkts, split_parts, whole_parts = parcels()
    write_in(tmp_path, pkts)
    ca = run(vecgate, tmp_path, "a", gateway_a(outer, "inner"))
    assert ca[(f"{node}-encap", "fragment-inner")] == 2, ca
    assert ca[("ip6-fragment", "parcel-to-split")] == 2, ca
    assert ca[("parcel6-split", "datagrams")] == 16, ca
    assert ca.get(("ip6-fragment", "packets-fragmented"), 0) == 0, ca
    # Sixteen tunnel packets, no fragments: each holds one datagram scapy finds good.
    outer_frames = frames(tmp_path / "tunnel.pcap")
    assert len(outer_frames) == 16
    assert not any(IPv6ExtHdrFragment in f or (IP in f and (f[IP].flags.MF or f[IP].frag)) for f in outer_frames)
    inner = [IPv6(inner_of(outer, f)) for f in outer_frames]
    assert [bytes(p[UDP].payload) for p in inner] == split_parts + whole_parts
    assert all(udp_ok_by_scapy(p) and p.hlim == 63 for p in inner)
    cb = run(vecgate, tmp_path, "b", gateway_b(outer))
    assert cb[(f"{node}-input", "decapsulated")] == 16, cb
    assert [bytes(f[UDP].payload) for f in frames(tmp_path / "split.pcap")] == split_parts


def test_a_parcel_longer_than_an_outer_packet_is_split_before_the_tunnel(vecgate, tmp_path):
    """48 x 1380 B: 66 392 bytes, more than 64 KiB (a jumbo length only an IP parcel or
    jumbogram has): no outer packet holds it, so even under "outer" it is split, and each
    datagram (1428 B) fits the tunnel."""
    parts = segs(48, 1380)
    pkt = parcel6(SRC, SPLIT_DST, 40000, 9000, parts)
    assert len(pkt) == 66392 and struct.unpack("!H", pkt[4:6])[0] == 1380
    write_in(tmp_path, [pkt])
    ca = run(vecgate, tmp_path, "a", gateway_a("gue-over-ipv6", "outer"))
    assert ca[("parcel6-input", "to-tunnel")] == 1, ca
    assert ca[("gue6-encap", "fragment-inner")] == 1 and ca[("ip6-fragment", "parcel-to-split")] == 1, ca
    assert ca.get(("gue6-encap", "too-big"), 0) == 0, ca
    outer_frames = frames(tmp_path / "tunnel.pcap")
    assert len(outer_frames) == 48 and not any(IPv6ExtHdrFragment in f for f in outer_frames)
    inner = [IPv6(inner_of("gue-over-ipv6", f)) for f in outer_frames]
    assert [bytes(p[UDP].payload) for p in inner] == parts
    assert all(udp_ok_by_scapy(p) for p in inner)
