"""Seeds for the `gso` fuzz target (control::fuzz::gso): frames as an af_packet socket
with vnet headers hands them over, built by scapy (IP and UDP headers) and
tests/parcelpkt.py (parcels), independent of the Rust code. Each seed is
`[max segments u8][link MTU u16 BE][virtio_net_hdr, little-endian as on x86][IP packet]`.
Run from this folder: python3 make_gso_corpus.py (the output is committed)."""
import struct
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from parcelpkt import fold, ones, parcel4, parcel6  # noqa: E402
from scapy.all import IP, UDP, IPv6, TCP, raw  # noqa: E402

NEEDS_CSUM, GSO_NONE, GSO_TCPV4, GSO_UDP, GSO_UDP_L4 = 1, 0, 1, 3, 5
S, D, S6, D6 = "198.18.0.2", "198.19.40.9", "2001:db8::2", "2001:db8:140::9"


def vnet(flags=0, gso_type=GSO_NONE, hdr_len=0, gso_size=0, csum_start=0, csum_offset=0):
    return struct.pack("<BBHHHH", flags, gso_type, hdr_len, gso_size, csum_start, csum_offset)


def seed(max_segs, mtu, hdr, packet):
    return struct.pack("!BH", max_segs, mtu) + hdr + packet


def data(n):
    return bytes((i * 13 + (i >> 8)) & 0xFF for i in range(n))


def gso_frame(v6, payload, gso_size):
    """A UDP_SEGMENT send as the kernel hands it over: one IP packet of all the payload,
    UDP length of all of it, the pseudo-header sum (not complemented) in the checksum
    field, left to the device."""
    if v6:
        p = bytearray(raw(IPv6(src=S6, dst=D6, hlim=64) / UDP(sport=40000, dport=9000, chksum=0) / payload))
        ph = p[8:40] + struct.pack("!IxxxB", len(p) - 40, 17)
        hl = 40
    else:
        p = bytearray(raw(IP(src=S, dst=D, id=0x1234, flags="DF", ttl=64) / UDP(sport=40000, dport=9000, chksum=0) / payload))
        ph = p[12:20] + struct.pack("!BBH", 0, 17, len(p) - 20)
        hl = 20
    p[hl + 6:hl + 8] = struct.pack("!H", fold(ones(bytes(ph))))
    return bytes(p), vnet(NEEDS_CSUM, GSO_UDP_L4, 14 + hl + 8, gso_size, 14 + hl, 6)


seeds = {}
f, h = gso_frame(False, data(10500), 1000)
seeds["gso4-to-parcels"] = seed(32, 9000, h, f)
seeds["gso4-parcels-of-4"] = seed(4, 65535, h, f)
seeds["gso4-mtu-too-small"] = seed(32, 1500, h, f)
f, h = gso_frame(True, data(8 * 1400), 1400)
seeds["gso6-to-parcels"] = seed(32, 65535, h, f)
seeds["gso6-bound-3"] = seed(3, 9000, h, f)
seeds["gso6-ufo-refused"] = seed(32, 9000, vnet(NEEDS_CSUM, GSO_UDP, 62, 1400, 54, 6), f)
seeds["gso6-no-partial-checksum"] = seed(32, 9000, vnet(0, GSO_UDP_L4, 62, 1400, 0, 0), f)
segs = [data(1000)[i:] + data(i) for i in range(8)]
seeds["parcel4-to-gso"] = seed(32, 9000, vnet(), parcel4(S, D, 40000, 9000, segs, ident=0x200))
seeds["parcel4-short-last"] = seed(32, 9000, vnet(), parcel4(S, D, 40000, 9000, segs[:3] + [b"\x07" * 13]))
seeds["parcel6-to-gso"] = seed(32, 9000, vnet(), parcel6(S6, D6, 40001, 9001, segs))
seeds["parcel6-one-segment"] = seed(32, 9000, vnet(), parcel6(S6, D6, 40001, 9001, segs[:1]))
seeds["parcel4-bad-slot"] = seed(32, 9000, vnet(), parcel4(S, D, 1, 2, segs, slots=[1] * 8))
tcp = bytearray(raw(IP(src=S, dst=D) / TCP(sport=1, dport=2, flags="A", chksum=0) / data(3000)))
seeds["tcp4-gso"] = seed(32, 9000, vnet(NEEDS_CSUM, GSO_TCPV4, 54, 1448, 34, 16), bytes(tcp))
out = Path(__file__).resolve().parent / "corpus" / "gso"
out.mkdir(parents=True, exist_ok=True)
for name, s in seeds.items():
    (out / f"seed-{name}").write_bytes(s)
print(len(seeds), "seeds in", out)
