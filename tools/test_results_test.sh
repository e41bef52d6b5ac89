#!/usr/bin/env bash
# tools/test_results.sh on made-up `bazel test` output and test logs: a
# passing target, a sharded one, a failed target whose log says all its
# cases passed (a leak report after the summary), targets without a summary,
# targets that did not run, and the final line's exit status. No Bazel:
# tools/test.sh runs it as one case. Prints a Catch2-style summary line.
set -uo pipefail
source "$(dirname "$0")/test_results.sh"

logs="$(mktemp -d)"
trap 'rm -rf "$logs"' EXIT
checks=0
failures=0

# expect NAME EXPECTED ACTUAL
expect() {
  checks=$((checks + 1))
  if [ "$2" != "$3" ]; then
    failures=$((failures + 1))
    echo "FAILED: $1: expected '$2', got '$3'"
  fi
}

# log PATH LINES...: a test log at TESTLOGS/PATH/test.log.
log() {
  local dir="$logs/$1"
  shift
  mkdir -p "$dir"
  printf '%s\n' "$@" >"$dir/test.log"
}

all_passed() { echo "All tests passed ($1 assertions in $2 test cases)"; }
some_failed() {
  echo "test cases: $1 | $2 passed | $3 failed"
  echo "assertions: 40 | 38 passed | 2 failed"
}

log fx/ir_test "$(all_passed 120 12)"
log fx/leaky_test "$(all_passed 30 5)" "" \
  "==1234==ERROR: LeakSanitizer: detected memory leaks" \
  "SUMMARY: AddressSanitizer: 64 byte(s) leaked in 1 allocation(s)."
log fx/crash_after_test "$(all_passed 8 2)" "Segmentation fault (core dumped)"
log fx/failing_test "$(some_failed 6 4 2)"
log fx/sharded_test/shard_1_of_3 "$(all_passed 10 1)"
log fx/sharded_test/shard_2_of_3 "$(all_passed 10 1)"
log fx/sharded_test/shard_3_of_3 "$(all_passed 10 2)"
log fx/sharded_failing_test/shard_1_of_2 "$(all_passed 10 3)"
log fx/sharded_failing_test/shard_2_of_2 "$(some_failed 3 2 1)"
log fx/silent_test "no summary here"
log fx/crashed_test "running..." "Segmentation fault (core dumped)"
log fx/timeout_test "running..."
log fx/flaky_test "$(all_passed 4 4)"
# Left from an earlier run: a target that did not build this time.
log fx/unbuilt_test "$(all_passed 50 7)"

counts() {  # counts BAZEL_STATUS OUTPUT-LINES...
  local status="$1"
  shift
  printf '%s\n' "$@" | count_bazel_results "$logs" "$status"
}

expect "a passing target" "12 0" \
  "$(counts 0 "//fx:ir_test                  PASSED in 3.2s")"
expect "a cached passing target" "12 0" \
  "$(counts 0 "//fx:ir_test         (cached) PASSED in 3.2s")"
expect "a failed target whose log ends in a leak report after the summary" \
  "5 1" "$(counts 3 "//fx:leaky_test               FAILED in 4.0s")"
expect "the same beside a target with failed cases: one failure each" "9 3" \
  "$(counts 3 "//fx:leaky_test               FAILED in 4.0s" \
    "//fx:failing_test             FAILED in 2.1s")"
expect "a failed target that crashed after the summary" "2 1" \
  "$(counts 3 "//fx:crash_after_test          FAILED in 1.0s")"
expect "a failed target with failed cases" "4 2" \
  "$(counts 3 "//fx:failing_test             FAILED in 2.1s")"
expect "a sharded target, summed over its shards" "4 0" \
  "$(counts 0 "//fx:sharded_test             PASSED in 30.0s")"
expect "a sharded target with a failed shard" "5 1" \
  "$(counts 3 "//fx:sharded_failing_test     FAILED in 1 out of 2 in 30.0s")"
expect "a passed target without a summary" "0 1" \
  "$(counts 0 "//fx:silent_test              PASSED in 0.1s")"
expect "a failed target without a summary" "0 1" \
  "$(counts 3 "//fx:crashed_test             FAILED in 0.5s")"
expect "a timed-out target" "0 1" \
  "$(counts 3 "//fx:timeout_test             TIMEOUT in 300.0s")"
expect "a flaky target that passed" "4 0" \
  "$(counts 0 "//fx:flaky_test               FLAKY, failed in 1 out of 2 in 2.0s")"
expect "a target that did not build: its old log is not read" "0 1" \
  "$(counts 1 "//fx:unbuilt_test             FAILED TO BUILD")"
expect "a target that did not run: its old log is not read" "0 1" \
  "$(counts 1 "//fx:unbuilt_test             NO STATUS")"
expect "Bazel failed with every listed target passing" "12 1" \
  "$(counts 1 "//fx:ir_test                  PASSED in 3.2s")"
expect "a whole run, other lines ignored" "34 7" "$(counts 3 \
  "INFO: Build completed, 3 tests FAILED, 11 total actions" \
  "//fx:ir_test                  PASSED in 3.2s" \
  "//fx:leaky_test               FAILED in 4.0s" \
  "//fx:failing_test             FAILED in 2.1s" \
  "//fx:sharded_test             PASSED in 30.0s" \
  "  Stats over 3 runs: max = 30.0s, min = 10.0s, avg = 20.0s, dev = 8.2s" \
  "//fx:sharded_failing_test     FAILED in 1 out of 2 in 30.0s" \
  "//fx:silent_test              PASSED in 0.1s" \
  "//fx:crashed_test             FAILED in 0.5s" \
  "//fx:unbuilt_test             NO STATUS" \
  "//fx:flaky_test               FLAKY, failed in 1 out of 2 in 2.0s" \
  "Executed 9 out of 10 tests: 3 tests pass and 6 fail locally.")"

# summary_line PASSED FAILED STATUS: the line, and the exit status.
line_and_status() {
  local line
  line="$(summary_line "$@")"
  echo "$line: exit $?"
}
expect "all passed" "10 passed, 0 failed: exit 0" "$(line_and_status 10 0 0)"
expect "failures counted while every command exited 0" \
  "10 passed, 2 failed: exit 1" "$(line_and_status 10 2 0)"
expect "a failing command's status" "10 passed, 2 failed: exit 3" \
  "$(line_and_status 10 2 3)"
expect "a failing command without a counted failure" \
  "10 passed, 1 failed: exit 4" "$(line_and_status 10 0 4)"

if [ "$failures" -eq 0 ]; then
  echo "All tests passed ($checks assertions in $checks test cases)"
else
  echo "test cases: $checks | $((checks - failures)) passed | $failures failed"
fi
[ "$failures" -eq 0 ]
