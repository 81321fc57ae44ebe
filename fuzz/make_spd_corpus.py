"""Seeds for the `spd_flow_key` fuzz target (spd::nodes::fuzz_flow_key), built by scapy:
IPv4 and IPv6 packets of every selector shape the SPD reads (TCP, UDP, SCTP, ICMP,
ICMPv6, ESP, first and later fragments, options, extension header chains).
Run from this folder: python3 make_spd_corpus.py (the output is committed)."""
from pathlib import Path

from scapy.all import (ICMP, IP, TCP, UDP, IPv6, ICMPv6EchoRequest, IPv6ExtHdrDestOpt, IPv6ExtHdrFragment,
                       IPv6ExtHdrHopByHop, IPv6ExtHdrRouting, IPOption_RR, Raw, fragment, raw)
from scapy.layers.sctp import SCTP
from scapy.layers.ipsec import ESP

S4, D4, S6, D6 = "198.18.0.2", "198.19.0.5", "2001:db8::2", "2001:db8:99::5"
big = Raw(bytes(range(256)) * 4)
seeds = [
    IP(src=S4, dst=D4) / UDP(sport=4000, dport=53) / Raw(b"q" * 20),
    IP(src=S4, dst=D4) / TCP(sport=40000, dport=443, flags="S"),
    IP(src=S4, dst=D4) / SCTP(sport=36412, dport=36412),
    IP(src=S4, dst=D4) / ICMP(type=8, id=7),
    IP(src=S4, dst=D4) / ESP(spi=4097, seq=1) / Raw(b"e" * 32),
    IP(src=S4, dst=D4, options=[IPOption_RR()]) / UDP(sport=1, dport=2),
    *fragment(IP(src=S4, dst=D4) / UDP(sport=5, dport=6) / big, fragsize=400)[:2],
    IPv6(src=S6, dst=D6) / UDP(sport=4000, dport=53) / Raw(b"q" * 20),
    IPv6(src=S6, dst=D6) / TCP(sport=40000, dport=443, flags="S"),
    IPv6(src=S6, dst=D6) / ICMPv6EchoRequest(id=7),
    IPv6(src=S6, dst=D6) / IPv6ExtHdrHopByHop() / IPv6ExtHdrDestOpt() / UDP(sport=7, dport=8),
    IPv6(src=S6, dst=D6) / IPv6ExtHdrRouting(addresses=["2001:db8::9"]) / TCP(sport=9, dport=10),
    IPv6(src=S6, dst=D6) / IPv6ExtHdrFragment(offset=0, m=1, id=3) / UDP(sport=11, dport=12) / Raw(b"f" * 16),
    IPv6(src=S6, dst=D6) / IPv6ExtHdrFragment(offset=8, m=0, id=3, nh=17) / Raw(b"f" * 16),
    IPv6(src=S6, dst=D6) / ESP(spi=4099, seq=1) / Raw(b"e" * 32),
]
out = Path(__file__).resolve().parent / "corpus" / "spd_flow_key"
out.mkdir(parents=True, exist_ok=True)
for i, s in enumerate(seeds):
    (out / f"seed-{i:03}").write_bytes(raw(s))
print(len(seeds), "seeds in", out)
