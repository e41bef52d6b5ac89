// Section 6 of benchmark_quantization: transformers in dynamic int8, ours
// beside ONNX Runtime's own.
//
// Each model (testdata/onnx_runtime_models.py: the BERT-style encoder,
// BERT-base, the GPT-style decoder) as a deployment has it: ours, the
// TorchScript file traced in eval mode without autograd (PyTorch's fused
// encoder ops inside), fx::quantize_dynamic_fx (the fused ops split first,
// every linear layer's weights int8, activations quantized per call) and
// fx::optimize_for_inference; ONNX Runtime's, the float ONNX file torch.onnx
// exports from the same module, quantized by onnxruntime.quantization's
// quantize_dynamic (tools/ort_quantize_dynamic.py), on the same token ids
// and threads, in turn, warm. Accuracy beside each time: the SQNR of each
// output against float32's (TorchScript as loaded) and, for a model of
// logits over a vocabulary (the decoder), the share of positions whose top
// token is float32's.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tools/benchmark_support.h"

namespace fx {
namespace benchmark {

struct TransformerInt8Run {
  std::string model;
  int64_t batch = 1;
  double ours_ms = 0, ort_ms = 0, float_ms = 0;
  double ratio = 0;  // median of per-round ours / ORT
  double sqnr_ours = 0, sqnr_ort = 0;
  // Top-token agreement with float32 (logits [batch, length, vocabulary]
  // only; nullopt for an encoder's pooled state).
  std::optional<double> top1_ours, top1_ort;
  int linear_int8 = 0;                 // our linear layers in int8
  int rounds = 0;
  std::string failure;
};

// The models section 6 times by default, and with --quick.
const std::vector<std::string>& int8_transformer_models(bool quick);

// Writes each model's TorchScript file and float ONNX file at each batch
// into `dir` (testdata/onnx_runtime_models.py, Debian's Python) and ONNX
// Runtime's dynamic int8 quantization of each ONNX file; then times each
// model at each batch. Rows that could not be measured carry a failure.
std::vector<TransformerInt8Run> measure_int8_transformers(
    const std::string& argv0, const std::string& dir,
    const std::vector<std::string>& models, const std::vector<int64_t>& batches,
    int rounds, int threads);

void print_int8_transformers(const std::vector<TransformerInt8Run>& runs,
                             int threads);

// The targets: each row at most 1.0x ONNX Runtime's int8 time;
// our SQNR at least ONNX Runtime's less 1 dB (in any run).
std::vector<TargetCheck> check_int8_transformers(
    const std::vector<TransformerInt8Run>& runs);

}  // namespace benchmark
}  // namespace fx
