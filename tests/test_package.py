"""The Debian package (scripts/package.sh, cargo-deb): its contents, a real install on
this machine, the service run the way its unit runs it (as the `vecgate` user with only
the unit's capabilities, readiness told over NOTIFY_SOCKET as systemd's Type=notify
expects), its ExecReload run as `systemctl reload` would (SIGHUP: the file is reloaded),
the unit checked by `systemd-analyze verify`, then removal and purge.

systemd is not PID 1 of this machine, so the installed unit also runs under a systemd
started as PID 1 of new namespaces (its container mode): `systemctl start` (returning
after READY=1), `is-active`, `status`, `reload` (the journal shows the change applied)
and `stop`."""
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
CAPS = "+net_admin,+net_raw,+bpf,+sys_nice,+ipc_lock"


def sh(*args, check=True, **kw):
    return subprocess.run(list(args), capture_output=True, text=True, timeout=kw.pop("timeout", 600), check=check, **kw)


def installed():
    return sh("dpkg-query", "-W", "-f=${Status}", "vecgate", check=False).stdout.startswith("install ok installed")


@pytest.fixture(scope="module")
def package():
    if os.geteuid() != 0:
        pytest.skip("installing a package needs root")
    owner = sh("dpkg", "-S", "/usr/bin/vecgate", check=False)
    if Path("/usr/bin/vecgate").exists() and owner.returncode != 0:
        pytest.skip("/usr/bin/vecgate exists and is not from the vecgate package: not replacing it")
    out = sh(str(ROOT / "scripts/package.sh"), timeout=1800)
    deb = Path(ROOT / out.stdout.strip().splitlines()[-1])
    assert deb.exists(), out.stdout + out.stderr
    yield deb
    if installed():
        sh("dpkg", "--purge", "vecgate", check=False)


def test_package_contents(package):
    files = {l.split()[-1].lstrip(".") for l in sh("dpkg-deb", "-c", str(package)).stdout.splitlines()}
    for f in ["/usr/bin/vecgate", "/usr/lib/systemd/system/vecgate.service", "/etc/vecgate/vecgate.toml",
              "/usr/share/man/man1/vecgate.1.gz", "/usr/share/bash-completion/completions/vecgate",
              "/usr/share/doc/vecgate/CONFIGURATION.md"]:
        assert f in files, (f, sorted(files))
    info = sh("dpkg-deb", "-I", str(package)).stdout
    assert "adduser" in info and "Package: vecgate" in info
    conffiles = sh("dpkg-deb", "--ctrl-tarfile", str(package))
    assert conffiles.returncode == 0


def test_install_run_as_the_unit_does_remove_and_purge(package, tmp_path):
    r = sh("dpkg", "-i", str(package), check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert installed()
    user = pwd.getpwnam("vecgate")
    assert user.pw_shell in ("/usr/sbin/nologin", "/bin/false", "/usr/bin/false"), user
    assert "0.1" in sh("/usr/bin/vecgate", "--version").stdout
    assert sh("man", "-w", "vecgate", check=False).stdout.strip().endswith("vecgate.1.gz")
    unit = Path("/usr/lib/systemd/system/vecgate.service")
    v = sh("systemd-analyze", "verify", str(unit), check=False)
    assert v.returncode == 0 and "vecgate.service" not in v.stderr, v.stderr

    # The unit's ExecStart, as the unit runs it: user vecgate, ambient capabilities, the
    # runtime directory systemd would create, and a NOTIFY_SOCKET to hear READY=1 on.
    lines = unit.read_text().splitlines()
    exec_start = next(l for l in lines if l.startswith("ExecStart=")).split("=", 1)[1].split()
    # `systemctl reload` runs the ExecReload lines in turn, as the service's user, with
    # $MAINPID set to the service's process; the first checks the file.
    exec_reloads = [l.split("=", 1)[1].split() for l in lines if l.startswith("ExecReload=")]
    assert [c[:2] for c in exec_reloads] == [["/usr/bin/vecgate", "check"], ["/bin/kill", "-HUP"]], exec_reloads
    run_dir = Path("/run/vecgate")
    made_run_dir = not run_dir.exists()
    run_dir.mkdir(mode=0o750, exist_ok=True)
    os.chown(run_dir, user.pw_uid, user.pw_gid)
    # The service user must reach the socket: pytest's own folders are root-only.
    notify_dir = Path(tempfile.mkdtemp(prefix="vecgate-notify-", dir="/tmp"))
    os.chmod(notify_dir, 0o755)
    notify_path = notify_dir / "notify.sock"
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(notify_path))
    os.chmod(notify_path, 0o777)
    notify.settimeout(20)
    as_user = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--init-groups", "--"]
    setpriv = as_user[:-1] + [f"--inh-caps={CAPS}", f"--ambient-caps={CAPS}", "--"]
    log = tmp_path / "vecgate.log"
    proc = subprocess.Popen(setpriv + exec_start, stdout=subprocess.DEVNULL, stderr=log.open("w"),
                            env={"NOTIFY_SOCKET": str(notify_path), "PATH": "/usr/bin:/bin"})
    try:
        msg = notify.recv(4096).decode()
        assert "READY=1" in msg, msg
        sock = Path("/run/vecgate/vecgate.sock")
        assert sock.exists() and sock.stat().st_uid == user.pw_uid
        r = sh("/usr/bin/vecgate", "ctl", "--socket", str(sock), "show", "interfaces")
        assert "null0" in r.stdout
        # The unit's ExecReload, as systemd runs it: the service reloads its file and runs on.
        for cmd in exec_reloads:
            sh(*as_user, *[str(proc.pid) if a in ("$MAINPID", "${MAINPID}") else a for a in cmd])
        deadline = time.time() + 20
        while "reloaded" not in log.read_text():
            assert time.time() < deadline and proc.poll() is None, log.read_text()
            time.sleep(0.1)
        assert "/etc/vecgate/vecgate.toml" in log.read_text() and "refused" not in log.read_text(), log.read_text()
        assert proc.poll() is None and "null0" in sh("/usr/bin/vecgate", "ctl", "--socket", str(sock), "show", "interfaces").stdout
        # A bad file fails the reload at its check, naming the mistake; no signal is sent.
        conf = Path("/etc/vecgate/vecgate.toml")
        good = conf.read_text()
        conf.write_text(good + '\n[[route]]\nprefix = "198.19.0.0/33"\nblackhole = true\n')
        try:
            r = sh(*as_user, *exec_reloads[0], check=False)
            assert r.returncode == 1 and "vecgate.toml: route[0].prefix" in r.stderr, r
        finally:
            conf.write_text(good)
        proc.terminate()
        assert "STOPPING=1" in notify.recv(4096).decode()
        assert proc.wait(timeout=20) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
        notify.close()
        shutil.rmtree(notify_dir, ignore_errors=True)
        if made_run_dir:
            shutil.rmtree(run_dir, ignore_errors=True)

    # Removal keeps the edited configuration (a conffile); purge removes it and the user.
    sh("dpkg", "-r", "vecgate")
    assert not Path("/usr/bin/vecgate").exists() and Path("/etc/vecgate/vecgate.toml").exists()
    sh("dpkg", "--purge", "vecgate")
    assert not Path("/etc/vecgate/vecgate.toml").exists()
    with pytest.raises(KeyError):
        pwd.getpwnam("vecgate")


# PID 1 of the nested systemd: its own /run (the unit's RuntimeDirectory, the journal,
# /run/systemd/private for systemctl), /tmp (the unit's PrivateTmp) and a cgroup2
# hierarchy rooted at the cgroup it was started in; /sys read-only as in a container.
# SYSTEMD_UNIT_PATH holds only the package's unit, the journal and empty stand-ins for
# the targets the unit orders itself after, so none of the host's services start.
BOOT = """set -e
mount -t tmpfs tmpfs /run
mkdir -p /run/vecgate-test-units /run/systemd/journald.conf.d
cp -a "$1"/. /run/vecgate-test-units/
printf '[Journal]\\nStorage=volatile\\n' > /run/systemd/journald.conf.d/volatile.conf
mount -t tmpfs tmpfs /tmp
mount --bind /sys /sys
mount -o remount,bind,ro /sys
mount -t cgroup2 cgroup2 /sys/fs/cgroup
mount -t proc proc /proc
exec env -i container=vecgate-test SYSTEMD_UNIT_PATH=/run/vecgate-test-units \\
    /lib/systemd/systemd --system --unit=vecgate-test.target
"""


def cgroup2_root():
    for line in Path("/proc/self/mounts").read_text().splitlines():
        _, where, kind = line.split()[:3]
        if kind == "cgroup2":
            return Path(where)
    raise AssertionError("no cgroup2 hierarchy is mounted: a nested systemd needs one")


class NestedSystemd:
    """systemd as PID 1 of new PID, mount, cgroup, UTS and network namespaces (its
    container mode), driven with systemctl and journalctl entered into them."""

    def __init__(self, tmp_path):
        units = tmp_path / "units"
        units.mkdir()
        (units / "vecgate-test.target").write_text(
            "[Unit]\nDescription=vecgate test boot\n"
            "Wants=systemd-journald.socket systemd-journald-dev-log.socket systemd-journald.service\n")
        for t in ["sysinit", "basic", "network-online", "shutdown"]:
            (units / f"{t}.target").write_text(f"[Unit]\nDescription={t} (empty in this test)\n")
        for u in ["systemd-journald.service", "systemd-journald.socket", "systemd-journald-dev-log.socket"]:
            (units / u).symlink_to(Path("/lib/systemd/system") / u)
        (units / "vecgate.service").symlink_to("/usr/lib/systemd/system/vecgate.service")
        boot = tmp_path / "boot.sh"
        boot.write_text(BOOT)
        self.cgroup = cgroup2_root() / f"vecgate-systemd-test-{os.getpid()}"
        self.cgroup.mkdir()
        self.log = (tmp_path / "systemd.log").open("w")
        self.outer = subprocess.Popen(
            ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec unshare --pid --fork --kill-child --mount --cgroup --uts '
             '--net --propagation private sh "$1" "$2"', str(self.cgroup), str(boot), str(units)],
            stdout=self.log, stderr=self.log)
        self.pid = None
        try:
            self.wait_running()
        except BaseException:
            self.close()  # no systemd, namespace or cgroup left behind by a failed boot
            raise

    def wait_running(self):
        deadline = time.time() + 60
        while True:
            assert self.outer.poll() is None and time.time() < deadline, Path(self.log.name).read_text()
            if self.pid is None:
                children = Path(f"/proc/{self.outer.pid}/task/{self.outer.pid}/children")
                kids = children.read_text().split() if children.exists() else []
                self.pid = kids[0] if kids else None
            elif "systemd" in Path(f"/proc/{self.pid}/comm").read_text():
                state = self.run("systemctl", "is-system-running").stdout.strip()
                assert state not in ("degraded", "maintenance", "stopping"), self.run("systemctl", "--failed").stdout
                if state == "running":
                    break
            time.sleep(0.1)

    def run(self, *args):
        return sh("nsenter", "-t", str(self.pid), "-m", "-p", "--", *args, check=False, timeout=120)

    def journal(self, unit):
        return self.run("journalctl", "-u", unit, "--no-pager", "-o", "cat").stdout

    def close(self):
        # SIGRTMIN+15: immediate power-off, which in a container is PID 1 exiting.
        if self.outer.poll() is None:
            try:
                if self.pid:
                    os.kill(int(self.pid), signal.SIGRTMIN + 15)
                self.outer.wait(timeout=30)
            except (subprocess.TimeoutExpired, ProcessLookupError):
                self.outer.kill()  # --kill-child: its PID 1 and with it the namespace go
                self.outer.wait(timeout=30)
        self.log.close()
        # The cgroups empty as the namespace's last processes are reaped.
        deadline = time.time() + 30
        for d in sorted(self.cgroup.rglob("*"), key=lambda p: -len(p.parts)) + [self.cgroup]:
            while d.is_dir():
                try:
                    d.rmdir()
                except OSError:
                    assert time.time() < deadline, f"{d}: " + (d / "cgroup.procs").read_text()
                    time.sleep(0.1)


def test_systemctl_start_status_reload_stop_under_systemd(package, tmp_path):
    r = sh("dpkg", "-i", str(package), check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    user = pwd.getpwnam("vecgate")
    conf = Path("/etc/vecgate/vecgate.toml")
    packaged_conf = conf.read_text()
    systemd = NestedSystemd(tmp_path)
    try:
        # Type=notify: `start` returns once vecgate said READY=1, which it says after its
        # control socket answers.
        r = systemd.run("systemctl", "start", "vecgate")
        assert r.returncode == 0, r.stderr + systemd.journal("vecgate")
        assert systemd.run("systemctl", "is-active", "vecgate").stdout.strip() == "active"
        r = systemd.run("/usr/bin/vecgate", "ctl", "--socket", "/run/vecgate/vecgate.sock", "show", "interfaces")
        assert r.returncode == 0 and "null0" in r.stdout, r.stderr
        props = dict(l.split("=", 1) for l in systemd.run(
            "systemctl", "show", "vecgate", "-p", "Type", "-p", "MainPID", "-p", "NRestarts").stdout.splitlines())
        assert props["Type"] == "notify" and props["NRestarts"] == "0" and int(props["MainPID"]) > 0, props
        main_pid = props["MainPID"]
        status = systemd.run("systemctl", "status", "vecgate", "--no-pager")
        assert status.returncode == 0, status.stdout + status.stderr
        assert "Active: active (running)" in status.stdout and f"Main PID: {main_pid} (vecgate)" in status.stdout, status.stdout
        # The unit's user and capabilities, as systemd gave them.
        proc_status = dict(l.split(":", 1) for l in systemd.run("cat", f"/proc/{main_pid}/status").stdout.splitlines())
        assert proc_status["Uid"].split()[0] == str(user.pw_uid), proc_status["Uid"]
        caps = sum(1 << n for n in (12, 13, 14, 23, 39))  # net_admin, net_raw, ipc_lock, sys_nice, bpf
        assert int(proc_status["CapEff"], 16) == caps, proc_status["CapEff"]

        # `systemctl reload` (ExecReload: SIGHUP) applies the edited file.
        conf.write_text(packaged_conf + '\n[[route]]\nprefix = "198.19.5.0/24"\nvia = "198.18.0.2"\n')
        r = systemd.run("systemctl", "reload", "vecgate")
        assert r.returncode == 0, r.stderr
        deadline = time.time() + 30
        while "reloaded" not in systemd.journal("vecgate"):
            assert time.time() < deadline, systemd.journal("vecgate")
            time.sleep(0.1)
        journal = systemd.journal("vecgate")
        assert "reloaded file=/etc/vecgate/vecgate.toml changes=1" in journal, journal
        assert 'config applied action="added" object="route" name=198.19.5.0/24 via 198.18.0.2' in journal, journal
        r = systemd.run("/usr/bin/vecgate", "ctl", "--socket", "/run/vecgate/vecgate.sock", "show", "ip", "fib", "198.19.5.0/24")
        assert "198.19.5.0/24" in r.stdout, r.stdout + r.stderr
        assert systemd.run("systemctl", "show", "vecgate", "-p", "MainPID").stdout.strip() == f"MainPID={main_pid}"

        r = systemd.run("systemctl", "stop", "vecgate")
        assert r.returncode == 0, r.stderr
        assert systemd.run("systemctl", "is-active", "vecgate").stdout.strip() == "inactive"
        props = dict(l.split("=", 1) for l in systemd.run(
            "systemctl", "show", "vecgate", "-p", "Result", "-p", "ExecMainStatus").stdout.splitlines())
        assert props == {"Result": "success", "ExecMainStatus": "0"}, props
        assert "dataplane stopped" in systemd.journal("vecgate")
    finally:
        systemd.close()
        conf.write_text(packaged_conf)
