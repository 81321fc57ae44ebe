"""IP parcels through vecgate in pcap mode: parcels built byte by byte by tests/parcelpkt.py
(our own builder from the format description, independent of the Rust code), datagrams
dissected by scapy (which recomputes every checksum) and by tshark. eth1 (MTU 1400) does
not take parcels, so parcels routed there are split; eth2 (`parcels = true`, MTU 65535)
takes them whole."""
import struct

import pytest
from conftest import GW_MAC0, HOST_MAC, run_pcap, tshark_clean
from parcelpkt import parcel4, parcel6, parse4, parse6

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

[[route]]
prefix = "2001:db8:200::/48"
via = "2001:db8:2::2"

[[neighbour]]
interface = "eth2"
ip = "2001:db8:2::2"
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
    # The common case, decided by ethernet-input (parcel4-input takes the rest).
    assert c[("ethernet-input", "parcels-forwarded-whole")] == 1
    assert c[("ethernet-input", "parcel-segments-forwarded-whole")] == 16
    assert c.get(("parcel4-input", "parcels"), 0) == 0


def run_with(vecgate, tmp_path, pkts, dataplane):
    """`run` with `dataplane` lines added to the config's [dataplane] section."""
    import json
    import subprocess
    from conftest import gateway_config, write_pcap
    write_pcap(tmp_path / "in.pcap", pkts)
    cfg = gateway_config(tmp_path, EXTRA)
    cfg.write_text(cfg.read_text().replace("[dataplane]\n", "[dataplane]\n" + dataplane + "\n", 1))
    r = subprocess.run([str(vecgate), "pcap", "--config", str(cfg), "--json"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    c = {(x["node"], x["counter"]): x["count"] for x in json.loads(r.stdout)["counters"]}
    outs = [list(rdpcap(str(f))) if f.exists() and f.stat().st_size > 24 else [] for f in (tmp_path / "out1.pcap", tmp_path / "out2.pcap")]
    return outs[0], outs[1], c


def test_bad_segment_drops_that_segment_only(vecgate, tmp_path):
    """The strict mode: every segment read at every hop."""
    parts = segs(4, 500)
    p = bytearray(parcel4(SRC, WHOLE_DST, 1, 2, parts))
    p[28 + 8 + 8 + 2 * 500 + 10] ^= 0xFF   # a byte of segment 3 (index 2)
    out1, out2, c = run_with(vecgate, tmp_path, [frame(bytes(p))], "verify_parcel_segments_in_transit = true")
    # Toward the parcel link too, a parcel with a bad segment is split and the segment
    # left out; the other three go on as datagrams.
    assert out1 == []
    assert [bytes(f[UDP].payload) for f in out2] == [parts[0], parts[1], parts[3]]
    assert all(udp_ok_by_scapy(f) for f in out2)
    assert c[("parcel4-input", "bad-segment-checksum")] == 1
    assert c[("parcel4-split", "bad-segment-dropped")] == 1


def test_segments_checked_at_the_edge_only(vecgate, tmp_path):
    """The default: a parcel forwarded whole has its headers checked, not its segments
    (the slots travel on: our independent checker, as any receiver, finds the damaged
    segment); split, the damaged segment is found as it is copied and left out. A bad
    UDP header checksum is likewise the receiver's when the parcel goes whole."""
    parts = segs(4, 500)
    bad_seg = bytearray(parcel4(SRC, WHOLE_DST, 1, 2, parts))
    bad_seg[28 + 8 + 8 + 2 * 500 + 10] ^= 0xFF   # a byte of segment 3 (index 2)
    bad_udp = bytearray(parcel4(SRC, WHOLE_DST, 1, 2, parts))
    bad_udp[34] ^= 1
    to_split = bytearray(parcel4(SRC, SPLIT_DST, 1, 2, parts))
    to_split[28 + 8 + 8 + 2 * 500 + 10] ^= 0xFF
    out1, out2, c = run(vecgate, tmp_path, [frame(bytes(p)) for p in (bad_seg, bad_udp, to_split)])
    assert len(out2) == 2
    with pytest.raises(ValueError, match="segment 2 checksum"):
        parse4(raw(out2[0])[14:])
    with pytest.raises(ValueError, match="UDP checksum"):
        parse4(raw(out2[1])[14:])
    # Only the TTL (and with it the header checksum) changed.
    assert raw(out2[0])[14 + 12:] == bytes(bad_seg[12:]) and raw(out2[0])[14 + 8] == 63
    assert [bytes(f[UDP].payload) for f in out1] == [parts[0], parts[1], parts[3]]
    assert all(udp_ok_by_scapy(f) for f in out1)
    assert c[("ethernet-input", "parcels-forwarded-whole")] == 2
    assert c.get(("parcel4-input", "bad-segment-checksum"), 0) == 0
    assert c.get(("parcel4-input", "bad-udp-checksum"), 0) == 0
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


def datagram(dst, sport, payload, chksum=None):
    u = UDP(sport=sport, dport=9000)
    if chksum is not None:
        u.chksum = chksum
    return Ether(src=HOST_MAC, dst=GW_MAC0) / IP(src=SRC, dst=dst, id=7) / u / Raw(payload)


def test_join_runs_of_one_flow_into_parcels(vecgate, tmp_path):
    """40 equal datagrams of one flow toward the parcel link: a parcel of 32 (the segment
    bound) and one of 8; a datagram of another flow in between ends a run; datagrams to
    an ordinary link pass untouched."""
    pay = [bytes([i]) * 1000 for i in range(45)]
    pkts = [datagram(WHOLE_DST, 5000, pay[i]) for i in range(40)]
    pkts.insert(10, datagram(WHOLE_DST, 5001, pay[40]))          # splits the first run 10 + 30
    pkts += [datagram(SPLIT_DST, 5000, pay[41 + i]) for i in range(3)]
    pkts += [datagram(WHOLE_DST, 5002, pay[44], chksum=0)] * 2    # no UDP checksum: summed
    out1, out2, c = run(vecgate, tmp_path, pkts)
    assert [bytes(f[UDP].payload) for f in out1] == pay[41:44]
    assert all(udp_ok_by_scapy(f) for f in out1)
    parcels = [parse4(raw(f)[14:]) for f in out2 if raw(f)[14] == 0x47]
    singles = [f for f in out2 if raw(f)[14] == 0x45]
    assert [p["nsegs"] for p in parcels] == [10, 30, 2]
    assert parcels[0]["segments"] == pay[:10] and parcels[1]["segments"] == pay[10:40]
    assert parcels[2]["segments"] == [pay[44]] * 2
    assert all(p["ttl"] == 63 and p["sport"] in (5000, 5002) and p["seg_len"] == 1000 for p in parcels)
    assert [bytes(f[UDP].payload) for f in singles] == [pay[40]]
    assert c[("parcel4-join", "parcels-joined")] == 3 and c[("parcel4-join", "datagrams-joined")] == 42
    assert c[("parcel4-join", "segments-summed")] == 2


def test_join_without_a_large_buffer_sends_the_run_on_datagram_by_datagram(vecgate, tmp_path):
    """A run of 20 × 1000 bytes needs a large buffer (more than a medium one holds); with
    none, its datagrams go on one by one, unchanged, counted under no-large-buffer."""
    pay = [bytes([i]) * 1000 for i in range(20)]
    _, out2, c = run_with(vecgate, tmp_path, [bytes(datagram(WHOLE_DST, 5000, p)) for p in pay], "large_buffers = 0")
    assert [bytes(f[UDP].payload) for f in out2] == pay
    assert all(udp_ok_by_scapy(f) and f[IP].ttl == 63 for f in out2)
    assert c[("parcel4-join", "no-large-buffer")] == 1 and c.get(("parcel4-join", "parcels-joined"), 0) == 0


def test_join_bounded_by_segment_count(vecgate, tmp_path):
    pay = [bytes([i]) * 200 for i in range(70)]
    out1, out2, c = run(vecgate, tmp_path, [datagram(WHOLE_DST, 5000, p) for p in pay])
    parcels = [parse4(raw(f)[14:]) for f in out2]
    assert [p["nsegs"] for p in parcels] == [32, 32, 6]
    assert sum((p["segments"] for p in parcels), []) == pay


def test_join_then_split_gives_back_the_datagrams(vecgate, tmp_path):
    """Our joined parcel, fed back in toward the ordinary link, splits into datagrams
    equal to the originals (scapy rebuilds and compares every field and checksum)."""
    pay = [bytes([i]) * 1200 for i in range(6)]
    orig = [datagram(WHOLE_DST, 5000, p) for p in pay]
    _, out2, _ = run(vecgate, tmp_path, orig)
    assert len(out2) == 1
    parcel = bytearray(raw(out2[0])[14:])
    parcel[16:20] = bytes(map(int, SPLIT_DST.split(".")))   # re-address to the split link
    parcel[10:12] = b"\0\0"
    from parcelpkt import cksum
    parcel[10:12] = struct.pack("!H", cksum(bytes(parcel[:28])))
    # The UDP header checksum covers the addresses: rebuild it with our builder's rule.
    n, L = 6, 1200
    ph = bytes(parcel[12:20]) + struct.pack("!BBH", 0, 17, ((L & 0xFF) << 8) | (L >> 8))
    from parcelpkt import udp_header_word
    parcel[34:36] = struct.pack("!H", cksum(ph + bytes(parcel[28:32]) + b"\0" * 4 + udp_header_word(n, len(parcel) - 28)))
    tmp2 = tmp_path / "again"
    tmp2.mkdir()
    out1, _, c = run(vecgate, tmp2, [frame(bytes(parcel))])
    assert [bytes(f[UDP].payload) for f in out1] == pay
    assert all(udp_ok_by_scapy(f) and f[IP].ttl == 62 for f in out1)


def test_segment_check_off_leaves_damage_to_the_receiver(vecgate, tmp_path):
    """verify_parcel_segments = false: segments are not read in transit; a damaged one is
    split into a datagram whose checksum (from its slot) no longer matches, which scapy's
    recomputation shows, as any receiver would; the others are intact."""
    parts = segs(4, 500)
    p = bytearray(parcel4(SRC, SPLIT_DST, 1, 2, parts))
    p[28 + 8 + 8 + 2 * 500 + 10] ^= 0xFF   # a byte of segment 3 (index 2)
    out1, _, c = run_with(vecgate, tmp_path, [frame(bytes(p))], "verify_parcel_segments = false")
    assert len(out1) == 4
    assert [udp_ok_by_scapy(f) for f in out1] == [True, True, False, True]
    assert c.get(("parcel4-input", "bad-segment-checksum"), 0) == 0


def test_bench_parcel_scenarios(vecgate):
    """`vecgate bench parcel-*` runs, delivers what it must and reports segments/s, for
    IPv4 and IPv6 parcels."""
    import json
    import subprocess
    for scenario, n, family in [("parcel-forward", 16, "ip4"), ("parcel-split", 4, "ip4"), ("parcel-join", 8, "ip4"),
                                ("parcel-forward", 16, "ip6"), ("parcel-split", 4, "ip6"), ("parcel-join", 8, "ip6")]:
        r = subprocess.run([str(vecgate), "bench", scenario, "--packets", "2000", "--segment-size", "1000",
                            "--segments", str(n), "--family", family, "--json", "--core", "0"],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        rep = json.loads(r.stdout)
        assert rep["scenario"] == scenario and rep["segments"] == n and rep["segment_size"] == 1000
        segs_in = rep["packets"] if scenario == "parcel-join" else rep["packets"] * n
        assert rep["segments_per_sec"] > 0 and rep["mpps"] > 0
        expect = {"parcel-forward": rep["packets"], "parcel-split": segs_in, "parcel-join": segs_in // n}[scenario]
        assert rep["delivered"] == expect
        names = {x["name"]: x for x in rep["nodes"]}
        if scenario == "parcel-forward":
            # Forwarded whole by ethernet-input, the common case: none reach parcelN-input.
            assert names.get(f"parcel{family[-1]}-input", {}).get("packets", 0) == 0, (scenario, family)
            assert names["ethernet-input"]["packets"] >= rep["packets"], (scenario, family)
            continue
        node = {"parcel-split": "parcel%s-split", "parcel-join": "parcel%s-join"}[scenario]
        assert names[node % family[-1]]["packets"] > 0, (scenario, family)


def test_ipv6_join_and_forward_whole(vecgate, tmp_path):
    """IPv6: five equal datagrams of one flow toward the parcel link become one parcel
    (our Python checker parses it); a parcel built by our builder goes whole."""
    pay = [bytes([i]) * 900 for i in range(5)]
    dgrams = [Ether(src=HOST_MAC, dst=GW_MAC0) / IPv6(src="2001:db8::2", dst="2001:db8:200::9") / UDP(sport=6000, dport=6001) / Raw(p)
              for p in pay]
    parts = segs(3, 700, last=5)
    whole = frame(parcel6("2001:db8::2", "2001:db8:200::9", 7000, 7001, parts), v6=True)
    _, out2, c = run(vecgate, tmp_path, dgrams + [whole])
    assert len(out2) == 2
    # The two leave by different nodes, in the graph's order: tell them by their ports.
    joined, fwd = sorted((parse6(raw(f)[14:]) for f in out2), key=lambda p: p["sport"])
    assert joined["nsegs"] == 5 and joined["segments"] == pay and joined["hlim"] == 63 and joined["sport"] == 6000
    assert fwd["segments"] == parts and fwd["hlim"] == 63
    assert c[("parcel6-join", "parcels-joined")] == 1 and c[("ethernet-input", "parcels-forwarded-whole")] == 1


def test_parcel_mtu_needs_parcels_true(vecgate, tmp_path):
    """MTU above 9202 only on a `parcels = true` link; the error names file, field and range."""
    import subprocess
    from conftest import gateway_config, write_pcap
    write_pcap(tmp_path / "in.pcap", [])
    cfg = gateway_config(tmp_path, EXTRA.replace("parcels = true\n", ""))
    r = subprocess.run([str(vecgate), "pcap", "--config", str(cfg), "--json"], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "gw.toml" in r.stderr and "interface[2].mtu" in r.stderr and "65535: expected 1280 to 9202 bytes" in r.stderr, r.stderr
