"""Seeds for the lb_nat fuzz target: IP packets scapy builds (TCP, UDP, zero UDP
checksum, IPv4 options, ICMP and ICMPv6 errors quoting TCP/UDP, a fragment, a
truncated one; SCTP). Run from the repository root: python3 fuzz/make_lb_corpus.py"""
from pathlib import Path

from scapy.all import ICMP, IP, TCP, UDP, IPv6, ICMPv6DestUnreach, ICMPv6PacketTooBig, Raw, raw

out = Path(__file__).resolve().parent / "corpus" / "lb_nat"
out.mkdir(parents=True, exist_ok=True)
quoted4 = IP(src="198.18.1.1", dst="198.19.1.10") / TCP(sport=20000, dport=8080, flags="S") / Raw(b"hello")
quoted6 = IPv6(src="2001:db8:1::1", dst="2001:db8:100::10") / UDP(sport=5353, dport=8053) / Raw(b"query")
seeds = [
    IP(src="198.18.0.2", dst="198.18.128.10") / TCP(sport=40000, dport=80, flags="S") / Raw(b"x" * 20),
    IP(src="198.18.0.2", dst="198.18.128.10") / UDP(sport=5353, dport=53) / Raw(b"q" * 11),
    IP(src="198.18.0.2", dst="198.18.128.10", options=b"\x01\x01\x01\x01") / TCP(sport=1, dport=80, flags="PA") / Raw(b"y"),
    IP(src="198.18.0.2", dst="198.18.128.10", flags="MF") / UDP(sport=1, dport=53) / Raw(b"z" * 8),
    IP(src="198.19.0.1", dst="198.18.1.1") / ICMP(type=3, code=4, nexthopmtu=1280) / raw(quoted4)[:28],
    IPv6(src="2001:db8:0::2", dst="2001:db8:80::10") / TCP(sport=40000, dport=80, flags="S"),
    IPv6(src="2001:db8:100::10", dst="2001:db8:1::1") / ICMPv6DestUnreach(code=4) / raw(quoted6),
    IPv6(src="2001:db8:1::2", dst="2001:db8:1::1") / ICMPv6PacketTooBig(mtu=1280) / raw(quoted6),
]
for i, s in enumerate(seeds):
    (out / f"seed-{i:03}").write_bytes(raw(s))
u = IP(src="198.18.0.2", dst="198.18.128.10") / UDP(sport=5353, dport=53, chksum=0) / Raw(b"q" * 11)
(out / f"seed-{len(seeds):03}").write_bytes(raw(u))
(out / f"seed-{len(seeds) + 1:03}").write_bytes(raw(seeds[0])[:30])
# SCTP (scapy computes the CRC32c): an INIT over IPv4, an ABORT over IPv6, an ICMP error
# quoting an SCTP DATA packet.
from scapy.layers.sctp import SCTP, SCTPChunkInit, SCTPChunkAbort, SCTPChunkData
quoted_sctp = IP(src="198.18.1.1", dst="198.19.1.10") / SCTP(sport=20000, dport=38412, tag=7) / SCTPChunkData(data=b"ngap")
sctp = [
    IP(src="198.18.0.2", dst="198.18.128.10") / SCTP(sport=40000, dport=38412) / SCTPChunkInit(init_tag=1, n_out_streams=1, n_in_streams=1),
    IPv6(src="2001:db8:0::2", dst="2001:db8:80::10") / SCTP(sport=40000, dport=38412, tag=9) / SCTPChunkAbort(),
    IP(src="198.19.0.1", dst="198.18.1.1") / ICMP(type=3, code=4, nexthopmtu=1280) / raw(quoted_sctp)[:40],
]
for i, s in enumerate(sctp):
    (out / f"seed-sctp-{i:03}").write_bytes(raw(s))
