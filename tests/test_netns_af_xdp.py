"""vecgate as a router over af_xdp interfaces: AF_XDP sockets fed by the XDP program
vecgate attaches to each veth end, between Linux hosts A (198.18.0.2, 2001:db8::2) and
B (198.18.1.2, 2001:db8:1::2) in namespaces.

AF_XDP frames carry no offload metadata. A NIC delivers complete checksums; on veth a
local sender's checksum offload would hand the frame over with its checksum still
partial and nothing to say so, so the hosts checksum in software (`ethtool -K tx off`),
as every frame from a real wire is. The senders' TSO is switched off by the kernel
itself while an XDP program sits on the peer."""
import subprocess


from netns import Vecgate, router_config

TRANSFER = 10 * 1024 * 1024


def topology(lab, queues=1):
    a, g, b = lab.two_hosts(queues)
    for ns, ifname in ((a, "a0"), (b, "b0")):
        lab.run(ns, "ethtool", "-K", ifname, "tx", "off")
    return a, g, b


def xdp_attached(lab, ns, ifname):
    return "prog/xdp" in lab.run(ns, "ip", "-d", "link", "show", ifname).stdout


def test_af_xdp_router_udp_and_tcp_both_families(lab, vecgate, tmp_path):
    a, g, b = topology(lab)
    gw = Vecgate(lab, vecgate, g, router_config("af_xdp"), tmp_path)
    assert xdp_attached(lab, g, "a1") and xdp_attached(lab, g, "b1")
    lab.warm_up(a)
    lab.udp_echoes_both_families(a, b, 7401, 200, 1200)
    lab.tcp_both_families(a, b, 7403, TRANSFER)
    ifs = gw.interfaces()
    for name in ("a", "b"):
        assert ifs[name]["kind"] == "af_xdp"
        # veth has no zero-copy: the socket fell back to copy mode, the program runs natively.
        assert ifs[name]["detail"] == "copy, native XDP", ifs[name]
    assert ifs["a"]["rx_bytes"] >= 2 * TRANSFER and ifs["b"]["tx_bytes"] >= 2 * TRANSFER
    # Every frame fits a UMEM frame: no GSO, nothing refused, no bad descriptors.
    dev = dict(ifs["a"]["device"]) | dict(ifs["b"]["device"])
    for k in ("rx-bad-descriptor", "tx-too-big", "tx-gso-unsupported", "rx-invalid-descriptors", "tx-invalid-descriptors"):
        assert dev.get(k, 0) == 0, dev
    errs = gw.errors()
    assert not any(k[1] in ("truncated", "to-fragment", "bad-checksum") for k in errs), errs
    code, out, _ = gw.stop()
    assert code == 0 and "final:" in out
    # The program went with vecgate.
    assert not xdp_attached(lab, g, "a1") and not xdp_attached(lab, g, "b1")


def test_af_xdp_generic_mode_and_program_removed_after_sigkill(lab, vecgate, tmp_path):
    """`xdp_mode = "generic"`, copy mode asked for explicitly; the BPF link dies with the
    process, so even SIGKILL leaves no program behind."""
    a, g, b = topology(lab)
    gw = Vecgate(lab, vecgate, g, router_config("af_xdp", 'xdp_mode = "generic"\nzero_copy = false\nxdp_frames = 256\n'), tmp_path)
    lab.warm_up(a)
    echo = lab.peer(b, "udp-echo", 7410, 100, "--v6")
    ping = lab.peer_run(a, "udp-ping", "2001:db8:1::2", 7410, 100, 1400)
    assert ping["matched"] == 100, ping
    assert gw.interfaces()["a"]["detail"] == "copy, generic XDP"
    assert "xdpgeneric" in lab.run(g, "ip", "-d", "link", "show", "a1").stdout
    gw.proc.kill()
    gw.proc.communicate(timeout=10)
    assert not xdp_attached(lab, g, "a1") and not xdp_attached(lab, g, "b1")


def test_af_xdp_interface_with_a_program_is_refused(lab, vecgate, tmp_path):
    """A second vecgate on the same interfaces finds the first one's program attached:
    it exits with an error naming the field, and the first keeps forwarding."""
    a, g, b = topology(lab)
    gw = Vecgate(lab, vecgate, g, router_config("af_xdp"), tmp_path)
    cfg = tmp_path / "second.toml"
    cfg.write_text(f'[dataplane]\nsocket = "{tmp_path}/second.sock"\n' + router_config("af_xdp"))
    r = lab.run(g, str(vecgate), "run", "--config", str(cfg), "--duration", "2", check=False)
    assert r.returncode != 0
    assert "interface[0].host_if" in r.stderr and "already has one" in r.stderr, r.stderr
    lab.warm_up(a)
    echo = lab.peer(b, "udp-echo", 7420, 50)
    ping = lab.peer_run(a, "udp-ping", "198.18.1.2", 7420, 50, 200)
    assert ping["matched"] == 50, ping
    assert gw.stop()[0] == 0


def test_af_xdp_two_workers_one_queue_each(lab, vecgate, tmp_path):
    """Two-queue veths, two workers: each worker owns one queue's socket on each
    interface. Six parallel TCP transfers arrive intact and both workers carried packets."""
    a, g, b = topology(lab, queues=2)
    gw = Vecgate(lab, vecgate, g, "[dataplane]\nworkers = 2\n" + router_config("af_xdp"), tmp_path, split_dataplane=True)
    lab.warm_up(a)
    lab.tcp_transfers_at_once(a, b, 7430, 6)
    per_worker = dict(gw.ctl("show", "runtime")["data"]["worker_rx"])
    assert sorted(per_worker) == [0, 1], per_worker
    assert all(n > 100 for n in per_worker.values()), per_worker
    assert gw.stop()[0] == 0


def test_software_rss_two_workers_on_single_queue_interfaces(lab, vecgate, tmp_path):
    """Single-queue veths and two workers: worker 0 owns each interface's only queue and
    hands frames to worker 1 by a hash of their flow (`worker-handoff`); worker 1 sends
    what it routes back through worker 0's sockets (transmit handoff). Six TCP transfers
    in parallel arrive intact, so no flow was reordered into a retransmission storm or
    lost; both workers processed packets; no lane overflowed."""
    a, g, b = topology(lab)
    gw = Vecgate(lab, vecgate, g, "[dataplane]\nworkers = 2\n" + router_config("af_xdp"), tmp_path, split_dataplane=True)
    lab.warm_up(a)
    lab.tcp_transfers_at_once(a, b, 7440, 6)
    per_worker = dict(gw.ctl("show", "runtime")["data"]["worker_rx"])
    assert all(n > 100 for n in per_worker.values()), per_worker
    errs = gw.errors()
    assert errs.get(("worker-handoff", "handed-off"), 0) > 100, errs
    assert errs.get(("worker-handoff", "kept"), 0) > 100, errs
    assert errs.get(("worker-handoff", "lane-full"), 0) == 0, errs
    ifs = gw.interfaces()
    # Both sides carried the transfers, counted once each (not once per worker).
    assert 6 * 4 * 1024 * 1024 <= ifs["b"]["tx_bytes"] < 7 * 4 * 1024 * 1024, ifs["b"]
    assert ifs["b"]["tx_errors"] == 0
    assert gw.stop()[0] == 0
