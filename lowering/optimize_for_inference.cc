#include "lowering/optimize_for_inference.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "fx/ir/errors.h"
#include "fx/runtime/graph_module.h"
#include "lowering/conv_chain.h"
#include "lowering/lower_onednn.h"
#include "lowering/micro_batch.h"
#include "passes/cost_model.h"
#include "passes/pass_manager.h"
#include "passes/registry.h"

namespace fx {

std::string InferenceReport::to_string() const {
  return absl::StrCat(attention, " fused attention ops split, ", convolutions,
                      " convolutions and ", linear,
                      " linear layers, ", matmul, " matmuls and ", recurrent,
                      " LSTMs and GRUs lowered to oneDNN, ",
                      int8_convolutions, " int8 convolutions on oneDNN, ", fused_activations,
                      " activations and ", fused_sums,
                      " residual adds fused (", in_place_sums,
                      " in place), ", layout_conversions,
                      " layout conversions, ", pooling,
                      " pooling operators, ", batch_norms,
                      " batch norms and ", squeeze_excites,
                      " squeeze-excitation blocks on oneDNN, ",
                      concatenations, " concatenations written into ",
                      concat_buffers, " buffers, ", declined,
                      " convolutions left to aten (lowering did not pay), ",
                      micro_batched, " nodes run in ", micro_batches,
                      " micro-batches, ", chained, " convolutions run in ",
                      conv_chains, " chains");
}

PassPipeline inference_pipeline(const InferenceOptions& options) {
  PassPipeline pipeline{"optimize_for_inference",
                    "fx::optimize_for_inference with these options",
                    {}};
  auto add = [&](const char* pass, PassOptions pass_options = {}) {
    pipeline.steps.push_back({pass, std::move(pass_options)});
  };
  if (options.split_attention) add("decompose_attention");
  if (options.fold) {
    add("remove_dropout");
    add("fuse_linear_bias");
    add("fuse_conv_bn");
    add("fold_constants");
    add("eliminate_dead_code");
  }
  for (PassStep& step : onednn_lowering_steps(options)) {
    pipeline.steps.push_back(std::move(step));
  }
  if (options.micro_batch) add("micro_batch");
  if (options.chain_convolutions) add("chain_convolutions");
  return pipeline;
}

InferenceReport optimize_for_inference(GraphModuleImpl& module,
                                       const InferenceOptions& options) {
  InferenceReport report;
  if (module.traced_training().value_or(false)) {
    return report;
  }
  check_bf16_supported(options);
  PassManager passes;
  passes.add(inference_pipeline(options).steps);
  passes.run_in_place(module);
  for (const PassManager::Statistic& statistic : passes.statistics()) {
#define FX_COUNT(field, owner) \
  if (statistic.name == #field) {                          \
    report.field += static_cast<decltype(report.field)>(statistic.value); \
  }
    FX_INFERENCE_COUNTS(FX_COUNT)
#undef FX_COUNT
  }
  return report;
}

bool OptimizeForInference::run(GraphModuleImpl& module) {
  const InferenceReport report = optimize_for_inference(module);
  return report.convolutions + report.linear > 0;
}

namespace {
[[maybe_unused]] const bool registered = [] {
  // A lowered call does the multiply-adds of the call it replaced: the
  // cost model (and the schedulers balancing lowered graphs by it) count
  // them, each priced as lowering/operators.def declares.
#define FX_INIT_STEP
#define FX_PRICED_AS(aten) price_as(operator_name, aten)
#define FX_PRICED_BY(function) price_by_macs(operator_name, function)
#define FX_ONEDNN_OPERATOR(name, schema, cost, traits) \
  {                                            \
    [[maybe_unused]] const char* operator_name = "fx_onednn::" #name; \
    cost;                                      \
  }
#include "lowering/operators.def"
#undef FX_ONEDNN_OPERATOR
#undef FX_PRICED_BY
#undef FX_PRICED_AS
#undef FX_INIT_STEP
  register_onednn_lowering_passes();
  register_pass({"micro_batch",
                 "run a lowered graph's leading layers one micro-batch at a "
                 "time where their activations outgrow the caches (needs "
                 "//lowering)",
                 [](const PassOptions&) {
                   return std::unique_ptr<Pass>(new MicroBatch());
                 }});
  register_pass({"chain_convolutions",
                 "run chains of lowered convolutions at batch 1 as one call "
                 "(needs //lowering)",
                 [](const PassOptions&) {
                   return std::unique_ptr<Pass>(new ChainConvolutions());
                 }});
  register_pass({"optimize_for_inference",
                 "fold batch norms, then lower convolutions and linear layers "
                 "to oneDNN with fused activations: the pipeline of the same "
                 "name as one pass (needs //lowering)",
                 [](const PassOptions&) {
                   return std::unique_ptr<Pass>(new OptimizeForInference());
                 }});
  register_pass_pipeline({"optimize_for_inference",
                     "fx::optimize_for_inference with the default options",
                     inference_pipeline().steps});
  return true;
}();
}  // namespace

}  // namespace fx
