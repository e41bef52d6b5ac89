#!/usr/bin/env bash
# `fx pipeline` across processes on 127.0.0.1: 2 and 3 local processes
# compared bitwise with one process, and the faults: a rank killed, a rank
# hung, a wrong world size, stage files from different splits, a port in
# use, a rank that never comes. Every process is started and stopped here,
# every wait is bounded (timeout), and nothing is left running. Prints a
# Catch2-style summary line, which tools/test.sh counts.
set -uo pipefail

fx="$1"
out="${TEST_TMPDIR:-/tmp}/fx_pipeline_cli_test"
rm -rf "$out"
mkdir -p "$out"
checks=0
failures=0
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null; done
  wait 2>/dev/null
}
trap cleanup EXIT

fail() {
  failures=$((failures + 1))
  echo "FAILED: $*"
}

# check NAME EXPECTED_STATUS PATTERN -- COMMAND...: runs COMMAND (60 s at
# most), expects its exit status and PATTERN (grep -E) in its output.
check() {
  local name="$1" expected="$2" pattern="$3"
  shift 4
  local output status
  output="$(timeout 120 "$@" 2>&1)"
  status=$?
  checks=$((checks + 1))
  if [ "$status" -ne "$expected" ] || ! grep -qE -- "$pattern" <<<"$output"; then
    fail "$name: exit $status (expected $expected), output:"
    echo "$output" | tail -20
  fi
}

# expect_log NAME FILE PATTERN: the background process's log has PATTERN.
expect_log() {
  checks=$((checks + 1))
  if ! grep -qE -- "$3" "$2"; then
    fail "$1: no /$3/ in $2:"
    tail -20 "$2"
  fi
}

# expect_exit NAME PID EXPECTED_STATUS: waits for the background process
# PID and expects its exit status.
expect_exit() {
  local status
  wait "$2"
  status=$?
  checks=$((checks + 1))
  [ "$status" -eq "$3" ] || fail "$1: exit $status (expected $3)"
}

# A port no one listens on.
port() {
  /usr/bin/python3 -c "
import socket
s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])"
}

check "2 local processes, bitwise equal to one" 0 "bitwise equal" -- \
  "$fx" pipeline run mlp --stages=2 --micro_batches=4 --rounds=2
check "3 local processes at chosen split points" 0 \
  "bitwise equal to the stages run in one process" -- \
  "$fx" pipeline run lenet --split_points=relu,relu_1 --micro_batches=3 \
  --rounds=2
check "split into 2 stage files" 0 "wrote $out/two/stage_1.fx" -- \
  "$fx" pipeline split lenet --stages=2 --output="$out/two"
check "split into 3 stage files" 0 "wrote $out/three/stage_2.fx" -- \
  "$fx" pipeline split lenet --stages=3 --output="$out/three"
check "split another model" 0 "wrote $out/mlp/stage_1.fx" -- \
  "$fx" pipeline split mlp --stages=2 --output="$out/mlp"
check "a split point that is nowhere is named" 1 "'nowhere' names neither" -- \
  "$fx" pipeline split lenet --split_points=nowhere --output="$out/bad"
check "cuts tuned by the stages' times, lowered" 0 \
  "tuned by measurement \(the stages at once, 1 thread each\): cut 1 [^;]+; cut [1-4] kept.*wrote $out/tuned/stage_1.fx" -- \
  bash -c "'$fx' pipeline split resnet18 --stages=2 --balance=tune \
    --passes=optimize_for_inference --output='$out/tuned' 2>&1 | tr '\\n' ' '"
check "tuned cuts run, bitwise equal to one process" 0 "bitwise equal" -- \
  "$fx" pipeline run mlp --stages=2 --balance=tune --micro_batches=4 --rounds=2
check "tuning moves the cuts, so it takes no split points" 2 \
  "give --stages, not --split_points" -- \
  "$fx" pipeline split lenet --split_points=relu --balance=tune --output="$out/bad"

check "branches: the schedule and the measured choice" 0 \
  "worker 1: .*measured: 2 workers x 1 thread" -- \
  bash -c "'$fx' branches lenet --rounds=3 | tr '\\n' ' '"

# wait_for_log FILE PATTERN: until FILE has PATTERN (60 s at most).
wait_for_log() {
  local i
  for i in $(seq 600); do
    grep -qE -- "$2" "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}

serve() {  # serve LOG ARGS...: a rank in the background
  local log="$1"
  shift
  "$fx" pipeline serve "$@" >"$log" 2>&1 &
  pids+=($!)
}

# Served by hand: rank 0 drives batches of 2 micro-batches.
p="$(port)"
serve "$out/r1.log" --rank=1 --world=2 --master="127.0.0.1:$p" "$out/two/stage_1.fx"
check "rank 0 drives rank 1" 0 "rank 0: 3 batches" -- \
  "$fx" pipeline serve --rank=0 --world=2 --master="127.0.0.1:$p" \
  --input=4x1x32x32 --rounds=3 --output="$out/y.pt" "$out/two/stage_0.fx"
expect_exit "rank 1 exits 0 after rank 0 stopped" "${pids[-1]}" 0
expect_log "rank 1 returns when rank 0 stops" "$out/r1.log" "rank 1 done"

# Traced with a dynamic batch (the encoder's dimension 1), split once and
# served at batches other than the example's.
check "split with a dynamic dimension" 0 "wrote $out/dyn/stage_1.fx" -- \
  "$fx" pipeline split transformer_encoder --dynamic=N:0:1:64 --stages=2 \
  --output="$out/dyn"
for n in 5 1; do
  p="$(port)"
  serve "$out/d1_$n.log" --rank=1 --world=2 --master="127.0.0.1:$p" \
    "$out/dyn/stage_1.fx"
  check "the dynamic stages at N=$n" 0 "rank 0: 2 batches" -- \
    "$fx" pipeline serve --rank=0 --world=2 --master="127.0.0.1:$p" \
    --input="12x$n:int64" --rounds=2 "$out/dyn/stage_0.fx"
  expect_exit "its rank 1 exits 0" "${pids[-1]}" 0
done

# A rank killed mid-run: rank 0 fails at once, naming it.
p="$(port)"
serve "$out/k1.log" --rank=1 --world=2 --master="127.0.0.1:$p" "$out/two/stage_1.fx"
victim=$!
serve "$out/k0.log" --rank=0 --world=2 --master="127.0.0.1:$p" \
  --input=64x1x32x32 --rounds=100000 --timeout_ms=20000 "$out/two/stage_0.fx"
driver=$!
wait_for_log "$out/k0.log" "ranks joined" || fail "the ranks did not join"
sleep 1
kill -9 "$victim"
start=$SECONDS
timeout 60 tail --pid="$driver" -f /dev/null
wait "$driver"
status=$?
checks=$((checks + 1))
[ "$status" -ne 0 ] || fail "rank 0 went on after rank 1 was killed"
[ $((SECONDS - start)) -le 25 ] || fail "rank 0 took $((SECONDS - start)) s to stop"
expect_log "a killed rank is named" "$out/k0.log" "rank 1"

# A rank hung (stopped): the others fail after the timeout, naming it.
p="$(port)"
serve "$out/h1.log" --rank=1 --world=2 --master="127.0.0.1:$p" "$out/two/stage_1.fx"
victim=$!
serve "$out/h0.log" --rank=0 --world=2 --master="127.0.0.1:$p" \
  --input=64x1x32x32 --rounds=100000 --timeout_ms=3000 "$out/two/stage_0.fx"
driver=$!
wait_for_log "$out/h0.log" "ranks joined" || fail "the ranks did not join"
sleep 1
kill -STOP "$victim"
timeout 60 tail --pid="$driver" -f /dev/null
wait "$driver"
status=$?
checks=$((checks + 1))
[ "$status" -ne 0 ] || fail "rank 0 went on with rank 1 hung"
expect_log "a hung rank is named with the timeout" "$out/h0.log" \
  "rank 1 did not .* within 3000 ms"
kill -9 "$victim"

# Different world sizes: both say so.
p="$(port)"
serve "$out/w1.log" --rank=1 --world=3 --timeout_ms=5000 \
  --master="127.0.0.1:$p" "$out/two/stage_1.fx"
check "different world sizes are named" 1 "same --world" -- \
  "$fx" pipeline serve --rank=0 --world=2 --timeout_ms=5000 \
  --master="127.0.0.1:$p" --input=4x1x32x32 "$out/two/stage_0.fx"
expect_exit "the other rank fails too" "${pids[-1]}" 1
expect_log "the other rank says it too" "$out/w1.log" "same --world"

# Stage files of two different splits.
p="$(port)"
serve "$out/m1.log" --rank=1 --world=2 --timeout_ms=5000 \
  --master="127.0.0.1:$p" "$out/mlp/stage_1.fx"
check "stages that do not fit are named" 1 "do not belong to one pipeline" -- \
  "$fx" pipeline serve --rank=0 --world=2 --timeout_ms=5000 \
  --master="127.0.0.1:$p" --input=4x1x32x32 "$out/two/stage_0.fx"
expect_exit "rank 1 fails too" "${pids[-1]}" 1
expect_log "rank 1 says it too" "$out/m1.log" "do not belong to one pipeline"

# A port in use.
p="$(port)"
serve "$out/p0.log" --rank=0 --world=2 --timeout_ms=8000 \
  --master="127.0.0.1:$p" --input=4x1x32x32 "$out/two/stage_0.fx"
sleep 2
check "a port in use is named" 1 "cannot listen on 127.0.0.1:$p" -- \
  "$fx" pipeline serve --rank=0 --world=2 --timeout_ms=3000 \
  --master="127.0.0.1:$p" --input=4x1x32x32 "$out/two/stage_0.fx"
# The first rank 0 waits for its rank 1, which never comes.
expect_exit "the first rank 0 fails" "${pids[-1]}" 1
expect_log "a rank that never comes is named" "$out/p0.log" \
  "rank 1 of 2 did not join within 8000 ms"

check "rank 1 without a master says where it looked" 1 \
  "no pipeline master at 127.0.0.1:" -- \
  "$fx" pipeline serve --rank=1 --world=2 --timeout_ms=2000 \
  --master="127.0.0.1:$(port)" "$out/two/stage_1.fx"
check "a bad master address is explained" 1 "is not HOST:PORT" -- \
  "$fx" pipeline serve --rank=1 --world=2 --master=nowhere \
  "$out/two/stage_1.fx"

passed=$((checks - failures))
if [ "$failures" -eq 0 ]; then
  echo "All tests passed ($checks assertions in $checks test cases)"
else
  echo "test cases: $checks | $passed passed | $failures failed"
fi
[ "$failures" -eq 0 ]
