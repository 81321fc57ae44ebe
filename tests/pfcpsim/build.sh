#!/usr/bin/env bash
# build.sh [OUT]: pfcpsim and pfcpctl v1.4.4 (omec-project's SMF simulator), built from the
# Go module proxy through this folder's module, into OUT (default ~/.cache/vecgate-pfcpsim).
# Needs go 1.21 or later on PATH (it fetches the go 1.25 toolchain go.mod asks for by
# itself). Returns at once when OUT already holds this version.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${1:-$HOME/.cache/vecgate-pfcpsim}
VER=v1.4.4
mkdir -p "$OUT"
if [ -x "$OUT/pfcpsim" ] && [ -x "$OUT/pfcpctl" ] && [ "$(cat "$OUT/VERSION" 2>/dev/null)" = "$VER" ]; then exit 0; fi
command -v go >/dev/null || { echo "build.sh: no go on PATH" >&2; exit 2; }
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
cp "$HERE/go.mod" "$HERE/go.sum" "$HERE/tools.go" "$T/"
cd "$T"
for c in pfcpsim pfcpctl; do
    CGO_ENABLED=0 GOFLAGS=-mod=readonly go build -trimpath -ldflags "-s -w" -o "$OUT/$c" "github.com/omec-project/pfcpsim/cmd/$c"
done
echo "$VER" > "$OUT/VERSION"
