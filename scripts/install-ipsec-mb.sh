#!/usr/bin/env bash
# Intel's IPsec Multi-Buffer library, version 2.0 or later, for ESP's AES-GCM
# (crates/ipsec/build.rs builds against the installed header). Version 2.0 seals a 64-byte
# packet in about half the cycles of 1.3 on AVX-512 CPUs (docs/PERFORMANCE.md, session 72),
# and Debian 12 ships 1.3. So on Debian 12 this takes Debian 13's build of the library
# (libipsec-mb2 and libipsec-mb-dev, which need nothing newer than Debian 12's libc) from
# Debian's archive through apt, checked against the archive's keys like any package: a
# trixie source pinned so that apt takes those two packages from it and nothing else.
# Elsewhere it installs the distribution's libipsec-mb-dev when that is 2.0 or later, and
# otherwise says so and leaves what is there (AES-GCM then runs on the older library, or
# on ring without one).
#
# Does nothing when the installed header is already 2.0 or later. After an install,
# crates/ipsec is probed again at its next build (its build.rs touched).
set -euo pipefail
cd "$(dirname "$0")/.."

HEADER=/usr/include/intel-ipsec-mb.h
SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"

installed_version() {
    [ -e "$HEADER" ] && awk '/^#define IMB_VERSION_NUM/ {print $3}' "$HEADER"
}

installed_name() {
    echo "intel-ipsec-mb $(awk -F'"' '/^#define IMB_VERSION_STR/ {print $2}' "$HEADER") installed"
}

new_enough() {
    local v
    v=$(installed_version) || return 1
    [ -n "$v" ] && (( v >= 0x20000 ))
}

if new_enough; then
    installed_name
    exit 0
fi

export DEBIAN_FRONTEND=noninteractive
codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
if [ "$(. /etc/os-release && echo "${ID:-}")" = debian ] && [ "$codename" = bookworm ]; then
    echo "== intel-ipsec-mb 2.0 from Debian 13 (trixie): libipsec-mb2, libipsec-mb-dev"
    $SUDO tee /etc/apt/sources.list.d/vecgate-trixie.sources >/dev/null <<'EOF'
# vecgate (scripts/install-ipsec-mb.sh): intel-ipsec-mb 2.0 from Debian 13; the
# preferences file next to it keeps every other package on Debian 12.
Types: deb
URIs: http://deb.debian.org/debian
Suites: trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    $SUDO tee /etc/apt/preferences.d/vecgate-trixie >/dev/null <<'EOF'
Package: *
Pin: release n=trixie
Pin-Priority: 1

Package: libipsec-mb2 libipsec-mb-dev
Pin: release n=trixie
Pin-Priority: 500
EOF
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq libipsec-mb2 libipsec-mb-dev >/dev/null
else
    candidate=$(apt-cache policy libipsec-mb-dev 2>/dev/null | awk '/Candidate:/ {print $2}')
    case "$candidate" in
    "" | "(none)" | 0* | 1.*)
        echo "intel-ipsec-mb 2.0 or later is not packaged here (libipsec-mb-dev: ${candidate:-none}); keeping what is installed" >&2
        exit 0
        ;;
    esac
    $SUDO apt-get install -y -qq libipsec-mb-dev >/dev/null
fi

new_enough || { echo "intel-ipsec-mb: the installed header is still older than 2.0" >&2; exit 1; }
touch crates/ipsec/build.rs
installed_name
