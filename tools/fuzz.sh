#!/usr/bin/env bash
# Fuzzes the parsers of untrusted input with libFuzzer: fx::parse_graph, fx::load,
# the CLI's input specs and fx::load_exported_program (fuzz/targets.h). Builds the fuzzers with
# --config=fuzz (clang-14, libFuzzer, AddressSanitizer with leak checks,
# UndefinedBehaviorSanitizer), writes the seeds (every zoo graph and saved
# file, fuzz/make_seeds.cc; the .pt2 programs testdata/exported_programs.py
# exports with the venv's torch 2.13) and runs each fuzzer for SECONDS,
# FX_FUZZ_JOBS at a time (default: one per core), then prints a table of
# executions; each one's result, ok or FINDING, is left in
# $FX_FUZZ_DIR/TARGET.result. Exits non-zero on a crash, hang (10 s per
# input), leak, out-of-memory (4 GB) or broken property; the input is kept in
# $FX_FUZZ_DIR/findings and belongs, once fixed, in fuzz/regressions/TARGET/.
#
#   tools/fuzz.sh [SECONDS] [TARGET...]      default: 60 s, all four targets
#
# The corpus grows across runs in $FX_FUZZ_DIR (default
# ~/.cache/fx-libtorch-fuzz).
set -uo pipefail
cd "$(dirname "$0")/.."

seconds="${1:-60}"
shift || true
targets=("$@")
[ "${#targets[@]}" -eq 0 ] && targets=(parse_graph load input_spec exported_program)
work="${FX_FUZZ_DIR:-$HOME/.cache/fx-libtorch-fuzz}"
mkdir -p "$work/findings" "$work/seeds"

bazel build --config=fuzz $(printf '//fuzz:%s_fuzzer ' "${targets[@]}") || exit 1
bin="$(bazel info --config=fuzz bazel-bin 2>/dev/null)"
if [ ! -f "$work/seeds/.done" ]; then
  # The seed maker is a tool, not under test: its leaks are not reported.
  ASAN_OPTIONS=detect_leaks=0 \
    bazel run --config=fuzz //fuzz:make_seeds -- "$work/seeds" || exit 1
  touch "$work/seeds/.done"
fi
pt2_seeds="$work/seeds/exported_program"
if [[ " ${targets[*]} " == *" exported_program "* && ! -f "$pt2_seeds/.done" ]]; then
  python="${FX_VENV:-/usr/local/lib/fx-libtorch/venv}/bin/python"
  "$python" testdata/exported_programs.py "$pt2_seeds" >/dev/null || exit 1
  rm -f "$pt2_seeds"/*.pt  # the reference inputs and outputs: not seeds
  touch "$pt2_seeds/.done"
fi

status=0
rows=()
# Longest input each mutates: graph texts are cut to 16 KB (dozens of
# nodes; the whole ResNet-50 text would make each run 100x slower), saved
# files keep every seed whole, specs are short.
max_len() {
  case "$1" in
    parse_graph) echo 16384 ;;
    load|exported_program) echo 262144 ;;
    *) echo 256 ;;
  esac
}

# Runs one fuzzer and writes its row of the table to $work/TARGET.row, its
# result (ok or FINDING) to $work/TARGET.result.
fuzz_one() {
  local target="$1"
  local corpus="$work/corpus/$target"
  mkdir -p "$corpus"
  local log="$work/$target.log"
  ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$bin/fuzz/${target}_fuzzer" "$corpus" "$work/seeds/$target" \
      -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 \
      -max_len="$(max_len "$target")" -print_final_stats=1 \
      -artifact_prefix="$work/findings/${target}-" >"$log" 2>&1
  local code=$?
  local execs rate result="ok"
  execs="$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$')"
  rate="$(grep -oE 'stat::average_exec_per_sec: *[0-9]+' "$log" | grep -oE '[0-9]+$')"
  if [ "$code" -ne 0 ]; then
    result="FINDING (exit $code, see $log)"
  fi
  echo "$result" >"$work/$target.result"
  printf '%-16s %8ss %12s %10s %8s  %s\n' "$target" "$seconds" \
    "${execs:-?}" "${rate:-?}" "$(ls "$corpus" | wc -l)" "$result" >"$work/$target.row"
}

# The fuzzers run FX_FUZZ_JOBS at a time (default: one per core; each is
# one thread), so four take two minutes of a 2-core machine, not four.
jobs="${FX_FUZZ_JOBS:-$(nproc)}"
running=0
for target in "${targets[@]}"; do
  rm -f "$work/$target.result" "$work/$target.row"
  fuzz_one "$target" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then
    wait -n
    running=$((running - 1))
  fi
done
wait

status=0
rows=()
for target in "${targets[@]}"; do
  rows+=("$(cat "$work/$target.row" 2>/dev/null || echo "$target: no result")")
  if [ "$(cat "$work/$target.result" 2>/dev/null)" != ok ]; then
    status=1
    tail -n 40 "$work/$target.log"
  fi
done

printf '%-16s %9s %12s %10s %8s  %s\n' target time executions "exec/s" corpus result
printf '%s\n' "${rows[@]}"
exit "$status"
