"""The outbound SPD in the forwarding graph: packets leaving by an interface with an SPD
bound go through `ipsec4-output`, which protects (ESP, decrypted here by scapy's ESP
layer), bypasses (sent in the clear) or discards (counted by name) per policy priority."""
from conftest import GW_MAC0, HOST_MAC, run_pcap

from scapy.all import IP, UDP, Ether, Raw, raw
from scapy.layers.ipsec import ESP, SecurityAssociation

SPI = 0x3001
KEY = bytes(range(20))  # AES-128 key + 4-byte salt

CONFIG = f"""
[[ipsec_sa]]
index = 0
spi = {SPI}
direction = "outbound"
algorithm = "aes-gcm-128"
enc_key = "{KEY.hex()}"
local = "198.18.1.1"
remote = "198.18.1.2"

[[ipsec_spd]]
id = 1
interfaces = ["eth1"]

[[ipsec_policy]]
spd = 1
direction = "outbound"
priority = 100
action = "bypass"
remote = "198.19.1.0/24"

[[ipsec_policy]]
spd = 1
direction = "outbound"
priority = 90
action = "discard"
remote = "198.19.2.0/24"

[[ipsec_policy]]
spd = 1
direction = "outbound"
priority = 50
action = "protect"
sa = 0
remote = "198.19.0.0/16"
"""


def pkt(dst, i):
    return Ether(src=HOST_MAC, dst=GW_MAC0) / IP(src="198.18.0.2", dst=dst, ttl=64) / UDP(sport=5000 + i, dport=9) / Raw(bytes([i]) * 40)


def test_outbound_spd_protects_bypasses_and_discards(vecgate, tmp_path):
    protected = [pkt("198.19.0.7", i) for i in range(3)]
    clear = [pkt("198.19.1.7", i) for i in range(2)]
    dropped = [pkt("198.19.2.7", 0)]
    out0, out1, c, _ = run_pcap(vecgate, tmp_path, protected + clear + dropped, CONFIG)
    assert not out0, c
    assert c.get(("ipsec4-output", "policy-discard")) == 1, c
    esp = [f for f in out1 if ESP in IP(raw(f)[14:])]
    plain = [f for f in out1 if UDP in IP(raw(f)[14:])]
    assert c.get(("esp4-encrypt", "encrypted")) == 3, c
    assert len(esp) == 3 and len(plain) == 2, (len(esp), len(plain), c)
    assert all(IP(raw(f)[14:]).dst == "198.19.1.7" for f in plain)
    peer = SecurityAssociation(ESP, spi=SPI, crypt_algo="AES-GCM", crypt_key=KEY,
                               tunnel_header=IP(src="198.18.1.1", dst="198.18.1.2"))
    for n, (frame, orig) in enumerate(zip(esp, protected)):
        l3 = IP(raw(frame)[14:])
        assert (l3.src, l3.dst, l3[ESP].spi, l3[ESP].seq) == ("198.18.1.1", "198.18.1.2", SPI, n + 1)
        inner = peer.decrypt(l3)
        want = orig[IP].copy()
        want.ttl -= 1
        del want.chksum
        assert raw(inner) == raw(IP(raw(want)))


def test_a_policy_protects_either_inner_family_with_a_tunnel_of_the_other(vecgate, tmp_path):
    """IPv6 protected by an IPv4 tunnel SA and IPv4 by an IPv6 one, by SPD policies (as
    routes into `ipsec_tunnelN` carry them): `ipsec6-output` sends PROTECT to
    `esp6-encrypt`, which hands a packet for an IPv4-outer SA to `esp4-encrypt` before
    counting it against the SA (it dropped them as `no-sa`, their sequence numbers and
    bytes counted as sent)."""
    from scapy.all import IPv6
    key6 = bytes(range(40, 60))
    cfg = CONFIG + f"""
[[ipsec_sa]]
index = 1
spi = {SPI + 1}
direction = "outbound"
algorithm = "aes-gcm-128"
enc_key = "{key6.hex()}"
local = "2001:db8:1::1"
remote = "2001:db8:1::2"

[[ipsec_policy]]
spd = 1
direction = "outbound"
priority = 100
action = "protect"
sa = 0
remote = "2001:db8:100::/48"

[[ipsec_policy]]
spd = 1
direction = "outbound"
priority = 100
action = "protect"
sa = 1
remote = "198.19.3.0/24"
"""
    six = [Ether(src=HOST_MAC, dst=GW_MAC0) / IPv6(src="2001:db8::2", dst="2001:db8:100::7", hlim=64) / UDP(sport=6000 + i, dport=9)
           / Raw(bytes([i]) * 30) for i in range(3)]
    four = [pkt("198.19.3.7", i) for i in range(2)]
    out0, out1, c, _ = run_pcap(vecgate, tmp_path, six + four, cfg)
    assert not c.get(("esp6-encrypt", "no-sa")) and not c.get(("esp4-encrypt", "no-sa")), c
    assert c.get(("esp6-encrypt", "to-outer-family")) == 3 and c.get(("esp4-encrypt", "to-outer-family")) == 2, c
    assert c.get(("esp4-encrypt", "encrypted")) == 3 and c.get(("esp6-encrypt", "encrypted")) == 2, c
    assert len(out1) == 5 and not out0, c
    over4 = SecurityAssociation(ESP, spi=SPI, crypt_algo="AES-GCM", crypt_key=KEY,
                                tunnel_header=IP(src="198.18.1.1", dst="198.18.1.2"))
    over6 = SecurityAssociation(ESP, spi=SPI + 1, crypt_algo="AES-GCM", crypt_key=key6,
                                tunnel_header=IPv6(src="2001:db8:1::1", dst="2001:db8:1::2"))
    esp4 = [IP(raw(f)[14:]) for f in out1 if raw(f)[12:14] == b"\x08\x00"]
    esp6 = [IPv6(raw(f)[14:]) for f in out1 if raw(f)[12:14] == b"\x86\xdd"]
    assert [p[ESP].seq for p in esp4] == [1, 2, 3] and [p[ESP].seq for p in esp6] == [1, 2]
    for l3, orig in zip(esp4, six):
        inner = over4.decrypt(l3)
        assert inner[UDP].sport == orig[UDP].sport and inner.hlim == 63 and bytes(inner[UDP].payload) == bytes(orig[Raw])
    for l3, orig in zip(esp6, four):
        inner = over6.decrypt(l3)
        assert inner[UDP].sport == orig[UDP].sport and inner.ttl == 63 and bytes(inner[UDP].payload) == bytes(orig[Raw])
