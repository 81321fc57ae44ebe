"""IP parcels through vecgate in pcap mode: parcels built byte by byte by tests/parcelpkt.py
(our own builder from the format description, independent of the Rust code), datagrams
dissected by scapy (which recomputes every checksum) and by tshark. eth1 (MTU 1400) does
not take parcels, so parcels routed there are split; eth2 (`parcels = true`, MTU 65535)
takes them whole."""
import struct

from conftest import GW_MAC0, HOST_MAC, run_pcap, tshark_clean
from parcelpkt import parcel4, parcel6, parse4

from scapy.all import IP, UDP, Ether, IPv6, Raw, raw, rdpcap

EXTRA = """
[[interface]]
name = "eth2"
type = "pcap"
mac = "02:00:00:00:00:03"
mtu = 65535
parcels = true
addresses = ["198.18.2.1/24", "2001:db8:2::1/64"]
output = "out2.pcap"

[[route]]
prefix = "198.19.200.0/24"
via = "198.18.2.2"

[[neighbour]]
interface = "eth2"
ip = "198.18.2.2"
mac = "02:00:00:00:02:02"
"""

SPLIT_DST, WHOLE_DST, SRC = "198.19.7.7", "198.19.200.9", "198.18.0.2"


def segs(n, size, last=None):
    s = [bytes((i * 7 + j) & 0xFF for j in range(size)) for i in range(n)]
    if last is not None:
        s[-1] = s[-1][:last]
    return s


def frame(pkt: bytes, v6=False):
    return bytes(Ether(src=HOST_MAC, dst=GW_MAC0, type=0x86DD if v6 else 0x800)) + pkt


def run(vecgate, tmp_path, pkts):
    out0, out1, counters, snap = run_pcap(vecgate, tmp_path, pkts, EXTRA)
    p2 = tmp_path / "out2.pcap"
    out2 = list(rdpcap(str(p2))) if p2.exists() and p2.stat().st_size > 24 else []
    return out1, out2, counters


def udp_ok_by_scapy(f):
    """scapy recomputes the IP and UDP checksums of a datagram; equal to what we sent."""
    ip = f[IP].copy() if IP in f else f[IPv6].copy()
    if IP in f:
        del ip.chksum
    del ip[UDP].chksum
    again = ip.__class__(raw(ip))
    return again[UDP].chksum == f[UDP].chksum and (IPv6 in f or again.chksum == f[IP].chksum)


def test_split_into_datagrams_with_correct_checksums(vecgate, tmp_path):
    parts = segs(5, 1000, last=321)
    p = parcel4(SRC, SPLIT_DST, 45080, 25113, parts, ident=0x100)
    out1, out2, c = run(vecgate, tmp_path, [frame(p)])
    assert out2 == []
    assert len(out1) == 5
    for i, f in enumerate(out1):
        assert f[IP].src == SRC and f[IP].dst == SPLIT_DST and f[IP].ttl == 63
        assert (f[UDP].sport, f[UDP].dport, f[UDP].len) == (45080, 25113, 8 + len(parts[i]))
        assert bytes(f[UDP].payload) == parts[i]
        assert udp_ok_by_scapy(f), f"datagram {i}: checksum differs from scapy's"
    assert c[("parcel4-input", "parcels")] == 1 and c[("parcel4-input", "segments")] == 5
    assert c[("parcel4-input", "to-split")] == 1 and c[("parcel4-split", "datagrams")] == 5
    bad, _ = tshark_clean(tmp_path / "out1.pcap")
    assert bad == []


def test_zero_slots_and_plain_form_are_summed(vecgate, tmp_path):
    parts = segs(3, 700)
    p = parcel4(SRC, SPLIT_DST, 7, 9, parts, quirk=False, slots=[0, 0, 0])
    out1, _, c = run(vecgate, tmp_path, [frame(p)])
    assert [bytes(f[UDP].payload) for f in out1] == parts
    assert all(udp_ok_by_scapy(f) for f in out1)
    assert c[("parcel4-split", "segments-summed")] == 3


def test_parcel_forwarded_whole_to_a_parcel_link(vecgate, tmp_path):
    """The report's shape: 16 x 3999 B, 64052 B, forwarded whole (TTL decremented)."""
    parts = segs(16, 3999)
    p = parcel4(SRC, WHOLE_DST, 45080, 25113, parts, ident=0xACBC)
    assert len(p) == 64052
    out1, out2, c = run(vecgate, tmp_path, [frame(p)])
    assert out1 == [] and len(out2) == 1
    got = raw(out2[0])[14:]
    assert len(got) == 64052
    info = parse4(got)
    assert info["ttl"] == 63 and info["nsegs"] == 16 and info["seg_len"] == 3999 and info["form"] == "prototype"
    assert info["segments"] == parts
    assert c[("parcel4-input", "forwarded-whole")] == 1


def test_bad_segment_drops_that_segment_only(vecgate, tmp_path):
    parts = segs(4, 500)
    p = bytearray(parcel4(SRC, WHOLE_DST, 1, 2, parts))
    p[28 + 8 + 8 + 2 * 500 + 10] ^= 0xFF   # a byte of segment 3 (index 2)
    out1, out2, c = run(vecgate, tmp_path, [frame(bytes(p))])
    # Toward the parcel link too, a parcel with a bad segment is split and the segment
    # left out; the other three go on as datagrams.
    assert out1 == []
    assert [bytes(f[UDP].payload) for f in out2] == [parts[0], parts[1], parts[3]]
    assert all(udp_ok_by_scapy(f) for f in out2)
    assert c[("parcel4-input", "bad-segment-checksum")] == 1
    assert c[("parcel4-split", "bad-segment-dropped")] == 1


def test_ipv6_parcel_split(vecgate, tmp_path):
    parts = segs(3, 600, last=17)
    p = parcel6("2001:db8::2", "2001:db8:100::5", 4000, 4001, parts)
    out1, _, c = run(vecgate, tmp_path, [frame(p, v6=True)])
    assert len(out1) == 3
    for i, f in enumerate(out1):
        assert f[IPv6].hlim == 63 and f[IPv6].nh == 17
        assert bytes(f[UDP].payload) == parts[i]
        assert udp_ok_by_scapy(f)
    assert c[("parcel6-input", "parcels")] == 1


def test_malformed_parcels_dropped_by_name(vecgate, tmp_path):
    parts = segs(4, 300)
    good = parcel4(SRC, SPLIT_DST, 1, 2, parts)
    kinds = {
        "no-segments": parcel4(SRC, SPLIT_DST, 1, 2, parts, nsegs=0),
        "length-mismatch": parcel4(SRC, SPLIT_DST, 1, 2, parts, jumbo=len(good) + 4) + b"\0" * 4,
        "integrity-truncated": parcel4(SRC, SPLIT_DST, 1, 2, parts, jumbo=40),
        "segment-truncated": good[:-50],
        "short-non-final-segment": parcel4(SRC, SPLIT_DST, 1, 2, parts, nsegs=6),
        "bad-udp-length": parcel4(SRC, SPLIT_DST, 1, 2, parts, udp_len_field=8),
        "bad-option": parcel4(SRC, SPLIT_DST, 1, 2, parts, opt_len=8),
    }
    bad_udp = bytearray(good)
    bad_udp[34] ^= 1
    out1, out2, c = run(vecgate, tmp_path, [frame(p) for p in kinds.values()] + [frame(bytes(bad_udp))])
    assert out1 == [] and out2 == []
    for name in kinds:
        assert c.get(("parcel4-input", name)) == 1, (name, {k: v for k, v in c.items() if k[0].startswith("parcel")})
    assert c.get(("parcel4-input", "bad-udp-checksum")) == 1
    assert c.get(("parcel4-input", "parcels"), 0) == 0
