"""The Debian package (scripts/package.sh, cargo-deb): its contents, a real install on
this machine, the service run the way its unit runs it (as the `vecgate` user with only
the unit's capabilities, readiness told over NOTIFY_SOCKET as systemd's Type=notify
expects), its ExecReload run as `systemctl reload` would (SIGHUP: the file is reloaded),
the unit checked by `systemd-analyze verify`, then removal and purge.

systemd itself is not PID 1 here, so `systemctl start/status` cannot run; everything the
unit promises is exercised without it."""
import os
import pwd
import shutil
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
    # `systemctl reload` runs ExecReload with $MAINPID set to the service's process.
    exec_reload = next((l for l in lines if l.startswith("ExecReload=")), "ExecReload= missing").split("=", 1)[1].split()
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
    setpriv = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--init-groups",
               f"--inh-caps={CAPS}", f"--ambient-caps={CAPS}", "--"]
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
        reload = [str(proc.pid) if a in ("$MAINPID", "${MAINPID}") else a for a in exec_reload]
        assert str(proc.pid) in reload, exec_reload
        sh(*reload)
        deadline = time.time() + 20
        while "reloaded" not in log.read_text():
            assert time.time() < deadline and proc.poll() is None, log.read_text()
            time.sleep(0.1)
        assert "/etc/vecgate/vecgate.toml" in log.read_text() and "refused" not in log.read_text(), log.read_text()
        assert proc.poll() is None and "null0" in sh("/usr/bin/vecgate", "ctl", "--socket", str(sock), "show", "interfaces").stdout
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
