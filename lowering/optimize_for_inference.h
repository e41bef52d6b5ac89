// Inference lowering to oneDNN (torch.fx's
// experimental.optimization.optimize_for_inference, done with fused
// oneDNN primitives): for an eval-mode float32 CPU graph,
//
//   1. PyTorch's fused transformer ops split into their parts (projections,
//      attention, layer norms, feed-forward layers); batch norms fold into
//      the convolutions and linear layers before them, dropouts go, what
//      depends only on weights is folded;
//   2. each convolution (1-, 2-, 3-d, grouped and depthwise included) and
//      each linear layer (aten::linear, addmm of a constant weight, matmul
//      by a constant 2-d weight, each also of t() of one: the fusions of
//      passes/patterns.h) becomes fx_onednn::conv / fx_onednn::linear
//      (lowering/onednn_ops.h) on a weight packed once by an init step into
//      oneDNN's blocked layout, absorbing the residual add and the
//      activation after it (relu, leaky_relu, relu6 / hardtanh / clamp,
//      hardswish, hardsigmoid, silu, sigmoid, tanh, gelu) when nothing else
//      reads what they replace;
//      the products of two activations (attention's q @ k^T and
//      weights @ v: matmul, bmm) become fx_onednn::matmul, the scale after
//      them fused; LSTM and GRU layers become fx_onednn::lstm / gru
//      (oneDNN's RNN primitives, weights transposed once by init steps
//      and reordered into the primitive's layout at their first call);
//   3. activations stay channels-last from one lowered convolution to the
//      next, through the operators that keep that layout (pooling,
//      elementwise, cat, batch_norm, ...); an aten::contiguous converts
//      back where anything else reads them, and at the graph's output;
//   4. max and average pooling on those activations become
//      fx_onednn::max_pool2d / avg_pool2d, and so does global average
//      pooling (adaptive_avg_pool2d to 1x1) of a fixed image size; batch
//      norms no convolution absorbed become fx_onednn::batch_norm, the
//      relu after one fused;
//   5. traced at a batch above 1 (not a dynamic one), the leading layers
//      whose activations outgrow the caches run one micro-batch at a time,
//      the rest on the whole batch (lowering/micro_batch.h); at batch 1,
//      runs of convolutions each reading the one before run as one call
//      (lowering/conv_chain.h).
//
//   before:
//       %conv2d = call_function[target=aten::conv2d](args = (%x, %conv_weight, %conv_bias, [1, 1], [1, 1]))
//       %add_ = call_function[target=aten::add_.Tensor](args = (%conv2d, %y))
//       %relu_ = call_function[target=aten::relu_](args = (%add_,))
//   after:
//       %contiguous = call_function[target=aten::contiguous](args = (%x,), kwargs = {memory_format: torch.channels_last})
//       %pack = get_attr[target=_folded.pack_conv_weight]
//       %conv = call_function[target=fx_onednn::conv](args = (%contiguous, %pack, %conv_bias, [1, 1], [1, 1], [1, 1], 1, %y, relu, 0.0, 0.0))
//       %contiguous_1 = call_function[target=aten::contiguous](args = (%conv,))
//       return contiguous_1
//
// Transposed convolutions (1-, 2-, 3-d, grouped) become
// fx_onednn::conv_transpose with their activation fused, always (aten's
// take 10-40x as long here; not with bf16).
//
// What cannot be lowered stays as it was, without an error: other dtypes
// or devices, weights that are not constant,
// graphs whose nodes lack tensor metadata (trace them, or run ShapeProp).
// Guards stay: an input of another dtype or shape is still a GuardError.
// Packed weights live in the process that made them: saved GraphModules
// keep the init steps, and fx::load packs again. Link //lowering wherever
// a lowered graph runs (its operators register themselves).
#pragma once

#include <string>

#include "passes/pass.h"

namespace fx {

struct InferenceOptions {
  // Fold batch norms, drop dropouts and fold constants first.
  bool fold = true;
  // Split PyTorch's fused transformer ops (aten::_transformer_encoder_layer_fwd,
  // aten::_native_multi_head_attention: what nn.TransformerEncoderLayer and
  // nn.MultiheadAttention run in eval mode) into their parts first
  // (passes/decompose.h), so that their linear layers are lowered.
  bool split_attention = true;
  // Lower convolutions and linear layers to oneDNN.
  bool lower_convolutions = true;
  bool lower_linear = true;
  // Products of two activations of rank 3 or more (attention's q @ k^T
  // and weights @ v, matmul or bmm) on oneDNN's matmul, read through their
  // strides, a scale after them fused (in float32, with bf16 too).
  bool lower_matmul = true;
  // aten::lstm and aten::gru (nn.LSTM, nn.GRU, torch::nn::LSTM / GRU:
  // unidirectional, with biases, no projections, float32, eval mode) on
  // oneDNN's LSTM and linear-before-reset GRU primitives.
  bool lower_recurrent = true;
  // Run max and average pooling between lowered convolutions on oneDNN.
  bool lower_pooling = true;
  // Run the batch norms there that no convolution before them absorbs
  // (DenseNet's), the relu after one fused, on oneDNN (float32).
  bool lower_batch_norm = true;
  // Run squeeze-and-excitation blocks (global average pooling, two 1x1
  // convolutions, relu or silu between, sigmoid or hardsigmoid after, the
  // product with the input: MobileNetV3's, EfficientNet's) as one call
  // (fx_onednn::squeeze_excite, float32).
  bool lower_squeeze_excite = true;
  // Write chains of concatenations along the channels that each extend
  // the last (DenseNet's blocks) into one buffer, each piece once
  // (fx_onednn::concat_buffer / concat_write_), each concatenation a view
  // of its first channels, rather than copying every piece again into each.
  bool concat_buffers = true;
  // Add a residual into its own memory where nothing reads it afterwards
  // (fx_onednn::conv_add_) rather than into a copy.
  bool in_place = true;
  // Traced at a batch above 1 (not a dynamic one), run the leading
  // per-sample layers whose activations outgrow the caches one micro-batch
  // at a time (lowering/micro_batch.h).
  bool micro_batch = true;
  // At batch 1, run each chain of three or more lowered convolutions, each
  // reading the one before, as one call whose threads each take the same
  // rows of every layer (fx_onednn::conv_chain, lowering/conv_chain.h).
  bool chain_convolutions = true;
  // Whether lowering a convolution pays (linear layers always do: oneDNN's
  // matmul against the system BLAS):
  //   kCostModel  by the bytes it moves: lowering saves aten's per-call
  //               weight reorder and a pass over the output per fused
  //               operator, and costs a pass per layout conversion, which
  //               only a convolution with no lowered neighbour needs;
  //   kMeasure    by timing both on random inputs of its traced sizes, as
  //               torch.fx's autotuner does (opt-in: its choices depend on
  //               the machine and its load, so the graph may differ from
  //               run to run);
  //   kAll        every convolution that can be.
  enum class Decision { kCostModel, kMeasure, kAll };
  Decision decision = Decision::kCostModel;
  int measure_rounds = 5;  // kMeasure: timed runs per way, medians compared
  // Opt-in: weights and 4-d activations in bfloat16 between lowered
  // convolutions (oneDNN accumulates in float32; AVX-512 BF16), converted
  // back to float32 where a chain ends; linear layers' weights in bfloat16,
  // their float32 inputs converted for the call and outputs float32
  // (transformers: attention's matmuls, layer norms and softmax stay
  // float32). Faster on compute-bound models, and
  // not held to float32's accuracy (see tools/benchmark_inference).
  bool bf16 = false;
};

// What optimize_for_inference did.
struct InferenceReport {
  int attention = 0;          // fused transformer ops split into their parts
  int convolutions = 0;       // lowered to fx_onednn::conv
  int linear = 0;             // lowered to fx_onednn::linear
  int matmul = 0;             // lowered to fx_onednn::matmul
  int recurrent = 0;          // lowered to fx_onednn::lstm / gru
  int fused_activations = 0;  // activations absorbed as post-ops
  int fused_sums = 0;         // residual adds absorbed as sum post-ops
  int in_place_sums = 0;      // ... of them, added into the residual's memory
  int layout_conversions = 0; // aten::contiguous nodes added
  int pooling = 0;            // lowered to fx_onednn::max_pool2d / avg_pool2d
  int batch_norms = 0;        // lowered to fx_onednn::batch_norm
  int squeeze_excites = 0;    // lowered to fx_onednn::squeeze_excite
  int concatenations = 0;     // aten::cat made views of a concat buffer
  int concat_buffers = 0;     // ... of this many buffers
  int declined = 0;           // convolutions left to aten: lowering did not pay
  int micro_batched = 0;      // nodes run per micro-batch
  int64_t micro_batches = 0;  // ... in this many micro-batches
  int conv_chains = 0;        // fx_onednn::conv_chain calls made
  int chained = 0;            // ... of this many convolutions
  std::string to_string() const;
};

// Lowers `module` in place, as every pass edits the module it is given;
// returns what it did (all zero when nothing could be lowered). torch.fx's
// optimize_for_inference returns a lowered copy: lower a copy to keep the
// original as it was (the copy shares its tensors, which lowering never
// writes to):
//
//   fx::GraphModule fast(gm->copy());
//   fx::optimize_for_inference(*fast);
InferenceReport optimize_for_inference(GraphModuleImpl& module,
                                       const InferenceOptions& options = {});

class OptimizeForInference : public Pass {
 public:
  std::string name() const override { return "optimize_for_inference"; }
  bool run(GraphModuleImpl& module) override;
};

}  // namespace fx
