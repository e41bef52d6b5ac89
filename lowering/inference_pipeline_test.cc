// The inference lowering as a pipeline of registered passes: its text, the
// options that decide which passes it holds, and the same lowering run
// step by step through fx::PassManager as fx::optimize_for_inference runs
// it.
#include <torch/torch.h>

#include <string>

#include "fx/fx.h"
#include "lowering/lower_onednn.h"
#include "lowering/optimize_for_inference.h"
#include "models/zoo.h"
#include "passes/pass_manager.h"
#include "passes/pass_pipeline.h"
#include "passes/registry.h"
#include "third_party/catch.h"

namespace {

// The lowering's passes (lowering/lower_onednn.h), each switch's.
constexpr char kLowering[] =
    "lower_onednn_linear,lower_onednn_matmul,lower_onednn_recurrent,"
    "lower_onednn_int8,lower_onednn_convolutions,lower_onednn_pooling,lower_onednn_batch_norm,"
    "lower_onednn_squeeze_excite,onednn_channels_last,onednn_concat_buffers,"
    "onednn_fold_weights";

const std::string kDefault = std::string(
    "decompose_attention,remove_dropout,fuse_linear_bias,fuse_conv_bn,fold_constants,"
    "eliminate_dead_code,") + kLowering + ",micro_batch,chain_convolutions";

TEST_CASE("the default lowering is the registered pipeline, as text") {
  CHECK(fx::to_string(fx::inference_pipeline().steps) == kDefault);
  const std::optional<fx::PassPipeline> registered =
      fx::pass_pipeline_named("optimize_for_inference");
  REQUIRE(registered.has_value());
  CHECK(registered->steps == fx::inference_pipeline().steps);
  CHECK(fx::parse_pass_pipeline(kDefault) == registered->steps);
}

TEST_CASE("the options decide which passes the pipeline holds") {
  fx::InferenceOptions options;
  options.fold = false;
  options.split_attention = false;
  options.micro_batch = false;
  CHECK(fx::to_string(fx::inference_pipeline(options).steps) ==
        std::string(kLowering) + ",chain_convolutions");
  CHECK(fx::to_string(fx::onednn_lowering_steps()) == kLowering);
  options = {};
  options.chain_convolutions = false;
  options.lower_pooling = false;
  options.in_place = false;
  options.decision = fx::InferenceOptions::Decision::kAll;
  options.measure_rounds = 7;
  const std::string text = fx::to_string(fx::inference_pipeline(options).steps);
  // No pooling pass; the convolutions' pass takes the options it reads.
  CHECK(text ==
        "decompose_attention,remove_dropout,fuse_linear_bias,fuse_conv_bn,fold_constants,"
        "eliminate_dead_code,lower_onednn_linear,lower_onednn_matmul,"
        "lower_onednn_recurrent,lower_onednn_int8{in_place=false},"
        "lower_onednn_convolutions{in_place=false,"
        "decision=all,measure_rounds=7},lower_onednn_batch_norm,"
        "lower_onednn_squeeze_excite,onednn_channels_last,"
        "onednn_concat_buffers,onednn_fold_weights,micro_batch");
  // And back: the options the convolutions' pass reads from its text.
  const fx::InferenceOptions parsed =
      fx::LowerOnednn::parse_options(fx::parse_pass_pipeline(text)[10].options);
  CHECK_FALSE(parsed.in_place);
  CHECK(parsed.decision == fx::InferenceOptions::Decision::kAll);
  CHECK(parsed.measure_rounds == 7);
}

TEST_CASE("lower_onednn's options are checked by name and value") {
  using Catch::Matchers::Contains;
  CHECK_THROWS_WITH(fx::make_pass("lower_onednn", {{"lower_pools", "false"}}),
                    Contains("takes no option 'lower_pools'") &&
                        Contains("lower_pooling"));
  CHECK_THROWS_WITH(fx::make_pass("lower_onednn", {{"bf16", "yes"}}),
                    Contains("option bf16 takes true or false, not 'yes'"));
  CHECK_THROWS_WITH(fx::make_pass("lower_onednn", {{"decision", "fast"}}),
                    Contains("cost_model, measure or all, not 'fast'"));
  CHECK_THROWS_WITH(
      fx::make_pass("lower_onednn", {{"measure_rounds", "0"}}),
      Contains("measure_rounds takes 1 to 1000, not 0"));
  CHECK_THROWS_WITH(fx::make_pass("micro_batch", {{"bytes", "1"}}),
                    Contains("takes no option 'bytes'; it takes none"));
  CHECK(fx::make_pass("lower_onednn", {{"decision", "measure"},
                                       {"measure_rounds", "3"}}) != nullptr);
  // Each of the lowering's passes takes the options it reads, no other.
  CHECK_THROWS_WITH(
      fx::make_pass("lower_onednn_linear", {{"in_place", "false"}}),
      Contains("takes no option 'in_place'") && Contains("bf16"));
  CHECK_THROWS_WITH(
      fx::make_pass("lower_onednn_pooling", {{"bf16", "true"}}),
      Contains("takes no option 'bf16'; it takes none"));
  CHECK_THROWS_WITH(
      fx::make_pass("lower_onednn_convolutions", {{"decision", "fast"}}),
      Contains("pass lower_onednn_convolutions: option decision takes "
               "cost_model, measure or all, not 'fast'"));
  CHECK(fx::make_pass("lower_onednn_convolutions",
                      {{"in_place", "false"}, {"decision", "all"}}) !=
        nullptr);
}

TEST_CASE("lower_onednn is its passes run as one") {
  torch::NoGradGuard no_grad;
  models::ZooModel model = models::make_zoo_model("resnet18");
  const fx::GraphModule traced = fx::symbolic_trace(
      model.module, model.forward, {torch::randn({1, 3, 32, 32})});
  fx::PassManager one, each;
  fx::InferenceOptions all;
  all.decision = fx::InferenceOptions::Decision::kAll;
  one.add(fx::parse_pass_pipeline(
      "fuse_conv_bn,fold_constants,lower_onednn{decision=all}"));
  each.add(fx::parse_pass_pipeline("fuse_conv_bn,fold_constants"));
  each.add(fx::onednn_lowering_steps(all));
  const fx::PassResult a = one.run(traced), b = each.run(traced);
  CHECK(a.module->graph().to_string() == b.module->graph().to_string());
  // Its statistics are its passes' counts, summed.
  int64_t convolutions = 0, summed = 0;
  for (const auto& statistic : one.statistics()) {
    if (statistic.pass == "lower_onednn" && statistic.name == "convolutions") {
      convolutions = statistic.value;
    }
  }
  for (const auto& statistic : each.statistics()) {
    if (statistic.name == "convolutions") summed += statistic.value;
  }
  CHECK(convolutions == 20);
  CHECK(summed == convolutions);
}

// The graph, the report and the outputs of optimize_for_inference, against
// the pipeline's text run through PassManager one pass at a time; returns
// the report.
fx::InferenceReport check_step_by_step(const std::string& name, const at::Tensor& input,
                        const fx::InferenceOptions& options) {
  CAPTURE(name);
  torch::NoGradGuard no_grad;
  models::ZooModel model = models::make_zoo_model(name);
  const fx::GraphModule traced =
      fx::symbolic_trace(model.module, model.forward, {input});
  fx::GraphModule whole(traced->copy());
  const fx::InferenceReport report = fx::optimize_for_inference(*whole, options);
  const std::string text = fx::to_string(fx::inference_pipeline(options).steps);
  CAPTURE(text);
  fx::PassManager passes;
  passes.add(fx::parse_pass_pipeline(text));
  const fx::PassResult stepped = passes.run(traced);
  CHECK(stepped.modified);
  CHECK(stepped.module->graph().to_string() == whole->graph().to_string());
  // The report is the passes' statistics.
  fx::InferenceReport counted;
  for (const auto& statistic : passes.statistics()) {
#define FX_COUNT(field, owner)                                   \
  if (statistic.name == #field) {                              \
    /* Counted by its owner; others may add to it. */           \
    CHECK((statistic.pass == owner || statistic.value != 0));   \
    counted.field += static_cast<decltype(counted.field)>(statistic.value); \
  }
    FX_INFERENCE_COUNTS(FX_COUNT)
#undef FX_COUNT
  }
  CHECK(counted.to_string() == report.to_string());
  CHECK(report.convolutions > 0);
  fx::GraphModule stepped_module = stepped.module;
  CHECK(torch::equal(stepped_module(input).toTensor(),
                     whole(input).toTensor()));
  return report;
}

TEST_CASE("run pass by pass, the pipeline lowers as optimize_for_inference") {
  // Batch 1: convolution chains; batch 4: micro-batches; then options.
  CHECK(check_step_by_step("mobilenet_v2", torch::randn({1, 3, 224, 224}), {})
            .conv_chains > 0);
  CHECK(check_step_by_step("mobilenet_v2", torch::randn({4, 3, 224, 224}), {})
            .micro_batches > 0);
  fx::InferenceOptions options;
  options.lower_pooling = false;
  options.in_place = false;
  options.decision = fx::InferenceOptions::Decision::kAll;
  check_step_by_step("resnet18", torch::randn({1, 3, 64, 64}), options);
}

}  // namespace
