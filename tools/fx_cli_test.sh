#!/usr/bin/env bash
# The fx command-line tool end to end: bundled models, saved GraphModules,
# TorchScript files in and out, and its errors. Prints a Catch2-style summary
# line, which tools/test.sh counts.
set -uo pipefail

fx="$1"
models_script="$2"
# The Python whose torch matches the build's LibTorch (@libtorch//:defs.bzl):
# files our build writes load there (LibTorch 2.13's files do not load in
# Python torch 1.13). torchscript_models.py needs Debian's, for torchvision.
python="$3"
# testdata/exported_programs.py and a Python with torch.export to run it.
programs_script="$4"
export_python="$5"
out="${TEST_TMPDIR:-/tmp}/fx_cli_test"
mkdir -p "$out"
checks=0
failures=0

# check NAME EXPECTED_STATUS PATTERN -- COMMAND...: runs COMMAND, expects
# its exit status and PATTERN (grep -E) in its output.
check() {
  local name="$1" expected="$2" pattern="$3"
  shift 4
  local output status
  output="$("$@" 2>&1)"
  status=$?
  checks=$((checks + 1))
  if [ "$status" -ne "$expected" ] || ! grep -qE -- "$pattern" <<<"$output"; then
    failures=$((failures + 1))
    echo "FAILED: $name: exit $status (expected $expected), output:"
    echo "$output" | head -20
  fi
}

check "zoo lists models" 0 "^resnet18$" -- "$fx" zoo
check "help lists every command" 0 "fx pipeline run MODEL" -- "$fx" help
check "no command prints the usage" 2 "fx opt FILE.ir" -- "$fx"
check "an unknown command is named" 2 "no command 'tracer'" -- "$fx" tracer lenet
check "a command lists its own flags" 0 "--torchscript=" -- "$fx" trace --help
check "help COMMAND is COMMAND --help" 0 "--split_points=" -- \
  "$fx" help pipeline run
check "a flag of another command is refused, naming this one's" 2 \
  "fx quantize: it takes no flag --cost; its flags are --input, --calibrate" -- \
  "$fx" quantize lenet --cost
check "a flag's value must parse" 2 "fx trace: --cost=maybe" -- \
  "$fx" trace lenet --cost=maybe
check "--dynamic generalizes a model that reads sizes" 0 \
  "generalized over its dynamic dimensions from 5 traces" -- \
  "$fx" trace transformer_encoder --dynamic=S:0:0:512,N:0:1 --print=none
check "--dynamic names a spec that does not parse" 2 \
  "'N' is not SYMBOL:INPUT:DIM" -- "$fx" trace lenet --dynamic=N
check "an unknown pass is named before tracing" 2 \
  "--passes=fuse_everything: no pass named 'fuse_everything'" -- \
  "$fx" trace lenet --passes=fuse_everything
check "passes lists the pipelines as --passes takes them" 0 \
  "^    decompose_attention,remove_dropout,fuse_linear_bias,fuse_conv_bn,fold_constants,eliminate_dead_code,lower_onednn_linear,lower_onednn_matmul,lower_onednn_recurrent,lower_onednn_int8,lower_onednn_convolutions,lower_onednn_pooling,lower_onednn_batch_norm,lower_onednn_squeeze_excite,onednn_channels_last,onednn_concat_buffers,onednn_fold_weights,micro_batch,chain_convolutions$" -- \
  "$fx" passes
check "passes lists a pass's options" 0 "^    \{decision=\.\.\.\}" -- "$fx" passes
check "a malformed pipeline is named before tracing" 2 \
  "the options of 'lower_onednn' have no closing" -- \
  "$fx" trace lenet --passes=fuse_conv_bn,lower_onednn{bf16=true
check "a pass's options run from the command line" 0 \
  "fx_onednn::conv" -- \
  "$fx" trace lenet '--passes=fuse_conv_bn,fold_constants,lower_onednn{decision=all,lower_pooling=false}' --print=graph
check "--print is checked before tracing" 2 "--print takes graph, meta" -- \
  "$fx" quantize lenet --print=svg
check "arguments are counted" 2 "fx trace: give MODEL" -- "$fx" trace
check "trace, fold and save a bundled model" 0 "wrote $out/lenet.fx" -- \
  "$fx" trace lenet --passes=fuse_conv_bn,eliminate_dead_code --print=tabular \
  --save="$out/lenet.fx"
check "a saved GraphModule reads back" 0 "call_function\[target=aten::conv2d\]" -- \
  "$fx" trace "$out/lenet.fx" --print=graph
check "--dynamic on a saved GraphModule is refused, not ignored" 2 \
  "already traced: --dynamic applies when tracing" -- \
  "$fx" trace "$out/lenet.fx" --dynamic=N:0:0
check "--dynamic with --onnx keeps the batch dynamic" 0 "wrote $out/mlp_dynamic.onnx" -- \
  "$fx" trace mlp --dynamic=B:0:0 --onnx="$out/mlp_dynamic.onnx" --print=none
check "the ONNX input's batch is symbolic" 0 "^B 784$" -- /usr/bin/python3 -c "
import onnx
dims = onnx.load('$out/mlp_dynamic.onnx').graph.input[0].type.tensor_type.shape.dim
print(*[d.dim_param or d.dim_value for d in dims])
"
check "--cost_at prices a dynamic graph at another batch" 0 "total \(8 nodes\) +3.76 MFLOPs" -- \
  "$fx" trace mlp --dynamic=B:0:0 --print=none --cost_at=8x784
check "--calls keeps a specialization per shape, bounded, and reports them" 0 \
  "2 specializations held \(capacity 2\), 3 made, 1 dropped" -- \
  "$fx" trace mlp --print=none --passes=fold_constants \
  --calls="4x784;1x784;4x784;8x784" --capacity=2
check "--calls cannot trace a saved GraphModule again" 2 \
  "give a bundled model or a TorchScript file" -- \
  "$fx" trace "$out/lenet.fx" --print=none --calls="1x1x28x28"
check "a missing file is named" 2 "neither a bundled model" -- \
  "$fx" trace "$out/missing.pt"
echo "not a model" > "$out/text.pt"
check "a file that is no model is named" 1 "neither a TorchScript file" -- \
  "$fx" trace "$out/text.pt" --input=1x3

/usr/bin/python3 "$models_script" "$out" causal_encoder_scripted \
  control_flow_scripted > /dev/null
check "a TorchScript file's size arithmetic is recorded" 0 \
  "its size arithmetic recorded \([0-9]+ size nodes\): runs other shapes" -- \
  "$fx" trace "$out/causal_encoder_scripted.pt" --input=2x16:int64 --print=none
check "--specialize folds the sizes" 0 \
  "specialized to the example shapes" -- \
  "$fx" trace "$out/causal_encoder_scripted.pt" --input=2x16:int64 \
  --specialize --print=none
check "--specialize is for TorchScript files" 2 \
  "--specialize applies to TorchScript files" -- \
  "$fx" trace lenet --specialize
check "what specialized a file is named" 0 \
  "specialized to the example shapes \(a size used as a constant by prim::Loop at torchscript_models.py:[0-9]+\)" -- \
  "$fx" trace "$out/control_flow_scripted.pt" --input=2x4 --print=none
/usr/bin/python3 "$models_script" "$out" resnet18_traced > /dev/null
check "TorchScript needs --input" 2 "give its example inputs" -- \
  "$fx" trace "$out/resnet18_traced.pt"
check "a bad input spec is explained" 1 "unknown dtype 'float99'" -- \
  "$fx" trace "$out/resnet18_traced.pt" --input=1x3x224x224:float99
check "TorchScript in, folded, TorchScript out" 0 "wrote $out/folded.pt" -- \
  "$fx" trace "$out/resnet18_traced.pt" --input=1x3x224x224 \
  --passes=fuse_conv_bn,eliminate_dead_code --print=code \
  --torchscript="$out/folded.pt"
check "Python runs the exported file like the original" 0 "^same$" -- \
  "$python" -c "
import sys, torch
a = torch.jit.load('$out/resnet18_traced.pt').eval()
b = torch.jit.load('$out/folded.pt')
x = torch.randn(1, 3, 224, 224)
with torch.no_grad():
    print('same' if torch.allclose(a(x), b(x), atol=1e-4) else 'different')
"
check "TorchScript in, folded, ONNX out" 0 "wrote $out/folded.onnx" -- \
  "$fx" trace "$out/resnet18_traced.pt" --input=1x3x224x224 \
  --passes=fuse_conv_bn,eliminate_dead_code --print=none --onnx="$out/folded.onnx"
check "Python's ONNX checker accepts the export (full shape inference)" 0 "^ok$" -- \
  /usr/bin/python3 -c "
import onnx
onnx.checker.check_model(onnx.load('$out/folded.onnx'), full_check=True)
print('ok')
"
check "a leaf module is refused by name, nothing written" 1 "leaf module 'gate'" -- \
  "$fx" trace data_dependent_leaf --print=none --onnx="$out/leaf.onnx"
check "the refused export left no file" 1 "" -- test -e "$out/leaf.onnx"
check "TorchScript in, lowered to oneDNN, saved" 0 "wrote $out/lowered.fx" -- \
  "$fx" trace "$out/resnet18_traced.pt" --input=1x3x224x224 \
  --passes=optimize_for_inference --save="$out/lowered.fx"
check "a lowered GraphModule loads (packing again) and prints" 0 \
  "call_function\[target=fx_onednn::conv_add_\]" -- \
  "$fx" trace "$out/lowered.fx" --print=graph

check "the cost table, weights beyond the cache in memory" 0 \
  "weights in memory\)" -- "$fx" trace resnet18 --print=none --cost --cache_mb=2
check "the cost table, weights in cache by default" 0 "weights in cache\)" -- \
  "$fx" trace resnet18 --print=none --cost
check "a negative cache is refused" 1 "cache_bytes must be at least 0" -- \
  "$fx" trace resnet18 --print=none --cost --cache_mb=-1

# int8 quantization: calibration from random batches and from a directory
# of torch.save files, the report, saving, loading (packing again).
check "quantize a bundled model, report and save it" 0 "SQNR \(dB\)" -- \
  "$fx" quantize lenet --calibrate=random:4 --print=none --report \
  --save="$out/lenet_int8.fx"
check "a quantized GraphModule loads and prints" 0 \
  "call_function\[target=quantized::conv2d_relu.new\]" -- \
  "$fx" trace "$out/lenet_int8.fx" --print=graph
mkdir -p "$out/calibration"
/usr/bin/python3 -c "
import torch
for i in range(3):
    torch.save(torch.randn(1, 3, 224, 224), '$out/calibration/%d.pt' % i)
"
check "quantize TorchScript with calibration files, to TorchScript" 0 \
  "wrote $out/int8.pt" -- \
  "$fx" quantize "$out/resnet18_traced.pt" --input=1x3x224x224 \
  --calibrate="$out/calibration" --print=none --torchscript="$out/int8.pt"
check "the exported int8 TorchScript runs in Python" 0 "^ran" -- \
  "$python" -c "
import torch
m = torch.jit.load('$out/int8.pt')
y = m(torch.randn(1, 3, 224, 224))
print('ran', tuple(y.shape))
"
check "quantize, then lower (int8 convolutions on oneDNN where the CPU has VNNI)" 0 \
  "passes optimize_for_inference: [0-9]* -> [0-9]* nodes" -- \
  "$fx" quantize resnet18 --calibrate=random:2 --print=none \
  --passes=optimize_for_inference --save="$out/resnet18_int8_lowered.fx" \
  --onnx="$out/resnet18_int8_lowered.onnx"
check "a lowered int8 GraphModule loads (packing again) and prints" 0 \
  "target=(fx_onednn::qconv|quantized::conv2d)" -- \
  "$fx" trace "$out/resnet18_int8_lowered.fx" --print=graph
check "quantization-aware training by distillation before converting" 0 \
  "SQNR against float32 over the 2 batches, with --qat=3" -- \
  "$fx" quantize lenet --calibrate=random:2 --qat=3 --print=none
check "--qat is for static quantization" 1 "--qat trains for static quantization" -- \
  "$fx" quantize lenet --qat=3 --dynamic
check "dynamic quantization of an LSTM" 0 "aten::quantized_lstm" -- \
  "$fx" quantize lstm_tagger --dynamic --print=graph
check "an unknown engine names the available ones" 1 \
  "unknown quantization engine 'fbgemm'.*onednn" -- \
  "$fx" quantize lenet --engine=fbgemm
check "calibration needs data" 1 "neither random:N nor a readable directory" -- \
  "$fx" quantize lenet --calibrate="$out/no_such_dir"

# fx opt: a graph written as text, passes, the result; from stdin too.
cat > "$out/dead.ir" <<'IR'
graph():
    %x = placeholder[target=x]
    %relu = call_function[target=aten::relu](args = (%x,), kwargs = {})
    %neg = call_function[target=aten::neg](args = (%x,), kwargs = {})
    return neg
IR
cat > "$out/dead.expected" <<'IR'
graph():
    %x : [#users=1] = placeholder[target=x]
    %neg : [#users=1] = call_function[target=aten::neg](args = (%x,), kwargs = {})
    return neg
IR
check "opt runs passes on a textual graph" 0 "^same$" -- bash -c \
  "'$fx' opt '$out/dead.ir' --passes=eliminate_dead_code | diff - '$out/dead.expected' && echo same"
check "opt reads stdin" 0 "%relu" -- bash -c "'$fx' opt - < '$out/dead.ir'"
printf 'graph():\n    %%x = placeholder[target=x]\n    return y\n' > "$out/bad.ir"
check "opt names the file and line of a parse error" 1 \
  "fx opt: $out/bad.ir: parse_graph: line 3" -- "$fx" opt "$out/bad.ir"
check "opt names a missing file" 2 "cannot read $out/none.ir" -- \
  "$fx" opt "$out/none.ir"

# torch.export programs (.pt2): read, lowered, exported to ONNX, dynamic
# dimensions included.
"$export_python" "$programs_script" "$out" cnn dynamic > /dev/null
check "trace reads a .pt2 program" 0 "read the exported program .*cnn.pt2.*fx_onednn::conv" -- \
  bash -c "'$fx' trace '$out/cnn.pt2' --passes=optimize_for_inference 2>&1 | tr '\\n' ' '"
check "a .pt2 program exports to ONNX" 0 "wrote $out/cnn_pt2.onnx" -- \
  "$fx" trace "$out/cnn.pt2" --print=none --onnx="$out/cnn_pt2.onnx"
check "a .pt2 program's dynamic dimensions are its symbols" 0 \
  "%x : f32\[s[0-9]+, 4\]" -- "$fx" trace "$out/dynamic.pt2" --print=meta
check "a .pt2 program with dynamic dimensions, lowered and exported" 0 \
  "wrote $out/dynamic_pt2.onnx" -- "$fx" trace "$out/dynamic.pt2" \
  --passes=optimize_for_inference --print=none --onnx="$out/dynamic_pt2.onnx"
check "a .pt2 program takes no --dynamic (its own are read)" 2 "fixed when it was exported" -- \
  "$fx" trace "$out/cnn.pt2" --dynamic=B:0:0

if [ "$failures" -eq 0 ]; then
  echo "All tests passed ($checks assertions in 1 test case)"
  exit 0
fi
echo "test cases: 1 | 0 passed | 1 failed"
exit 1
