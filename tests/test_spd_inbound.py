"""The inbound SPD in the forwarding graph. eth0 has SPD 1 bound: every packet arriving on
it goes from ip4-input/ip6-input to ipsec4-input/ipsec6-input. Plain packets pass only
by a BYPASS policy (a plain packet of a PROTECT flow, a DISCARD flow and a flow of no
policy are dropped, each by its name); ESP goes on to esp4-decrypt, and what it opens
goes to ipsec4-decrypted/ipsec6-decrypted, where the inner packet must be one its inbound
policy protects with the SA it came through. scapy's ESP layer (an independent
implementation) builds the ESP; the inner packets that pass are compared with what it
sealed."""
import pytest
from conftest import GW_MAC0, HOST_MAC, run_pcap
from test_ipsec import IN_SPI, ends, sa_config, scapy_sa

from scapy.all import IP, UDP, Ether, IPv6, Raw, raw

SA2_SPI = 0x2002


def spd_config(udp):
    local, remote = ends(4)
    # SA 2: the keys scapy_sa makes from seed 3.
    from test_ipsec import keys
    ek, _ = keys("aes-gcm-128", 3)
    return sa_config("aes-gcm-128", 4, udp) + f"""
[[ipsec_sa]]
index = 2
spi = {SA2_SPI}
direction = "inbound"
algorithm = "aes-gcm-128"
enc_key = "{ek.hex()}"
local = "{local}"
remote = "{remote}"
{"udp_encap = true" if udp else ""}

[[ipsec_spd]]
id = 1
interfaces = ["eth0"]

# Inbound: remote is the packet's source.
[[ipsec_policy]]
spd = 1
direction = "inbound"
priority = 100
action = "protect"
sa = 1
remote = "198.19.60.0/24"

[[ipsec_policy]]
spd = 1
direction = "inbound"
priority = 100
action = "protect"
sa = 2
remote = "198.19.61.0/24"

[[ipsec_policy]]
spd = 1
direction = "inbound"
priority = 100
action = "protect"
sa = 1
remote = "2001:db8:160::/48"

[[ipsec_policy]]
spd = 1
direction = "inbound"
priority = 60
action = "discard"
remote = "198.18.0.66/32"

[[ipsec_policy]]
spd = 1
direction = "inbound"
priority = 50
action = "bypass"
remote = "198.18.0.0/25"

# What leaves by eth0 (the decrypted packets) in the clear.
[[ipsec_policy]]
spd = 1
direction = "outbound"
priority = 10
action = "bypass"
"""


def eth(l3):
    return Ether(src=HOST_MAC, dst=GW_MAC0) / l3


@pytest.mark.parametrize("udp", [False, True], ids=["esp", "esp-in-udp"])
def test_inbound_spd_checks_plain_and_decrypted_packets(vecgate, tmp_path, udp):
    local, remote = ends(4)
    sa1 = scapy_sa("aes-gcm-128", 4, udp, IN_SPI, 2, remote, local)
    sa2 = scapy_sa("aes-gcm-128", 4, udp, SA2_SPI, 3, remote, local)

    def inner(src, n, v6=False):
        if v6:
            return IPv6(src=src, dst="2001:db8::2", hlim=30) / UDP(sport=9, dport=2000 + n) / Raw(bytes([n]) * (20 + n))
        return IP(src=src, dst="198.18.0.2", ttl=30) / UDP(sport=9, dport=2000 + n) / Raw(bytes([n]) * (20 + n))

    passes = [
        (sa1, inner("198.19.60.7", 1)),
        (sa1, inner("2001:db8:160::7", 2, v6=True)),
        (sa2, inner("198.19.61.7", 3)),
    ]
    mismatched = [
        (sa1, inner("198.19.61.7", 4)),  # SA 2's flow, sent through SA 1
        (sa1, inner("198.19.62.7", 5)),  # no policy at all
        (sa2, inner("198.19.60.8", 6)),  # SA 1's flow, sent through SA 2
    ]
    esp = [eth(sa.encrypt(p)) for sa, p in passes + mismatched]
    plain = [
        eth(IP(src="198.19.60.7", dst="198.18.0.2") / UDP(sport=9, dport=2001) / Raw(b"x" * 21)),  # PROTECT flow, in the clear
        eth(IP(src="198.18.0.2", dst="198.19.1.7") / UDP(sport=7, dport=9) / Raw(b"bypass")),
        eth(IP(src="198.18.0.66", dst="198.19.1.7") / UDP(sport=7, dport=9) / Raw(b"discard")),
        eth(IP(src="198.18.0.200", dst="198.19.1.7") / UDP(sport=7, dport=9) / Raw(b"none")),
    ]
    out0, out1, c, _ = run_pcap(vecgate, tmp_path, esp + plain, spd_config(udp))
    assert c.get(("esp4-decrypt", "decrypted")) == len(esp), c
    assert c.get(("ipsec4-decrypted", "policy-mismatch")) == 3, c
    assert not c.get(("ipsec6-decrypted", "policy-mismatch")), c
    assert c.get(("ipsec4-input", "plain-on-protected-flow")) == 1, c
    assert c.get(("ipsec4-input", "policy-discard")) == 1, c
    assert c.get(("ipsec4-input", "no-policy")) == 1, c
    # The protected inner packets left by eth0 (its outbound BYPASS), intact.
    # (IPv4 and IPv6 leave by separate node paths, so not in the order sent.)
    assert len(out0) == len(passes), c
    got = {p.payload[UDP].dport: p.payload for p in out0}
    for _, want in passes:
        l3 = got[want[UDP].dport]
        assert (l3.src, l3.dst) == (want.src, want.dst)
        assert bytes(l3[UDP].payload) == bytes(want[UDP].payload)
    # The bypassed plain packet was forwarded out eth1 in the clear.
    assert len(out1) == 1 and bytes(IP(raw(out1[0])[14:])[UDP].payload) == b"bypass", c


def test_without_the_binding_nothing_is_checked(vecgate, tmp_path):
    """The same SPD, not bound: the packets it would stop go through (so the test above
    shows the binding at work, not something else dropping them)."""
    local, remote = ends(4)
    sa1 = scapy_sa("aes-gcm-128", 4, False, IN_SPI, 2, remote, local)
    frames = [
        eth(sa1.encrypt(IP(src="198.19.61.7", dst="198.18.0.2") / UDP(sport=9, dport=2004) / Raw(b"m"))),
        eth(IP(src="198.19.60.7", dst="198.18.0.2") / UDP(sport=9, dport=2001) / Raw(b"x")),
        eth(IP(src="198.18.0.200", dst="198.19.1.7") / UDP(sport=7, dport=9) / Raw(b"none")),
    ]
    cfg = spd_config(False).replace('interfaces = ["eth0"]', "interfaces = []")
    out0, out1, c, _ = run_pcap(vecgate, tmp_path, frames, cfg)
    assert (len(out0), len(out1)) == (2, 1), c
    assert not [k for k, n in c.items() if k[0].startswith("ipsec4-") and n], c
