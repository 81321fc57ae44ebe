"""Transport-mode ESP (RFC 4303 §3.1.1), checked by scapy's ESP layer in transport mode
(an independent implementation) both ways. The peer 198.18.1.2 / 2001:db8:1::2 sends
the gateway an ICMP echo request in transport-mode ESP (ESP between its own IP header
and the ICMP message); vecgate decrypts it, restores the header, answers the echo, and
its outbound SPD on eth1 protects the reply with the outbound transport SA. scapy
decrypts the reply and finds the echo reply to the request it sealed: same identifier,
sequence and data, the addresses swapped."""
import pytest
from conftest import GW_MAC0, HOST_MAC, run_pcap
from test_ipsec import ALGS, ends, keys

from scapy.all import ICMP, IP, UDP, Ether, ICMPv6EchoReply, ICMPv6EchoRequest, IPv6, Raw, raw
from scapy.layers.ipsec import ESP, SecurityAssociation

IN_SPI, OUT_SPI = 0x5001, 0x6001


def config(alg, outer, udp):
    local, remote = ends(outer)
    (ek, ik), (ek2, ik2) = keys(alg, 1), keys(alg, 2)
    udp_line = "udp_encap = true" if udp else ""
    return f"""
[[ipsec_sa]]
index = 5
spi = {IN_SPI}
direction = "inbound"
mode = "transport"
algorithm = "{alg}"
enc_key = "{ek2.hex()}"
integ_key = "{ik2.hex()}"
local = "{local}"
remote = "{remote}"
{udp_line}

[[ipsec_sa]]
index = 6
spi = {OUT_SPI}
direction = "outbound"
mode = "transport"
algorithm = "{alg}"
enc_key = "{ek.hex()}"
integ_key = "{ik.hex()}"
local = "{local}"
remote = "{remote}"
{udp_line}

[[ipsec_spd]]
id = 1
interfaces = ["eth1"]

[[ipsec_policy]]
spd = 1
direction = "outbound"
priority = 100
action = "protect"
sa = 6
remote = "{remote}"
protocol = "{'icmp' if outer == 4 else 'icmpv6'}"

[[ipsec_policy]]
spd = 1
direction = "outbound"
priority = 10
action = "bypass"
"""


def scapy_sa(alg, udp, spi, seed):
    crypt, _, auth, _ = ALGS[alg]
    ek, ik = keys(alg, seed)
    return SecurityAssociation(ESP, spi=spi, crypt_algo=crypt, crypt_key=ek or None, auth_algo=auth, auth_key=ik or None,
                               nat_t_header=UDP(sport=4500, dport=4500) if udp else None)


CASES = [(a, 4, False) for a in ALGS] + [("aes-gcm-128", 6, False), ("chacha20-poly1305", 6, False), ("aes-cbc-sha256", 6, False),
                                         ("aes-gcm-128", 4, True), ("aes-gcm-128", 6, True)]


@pytest.mark.parametrize("alg,outer,udp", CASES, ids=[f"{a}-v{o}{'-udp' if u else ''}" for a, o, u in CASES])
def test_echo_through_transport_mode_both_ways(vecgate, tmp_path, alg, outer, udp):
    local, remote = ends(outer)
    peer_out = scapy_sa(alg, udp, IN_SPI, 2)
    peer_in = scapy_sa(alg, udp, OUT_SPI, 1)
    if outer == 4:
        requests = [IP(src=remote, dst=local, ttl=9) / ICMP(type=8, id=0x77, seq=n) / Raw(bytes([n]) * (8 + 61 * n)) for n in range(3)]
    else:
        requests = [IPv6(src=remote, dst=local, hlim=9) / ICMPv6EchoRequest(id=0x77, seq=n, data=bytes([n]) * (8 + 61 * n)) for n in range(3)]
    frames = []
    for r in requests:
        sealed = peer_out.encrypt(r)
        # Transport mode: the request's own addresses stay outside, and ESP follows them.
        assert (sealed.src, sealed.dst) == (remote, local)
        frames.append(Ether(src=HOST_MAC, dst=GW_MAC0) / sealed)
    out0, out1, c, _ = run_pcap(vecgate, tmp_path, frames, config(alg, outer, udp))
    assert c.get((f"esp{outer}-decrypt", "decrypted")) == len(requests), c
    assert c.get((f"esp{outer}-encrypt", "encrypted")) == len(requests), c
    assert not out0 and len(out1) == len(requests), c
    for n, (frame, req) in enumerate(zip(out1, requests)):
        l3 = IP(raw(frame)[14:]) if outer == 4 else IPv6(raw(frame)[14:])
        assert (l3.src, l3.dst) == (local, remote)
        if udp:
            assert (l3[UDP].sport, l3[UDP].dport) == (4500, 4500)
        assert l3[ESP].spi == OUT_SPI and l3[ESP].seq == n + 1
        reply = peer_in.decrypt(l3)
        assert (reply.src, reply.dst) == (local, remote)
        if outer == 4:
            assert reply.proto == 1 and reply[ICMP].type == 0, reply.show(dump=True)
            assert (reply[ICMP].id, reply[ICMP].seq) == (req[ICMP].id, req[ICMP].seq)
            assert bytes(reply[ICMP].payload) == bytes(req[ICMP].payload)
            # The header scapy rebuilt is the one vecgate sent: length and checksum hold.
            again = reply.copy()
            del again.chksum, again.len
            assert raw(IP(raw(again)))[:20] == raw(reply)[:20]
        else:
            assert reply.nh == 58 and ICMPv6EchoReply in reply, reply.show(dump=True)
            e = reply[ICMPv6EchoReply]
            assert (e.id, e.seq, e.data) == (0x77, n, req[ICMPv6EchoRequest].data)
            assert reply.plen == len(raw(reply)) - 40


def test_transport_sa_with_routes_is_refused_by_field(vecgate, tmp_path):
    import subprocess

    from conftest import gateway_config, write_pcap
    cfg = config("aes-gcm-128", 4, False).replace("index = 6\n", 'index = 6\nroutes = ["198.19.9.0/24"]\n')
    write_pcap(tmp_path / "in.pcap", [])
    r = subprocess.run([str(vecgate), "pcap", "--config", str(gateway_config(tmp_path, cfg))], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "routes" in r.stderr and "transport" in r.stderr, r.stderr


TUNNELS = {
    "gue": ("""
[[udp_tunnel]]
local = "198.18.1.1"
remote = "198.18.1.2"
encap = "gue"
routes = ["198.19.90.0/24"]
""", 6080),
    "gtpu": ("""
[[gtpu_tunnel]]
local = "198.18.1.1"
remote = "198.18.1.2"
teid_in = 100
teid_out = 200
ue = "198.19.90.0/24"
""", 2152),
}


@pytest.mark.parametrize("kind", list(TUNNELS))
def test_a_tunnels_outer_packets_are_protected_by_a_transport_sa(vecgate, tmp_path, kind):
    """What the docs promise transport mode: the gateway's tunnels' outer packets, which
    leave by eth1 where an SPD protects the tunnel's UDP port with the outbound transport
    SA. They went straight out of the tunnel node in the clear, past the link's policies
    (the peer, holding its inbound side to the same policy, dropped them)."""
    tunnel, port = TUNNELS[kind]
    cfg = config("aes-gcm-128", 4, False).replace('protocol = "icmp"', f'protocol = "udp"\nremote_ports = "{port}"') + tunnel
    inner = [Ether(src=HOST_MAC, dst=GW_MAC0) / IP(src="198.18.0.2", dst="198.19.90.7") / UDP(sport=7000 + n, dport=9) / Raw(bytes([n]) * 30)
             for n in range(3)]
    out0, out1, c, _ = run_pcap(vecgate, tmp_path, inner, cfg)
    assert c.get(("esp4-encrypt", "encrypted")) == 3 and not out0 and len(out1) == 3, c
    peer_in = scapy_sa("aes-gcm-128", False, OUT_SPI, 1)
    for n, frame in enumerate(out1):
        l3 = IP(raw(frame)[14:])
        assert (l3.src, l3.dst, l3.proto, l3.ttl) == ("198.18.1.1", "198.18.1.2", 50, 64), l3.summary()
        outer = peer_in.decrypt(l3)
        assert outer[UDP].dport == port, outer.show(dump=True)
        assert raw(outer).endswith(bytes([n]) * 30)


def test_a_forwarded_packet_is_not_put_in_transport_mode_esp(vecgate, tmp_path):
    """Transport mode protects the gateway's own packets to the peer: a host's packet that
    a PROTECT policy sends to a transport SA (an SPD written for tunnel mode, say) is
    dropped by name; it left as ESP under the host's own addresses, which no SA at the
    peer takes (it checks the outer addresses), so it was lost unseen."""
    local, remote = ends(4)
    forwarded = Ether(src=HOST_MAC, dst=GW_MAC0) / IP(src="198.18.0.2", dst=remote) / ICMP(type=8, id=5, seq=1) / Raw(b"f" * 20)
    peer_out = scapy_sa("aes-gcm-128", False, IN_SPI, 2)
    own = Ether(src=HOST_MAC, dst=GW_MAC0) / peer_out.encrypt(IP(src=remote, dst=local) / ICMP(type=8, id=6, seq=1) / Raw(b"o" * 20))
    out0, out1, c, _ = run_pcap(vecgate, tmp_path, [forwarded, own], config("aes-gcm-128", 4, False))
    assert c.get(("esp4-encrypt", "transport-not-endpoints")) == 1, c
    # The gateway's own echo reply still goes through the SA.
    assert c.get(("esp4-encrypt", "encrypted")) == 1 and len(out1) == 1 and not out0, c
    reply = scapy_sa("aes-gcm-128", False, OUT_SPI, 1).decrypt(IP(raw(out1[0])[14:]))
    assert (reply.src, reply.dst, reply[ICMP].id) == (local, remote, 6)


@pytest.mark.parametrize("udp", [False, True], ids=["esp", "esp-in-udp"])
@pytest.mark.parametrize("kind", list(TUNNELS))
def test_a_tunnel_over_a_transport_sa_counts_esp_in_its_inner_mtu(vecgate, tmp_path, kind, udp):
    """A tunnel whose outer packets a transport-mode SA protects leaves room for ESP's
    worst case in its inner MTU (AES-GCM: ESP header 8, IV 8, padding up to 3, trailer 2,
    ICV 16; 8 more in UDP), so its largest inner packet still leaves eth1 (MTU 1400) as
    one ESP packet, and one byte more (DF) gets a frag-needed carrying that MTU back to
    its source. The inner MTU counted the tunnel's headers only: the one byte more passed
    the tunnel, and espN-encrypt dropped its outer packet with the frag-needed sent to the
    gateway itself, so the source never learned."""
    from scapy.all import ICMP, IPerror
    tunnel, port = TUNNELS[kind]
    cfg = config("aes-gcm-128", 4, udp).replace('protocol = "icmp"', f'protocol = "udp"\nremote_ports = "{port}"') + tunnel
    headers = 20 + 8 + (4 if kind == "gue" else 8)
    mtu = 1400 - headers - (8 + 8 + 3 + 2 + 16) - (8 if udp else 0)

    def inner(size, n):
        return Ether(src=HOST_MAC, dst=GW_MAC0) / IP(src="198.18.0.2", dst="198.19.90.7", flags="DF") / UDP(sport=7000 + n, dport=9) / Raw(bytes([n]) * (size - 28))

    out0, out1, c, _ = run_pcap(vecgate, tmp_path, [inner(mtu, 1), inner(mtu + 1, 2)], cfg)
    assert c.get(("esp4-encrypt", "encrypted")) == 1 and len(out1) == 1, c
    l3 = IP(raw(out1[0])[14:])
    assert len(l3) <= 1400 and (l3.proto == 17) == udp, l3.summary()
    outer = scapy_sa("aes-gcm-128", udp, OUT_SPI, 1).decrypt(l3)
    assert outer[UDP].dport == port and raw(outer).endswith(bytes([1]) * (mtu - 28))
    # The one byte more: frag-needed with the tunnel's inner MTU, to its source.
    assert len(out0) == 1, c
    err = out0[0][IP]
    assert (err.dst, err[ICMP].type, err[ICMP].code, err[ICMP].nexthopmtu) == ("198.18.0.2", 3, 4, mtu), err.show(dump=True)
    assert err[IPerror].dst == "198.19.90.7"
    assert c.get(("esp4-encrypt", "inner-too-big"), 0) == 0, c


@pytest.mark.parametrize("policies", ["icmp-only", "bypass-port"])
@pytest.mark.parametrize("kind", list(TUNNELS))
def test_a_tunnel_its_spd_does_not_protect_keeps_the_whole_link_mtu(vecgate, tmp_path, kind, policies):
    """An outbound transport SA between the tunnel's addresses, but eth1's SPD does not
    send the tunnel's outer packets to it: its PROTECT policy selects ICMP only, or a
    higher bypass policy takes the tunnel's UDP port. The tunnel's inner MTU is eth1's
    less its own headers: the largest inner packet (DF) leaves in the clear at 1400
    bytes, one byte more gets frag-needed with that MTU. ESP's bytes were taken off
    whenever such an SA existed, so the largest packet got a frag-needed too."""
    from scapy.all import IPerror
    tunnel, port = TUNNELS[kind]
    cfg = config("aes-gcm-128", 4, False)
    if policies == "bypass-port":
        cfg = cfg.replace('protocol = "icmp"', 'protocol = "udp"') + f"""
[[ipsec_policy]]
spd = 1
direction = "outbound"
priority = 200
action = "bypass"
protocol = "udp"
remote_ports = "{port}"
"""
    headers = 20 + 8 + (4 if kind == "gue" else 8)
    mtu = 1400 - headers

    def inner(size, n):
        return Ether(src=HOST_MAC, dst=GW_MAC0) / IP(src="198.18.0.2", dst="198.19.90.7", flags="DF") / UDP(sport=7000 + n, dport=9) / Raw(bytes([n]) * (size - 28))

    out0, out1, c, _ = run_pcap(vecgate, tmp_path, [inner(mtu, 1), inner(mtu + 1, 2)], cfg + tunnel)
    assert c.get(("esp4-encrypt", "encrypted"), 0) == 0 and len(out1) == 1, c
    l3 = IP(raw(out1[0])[14:])
    assert (l3.len, l3.proto, l3[UDP].dport) == (1400, 17, port), l3.summary()
    assert raw(l3).endswith(bytes([1]) * (mtu - 28))
    assert len(out0) == 1, c
    err = out0[0][IP]
    assert (err.dst, err[ICMP].type, err[ICMP].code, err[ICMP].nexthopmtu) == ("198.18.0.2", 3, 4, mtu), err.show(dump=True)
    assert err[IPerror].dst == "198.19.90.7"


@pytest.mark.parametrize("udp", [False, True], ids=["esp", "esp-in-udp"])
@pytest.mark.parametrize("kind", list(TUNNELS))
def test_outer_fragments_of_a_protected_tunnel_leave_as_esp(vecgate, tmp_path, kind, udp):
    """`fragment = "outer"` on a tunnel whose outer packets a transport-mode SA protects:
    an inner IPv4 packet without DF, larger than the tunnel's inner MTU, is encapsulated
    whole, sealed whole by the SA (ESP goes on whole datagrams, RFC 4303 §3.3.4) and the
    ESP packet fragmented to eth1's MTU. scapy reassembles the fragments and decrypts the
    tunnel's outer packet with the inner packet whole in it. The tunnel fragmented its
    outer packet itself and sent the fragments past the link's policies, in the clear."""
    from scapy.layers.inet import defragment
    tunnel, port = TUNNELS[kind]
    cfg = (config("aes-gcm-128", 4, udp).replace('protocol = "icmp"', f'protocol = "udp"\nremote_ports = "{port}"')
           + tunnel + 'fragment = "outer"\n')
    payload = bytes(range(256)) * 5 + bytes(52)
    big = Ether(src=HOST_MAC, dst=GW_MAC0) / IP(src="198.18.0.2", dst="198.19.90.7") / UDP(sport=7001, dport=9) / Raw(payload)
    out0, out1, c, _ = run_pcap(vecgate, tmp_path, [big], cfg)
    assert not out0 and len(out1) >= 2, c
    frags = [IP(raw(f)[14:]) for f in out1]
    for f in frags:
        assert len(f) <= 1400 and (f.src, f.dst) == ("198.18.1.1", "198.18.1.2"), f.summary()
        # Every fragment is of the ESP packet (or ESP in UDP): none carries the tunnel.
        assert f.proto == (17 if udp else 50), f.summary()
    whole = [p for p in defragment(frags) if IP in p and p[IP].flags.MF == 0 and p[IP].frag == 0]
    assert len(whole) == 1, [p.summary() for p in defragment(frags)]
    l3 = IP(raw(whole[0]))
    if udp:
        assert (l3[UDP].sport, l3[UDP].dport) == (4500, 4500)
    assert l3[ESP].spi == OUT_SPI
    outer = scapy_sa("aes-gcm-128", udp, OUT_SPI, 1).decrypt(l3)
    assert outer[UDP].dport == port and raw(outer).endswith(payload), outer.summary()
    assert c.get(("esp4-encrypt", "encrypted")) == 1 and c.get(("esp4-encrypt", "fragment-outer")) == 1, c
