"""SCTP services end to end, checked by an independent implementation: scapy builds the
SCTP packets (its CRC32c), a vecgate gateway in a namespace balances them over two
backend namespaces, and scapy and tshark dissect what comes out and verify every CRC32c
the gateway wrote. IPv4 and IPv6. The host kernel has no SCTP module, so the peers are
raw frames (tests/sctp_peer.py), not SCTP sockets: an INIT to the service reaches one
backend (each association exactly one, both backends used), translated; the backend's
INIT ACK and COOKIE ACK come back as the service's; the session goes through SCTP's own
states (cookie-wait, established, closed: `show lb sessions`) with the `[lb] timeouts`
SCTP keys' timeouts; an ABORT closes it; a packet with a wrong CRC32c is dropped by name
and makes no session; a multi-homed INIT and INIT ACK lose the addresses they list and
ASCONF among their Supported Extensions; an ASCONF or ASCONF-ACK chunk is dropped."""
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from netns import Vecgate

PEER = Path(__file__).resolve().parent / "sctp_peer.py"
PORT = 38412  # NGAP
COOKIE_MS = 60000  # [lb] timeouts: sctp_cookie_wait_ms and sctp_cookie_echoed_ms
GW_A, GW_B = "02:00:00:00:00:0a", ["02:00:00:00:01:00", "02:00:00:00:01:01"]
CLIENT_MAC, BE_MAC = "02:00:00:00:0c:01", ["02:00:00:00:0b:00", "02:00:00:00:0b:01"]
FAMILIES = {
    4: {"client": "198.18.0.2", "gw": "198.18.0.1", "vip": "198.18.128.10", "snat": "198.19.1.1",
        "node": ["198.19.1.1", "198.19.2.1"], "backends": ["198.19.1.10", "198.19.2.10"], "len": 24},
    6: {"client": "2001:db8::2", "gw": "2001:db8::1", "vip": "2001:db8:128::10", "snat": "2001:db8:1::1",
        "node": ["2001:db8:1::1", "2001:db8:2::1"], "backends": ["2001:db8:1::10", "2001:db8:2::10"], "len": 64},
}


def config():
    f4, f6 = FAMILIES[4], FAMILIES[6]
    legs = "".join(f"""
[[interface]]
name = "b{i}"
type = "af_packet"
host_if = "b{i}g"
mac = "{GW_B[i]}"
addresses = ["{f4['node'][i]}/24", "{f6['node'][i]}/64"]
""" for i in range(2))
    svc = "".join(f"""
[[lb_service]]
name = "core/amf{fam}:ngap"
type = "cluster_ip"
vip = "{f['vip']}"
port = {PORT}
protocol = "sctp"
backends = [{", ".join(f'{{ addr = "{a}", port = {PORT} }}' for a in f['backends'])}]
""" for fam, f in FAMILIES.items())
    return f"""
[[interface]]
name = "a"
type = "af_packet"
host_if = "a1"
mac = "{GW_A}"
addresses = ["{f4['gw']}/24", "{f6['gw']}/64"]
{legs}
[lb]
snat4 = "{f4['snat']}"
snat6 = "{f6['snat']}"
# The handshake's 3 s defaults are shorter than the test's pauses (sniffers, tshark).
timeouts = {{ sctp_cookie_wait_ms = {COOKIE_MS}, sctp_cookie_echoed_ms = {COOKIE_MS} }}
{svc}"""


def topology(lab):
    c, g = lab.ns("c"), lab.dataplane_ns("gw")
    lab.veth(c, "a0", g, "a1")
    lab.run(c, "ip", "link", "set", "a0", "address", CLIENT_MAC)
    lab.host(c, "a0", "198.18.0.2/24", "2001:db8::2/64", "198.18.0.1", "2001:db8::1")
    bes = []
    for i in range(2):
        b = lab.ns(f"be{i}")
        lab.veth(b, "e0", g, f"b{i}g")
        lab.run(b, "ip", "link", "set", "e0", "address", BE_MAC[i])
        lab.host(b, "e0", f"{FAMILIES[4]['backends'][i]}/24", f"{FAMILIES[6]['backends'][i]}/64",
                 FAMILIES[4]["node"][i], FAMILIES[6]["node"][i])
        bes.append(b)
    return c, g, bes


def warm(lab, c, bes):
    """Neighbours learned both ways (the gateway's of the peers, theirs of it)."""
    for fam, f in FAMILIES.items():
        lab.run(c, "ping", f"-{fam}", "-c", "2", "-i", "0.2", "-W", "1", f["gw"], check=False)
        for i, b in enumerate(bes):
            lab.run(b, "ping", f"-{fam}", "-c", "2", "-i", "0.2", "-W", "1", f["node"][i], check=False)


class Sniffers:
    """One sniffer per (namespace, interface), started together, stopped together."""

    def __init__(self, lab, where):
        self.procs = []
        for ns, iface in where:
            p = lab.spawn(ns, sys.executable, str(PEER), "sniff", iface, stdin=subprocess.PIPE)
            import select
            ready, _, _ = select.select([p.stdout], [], [], 15)
            assert ready and p.stdout.readline().strip() == "READY", p.stderr.read() if not ready else ""
            self.procs.append(p)

    def stop(self):
        time.sleep(0.5)
        out = []
        for p in self.procs:
            o, e = p.communicate("stop\n", timeout=30)
            lines = [l for l in o.splitlines() if l.startswith("[")]
            assert lines, e
            # What the gateway sent (a sniffer also sees the frames its namespace sends).
            gw = {bytes.fromhex(m.replace(":", "")) for m in [GW_A, *GW_B]}
            out.append([b for b in map(bytes.fromhex, json.loads(lines[-1])) if b[6:12] in gw])
        return out


def send(lab, ns, iface, frames):
    lab.run(ns, sys.executable, str(PEER), "send", iface, *[bytes(f).hex() for f in frames])


def frame(fam, src_mac, dst_mac, src, dst, sport, dport, tag, *chunks, chksum=None):
    from scapy.all import Ether, IP, IPv6
    from scapy.layers.sctp import SCTP
    l3 = IP(src=src, dst=dst) if fam == 4 else IPv6(src=src, dst=dst)
    s = SCTP(sport=sport, dport=dport, tag=tag, chksum=chksum)
    for ch in chunks:
        s = s / ch
    return Ether(src=src_mac, dst=dst_mac) / l3 / s


def crc_ok(raw):
    """scapy's verdict on the CRC32c a frame carries: the field against the one it
    computes for the same bytes (the field deleted and the packet built again)."""
    from scapy.all import Ether
    from scapy.layers.sctp import SCTP
    p = Ether(raw)
    got = p[SCTP].chksum
    del p[SCTP].chksum
    return Ether(bytes(p))[SCTP].chksum == got


def tshark_checksums(tmp, name, frames):
    """tshark's verdict on each frame's SCTP checksum (CRC-32C): 1 good, 0 bad."""
    from scapy.all import wrpcap, Ether
    path = tmp / f"{name}.pcap"
    wrpcap(str(path), [Ether(f) for f in frames])
    r = subprocess.run(["tshark", "-r", str(path), "-o", "sctp.checksum:CRC 32c", "-T", "fields", "-e", "sctp.checksum.status"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


def running(lab, vecgate, tmp_path):
    """`topology` with vecgate running `config()` and the neighbours warm: the client,
    the backends, the gateway, and the three ends to sniff."""
    c, g, bes = topology(lab)
    gw = Vecgate(lab, vecgate, g, config(), tmp_path)
    warm(lab, c, bes)
    return c, bes, gw, [(c, "a0"), (bes[0], "e0"), (bes[1], "e0")]


def client_to_vip(fam, sport, tag, *chunks, chksum=None):
    """The client's frame to the service (its address and port), from `sport`."""
    f = FAMILIES[fam]
    return frame(fam, CLIENT_MAC, GW_A, f["client"], f["vip"], sport, PORT, tag, *chunks, chksum=chksum)


def l3(raw):
    from scapy.all import Ether, IP, IPv6
    p = Ether(raw)
    return p[IP] if IP in p else p[IPv6]


@pytest.mark.parametrize("fam", [4, 6])
def test_sctp_associations_through_the_balancer(lab, vecgate, tmp_path, fam):
    from scapy.layers.sctp import (SCTP, SCTPChunkInit, SCTPChunkInitAck, SCTPChunkAbort, SCTPChunkData,
                                   SCTPChunkCookieEcho, SCTPChunkCookieAck)
    f = FAMILIES[fam]
    node = f"lb{fam}-nat"
    c, bes, gw, where = running(lab, vecgate, tmp_path)
    to_vip = lambda *a, **kw: client_to_vip(fam, *a, **kw)

    # 16 associations: each INIT reaches one backend, exactly once, translated (the
    # node's address and a port of it as source, the backend's port), its CRC32c right
    # by scapy and tshark, its INIT chunk as sent.
    s = Sniffers(lab, where)
    inits = [to_vip(40000 + i, 0, SCTPChunkInit(init_tag=0x1000 + i, a_rwnd=65536, n_out_streams=2, n_in_streams=2, init_tsn=7))
             for i in range(16)]
    send(lab, c, "a0", inits)
    got_c, got0, got1 = s.stop()
    assert got_c == [], "nothing back to the client yet"
    seen = {}
    for b, frames in enumerate([got0, got1]):
        for raw in frames:
            p = l3(raw)
            sc = p[SCTP]
            assert (p.src, p.dst, sc.dport) == (f["snat"], f["backends"][b], PORT), p.summary()
            assert sc.tag == 0 and crc_ok(raw), p.summary()
            seen.setdefault(sc[SCTPChunkInit].init_tag, []).append((b, sc.sport))
        assert set(tshark_checksums(tmp_path, f"be{b}-{fam}", frames)) <= {"1"}
    assert sorted(seen) == [0x1000 + i for i in range(16)], seen
    assert all(len(v) == 1 for v in seen.values()), "each INIT reached one backend once"
    assert {v[0][0] for v in seen.values()} == {0, 1}, "Maglev spread the associations"
    # The sessions say the same: each association on the backend its INIT reached.
    rows = [r for r in gw.ctl("show", "lb", "sessions", "limit", "1000")["data"]["sessions"] if r["protocol"] == 132]
    assert len(rows) == 16, rows
    for r in rows:
        (b, sport), = seen[0x1000 + r["client_port"] - 40000]
        assert (r["backend"], r["source_port"], r["state"]) == (f["backends"][b], sport, "sctp_cookie_wait"), r
        # The configured cookie-wait timeout, not the 3 s default nor TCP's SYN one.
        assert 3000 < r["expires_in_ms"] <= COOKIE_MS, r

    # The backend's INIT ACK comes back as the service's, CRC32c right.
    b, snat_port = seen[0x1000][0]
    s = Sniffers(lab, where)
    ack = frame(fam, BE_MAC[b], GW_B[b], f["backends"][b], f["snat"], PORT, snat_port, 0x1000,
                SCTPChunkInitAck(init_tag=0x9000, a_rwnd=65536, n_out_streams=2, n_in_streams=2, init_tsn=9))
    send(lab, bes[b], "e0", [ack])
    got_c, _, _ = s.stop()
    assert len(got_c) == 1, got_c
    p = l3(got_c[0])
    assert (p.src, p.dst, p[SCTP].sport, p[SCTP].dport, p[SCTP].tag) == (f["vip"], f["client"], PORT, 40000, 0x1000), p.summary()
    assert crc_ok(got_c[0]) and tshark_checksums(tmp_path, f"client-{fam}", got_c) == ["1"]
    row = lambda port: next(r for r in gw.ctl("show", "lb", "sessions", "limit", "1000")["data"]["sessions"]
                            if r["protocol"] == 132 and r["client_port"] == port)
    state = lambda port: row(port)["state"]
    assert state(40000) == "sctp_cookie_wait", "an INIT ACK leaves the handshake in cookie-wait"

    # The client's COOKIE ECHO to the backend, the backend's COOKIE ACK back: established,
    # with SCTP's established timeout (210 s), not TCP's (24 h).
    s = Sniffers(lab, where)
    send(lab, c, "a0", [to_vip(40000, 0x9000, SCTPChunkCookieEcho(cookie=b"cookie-of-the-backend"))])
    out = s.stop()
    assert out[0] == [] and len(out[1 + b]) == 1 and out[2 - b] == [], out
    p = l3(out[1 + b][0])
    assert SCTPChunkCookieEcho in p and p[SCTP].sport == snat_port and crc_ok(out[1 + b][0]), p.summary()
    assert state(40000) == "sctp_cookie_echoed"
    s = Sniffers(lab, where)
    send(lab, bes[b], "e0", [frame(fam, BE_MAC[b], GW_B[b], f["backends"][b], f["snat"], PORT, snat_port, 0x1000, SCTPChunkCookieAck())])
    got_c, _, _ = s.stop()
    assert len(got_c) == 1 and SCTPChunkCookieAck in l3(got_c[0]) and crc_ok(got_c[0]), got_c
    r = row(40000)
    assert r["state"] == "sctp_established" and 200_000 < r["expires_in_ms"] <= 210_000, r

    # A wrong CRC32c: dropped by name, whatever the chunk; a corrupted ABORT ends nothing,
    # a corrupted INIT makes no session. Then a good DATA and ABORT: carried, and the
    # ABORT closes the association (its session kept 10 s for retransmissions).
    bad = [to_vip(40000, 0x9000, SCTPChunkAbort(), chksum=0x12345678), to_vip(41000, 0, SCTPChunkInit(init_tag=0x2000), chksum=0x12345678)]
    # The oracles see a wrong CRC32c as wrong (so their verdicts above mean something).
    assert not any(crc_ok(bytes(x)) for x in bad)
    assert tshark_checksums(tmp_path, f"bad-{fam}", [bytes(x) for x in bad]) == ["0", "0"]
    s = Sniffers(lab, where)
    send(lab, c, "a0", bad)
    assert s.stop() == [[], [], []]
    assert gw.errors().get((node, "sctp-bad-checksum")) == 2
    assert state(40000) == "sctp_established"
    assert not any(r["client_port"] == 41000 for r in gw.ctl("show", "lb", "sessions", "limit", "1000")["data"]["sessions"])
    s = Sniffers(lab, where)
    send(lab, c, "a0", [to_vip(40000, 0x9000, SCTPChunkData(tsn=7, data=b"NGSetupRequest")), to_vip(40000, 0x9000, SCTPChunkAbort())])
    out = s.stop()
    assert out[0] == [] and len(out[1 + b]) == 2 and out[2 - b] == [], out
    for raw in out[1 + b]:
        assert crc_ok(raw) and l3(raw)[SCTP].sport == snat_port
    assert SCTPChunkAbort in l3(out[1 + b][1])
    r = row(40000)
    assert r["state"] == "sctp_closed" and r["expires_in_ms"] <= 10_000, r
    errs = gw.errors()
    assert errs.get((node, "new-session")) == 16 and errs.get((node, "reply-translated")) == 2, errs
    code, _, _ = gw.stop()
    assert code == 0


@pytest.mark.parametrize("fam", [4, 6])
def test_sctp_multihomed_init_through_nat(lab, vecgate, tmp_path, fam):
    """A multi-homed client's INIT listing its addresses (IPv4, IPv6, a host name) among
    other parameters reaches the backend without them (through a NAT they are the wrong
    addresses: the backend would reach the client around the translation), the other
    parameters byte for byte in order, the IP length and CRC32c right as scapy reads
    them; the backend's INIT ACK listing its own comes back to the client likewise."""
    from scapy.layers.sctp import (SCTP, SCTPChunkInit, SCTPChunkInitAck, SCTPChunkParamIPv4Addr, SCTPChunkParamIPv6Addr,
                                   SCTPChunkParamHostname, SCTPChunkParamSupportedAddrTypes, SCTPChunkParamECNCapable,
                                   SCTPChunkParamFwdTSN, SCTPChunkParamStateCookie)
    f = FAMILIES[fam]
    node = f"lb{fam}-nat"
    c, bes, gw, where = running(lab, vecgate, tmp_path)
    addresses = lambda: [SCTPChunkParamIPv4Addr(addr="198.18.0.7"), SCTPChunkParamIPv6Addr(addr="2001:db8::7")]
    kept = [SCTPChunkParamSupportedAddrTypes(addr_type_list=["IPv4", "IPv6"]), SCTPChunkParamECNCapable(), SCTPChunkParamFwdTSN()]
    fixed = dict(a_rwnd=65536, n_out_streams=2, n_in_streams=2)

    def whole(raw, chunk_type, want_params):
        """The frame as scapy reads it: one chunk of `chunk_type` whose parameters are
        `want_params` exactly (bytes and chunk length), no address left, IP lengths and
        checksums right."""
        p = l3(raw)
        assert crc_ok(raw), p.summary()
        if fam == 4:
            assert p.len == len(raw) - 14, p.summary()
            from scapy.all import IP
            hdr = p.copy()
            del hdr.chksum
            assert IP(bytes(hdr)).chksum == p.chksum, "IPv4 header checksum"
        else:
            assert p.plen == len(raw) - 14 - 40, p.summary()
        ch = p[SCTP].payload
        assert isinstance(ch, chunk_type), p.summary()
        assert not any(x.type in (5, 6, 11) for x in ch.params), ch.params
        assert [bytes(x) for x in ch.params] == [bytes(x) for x in want_params], ch.params
        assert ch.len == 20 + sum(len(bytes(x)) for x in want_params)
        return p

    s = Sniffers(lab, where)
    init = SCTPChunkInit(init_tag=0x3000, init_tsn=7, params=[kept[0], *addresses(), kept[1], SCTPChunkParamHostname(hostname=b"peer"), kept[2]], **fixed)
    send(lab, c, "a0", [client_to_vip(fam, 40500, 0, init)])
    got_c, got0, got1 = s.stop()
    assert got_c == [] and len(got0) + len(got1) == 1, (got0, got1)
    b = 0 if got0 else 1
    p = whole((got0 or got1)[0], SCTPChunkInit, kept)
    assert (p.src, p.dst, p[SCTP].dport, p[SCTP].payload.init_tag) == (f["snat"], f["backends"][b], PORT, 0x3000), p.summary()
    snat_port = p[SCTP].sport

    cookie = SCTPChunkParamStateCookie(cookie=bytes(range(16)))
    s = Sniffers(lab, where)
    ack = SCTPChunkInitAck(init_tag=0x9100, init_tsn=9, params=[*addresses(), cookie, SCTPChunkParamECNCapable()], **fixed)
    send(lab, bes[b], "e0", [frame(fam, BE_MAC[b], GW_B[b], f["backends"][b], f["snat"], PORT, snat_port, 0x3000, ack)])
    got_c, _, _ = s.stop()
    assert len(got_c) == 1, got_c
    p = whole(got_c[0], SCTPChunkInitAck, [cookie, SCTPChunkParamECNCapable()])
    assert (p.src, p.dst, p[SCTP].sport, p[SCTP].dport, p[SCTP].tag) == (f["vip"], f["client"], PORT, 40500, 0x3000), p.summary()
    assert tshark_checksums(tmp_path, f"multihomed-{fam}", got_c) == ["1"]
    errs = gw.errors()
    assert errs.get((node, "sctp-addresses-removed")) == 2 and errs.get((node, "reply-translated")) == 1, errs
    code, _, _ = gw.stop()
    assert code == 0


def tshark_fields(tmp, name, frames, *fields):
    """tshark's reading of `fields` in each frame (a list of values per field)."""
    from scapy.all import wrpcap, Ether
    path = tmp / f"{name}.pcap"
    wrpcap(str(path), [Ether(f) for f in frames])
    args = [a for f in fields for a in ("-e", f)]
    r = subprocess.run(["tshark", "-r", str(path), "-o", "sctp.checksum:CRC 32c", "-T", "fields", "-E", "occurrence=a", "-E", "aggregator=,", *args],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return [[v.split(",") if v else [] for v in line.split("\t")] for line in r.stdout.splitlines()]


@pytest.mark.parametrize("fam", [4, 6])
def test_sctp_asconf_unlisted_through_nat(lab, vecgate, tmp_path, fam):
    """An INIT offering dynamic address reconfiguration (ASCONF and ASCONF-ACK among its
    Supported Extensions, with FORWARD-TSN and AUTH, and the AUTH parameters RFC 5061
    asks for) reaches the backend offering FORWARD-TSN and AUTH only, as scapy and tshark
    dissect it: the parameter's length and padding right, the other parameters (the AUTH
    Chunk List naming ASCONF too: the association's key is made of it) byte for byte, the
    IP length and CRC32c right. The backend's INIT ACK offering ASCONF alone comes back
    without the parameter."""
    from scapy.layers.sctp import (SCTP, SCTPChunkInit, SCTPChunkInitAck, SCTPChunkParamSupportedExtensions, SCTPChunkParamRandom,
                                   SCTPChunkParamChunkList, SCTPChunkParamRequestedHMACFunctions, SCTPChunkParamAdaptationLayer,
                                   SCTPChunkParamECNCapable, SCTPChunkParamStateCookie)
    f = FAMILIES[fam]
    node = f"lb{fam}-nat"
    c, bes, gw, where = running(lab, vecgate, tmp_path)
    ASCONF, ASCONF_ACK, FORWARD_TSN, AUTH = 0xc1, 0x80, 0xc0, 0x0f
    auth = [SCTPChunkParamRandom(random=bytes(range(32))), SCTPChunkParamChunkList(chunk_list=[ASCONF, ASCONF_ACK]),
            SCTPChunkParamRequestedHMACFunctions(HMAC_functions_list=["SHA-1"])]
    fixed = dict(a_rwnd=65536, n_out_streams=2, n_in_streams=2)
    ext = lambda *types: SCTPChunkParamSupportedExtensions(supported_extensions=list(types))

    def whole(raw, chunk_type, want_params):
        p = l3(raw)
        assert crc_ok(raw), p.summary()
        assert (p.len == len(raw) - 14) if fam == 4 else (p.plen == len(raw) - 54), p.summary()
        ch = p[SCTP].payload
        assert isinstance(ch, chunk_type), p.summary()
        assert [bytes(x) for x in ch.params] == [bytes(x) for x in want_params], ch.params
        assert ch.len == 20 + sum(len(bytes(x)) for x in want_params)  # the last, ECN, has no padding
        return p

    s = Sniffers(lab, where)
    init = SCTPChunkInit(init_tag=0x3100, init_tsn=7, params=[ext(ASCONF, ASCONF_ACK, FORWARD_TSN, AUTH), *auth,
                                                               SCTPChunkParamAdaptationLayer(indication=0x1234), SCTPChunkParamECNCapable()], **fixed)
    send(lab, c, "a0", [client_to_vip(fam, 40600, 0, init)])
    got_c, got0, got1 = s.stop()
    assert got_c == [] and len(got0) + len(got1) == 1, (got0, got1)
    b = 0 if got0 else 1
    raw = (got0 or got1)[0]
    p = whole(raw, SCTPChunkInit, [ext(FORWARD_TSN, AUTH), *auth, SCTPChunkParamAdaptationLayer(indication=0x1234), SCTPChunkParamECNCapable()])
    assert (p.src, p.dst, p[SCTP].payload.init_tag) == (f["snat"], f["backends"][b], 0x3100), p.summary()
    se = p[SCTPChunkParamSupportedExtensions]
    assert (se.len, se.supported_extensions) == (6, [FORWARD_TSN, AUTH]), se
    # tshark, the other dissector: the supported chunk types, and ASCONF still in the
    # chunk types AUTH must cover; the CRC32c good.
    (status, supported, to_auth), = tshark_fields(tmp_path, f"asconf-init-{fam}", [raw], "sctp.checksum.status", "sctp.supported_chunk_type", "sctp.chunk_type_to_auth")
    assert status == ["1"] and supported == [str(FORWARD_TSN), str(AUTH)] and to_auth == [str(ASCONF), str(ASCONF_ACK)], (status, supported, to_auth)
    snat_port = p[SCTP].sport

    s = Sniffers(lab, where)
    cookie = SCTPChunkParamStateCookie(cookie=bytes(range(16)))
    ack = SCTPChunkInitAck(init_tag=0x9300, init_tsn=9, params=[cookie, ext(ASCONF_ACK, ASCONF), SCTPChunkParamECNCapable()], **fixed)
    send(lab, bes[b], "e0", [frame(fam, BE_MAC[b], GW_B[b], f["backends"][b], f["snat"], PORT, snat_port, 0x3100, ack)])
    got_c, _, _ = s.stop()
    assert len(got_c) == 1, got_c
    p = whole(got_c[0], SCTPChunkInitAck, [cookie, SCTPChunkParamECNCapable()])
    assert (p.src, p.dst, p[SCTP].dport, p[SCTP].tag) == (f["vip"], f["client"], 40600, 0x3100), p.summary()
    (status, supported), = tshark_fields(tmp_path, f"asconf-ack-{fam}", got_c, "sctp.checksum.status", "sctp.supported_chunk_type")
    assert status == ["1"] and supported == [], supported
    errs = gw.errors()
    assert errs.get((node, "sctp-asconf-unlisted")) == 2 and errs.get((node, "sctp-addresses-removed")) is None, errs
    code, _, _ = gw.stop()
    assert code == 0


@pytest.mark.parametrize("fam", [4, 6])
def test_sctp_asconf_dropped_through_nat(lab, vecgate, tmp_path, fam):
    """On a translated association, an ASCONF adding an address (after its AUTH chunk)
    from the client and an ASCONF-ACK from the backend are dropped by name, neither
    reaching the other end; the association's DATA and SACK go on both ways."""
    from scapy.layers.sctp import (SCTP, SCTPChunkInit, SCTPChunkInitAck, SCTPChunkAddressConf, SCTPChunkAddressConfAck,
                                   SCTPChunkAuthentication, SCTPChunkParamIPv4Addr, SCTPChunkParamIPv6Addr, SCTPChunkParamAddIPAddr,
                                   SCTPChunkParamSuccessIndication, SCTPChunkData, SCTPChunkSACK)
    f = FAMILIES[fam]
    node = f"lb{fam}-nat"
    c, bes, gw, where = running(lab, vecgate, tmp_path)
    s = Sniffers(lab, where)
    send(lab, c, "a0", [client_to_vip(fam, 40700, 0, SCTPChunkInit(init_tag=0x3200, init_tsn=7, a_rwnd=65536, n_out_streams=2, n_in_streams=2))])
    got_c, got0, got1 = s.stop()
    assert got_c == [] and len(got0) + len(got1) == 1, (got0, got1)
    b = 0 if got0 else 1
    snat_port = l3((got0 or got1)[0])[SCTP].sport
    from_backend = lambda *chunks: frame(fam, BE_MAC[b], GW_B[b], f["backends"][b], f["snat"], PORT, snat_port, 0x3200, *chunks)
    s = Sniffers(lab, where)
    send(lab, bes[b], "e0", [from_backend(SCTPChunkInitAck(init_tag=0x9400, init_tsn=9, a_rwnd=65536, n_out_streams=2, n_in_streams=2))])
    assert len(s.stop()[0]) == 1

    addr = (lambda a: SCTPChunkParamIPv4Addr(addr=a)) if fam == 4 else (lambda a: SCTPChunkParamIPv6Addr(addr=a))
    new = "198.18.0.9" if fam == 4 else "2001:db8::9"
    add = SCTPChunkParamAddIPAddr(correlation_id=1, addr_type="IPv4" if fam == 4 else "IPv6", addr=new)
    auth = SCTPChunkAuthentication(shared_key_id=0, HMAC_function=1, HMAC=b"\x11" * 20)
    asconf = client_to_vip(fam, 40700, 0x9400, auth / SCTPChunkAddressConf(seq=9, params=[addr(f["client"]), add]))
    asconf_ack = from_backend(auth / SCTPChunkAddressConfAck(seq=9, params=[SCTPChunkParamSuccessIndication(correlation_id=1)]))
    # The oracle reads them as what they are (scapy built them; tshark agrees).
    assert [r[0] for r in tshark_fields(tmp_path, f"asconf-{fam}", [bytes(asconf), bytes(asconf_ack)], "sctp.chunk_type")] == [["15", "193"], ["15", "128"]]
    s = Sniffers(lab, where)
    send(lab, c, "a0", [asconf])
    send(lab, bes[b], "e0", [asconf_ack])
    assert s.stop() == [[], [], []]
    errs = gw.errors()
    assert errs.get((node, "sctp-asconf-dropped")) == 2 and errs.get((node, "reply-translated")) == 1, errs

    s = Sniffers(lab, where)
    send(lab, c, "a0", [client_to_vip(fam, 40700, 0x9400, SCTPChunkData(tsn=7, data=b"NGSetupRequest"))])
    send(lab, bes[b], "e0", [from_backend(SCTPChunkSACK(cumul_tsn_ack=7))])
    out = s.stop()
    assert len(out[0]) == 1 and len(out[1 + b]) == 1 and out[2 - b] == [], out
    assert SCTPChunkData in l3(out[1 + b][0]) and SCTPChunkSACK in l3(out[0][0])
    assert crc_ok(out[0][0]) and crc_ok(out[1 + b][0])
    assert gw.errors().get((node, "sctp-asconf-dropped")) == 2
    code, _, _ = gw.stop()
    assert code == 0
