#!/usr/bin/env bash
# build.sh [BIN_DIR]
# Builds kube-apiserver, kube-proxy and kubectl v1.31.0 from the Go module proxy through the
# wrapper module in ./gomod (k8s.io/kubernetes cannot be `go install`ed: its staging modules
# are required at v0.0.0, so the wrapper pins each with a `replace`), and installs Debian's
# etcd-server, curl, openssl and nftables for start.sh and proxy.sh (tests/test_lb_k8s.py).
# Binaries go to BIN_DIR (default ~/.cache/vecgate-k8s); a second run with the same BIN_DIR
# returns at once. The Go module and build caches are Go's own (GOMODCACHE, GOCACHE): set
# them to put the ~2.7 GB elsewhere.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${1:-$HOME/.cache/vecgate-k8s}
VER=v1.31.0
CMDS="kube-apiserver kube-proxy kubectl"

if ! command -v etcd >/dev/null || ! command -v curl >/dev/null || ! command -v openssl >/dev/null || ! command -v nft >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq etcd-server curl openssl nftables >/dev/null
fi

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
have=1
for c in $CMDS; do [ -x "$OUT/$c" ] || have=0; done
if [ "$have" = 1 ] && [ "$(cat "$OUT/VERSION" 2>/dev/null)" = "$VER" ]; then
  echo "cached: $OUT ($VER)"; exit 0
fi

# Go >= 1.21 (GOTOOLCHAIN=auto then fetches the go1.22 that go.mod asks for by itself);
# go-toolchain.sh finds one or fetches go1.25 through the Go module proxy
GO=$("$HERE/go-toolchain.sh")
export PATH="$(dirname "$GO"):$PATH"

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cp "$HERE"/gomod/go.mod "$HERE"/gomod/go.sum "$HERE"/gomod/tools.go "$WORK"/
cd "$WORK"
# version stamps, as the Kubernetes release build sets them (otherwise v0.0.0-master)
LDF="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  LDF="$LDF -X $p.gitVersion=$VER -X $p.gitMajor=1 -X $p.gitMinor=31 -X $p.gitTreeState=clean"
done
export CGO_ENABLED=0 GOFLAGS=-mod=readonly
for c in $CMDS; do
  t0=$(date +%s)
  go build -trimpath -ldflags "$LDF" -o "$OUT/$c.tmp" "k8s.io/kubernetes/cmd/$c"
  mv "$OUT/$c.tmp" "$OUT/$c"
  echo "built $c in $(( $(date +%s) - t0 )) s"
done
echo "$VER" > "$OUT/VERSION"
"$OUT/kube-apiserver" --version
