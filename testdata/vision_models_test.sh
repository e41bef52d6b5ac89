#!/usr/bin/env bash
# testdata/vision_models.py against torchvision: Debian's Python (torch 1.13,
# torchvision 0.14) traces torchvision's four models to TorchScript; the
# Python of the build's LibTorch builds each copy, loads the file's weights
# strictly (same names and shapes) and must give the file's output within
# 1e-4 (vision_models.py's own check). The benchmarks' Python references
# run these copies where torchvision does not import.
# Ends with a Catch2-style summary, one case per model, which tools/test.sh
# counts.
#   vision_models_test.sh TORCHSCRIPT_MODELS_PY VISION_MODELS_PY PYTHON
set -uo pipefail
writer="$1"
models="$2"
python="$3"
dir="${TEST_TMPDIR:-$(mktemp -d)}/vision_models"
names=(resnet18 resnet50 mobilenet_v2 mobilenet_v3_small)
if ! /usr/bin/python3 "$writer" "$dir" "${names[@]/%/_traced}" >/dev/null; then
  echo "torchvision's models not written by /usr/bin/python3"
  echo "test cases: ${#names[@]} | 0 passed | ${#names[@]} failed"
  exit 1
fi
"$python" "$models" "$dir" | tee "$dir/report"
passed=$(grep -c " max_abs_diff " "$dir/report")
failed=$((${#names[@]} - passed))
while read -r name _ diff; do
  # vision_models.py's bound: 1e-4.
  if ! awk -v d="$diff" 'BEGIN { exit !(d <= 1e-4) }'; then
    echo "$name differs from torchvision's: max |diff| $diff"
    passed=$((passed - 1))
    failed=$((failed + 1))
  fi
done < "$dir/report"
if [ "$failed" -eq 0 ]; then
  echo "All tests passed ($passed assertions in $passed test cases)"
  exit 0
fi
echo "test cases: ${#names[@]} | $passed passed | $failed failed"
exit 1
