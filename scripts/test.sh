#!/usr/bin/env bash
# Every test vecgate has, on a fresh machine: installs what the tests need (Debian
# packages: tshark, iproute2, iputils-ping, ethtool; PyPI: scapy, pytest), builds, runs the Rust
# suites (unit, property, fuzz-corpus replay, engine) and the Python suites (scapy/tshark
# golden pcap tests, live run + ctl, bench smoke, and end-to-end tests with Linux hosts
# in network namespaces the tests create and delete; those need root).
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"

missing=()
command -v tshark >/dev/null 2>&1 || missing+=(tshark)
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
command -v ping >/dev/null 2>&1 || missing+=(iputils-ping)
command -v ethtool >/dev/null 2>&1 || missing+=(ethtool)
python3 -m pip --version >/dev/null 2>&1 || missing+=(python3-pip)
if [ ${#missing[@]} -gt 0 ]; then
    echo "== installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    echo "wireshark-common wireshark-common/install-setuid boolean false" | $SUDO debconf-set-selections || true
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
if ! python3 -c "import scapy, pytest" >/dev/null 2>&1; then
    echo "== installing scapy, pytest"
    python3 -m pip install --quiet "scapy>=2.5" pytest || python3 -m pip install --quiet --break-system-packages "scapy>=2.5" pytest
fi
command -v cargo >/dev/null 2>&1 || { echo "Rust is needed: https://rustup.rs (stable)"; exit 1; }

echo "== build"
cargo build --release --workspace --locked 2>/dev/null || cargo build --release --workspace

echo "== rust tests"
cargo test --release --workspace

echo "== python tests (scapy builds, vecgate runs, scapy and tshark dissect)"
VECGATE_BIN="$PWD/target/release/vecgate" python3 -m pytest -q tests/
