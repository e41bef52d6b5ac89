// The pass "lower_onednn" of the inference pipeline
// (lowering/optimize_for_inference.h, whose comment says what it does):
// convolutions, transposed convolutions, linear layers, attention's
// matmuls and LSTM/GRU layers to fx_onednn operators, their residual adds
// and activations fused; activations kept channels-last between lowered
// convolutions; pooling, batch norms, squeeze-excitation blocks and
// channel concatenations of those activations on oneDNN; the weights'
// packing folded into an init step. Graphs traced in training mode stay as
// they are.
//
// Its options are InferenceOptions' fields of the same names
// (lower_convolutions, ..., decision=cost_model|measure|all,
// measure_rounds, bf16); its statistics the InferenceReport counts
// FX_INFERENCE_COUNTS gives it.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "lowering/inference_options.h"
#include "passes/pass.h"

namespace fx {

class LowerOnednn : public Pass {
 public:
  explicit LowerOnednn(const InferenceOptions& options = {})
      : options_(options) {}
  std::string name() const override { return "lower_onednn"; }
  bool run(GraphModuleImpl& module) override;
  std::vector<std::pair<std::string, int64_t>> statistics() const override;

  // The options lower_onednn takes, each with what it does.
  static std::vector<std::pair<std::string, std::string>> option_docs();
  // `options` (lower_onednn's) set on a copy of `base`; throws
  // fx::GraphError naming a malformed value.
  static InferenceOptions parse_options(const PassOptions& options,
                                        InferenceOptions base = {});
  // The fields of `options` lower_onednn reads that differ from the
  // defaults, as options: parse_options' inverse.
  static PassOptions to_pass_options(const InferenceOptions& options);

 private:
  InferenceOptions options_;
  InferenceReport report_;
};

// Throws fx::Error when InferenceOptions::bf16 is asked of a CPU without
// oneDNN's bfloat16 kernels.
void check_bf16_supported(const InferenceOptions& options);

}  // namespace fx
