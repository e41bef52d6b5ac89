// The oneDNN lowering of the inference pipeline
// (lowering/optimize_for_inference.h, whose comment says what it does), as
// passes, one per rewrite (lowering/passes/), run in this order:
//
//   lower_onednn_linear         linear layers, activations fused (bf16)
//   lower_onednn_matmul         products of two activations, scale fused
//   lower_onednn_recurrent      LSTM and GRU layers
//   lower_onednn_convolutions   convolutions and transposed ones, residual
//                               adds and activations fused, where lowering
//                               pays (options decision, measure_rounds,
//                               in_place, bf16); after the three above,
//                               whose calls read their inputs where their
//                               last absorbed node was: an add in place
//                               must not come before those reads
//   lower_onednn_pooling        pooling between lowered convolutions
//   lower_onednn_batch_norm     batch norms no convolution absorbed
//   lower_onednn_squeeze_excite squeeze-and-excitation blocks as one call
//   onednn_channels_last        layout conversions where chains of
//                               channels-last activations start and end
//   onednn_concat_buffers       channel concatenation chains in one buffer
//   onednn_fold_weights         the weights' packing folded into an init
//                               step (fold_constants, eliminate_dead_code)
//                               when the passes packed any
//
// InferenceOptions' switches of the same names (lower_convolutions,
// lower_linear, ..., concat_buffers) say which of them the lowering holds.
// The pass "lower_onednn" runs them all as one, taking every option (the
// switches included). Graphs traced in training mode stay as they are.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "lowering/inference_options.h"
#include "passes/pass.h"
#include "passes/pass_pipeline.h"

namespace fx {

// The lowering's steps for `options`, as above.
std::vector<PassStep> onednn_lowering_steps(const InferenceOptions& options = {});

// Registers the lowering's passes and lower_onednn (by //lowering's
// registration, in the order above).
void register_onednn_lowering_passes();

class LowerOnednn : public Pass {
 public:
  explicit LowerOnednn(const InferenceOptions& options = {})
      : options_(options) {}
  std::string name() const override { return "lower_onednn"; }
  Bodies bodies() const override { return Bodies::kItself; }
  bool run(GraphModuleImpl& module) override;
  // The InferenceReport counts of its passes, summed.
  std::vector<std::pair<std::string, int64_t>> statistics() const override;

  // `options` (lower_onednn's) set on a copy of `base`; throws
  // fx::GraphError naming a malformed value.
  static InferenceOptions parse_options(const PassOptions& options,
                                        InferenceOptions base = {});
  // The fields of `options` lower_onednn reads that differ from the
  // defaults, as options: parse_options' inverse.
  static PassOptions to_pass_options(const InferenceOptions& options);

 private:
  InferenceOptions options_;
  std::vector<std::pair<std::string, int64_t>> statistics_;
};

// Throws fx::Error when InferenceOptions::bf16 is asked of a CPU without
// oneDNN's bfloat16 kernels.
void check_bf16_supported(const InferenceOptions& options);

}  // namespace fx
