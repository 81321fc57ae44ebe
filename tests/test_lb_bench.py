"""`vecgate bench lb4-nat` smoke: the scenario delivers every packet, reports its LB
section (memory per session and per service) and refuses bad options. No timing."""
import json
import subprocess


def run(vecgate, *args, scenario="lb4-nat"):
    return subprocess.run([str(vecgate), "bench", scenario, "--packets", "100000", "--json", "--core", "0", *args],
                          capture_output=True, text=True, timeout=300)


def test_lb_bench_reports_its_services_and_memory(vecgate):
    r = run(vecgate, "--services", "200", "--backends", "5", "--flows", "1000")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["scenario"] == "lb4-nat" and rep["delivered"] == rep["packets"] >= 100000
    lb = rep["lb"]
    assert (lb["services"], lb["backends"], lb["flows"]) == (200, 5, 1000)
    assert lb["session_slot_bytes"] > 0 and lb["bytes_per_service"] >= 1021 * 4
    names = {n["name"]: n for n in rep["nodes"]}
    assert names["lb4-nat"]["packets"] == rep["packets"]



def test_lb_bench_sizes_the_session_table(vecgate):
    """--lb-sessions sets the workers' session table (lb.limits.sessions, whole buckets);
    without it the default's 2^20 slots."""
    sizes = {}
    for args in ([], ["--lb-sessions", "65536"], ["--lb-sessions", "60000"]):
        r = run(vecgate, "--services", "10", "--flows", "1000", *args)
        assert r.returncode == 0, r.stderr
        rep = json.loads(r.stdout)
        assert rep["delivered"] == rep["packets"]
        sizes[tuple(args)] = rep["lb"]["session_slots"]
    assert sizes == {(): 1 << 20, ("--lb-sessions", "65536"): 65536, ("--lb-sessions", "60000"): 65536}

def test_lb_bench_refuses_bad_options(vecgate):
    for args in (["--services", "0"], ["--flows", "0"], ["--backends", "0"]):
        r = run(vecgate, *args)
        assert r.returncode != 0 and "--services" in r.stderr, (args, r.stderr)


def test_lb_encap_bench_encapsulates_every_packet_in_lb4_nat(vecgate):
    r = run(vecgate, "--services", "100", "--backends", "4", "--flows", "500", scenario="lb4-encap")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["scenario"] == "lb4-encap" and rep["delivered"] == rep["packets"] >= 100000
    assert (rep["lb"]["services"], rep["lb"]["backends"]) == (100, 4)
    names = {n["name"]: n for n in rep["nodes"]}
    # One node chooses and encapsulates: no second LB node on the path.
    assert names["lb4-nat"]["packets"] == rep["packets"] and "lb4-encap" not in names
