#!/usr/bin/env bash
# Build the Debian package with cargo-deb (installed from crates.io if missing):
# target/debian/vecgate_<version>-1_<arch>.deb with the binary, the systemd unit
# (packaging/vecgate.service), /etc/vecgate/vecgate.toml, the man page, bash completions
# and the docs. Prints the package's path.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo-deb >/dev/null 2>&1 || cargo install cargo-deb --locked --quiet
cargo build --release -p vecgate --quiet
mkdir -p target/package
target/release/vecgate man > target/package/vecgate.1
target/release/vecgate completions bash > target/package/vecgate.bash
cargo deb -p vecgate --no-build --quiet 2>/dev/null || cargo deb -p vecgate --no-build
ls -t target/debian/vecgate_*.deb | head -1
