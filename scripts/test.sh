#!/usr/bin/env bash
# Every test vecgate has, on a fresh machine. Installs what the tests need:
#   Debian: tshark, iproute2, iputils-ping, ethtool, chromium (the /graph page test),
#           groff-base, man-db, systemd, adduser, dpkg-dev (man page and package tests),
#           qemu-user (an older CPU model: the x86-64-v3 check), strongSwan (IKEv2 peer,
#           and Debian's strongSwan source for the kernel-vecgate plugin's headers);
#   intel-ipsec-mb 2.0 (ESP's AES-GCM; on Debian 12 Debian 13's build, by
#   scripts/install-ipsec-mb.sh);
#   PyPI: scapy, pytest, prometheus_client; crates.io: cargo-deb (by scripts/package.sh).
# Builds, runs the Rust suites (unit, property, fuzz-corpus replay, engine) and the Python
# suites (scapy/tshark golden pcap tests, live run + ctl, metrics, packaging, bench smoke,
# and end-to-end tests with Linux hosts in network namespaces the tests create and
# delete; those need root).
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"

missing=()
command -v tshark >/dev/null 2>&1 || missing+=(tshark)
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
command -v ping >/dev/null 2>&1 || missing+=(iputils-ping)
command -v ethtool >/dev/null 2>&1 || missing+=(ethtool)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v groff >/dev/null 2>&1 || missing+=(groff-base)
command -v man >/dev/null 2>&1 || missing+=(man-db)
command -v systemd-analyze >/dev/null 2>&1 || missing+=(systemd)
command -v adduser >/dev/null 2>&1 || missing+=(adduser)
command -v dpkg-shlibdeps >/dev/null 2>&1 || missing+=(dpkg-dev)
command -v qemu-x86_64 >/dev/null 2>&1 || missing+=(qemu-user)
# Intel's IPsec Multi-Buffer library: ESP's AES-GCM (crates/ipsec/build.rs finds its header).
[ -e /usr/include/intel-ipsec-mb.h ] || missing+=(libipsec-mb-dev)
python3 -m pip --version >/dev/null 2>&1 || missing+=(python3-pip)
# strongSwan (tests/test_ipsec_strongswan.py): charon with its userspace ESP, swanctl.
[ -e /usr/lib/ipsec/plugins/libstrongswan-kernel-libipsec.so ] && command -v swanctl >/dev/null 2>&1 \
    || missing+=(strongswan-charon strongswan-swanctl libstrongswan-extra-plugins libcharon-extra-plugins)
# conntrack: its NAT test forgets the NAT's mappings (a new one, a new port).
command -v conntrack >/dev/null 2>&1 || missing+=(conntrack)
if [ ${#missing[@]} -gt 0 ]; then
    echo "== installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    echo "wireshark-common wireshark-common/install-setuid boolean false" | $SUDO debconf-set-selections || true
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
    # A build from before the library was installed probed without it: probe again.
    if [[ " ${missing[*]} " == *" libipsec-mb-dev "* ]]; then touch crates/ipsec/build.rs; fi
fi
# ESP's AES-GCM on intel-ipsec-mb 2.0 or later, half the cycles of Debian 12's 1.3 at 64 B.
scripts/install-ipsec-mb.sh | tail -1
if ! python3 -c "import scapy, pytest, prometheus_client" >/dev/null 2>&1; then
    echo "== installing scapy, pytest, prometheus_client"
    python3 -m pip install --quiet "scapy>=2.5" pytest prometheus_client || python3 -m pip install --quiet --break-system-packages "scapy>=2.5" pytest prometheus_client
fi
if ! python3 -c "import cryptography" >/dev/null 2>&1; then
    echo "== installing cryptography (scapy's ESP layer)"
    python3 -m pip install --quiet cryptography || python3 -m pip install --quiet --break-system-packages cryptography
fi
command -v cargo >/dev/null 2>&1 || { echo "Rust is needed: https://rustup.rs (stable)"; exit 1; }
# kube-apiserver, kubectl and kube-proxy v1.31 for tests/test_lb_k8s.py, built from the Go
# module proxy into ~/.cache/vecgate-k8s (~9 min the first time, instant when cached;
# also installs etcd-server, nftables, curl, openssl)
echo "== kubernetes test binaries"
tests/k8s/build.sh | tail -1

# contrib/strongswan's charon plugin for the installed strongSwan, against Debian's source
# of it (half a minute the first time, cached in ~/.cache/vecgate-strongswan).
echo "== strongSwan plugin (kernel-vecgate)"
scripts/build-strongswan-plugin.sh | tail -1

echo "== build"
cargo build --release --workspace --locked 2>/dev/null || cargo build --release --workspace

# Every test binary runs even after one fails, and the python tests run after failed Rust
# tests too, so that one run shows every failure; the exit status is still a failure.
echo "== rust tests"
rust_status=0
cargo test --release --workspace --no-fail-fast || rust_status=$?

# CPU time the hypervisor gave to others while the tests ran ("steal", /proc/stat): the
# network-namespace tests time real transfers, and a starved VM shows up here first.
cpu_times() { awk '/^cpu /{print $2+$3+$4+$5+$6+$7+$8+$9, $9}' /proc/stat; }
steal_report() {
    read -r total1 steal1 <<<"$(cpu_times)"
    awk -v t="$((total1 - total0))" -v s="$((steal1 - steal0))" 'BEGIN { if (t > 0) printf "== host steal during the python tests: %.1f%% of CPU time\n", 100 * s / t }'
}

echo "== python tests (scapy builds, vecgate runs, scapy and tshark dissect)"
read -r total0 steal0 <<<"$(cpu_times)"
trap steal_report EXIT
py_status=0
VECGATE_BIN="$PWD/target/release/vecgate" python3 -m pytest -q tests/ || py_status=$?
if [ "$rust_status" -ne 0 ] || [ "$py_status" -ne 0 ]; then
    echo "== FAILED: rust tests exit $rust_status, python tests exit $py_status"
    exit 1
fi
