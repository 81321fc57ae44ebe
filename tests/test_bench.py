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
    for n in ["ethernet-input", f"{fam}-input", f"{fam}-lookup", f"{fam}-rewrite", "interface-output"]:
        assert n in names
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
