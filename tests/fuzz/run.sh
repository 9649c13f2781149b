#!/usr/bin/env bash
# tests/fuzz/run.sh BINARY SECONDS [FUZZ_BUILD]: runs one libFuzzer target
# for a bounded time from its seeds and prints how many inputs it executed.
# A crash leaves the reproducer in FUZZ_BUILD/crashes/ and makes this script
# fail. FUZZ_BUILD (the fuzz build tree, `make fuzz` passes $(BUILD)/fuzz)
# defaults to the directory above the binary's.
#
# Seeds: tests/fuzz/corpus/<target>/ (committed) plus, for the graph target,
# every captured graph; the growing corpus lives in FUZZ_BUILD. The graph
# target also gets a dictionary (tests/fuzz/graph.dict: expression and schema
# tokens, bad UTF-8) and inputs up to 256 KiB: its committed seeds sit at the
# limits (a 10,000-node sum, 64 levels of nesting, a chain of 300 views;
# tests/fuzz/make_graph_seeds.py), and mutations must be free to grow past
# them.
set -euo pipefail
bin=$1
secs=${2:-60}
out=${3:-$(dirname "$(dirname "$bin")")}
name=$(basename "$bin")          # fuzz_graph
short=${name#fuzz_}               # graph
corpus=$out/corpus/$short
crashes=$out/crashes/$short
mkdir -p "$corpus" "$crashes"
seeds=()
opts=()
[ -d "tests/fuzz/corpus/$short" ] && seeds+=("tests/fuzz/corpus/$short")
case $short in
  graph|native)
    seeds+=(tests/data/graphs)
    opts+=(-dict=tests/fuzz/graph.dict -max_len=262144 -len_control=0) ;;
esac
log=$out/$name.log
set +e
"$bin" -max_total_time="$secs" -print_final_stats=1 -timeout=10 \
  -rss_limit_mb=2048 -artifact_prefix="$crashes/" "${opts[@]}" \
  "$corpus" "${seeds[@]}" >"$log" 2>&1
rc=$?
set -e
execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
if [ $rc -ne 0 ]; then
  echo "$name: FAILED after $execs executions (exit $rc); see $log and $crashes/"
  tail -30 "$log"
  exit 1
fi
echo "$name: $execs executions in ${secs}s, no crash (corpus: $(ls "$corpus" | wc -l) inputs)"
