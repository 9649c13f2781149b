#!/usr/bin/env bash
# tests/run_c_tests.sh BUILD_DIR TEST...: runs Criterion test binaries, keeps
# each one's output in BUILD_DIR/test-logs/, and fails when a test fails or
# when a sanitizer or valgrind reported an error. (Criterion runs each test
# in a child process; a leak or a sanitizer report there does not make the
# test fail by itself, so the logs are scanned.)
set -uo pipefail
build=$1
shift
mkdir -p "$build/test-logs"
fail=0
for t in "$@"; do
  name=$(basename "$t")
  log=$build/test-logs/$name.log
  echo "== $name"
  "$t" --jobs 2 >"$log" 2>&1
  rc=$?
  grep -E '^\[----\]|Synthesis' "$log" | grep -v '^\[----\]   $' | tail -40
  if [ $rc -ne 0 ]; then
    echo "   FAILED (exit $rc); full output: $log"
    fail=1
  fi
  if grep -qE 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:|ERROR SUMMARY: [1-9]' "$log"; then
    echo "   sanitizer/valgrind errors in $log:"
    grep -E -A5 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:' "$log" | head -40
    fail=1
  fi
done
exit $fail
