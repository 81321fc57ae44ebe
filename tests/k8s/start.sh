#!/usr/bin/env bash
# start.sh WORKDIR [--netns NAME] [--bin BIN_DIR]
# Starts etcd (Debian's etcd-server) and kube-apiserver v1.31 (from build.sh) with token
# authentication, RBAC and service-account keys, all generated into WORKDIR; waits for
# /readyz and writes WORKDIR/admin.kubeconfig, kube-proxy.kubeconfig and vecgate.kubeconfig.
#   --netns NAME  create network namespace NAME and run both in it (lo up, 198.18.8.1/32 on
#                 lo as the advertise address); reach the API with `ip netns exec NAME ...`.
#                 Without it both listen on 127.0.0.1 of the current namespace.
# Ports: API 127.0.0.1:${K8S_API_PORT:-6443} (all addresses with --netns), etcd
# 127.0.0.1:${K8S_ETCD_PORT:-2379} and the next port for etcd peers.
# Service CIDRs: ${K8S_SERVICE_CIDR4:-198.18.128.0/20} and 2001:db8:128::/108 (dual-stack allowed).
# stop.sh WORKDIR stops everything and deletes the namespace.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
W=${1:?usage: start.sh WORKDIR [--netns NAME] [--bin BIN_DIR]}; shift
NETNS=""; BIN=$HOME/.cache/vecgate-k8s
while [ $# -gt 0 ]; do
    case "$1" in --netns) NETNS=$2; shift 2 ;; --bin) BIN=$2; shift 2 ;; *) echo "unknown $1" >&2; exit 2 ;; esac
done
API_PORT=${K8S_API_PORT:-6443}; ETCD_PORT=${K8S_ETCD_PORT:-2379}; PEER_PORT=$((ETCD_PORT + 1))
mkdir -p "$W"; W=$(cd "$W" && pwd)
[ -x "$BIN/kube-apiserver" ] || "$HERE/build.sh" "$BIN"
for c in etcd openssl curl; do command -v $c >/dev/null || "$HERE/build.sh" "$BIN"; done

RUN=()
ADV=127.0.0.1; BIND=127.0.0.1
if [ -n "$NETNS" ]; then
    ip netns add "$NETNS"
    echo "$NETNS" > "$W/netns"
    ip -n "$NETNS" link set lo up
    ip -n "$NETNS" addr add 198.18.8.1/32 dev lo
    RUN=(ip netns exec "$NETNS")
    ADV=198.18.8.1; BIND=0.0.0.0
fi

# --- credentials: a CA, a serving cert with the addresses clients use, SA keys, tokens
P="$W/pki"; mkdir -p "$P"
if [ ! -f "$P/ca.crt" ]; then
    openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=vecgate-lab-ca" \
        -keyout "$P/ca.key" -out "$P/ca.crt" 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -subj "/CN=kube-apiserver" \
        -keyout "$P/apiserver.key" -out "$P/apiserver.csr" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,IP:198.18.8.1,IP:198.18.128.1,IP:2001:db8:128::1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n' > "$P/san.ext"
    openssl x509 -req -in "$P/apiserver.csr" -CA "$P/ca.crt" -CAkey "$P/ca.key" -CAcreateserial \
        -days 30 -extfile "$P/san.ext" -out "$P/apiserver.crt" 2>/dev/null
    openssl genrsa -out "$P/sa.key" 2048 2>/dev/null
    openssl rsa -in "$P/sa.key" -pubout -out "$P/sa.pub" 2>/dev/null
    # token,user,uid,"group1,group2": admin is in system:masters; kube-proxy's user name
    # is the one RBAC's bootstrap binding system:node-proxier names
    # vecgate-lb: the controller's user, allowed only what tests/k8s/rbac.yaml grants
    printf '%s,admin,admin,system:masters\n%s,system:kube-proxy,kube-proxy\n%s,vecgate-lb,vecgate-lb\n' \
        "$(openssl rand -hex 16)" "$(openssl rand -hex 16)" "$(openssl rand -hex 16)" > "$P/tokens.csv"
    chmod 600 "$P"/*.key "$P/tokens.csv"
fi
kubeconfig() {  # kubeconfig USER TOKEN FILE
    cat > "$3" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: lab
  cluster: {server: "https://127.0.0.1:$API_PORT", certificate-authority: "$P/ca.crt"}
users:
- name: $1
  user: {token: "$2"}
contexts:
- name: lab
  context: {cluster: lab, user: $1}
current-context: lab
EOF
}
kubeconfig admin "$(sed -n 1p "$P/tokens.csv" | cut -d, -f1)" "$W/admin.kubeconfig"
kubeconfig kube-proxy "$(sed -n 2p "$P/tokens.csv" | cut -d, -f1)" "$W/kube-proxy.kubeconfig"
kubeconfig vecgate-lb "$(sed -n 3p "$P/tokens.csv" | cut -d, -f1)" "$W/vecgate.kubeconfig"

# --- etcd
"${RUN[@]}" setsid etcd --name lab --data-dir "$W/etcd-data" --logger zap --log-outputs stderr \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$PEER_PORT" \
    --initial-cluster "lab=http://127.0.0.1:$PEER_PORT" > "$W/etcd.log" 2>&1 < /dev/null &
echo $! > "$W/etcd.pid"
for _ in $(seq 100); do
    "${RUN[@]}" curl -sf "http://127.0.0.1:$ETCD_PORT/health" >/dev/null 2>&1 && break; sleep 0.2
done

# --- kube-apiserver
"${RUN[@]}" setsid "$BIN/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
    --bind-address "$BIND" --secure-port "$API_PORT" --advertise-address "$ADV" \
    --tls-cert-file "$P/apiserver.crt" --tls-private-key-file "$P/apiserver.key" \
    --client-ca-file "$P/ca.crt" \
    --token-auth-file "$P/tokens.csv" --authorization-mode RBAC \
    --service-account-key-file "$P/sa.pub" --service-account-signing-key-file "$P/sa.key" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-cluster-ip-range "${K8S_SERVICE_CIDR4:-198.18.128.0/20}",2001:db8:128::/108 \
    --allow-privileged=false --profiling=false \
    > "$W/apiserver.log" 2>&1 < /dev/null &
echo $! > "$W/apiserver.pid"

TOKEN=$(sed -n 1p "$P/tokens.csv" | cut -d, -f1)
t0=$(date +%s)
until "${RUN[@]}" curl -sf --cacert "$P/ca.crt" -H "Authorization: Bearer $TOKEN" \
        "https://127.0.0.1:$API_PORT/readyz" >/dev/null 2>&1; do
    if ! kill -0 "$(cat "$W/apiserver.pid")" 2>/dev/null || [ $(( $(date +%s) - t0 )) -gt 120 ]; then
        echo "start.sh: kube-apiserver not ready; tail of $W/apiserver.log:" >&2
        tail -20 "$W/apiserver.log" >&2; exit 1
    fi
    sleep 0.5
done
echo "kube-apiserver ready after $(( $(date +%s) - t0 )) s: https://127.0.0.1:$API_PORT${NETNS:+ (in netns $NETNS)}"
echo "  ${NETNS:+ip netns exec $NETNS }kubectl --kubeconfig $W/admin.kubeconfig get --raw /version"
