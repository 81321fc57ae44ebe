"""Route changes in bulk (issue 23): `ip route batch <file>` applies many adds and deletes
in one request, all or nothing, against a running gateway; the FIB it publishes is
checked against Python's `ipaddress` (an independent prefix implementation)."""
import ipaddress
import json
import random
import socket
import time

import pytest

from test_ctl import ctl, running  # noqa: F401  (the fixture)


def fib_prefixes(vecgate, sock):
    r = ctl(vecgate, sock, "show", "ip", "fib", "limit", "0", json_out=True)
    assert r.returncode == 0, r.stderr
    return {row["prefix"]: row for row in json.loads(r.stdout)["data"]}


def random_routes(rng, n, avoid=()):
    """Distinct prefixes inside 198.19.0.0/16 and 2001:db8:4000::/34 (documentation and
    benchmarking space only), lengths as in BGP tables."""
    out = set()
    while len(out) < n:
        if rng.random() < 0.6:
            length = rng.choice([17, 20, 22, 24, 24, 24, 28, 32])
            net = ipaddress.ip_network((0xC6130000 | rng.getrandbits(16), length), strict=False)
            if net.subnet_of(ipaddress.ip_network("198.19.150.0/24")) or ipaddress.ip_network("198.19.150.0/24").subnet_of(net):
                continue  # the default gateway's UDP tunnel route
            if str(net) not in avoid:
                out.add((str(net), "198.18.2.2"))
        else:
            length = rng.choice([36, 40, 44, 48, 48, 56, 64, 128])
            addr = (0x20010DB8 << 96) | (1 << 94) | rng.getrandbits(94)
            out.add((str(ipaddress.ip_network((addr, length), strict=False)), "2001:db8:2::2"))
    return sorted(out)


def api(sock, req):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
        c.settimeout(120)
        c.connect(str(sock))
        c.sendall(json.dumps(req).encode() + b"\n")
        return json.loads(c.makefile().readline())


# The default gateway's UE routes (tunnel-owned: in the FIB, not in the listing).
UE_ROUTES = ["198.19.100.1/32", "2001:db8:200::1/128"]


def test_show_ip_fib_address_is_the_longest_match(vecgate, running, tmp_path):  # noqa: F811
    proc, sock = running
    rng = random.Random(7)
    routes = random_routes(rng, 1500)
    f = tmp_path / "routes.txt"
    f.write_text("\n".join(f"{p} via {nh}" for p, nh in routes) + "\n")
    assert ctl(vecgate, sock, "ip", "route", "batch", str(f)).returncode == 0
    listed = fib_prefixes(vecgate, sock)
    # The whole listing has the tunnels' UE routes too.
    assert set(UE_ROUTES) <= set(listed), UE_ROUTES
    nets = [ipaddress.ip_network(p) for p in listed]
    probes = []
    for p, _ in rng.sample(routes, 150):
        n = ipaddress.ip_network(p)
        probes.append(n.network_address + rng.randrange(n.num_addresses))
    probes += [ipaddress.ip_address(0xC6130000 | rng.getrandbits(16)) for _ in range(100)]
    probes += [ipaddress.ip_address((0x20010DB8 << 96) | (1 << 94) | rng.getrandbits(94)) for _ in range(100)]
    probes += [ipaddress.ip_address("198.19.100.1"), ipaddress.ip_address("2001:db8:200::1")]
    for a in probes:
        covering = [n for n in nets if n.version == a.version and a in n]
        want = str(max(covering, key=lambda n: n.prefixlen)) if covering else None
        r = api(sock, {"op": "show_ip_fib_entry", "query": str(a)})
        got = r["data"]["prefix"] if r["ok"] else None
        assert got == want, (str(a), r)
    r = api(sock, {"op": "show_ip_fib_entry", "query": "198.19.100.1"})
    assert r["data"]["kind"] == "tunnel" and r["data"]["interface"].startswith("gtpu_tunnel"), r
    # A prefix asks for exactly that prefix.
    p = routes[0][0]
    r = ctl(vecgate, sock, "show", "ip", "fib", p)
    assert r.returncode == 0 and p in r.stdout, r.stderr
    missing = str(ipaddress.ip_network(p).supernet(new_prefix=ipaddress.ip_network(p).prefixlen - 1)) if ipaddress.ip_network(p).prefixlen > 17 else None
    if missing and missing not in {x for x, _ in routes}:
        r = ctl(vecgate, sock, "show", "ip", "fib", missing)
        assert r.returncode != 0 and f"no route for exactly {missing}" in r.stderr, r.stderr


def test_route_batch_adds_and_deletes_all_or_nothing(vecgate, running, tmp_path):  # noqa: F811
    proc, sock = running
    rng = random.Random(23)
    before = fib_prefixes(vecgate, sock)
    routes = random_routes(rng, 3000, avoid=before)
    f = tmp_path / "routes.txt"
    f.write_text("# a batch\n" + "\n".join(f"{p} via {nh}" for p, nh in routes) + "\n")
    t0 = time.time()
    r = ctl(vecgate, sock, "ip", "route", "batch", str(f))
    assert r.returncode == 0, r.stderr
    assert "3000 routes added, 0 deleted" in r.stdout
    fib = fib_prefixes(vecgate, sock)
    for p, nh in routes:
        assert fib[p]["kind"] == "via" and fib[p]["next_hop"] == nh, (p, fib.get(p))
    assert len(fib) == len(before) + len(routes)

    # Delete every other one and add new ones in the same request.
    gone = routes[::2]
    fresh = [x for x in random_routes(random.Random(24), 500, avoid=before) if x not in routes]
    f2 = tmp_path / "batch2.txt"
    f2.write_text("".join(f"del {p}\n" for p, _ in gone) + "".join(f"{p} via {nh}\n" for p, nh in fresh))
    r = ctl(vecgate, sock, "ip", "route", "batch", str(f2))
    assert r.returncode == 0, r.stderr
    fib = fib_prefixes(vecgate, sock)
    want = (set(p for p, _ in routes) - set(p for p, _ in gone)) | set(p for p, _ in fresh)
    got = set(fib) - set(before)
    assert got == want

    # A bad line is named by file and line, on the client, and nothing is sent.
    bad = tmp_path / "bad.txt"
    bad.write_text("198.19.200.0/25 via 198.18.2.2\n198.19.201.0/25 sideways\n")
    r = ctl(vecgate, sock, "ip", "route", "batch", str(bad))
    assert r.returncode != 0 and f"{bad}:2: after 198.19.201.0/25: expected via" in r.stderr, r.stderr
    # A delete of a prefix without a route refuses the whole request.
    # (random_routes never makes a /25)
    bad.write_text("198.19.202.0/25 via 198.18.2.2\ndel 198.19.203.0/25\n")
    r = ctl(vecgate, sock, "ip", "route", "batch", str(bad))
    # The gateway's refusal of a line is named by its line of the file too.
    assert r.returncode != 0 and f"{bad}:2: no route for 198.19.203.0/25" in r.stderr, r.stderr
    # An add the router refuses (next hop on no connected subnet) undoes the deletes.
    keep = sorted(want)[0]
    bad.write_text(f"del {keep}\n198.19.204.0/25 via 198.18.99.9\n")
    r = ctl(vecgate, sock, "ip", "route", "batch", str(bad))
    assert r.returncode != 0 and f"{bad}:2: next hop 198.18.99.9" in r.stderr, r.stderr
    fib = fib_prefixes(vecgate, sock)
    assert set(fib) - set(before) == want, "a refused batch changed the table"

    # The JSON API takes the same batch.
    req = json.dumps({"op": "ip_route_batch", "add": ["198.19.205.0/25 via 198.18.2.2"], "del": [keep]})
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
        c.settimeout(120)
        c.connect(str(sock))
        c.sendall(req.encode() + b"\n")
        reply = c.makefile().readline()
    assert json.loads(reply)["ok"], reply
    fib = fib_prefixes(vecgate, sock)
    assert "198.19.205.0/25" in fib and keep not in fib


def test_show_ip_fib_is_bounded(vecgate, running, tmp_path):
    """The whole-table listing shows the first 1000 entries and says how many there
    are; `limit` asks for fewer or (0) all; tunnel routes show no internal code."""
    proc, sock = running
    f = tmp_path / "routes.txt"
    f.write_text("\n".join(f"198.19.{i // 256}.{i % 256}/32 via 198.18.2.2" for i in range(1200)) + "\n")
    assert ctl(vecgate, sock, "ip", "route", "batch", str(f)).returncode == 0
    r = ctl(vecgate, sock, "show", "ip", "fib", json_out=True)
    rows = json.loads(r.stdout)["data"]
    assert len(rows) == 1000, len(rows)
    text = ctl(vecgate, sock, "show", "ip", "fib").stdout
    total = len(json.loads(ctl(vecgate, sock, "show", "ip", "fib", "limit", "0", json_out=True).stdout)["data"])
    assert total > 1200
    assert f"… {total - 1000} more of {total}" in text, text[-300:]
    assert len(json.loads(ctl(vecgate, sock, "show", "ip", "fib", "limit", "5", json_out=True).stdout)["data"]) == 5
    r = ctl(vecgate, sock, "show", "ip", "fib", "limit", "x")
    assert r.returncode == 1 and "limit" in r.stderr
    # Tunnel routes (the default gateway's UE routes, listed last): the tunnel's name,
    # never the encoded adjacency.
    lines = [x for x in ctl(vecgate, sock, "show", "ip", "fib", "limit", "0").stdout.splitlines() if " tunnel " in x]
    assert any("gtpu_tunnel" in x for x in lines), lines
    for line in lines:
        assert line.split()[4] == "-", line
