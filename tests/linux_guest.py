"""The Linux-kernel peer of the interop tests (test_linux_interop, test_ipsec_linux,
test_lb_encap_linux, test_lb_sctp_linux, test_lb_sctp_dsr_linux): a stock Debian kernel
booted under qemu, whose NIC is the TAP `tq0` in a lab namespace (the SCTP tests' guests
have a second, `tq1`).
tests/linux_peer/prepare*.sh build its kernel and initramfs into target/linux-peer/ (kept
between runs; needs root and apt on a fresh machine)."""
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GUEST_DIR = ROOT / "target" / "linux-peer"

# vecgate between the guest and a host H, as test_linux_interop and test_ipsec_linux draw
# it: `peer` on the TAP tq0 (the guest is 198.18.1.2 and 2001:db8:1::2), `h` on a veth to H.
GATEWAY_LINKS = """
[[interface]]
name = "peer"
type = "af_packet"
host_if = "tq0"
mac = "02:00:00:00:aa:01"
addresses = ["198.18.1.1/24", "2001:db8:1::1/64"]

[[interface]]
name = "h"
type = "af_packet"
host_if = "h1"
mac = "02:00:00:00:aa:02"
addresses = ["198.18.200.254/24", "2001:db8:200::fe/64"]
"""

def two_tap_links(mac_byte: int) -> str:
    """vecgate between a guest's two NICs, as the SCTP tests draw it: `srv` on tq0 (the
    guest's eth0 side, 198.18.1.0/24 and 2001:db8:1::/64), `cli` on tq1 (eth1's,
    198.18.0.0/24 and 2001:db8::/64); `mac_byte` tells each test's MACs apart."""
    return "".join(f"""
[[interface]]
name = "{name}"
type = "af_packet"
host_if = "{tap}"
mac = "02:00:00:00:{mac_byte:02x}:{i:02x}"
addresses = ["198.18.{net}.1/24", "2001:db8:{net6}1/64"]
""" for i, (name, tap, net, net6) in enumerate((("srv", "tq0", 1, "1::"), ("cli", "tq1", 0, ":")), start=1))


def prepare(script: str) -> Path:
    """Run tests/linux_peer/`script` (it builds what is missing): the folder the guest boots from."""
    r = subprocess.run([str(ROOT / "tests" / "linux_peer" / script)], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    return GUEST_DIR


def gateway_and_host(lab, h_addresses):
    """The namespaces of GATEWAY_LINKS: vecgate's, holding the TAP tq0 for the guest, and
    H's, at `h_addresses` and 2001:db8:200::1 with vecgate its default gateway both ways:
    (vecgate's, H's)."""
    g, h = lab.dataplane_ns("pq"), lab.ns("h")
    lab.run(g, "ip", "tuntap", "add", "dev", "tq0", "mode", "tap")
    lab.run(g, "ip", "link", "set", "tq0", "up")
    lab.veth(h, "h0", g, "h1")
    for a in h_addresses:
        lab.run(h, "ip", "addr", "add", a, "dev", "h0")
    lab.run(h, "ip", "addr", "add", "2001:db8:200::1/64", "dev", "h0", "nodad")
    lab.run(h, "ip", "route", "add", "default", "via", "198.18.200.254")
    lab.run(h, "ip", "-6", "route", "add", "default", "via", "2001:db8:200::fe")
    return g, h


def boot(lab, ns, guest_dir: Path, initrd: str, console: Path, linger: int, taps=("tq0",), console_in=False, append=""):
    """The guest booted in `ns` from `guest_dir`'s kernel and `initrd` under software
    emulation (a minute or so before it sends), its NICs the TAPs `taps` there (eth0, eth1
    … in that order), its console written to `console` (and, `console_in`, read from the
    process's stdin, a pipe), staying up `linger` seconds after its checks (`append`:
    more of the kernel's command line, which the guest's init reads): the qemu process."""
    nics = []
    for i, tap in enumerate(taps):
        # qemu's own default MAC for the first, one more for each further NIC.
        nics += ["-netdev", f"tap,id=n{i},ifname={tap},script=no,downscript=no",
                 "-device", f"virtio-net-pci,netdev=n{i},mac=52:54:00:12:34:{0x56 + i:02x}"]
    with open(console, "w") as out:
        return lab.spawn_to(ns, out, "qemu-system-x86_64", "-accel", "tcg", "-cpu", "max", "-m", "256", "-smp", "1",
                            "-nographic", "-no-reboot", "-kernel", str(guest_dir / "vmlinuz"), "-initrd", str(guest_dir / initrd),
                            "-append", f"console=ttyS0 panic=-1 quiet linger={linger} {append}".rstrip(), *nics,
                            stdin=subprocess.PIPE if console_in else subprocess.DEVNULL)


class Console:
    """A guest booted with `console_in`: commands in (qemu's stdin), `GUEST:` lines out
    (its console log)."""

    def __init__(self, qemu, log: Path):
        self.qemu, self.log = qemu, log

    def lines(self):
        return [l.strip() for l in self.log.read_text(errors="replace").splitlines() if l.startswith("GUEST:")]

    def tail(self, chars=3000):
        """The end of the console log, for an assertion's message."""
        return self.log.read_text(errors="replace")[-chars:]

    def command(self, line: str, done, seconds: float = 150):
        """Send `line`; then wait, at most `seconds` and while the guest runs, until
        `done` (a function of the `GUEST:` lines since) is true: those lines."""
        start = len(self.lines())
        self.qemu.stdin.write(f"{line}\n".encode())
        self.qemu.stdin.flush()
        deadline = time.time() + seconds
        while True:
            new = self.lines()[start:]
            if done(new) or time.time() > deadline or self.qemu.poll() is not None:
                return new
            time.sleep(0.2)
