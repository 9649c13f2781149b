#!/usr/bin/env bash
# tests/fuzz/run.sh BINARY SECONDS: runs one libFuzzer target for a bounded
# time from its seeds and prints how many inputs it executed. A crash leaves
# the reproducer in build/fuzz/crashes/ and makes this script fail.
#
# Seeds: tests/fuzz/corpus/<target>/ (committed, small) plus, for the graph
# target, every captured graph; the growing corpus lives in build/fuzz/.
set -euo pipefail
bin=$1
secs=${2:-60}
name=$(basename "$bin")          # fuzz_graph
short=${name#fuzz_}               # graph
corpus=build/fuzz/corpus/$short
crashes=build/fuzz/crashes/$short
mkdir -p "$corpus" "$crashes"
seeds=()
[ -d "tests/fuzz/corpus/$short" ] && seeds+=("tests/fuzz/corpus/$short")
case $short in
  graph) seeds+=(tests/data/graphs) ;;
esac
log=build/fuzz/$name.log
set +e
"$bin" -max_total_time="$secs" -print_final_stats=1 -timeout=10 \
  -rss_limit_mb=2048 -artifact_prefix="$crashes/" "$corpus" "${seeds[@]}" \
  >"$log" 2>&1
rc=$?
set -e
execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
if [ $rc -ne 0 ]; then
  echo "$name: FAILED after $execs executions (exit $rc); see $log and $crashes/"
  tail -30 "$log"
  exit 1
fi
echo "$name: $execs executions in ${secs}s, no crash (corpus: $(ls "$corpus" | wc -l) inputs)"
