"""IPsec ESP (tunnel mode, route-based): vecgate's ESP checked by independent
implementations. scapy's ESP layer (scapy.layers.ipsec, with pip `cryptography`)
decrypts what vecgate sends and builds what vecgate must decrypt, for every algorithm,
over IPv4 and IPv6 outer headers, raw ESP and ESP in UDP 4500; tshark decrypts a capture
given the SA keys. Replayed, tampered and unknown-SPI packets built by scapy are dropped
by name. The peer is 198.18.1.2 / 2001:db8:1::2 behind eth1; inner traffic goes to
198.19.60.0/24 and 2001:db8:160::/48 through ipsec_tunnel0."""
import shutil
import subprocess

import pytest
from conftest import GW_MAC0, HOST_MAC, run_pcap, write_pcap

from scapy.all import IP, UDP, Ether, IPv6, Raw, raw
from scapy.layers.ipsec import ESP, SecurityAssociation

OUT_SPI, IN_SPI = 0x1001, 0x2001

# (vecgate name, scapy crypt algo, enc key length, scapy auth algo, integ key length)
ALGS = {
    "null": ("NULL", 0, "NULL", 0),
    "null-sha256": ("NULL", 0, "SHA2-256-128", 32),
    "aes-gcm-128": ("AES-GCM", 20, "NULL", 0),
    "aes-gcm-256": ("AES-GCM", 36, "NULL", 0),
    "chacha20-poly1305": ("CHACHA20-POLY1305", 36, "NULL", 0),
    "aes-cbc-sha256": ("AES-CBC", 16, "SHA2-256-128", 32),
}


def keys(alg, seed):
    _, elen, _, ilen = ALGS[alg]
    return bytes((seed + 7 * i) & 0xFF for i in range(elen)), bytes((seed ^ 0x5A) + i & 0xFF for i in range(ilen))


def ends(outer):
    return ("198.18.1.1", "198.18.1.2") if outer == 4 else ("2001:db8:1::1", "2001:db8:1::2")


def sa_config(alg, outer, udp, inbound_extra="", esn=False):
    local, remote = ends(outer)
    (ek, ik), (ek2, ik2) = keys(alg, 1), keys(alg, 2)
    udp_line = "udp_encap = true" if udp else ""
    return f"""
[[ipsec_sa]]
index = 0
spi = {OUT_SPI}
direction = "outbound"
algorithm = "{alg}"
enc_key = "{ek.hex()}"
integ_key = "{ik.hex()}"
local = "{local}"
remote = "{remote}"
{udp_line}
esn = {"true" if esn else "false"}
routes = ["198.19.60.0/24", "2001:db8:160::/48"]

[[ipsec_sa]]
index = 1
spi = {IN_SPI}
direction = "inbound"
algorithm = "{alg}"
enc_key = "{ek2.hex()}"
integ_key = "{ik2.hex()}"
local = "{local}"
remote = "{remote}"
{udp_line}
esn = {"true" if esn else "false"}
{inbound_extra}
"""


def scapy_sa(alg, outer, udp, spi, seed, src, dst, esn=False):
    crypt, _, auth, _ = ALGS[alg]
    ek, ik = keys(alg, seed)
    hdr = IP(src=src, dst=dst) if outer == 4 else IPv6(src=src, dst=dst)
    return SecurityAssociation(ESP, spi=spi, crypt_algo=crypt, crypt_key=ek or None, auth_algo=auth, auth_key=ik or None,
                               tunnel_header=hdr, nat_t_header=UDP(sport=4500, dport=4500) if udp else None, esn_en=esn)


def to_tunnel(i, inner):
    if inner == 4:
        return Ether(src=HOST_MAC, dst=GW_MAC0) / IP(src="198.18.0.2", dst="198.19.60.7", ttl=64) / UDP(sport=1000 + i, dport=9) / Raw(bytes([i]) * (10 + 37 * i))
    return Ether(src=HOST_MAC, dst=GW_MAC0) / IPv6(src="2001:db8::2", dst="2001:db8:160::7", hlim=64) / UDP(sport=1000 + i, dport=9) / Raw(bytes([i]) * (10 + 37 * i))


def outer_l3(frame, outer):
    return IP(raw(frame)[14:]) if outer == 4 else IPv6(raw(frame)[14:])


CASES = [(a, o, u) for a in ALGS for o in (4, 6) for u in (False, True)]


@pytest.mark.parametrize("alg,outer,udp", CASES, ids=[f"{a}-v{o}{'-udp' if u else ''}" for a, o, u in CASES])
def test_scapy_decrypts_what_vecgate_encrypts(vecgate, tmp_path, alg, outer, udp):
    sent = [to_tunnel(i, 4) for i in range(5)] + [to_tunnel(i, 6) for i in range(5, 8)]
    out0, out1, c, _ = run_pcap(vecgate, tmp_path, sent, sa_config(alg, outer, udp))
    assert len(out1) == len(sent) and not out0, c
    assert c.get((f"esp{outer}-encrypt", "encrypted")) == len(sent), c
    local, remote = ends(outer)
    # The peer's inbound SA: our outbound keys (seed 1).
    peer = scapy_sa(alg, outer, udp, OUT_SPI, 1, local, remote)
    for n, (frame, orig) in enumerate(zip(out1, sent)):
        l3 = outer_l3(frame, outer)
        assert l3.src == local and l3.dst == remote
        if udp:
            assert l3[UDP].sport == 4500 and l3[UDP].dport == 4500
            if outer == 6:
                # IPv6 needs a real UDP checksum: scapy recomputes it over the same bytes.
                sent_sum = l3[UDP].chksum
                again = l3.copy()
                del again[UDP].chksum
                assert IPv6(raw(again))[UDP].chksum == sent_sum
        esp = l3[ESP]
        assert esp.spi == OUT_SPI and esp.seq == n + 1
        inner = peer.decrypt(l3)
        want = orig.payload.copy()
        if IP in want and want.version == 4:
            want.ttl -= 1
            del want.chksum
            want = IP(raw(want))
        else:
            want.hlim -= 1
        assert raw(inner) == raw(want), f"packet {n}"


# Inner traffic classes (DSCP << 2 | ECN): every ECN codepoint under several DSCPs.
DSCP_TCS = [0, 46 << 2 | 2, 46 << 2 | 3, 10 << 2 | 1, 34 << 2 | 3, 63 << 2, 3, 0xFF]


@pytest.mark.parametrize("outer", [4, 6])
@pytest.mark.parametrize("dscp", ["inherit", 10, 0, 63])
def test_sa_dscp_policy_marks_the_outer_header(vecgate, tmp_path, outer, dscp):
    """An outbound SA's `dscp` (RFC 4301 §5.1.2.1: the outer DSCP copied from the inner
    header, or set per SA): scapy reads each ESP packet's outer DSCP and ECN — the inner
    packet's whole byte under "inherit", the SA's DSCP with the inner ECN field (RFC
    6040) under a number — over IPv4 and IPv6 outer headers, for IPv4 and IPv6 inner
    packets of every ECN codepoint; the IPv4 header checksum right, the IPv6 flow label
    untouched; and scapy's ESP opens each to the inner packet as sent (its traffic class
    too), less one hop."""
    sent = []
    for k, tc in enumerate(DSCP_TCS):
        for v in (4, 6):
            s = to_tunnel(k, v)
            if v == 4:
                s[IP].tos = tc
            else:
                s[IPv6].tc = tc
            sent.append((tc, s))
    value = '"inherit"' if dscp == "inherit" else dscp
    cfg = sa_config("aes-gcm-128", outer, False).replace('routes = ["198.19.60.0/24", "2001:db8:160::/48"]',
                                                          f'routes = ["198.19.60.0/24", "2001:db8:160::/48"]\ndscp = {value}')
    out0, out1, c, _ = run_pcap(vecgate, tmp_path, [s for _, s in sent], cfg)
    assert len(out1) == len(sent) and not out0, c
    local, remote = ends(outer)
    peer = scapy_sa("aes-gcm-128", outer, False, OUT_SPI, 1, local, remote)
    for n, (frame, (tc, orig)) in enumerate(zip(out1, sent)):
        l3 = outer_l3(frame, outer)
        got = l3.tos if outer == 4 else l3.tc
        want_dscp = tc >> 2 if dscp == "inherit" else dscp
        assert (got >> 2, got & 3) == (want_dscp, tc & 3), f"packet {n}: inner {tc:#x}, outer {got:#x}"
        if outer == 4:
            again = IP(raw(l3))
            del again.chksum
            assert IP(raw(again)).chksum == l3.chksum, f"packet {n}: IPv4 header checksum"
        else:
            assert l3.fl == 0
        assert l3[ESP].seq == n + 1
        inner = peer.decrypt(l3)
        want = orig.payload.copy()
        if want.version == 4:
            want.ttl -= 1
            del want.chksum
            want = IP(raw(want))
        else:
            want.hlim -= 1
        assert raw(inner) == raw(want), f"packet {n}"


@pytest.mark.parametrize("alg,outer,udp", CASES, ids=[f"{a}-v{o}{'-udp' if u else ''}" for a, o, u in CASES])
def test_vecgate_decrypts_what_scapy_encrypts(vecgate, tmp_path, alg, outer, udp):
    local, remote = ends(outer)
    peer = scapy_sa(alg, outer, udp, IN_SPI, 2, remote, local)
    inners = [IP(src="198.19.60.7", dst="198.18.0.2", ttl=30) / UDP(sport=9, dport=2000 + i) / Raw(b"q" * (i * 53)) for i in range(4)]
    inners += [IPv6(src="2001:db8:160::7", dst="2001:db8::2", hlim=30) / UDP(sport=9, dport=3000) / Raw(b"r" * 99)]
    frames = [Ether(src=HOST_MAC, dst=GW_MAC0) / peer.encrypt(p) for p in inners]
    out0, out1, c, _ = run_pcap(vecgate, tmp_path, frames, sa_config(alg, outer, udp))
    assert c.get((f"esp{outer}-decrypt", "decrypted")) == len(inners), c
    assert len(out0) == len(inners) and not out1, c
    for got, want in zip(out0, inners):
        l3 = got.payload
        assert l3[UDP].dport == want[UDP].dport and bytes(l3[UDP].payload) == bytes(want[UDP].payload)


def test_replay_bad_icv_and_unknown_spi_dropped_by_name(vecgate, tmp_path):
    local, remote = ends(4)
    peer = scapy_sa("aes-gcm-128", 4, True, IN_SPI, 2, remote, local)
    inner = IP(src="198.19.60.7", dst="198.18.0.2") / UDP(sport=9, dport=2000) / Raw(b"payload")
    good = Ether(src=HOST_MAC, dst=GW_MAC0) / peer.encrypt(inner)
    tampered = bytearray(raw(peer.encrypt(inner)))
    tampered[-20] ^= 0x10
    stranger = scapy_sa("aes-gcm-128", 4, True, 0x7777, 2, remote, local)
    old = scapy_sa("aes-gcm-128", 4, True, IN_SPI, 2, remote, local)
    old.seq_num = 1  # the same number as `good`, validly sealed: a replay
    replayed = Ether(src=HOST_MAC, dst=GW_MAC0) / old.encrypt(inner)
    keepalive = Ether(src=HOST_MAC, dst=GW_MAC0) / IP(src=remote, dst=local) / UDP(sport=4500, dport=4500) / Raw(b"\xff")
    frames = [good, Ether(src=HOST_MAC, dst=GW_MAC0) / Raw(bytes(tampered)), replayed, good,
              Ether(src=HOST_MAC, dst=GW_MAC0) / stranger.encrypt(inner), keepalive]
    frames[1] = Ether(src=HOST_MAC, dst=GW_MAC0, type=0x0800) / IP(bytes(tampered))
    out0, _, c, _ = run_pcap(vecgate, tmp_path, frames, sa_config("aes-gcm-128", 4, True))
    assert len(out0) == 1, c
    assert c.get(("esp4-decrypt", "decrypted")) == 1
    assert c.get(("esp4-decrypt", "bad-icv")) == 1, c
    assert c.get(("esp4-decrypt", "replay")) == 2, c
    assert c.get(("esp4-decrypt", "no-sa")) == 1, c
    assert c.get(("esp4-decrypt", "nat-keepalive")) == 1, c


@pytest.mark.parametrize("mode", ["strict", "loose"])
def test_urpf_on_an_inbound_sa_checks_the_sources_it_decrypts(vecgate, tmp_path, mode):
    """`urpf` on an inbound `[[ipsec_sa]]`: scapy's SA seals packets whose inner sources
    are behind the tunnel (routes into ipsec_tunnel0, the SA's pair to the same peer),
    behind the eth1 link, the gateway's own, a blackhole's and nobody's, over IPv4 and
    IPv6. Strict passes only the tunnel's; loose also the link's. tshark reads in the
    drop capture each dropped packet's reason and inner source."""
    from test_forwarding import dropped_records
    local, remote = ends(4)
    peer = scapy_sa("aes-gcm-128", 4, False, IN_SPI, 2, remote, local)
    srcs4 = {"198.19.60.7": "pass", "198.19.5.7": "link", "198.18.0.1": "own-address",
             "198.19.254.7": "no-route", "198.18.99.1": "no-route"}
    srcs6 = {"2001:db8:160::7": "pass", "2001:db8:100::9": "link"}
    inners = [IP(src=s, dst="198.18.0.2") / UDP(sport=9, dport=2000) / Raw(b"u") for s in srcs4]
    inners += [IPv6(src=s, dst="2001:db8::2") / UDP(sport=9, dport=2000) / Raw(b"u") for s in srcs6]
    frames = [Ether(src=HOST_MAC, dst=GW_MAC0) / peer.encrypt(p) for p in inners]
    drops = tmp_path / "drops.pcapng"
    out0, out1, c, _ = run_pcap(vecgate, tmp_path, frames, sa_config("aes-gcm-128", 4, False, f'urpf = "{mode}"'), drops=drops)
    want = {"pass"} | ({"link"} if mode == "loose" else set())
    passed = sorted(p[IP].src if IP in p else p[IPv6].src for p in out0)
    assert passed == sorted(s for s, k in {**srcs4, **srcs6}.items() if k in want), (passed, c)
    assert not out1 and c[("esp4-decrypt", "decrypted")] == len(frames), c
    reasons = {"link": "urpf-wrong-tunnel", "own-address": "urpf-own-address", "no-route": "urpf-no-route"}
    recs = dropped_records(drops)
    dropped4 = {r["src"]: r["comment"] for r in recs if r["src"]}
    assert dropped4 == {s: f"esp4-decrypt: {reasons[k]}, received on eth0" for s, k in srcs4.items() if k not in want}, (recs, c)
    # The IPv6 one from behind the link, under strict.
    assert len(recs) - len(dropped4) == (1 if mode == "strict" else 0), recs
    assert c.get(("esp4-decrypt", "urpf-wrong-tunnel"), 0) == (2 if mode == "strict" else 0), c


def test_hard_lifetime_stops_the_sa_by_name(vecgate, tmp_path):
    sent = [to_tunnel(i, 4) for i in range(6)]
    cfg = sa_config("aes-gcm-128", 4, False).replace('routes = ["198.19.60.0/24", "2001:db8:160::/48"]',
                                                       'routes = ["198.19.60.0/24"]\nlifetime = { soft_packets = 2, hard_packets = 4 }')
    _, out1, c, _ = run_pcap(vecgate, tmp_path, sent, cfg)
    assert len(out1) == 4, c
    assert c.get(("esp4-encrypt", "lifetime-expired")) == 2, c
    assert c.get(("esp4-encrypt", "soft-lifetime")) == 1, c


def test_bad_sa_config_names_the_field(vecgate, tmp_path):
    from conftest import gateway_config
    cfg = gateway_config(tmp_path, sa_config("aes-gcm-128", 4, False).replace('enc_key = "', 'enc_key = "ab', 1))
    write_pcap(tmp_path / "in.pcap", [])
    r = subprocess.run([str(vecgate), "pcap", "--config", str(cfg)], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "ipsec_sa[0].enc_key" in r.stderr and "21 bytes" in r.stderr, r.stderr


TSHARK_ENC = {"aes-gcm-128": "AES-GCM with 16 octet ICV [RFC4106]", "aes-cbc-sha256": "AES-CBC [RFC3602]", "null-sha256": "NULL"}
TSHARK_AUTH = {"aes-gcm-128": "NULL", "aes-cbc-sha256": "HMAC-SHA-256-128 [RFC4868]", "null-sha256": "HMAC-SHA-256-128 [RFC4868]"}


@pytest.mark.parametrize("alg", list(TSHARK_ENC))
@pytest.mark.parametrize("outer", [4, 6])
def test_tshark_decrypts_the_capture(vecgate, tmp_path, alg, outer):
    if shutil.which("tshark") is None:
        pytest.fail("tshark is not installed (scripts/test.sh installs it)")
    sent = [to_tunnel(i, 4) for i in range(4)]
    _, out1, c, _ = run_pcap(vecgate, tmp_path, sent, sa_config(alg, outer, outer == 4))
    assert len(out1) == 4, c
    local, remote = ends(outer)
    ek, ik = keys(alg, 1)
    uat = (f'"IPv{outer}","{local}","{remote}","{OUT_SPI:#x}","{TSHARK_ENC[alg]}","0x{ek.hex()}",'
           f'"{TSHARK_AUTH[alg]}","{("0x" + ik.hex()) if ik else ""}"')
    r = subprocess.run(["tshark", "-r", str(tmp_path / "out1.pcap"), "-o", "esp.enable_encryption_decode:TRUE",
                        "-o", "esp.enable_authentication_check:TRUE", "-o", f"uat:esp_sa:{uat}",
                        "-T", "fields", "-e", "esp.spi", "-e", "ip.dst", "-e", "udp.dstport", "-e", "esp.icv_good"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    rows = [l.split("\t") for l in r.stdout.splitlines()]
    assert len(rows) == 4, r.stdout
    for i, row in enumerate(rows):
        # Inside the decrypted ESP: the inner packet to 198.19.60.7, UDP to port 9.
        assert "198.19.60.7" in row[1].split(","), row
        assert "9" in row[2].split(","), row
        assert row[3] in ("1", "True"), row


@pytest.mark.parametrize("alg", ["aes-gcm-128", "aes-cbc-sha256", "chacha20-poly1305"])
def test_extended_sequence_numbers_agree_with_scapy(vecgate, tmp_path, alg):
    """With ESN the high half of the sequence number is authenticated but not sent: in
    the AEAD's AAD (RFC 4106 5) or after the HMAC's data (RFC 4303 3.3.2.1). scapy with
    esn_en computes it the same way, in both directions."""
    local, remote = ends(4)
    sent = [to_tunnel(i, 4) for i in range(3)]
    out_peer = scapy_sa(alg, 4, False, OUT_SPI, 1, local, remote, esn=True)
    in_peer = scapy_sa(alg, 4, False, IN_SPI, 2, remote, local, esn=True)
    inner = IP(src="198.19.60.7", dst="198.18.0.2") / UDP(sport=9, dport=2000) / Raw(b"esn")
    frames = sent + [Ether(src=HOST_MAC, dst=GW_MAC0) / in_peer.encrypt(inner)]
    out0, out1, c, _ = run_pcap(vecgate, tmp_path, frames, sa_config(alg, 4, False, esn=True))
    assert len(out1) == 3 and len(out0) == 1, c
    for frame in out1:
        out_peer.decrypt(outer_l3(frame, 4))
    # Without ESN on scapy's side the same packets fail: the high half was covered.
    plain = scapy_sa(alg, 4, False, OUT_SPI, 1, local, remote, esn=False)
    with pytest.raises(Exception):
        plain.decrypt(outer_l3(out1[0], 4))


def test_ipv6_destination_options_before_esp(vecgate, tmp_path):
    """Linux's ip6 tunnels put a Destination Options header (Tunnel Encapsulation Limit)
    before what they carry: esp6-decrypt finds ESP after it, raw and in UDP."""
    from scapy.all import IPv6ExtHdrDestOpt, PadN
    local, remote = ends(6)
    frames = []
    for udp in (False, True):
        peer = scapy_sa("aes-gcm-128", 6, udp, IN_SPI, 2, remote, local)
        inner = IP(src="198.19.60.7", dst="198.18.0.2") / UDP(sport=9, dport=2000) / Raw(b"after options")
        sealed = peer.encrypt(inner)
        after = raw(sealed[UDP]) if udp else raw(sealed[ESP])
        opts = IPv6ExtHdrDestOpt(nh=17 if udp else 50, options=[PadN(optdata=b"\0\0\0\0")])
        frames.append(Ether(src=HOST_MAC, dst=GW_MAC0) / IPv6(src=remote, dst=local, nh=60) / opts / Raw(after))
    # One SA per run (an SA is ESP or ESP in UDP).
    out0, _, c, _ = run_pcap(vecgate, tmp_path, frames[:1], sa_config("aes-gcm-128", 6, False))
    assert len(out0) == 1 and c.get(("esp6-decrypt", "decrypted")) == 1, c
    out0, _, c, _ = run_pcap(vecgate, tmp_path, frames[1:], sa_config("aes-gcm-128", 6, True))
    assert len(out0) == 1 and c.get(("esp6-decrypt", "decrypted")) == 1, c
    assert bytes(out0[0][UDP].payload) == b"after options"


def test_decrypted_packets_get_ip_input_checks(vecgate, tmp_path):
    """An inner packet out of an SA is held to ip4-input's and ip6-input's rules, as a
    packet from a wire is: scapy's SA seals (validly) inner packets from martian sources,
    with a bad header checksum, malformed IPv4 options and IPv6 hop-by-hop options that
    say discard; esp4-decrypt drops each by name. Well-formed options (which take the
    checks' slow path) and plain packets pass, each told apart by its UDP port."""
    from scapy.all import IPOption_NOP, IPv6ExtHdrHopByHop, HBHOptUnknown, PadN
    local, remote = ends(4)
    peer = scapy_sa("aes-gcm-128", 4, False, IN_SPI, 2, remote, local)

    def v4(src, port, **kw):
        return IP(src=src, dst="198.18.0.2", **kw) / UDP(sport=9, dport=port) / Raw(b"m")

    def v6(src, port, *ext):
        p = IPv6(src=src, dst="2001:db8::2")
        for e in ext:
            p = p / e
        return p / UDP(sport=9, dport=port) / Raw(b"m")

    # An IPv4 header with a Record Route option whose length runs past the header.
    bad_opt = bytearray(raw(IP(src="198.19.60.7", dst="198.18.0.2", options=[IPOption_NOP()] * 4) / UDP(sport=9, dport=2107) / Raw(b"m")))
    bad_opt[20:24] = bytes([7, 39, 4, 0])
    bad_opt[10:12] = b"\0\0"
    bad_opt = IP(bytes(bad_opt))
    del bad_opt.chksum
    bad_opt = IP(raw(bad_opt))
    want = {
        2101: ("v4", v4("0.1.2.3", 2101), "inner-bad-source"),
        2102: ("v4", v4("127.0.0.1", 2102), "inner-bad-source"),
        2103: ("v4", v4("224.0.0.5", 2103), "inner-bad-source"),
        2104: ("v4", v4("240.0.0.1", 2104), "inner-bad-source"),
        2105: ("v4", v4("255.255.255.255", 2105), "inner-bad-source"),
        2106: ("v4", v4("198.19.60.7", 2106, chksum=0x1234), "inner-bad-checksum"),
        2107: ("v4", bad_opt, "inner-bad-option"),
        2108: ("v4", v4("198.19.60.7", 2108, options=[IPOption_NOP()] * 4), None),
        2109: ("v4", v4("198.19.60.7", 2109), None),
        2110: ("v6", v6("ff02::1", 2110), "inner-bad-source"),
        2111: ("v6", v6("::1", 2111), "inner-bad-source"),
        # Option type 0x7e: unrecognised, action 01 (discard silently).
        2112: ("v6", v6("2001:db8:160::7", 2112, IPv6ExtHdrHopByHop(options=[HBHOptUnknown(otype=0x7E, optdata=b"\0\0\0\0")])), "inner-bad-option"),
        2113: ("v6", v6("2001:db8:160::7", 2113, IPv6ExtHdrHopByHop(options=[PadN(optdata=b"\0\0\0\0")])), None),
        2114: ("v6", v6("2001:db8:160::7", 2114), None),
    }
    frames = [Ether(src=HOST_MAC, dst=GW_MAC0) / peer.encrypt(p) for _, p, _ in want.values()]
    out0, out1, c, _ = run_pcap(vecgate, tmp_path, frames, sa_config("aes-gcm-128", 4, False))
    passed = sorted(p[UDP].dport for p in out0)
    assert passed == sorted(port for port, (_, _, why) in want.items() if why is None), (passed, c)
    assert not out1, c
    for reason in ("inner-bad-source", "inner-bad-checksum", "inner-bad-option"):
        n = sum(1 for _, _, why in want.values() if why == reason)
        assert c.get(("esp4-decrypt", reason)) == n, (reason, c)
    assert c.get(("esp4-decrypt", "decrypted")) == len(passed), c


def test_an_inner_option_asking_for_a_parameter_problem_gets_one(vecgate, tmp_path):
    """RFC 8200 §4.2: an unrecognised hop-by-hop option whose type's top bits are 10 asks
    for an ICMPv6 parameter problem (code 2, pointing at the option) whatever the
    destination, 11 unless it is multicast. ip6-input sends it for a packet from a wire;
    esp4-decrypt now does the same for a packet out of the SA (it dropped them without
    the error): the error goes back to the inner source, through the outbound SA, where
    scapy decrypts it and finds type 4, code 2, pointer 42 and the packet quoted. An
    inner packet to a multicast group is dropped as inner-multicast (it went to the
    unicast lookup); type 11 to a multicast group is dropped without an error."""
    from scapy.all import HBHOptUnknown, ICMPv6ParamProblem, IPerror6, IPv6ExtHdrHopByHop, UDPerror
    local, remote = ends(4)
    peer = scapy_sa("aes-gcm-128", 4, False, IN_SPI, 2, remote, local)

    def v6(dst, port, otype=None):
        p = IPv6(src="2001:db8:160::7", dst=dst)
        if otype is not None:
            p = p / IPv6ExtHdrHopByHop(options=[HBHOptUnknown(otype=otype, optdata=b"\0\0\0\0")])
        return p / UDP(sport=9, dport=port) / Raw(b"m")

    sent = [v6("2001:db8::2", 2201, 0xBE), v6("2001:db8::2", 2202, 0xFE), v6("ff0e::1", 2203, 0xFE), v6("ff0e::1", 2204, 0xBE),
            v6("ff0e::1", 2205), v6("ff02::1", 2206), v6("2001:db8::2", 2207)]
    frames = [Ether(src=HOST_MAC, dst=GW_MAC0) / peer.encrypt(p) for p in sent]
    out0, out1, c, _ = run_pcap(vecgate, tmp_path, frames, sa_config("aes-gcm-128", 4, False))
    assert [p[UDP].dport for p in out0] == [2207], c
    assert c.get(("esp4-decrypt", "inner-param-problem")) == 3, c
    assert c.get(("esp4-decrypt", "inner-multicast")) == 2, c
    assert c.get(("esp4-decrypt", "inner-bad-option")) == 1, c
    assert c.get(("esp4-decrypt", "decrypted")) == 1, c
    assert c.get(("ip6-icmp-error", "sent")) == 3, c
    back = scapy_sa("aes-gcm-128", 4, False, OUT_SPI, 1, local, remote)
    errs = [back.decrypt(IP(raw(f)[14:])) for f in out1]
    ports = []
    for e in errs:
        assert e[IPv6].dst == "2001:db8:160::7" and ICMPv6ParamProblem in e, e.show(dump=True)
        pp = e[ICMPv6ParamProblem]
        assert (pp.code, pp.ptr) == (2, 42), e.show(dump=True)
        assert e[IPerror6].src == "2001:db8:160::7"
        ports.append(e[UDPerror].dport)
    assert sorted(ports) == [2201, 2202, 2204]
