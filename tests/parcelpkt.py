"""IP parcels built and checked byte by byte, independently of vecgate's Rust code (the
format as docs/PARCELS.md and crates/wire/src/parcel.rs describe it: the IETF 115
prototype's IPv4 form, and our pinned IPv6 form). Standard library only."""
import ipaddress
import struct


def fold(s: int) -> int:
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s


def ones(b: bytes) -> int:
    if len(b) % 2:
        b += b"\0"
    return fold(sum(struct.unpack(f"!{len(b) // 2}H", b)))


def cksum(b: bytes) -> int:
    return ~ones(b) & 0xFFFF


def seg_cksum(seg: bytes) -> int:
    """Integrity-block slot: complement of the segment's sum, 0 sent as 0xffff."""
    return cksum(seg) or 0xFFFF


def udp_header_word(nsegs: int, udp_len: int) -> bytes:
    return struct.pack("!I", (nsegs << 24) | (udp_len & 0xFFFFFF))


def parcel4(src, dst, sport, dport, segs, ident=1, ttl=64, quirk=True, slots=None,
            nsegs=None, jumbo=None, udp_len_field=0, opt_len=6):
    """A UDP/IPv4 parcel. Keyword overrides make the malformed kinds; `slots` replaces the
    integrity block's values (None: computed)."""
    n = len(segs) if nsegs is None else nsegs
    seg_len = len(segs[0])
    s, d = ipaddress.IPv4Address(src).packed, ipaddress.IPv4Address(dst).packed
    payload = b"".join(segs)
    udp_len = 8 + 2 * len(segs) + len(payload)
    jl = 28 + udp_len if jumbo is None else jumbo
    opt = bytes([0x0B, opt_len, n & 0xFF]) + (jl & 0xFFFFFF).to_bytes(3, "big") + b"\0\0"
    ip = struct.pack("!BBHHHBBH4s4s", 0x47, 0, seg_len, ident, 0, ttl, 17, 0, s, d) + opt
    ip = ip[:10] + struct.pack("!H", cksum(ip)) + ip[12:]
    ln = seg_len
    if quirk:
        ln = ((ln & 0xFF) << 8) | (ln >> 8)
    ph = s + d + struct.pack("!BBH", 0, 17, ln)
    uc = cksum(ph + struct.pack("!HHHH", sport, dport, 0, 0) + udp_header_word(n, 8 + 2 * n + len(payload)))
    udp = struct.pack("!HHHH", sport, dport, udp_len_field, uc)
    vals = [seg_cksum(x) for x in segs] if slots is None else slots
    return ip + udp + b"".join(struct.pack("!H", v) for v in vals) + payload


def parcel6(src, dst, sport, dport, segs, hlim=64, nsegs=None):
    n = len(segs) if nsegs is None else nsegs
    seg_len = len(segs[0])
    s, d = ipaddress.IPv6Address(src).packed, ipaddress.IPv6Address(dst).packed
    payload = b"".join(segs)
    udp_len = 8 + 2 * len(segs) + len(payload)
    ip = struct.pack("!IHBB16s16s", 6 << 28, seg_len, 0, hlim, s, d)
    hbh = bytes([17, 0, 0xC2, 4, n]) + (8 + udp_len).to_bytes(3, "big")
    ph = s + d + struct.pack("!I", seg_len) + b"\0\0\0\x11"
    uc = cksum(ph + struct.pack("!HHHH", sport, dport, 0, 0) + udp_header_word(n, udp_len))
    udp = struct.pack("!HHHH", sport, dport, 0, uc)
    return ip + hbh + udp + b"".join(struct.pack("!H", seg_cksum(x)) for x in segs) + payload


def parse4(pkt: bytes) -> dict:
    """Checks an IPv4 parcel; raises ValueError naming the first problem."""
    ihl = (pkt[0] & 15) * 4
    if pkt[0] >> 4 != 4 or ihl != 28 or pkt[20] != 0x0B or pkt[21] != 6:
        raise ValueError("not a 28-byte parcel header")
    if cksum(pkt[:28]) != 0:
        raise ValueError("IPv4 header checksum")
    n, jl = pkt[22], int.from_bytes(pkt[23:26], "big")
    seg_len = struct.unpack("!H", pkt[2:4])[0]
    if jl != len(pkt):
        raise ValueError(f"jumbo length {jl} != {len(pkt)}")
    sport, dport, ulen, uc = struct.unpack("!HHHH", pkt[28:36])
    if ulen:
        raise ValueError("UDP length not 0")
    data = pkt[36 + 2 * n:]
    if not (n - 1) * seg_len < len(data) <= n * seg_len:
        raise ValueError("segment lengths")
    forms = []
    for name, q in (("prototype", True), ("plain", False)):
        ln = (((seg_len & 0xFF) << 8) | (seg_len >> 8)) if q else seg_len
        ph = pkt[12:20] + struct.pack("!BBH", 0, 17, ln)
        if cksum(ph + pkt[28:32] + b"\0\0\0\0" + udp_header_word(n, len(pkt) - 28)) == uc:
            forms.append(name)
    if not forms:
        raise ValueError("UDP checksum")
    segs = [data[i * seg_len:(i + 1) * seg_len] for i in range(n)]
    for i, sg in enumerate(segs):
        slot = struct.unpack("!H", pkt[36 + 2 * i:38 + 2 * i])[0]
        if slot and slot != seg_cksum(sg):
            raise ValueError(f"segment {i} checksum")
    return {"src": str(ipaddress.IPv4Address(pkt[12:16])), "dst": str(ipaddress.IPv4Address(pkt[16:20])),
            "sport": sport, "dport": dport, "nsegs": n, "seg_len": seg_len, "ttl": pkt[8],
            "segments": segs, "form": forms[0]}


def parse6(pkt: bytes) -> dict:
    """Checks an IPv6 parcel (our pinned layout); raises ValueError naming the problem."""
    if pkt[0] >> 4 != 6 or pkt[6] != 0 or pkt[40:44] != bytes([17, 0, 0xC2, 4]):
        raise ValueError("not an IPv6 parcel header")
    seg_len = struct.unpack("!H", pkt[4:6])[0]
    n, jl = pkt[44], int.from_bytes(pkt[45:48], "big")
    if jl != len(pkt) - 40:
        raise ValueError(f"jumbo length {jl} != {len(pkt) - 40}")
    sport, dport, ulen, uc = struct.unpack("!HHHH", pkt[48:56])
    if ulen:
        raise ValueError("UDP length not 0")
    ph = pkt[8:40] + struct.pack("!I", seg_len) + b"\0\0\0\x11"
    if cksum(ph + pkt[48:52] + b"\0\0\0\0" + udp_header_word(n, len(pkt) - 48)) != uc:
        raise ValueError("UDP checksum")
    data = pkt[56 + 2 * n:]
    if not (n - 1) * seg_len < len(data) <= n * seg_len:
        raise ValueError("segment lengths")
    segs = [data[i * seg_len:(i + 1) * seg_len] for i in range(n)]
    for i, sg in enumerate(segs):
        slot = struct.unpack("!H", pkt[56 + 2 * i:58 + 2 * i])[0]
        if slot and slot != seg_cksum(sg):
            raise ValueError(f"segment {i} checksum")
    return {"nsegs": n, "seg_len": seg_len, "hlim": pkt[7], "sport": sport, "dport": dport, "segments": segs}
