#!/usr/bin/env bash
# deploy/cluster/demo.sh: a two-daemon cluster on loopback, as written in
# docs/operations.md. Starts a redis-server (deploy/cluster/redis.conf, on a
# free port), makes a signing key and tokens (keys.sh), starts two daemons
# sharing that Redis, compiles a graph on the first and shows the second
# serving it from Redis (hit-l2) and then from its own cache (hit), prints
# both daemons' shared-tier counters, and stops everything.
#
# Usage: deploy/cluster/demo.sh [GRAPH]   (default tests/data/graphs/mlp.pb)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${BUILD:-build}
graph=${1:-tests/data/graphs/mlp.pb}
ctl="$build/bin/compilectl"
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server "$here/redis.conf" --port "$port" --dir "$tmp" >"$tmp/redis.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  redis-cli -p "$port" ping >/dev/null 2>&1 && break
  sleep 0.05
done
echo "== redis on 127.0.0.1:$port"

"$here/keys.sh" "$tmp/keys"
token() { awk -v r="$1" '$1 == r {print $2}' "$tmp/keys/tokens"; }

start() { # name
  mkdir -p "$tmp/$1"
  "$build/bin/compiled" --listen 127.0.0.1:0 --port-file "$tmp/$1/port" \
    --cache-dir "$tmp/$1/cache" --log-file "$tmp/$1/daemon.log" \
    --redis "redis://127.0.0.1:$port/0" --signing-keys "$tmp/keys/signing.keys" \
    --verify-cache --tokens "$tmp/keys/tokens" &
  pids+=($!)
  for _ in $(seq 200); do
    [ -s "$tmp/$1/port" ] && return 0
    sleep 0.05
  done
  echo "demo: daemon $1 did not start"; cat "$tmp/$1/daemon.log"; exit 1
}
start a
start b
A=127.0.0.1:$(cat "$tmp/a/port")
B=127.0.0.1:$(cat "$tmp/b/port")
echo "== daemons a on $A and b on $B, sharing the Redis"

echo "== a compiles $graph (a 'compile' token)"
COMPILED_TOKEN=$(token compile) "$ctl" --server "$A" submit "$graph"
echo "== b serves it from Redis (hit-l2), then from its own cache (hit); a 'read' token is enough"
COMPILED_TOKEN=$(token read) "$ctl" --server "$B" submit "$graph"
COMPILED_TOKEN=$(token read) "$ctl" --server "$B" submit "$graph"
for d in a b; do
  addr=$A; [ "$d" = b ] && addr=$B
  echo "== $d: shared-tier counters"
  COMPILED_TOKEN=$(token read) "$ctl" --server "$addr" stats --json |
    python3 -c 'import json,sys; s=json.load(sys.stdin); print({k: s.get(k, 0) for k in ("compiles", "hits", "l2_hits", "l2_puts", "redis_up", "lease_waits", "signature_failures")})'
done
