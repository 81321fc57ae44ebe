"""UDP tunnels changed in place (issue 24): `vecgate ctl set udp tunnel` moves a
GRE-in-UDP tunnel to a new peer, port and key while a generator sends into it; every
packet leaves encapsulated, those before the change to the old peer and those after to
the new one — one switch, none lost. scapy (an independent implementation) dissects the
outer IPv4/UDP, the GRE header with its key and the inner packet. `show udp tunnel
remote|local|id` finds the tunnel where it now is."""
import json

from conftest import ctl, one_switch, tunnel_moved_under_paced_traffic
from scapy.all import GRE, IP, UDP

SENT = 2000
RATE = 400  # packets per second: the stream lasts five seconds


def test_set_udp_tunnel_moves_packets_to_the_new_peer_once_and_loses_none(vecgate, tmp_path):
    tunnel = """
[[udp_tunnel]]
local = "198.18.1.1"
remote = "198.18.1.2"
encap = "gre"
key = 7
routes = ["198.19.5.0/24"]
"""

    def change(sock):
        r = ctl(vecgate, sock, "set", "udp", "tunnel", "udp_tunnel0", "remote", "198.18.1.3", "port", "5000", "key", "0x1234")
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == "udp_tunnel0: remote 198.18.1.2 -> 198.18.1.3, port 4754 -> 5000, key 0x7 -> 0x1234", r.stdout
        r = ctl(vecgate, sock, "show", "udp", "tunnel", "remote", "198.18.1.3")
        assert r.returncode == 0 and "1 UDP tunnels match" in r.stdout, r.stdout
        assert "udp_tunnel0" in r.stdout and "198.18.1.1 -> 198.18.1.3 gre port 5000" in r.stdout and "key 0x1234" in r.stdout, r.stdout
        r = ctl(vecgate, sock, "show", "udp", "tunnel", "remote", "198.18.1.2")
        assert r.returncode == 0 and "0 UDP tunnels match" in r.stdout, r.stdout
        r = ctl(vecgate, sock, "--json", "show", "udp", "tunnel", "id", "0")
        assert json.loads(r.stdout)["data"][0]["remote"] == "198.18.1.3", r.stdout
        # A refused change names what is wrong and changes nothing.
        r = ctl(vecgate, sock, "set", "udp", "tunnel", "udp_tunnel0", "port", "2152")
        assert r.returncode != 0 and "2152" in r.stderr, (r.stdout, r.stderr)

    sent = tunnel_moved_under_paced_traffic(vecgate, tmp_path, "core", tunnel, "198.19.5.1", SENT, RATE, change)
    frames = [p for p in sent if UDP in p]
    assert len(frames) == SENT, f"{len(frames)} of {SENT} packets encapsulated"
    peers = []
    for p in frames:
        gre = GRE(bytes(p[UDP].payload))  # GRE-in-UDP (RFC 8086): the GRE header right after UDP
        assert gre.key_present == 1 and gre.proto == 0x0800, gre.show(dump=True)
        inner = gre.payload
        assert isinstance(inner, IP) and inner.dst == "198.19.5.1" and inner.src == "198.18.0.2", repr(inner)
        assert p[IP].src == "198.18.1.1"
        peers.append((p[IP].dst, p[UDP].dport, gre.key))
    old = ("198.18.1.2", 4754, 7)
    new = ("198.18.1.3", 5000, 0x1234)
    assert one_switch(peers, old, new) >= 50
