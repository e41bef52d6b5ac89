#!/usr/bin/env bash
# The tests: `bazel test //...` in this workspace, then in the consumer
# example (examples/consumer: its own workspace, which depends on this one
# through local_repository, traces its own model through the public headers
# and generates code with fx_cc_library). Ends with one line
# "N passed, N failed" counting Catch2 test cases over all test targets of
# both (a target that fails to build or dies without a Catch2 summary counts
# as one failed case). Exits non-zero if anything failed.
set -uo pipefail
cd "$(dirname "$0")/.."

passed=0
failed=0
status=0

# Runs `bazel test //...` in workspace $1 and adds its cases to the counts.
test_workspace() {
  local log
  log="$(mktemp)"
  (cd "$1" && bazel test //... 2>&1) | tee "$log"
  local ws_status=${PIPESTATUS[0]}
  local testlogs
  testlogs="$(cd "$1" && bazel info bazel-testlogs 2>/dev/null)"
  local ws_failed=0
  while read -r target result; do
    local path="${target#//}"
    path="${path/://}"
    local file="$testlogs/$path/test.log"
    local summary=""
    if [ -f "$file" ]; then
      summary="$(grep -E '^(All tests passed|test cases:)' "$file" | tail -n 1)"
    fi
    case "$result" in
      PASSED|FAILED|FLAKY*)
        if [[ "$summary" =~ ^All\ tests\ passed.*\ ([0-9]+)\ test\ case ]]; then
          passed=$((passed + BASH_REMATCH[1]))
        elif [[ "$summary" =~ \|\ *([0-9]+)\ passed ]] || [[ "$summary" =~ \|\ *([0-9]+)\ failed ]]; then
          [[ "$summary" =~ \|\ *([0-9]+)\ passed ]] && passed=$((passed + BASH_REMATCH[1]))
          [[ "$summary" =~ \|\ *([0-9]+)\ failed ]] && ws_failed=$((ws_failed + BASH_REMATCH[1]))
        else
          ws_failed=$((ws_failed + 1))
        fi
        ;;
      *)
        ws_failed=$((ws_failed + 1))
        ;;
    esac
  done < <(grep -E '^//[^ ]+ +(\(cached\) )?(PASSED|FAILED|NO STATUS|TIMEOUT|FLAKY)' "$log" \
           | sed -E 's/\(cached\) //; s/ in [0-9.]+s$//' \
           | awk '{$1 = $1; target = $1; $1 = ""; sub(/^ /, ""); print target, $0}')
  rm -f "$log"
  if [ "$ws_status" -ne 0 ] && [ "$ws_failed" -eq 0 ]; then
    ws_failed=1
  fi
  failed=$((failed + ws_failed))
  if [ "$ws_status" -ne 0 ]; then
    status=$ws_status
  fi
}

test_workspace .
test_workspace examples/consumer

echo "$passed passed, $failed failed"
exit "$status"
