"""IP parcels carried whole through a UDP tunnel over 1500-byte links (issue 20, the IETF
115 report's RFC 2473 path), in pcap mode with two gateways: A encapsulates each parcel
in GUE and, with `fragment = "outer"`, fragments the outer packet to the link; B
reassembles, decapsulates and treats the parcel as if it had arrived directly (whole
toward its parcel link, split into datagrams elsewhere). Checks: scapy reassembles A's
outer fragments independently and finds the parcel byte for byte (read by
tests/parcelpkt.py); B's datagrams checked by scapy (recomputed checksums) and tshark.
Under `fragment = "inner"` a parcel is split into datagrams before the tunnel instead
of being fragmented as an IPv4 packet (which would break it)."""
import json
import subprocess

from conftest import HOST_MAC, tshark_clean, write_pcap
from parcelpkt import parcel4, parse4
from test_parcel import segs, udp_ok_by_scapy

from scapy.all import IP, UDP, Ether, defragment, raw, rdpcap

A_MAC, B_MAC, NEXT_MAC = "02:00:00:00:0a:01", "02:00:00:00:0b:01", "02:00:00:00:0c:01"
SRC, SPLIT_DST, WHOLE_DST = "198.18.0.2", "198.19.60.9", "198.19.61.9"
GUE_IPV4 = b"\x00\x04\x00\x00"  # GUE version 0, no options, inner protocol 4


def gateway_a(fragment):
    return f"""
[dataplane]
buffers = 1024

[[interface]]
name = "eth0"
type = "pcap"
mac = "02:00:00:00:0a:00"
mtu = 9000
addresses = ["198.18.0.1/24"]
input = "in.pcap"

[[interface]]
name = "eth1"
type = "pcap"
mac = "{A_MAC}"
mtu = 1500
addresses = ["198.18.1.1/24"]
output = "tunnel.pcap"

[[neighbour]]
interface = "eth1"
ip = "198.18.1.2"
mac = "{B_MAC}"

[[udp_tunnel]]
local = "198.18.1.1"
remote = "198.18.1.2"
encap = "gue"
fragment = "{fragment}"
routes = ["198.19.60.0/23"]
"""


GATEWAY_B = f"""
[dataplane]
buffers = 1024

[[interface]]
name = "eth0"
type = "pcap"
mac = "{B_MAC}"
mtu = 1500
addresses = ["198.18.1.2/24"]
input = "tunnel.pcap"

[[interface]]
name = "eth1"
type = "pcap"
mac = "02:00:00:00:0b:02"
mtu = 1500
addresses = ["198.18.2.1/24"]
output = "split.pcap"

[[interface]]
name = "eth2"
type = "pcap"
mac = "02:00:00:00:0b:03"
mtu = 65535
parcels = true
addresses = ["198.18.3.1/24"]
output = "whole.pcap"

[[udp_tunnel]]
local = "198.18.1.2"
remote = "198.18.1.1"
encap = "gue"

[[route]]
prefix = "198.19.60.0/24"
via = "198.18.2.2"

[[route]]
prefix = "198.19.61.0/24"
via = "198.18.3.2"

[[neighbour]]
interface = "eth1"
ip = "198.18.2.2"
mac = "{NEXT_MAC}"

[[neighbour]]
interface = "eth2"
ip = "198.18.3.2"
mac = "{NEXT_MAC}"
"""


def run(vecgate, tmp, name, config):
    cfg = tmp / f"{name}.toml"
    cfg.write_text(config)
    out = subprocess.run([str(vecgate), "pcap", "--config", str(cfg), "--json"], capture_output=True, text=True, timeout=60, cwd=tmp)
    assert out.returncode == 0, out.stderr
    return {(c["node"], c["counter"]): c["count"] for c in json.loads(out.stdout)["counters"]}


def frames(path):
    return list(rdpcap(str(path))) if path.exists() and path.stat().st_size > 24 else []


def parcels():
    """Two parcels of 8 x 1000 B (8052 B: six 1500-byte fragments each), one per route."""
    split_parts, whole_parts = segs(8, 1000), segs(8, 1000, last=1000)[::-1]
    pkts = [parcel4(SRC, SPLIT_DST, 40000, 9000, split_parts, ident=0x200), parcel4(SRC, WHOLE_DST, 40001, 9001, whole_parts, ident=0x300)]
    return pkts, split_parts, whole_parts


def test_parcels_cross_a_1500_byte_tunnel_whole_in_outer_fragments(vecgate, tmp_path):
    pkts, split_parts, whole_parts = parcels()
    write_pcap(tmp_path / "in.pcap", [bytes(Ether(src=HOST_MAC, dst="02:00:00:00:0a:00", type=0x800)) + p for p in pkts])
    ca = run(vecgate, tmp_path, "a", gateway_a("outer"))
    assert ca[("parcel4-input", "to-tunnel")] == 2, ca
    assert ca[("gue4-encap", "fragment-outer")] == 2, ca
    # On the tunnel link: outer fragments no larger than the link, which scapy puts
    # back together into GUE packets each holding one parcel, byte for byte.
    outer = frames(tmp_path / "tunnel.pcap")
    assert len(outer) == 12 and all(len(raw(f)) - 14 <= 1500 for f in outer)
    assert all(f[IP].flags.MF or f[IP].frag for f in outer)
    whole = [f for f in defragment(outer) if UDP in f]
    assert len(whole) == 2
    for got, sent in zip(whole, pkts):
        assert (got[UDP].dport, raw(got[UDP].payload)[:4]) == (6080, GUE_IPV4)
        inner = raw(got[UDP].payload)[4:]
        info = parse4(inner)
        assert info["ttl"] == 63 and info["nsegs"] == 8 and inner[12:] == sent[12:]

    cb = run(vecgate, tmp_path, "b", GATEWAY_B)
    assert cb[("ip4-reassembly", "reassembled")] == 2, cb
    assert cb[("gue4-input", "decapsulated")] == 2, cb
    assert cb[("parcel4-input", "parcels")] == 2 and cb[("parcel4-input", "segments")] == 16, cb
    # Toward the parcel link, the parcel as it left the source (one hop further on).
    out2 = frames(tmp_path / "whole.pcap")
    assert len(out2) == 1
    info = parse4(raw(out2[0])[14:])
    assert info["segments"] == whole_parts and info["ttl"] == 62 and info["dst"] == WHOLE_DST
    # Elsewhere, its datagrams, each checksum as scapy computes it.
    out1 = frames(tmp_path / "split.pcap")
    assert [bytes(f[UDP].payload) for f in out1] == split_parts
    assert all(f[IP].dst == SPLIT_DST and f[UDP].dport == 9000 and udp_ok_by_scapy(f) for f in out1)
    bad, _ = tshark_clean(tmp_path / "split.pcap")
    assert bad == []


def test_inner_fragment_policy_splits_a_parcel_before_the_tunnel(vecgate, tmp_path):
    pkts, split_parts, whole_parts = parcels()
    write_pcap(tmp_path / "in.pcap", [bytes(Ether(src=HOST_MAC, dst="02:00:00:00:0a:00", type=0x800)) + p for p in pkts])
    ca = run(vecgate, tmp_path, "a", gateway_a("inner"))
    assert ca[("ip4-fragment", "parcel-to-split")] == 2, ca
    assert ca[("parcel4-split", "datagrams")] == 16, ca
    assert ca.get(("ip4-fragment", "packets-fragmented"), 0) == 0, ca
    # Sixteen GUE packets, no fragments: each holds one datagram.
    outer = frames(tmp_path / "tunnel.pcap")
    assert len(outer) == 16 and not any(f[IP].flags.MF or f[IP].frag for f in outer)
    inner = [IP(raw(f[UDP].payload)[4:]) for f in outer]
    assert [bytes(p[UDP].payload) for p in inner] == split_parts + whole_parts
    assert all(udp_ok_by_scapy(p) for p in inner)
    cb = run(vecgate, tmp_path, "b", GATEWAY_B)
    assert cb[("gue4-input", "decapsulated")] == 16, cb
    assert [bytes(f[UDP].payload) for f in frames(tmp_path / "split.pcap")] == split_parts


def test_inner_split_checks_what_the_edge_checks(vecgate, tmp_path):
    """A parcel goes into the tunnel with its headers checked, not its segments; split
    there under `fragment = "inner"`, the split is the edge: a damaged segment is left
    out (the others go on, checksums as scapy computes them), a parcel whose UDP header
    checksum is wrong is dropped by name."""
    pkts, split_parts, whole_parts = parcels()
    damaged = bytearray(pkts[0])
    damaged[28 + 8 + 16 + 3 * 1000 + 7] ^= 0xFF   # a byte of segment 3
    bad_udp = bytearray(pkts[1])
    bad_udp[34] ^= 1
    write_pcap(tmp_path / "in.pcap", [bytes(Ether(src=HOST_MAC, dst="02:00:00:00:0a:00", type=0x800)) + bytes(p) for p in (damaged, bad_udp)])
    ca = run(vecgate, tmp_path, "a", gateway_a("inner"))
    assert ca[("parcel4-input", "to-tunnel")] == 2, ca
    assert ca.get(("parcel4-input", "bad-segment-checksum"), 0) == 0, ca
    assert ca[("parcel4-split", "bad-segment-dropped")] == 1, ca
    assert ca[("parcel4-split", "bad-udp-checksum")] == 1, ca
    inner = [IP(raw(f[UDP].payload)[4:]) for f in frames(tmp_path / "tunnel.pcap")]
    assert [bytes(p[UDP].payload) for p in inner] == split_parts[:3] + split_parts[4:]
    assert all(udp_ok_by_scapy(p) for p in inner)
