# How tools/test.sh counts test cases (sourced by it and by
# tools/test_results_test.sh, which feeds these functions made-up Bazel
# output and test logs).

# count_bazel_results TESTLOGS BAZEL_STATUS < BAZEL_OUTPUT
# Prints "PASSED FAILED": the Catch2 test cases of the targets in a
# `bazel test` run's output, read from their logs under TESTLOGS (`bazel
# info bazel-testlogs`). A log's last Catch2 summary gives its counts ("All
# tests passed (... N test cases)" or "test cases: N | P passed | F
# failed"); a sharded target's are summed over its shards' logs. A log
# without a summary counts as one failed case. A target that did not pass
# (FAILED, TIMEOUT, ...) counts at least one failed case even if its log
# says all its cases passed (a leak report or a crash after the summary);
# one that did not run (NO STATUS, FAILED TO BUILD) counts one, its old log
# unread. If Bazel exited non-zero and no case failed, one failed case.
count_bazel_results() {
  local testlogs="$1" bazel_status="$2"
  local passed=0 failed=0 target result
  while read -r target result; do
    local path="${target#//}"
    path="${path/://}"
    local target_passed=0 target_failed=0
    case "$result" in
      PASSED*|FLAKY*|FAILED\ in*|FAILED|TIMEOUT*)
        # A sharded test keeps one log per shard.
        local files=("$testlogs/$path/test.log")
        if [ ! -f "${files[0]}" ]; then
          files=("$testlogs/$path"/shard_*_of_*/test.log)
        fi
        local file
        for file in "${files[@]}"; do
          local summary=""
          if [ -f "$file" ]; then
            summary="$(grep -E '^(All tests passed|test cases:)' "$file" | tail -n 1)"
          fi
          if [[ "$summary" =~ ^All\ tests\ passed.*\ ([0-9]+)\ test\ case ]]; then
            target_passed=$((target_passed + BASH_REMATCH[1]))
          elif [[ "$summary" =~ \|\ *([0-9]+)\ passed ]] || [[ "$summary" =~ \|\ *([0-9]+)\ failed ]]; then
            [[ "$summary" =~ \|\ *([0-9]+)\ passed ]] && target_passed=$((target_passed + BASH_REMATCH[1]))
            [[ "$summary" =~ \|\ *([0-9]+)\ failed ]] && target_failed=$((target_failed + BASH_REMATCH[1]))
          else
            target_failed=$((target_failed + 1))
          fi
        done
        ;;
    esac
    case "$result" in
      PASSED*|FLAKY*) ;;
      *) [ "$target_failed" -eq 0 ] && target_failed=1 ;;
    esac
    passed=$((passed + target_passed))
    failed=$((failed + target_failed))
  done < <(grep -E '^//[^ ]+ +(\(cached\) )?(PASSED|FAILED|NO STATUS|TIMEOUT|FLAKY|INCOMPLETE)' \
           | sed -E 's/\(cached\) //; s/ in [0-9.]+s$//' \
           | awk '{$1 = $1; target = $1; $1 = ""; sub(/^ /, ""); print target, $0}')
  if [ "$bazel_status" -ne 0 ] && [ "$failed" -eq 0 ]; then
    failed=1
  fi
  echo "$passed $failed"
}

# summary_line PASSED FAILED STATUS
# Prints "PASSED passed, FAILED failed" and returns the test command's exit
# status: STATUS if it is non-zero, else 1 if a case failed, else 0. A
# non-zero STATUS with no failed case counts one, so that the line never
# reads "0 failed" on a failing run.
summary_line() {
  local passed="$1" failed="$2" status="$3"
  if [ "$status" -ne 0 ] && [ "$failed" -eq 0 ]; then
    failed=1
  fi
  echo "$passed passed, $failed failed"
  if [ "$status" -ne 0 ]; then
    return "$status"
  fi
  [ "$failed" -eq 0 ]
}
