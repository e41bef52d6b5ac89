#!/usr/bin/env bash
# The tests, in six parts:
#   0. the include graph against the layering (tools/check_layering.py: no
#      folder includes one above it, no include cycle, no source over 1,500
#      lines but tests), this script's
#      counting (tools/test_results_test.sh), CMake's sources against
#      Bazel's (tools/check_cmake_sources.sh), and the API reference
#      (docs/Doxyfile: Doxygen over the public headers, any warning fails);
#   1. `bazel test //...` in this workspace (built with -Wall -Wextra
#      -Werror, .bazelrc), the documentation's C++ examples included
#      (//docs:examples_test), against LibTorch 2.13 (the default), then
#      against Debian's libtorch 1.13 built by clang-14 under
#      AddressSanitizer, LeakSanitizer and UndefinedBehaviorSanitizer
#      (--config=fuzz: libtorch is not instrumented, our code is, at -O0;
#      the same objects make the fuzzers);
#   2. the same against 2.13, unoptimized, in the consumer example (examples/consumer:
#      its own workspace, which depends on this one through
#      local_repository, traces its own model through the public headers and
#      generates code with fx_cc_library), and the CMake build with its
#      consumer
#      (tools/cmake_test.sh: builds, installs, builds
#      examples/cmake_consumer against the package and runs its demo);
#   3. each fuzzer for FX_FUZZ_SECONDS (default 60) seconds, two at a time
#      (tools/fuzz.sh);
#   4. each benchmark with --quick, to prove it runs (its timing targets are
#      for full runs; its accuracy and allocation targets hold in any run).
# Ends with one line "N passed, N failed" counting Catch2 test cases over all
# test targets (a sharded target's summed over its shards; a target that
# fails to build or dies without a Catch2 summary counts as one failed
# case, and a target Bazel failed counts at least one, whatever its log
# says: tools/test_results.sh), plus one case per fuzzer and per benchmark.
# Exits non-zero if anything failed, and whenever the line counts a failure.
set -uo pipefail
cd "$(dirname "$0")/.."
source tools/test_results.sh

passed=0
failed=0
status=0

# Runs `bazel test --keep_going ARGS...` (default //...) in workspace $1 and
# adds its cases to the counts (a target that fails to build does not keep
# the others from running and being counted). Options among ARGS (--config=...) also pick the test
# logs' directory.
test_workspace() {
  local dir="$1"
  shift
  local args=("$@")
  [ "${#args[@]}" -eq 0 ] && args=(//...)
  local options=()
  for arg in "${args[@]}"; do
    [ "$arg" = "--" ] && break  # then targets, some of them excluded (-//...)
    [[ "$arg" == --* ]] && options+=("$arg")
  done
  local log
  log="$(mktemp)"
  (cd "$dir" && bazel test --keep_going "${args[@]}" 2>&1) | tee "$log"
  local ws_status=${PIPESTATUS[0]}
  local testlogs ws_passed ws_failed
  testlogs="$(cd "$dir" && bazel info "${options[@]}" bazel-testlogs 2>/dev/null)"
  read -r ws_passed ws_failed < <(count_bazel_results "$testlogs" "$ws_status" <"$log")
  rm -f "$log"
  passed=$((passed + ws_passed))
  failed=$((failed + ws_failed))
  if [ "$ws_status" -ne 0 ]; then
    status=$ws_status
  fi
}

# Counts one case for a command: passed if it exits 0.
one_case() {
  local name="$1"
  shift
  echo "== $name: $*"
  local start=$SECONDS
  if "$@"; then
    passed=$((passed + 1))
  else
    echo "== $name FAILED"
    failed=$((failed + 1))
    status=1
  fi
  timings+=("$(printf '%5d s  %s' $((SECONDS - start)) "$name")")
}

# Where the time goes, printed at the end (the run is kept under an hour).
timings=()
timed() {
  local name="$1"
  shift
  local start=$SECONDS
  "$@"
  timings+=("$(printf '%5d s  %s' $((SECONDS - start)) "$name")")
}

# Builds the API reference into a directory of its own, then removes it.
api_reference() {
  local out
  out="$(mktemp -d)"
  (cat docs/Doxyfile; echo "OUTPUT_DIRECTORY = $out") | doxygen -
  local result=$?
  rm -rf "$out"
  return "$result"
}

one_case "layering" /usr/bin/python3 tools/check_layering.py
one_case "test counting" bash tools/test_results_test.sh
one_case "cmake sources" bash tools/check_cmake_sources.sh
one_case "api reference" api_reference
timed "bazel test //... (LibTorch 2.13)" test_workspace .
# Debian's libtorch 1.13, the second configuration: the whole suite again,
# built once, by clang-14 under AddressSanitizer, LeakSanitizer and
# UndefinedBehaviorSanitizer (--config=fuzz, which is --config=libtorch113
# and more: .bazelrc), whose objects also make the fuzzers. gcc's build
# against 1.13 (--config=libtorch113) is the same sources and flags as the
# 2.13 one above; building it too would double the time 1.13 takes. Only
# the tests and what they use are built here (--build_tests_only; the
# fuzzers below, then): the benchmarks and the build-time generated ResNets
# build and run against 2.13.
timed "bazel test //... (LibTorch 1.13, ASan, UBSan)" test_workspace . \
  --config=fuzz --build_tests_only //...
# Unoptimized: the consumer checks the build as a dependency, not speed, and
# compiles all of fx for LibTorch again (an external repository's paths are
# its own), a fifth faster at -O0.
timed "bazel test //... (examples/consumer)" test_workspace examples/consumer \
  --compilation_mode=fastbuild //...
one_case "cmake consumer" bash tools/cmake_test.sh
# The four fuzzers, two at a time (tools/fuzz.sh), one case each.
fuzzers=(parse_graph load input_spec exported_program)
fuzz_dir="${FX_FUZZ_DIR:-$HOME/.cache/fx-libtorch-fuzz}"
for target in "${fuzzers[@]}"; do rm -f "$fuzz_dir/$target.result"; done
timed "fuzzers" bash tools/fuzz.sh "${FX_FUZZ_SECONDS:-60}" "${fuzzers[@]}"
for target in "${fuzzers[@]}"; do
  result="$(cat "$fuzz_dir/$target.result" 2>/dev/null)"
  if [ "$result" = ok ]; then
    passed=$((passed + 1))
  else
    echo "== fuzz $target FAILED: ${result:-no result}"
    failed=$((failed + 1))
    status=1
  fi
done
for benchmark in benchmark benchmark_passes benchmark_codegen benchmark_inference \
    benchmark_quantization benchmark_scheduling benchmark_dynamic \
    benchmark_exported benchmark_generation; do
  one_case "$benchmark --quick" bazel run "//tools:$benchmark" -- --quick
done

echo "== time per part (total $SECONDS s)"
printf '%s\n' "${timings[@]}"
summary_line "$passed" "$failed" "$status"
