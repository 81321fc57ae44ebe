"""ESP interop with strongSwan (IKEv2): two charons negotiate a CHILD_SA, then vecgate
takes over the responder's ESP with the keys the responder's charon logged (CHILD_SA
keys at log level chd 4), as it would take them from an IKE daemon.

  ns A (charon, initiator)  ── veth ──  ns G: charon B, then vecgate  ── veth ──  ns H
  a0 198.18.3.1, lo 198.19.3.1           g0 198.18.3.2                g1 198.19.4.254   198.19.4.1
  CHILD_SA 198.19.3.0/24 === 198.19.4.0/24 with AES-GCM-128, ChaCha20-Poly1305 or
  AES-CBC + HMAC-SHA-256-128, ESP in UDP 4500 (charon's userspace ESP, kernel-libipsec:
  this host's kernel has no ESP); and over IPv6 (2001:db8:3::/64 outside,
  2001:db8:13::/64 === 2001:db8:14::/64 inside) with AES-GCM-128.

After IKE_AUTH (no ESP sent yet), charon B is killed without a word (SIGKILL: a DELETE
would end A's SAs), the kernel in G gives up 198.18.3.2, and vecgate answers for it on g0
with an outbound SA (B -> A, the responder's key) routing 198.19.3.0/24 and an inbound
one (A -> B, the initiator's key). A's charon, an independent ESP implementation, then
pings H and moves 10 MB over TCP both ways through vecgate; what arrives is hashed.
strongSwan comes from apt (scripts/test.sh installs it)."""
import ipaddress
import os
import re
import shutil
import signal
import subprocess
import time

import pytest

from netns import Lab, Vecgate, result, same_stream

CHARON = "/usr/lib/ipsec/charon"

STRONGSWAN_CONF = """charon {{
    # The IPsec backend before kernel-netlink: the first one loaded wins, so ESP is
    # charon's own (kernel-libipsec: a TUN device) or vecgate's (kernel-vecgate);
    # kernel-netlink only installs routes, or nothing.
    load_modular = no
    load = random nonce openssl pem pkcs1 x509 pubkey socket-default {backend} kernel-netlink vici updown aes gcm chapoly sha2 hmac kdf curve25519
    install_routes = {install_routes}
    plugins {{
        vici {{
            socket = unix://{dir}/charon.vici
        }}
        kernel-vecgate {{
            socket = {vecgate_socket}
        }}
    }}
    filelog {{
        log {{
            path = {dir}/charon.log
            default = 1
            flush_line = yes
        }}
        keys {{
            path = {dir}/keys.log
            flush_line = yes
            default = 0
            chd = 4
        }}
    }}
}}
"""

SWANCTL_CONF = """connections {{
    gw {{
        version = 2
        local_addrs = {local}
        remote_addrs = {remote_addrs}
        proposals = aes128gcm16-prfsha256-x25519
        local {{
            auth = psk
            id = {local}
        }}
        remote {{
            auth = psk
            id = {remote}
        }}
        children {{
            net {{
                local_ts = {local_ts}
                remote_ts = {remote_ts}
                esp_proposals = {esp}-x25519
                mode = tunnel
                {child}
            }}
        }}
        mobike = {mobike}
    }}
}}
secrets {{
    ike-1 {{
        id-1 = {local}
        id-2 = {remote}
        secret = "vecgate-test-psk"
    }}
}}
"""


def start_charon(lab, ns, d, local, remote, local_ts, remote_ts, esp, vecgate=None, mobike="yes", child="", remote_addrs=None):
    """A charon in `ns` whose ESP is its own (kernel-libipsec), or, with `vecgate` =
    (plugin .so, vecgate's API socket), vecgate's through the kernel-vecgate plugin
    (contrib/strongswan; `!`: charon refuses to start if the plugin cannot). `child`:
    more settings of the CHILD_SA (lifetimes). The peer's IKE identity is `remote`, its
    address too unless `remote_addrs` says (a peer behind a NAT)."""
    d.mkdir()
    backend, install_routes, sock = ("kernel-libipsec", "yes", "") if vecgate is None else ("kernel-vecgate!", "no", vecgate[1])
    (d / "strongswan.conf").write_text(STRONGSWAN_CONF.format(dir=d, backend=backend, install_routes=install_routes, vecgate_socket=sock))
    (d / "swanctl.conf").write_text(SWANCTL_CONF.format(local=local, remote=remote, local_ts=local_ts, remote_ts=remote_ts, esp=esp,
                                                        mobike=mobike, child=child, remote_addrs=remote_addrs or remote))
    env = dict(os.environ, STRONGSWAN_CONF=str(d / "strongswan.conf"))
    if vecgate is not None:
        # strongSwan 5.9 has no setting for another plugin folder: charon finds a
        # plugin's constructor already in the process first.
        env["LD_PRELOAD"] = str(vecgate[0])
    # Its own /run: charon writes /run/charon.pid and will not start beside another.
    p = subprocess.Popen(["ip", "netns", "exec", ns, "unshare", "-m", "sh", "-c", f"mount -t tmpfs tmpfs /run && exec {CHARON}"],
                         env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    lab.procs.append(p)
    for _ in range(100):
        if (d / "charon.vici").exists():
            break
        time.sleep(0.1)
    assert (d / "charon.vici").exists(), (d / "charon.log").read_text() if (d / "charon.log").exists() else "no log"
    r = subprocess.run(["swanctl", "--load-all", "--file", str(d / "swanctl.conf"), "--uri", f"unix://{d}/charon.vici"],
                       env=env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr
    return p, env


def child_sa_keys(log, initiator):
    """The CHILD_SA's two ESP SAs from a charon key log: [(spi, src, dst, enc hex, integ
    hex)]. charon prints the initiator's and the responder's encryption (and integrity)
    keys as hex dumps (AEADs: key || salt), then each SA as "SPI 0x..., src X dst Y"; the
    SA sent by the IKE initiator uses the initiator's keys."""
    lines = [re.sub(r"^\S*\d+\[\w+\] ", "", l) for l in log.read_text().splitlines()]
    keys, sas, i = {}, [], 0
    while i < len(lines):
        m = re.match(r"(encryption|integrity) (initiator|responder) key => (\d+) bytes", lines[i])
        if m:
            want, hexs = int(m.group(3)), ""
            i += 1
            while len(hexs) < 2 * want and i < len(lines):
                d = re.match(r"\s*\d+: ((?:[0-9A-F]{2} ?)+)", lines[i])
                if not d:
                    break
                hexs += d.group(1).replace(" ", "")[: 2 * want - len(hexs)]
                i += 1
            keys[(m.group(1), m.group(2))] = hexs.lower()
            continue
        m = re.match(r"\s*SPI 0x([0-9a-f]+), src (\S+) dst (\S+)", lines[i])
        if m:
            src = m.group(2)
            role = "initiator" if src == initiator else "responder"
            sas.append((int(m.group(1), 16), src, m.group(3), keys[("encryption", role)], keys.get(("integrity", role), "")))
        i += 1
    return sas


def through(lab, gw, a, f, tag):
    """A's protected host pings H through the tunnel: the first ping may go while vecgate
    resolves H; then every one comes back. `-w`, not `-W`: with `-c` and replies seen,
    ping stops about two round trips after its last request and counts a later reply as
    lost, and charon's userspace ESP (kernel-libipsec) on a loaded machine delays some
    by 100-450 ms though vecgate sealed them all (its counts said so in every such run);
    `-w` waits for all five, up to its deadline."""
    lab.run(a, "ping", "-c", "1", "-W", "2", "-I", f["a_host"], f["h"], check=False)
    p = lab.run(a, "ping", "-c", "5", "-i", "0.2", "-w", "15", "-I", f["a_host"], f["h"], check=False, timeout=30)
    assert p.returncode == 0 and " 0% packet loss" in p.stdout, (tag, p.stdout, gw.errors())


def both_ways(lab, a, h, f, fam, port):
    """10 MB A -> H, then H -> A, through charon's ESP and vecgate's, arrive whole."""
    rv6 = ["--v6"] if fam == 6 else []
    for src, dst_ns, dst, p in ((a, h, f["h"], port), (h, a, f["a_host"], port + 1)):
        rx = lab.peer(dst_ns, "tcp-recv", p, *rv6)
        tx = lab.peer_run(src, "tcp-send", dst, p, 10_000_000, timeout=120)
        assert same_stream(tx, result(rx, timeout=120)), tx


@pytest.fixture
def lab():
    if not os.path.exists(CHARON) or shutil.which("swanctl") is None:
        pytest.fail("strongSwan is not installed (scripts/test.sh installs strongswan-charon, strongswan-swanctl, "
                    "libstrongswan-extra-plugins, libcharon-extra-plugins)")
    l = Lab()
    yield l
    l.close()


# vecgate's algorithm and strongSwan's ESP proposal for it.
ALGS = {"aes-gcm-128": "aes128gcm16", "chacha20-poly1305": "chacha20poly1305", "aes-cbc-sha256": "aes128-sha256"}

# The addresses of each family: outer A and B (then vecgate), A's protected host, H, the
# address charon B routes from, vecgate's on H's link; the protected subnets; a_gw: A's
# vecgate on its host's link (when A's ESP is a vecgate too).
FAMILIES = {
    4: dict(a="198.18.3.1", b="198.18.3.2", plen=24, a_host="198.19.3.1", h="198.19.4.1", b_host="198.19.4.253",
            gw="198.19.4.254", a_net="198.19.3.0/24", h_net="198.19.4.0/24", host_plen=32, a_gw="198.19.3.254"),
    6: dict(a="2001:db8:3::1", b="2001:db8:3::2", plen=64, a_host="2001:db8:13::1", h="2001:db8:14::1", b_host="2001:db8:14::fd",
            gw="2001:db8:14::fe", a_net="2001:db8:13::/64", h_net="2001:db8:14::/64", host_plen=128, a_gw="2001:db8:13::fe"),
}
CASES = [(a, 4) for a in ALGS] + [("aes-gcm-128", 6)]


@pytest.mark.parametrize("alg,fam", CASES, ids=[f"{a}-v{f}" for a, f in CASES])
def test_vecgate_takes_over_a_strongswan_child_sa(lab, vecgate, tmp_path, alg, fam):
    f, esp = FAMILIES[fam], ALGS[alg]
    v6 = ["nodad"] if fam == 6 else []
    # G keeps IPv6 while charon B runs there (it is turned off with the takeover).
    a, g, h = lab.ns("a"), lab.ns("g"), lab.ns("h")
    lab.veth(a, "a0", g, "g0")
    lab.veth(h, "h0", g, "g1")
    lab.run(a, "ip", "addr", "add", f"{f['a']}/{f['plen']}", "dev", "a0", *v6)
    lab.run(a, "ip", "addr", "add", f"{f['a_host']}/{f['host_plen']}", "dev", "lo")
    lab.run(g, "ip", "addr", "add", f"{f['b']}/{f['plen']}", "dev", "g0", *v6)
    # charon B routes A's subnet into its TUN device from an address of its own subnet.
    lab.run(g, "ip", "addr", "add", f"{f['b_host']}/{f['host_plen']}", "dev", "lo")
    lab.run(h, "ip", "addr", "add", f"{f['h']}/{f['plen'] if fam == 6 else 24}", "dev", "h0", *v6)
    lab.run(h, "ip", f"-{fam}", "route", "add", "default", "via", f["gw"])
    ca, env_a = start_charon(lab, a, tmp_path / "a", f["a"], f["b"], f["a_net"], f["h_net"], esp)
    cb, _ = start_charon(lab, g, tmp_path / "b", f["b"], f["a"], f["h_net"], f["a_net"], esp)
    r = subprocess.run(["swanctl", "--initiate", "--child", "net", "--uri", f"unix://{tmp_path}/a/charon.vici"], env=env_a,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "initiate completed successfully" in r.stdout, r.stdout + r.stderr
    sas = child_sa_keys(tmp_path / "b" / "keys.log", f["a"])
    inbound = [s for s in sas if s[1] == f["a"]]
    outbound = [s for s in sas if s[1] == f["b"]]
    assert len(inbound) == 1 and len(outbound) == 1, sas
    # B goes without a DELETE; G's kernel gives up its addresses and stops answering on
    # the links; vecgate answers for B.
    os.killpg(cb.pid, signal.SIGKILL)
    cb.wait(10)
    for link in ("g0", "g1"):
        lab.run(g, "ip", "addr", "flush", "dev", link)
        lab.run(g, "sysctl", "-qw", f"net.ipv6.conf.{link}.disable_ipv6=1")
    lab.run(a, "ip", "neigh", "flush", "dev", "a0")
    mac = lab.run(g, "cat", "/sys/class/net/g0/address").stdout.strip()
    config = f"""
[[interface]]
name = "a"
type = "af_packet"
host_if = "g0"
mac = "{mac}"
addresses = ["{f['b']}/{f['plen']}"]

[[interface]]
name = "h"
type = "af_packet"
host_if = "g1"
mac = "02:00:00:00:bb:02"
addresses = ["{f['gw']}/{f['plen'] if fam == 6 else 24}"]

[[ipsec_sa]]
index = 0
spi = {outbound[0][0]}
direction = "outbound"
algorithm = "{alg}"
enc_key = "{outbound[0][3]}"
integ_key = "{outbound[0][4]}"
local = "{f['b']}"
remote = "{f['a']}"
udp_encap = true
routes = ["{f['a_net']}"]

[[ipsec_sa]]
index = 1
spi = {inbound[0][0]}
direction = "inbound"
algorithm = "{alg}"
enc_key = "{inbound[0][3]}"
integ_key = "{inbound[0][4]}"
local = "{f['b']}"
remote = "{f['a']}"
udp_encap = true
"""
    gw = Vecgate(lab, vecgate, g, config, tmp_path)
    through(lab, gw, a, f, "the CHILD_SA taken over")
    both_ways(lab, a, h, f, fam, 7100)
    e = gw.errors()
    assert e.get((f"esp{fam}-decrypt", "decrypted"), 0) >= 5 + 1000, e
    assert e.get((f"esp{fam}-encrypt", "encrypted"), 0) >= 5 + 1000, e
    # IKE messages (MOBIKE, DPD) and NAT keep-alives to 4500 are consumed and counted;
    # no ESP packet was refused. (H's TCP hands vecgate GSO frames: segmented before
    # encryption, counted.)
    fine = ("decrypted", "encrypted", "inner-checksum-completed", "gso-to-segment", "ike", "nat-keepalive")
    assert not [k for k, v in e.items() if v and k[0].startswith("esp") and k[1] not in fine], e
    assert gw.stop()[0] == 0


@pytest.fixture(scope="module")
def kernel_vecgate_plugin():
    """contrib/strongswan's plugin built for the strongSwan installed (cached after the
    first build: scripts/build-strongswan-plugin.sh)."""
    script = os.path.join(os.path.dirname(__file__), "..", "scripts", "build-strongswan-plugin.sh")
    r = subprocess.run(["bash", script], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout.strip().splitlines()[-1]


def sa_rows(gw):
    """The SAs in the plugin's index range (1000 on)."""
    return [r for r in gw.ctl("show", "ipsec", "sa")["data"]["sas"] if r["index"] >= 1000]


def settle(gw, want, seconds=20):
    """The gateway's SAs once `want(rows)` holds (charon installs and deletes as the
    exchanges finish), or the last rows seen."""
    deadline = time.time() + seconds
    rows = sa_rows(gw)
    while not want(rows) and time.time() < deadline:
        time.sleep(0.2)
        rows = sa_rows(gw)
    return rows


# The punt link's addresses: vecgate's side (the tap) and the host's.
TAP = {4: dict(gw="198.18.250.1", host="198.18.250.2", plen=30), 6: dict(gw="2001:db8:250::1", host="2001:db8:250::2", plen=64)}
IKE_CASES = [("aes-gcm-128", 4), ("chacha20-poly1305", 6)]


# Behind a NAT (NAT_LAB), per family: A's own outer address and its router's, and the
# NAT's address on vecgate's link, which is what B and vecgate see of A. IPv6 is NAT66
# (nftables masquerade in an ip6 table), as some carriers and home routers do.
NATS = {
    4: dict(a="198.18.5.1", router="198.18.5.254", public="198.18.3.9", plen=24, ports="20000-29999"),
    6: dict(a="2001:db8:5::1", router="2001:db8:5::fe", public="2001:db8:3::9", plen=64, ports="20000-29999"),
}


def nat_between(lab, a, g, fam=4):
    """ns N between A and vecgate: A's router, masquerading A's packets to its own
    address on vecgate's link, each new mapping from a random port of the NAT's "ports"
    (as a carrier NAT that rebinds does). A gets NATS[fam]["a"] and its default route
    through N."""
    nat, v6 = NATS[fam], (["nodad"] if fam == 6 else [])
    n = lab.ns("n")
    lab.veth(a, "a0", n, "n0")
    lab.veth(n, "n1", g, "g0")
    lab.run(a, "ip", "addr", "add", f"{nat['a']}/{nat['plen']}", "dev", "a0", *v6)
    lab.run(a, "ip", f"-{fam}", "route", "add", "default", "via", nat["router"])
    lab.run(n, "ip", "addr", "add", f"{nat['router']}/{nat['plen']}", "dev", "n0", *v6)
    lab.run(n, "ip", "addr", "add", f"{nat['public']}/{nat['plen']}", "dev", "n1", *v6)
    lab.run(n, "sysctl", "-qw", "net.ipv4.ip_forward=1" if fam == 4 else "net.ipv6.conf.all.forwarding=1")
    rules = (f"table {'ip' if fam == 4 else 'ip6'} vgt_nat {{\n chain post {{\n  type nat hook postrouting priority srcnat;\n"
             f"  oifname \"n1\" meta l4proto udp masquerade to :{nat['ports']} random\n  oifname \"n1\" masquerade\n }}\n}}\n")
    subprocess.run(["ip", "netns", "exec", n, "nft", "-f", "-"], input=rules, text=True, check=True, capture_output=True, timeout=10)
    return n


def nat_port(lab, n, fam=4):
    """The NAT's port for A's UDP 4500 (IKE and ESP in UDP share it), or None."""
    nat = NATS[fam]
    out = lab.run(n, "conntrack", "-L", "-f", f"ipv{fam}", "-p", "udp", "--orig-src", nat["a"], "--orig-port-src", "4500",
                  check=False).stdout
    m = re.search(rf"src=\S+ dst={re.escape(nat['public'])} sport=4500 dport=(\d+)", out)
    return int(m.group(1)) if m else None


def punting_gateway(lab, vecgate, tmp_path, g, s, fam, links, outer, inner, name="gw", mac="3b"):
    """vecgate in ns `g` as a security gateway: its outer link links[0] with the addresses
    `outer`, its inner link links[1] with `inner`, and a tap into ns `s` where IKE (UDP
    500, 4500) to its addresses is punted. The host in `s` takes the first outer address
    as its own and routes the outer subnet back through the tap from it."""
    f, tap = FAMILIES[fam], TAP[fam]
    v6 = ["nodad"] if fam == 6 else []
    outer_net = str(ipaddress.ip_interface(f"{outer[0]}/{f['plen']}").network)
    addresses = ", ".join(f'"{x}/{f["plen"]}"' for x in outer)
    config = f"""
[[interface]]
name = "out"
type = "af_packet"
host_if = "{links[0]}"
mac = "02:00:00:00:{mac}:01"
addresses = [{addresses}]

[[interface]]
name = "in"
type = "af_packet"
host_if = "{links[1]}"
mac = "02:00:00:00:{mac}:02"
addresses = ["{inner}/{f['plen'] if fam == 6 else 24}"]

[[interface]]
name = "host"
type = "tap"
host_if = "vg-host"
mac = "02:00:00:00:{mac}:03"
addresses = ["{tap['gw']}/{tap['plen']}"]

[punt]
interface = "host"
{'host4' if fam == 4 else 'host6'} = "{tap['host']}"
udp_ports = [500, 4500]
"""
    gw = Vecgate(lab, vecgate, g, config, tmp_path, name=name)
    lab.run(g, "ip", "link", "set", "vg-host", "netns", s)
    lab.run(s, "ip", "link", "set", "vg-host", "up")
    lab.run(s, "ip", "addr", "add", f"{tap['host']}/{tap['plen']}", "dev", "vg-host", *v6)
    lab.run(s, "ip", "addr", "add", f"{outer[0]}/{f['host_plen']}", "dev", "vg-host", *v6)
    lab.run(s, "ip", f"-{fam}", "route", "add", outer_net, "via", tap["gw"], "src", outer[0])
    return gw


def ike_lab(lab, vecgate, tmp_path, plugin, alg, fam, a_ts_suffix="", b_child="", nat=False, mobike=False, a_vecgate=None):
    """The topology of test_strongswan_drives_vecgates_sas_over_ike with both charons
    started: (f, ns A, ns H, vecgate, swanctl on A, charon B). `b_child`: more settings of
    charon B's CHILD_SA. `nat`: A behind ns N (nat_between; f["a"] is then A's own
    address, f["nat"] N's namespace). `mobike`: both charons offer MOBIKE (RFC 4555).
    `a_vecgate` (a list of more addresses for A's outer link): A's ESP is a vecgate too,
    driven by charon A through the plugin, as B's; the ns returned as A is then the host
    behind it (f["a_host"]), f["gw_a"] that vecgate and f["s_a"] charon A's ns."""
    f, esp = FAMILIES[fam], ALGS[alg]
    v6 = ["nodad"] if fam == 6 else []
    a = lab.dataplane_ns("a") if a_vecgate is not None else lab.ns("a")
    g, h, s = lab.dataplane_ns("g"), lab.ns("h"), lab.ns("s")
    if nat:
        f = dict(f, a=NATS[fam]["a"], nat=nat_between(lab, a, g, fam))
    elif a_vecgate is not None:
        # A: vecgate between the outer link and A's host in ns HA, charon A in ns SA.
        lab.veth(a, "a0", g, "g0")
        ha, sa = lab.ns("ha"), lab.ns("sa")
        lab.veth(ha, "ha0", a, "a1")
        lab.run(ha, "ip", "addr", "add", f"{f['a_host']}/{f['plen'] if fam == 6 else 24}", "dev", "ha0", *v6)
        lab.run(ha, "ip", f"-{fam}", "route", "add", "default", "via", f["a_gw"])
        gw_a = punting_gateway(lab, vecgate, tmp_path, a, sa, fam, ("a0", "a1"), [f["a"], *a_vecgate], f["a_gw"], name="gw_a", mac="3c")
        f = dict(f, gw_a=gw_a, s_a=sa)
    else:
        lab.veth(a, "a0", g, "g0")
        lab.run(a, "ip", "addr", "add", f"{f['a']}/{f['plen']}", "dev", "a0", *v6)
    lab.veth(h, "h0", g, "g1")
    if a_vecgate is None:
        lab.run(a, "ip", "addr", "add", f"{f['a_host']}/{f['host_plen']}", "dev", "lo")
    lab.run(h, "ip", "addr", "add", f"{f['h']}/{f['plen'] if fam == 6 else 24}", "dev", "h0", *v6)
    lab.run(h, "ip", f"-{fam}", "route", "add", "default", "via", f["gw"])
    # S routes to vecgate's outer link, where A (or its NAT) is.
    gw = punting_gateway(lab, vecgate, tmp_path, g, s, fam, ("g0", "g1"), [f["b"]], f["gw"])
    yes_no = "yes" if mobike else "no"
    if a_vecgate is None:
        ca, env_a = start_charon(lab, a, tmp_path / "a", f["a"], f["b"], f["a_net"] + a_ts_suffix, f["h_net"], esp, mobike=yes_no)
    else:
        ca, env_a = start_charon(lab, f["s_a"], tmp_path / "a", f["a"], f["b"], f["a_net"] + a_ts_suffix, f["h_net"], esp,
                                 vecgate=(plugin, f["gw_a"].sock), mobike=yes_no)
        a = ha
    # What an earlier charon left in the plugin's index range goes when the plugin starts;
    # an SA outside the range stays.
    for index, spi in ((1000, 4096), (7, 4097)):
        gw.ctl("ipsec", "sa", "add", str(index), "spi", str(spi), "inbound", "alg", "null", "local", f["b"], "remote", f["a"])
    cb, _ = start_charon(lab, s, tmp_path / "b", f["b"], f["a"], f["h_net"], f["a_net"], esp, vecgate=(plugin, gw.sock),
                         mobike=yes_no, child=b_child, remote_addrs=NATS[fam]["public"] if nat else None)
    assert [r["index"] for r in gw.ctl("show", "ipsec", "sa")["data"]["sas"]] == [7]
    assert "kernel-vecgate" in (tmp_path / "b" / "charon.log").read_text()

    def swanctl_a(*args):
        r = subprocess.run(["swanctl", *args, "--uri", f"unix://{tmp_path}/a/charon.vici"], env=env_a, capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        return r.stdout

    return f, a, h, gw, swanctl_a, cb


@pytest.mark.parametrize("alg,fam", IKE_CASES, ids=[f"{a}-v{f}" for a, f in IKE_CASES])
def test_strongswan_drives_vecgates_sas_over_ike(lab, vecgate, tmp_path, kernel_vecgate_plugin, alg, fam):
    """vecgate as a security gateway whose SAs an IKE daemon negotiates, as in a real
    deployment: IKE to the gateway's address is punted to charon on the host's stack
    behind a tap, and charon installs each CHILD_SA's SAs in vecgate through the
    kernel-vecgate plugin (contrib/strongswan). A's charon (its own userspace ESP) is the
    independent peer: pings and 10 MB each way through the tunnel, a rekey, the end.

      ns A (charon, initiator)  ── veth ──  ns G: vecgate  ── veth ──  ns H
      a0 198.18.3.1, lo 198.19.3.1          g0 198.18.3.2   g1 198.19.4.254   198.19.4.1
                                            tap "host" 198.18.250.1
                                              └─ ns S: vg-host 198.18.250.2, 198.18.3.2/32; charon B
    (and the same over IPv6: FAMILIES, TAP)
    """
    f, a, h, gw, swanctl_a, cb = ike_lab(lab, vecgate, tmp_path, kernel_vecgate_plugin, alg, fam)
    assert "initiate completed successfully" in swanctl_a("--initiate", "--child", "net")
    # The CHILD_SA's two SAs, as A's charon installed them: vecgate has their mirror.
    sas_a = child_sa_keys(tmp_path / "a" / "keys.log", f["a"])
    rows = settle(gw, lambda r: len(r) == 2)
    got = sorted((r["spi"], r["direction"], r["local"], r["remote"], r["algorithm"], r["udp_encap"] is not None) for r in rows)
    want = sorted((spi, "inbound" if src == f["a"] else "outbound", f["b"], f["a"], alg, True) for spi, src, _, _, _ in sas_a)
    assert got == want, (rows, sas_a)
    assert sorted(r["index"] for r in rows) == [1000, 1001] and [r["urpf"] for r in rows if r["direction"] == "inbound"] == ["strict"], rows

    through(lab, gw, a, f, "first CHILD_SA")
    both_ways(lab, a, h, f, fam, 7110)
    # Both SAs counted what they carried: the pings and 10 MB each way (the workers'
    # inbound counts summed, the payload bytes).
    e = gw.errors()
    counted = {r["direction"]: (r["packets"], r["bytes"]) for r in sa_rows(gw)}
    assert counted["inbound"] == (e[(f"esp{fam}-decrypt", "decrypted")], counted["inbound"][1]), (counted, e)
    assert counted["inbound"][1] > 10_000_000 and counted["outbound"][1] > 10_000_000, counted
    # charon B asks vecgate for them (the plugin's query_sa): swanctl shows the same.
    env_b = dict(os.environ, STRONGSWAN_CONF=str(tmp_path / "b" / "strongswan.conf"))
    listed = subprocess.run(["swanctl", "--list-sas", "--uri", f"unix://{tmp_path}/b/charon.vici"], env=env_b, capture_output=True,
                            text=True, timeout=30).stdout
    seen = {d: (int(p), int(b)) for d, b, p in re.findall(r"\b(in|out)\s+[0-9a-f]{8}[^,]*,\s+(\d+) bytes,\s+(\d+) packets", listed)}
    assert seen == {"in": counted["inbound"], "out": counted["outbound"]}, (listed, counted)
    # A rekey: charon B installs the new SAs and deletes the old ones; traffic follows.
    old = {r["spi"] for r in rows}
    swanctl_a("--rekey", "--child", "net")
    rows = settle(gw, lambda r: len(r) == 2 and not old & {x["spi"] for x in r})
    assert len(rows) == 2 and not old & {r["spi"] for r in rows}, (old, rows)
    through(lab, gw, a, f, "rekeyed CHILD_SA")
    e = gw.errors()
    assert e.get((f"esp{fam}-decrypt", "decrypted"), 0) >= 10 + 1000 and e.get((f"esp{fam}-encrypt", "encrypted"), 0) >= 10 + 1000, e
    # Every IKE message reached charon (none was consumed as `ike` by the decrypt node),
    # and charon's went out as the gateway's own.
    assert e.get(("ip-punt", "punted"), 0) >= 4 and e.get((f"esp{fam}-decrypt", "ike"), 0) == 0, e
    assert e.get(("ip-punt-inject", "injected"), 0) >= 4, e
    fine = ("decrypted", "encrypted", "inner-checksum-completed", "gso-to-segment", "nat-keepalive")
    assert not [k for k, v in e.items() if v and k[0].startswith("esp") and k[1] not in fine], e
    # The IKE SA ends: charon B deletes the SAs it installed.
    swanctl_a("--terminate", "--ike", "gw")
    assert settle(gw, lambda r: not r) == []
    assert gw.stop()[0] == 0


@pytest.mark.parametrize("fam", [4, 6], ids=["v4", "v6"])
def test_strongswan_follows_a_nat_rebinding(lab, vecgate, tmp_path, kernel_vecgate_plugin, fam):
    """A behind a NAT (ns N masquerading, a random port per mapping; mobike = no on both
    sides) sets up the CHILD_SA: ESP in UDP between vecgate's 4500 and the NAT's port.
    Then the NAT forgets its mappings (conntrack -D) and A rekeys its IKE SA: A's
    message comes from a new port, charon B moves the IKE SA there (RFC 7296 §2.23) and
    each CHILD_SA's SAs with it (the plugin's update_sa: `ipsec_sa_update`), and vecgate
    sends to the new port. The CHILD_SA is the same one — same SPIs, the counts and
    sequence numbers running on — and traffic flows both ways again.

      ns A 198.18.5.1 ── ns N 198.18.5.254 | 198.18.3.9 (masquerade) ── ns G: vecgate 198.18.3.2 ── ns H
    (and over IPv6, NAT66: A 2001:db8:5::1 behind N's 2001:db8:3::9, vecgate 2001:db8:3::2)

    Nothing forces UDP encapsulation here: A's NAT-D payloads see a real NAT over either
    family (A's userspace ESP, kernel-libipsec, would ask for it anyway).
    """
    f, a, h, gw, swanctl_a, cb = ike_lab(lab, vecgate, tmp_path, kernel_vecgate_plugin, "aes-gcm-128", fam, nat=True)
    n, nat = f["nat"], NATS[fam]
    assert "initiate completed successfully" in swanctl_a("--initiate", "--child", "net")
    rows = settle(gw, lambda r: len(r) == 2)
    port = nat_port(lab, n, fam)
    assert port is not None and port != 4500, lab.run(n, "conntrack", "-L", check=False).stdout
    out = lambda rows: next(r for r in rows if r["direction"] == "outbound")
    assert (out(rows)["remote"], out(rows)["udp_encap"]) == (nat["public"], dict(src=4500, dst=port)), rows
    # A's own NAT-D found the NAT (charon fakes a NAT without this line when only its
    # userspace ESP asks for UDP encapsulation).
    assert "local host is behind NAT" in (tmp_path / "a" / "charon.log").read_text()
    through(lab, gw, a, f, "CHILD_SA behind the NAT")
    before = {r["spi"]: (r["direction"], r["packets"]) for r in sa_rows(gw)}
    assert all(p >= 5 for _, p in before.values()), before

    # The NAT forgets A (its mapping timed out, or the carrier rebooted it): A's next
    # packet gets a new mapping. Nothing is sent meanwhile.
    gone = lab.run(n, "conntrack", "-D", "-f", f"ipv{fam}", "-p", "udp", check=False)
    assert "have been deleted" in gone.stderr and nat_port(lab, n, fam) is None, (gone.stdout, gone.stderr)
    swanctl_a("--rekey", "--ike", "gw")
    rows = settle(gw, lambda r: len(r) == 2 and out(r)["udp_encap"]["dst"] not in (port, 4500), seconds=10)
    new_port = nat_port(lab, n, fam)
    assert new_port not in (None, port), (port, new_port)
    log = logged(tmp_path / "b" / "charon.log", lambda t: t.count("vecgate: updated") >= 2)
    moved = [l for l in log.splitlines() if "vecgate: updated" in l]
    assert {r["spi"]: r["direction"] for r in rows} == {spi: d for spi, (d, _) in before.items()}, (
        "the CHILD_SA was replaced instead of updated", before, rows, log[-4000:])
    assert (out(rows)["remote"], out(rows)["udp_encap"]) == (nat["public"], dict(src=4500, dst=new_port)), (rows, new_port)
    # charon B saw A at its new port and moved both SAs (the plugin logs each).
    assert f"remote endpoint changed from {nat['public']}[{port}] to {nat['public']}[{new_port}]" in log, log[-3000:]
    assert len(moved) == 2 and all(f"{nat['public']}[{new_port}]" in l for l in moved), (moved, log[-3000:])

    through(lab, gw, a, f, "CHILD_SA after the NAT rebinding")
    after = {r["spi"]: (r["direction"], r["packets"]) for r in sa_rows(gw)}
    # The same SAs counted on: the first five pings and the later ones (at least 5 each way).
    assert all(after[spi][1] >= p + 5 for spi, (_, p) in before.items()), (before, after)
    e = gw.errors()
    fine = ("decrypted", "encrypted", "inner-checksum-completed", "gso-to-segment", "nat-keepalive")
    assert not [k for k, v in e.items() if v and k[0].startswith("esp") and k[1] not in fine], e
    swanctl_a("--terminate", "--ike", "gw")
    assert settle(gw, lambda r: not r) == []
    assert gw.stop()[0] == 0


# Where A moves to with MOBIKE: another of its gateway's addresses on the outer link.
MOVED = {4: "198.18.3.11", 6: "2001:db8:3::11"}


@pytest.mark.parametrize("fam", [4, 6], ids=["v4", "v6"])
def test_strongswan_follows_a_mobike_address_move(lab, vecgate, tmp_path, kernel_vecgate_plugin, fam):
    """MOBIKE (RFC 4555) on both charons; A, the IKE initiator, moves to another address,
    and both ends move the CHILD_SA in place. A's ESP is a second vecgate here, driven by
    its own charon through the plugin: charon's own userspace ESP (kernel-libipsec, the
    peer of the other tests) cannot move an SA (its update_sa is NOT_SUPPORTED), so its
    charon rekeys the CHILD_SA after every move of its own address instead.

    A's gateway has two addresses on the outer link; charon A (behind its punt tap) first
    has only the first one, then gets the second and loses the first, as a host whose
    uplink changed. charon A sees the change and sends UPDATE_SA_ADDRESSES from the new
    address; charon B moves the IKE SA and each CHILD_SA's SAs to A's new address
    (`remote`, in vecgate B) and charon A its own (`local`, in vecgate A). The same SPIs
    carry on, their counts running on, and A's host and H ping each other through them.

      ns HA ── ns A: vecgate 198.18.3.1 (→ .11) ── ns G: vecgate 198.18.3.2 ── ns H
               └─ ns SA: charon A 198.18.3.1 → .11   └─ ns S: charon B
    """
    new = MOVED[fam]
    f, ha, h, gw, swanctl_a, cb = ike_lab(lab, vecgate, tmp_path, kernel_vecgate_plugin, "aes-gcm-128", fam, mobike=True,
                                          a_vecgate=[new])
    gw_a, sa, old = f["gw_a"], f["s_a"], f["a"]
    assert "initiate completed successfully" in swanctl_a("--initiate", "--child", "net")
    rows = settle(gw, lambda r: len(r) == 2)
    rows_a = settle(gw_a, lambda r: len(r) == 2)
    # The same two SAs at both ends, each one's inbound the other's outbound.
    flip = {"inbound": "outbound", "outbound": "inbound"}
    spis = {r["spi"]: r["direction"] for r in rows}
    assert len(spis) == 2 and {r["spi"]: flip[r["direction"]] for r in rows_a} == spis, (rows, rows_a)
    assert {(r["local"], r["remote"]) for r in rows} == {(f["b"], old)}, rows
    assert {(r["local"], r["remote"]) for r in rows_a} == {(old, f["b"])}, rows_a
    encap = {r["spi"]: r["udp_encap"] for r in rows + rows_a}
    through(lab, gw, ha, f, "CHILD_SA before the move")
    count = lambda g: {r["spi"]: r["packets"] for r in sa_rows(g)}
    before, before_a = count(gw), count(gw_a)
    assert all(p >= 5 for p in list(before.values()) + list(before_a.values())), (before, before_a)
    assert "peer supports MOBIKE" in b_log(tmp_path), b_log(tmp_path)[-3000:]

    # A's host takes the new address and routes from it; the old one goes.
    tap, v6 = TAP[fam], (["nodad"] if fam == 6 else [])
    outer_net = str(ipaddress.ip_interface(f"{old}/{f['plen']}").network)
    lab.run(sa, "ip", "addr", "add", f"{new}/{f['host_plen']}", "dev", "vg-host", *v6)
    lab.run(sa, "ip", f"-{fam}", "route", "replace", outer_net, "via", tap["gw"], "src", new)
    lab.run(sa, "ip", "addr", "del", f"{old}/{f['host_plen']}", "dev", "vg-host")
    rows = settle(gw, lambda r: len(r) == 2 and {x["remote"] for x in r} == {new})
    rows_a = settle(gw_a, lambda r: len(r) == 2 and {x["local"] for x in r} == {new})
    two_moved = lambda t: t.count("vecgate: updated") >= 2
    log, log_a = logged(tmp_path / "b" / "charon.log", two_moved), logged(tmp_path / "a" / "charon.log", two_moved)
    assert {r["spi"]: r["direction"] for r in rows} == spis and {r["spi"]: flip[r["direction"]] for r in rows_a} == spis, (
        "the CHILD_SA was replaced instead of moved", spis, rows, rows_a, log[-3000:], log_a[-3000:])
    assert {(r["local"], r["remote"]) for r in rows} == {(f["b"], new)}, (rows, log[-3000:])
    assert {(r["local"], r["remote"]) for r in rows_a} == {(new, f["b"])}, (rows_a, log_a[-3000:])
    assert {r["spi"]: r["udp_encap"] for r in rows + rows_a} == encap, (encap, rows, rows_a)
    # MOBIKE moved them (A's UPDATE_SA_ADDRESSES), and each plugin both SAs of its end.
    assert "N(UPD_SA_ADDR)" in log and f"remote endpoint changed from {old}[" in log, log[-3000:]
    assert f"local endpoint changed from {old}[" in log_a, log_a[-3000:]
    for text in (log, log_a):
        moved = [l for l in text.splitlines() if "vecgate: updated" in l]
        assert len(moved) == 2 and all(new in l for l in moved), (moved, text[-3000:])

    through(lab, gw, ha, f, "CHILD_SA after A moved")
    after, after_a = count(gw), count(gw_a)
    assert all(after[spi] >= p + 5 for spi, p in before.items()), (before, after)
    assert all(after_a[spi] >= p + 5 for spi, p in before_a.items()), (before_a, after_a)
    fine = ("decrypted", "encrypted", "inner-checksum-completed", "gso-to-segment", "nat-keepalive")
    for g in (gw, gw_a):
        e = g.errors()
        assert not [k for k, v in e.items() if v and k[0].startswith("esp") and k[1] not in fine], e
    swanctl_a("--terminate", "--ike", "gw")
    assert settle(gw, lambda r: not r) == [] and settle(gw_a, lambda r: not r) == []
    assert gw.stop()[0] == 0 and gw_a.stop()[0] == 0


def test_strongswan_selectors_narrower_than_a_prefix_are_refused(lab, vecgate, tmp_path, kernel_vecgate_plugin):
    """vecgate's SAs from charon are route-based: a CHILD_SA whose peer selector names a
    protocol (A proposes TCP only) is refused by the plugin before anything reaches
    vecgate, and the CHILD_SA fails instead of being installed to protect other traffic."""
    f, a, h, gw, swanctl_a, cb = ike_lab(lab, vecgate, tmp_path, kernel_vecgate_plugin, "aes-gcm-128", 4, a_ts_suffix="[tcp]")
    r = subprocess.run(["swanctl", "--initiate", "--child", "net", "--uri", f"unix://{tmp_path}/a/charon.vici"],
                       env=dict(os.environ, STRONGSWAN_CONF=str(tmp_path / "a" / "strongswan.conf")), capture_output=True, text=True,
                       timeout=60)
    assert r.returncode != 0 and "initiate completed successfully" not in r.stdout, r.stdout
    assert sa_rows(gw) == []
    assert "limits protocol or ports" in (tmp_path / "b" / "charon.log").read_text()
    assert gw.stop()[0] == 0


# Lifetimes on vecgate's side: charon rekeys or deletes a CHILD_SA when its kernel
# backend reports a soft or hard expire, which the plugin does (time: its own timers;
# bytes and packets: enforced by vecgate, its counts polled every second). A keeps the
# default lifetimes (rekey after an hour), so each rekey or expiry here is B's.


def swanctl_b(tmp_path, *args):
    env = dict(os.environ, STRONGSWAN_CONF=str(tmp_path / "b" / "strongswan.conf"))
    r = subprocess.run(["swanctl", *args, "--uri", f"unix://{tmp_path}/b/charon.vici"], env=env, capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def b_log(tmp_path):
    return (tmp_path / "b" / "charon.log").read_text()


def logged(path, want, seconds=10):
    """Charon log `path` once `want(text)` holds, or the last text read: the plugin logs
    an SA's move after vecgate made it, so `settle` may return before the line is there."""
    deadline = time.time() + seconds
    text = path.read_text()
    while not want(text) and time.time() < deadline:
        time.sleep(0.1)
        text = path.read_text()
    return text


def listed_spis(listing):
    """The SPIs of the CHILD_SAs in a `swanctl --list-sas` listing."""
    return {int(x, 16) for x in re.findall(r"\b(?:in|out)\s+([0-9a-f]{8})", listing)}


def stop_charon_b(cb, gw, tmp_path):
    """SIGTERM to charon B while the plugin's timers (and its poll) are pending: charon
    deletes its SAs and exits cleanly, and none of them stays in vecgate."""
    cb.terminate()
    assert cb.wait(15) == 0, b_log(tmp_path)[-3000:]
    assert sa_rows(gw) == [], sa_rows(gw)


def rekeyed(gw, old, seconds, why):
    """Two SAs in vecgate again, none of them one of `old` (the SPIs before)."""
    rows = settle(gw, lambda r: len(r) == 2 and not old & {x["spi"] for x in r}, seconds=seconds)
    assert len(rows) == 2 and not old & {r["spi"] for r in rows}, (why, old, rows)
    return rows


def test_strongswan_rekeys_vecgates_sas_by_time(lab, vecgate, tmp_path, kernel_vecgate_plugin):
    """B's rekey_time (6 s, no jitter): the plugin's timer reports the soft expire of the
    inbound SA, and B rekeys the CHILD_SA on its own: new SAs in vecgate, the old ones
    removed, traffic through the new ones."""
    f, a, h, gw, swanctl_a, cb = ike_lab(lab, vecgate, tmp_path, kernel_vecgate_plugin, "aes-gcm-128", 4,
                                     b_child="rekey_time = 6s\n life_time = 60s\n rand_time = 0s")
    assert "initiate completed successfully" in swanctl_a("--initiate", "--child", "net")
    started = time.time()
    rows = settle(gw, lambda r: len(r) == 2)
    old = {r["spi"] for r in rows}
    assert len(old) == 2, rows
    through(lab, gw, a, f, "first CHILD_SA")
    rows = rekeyed(gw, old, 6 + 10 - (time.time() - started), "B did not rekey the CHILD_SA within 16 s of a 6 s rekey_time")
    assert time.time() - started >= 5, "rekeyed before B's rekey_time"
    log = b_log(tmp_path)
    assert "reached its soft lifetime" in log and "creating rekey job for CHILD_SA" in log, log[-3000:]
    assert "generating CREATE_CHILD_SA request" in log, log[-3000:]
    listing = swanctl_b(tmp_path, "--list-sas")
    assert "INSTALLED" in listing and listed_spis(listing) == {r["spi"] for r in rows}, (listing, rows)
    through(lab, gw, a, f, "CHILD_SA rekeyed by B's timer")
    stop_charon_b(cb, gw, tmp_path)
    assert gw.stop()[0] == 0


def test_strongswan_rekeys_vecgates_sas_by_bytes(lab, vecgate, tmp_path, kernel_vecgate_plugin):
    """B's rekey_bytes (1 MB; life_bytes 100 MB): the limits reach vecgate with the SAs,
    10 MB each way pass whole, and B rekeys the CHILD_SA on its own as the counts pass
    1 MB."""
    f, a, h, gw, swanctl_a, cb = ike_lab(lab, vecgate, tmp_path, kernel_vecgate_plugin, "aes-gcm-128", 4,
                                     b_child="rekey_bytes = 1000000\n life_bytes = 100000000\n rand_bytes = 0")
    assert "initiate completed successfully" in swanctl_a("--initiate", "--child", "net")
    rows = settle(gw, lambda r: len(r) == 2)
    limits = dict(soft_packets=0, hard_packets=0, soft_bytes=1_000_000, hard_bytes=100_000_000)
    assert [r["lifetime"] for r in rows] == [limits] * 2, rows
    old = {r["spi"] for r in rows}
    through(lab, gw, a, f, "first CHILD_SA")
    both_ways(lab, a, h, f, 4, 7120)
    # The last rekey may still be under way: then two SAs again, not the first ones.
    rows = rekeyed(gw, old, 10, "B did not rekey the CHILD_SA after 20 MB through a 1 MB rekey_bytes")
    log = b_log(tmp_path)
    assert "reached its soft lifetime" in log and "creating rekey job for CHILD_SA" in log, log[-3000:]
    assert "generating CREATE_CHILD_SA request" in log, log[-3000:]
    assert "reached its hard lifetime" not in log, log[-3000:]
    e = gw.errors()
    assert e.get(("esp4-decrypt", "soft-lifetime"), 0) + e.get(("esp4-encrypt", "soft-lifetime"), 0) >= 1, e
    assert not e.get(("esp4-decrypt", "lifetime-expired")) and not e.get(("esp4-encrypt", "lifetime-expired")), e
    through(lab, gw, a, f, "CHILD_SA rekeyed by B's byte count")
    stop_charon_b(cb, gw, tmp_path)
    assert gw.stop()[0] == 0


def test_strongswan_expires_vecgates_sas_by_packets(lab, vecgate, tmp_path, kernel_vecgate_plugin):
    """B's life_packets (200; no rekey by packets or time): vecgate drops the inbound
    packets past 200 (lifetime-expired), and the SAs go from vecgate and from B's CHILD_SAs
    (charon then sets up a new CHILD_SA, as after any hard expire)."""
    f, a, h, gw, swanctl_a, cb = ike_lab(lab, vecgate, tmp_path, kernel_vecgate_plugin, "aes-gcm-128", 4,
                                     b_child="rekey_time = 0s\n life_packets = 200\n rand_packets = 0")
    assert "initiate completed successfully" in swanctl_a("--initiate", "--child", "net")
    rows = settle(gw, lambda r: len(r) == 2)
    assert [r["lifetime"] for r in rows] == [dict(soft_packets=0, hard_packets=200, soft_bytes=0, hard_bytes=0)] * 2, rows
    old = {r["spi"] for r in rows}
    through(lab, gw, a, f, "first CHILD_SA")
    # 300 echo requests, most of them within the second before the plugin's next poll.
    lab.run(a, "ping", "-q", "-c", "300", "-i", "0.002", "-W", "1", "-I", f["a_host"], f["h"], check=False, timeout=30)
    e = gw.errors()
    assert e.get(("esp4-decrypt", "lifetime-expired"), 0) >= 1, e
    rows = settle(gw, lambda r: not old & {x["spi"] for x in r}, seconds=10)
    assert not old & {r["spi"] for r in rows}, ("the SAs outlived their 200 packets", old, rows)
    log = b_log(tmp_path)
    assert "reached its hard lifetime" in log and "creating delete job for CHILD_SA" in log, log[-3000:]
    assert "closing expired CHILD_SA" in log, log[-3000:]
    listing = swanctl_b(tmp_path, "--list-sas")
    assert not old & listed_spis(listing), (old, listing)
    stop_charon_b(cb, gw, tmp_path)
    assert gw.stop()[0] == 0


def test_strongswan_expires_an_inbound_sa_that_stopped_short_of_its_byte_limit(lab, vecgate, tmp_path, kernel_vecgate_plugin):
    """B's life_bytes (50,000) with traffic one way only (A's 1000-byte datagrams to an
    address behind vecgate that nobody answers): vecgate refuses, uncounted, the datagram
    that would pass the inbound SA's limit, so its count stops short of it (48 × 1028
    bytes); the plugin learns of the refusal from `show ipsec sa`'s `expired` and reports
    the hard expire, and the SAs go."""
    f, a, h, gw, swanctl_a, cb = ike_lab(lab, vecgate, tmp_path, kernel_vecgate_plugin, "aes-gcm-128", 4,
                                     b_child="rekey_time = 0s\n life_bytes = 50000\n rand_bytes = 0")
    assert "initiate completed successfully" in swanctl_a("--initiate", "--child", "net")
    rows = settle(gw, lambda r: len(r) == 2)
    assert [r["lifetime"]["hard_bytes"] for r in rows] == [50_000] * 2, rows
    old = {r["spi"] for r in rows}
    send = ("import socket, time\n"
            "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
            f"s.bind(('{f['a_host']}', 0))\n"
            "for i in range(60):\n"
            "    s.sendto(bytes(1000), ('198.19.4.77', 9)); time.sleep(0.002)\n")
    lab.run(a, "python3", "-c", send)
    e = gw.errors()
    assert e.get(("esp4-decrypt", "lifetime-expired"), 0) >= 1, e
    rows = settle(gw, lambda r: not old & {x["spi"] for x in r}, seconds=10)
    assert not old & {r["spi"] for r in rows}, ("the SAs outlived the inbound one's refusal", old, [(r["direction"], r["packets"], r["bytes"], r["expired"]) for r in rows], e)
    log = b_log(tmp_path)
    assert "reached its hard lifetime" in log and "creating delete job for CHILD_SA" in log, log[-3000:]
    stop_charon_b(cb, gw, tmp_path)
    assert gw.stop()[0] == 0
