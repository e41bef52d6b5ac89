// Graph-mode post-training quantization (torch.ao.quantization.quantize_fx):
// prepare, calibrate, convert, on LibTorch's quantized kernels.
//
//   fx::set_quantized_engine("onednn");
//   fx::GraphModule prepared = fx::prepare_fx(gm, fx::get_default_qconfig_mapping("onednn"));
//   for (const at::Tensor& batch : calibration) prepared(batch);   // observers record ranges
//   fx::GraphModule int8 = fx::convert_fx(prepared);
//   at::Tensor y = int8(x).toTensor();                              // float in, float out
//
// prepare_fx folds batch norms into convolutions, drops dropouts, groups
// each quantizable operation with the relu after it (conv-relu, linear-relu,
// add-relu) and inserts observers (quantization/observer.h) on the inputs
// and outputs that will be quantized and on weights:
//
//   %x_observer = fx_quant::observe(%x, %activation_post_process_0, ...)
//   %w_observer = fx_quant::observe(%conv1_weight_fused, %weight_post_process_0, ...)
//   %conv2d = aten::conv2d(%x_observer, %w_observer, %conv1_bias_fused, ...)
//   %relu = aten::relu(%conv2d)
//   %relu_observer = fx_quant::observe(%relu, %activation_post_process_1, ...)
//
// convert_fx turns each observed operation into its quantized kernel, with
// weights quantized and packed by an init step (so a converted module
// saves, loads and packs again), and quantizes / dequantizes only where a
// float operation meets a quantized one:
//
//   %quantize_per_tensor = aten::quantize_per_tensor(%x, 0.0186, 114, torch.quint8)
//   %_packed_conv2d = get_attr[target=_packed.conv2d]
//   %conv2d = quantized::conv2d_relu.new(%quantize_per_tensor, %_packed_conv2d, 0.0102, 0)
//   ...
//   %dequantize = aten::dequantize.self(%linear)
//
// What is quantized (a QConfig of the mapping that is not nullopt), as
// passes/patterns.h matches it:
//   conv      conv1d/2d/3d (not transposed) with a constant weight (+ relu)
//   linear    linear, addmm, matmul by a constant 2-d weight, or by t() of
//             one (+ relu)
//   add, mul  of two tensors, broadcasting (+ relu)
//   cat       of tensors
//   hardswish, batch_norm (one that could not be folded)
// and these run on quantized tensors as they come, keeping their input's
// scale: max/avg/adaptive pooling, relu, relu6/hardtanh, clamp, flatten,
// reshape, view, permute, transpose, squeeze, unsqueeze, contiguous, mean,
// upsample_nearest, and sigmoid / hardsigmoid / tanh (fixed scales 1/256
// and 2/256, chosen by libtorch's kernels). Everything else stays float32.
//
// The module given is never modified. Errors (QuantizationError) name the
// node and what to do: a module traced in training mode, converting before
// any calibration, an observer that saw no data.
#pragma once

#include <set>
#include <string>
#include <vector>

#include <ATen/core/ivalue.h>

#include "fx/ir/meta.h"
#include "fx/runtime/graph_module.h"
#include "quantization/qconfig.h"

namespace fx {

// On a converted module's quantized nodes: the name of the prepared
// module's node whose value they compute (quantization_report pairs them).
inline constexpr MetaKey<std::string> kQuantizedFrom{"quantized_from"};

// Inserts observers (see above). `example_inputs` are needed only when the
// graph lacks tensor metadata (a parsed graph: ShapeProp runs on them).
GraphModule prepare_fx(const GraphModule& module,
                       const QConfigMapping& mapping,
                       const std::vector<c10::IValue>& example_inputs = {});

// The quantized module: LibTorch's quantized operators, weights packed for
// the mapping's engine by an init step.
GraphModule convert_fx(const GraphModule& prepared);

// The reference model, for debugging: every observed value goes through
// quantize_per_tensor and dequantize, weights through quantize and
// dequantize, and every operator stays float32 (torch.ao's
// convert_to_reference_fx).
GraphModule convert_to_reference_fx(const GraphModule& prepared);

// Dynamic quantization (torch.ao's quantize_dynamic): weights quantized
// ahead of time (qint8, per tensor, symmetric), activations quantized per
// call from their own range. Covers linear layers with constant weights
// (quantized::linear_dynamic) and LSTMs (aten::quantized_lstm), in the
// graph and in each body of its control flow (cond's branches,
// while_loop's bodies).
struct DynamicOptions {
  std::string engine = "onednn";
  bool linear = true;
  bool lstm = true;
  // PyTorch's fused transformer ops (aten::_transformer_encoder_layer_fwd,
  // aten::_native_multi_head_attention: what nn.TransformerEncoderLayer and
  // nn.MultiheadAttention run in eval mode without autograd, and a traced
  // file holds; and aten::scaled_dot_product_attention) split into their
  // parts first (fused_attention_decompositions, passes/decompose.h, as the
  // lowering splits them), so that their projections and feed-forward
  // layers are quantized too, not only the linear layers around them.
  bool decompose_fused_attention = true;
};
GraphModule quantize_dynamic_fx(const GraphModule& module,
                                const DynamicOptions& options = {});

// What convert_fx made, counted from a converted module's graph.
struct QuantizedSummary {
  int quantized_ops = 0;   // quantized:: kernels (and fx_quant packs)
  int quantize = 0;        // aten::quantize_per_tensor nodes
  int dequantize = 0;      // aten::dequantize nodes
  int float_ops = 0;       // operators left in float32
  std::string to_string() const;
};
QuantizedSummary summarize_quantized(const GraphModule& module);

}  // namespace fx
