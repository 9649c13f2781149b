#!/usr/bin/env bash
# deploy/demo.sh: the main job on its embedded defaults. Starts the daemon
# (sqlite cache in its default directory, ./var unless $XDG_CACHE_HOME is
# set), submits an example graph twice (a compile, then a cache hit), prints
# the daemon's stats and stops it with SIGTERM.
#
# Usage: deploy/demo.sh [GRAPH]   (default tests/data/graphs/mlp.pb)
set -euo pipefail
build=${BUILD:-build}
graph=${1:-tests/data/graphs/mlp.pb}
tmp=$(mktemp -d)
"$build/bin/compiled" --listen 127.0.0.1:0 --port-file "$tmp/port" \
  --log-file "$tmp/daemon.log" &
pid=$!
trap 'kill "$pid" 2>/dev/null || true; rm -rf "$tmp"' EXIT
for _ in $(seq 200); do
  [ -s "$tmp/port" ] && break
  kill -0 "$pid" 2>/dev/null || { echo "demo: the daemon did not start"; cat "$tmp/daemon.log"; exit 1; }
  sleep 0.05
done
export COMPILED_SERVER=127.0.0.1:$(cat "$tmp/port")
ctl="$build/bin/compilectl"
echo "== daemon on $COMPILED_SERVER; submitting $graph (forced compile, then a hit)"
"$ctl" submit --force "$graph"
"$ctl" submit "$graph"
echo "== stats"
"$ctl" stats
echo "== stopping the daemon (SIGTERM drains it)"
kill -TERM "$pid"
wait "$pid"
echo "== daemon log"
cat "$tmp/daemon.log"
