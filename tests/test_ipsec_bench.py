"""`vecgate bench ipsec4-encrypt` smoke: every packet goes through `ipsec4-output` and
`esp4-encrypt` to the sink, the report names both nodes and the SPD's figures, the flow
cache answers all but the first packet of each flow (and nothing with --no-flow-cache),
`--churn` changes policies under load without losing a packet of the flows it leaves
alone, and bad options are refused; `vecgate bench esp4-decrypt --export` writes the ESP
packet that scapy opens. No timing."""
import json
import subprocess

import pytest


def run(vecgate, *args, packets=50000):
    return subprocess.run([str(vecgate), "bench", "ipsec4-encrypt", "--packets", str(packets), "--json", "--core", "0", *args],
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("alg", ["null", "aes-gcm-128"])
def test_ipsec_bench_runs_through_the_spd_and_esp(vecgate, alg):
    r = run(vecgate, "--policies", "1000", "--position", "1000", "--flows", "100", "--alg", alg)
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["scenario"] == "ipsec4-encrypt" and rep["delivered"] == rep["packets"] >= 50000
    nodes = {n["name"]: n for n in rep["nodes"]}
    assert nodes["ipsec4-output"]["packets"] == rep["packets"]
    assert nodes["esp4-encrypt"]["packets"] == rep["packets"]
    ip = rep["ipsec"]
    assert (ip["policies"], ip["position"], ip["flows"], ip["alg"]) == (1000, 1000, 100, alg)
    # Near misses and the match: two selector shapes, whatever the number of policies.
    assert ip["shapes"] == 2
    # The warm-up filled the cache: every measured packet is a hit.
    assert (ip["cache_hits"], ip["cache_misses"]) == (rep["packets"], 0)


def test_ipsec_bench_without_the_flow_cache_classifies_every_packet(vecgate):
    r = run(vecgate, "--policies", "100", "--position", "1", "--no-flow-cache")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["delivered"] == rep["packets"]
    assert (rep["ipsec"]["flow_cache"], rep["ipsec"]["cache_hits"]) == (0, 0)


def test_ipsec_bench_churn_loses_no_packet_of_unaffected_flows(vecgate):
    """100,000 flows (source ports and addresses), DISCARD policies for four source ports
    added and deleted 1000 times a second by the control thread while the run goes: the
    report counts the changes, and every packet is either delivered or discarded by a
    churned policy (at most the packets of the flows they select)."""
    r = run(vecgate, "--policies", "10", "--position", "10", "--flows", "100000", "--churn", "1000", "--alg", "null",
            packets=300000)
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    ip, churn = rep["ipsec"], rep["ipsec"]["churn"]
    assert ip["flows"] >= 100000 and churn["rate"] == 1000 and churn["changes"] > 0, churn
    assert churn["affected_flows"] == 4 * ip["flows"] // 1024, churn
    assert churn["lost"] == 0 and rep["delivered"] + churn["discarded"] == rep["packets"], churn
    assert churn["discarded"] <= churn["affected_packets"], churn
    # Each change bumps the policy set's version, yet only the churned ports' flows can
    # be selected by a change: every other flow's cached decision is kept (revalidated),
    # and only lookups of the affected flows go stale.
    assert churn["cache_revalidated"] > 0, churn
    assert churn["cache_stale"] <= churn["affected_packets"], churn


def test_ipsec_bench_refuses_bad_options(vecgate):
    for args, word in ((["--policies", "10", "--position", "11"], "--position"), (["--policies", "0"], "--policies"),
                       (["--flows", "0"], "--flows"), (["--inner-size", "20"], "--inner-size"),
                       (["--churn", "2000000"], "--churn")):
        r = run(vecgate, *args)
        assert r.returncode != 0 and word in r.stderr, (args, r.stderr)


@pytest.mark.parametrize("alg, key_len", [("aes-gcm-128", 16), ("aes-gcm-256", 32)])
def test_esp_decrypt_bench_exports_the_packet_it_decrypts(vecgate, tmp_path, alg, key_len):
    """`vecgate bench esp4-decrypt --export` (what scripts/bench-esp-decrypt-vs-vpp.sh
    gives VPP) writes the ESP packet the benchmark sends again and again, not its inner
    packet: scapy's ESP opens it with the bench's keys (0xa5 bytes, the salt too) into the
    inner packet, and replayed with `--frames` every packet is decrypted and delivered."""
    from scapy.all import IP, UDP, rdpcap, raw
    from scapy.layers.ipsec import ESP, SecurityAssociation

    r = subprocess.run([str(vecgate), "bench", "esp4-decrypt", "--alg", alg, "--inner-size", "100", "--export", str(tmp_path)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    frames = rdpcap(str(tmp_path / "frames.pcap"))
    assert len(frames) == 1, frames
    l3 = IP(raw(frames[0])[14:])
    assert (l3.src, l3.dst, l3[ESP].spi, l3[ESP].seq) == ("198.18.1.2", "198.18.1.1", 0x1000, 1)
    sa = SecurityAssociation(ESP, spi=0x1000, crypt_algo="AES-GCM", crypt_key=b"\xa5" * (key_len + 4),
                             tunnel_header=IP(src="198.18.1.2", dst="198.18.1.1"))
    inner = sa.decrypt(l3)
    assert (inner[IP].src, inner[IP].dst, inner[UDP].dport, len(inner)) == ("198.18.0.2", "198.19.0.1", 9, 100), inner.show(dump=True)

    r = subprocess.run([str(vecgate), "bench", "esp4-decrypt", "--alg", alg, "--frames", str(tmp_path / "frames.pcap"),
                        "--packets", "20000", "--json", "--core", "0"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    nodes = {n["name"]: n for n in rep["nodes"]}
    assert rep["delivered"] == rep["packets"] >= 20000 and nodes["esp4-decrypt"]["packets"] == rep["packets"], rep
