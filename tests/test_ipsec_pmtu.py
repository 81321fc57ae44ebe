"""Path MTU learning per outbound ESP SA (RFC 4301 §8.2, RFC 1191 / RFC 8201), end to
end in pcap mode. A router on the path sends an ICMP frag-needed (Packet Too Big over
IPv6) quoting the ESP packet vecgate sent (built by scapy from vecgate's own output);
`espN-pmtu` lowers the SA's path MTU and the next inner packet too big for it with DF
gets a frag-needed with that MTU less the tunnel's overhead. Forged errors (a wrong SPI,
wrong quoted addresses or ports, sent to another of our addresses, an MTU under the
family's floor) change nothing and are counted by name.

pcap mode reads up to a vector (engine::VECTOR_SIZE packets) at once, and within one
vector the inner packets reach espN-encrypt before the ICMP reaches espN-pmtu (it has
two more nodes to cross): the probe packet goes after filler packets (to a blackhole
route) that push it into a later vector, as it would come later in time on a live
link."""
import re
from pathlib import Path

import pytest
from conftest import GW_MAC0, HOST_MAC, run_pcap
from test_ipsec import OUT_SPI, ends, sa_config

from scapy.all import ICMP, IP, UDP, Ether, IPv6, ICMPv6PacketTooBig, Raw, raw

ROUTER = {4: "198.18.0.254", 6: "2001:db8::fe"}
VECTOR_SIZE = int(re.search(r"pub const VECTOR_SIZE: usize = (\d+);",
                            (Path(__file__).parent.parent / "crates/engine/src/lib.rs").read_text()).group(1))


def inner(i, length, df=True):
    """A UDP packet of `length` IP bytes into ipsec_tunnel0 (IPv4, DF)."""
    pkt = IP(src="198.18.0.2", dst="198.19.60.7", ttl=64, flags="DF" if df else 0) / UDP(sport=1000 + i, dport=9)
    return Ether(src=HOST_MAC, dst=GW_MAC0) / pkt / Raw(b"x" * (length - len(pkt)))


def fillers():
    return [Ether(src=HOST_MAC, dst=GW_MAC0) / IP(src="198.18.0.2", dst="198.19.254.1") / UDP(sport=7, dport=7)
            for _ in range(VECTOR_SIZE)]


def too_big(outer, esp_l3, mtu, quote_len=None, to=None):
    """The router's error about `esp_l3` (bytes of our outer packet from its IP header),
    quoting `quote_len` bytes of it (routers quote as much as fits in 576 / 1280)."""
    local, _ = ends(outer)
    q = esp_l3[:quote_len or (576 - 28 if outer == 4 else 1280 - 48)]
    if outer == 4:
        return Ether(src=HOST_MAC, dst=GW_MAC0) / IP(src=ROUTER[4], dst=to or local) / ICMP(type=3, code=4, nexthopmtu=mtu) / Raw(q)
    return Ether(src=HOST_MAC, dst=GW_MAC0) / IPv6(src=ROUTER[6], dst=to or local) / ICMPv6PacketTooBig(mtu=mtu) / Raw(q)


def sent_esp(vecgate, tmp, outer, udp):
    """The ESP packet (from its outer IP header) vecgate sends for a small inner packet."""
    d = tmp / "first"
    d.mkdir()
    _, out1, c, _ = run_pcap(vecgate, d, [inner(0, 100)], sa_config("aes-gcm-128", outer, udp))
    assert len(out1) == 1, c
    return raw(out1[0])[14:]


def frag_needed_mtu(out0):
    """The next-hop MTUs of the frag-needed messages vecgate sent back to the host."""
    return [p[ICMP].nexthopmtu for p in out0 if ICMP in p and p[ICMP].type == 3 and p[ICMP].code == 4]


def probe(vecgate, tmp, name, outer, udp, errors, size):
    """Run [a small inner packet, `errors`, fillers, an inner packet of `size` with DF]:
    (frag-needed MTUs back to the host, ESP packets out, counters)."""
    d = tmp / name
    d.mkdir()
    out0, out1, c, _ = run_pcap(vecgate, d, [inner(0, 100)] + errors + fillers() + [inner(1, size)], sa_config("aes-gcm-128", outer, udp))
    return frag_needed_mtu(out0), len(out1), c


@pytest.mark.parametrize("outer,udp", [(4, False), (4, True), (6, False), (6, True)], ids=["v4", "v4-udp", "v6", "v6-udp"])
def test_frag_needed_about_our_esp_lowers_the_sas_mtu(vecgate, tmp_path, outer, udp):
    esp = sent_esp(vecgate, tmp_path, outer, udp)
    # Without an error: the tunnel's MTU is eth1's (1400) less the overhead.
    mtus, sent, c = probe(vecgate, tmp_path, "plain", outer, udp, [], 1400)
    assert len(mtus) == 1 and sent == 1, c
    link_inner = mtus[0]
    assert 1300 < link_inner < 1400
    # A path 100 bytes narrower than the link: a packet that fit the link's tunnel does
    # not fit the path's.
    size = link_inner - 50
    mtus, sent, c = probe(vecgate, tmp_path, "learned", outer, udp, [too_big(outer, esp, 1300)], size)
    assert c.get((f"esp{outer}-pmtu", "pmtu-learned")) == 1, c
    assert c.get((f"ip{outer}-local", "icmp-ignored"), 0) == 0, c
    assert mtus == [link_inner - 100], (mtus, c)
    assert sent == 1, "only the small packet went out"
    assert c.get((f"esp{outer}-encrypt", "inner-too-big")) == 1, c


@pytest.mark.parametrize("outer,udp", [(4, False), (4, True), (6, True)], ids=["v4", "v4-udp", "v6-udp"])
def test_forged_or_out_of_range_errors_change_nothing(vecgate, tmp_path, outer, udp):
    esp = sent_esp(vecgate, tmp_path, outer, udp)
    hl = 20 if outer == 4 else 40
    spi_at = hl + (8 if udp else 0)

    def patched(at, value: bytes):
        b = bytearray(esp)
        b[at:at + len(value)] = value
        return bytes(b)

    wrong_spi = patched(spi_at, (OUT_SPI + 1).to_bytes(4, "big"))
    other = bytes([198, 18, 1, 9]) if outer == 4 else bytes.fromhex("20010db8000100000000000000000009")
    alen = len(other)
    wrong_src = patched(12 if outer == 4 else 8, other)
    wrong_dst = patched(12 + alen if outer == 4 else 8 + alen, other)
    floor = 575 if outer == 4 else 1279
    not_ours = [too_big(outer, wrong_spi, 1300), too_big(outer, wrong_src, 1300), too_big(outer, wrong_dst, 1300),
                # To our other address: an error about our ESP comes back to its source.
                too_big(outer, esp, 1300, to="198.18.0.1" if outer == 4 else "2001:db8::1")]
    if udp:
        not_ours.append(too_big(outer, patched(hl + 2, (4501).to_bytes(2, "big")), 1300))
    # Under the family's floor; not below eth1's MTU.
    errors = not_ours + [too_big(outer, esp, floor), too_big(outer, esp, 1400)]
    if udp:
        # The 8 bytes RFC 792 asks for: UDP's header, not the SPI.
        errors.append(too_big(outer, esp, 1300, quote_len=hl + 8))
    mtus, _, c = probe(vecgate, tmp_path, "plain", outer, udp, [], 1400)
    link_inner = mtus[0]
    mtus, sent, c = probe(vecgate, tmp_path, "forged", outer, udp, errors, link_inner - 50)
    node = f"esp{outer}-pmtu"
    assert c.get((node, "not-our-sa")) == len(not_ours), c
    assert c.get((node, "mtu-out-of-range")) == 1, c
    assert c.get((node, "mtu-not-lower")) == 1, c
    assert c.get((node, "quote-not-esp"), 0) == (1 if udp else 0), c
    assert c.get((node, "pmtu-learned"), 0) == 0, c
    assert mtus == [] and sent == 2, (mtus, c)


def test_esp_in_udp_from_its_own_port_learns_too(vecgate, tmp_path):
    """An outbound SA sending ESP in UDP from port 4501 to 4600 (`udp_src_port`,
    `udp_dst_port`) while ESP in UDP arrives on 4500: a frag-needed quoting its packet
    (UDP 4501 -> 4600) is about our ESP and lowers the SA's path MTU. ip4-local knew ESP
    in UDP only by a port it receives ESP in UDP on, and consumed this error as
    icmp-ignored: nothing was learned and the large packet left."""
    cfg = sa_config("aes-gcm-128", 4, True).replace("udp_encap = true", "udp_encap = true\nudp_src_port = 4501\nudp_dst_port = 4600", 1)
    d = tmp_path / "first"
    d.mkdir()
    _, out1, c, _ = run_pcap(vecgate, d, [inner(0, 100)], cfg)
    assert len(out1) == 1, c
    esp = raw(out1[0])[14:]
    assert (IP(esp)[UDP].sport, IP(esp)[UDP].dport) == (4501, 4600)
    d = tmp_path / "probe"
    d.mkdir()
    size = 1290
    out0, out1, c, _ = run_pcap(vecgate, d, [inner(0, 100), too_big(4, esp, 1300)] + fillers() + [inner(1, size)], cfg)
    assert c.get(("esp4-pmtu", "pmtu-learned")) == 1, c
    assert c.get(("ip4-local", "icmp-ignored"), 0) == 0, c
    mtus = frag_needed_mtu(out0)
    assert len(mtus) == 1 and mtus[0] < size and len(out1) == 1, (mtus, c)
