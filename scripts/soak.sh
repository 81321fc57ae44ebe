#!/usr/bin/env bash
# The soak run (issue 25; not a CI test): traffic through GTP-U and UDP tunnels, to a
# load balancer service, into an IPsec SPD policy and into a PFCP session at the worker's
# full rate for SECONDS (default 600) while the control plane adds and deletes routes,
# GTP-U tunnels, UDP tunnels, services and their backends, SAs and SPD policies, and
# PFCP sessions (an SMF on loopback) without pause. Fails on any loss of the traffic the
# churn does not touch, resident memory growing after warm-up, or tables holding more
# than the churn keeps. Needs no network: every interface is a packet generator or a
# sink, PFCP runs on 127.0.0.1 (see scripts/soak.py; needs python3 with scapy).
#
#   scripts/soak.sh                 10 minutes
#   scripts/soak.sh 1800            30 minutes
#
# The CSV of the run (RSS, table sizes, interface counters every 5 s) goes to
# target/soak/soak.csv, its RSS curve to target/soak/soak-rss.svg.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_TOTAL=${1:-600}
[[ "$SECONDS_TOTAL" =~ ^[0-9]+$ ]] || { echo "soak.sh: SECONDS must be a whole number, got '$SECONDS_TOTAL'" >&2; exit 2; }
cargo build --release -p vecgate
mkdir -p target/soak
exec python3 scripts/soak.py --vecgate target/release/vecgate --seconds "$SECONDS_TOTAL" \
    --out target/soak --svg target/soak/soak-rss.svg
