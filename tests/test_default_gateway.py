"""The built-in default gateway (what `vecgate run` runs without a config) shows every
system it has: besides forwarding, GTP-U and GUE, an IPsec ESP tunnel both ways and the
service load balancer by NAT and by GRE. Its frames are captured (`pcap trace`) and read
by scapy, independently of vecgate: the ESP both ways decrypted with the keys the example
file publishes, the balanced packets translated or encapsulated as the services say."""
import json
import time
import tomllib
from collections import defaultdict
from pathlib import Path

from test_ctl import ctl, running  # noqa: F401  (fixture)

from scapy.all import GRE, IP, UDP, rdpcap
from scapy.layers.ipsec import ESP, SecurityAssociation

EXAMPLE = Path(__file__).resolve().parent.parent / "docs" / "examples" / "default-gateway.toml"


def sa_of(config, index):
    """scapy's SA for [[ipsec_sa]] `index` of the example (AES-GCM-128: key, then salt)."""
    sa = next(s for s in config["ipsec_sa"] if s["index"] == index)
    assert sa["algorithm"] == "aes-gcm-128", sa
    key = bytes.fromhex(sa["enc_key"])
    return SecurityAssociation(ESP, spi=sa["spi"], crypt_algo="AES-GCM", crypt_key=key, auth_algo="NULL", auth_key=None), sa


def decrypt(sa, p):
    """The inner packet of tunnel-mode ESP frame `p` (scapy keeps the outer header)."""
    d = sa.decrypt(p[IP].copy())
    assert d[IP].proto == 4, d.summary()
    return d[IP].payload


def capture(vecgate, sock, tmp_path, interface, count):
    f = tmp_path / f"{interface}.pcap"
    r = ctl(vecgate, sock, "pcap", "trace", interface, str(f), str(count))
    assert r.returncode == 0, r.stdout + r.stderr
    return f


def read_when_full(f, count, deadline):
    while time.time() < deadline:
        if f.exists():
            try:
                pkts = rdpcap(str(f))
                if len(pkts) >= count:
                    return pkts
            except Exception:  # the file is still being written
                pass
        time.sleep(0.3)
    raise AssertionError(f"{f.name}: fewer than {count} frames captured")


def test_default_gateway_esp_both_ways_read_by_scapy(vecgate, running, tmp_path):
    proc, sock = running
    config = tomllib.loads(EXAMPLE.read_text())
    out_sa, out_cfg = sa_of(config, 1)
    in_sa, in_cfg = sa_of(config, 2)
    # pg1 carries GTP-U, GUE and ESP both ways. 3,000 frames pass it in a few
    # milliseconds, less than the time between two bursts of a 20,000 packet/s stream
    # on a loaded machine: capture again (up to five times) until both ESP directions
    # are in what was captured.
    sent, received = [], []
    for attempt in range(5):
        (tmp_path / f"try{attempt}").mkdir()
        f = capture(vecgate, sock, tmp_path / f"try{attempt}", "pg1", 3000)
        pkts = read_when_full(f, 3000, time.time() + 20)
        sent += [p for p in pkts if ESP in p and p[IP].src == out_cfg["local"] and p[IP].dst == out_cfg["remote"]]
        received += [p for p in pkts if ESP in p and p[IP].src == in_cfg["remote"] and p[IP].dst == in_cfg["local"]]
        if sent and received:
            break
    assert sent and received, (len(sent), len(received))
    route = out_cfg["routes"][0].split("/")[0].rsplit(".", 1)[0] + "."
    for p in sent:
        assert p[ESP].spi == out_cfg["spi"], p.summary()
        inner = decrypt(out_sa, p)
        # Routed into ipsec_tunnel1 by its route; the sequence numbers rise from 1.
        assert inner[IP].dst.startswith(route) and inner[IP].src == "198.18.0.2" and UDP in inner, inner.summary()
    seqs = [p[ESP].seq for p in sent]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs), seqs[:10]
    stream = next(s for s in config["stream"] if s["name"] == "esp-from-peer")
    for p in received:
        assert p[ESP].spi == in_cfg["spi"], p.summary()
        inner = decrypt(in_sa, p)
        assert (inner[IP].src, inner[IP].dst) == (stream["inner_src"], stream["inner_dst"]) and UDP in inner, inner.summary()
    # What vecgate decrypted is what scapy could: every packet, none dropped.
    j = json.loads(ctl(vecgate, sock, "show", "errors", json_out=True).stdout)
    errors = {(e["node"], e["counter"]): e["count"] for e in j["data"]}
    assert errors.get(("esp4-decrypt", "decrypted"), 0) > 0, errors
    assert not [k for k in errors if k[0].startswith("esp4-") and k[1] not in ("decrypted", "encrypted")], errors


def test_default_gateway_balances_two_services_read_by_scapy(vecgate, running, tmp_path):
    proc, sock = running
    config = tomllib.loads(EXAMPLE.read_text())
    services = {s["name"]: s for s in config["lb_service"]}
    web, dns = services["demo/web:http"], services["demo/dns:dns"]
    snat = config["lb"]["snat4"]
    pkts = read_when_full(capture(vecgate, sock, tmp_path, "null0", 4000), 4000, time.time() + 20)
    # NAT: to a web backend's address and port, from the node's SNAT address.
    web_backends = {(b["addr"], b["port"]) for b in web["backends"]}
    nat = [p for p in pkts if IP in p and GRE not in p and UDP in p and (p[IP].dst, p[UDP].dport) in web_backends]
    assert nat and all(p[IP].src == snat for p in nat), len(nat)
    assert {p[IP].dst for p in nat} == {b[0] for b in web_backends}, "Maglev spreads 1024 flows over every backend"
    # GRE (direct server return): the client's packet whole, to the service address,
    # inside GRE from the node's address to a dns backend.
    gre = [p for p in pkts if GRE in p]
    assert gre, "no GRE frames on null0"
    backend_of = defaultdict(set)
    for p in gre:
        assert p[IP].src == snat and p[IP].dst in {b["addr"] for b in dns["backends"]}, p.summary()
        inner = p[GRE].payload
        assert inner[IP].dst == dns["vip"] and inner[UDP].dport == dns["port"] and inner[IP].src == "198.18.0.2", inner.summary()
        backend_of[inner[UDP].sport].add(p[IP].dst)
    # Each client flow keeps its backend (the session table).
    assert all(len(b) == 1 for b in backend_of.values()), {k: v for k, v in backend_of.items() if len(v) > 1}
    rows = json.loads(ctl(vecgate, sock, "show", "lb", "services", json_out=True).stdout)["data"]
    names = json.dumps(rows)
    assert "demo/web:http" in names and "demo/dns:dns" in names, rows
