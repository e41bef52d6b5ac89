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

#include "lowering/inference_options.h"
#include "passes/pass.h"
#include "passes/pass_pipeline.h"

namespace fx {

// The lowering as a pipeline of registered passes (passes/pass_pipeline.h), the
// options deciding which passes it holds and the options of those passes
// (only those that differ from the defaults). With the default options,
// the pipeline named "optimize_for_inference" (`fx passes` prints it):
//
//   decompose_attention,remove_dropout,fuse_linear_bias,fuse_conv_bn,
//   fold_constants,eliminate_dead_code,lower_onednn_linear,lower_onednn_matmul,
//   lower_onednn_recurrent,lower_onednn_convolutions,lower_onednn_pooling,
//   lower_onednn_batch_norm,lower_onednn_squeeze_excite,
//   onednn_channels_last,onednn_concat_buffers,onednn_fold_weights,
//   micro_batch,chain_convolutions
//
// (the oneDNN lowering's passes: lowering/lower_onednn.h). fold = false
// leaves out the five after decompose_attention, split_attention = false
// the first, lower_pooling = false lower_onednn_pooling (and so on for each
// switch of the lowering), micro_batch and chain_convolutions = false
// their passes; bf16 = true is lower_onednn_convolutions{bf16=true} and
// lower_onednn_linear{bf16=true}.
PassPipeline inference_pipeline(const InferenceOptions& options = {});

// Lowers `module` in place, as every pass edits the module it is given, by
// running inference_pipeline(options) through fx::PassManager (the graph
// linted after each pass); returns what it did, from the passes'
// statistics (all zero when nothing could be lowered). torch.fx's
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
  Bodies bodies() const override { return Bodies::kItself; }
  bool run(GraphModuleImpl& module) override;
};

}  // namespace fx
