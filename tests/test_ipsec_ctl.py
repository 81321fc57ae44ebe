"""IPsec SAs through the running dataplane's control socket: added by the CLI and the
JSON API, routed into, shown without their keys, deleted with their routes; and the
tunnel MTU of an ESP tunnel (pcap mode), with the inner MTU scapy reads from the ICMP
error."""
import json
import socket

import pytest
from conftest import GW_MAC0, HOST_MAC, run_pcap
from test_ctl import ctl, running  # noqa: F401  (fixture)

from scapy.all import ICMP, IP, UDP, Ether, Raw, raw

GCM_KEY = "0102030405060708090a0b0c0d0e0f1011121314"


def test_sas_added_shown_without_keys_and_deleted_live(vecgate, running):
    proc, sock = running
    r = ctl(vecgate, sock, "ipsec", "sa", "add", "3", "spi", "0x3001", "outbound", "alg", "aes-gcm-128", "enc-key", GCM_KEY,
            "local", "198.18.1.1", "remote", "198.18.1.9", "route", "198.19.113.0/24")
    assert r.returncode == 0 and "ipsec_tunnel3" in r.stdout, r.stdout + r.stderr
    # The JSON API takes the config's fields.
    req = {"op": "ipsec_sa_add", "index": 4, "spi": 0x3002, "direction": "inbound", "algorithm": "aes-cbc-sha256",
           "enc_key": "ab" * 16, "integ_key": "cd" * 32, "local": "198.18.1.1", "remote": "198.18.1.9", "udp_encap": True}
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(str(sock))
        s.sendall((json.dumps(req) + "\n").encode())
        reply = json.loads(s.makefile().readline())
    assert reply["ok"], reply
    # Refused by name: a taken index, a duplicate inbound SPI, a key of the wrong length.
    r = ctl(vecgate, sock, "ipsec", "sa", "add", "3", "spi", "0x3009", "outbound", "alg", "null", "local", "198.18.1.1", "remote", "198.18.1.9")
    assert r.returncode != 0 and "index 3" in r.stdout + r.stderr
    r = ctl(vecgate, sock, "ipsec", "sa", "add", "5", "spi", "0x3002", "inbound", "alg", "null", "local", "198.18.1.1", "remote", "198.18.1.9")
    assert r.returncode != 0 and "0x3002" in r.stdout + r.stderr
    r = ctl(vecgate, sock, "ipsec", "sa", "add", "6", "spi", "0x3003", "outbound", "alg", "aes-gcm-256", "enc-key", GCM_KEY,
            "local", "198.18.1.1", "remote", "198.18.1.9")
    assert r.returncode != 0 and "enc_key" in r.stdout + r.stderr and GCM_KEY not in r.stdout + r.stderr
    assert ctl(vecgate, sock, "ip", "route", "add", "198.19.114.0/24", "interface", "ipsec_tunnel3").returncode == 0
    fib = ctl(vecgate, sock, "show", "ip", "fib").stdout
    assert "198.19.113.0/24" in fib and "198.19.114.0/24" in fib and "ipsec_tunnel3" in fib, fib
    shown = ctl(vecgate, sock, "show", "ipsec", "sa")
    j = ctl(vecgate, sock, "show", "ipsec", "sa", json_out=True)
    for out in (shown.stdout, j.stdout):
        assert GCM_KEY not in out and "abab" not in out and "cdcd" not in out and "enc_key" not in out, out
    rows = {r["index"]: r for r in json.loads(j.stdout)["data"]["sas"]}
    assert rows[3]["name"] == "ipsec_tunnel3" and rows[3]["spi"] == 0x3001 and rows[3]["algorithm"] == "aes-gcm-128"
    assert rows[4]["direction"] == "inbound" and rows[4]["udp_encap"] == {"src": 4500, "dst": 4500}
    # One SA by its index (what strongSwan's plugin asks); an index no SA has is refused.
    one = json.loads(ctl(vecgate, sock, "show", "ipsec", "sa", "4", json_out=True).stdout)["data"]["sas"]
    assert [r["index"] for r in one] == [4] and (one[0]["packets"], one[0]["bytes"]) == (0, 0), one
    r = ctl(vecgate, sock, "show", "ipsec", "sa", "99")
    assert r.returncode != 0 and "index 99: no SA has it" in r.stdout + r.stderr, r.stdout + r.stderr
    assert ctl(vecgate, sock, "ipsec", "sa", "del", "3").returncode == 0
    fib = ctl(vecgate, sock, "show", "ip", "fib").stdout
    assert "198.19.113.0/24" not in fib and "ipsec_tunnel3" not in fib, fib
    assert ctl(vecgate, sock, "ipsec", "sa", "del", "3").returncode != 0
    assert proc.poll() is None


def test_sa_dscp_added_shown_and_set_live(vecgate, running, tmp_path):
    """An outbound tunnel-mode SA's `dscp` through the CLI (`ipsec sa add … dscp N`,
    `ipsec sa set <index> dscp …`) and the JSON API (`ipsec_sa_set`), shown by `show
    ipsec sa` (text ` dscp N`, JSON "dscp"); refused on a transport-mode or inbound SA
    naming the field and why, in ctl and in a config file (file, entry, field)."""
    import subprocess
    proc, sock = running
    r = ctl(vecgate, sock, "ipsec", "sa", "add", "7", "spi", "0x3007", "outbound", "alg", "aes-gcm-128", "enc-key", GCM_KEY,
            "local", "198.18.1.1", "remote", "198.18.1.9", "route", "198.19.117.0/24", "dscp", "46")
    assert r.returncode == 0, r.stdout + r.stderr

    def row(index):
        text = ctl(vecgate, sock, "show", "ipsec", "sa").stdout
        line = next(l for l in text.splitlines() if l.startswith(f"{index} "))
        j = json.loads(ctl(vecgate, sock, "show", "ipsec", "sa", str(index), json_out=True).stdout)["data"]["sas"][0]
        return line, j["dscp"]
    line, dscp = row(7)
    assert " dscp 46" in line and dscp == 46, line
    r = ctl(vecgate, sock, "ipsec", "sa", "set", "7", "dscp", "inherit")
    assert r.returncode == 0 and "SA 7: dscp inherit" in r.stdout, r.stdout + r.stderr
    line, dscp = row(7)
    assert " dscp" not in line and dscp == "inherit", line
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(str(sock))
        s.sendall((json.dumps({"op": "ipsec_sa_set", "index": 7, "dscp": 10}) + "\n").encode())
        reply = json.loads(s.makefile().readline())
    assert reply["ok"], reply
    assert row(7)[1] == 10
    why = 'dscp: 46: expected "inherit" except on an outbound tunnel-mode SA'
    r = ctl(vecgate, sock, "ipsec", "sa", "add", "8", "spi", "0x3008", "outbound", "transport", "alg", "aes-gcm-128", "enc-key",
            GCM_KEY, "local", "198.18.1.1", "remote", "198.18.1.9", "dscp", "46")
    assert r.returncode != 0 and why in r.stdout + r.stderr and "keep their own header" in r.stdout + r.stderr, r.stdout + r.stderr
    r = ctl(vecgate, sock, "ipsec", "sa", "add", "9", "spi", "0x3009", "inbound", "alg", "aes-gcm-128", "enc-key", GCM_KEY,
            "local", "198.18.1.1", "remote", "198.18.1.9")
    assert r.returncode == 0, r.stdout + r.stderr
    r = ctl(vecgate, sock, "ipsec", "sa", "set", "9", "dscp", "46")
    assert r.returncode != 0 and why in r.stdout + r.stderr and "inbound SA" in r.stdout + r.stderr, r.stdout + r.stderr
    assert row(9)[1] == "inherit"
    r = ctl(vecgate, sock, "ipsec", "sa", "set", "7", "dscp", "64")
    assert r.returncode != 0 and 'expected "inherit" or a DSCP 0 to 63' in r.stdout + r.stderr, r.stdout + r.stderr
    assert proc.poll() is None
    # In a config file: the file, the entry and the field.
    cfg = tmp_path / "bad.toml"
    cfg.write_text('[[interface]]\nname = "pg0"\ntype = "pg"\nmac = "02:00:00:00:00:01"\naddresses = ["198.18.1.1/24"]\n'
                   f'[[ipsec_sa]]\nindex = 0\nspi = 4097\ndirection = "outbound"\nmode = "transport"\nalgorithm = "aes-gcm-128"\n'
                   f'enc_key = "{GCM_KEY}"\nlocal = "198.18.1.1"\nremote = "198.18.1.2"\ndscp = 46\n')
    r = subprocess.run([str(vecgate), "run", "--config", str(cfg), "--duration", "1"], capture_output=True, text=True, timeout=20)
    assert r.returncode != 0 and f"bad.toml: ipsec_sa[0].{why}" in r.stderr, r.stderr


ESP_SA = f"""
[[ipsec_sa]]
index = 0
spi = 4097
direction = "outbound"
algorithm = "aes-gcm-128"
enc_key = "{GCM_KEY}"
local = "198.18.1.1"
remote = "198.18.1.2"
routes = ["198.19.60.0/24"]
"""


def test_esp_tunnel_mtu_answers_frag_needed_with_the_inner_mtu(vecgate, tmp_path):
    """eth1's MTU is 1400: an ESP tunnel (IPv4 outer, AES-GCM) carries inner packets of
    at most 1400 - 20 (IP) - 8 (ESP) - 8 (IV) - 3 (most padding) - 2 (trailer) - 16 (ICV)
    = 1343 bytes; a larger one with DF gets frag-needed with that MTU."""
    def inner(size):
        return Ether(src=HOST_MAC, dst=GW_MAC0) / IP(src="198.18.0.2", dst="198.19.60.7", flags="DF") / UDP(sport=7, dport=9) / Raw(b"m" * (size - 28))
    out0, out1, c, _ = run_pcap(vecgate, tmp_path, [inner(1343), inner(1344)], ESP_SA)
    assert len(out1) == 1 and len(out1[0]) - 14 <= 1400, c
    assert c.get(("esp4-encrypt", "inner-too-big")) == 1, c
    assert len(out0) == 1 and out0[0][ICMP].type == 3 and out0[0][ICMP].code == 4, out0
    assert out0[0][ICMP].nexthopmtu == 1343


def test_an_sa_mtu_cap_fits_the_tunnel_to_a_narrower_path(vecgate, tmp_path):
    """A path to the peer narrower than eth1 (a router's frag-needed about ESP is not
    learned): the SA's `mtu` caps its inner MTU as a GTP-U or UDP tunnel's does, so a DF
    packet over it gets frag-needed with the cap, one at the cap goes in, and with
    `tcp_mss_clamp` a SYN entering the tunnel has its MSS lowered to fit (scapy opens
    the ESP). Without the option an SA had no way to fit such a path."""
    from scapy.all import TCP
    from scapy.layers.ipsec import ESP, SecurityAssociation

    def inner(size):
        return Ether(src=HOST_MAC, dst=GW_MAC0) / IP(src="198.18.0.2", dst="198.19.60.7", flags="DF") / UDP(sport=7, dport=9) / Raw(b"m" * (size - 28))
    syn = Ether(src=HOST_MAC, dst=GW_MAC0) / IP(src="198.18.0.2", dst="198.19.60.7", flags="DF") / TCP(sport=4000, dport=80, flags="S", options=[("MSS", 1460)])
    cfg = ESP_SA + "mtu = 1200\ntcp_mss_clamp = true\n"
    out0, out1, c, _ = run_pcap(vecgate, tmp_path, [inner(1200), inner(1201), syn], cfg)
    assert c.get(("esp4-encrypt", "inner-too-big")) == 1 and c.get(("esp4-encrypt", "encrypted")) == 2, c
    assert len(out0) == 1 and out0[0][ICMP].type == 3 and out0[0][ICMP].code == 4 and out0[0][ICMP].nexthopmtu == 1200, out0
    peer = SecurityAssociation(ESP, spi=4097, crypt_algo="AES-GCM", crypt_key=bytes.fromhex(GCM_KEY),
                               tunnel_header=IP(src="198.18.1.1", dst="198.18.1.2"))
    opened = [peer.decrypt(IP(raw(f)[14:])) for f in out1]
    assert len(opened[0]) == 1200
    assert dict(opened[1][TCP].options)["MSS"] == 1160, opened[1][TCP].options
