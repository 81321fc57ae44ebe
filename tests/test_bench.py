"""`vecgate bench` smoke: every scenario runs, delivers every packet it generated, and
reports the documented JSON shape. No timing is asserted (that is the report's job)."""
import json
import subprocess

import pytest


@pytest.mark.parametrize("scenario", ["ip4-forward", "ip6-forward", "ip4-forward-1m", "ip6-forward-1m"])
def test_bench_scenario_shape(vecgate, scenario):
    r = subprocess.run([str(vecgate), "bench", scenario, "--packets", "200000", "--json", "--core", "0"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    for k in ["scenario", "packets", "mpps", "cycles_per_packet", "total_cycles_per_packet", "nodes"]:
        assert k in rep
    assert rep["scenario"] == scenario
    assert rep["packets"] >= 200000 and rep["delivered"] == rep["packets"]
    names = [n["name"] for n in rep["nodes"]]
    fam = "ip6" if scenario.startswith("ip6") else "ip4"
    # A forwarded packet's nodes: on a small table ethernet-input looks it up and rewrites
    # it itself (the lookup's fast path); a million routes it hands to the lookup, which
    # looks the vector up at once and rewrites. ipN-input and ipN-rewrite take only what
    # their fast paths leave: none here.
    large = scenario.endswith("-1m")
    for n in ["ethernet-input", "interface-output"] + ([f"{fam}-lookup"] if large else []):
        assert n in names
    for n in [f"{fam}-input", f"{fam}-rewrite"] + ([] if large else [f"{fam}-lookup"]):
        assert n not in names, names
    for n in rep["nodes"]:
        assert {"name", "calls", "vectors", "packets", "cycles_per_packet"} <= set(n)
    if scenario.endswith("-1m"):
        assert rep["routes"] >= 1_000_000
    # The graph's cycles are the sum of its nodes' (generator excluded).
    total = sum(n["cycles_per_packet"] * n["packets"] for n in rep["nodes"] if n["name"] != "pg-input") / rep["packets"]
    assert abs(total - rep["cycles_per_packet"]) < 0.01 * rep["cycles_per_packet"] + 0.01


def test_unknown_scenario_is_refused(vecgate):
    r = subprocess.run([str(vecgate), "bench", "warp-drive"], capture_output=True, text=True, timeout=30)
    assert r.returncode != 0 and "ip4-forward" in r.stderr


@pytest.mark.parametrize("scenario,args,node", [
    ("gtpu4-encap", [], "gtpu4-encap"),
    ("gtpu4-decap", ["--tunnels", "5000", "--checksum", "software"], "gtpu4-input"),
    ("gtpu6-encap", ["--inner-size", "1492", "--inner", "ip6"], "gtpu6-encap"),
    ("gtpu6-decap", ["--checksum", "zero", "--disable", "all"], "gtpu6-input"),
])
def test_gtpu_bench_scenarios(vecgate, scenario, args, node):
    r = subprocess.run([str(vecgate), "bench", scenario, "--packets", "100000", "--json", "--core", "0"] + args,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["delivered"] == rep["packets"] >= 100000
    names = {n["name"]: n for n in rep["nodes"]}
    assert names[node]["packets"] == rep["packets"]
    g = rep["gtpu"]
    assert g["tunnels"] == (5000 if "--tunnels" in args else 1)
    assert g["rss_bytes"] > 0 and g["table_bytes"] > 0
    if "--disable" in args:
        assert not any(g["techniques"].values())
        # Without the bypass, GTP-U goes through the route lookup and ipN-local.
        assert "ip6-local" in names
    else:
        assert all(g["techniques"].values())


@pytest.mark.parametrize("packets", [100000, 1000000])
def test_reassembly_bench_delivers_one_packet_per_two_fragments(vecgate, packets):
    """1,000,000: a warm-up of an odd number of vectors (the default 20,000,000's too)
    ended between a vector of first fragments and the one completing them, and the
    bench called itself broken."""
    r = subprocess.run([str(vecgate), "bench", "gtpu4-decap-frag", "--packets", str(packets), "--json", "--core", "0", "--inner-size", "1400"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    names = {n["name"]: n for n in rep["nodes"]}
    assert rep["packets"] >= packets and rep["delivered"] == rep["packets"] // 2
    assert names["ip4-reassembly"]["packets"] == rep["packets"]
    assert names["gtpu4-input"]["packets"] == rep["delivered"]


def test_gtpu_bench_refuses_bad_options(vecgate):
    for args, words in [(["--disable", "warp"], "lookup_cache"), (["--checksum", "maybe"], "zero"),
                        (["--tunnels", "100000"], "--inner ip6")]:
        r = subprocess.run([str(vecgate), "bench", "gtpu4-encap", "--packets", "1000"] + args, capture_output=True, text=True, timeout=60)
        assert r.returncode != 0 and words in r.stderr, (args, r.stderr)


def test_upf_bench_reaches_past_the_ipv4_ues_and_takes_rule_sets(vecgate):
    """The UPF downlink with IPv6 UEs past the 32 768 IPv4 ones: every packet finds its
    session (a /64 each); sessions without QER and URR run; bad values are refused."""
    r = subprocess.run([str(vecgate), "bench", "upf4-downlink", "--tunnels", "40000", "--inner", "ip6",
                        "--packets", "100000", "--json", "--core", "0"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    names = {n["name"]: n for n in rep["nodes"]}
    assert rep["delivered"] == rep["packets"] >= 100000
    assert names["upf6-downlink"]["packets"] == rep["packets"] and rep["upf"]["sessions"] == 40000
    r = subprocess.run([str(vecgate), "bench", "upf4-uplink", "--tunnels", "100", "--session-rules", "pdr-far",
                        "--packets", "20000", "--json", "--core", "0"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["delivered"] == rep["packets"] >= 20000
    for args, words in [(["upf4-downlink", "--tunnels", "40000"], "--inner ip6"),
                        (["upf4-uplink", "--session-rules", "some"], "pdr-far")]:
        r = subprocess.run([str(vecgate), "bench", *args, "--packets", "1000"], capture_output=True, text=True, timeout=60)
        assert r.returncode != 0 and words in r.stderr, (args, r.stderr)


def test_bench_compare_reports_every_scenario_against_the_baseline(vecgate):
    """scripts/bench-compare.sh: interleaved rounds, one table per build, the baseline's
    extra exactly zero and every other scenario with the tunnel node in its row."""
    import pathlib
    script = pathlib.Path(__file__).resolve().parent.parent / "scripts" / "bench-compare.sh"
    r = subprocess.run([str(script), "--rounds", "1", "--packets", "100000", "--bin", str(vecgate),
                        "ip4-forward", "gue4-encap", "gue4-decap"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    rows = {line.split()[0]: line.split() for line in r.stdout.splitlines()
            if line.split() and line.split()[0] in ("ip4-forward", "gue4-encap", "gue4-decap")}
    assert set(rows) == {"ip4-forward", "gue4-encap", "gue4-decap"}, r.stdout
    assert rows["ip4-forward"][3] == "+0.0" and rows["ip4-forward"][4] == "1.00" and rows["ip4-forward"][5] == "+0.0" and rows["ip4-forward"][6] == "+0.0"
    # The vector-median extra: zero for the baseline, a number for the others.
    assert rows["ip4-forward"][8] == "+0.0" and rows["ip4-forward"][9] == "+0.0" and rows["gue4-decap"][9].startswith(("+", "-")) and float(rows["gue4-decap"][7]) > 0 and rows["gue4-decap"][8].startswith(("+", "-"))
    assert "gue4-encap" in rows["gue4-encap"][10:] and "gue4-input" in rows["gue4-decap"][10:]
    # The held extra is a number for scenarios that have the control node (interface-output).
    assert rows["gue4-decap"][6].startswith(("+", "-")) and rows["gue4-decap"][6] != "-", r.stdout
    assert "host steal" in r.stdout
