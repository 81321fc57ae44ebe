"""Network-namespace labs for end-to-end tests: namespaces and veth pairs the test
creates and deletes itself. Addresses come from 198.18.0.0/15 and 2001:db8::/32 only;
namespaces have no route out, so nothing leaves the machine."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PEER = HERE / "peer.py"


def sh(*cmd, check=True, timeout=30, capture=True):
    r = subprocess.run(list(cmd), capture_output=capture, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr.strip()}")
    return r


class Lab:
    """Namespaces named `vgt<pid>-<name>`, all deleted (with their veths) by close()."""

    def __init__(self):
        self.prefix = f"vgt{os.getpid() % 100000}"
        self.namespaces = []
        self.procs = []

    def ns(self, name):
        full = f"{self.prefix}-{name}"
        sh("ip", "netns", "del", full, check=False)
        sh("ip", "netns", "add", full)
        self.namespaces.append(full)
        sh("ip", "-n", full, "link", "set", "lo", "up")
        return full

    def veth(self, ns1, if1, ns2, if2, mtu=1500, queues=1):
        q = ["numtxqueues", str(queues), "numrxqueues", str(queues)]
        sh("ip", "link", "add", if1, "netns", ns1, "mtu", str(mtu), *q, "type", "veth", "peer", "name", if2, "netns", ns2, "mtu", str(mtu), *q)
        sh("ip", "-n", ns1, "link", "set", if1, "up")
        sh("ip", "-n", ns2, "link", "set", if2, "up")

    def dataplane_ns(self, name):
        """A namespace for vecgate: the kernel there must not answer on its links."""
        full = self.ns(name)
        sh("ip", "netns", "exec", full, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1")
        sh("ip", "netns", "exec", full, "sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1")
        return full

    def host(self, ns, ifname, v4, v6, gw4, gw6):
        sh("ip", "-n", ns, "addr", "add", v4, "dev", ifname)
        sh("ip", "-n", ns, "addr", "add", v6, "dev", ifname, "nodad")
        sh("ip", "-n", ns, "route", "add", "default", "via", gw4)
        sh("ip", "-n", ns, "-6", "route", "add", "default", "via", gw6)

    def two_hosts(self, queues=1):
        """Host A (198.18.0.2, 2001:db8::2) on veth a0 to the gateway's a1, host B
        (198.18.1.2, 2001:db8:1::2) on b0 to b1, the gateway (198.18.0.1 / 198.18.1.1,
        ::1 of each /64, `router_config`) in a dataplane namespace between them: the
        namespaces (a, gw, b)."""
        a, g, b = self.ns("a"), self.dataplane_ns("gw"), self.ns("b")
        self.veth(a, "a0", g, "a1", queues=queues)
        self.veth(b, "b0", g, "b1", queues=queues)
        self.host(a, "a0", "198.18.0.2/24", "2001:db8::2/64", "198.18.0.1", "2001:db8::1")
        self.host(b, "b0", "198.18.1.2/24", "2001:db8:1::2/64", "198.18.1.1", "2001:db8:1::1")
        return a, g, b

    def warm_up(self, a):
        """Pings from A to B in both families: the first packets each way trigger ARP / ND
        on both sides (`two_hosts`)."""
        for dst in ("198.18.1.2", "2001:db8:1::2"):
            self.run(a, "ping", "-c", "3", "-i", "0.2", "-W", "1", dst, check=False)

    def udp_echoes_both_families(self, a, b, first_port, count, size, timeout=90, why=lambda: ()):
        """`count` UDP datagrams of `size` bytes from host A echoed by host B (`two_hosts`),
        over IPv4 then IPv6, on ports `first_port` and `first_port` + 1: every one comes
        back. `why()`: more to show when one does not."""
        for dst, flag, port in (("198.18.1.2", "", first_port), ("2001:db8:1::2", "--v6", first_port + 1)):
            echo = self.peer(b, "udp-echo", port, count, *([flag] if flag else []))
            ping = self.peer_run(a, "udp-ping", dst, port, count, size, timeout=timeout)
            assert ping["matched"] == count, "\n".join(map(str, (ping, *why())))
            assert result(echo)["echoed"] == count

    def tcp_both_families(self, a, b, first_port, size, why=lambda: ()):
        """A TCP transfer of `size` bytes from host A to host B (`two_hosts`), over IPv4
        then IPv6, on ports `first_port` and `first_port` + 1: B reads every byte A wrote.
        `why()`: more to show when it does not."""
        for dst, flag, port in (("198.18.1.2", "", first_port), ("2001:db8:1::2", "--v6", first_port + 1)):
            recv = self.peer(b, "tcp-recv", port, *([flag] if flag else []))
            sent = self.peer_run(a, "tcp-send", dst, port, size)
            got = result(recv)
            print(f"tcp to {dst}: sent {sent}, received {got}")  # shown when the test fails
            assert same_stream(sent, got) and got["bytes"] == size, (sent, got, *why())

    def tcp_transfers_at_once(self, a, b, first_port, flows, size=4 * 1024 * 1024):
        """`flows` TCP transfers of `size` bytes from host A to host B (`two_hosts`, IPv4)
        at the same time, on ports `first_port` on (flows for the workers to share): each
        arrives whole."""
        started = []
        for port in range(first_port, first_port + flows):
            recv = self.peer(b, "tcp-recv", port)
            send = self.peer_start(a, "tcp-send", "198.18.1.2", port, size)
            started.append((send, recv))
        for send, recv in started:
            s, r = result(send), result(recv)
            assert same_stream(s, r) and r["bytes"] == size, (s, r)

    def run(self, ns, *cmd, timeout=30, check=True):
        return sh("ip", "netns", "exec", ns, *cmd, timeout=timeout, check=check)

    def spawn(self, ns, *cmd, **kw):
        p = subprocess.Popen(["ip", "netns", "exec", ns, *cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
        self.procs.append(p)
        return p

    def spawn_to(self, ns, out, *cmd, stdin=subprocess.DEVNULL):
        """A process whose output goes to the open file `out` (a console log)."""
        p = subprocess.Popen(["ip", "netns", "exec", ns, *cmd], stdout=out, stderr=subprocess.STDOUT, stdin=stdin)
        self.procs.append(p)
        return p

    def peer(self, ns, *args, **kw):
        """A listening peer, returned once its socket is bound (it prints READY)."""
        p = self.spawn(ns, sys.executable, str(PEER), *map(str, args), **kw)
        import select
        ready, _, _ = select.select([p.stdout], [], [], 10)
        line = p.stdout.readline() if ready else ""
        assert line.strip() == "READY", f"peer {args} did not start: {line!r}"
        return p

    def peer_start(self, ns, *args):
        """A sending peer, running in the background (read it with `result`)."""
        return self.spawn(ns, sys.executable, str(PEER), *map(str, args))

    def peer_run(self, ns, *args, timeout=90):
        """Run a peer to completion and return its JSON result. The time limit allows for
        this VM's host pauses (a paused second makes every echo in it late, and each late
        one is waited for); what the test asserts about the result is unchanged."""
        r = self.run(ns, sys.executable, str(PEER), *map(str, args), timeout=timeout)
        return json.loads(r.stdout.strip().splitlines()[-1])

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(5)
                except subprocess.TimeoutExpired:
                    p.kill()
        for n in self.namespaces:
            sh("ip", "netns", "del", n, check=False)


def router_config(kind, extra=""):
    """The gateway of `Lab.two_hosts`: interfaces `a` (on a1) and `b` (on b1) of type
    `kind`, each with the lines `extra`."""
    return f"""
[[interface]]
name = "a"
type = "{kind}"
host_if = "a1"
mac = "02:00:00:00:00:0a"
addresses = ["198.18.0.1/24", "2001:db8::1/64"]
{extra}
[[interface]]
name = "b"
type = "{kind}"
host_if = "b1"
mac = "02:00:00:00:00:0b"
addresses = ["198.18.1.1/24", "2001:db8:1::1/64"]
{extra}
"""


def wait_for(log: Path, text: str, proc, seconds: float):
    """Whether `text` appears in the file `log` (a guest's console, a daemon's log) within
    `seconds`, while `proc`, which writes it, runs."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        if log.exists() and text in log.read_text(errors="replace"):
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.2)
    return False


def result(p, timeout=40):
    out, err = p.communicate(timeout=timeout)
    lines = [l for l in out.strip().splitlines() if l.startswith("{")]
    assert lines, f"peer printed nothing: {err}"
    return json.loads(lines[-1])


def same_stream(sent, got):
    """A TCP transfer arrived whole: the receiver read the bytes the sender wrote."""
    return (sent["bytes"], sent["sha256"]) == (got["bytes"], got["sha256"])


class Vecgate:
    """A vecgate running in a namespace with a config, driven over its control socket."""

    def __init__(self, lab, bin_path, ns, config_text, tmp, name="gw", split_dataplane=False):
        """`split_dataplane`: the config text opens with its own [dataplane] table, which
        gets the socket line added."""
        self.bin = str(bin_path)
        self.sock = str(tmp / f"{name}.sock")
        self.cfg = tmp / f"{name}.toml"
        if split_dataplane:
            assert config_text.startswith("[dataplane]\n")
            text = config_text.replace("[dataplane]\n", f'[dataplane]\nsocket = "{self.sock}"\n', 1)
        else:
            text = f'[dataplane]\nsocket = "{self.sock}"\n' + config_text
        self.cfg.write_text(text)
        self.log = tmp / f"{name}.log"
        self.lab, self.ns = lab, ns
        self.start()

    def start(self):
        """Run the gateway on its config; returns once its socket answers."""
        self.proc = self.lab.spawn(self.ns, self.bin, "run", "--config", str(self.cfg), "--interval", "0", "--duration", "300")
        deadline = time.time() + 10
        # The socket is bound before the interfaces open; the first answer comes after.
        while not os.path.exists(self.sock) or subprocess.run(
                [self.bin, "ctl", "--socket", self.sock, "show", "interfaces"], capture_output=True, timeout=10).returncode != 0:
            if self.proc.poll() is not None or time.time() > deadline:
                out, err = self.proc.communicate(timeout=5)
                raise RuntimeError(f"vecgate did not start: {err}{out}")
            time.sleep(0.05)

    def ctl(self, *words, json_out=True):
        cmd = [self.bin, "ctl", "--socket", self.sock] + (["--json"] if json_out else []) + list(words)
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
        assert r.returncode == 0, r.stderr + r.stdout
        return json.loads(r.stdout) if json_out else r.stdout

    def interfaces(self):
        return {row["name"]: row for row in self.ctl("show", "interfaces")["data"]}

    def errors(self):
        return {(c["node"], c["counter"]): c["count"] for c in self.ctl("show", "errors")["data"]}

    def stop(self):
        """SIGTERM; returns the exit code and what it printed."""
        self.proc.terminate()
        out, err = self.proc.communicate(timeout=15)
        return self.proc.returncode, out, err

    def restart(self):
        """Stop, then start again on the same config and socket (only what the config
        holds comes back); returns what stop() does."""
        stopped = self.stop()
        self.start()
        return stopped
