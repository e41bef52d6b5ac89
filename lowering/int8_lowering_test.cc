// lower_onednn_int8 on convert_fx's int8 graphs of the zoo's ResNet-18 and
// MobileNetV2: every convolution on fx_onednn::qconv, the residual adds
// fused, the outputs within a step of LibTorch's quantized engine; and on
// MobileNetV3's and EfficientNet's squeeze-and-excitation blocks: their
// activations fused or looked up, their means and products in int8.
#include <torch/torch.h>

#include <sstream>
#include <string>
#include <vector>

#include "fx/fx.h"
#include "fx/io/serialization.h"
#include "lowering/onednn_ops.h"
#include "lowering/optimize_for_inference.h"
#include "models/zoo.h"
#include "quantization/numeric_suite.h"
#include "quantization/quantize_fx.h"
#include "testdata/excited_blocks.h"
#include "testdata/test_helpers.h"
#include "third_party/catch.h"

namespace {

using testdata::count_calls;

struct Int8Model {
  fx::GraphModule float_model = nullptr, int8 = nullptr;
  at::Tensor input;
};

Int8Model quantize(const std::string& name) {
  fx::set_quantized_engine("onednn");
  models::ZooModel model = models::make_zoo_model(name);
  Int8Model m;
  m.float_model = models::trace_zoo_model(model);
  fx::GraphModule prepared = fx::prepare_fx(
      m.float_model, fx::get_default_qconfig_mapping("onednn"));
  torch::NoGradGuard no_grad;
  const at::Tensor x = model.example_inputs[0].toTensor();
  for (int i = 0; i < 4; ++i) {
    torch::manual_seed(100 + i);
    prepared(torch::randn_like(x));
  }
  m.int8 = fx::convert_fx(prepared);
  torch::manual_seed(7);
  m.input = torch::randn_like(x);
  return m;
}

at::Tensor run(fx::GraphModule& gm, const at::Tensor& x) {
  torch::NoGradGuard no_grad;
  return gm(x).toTensor();
}

}  // namespace

TEST_CASE("int8 convolutions run on fx_onednn::qconv, residual adds fused") {
  if (!fx::onednn::int8_supported()) {
    // Without VNNI the pass leaves the graph to LibTorch's engine.
    Int8Model m = quantize("resnet18");
    fx::GraphModule lowered(m.int8->copy());
    const fx::InferenceReport report = fx::optimize_for_inference(*lowered);
    CHECK(report.int8_convolutions == 0);
    CHECK(count_calls(lowered, "fx_onednn::qconv") == 0);
    return;
  }
  struct Want {
    const char* model;
    size_t convolutions;
    int adds, pools;
  };
  for (const Want& want : {Want{"resnet18", 20, 8, 1}, Want{"mobilenet_v2", 52, 10, 0}}) {
    CAPTURE(want.model);
    Int8Model m = quantize(want.model);
    const size_t convs = count_calls(m.int8, "quantized::conv2d.new") +
                      count_calls(m.int8, "quantized::conv2d_relu.new");
    CHECK(convs == want.convolutions);
    fx::GraphModule lowered(m.int8->copy());
    const fx::InferenceReport report = fx::optimize_for_inference(*lowered);
    CHECK(static_cast<size_t>(report.int8_convolutions) == want.convolutions);
    CHECK(report.fused_sums == want.adds);
    // Every residual but those read again (by a downsampling convolution
    // after the add: none here) written over in place.
    CHECK(report.in_place_sums > 0);
    CHECK(count_calls(lowered, "fx_onednn::qconv_add_") ==
          static_cast<size_t>(report.in_place_sums));
    CHECK(report.pooling == want.pools);
    CHECK(count_calls(lowered, "aten::max_pool2d") == 0);
    CHECK(count_calls(lowered, "fx_onednn::qconv") +
              count_calls(lowered, "fx_onednn::qconv_add_") ==
          want.convolutions);
    CHECK(count_calls(lowered, "quantized::conv2d.new") == 0);
    CHECK(count_calls(lowered, "quantized::conv2d_relu.new") == 0);
    CHECK(count_calls(lowered, "quantized::add") +
              count_calls(lowered, "quantized::add_relu") ==
          0);
    // The packing folded into an init step.
    CHECK(count_calls(lowered, "fx_onednn::pack_qconv_weight") == 0);

    const at::Tensor want_float = run(m.float_model, m.input);
    const at::Tensor engine = run(m.int8, m.input);
    const at::Tensor got = run(lowered, m.input);
    REQUIRE(got.sizes() == engine.sizes());
    // One rounding where the engine rounds twice (conv, then add): as
    // close to float as the engine, or closer, and close to it.
    const double sqnr_engine = fx::sqnr_db(want_float, engine);
    const double sqnr_lowered = fx::sqnr_db(want_float, got);
    CAPTURE(sqnr_engine, sqnr_lowered);
    CHECK(sqnr_lowered > sqnr_engine - 0.5);
    CHECK(fx::sqnr_db(engine, got) > 25.0);
    // Deterministic: the same graph and output again.
    fx::GraphModule again(m.int8->copy());
    fx::optimize_for_inference(*again);
    CHECK(again->graph().to_string() == lowered->graph().to_string());
    CHECK(at::equal(run(again, m.input), got));
  }
}

TEST_CASE("a lowered int8 graph saves, loads and packs again") {
  if (!fx::onednn::int8_supported()) return;  // nothing lowered to check
  Int8Model m = quantize("resnet18");
  fx::GraphModule lowered(m.int8->copy());
  fx::optimize_for_inference(*lowered);
  std::stringstream file;
  fx::save(lowered, file);
  fx::GraphModule loaded = fx::load(file);
  CHECK(count_calls(loaded, "fx_onednn::qconv") +
            count_calls(loaded, "fx_onednn::qconv_add_") ==
        20);
  CHECK(at::equal(run(loaded, m.input), run(lowered, m.input)));
}

TEST_CASE("lower_int8 = false leaves int8 convolutions to LibTorch's engine") {
  Int8Model m = quantize("resnet18");
  fx::GraphModule kept(m.int8->copy());
  fx::InferenceOptions options;
  options.lower_int8 = false;
  const fx::InferenceReport report = fx::optimize_for_inference(*kept, options);
  CHECK(report.int8_convolutions == 0);
  CHECK(count_calls(kept, "fx_onednn::qconv") == 0);
  CHECK(at::equal(run(kept, m.input), run(m.int8, m.input)));
}

TEST_CASE("squeeze-excitation blocks in int8: activations fused or looked up, "
          "means and products in int8") {
  if (!fx::onednn::int8_supported()) return;  // nothing lowered to check
  fx::set_quantized_engine("onednn");
  torch::NoGradGuard no_grad;
  torch::manual_seed(5);
  auto model = std::make_shared<testdata::ExcitedBlocks>();
  model->eval();
  for (int64_t batch : {1, 3}) {
    CAPTURE(batch);
    // 17x19: channel counts (24, 40) and pixel rows that are not multiples
    // of the kernels' 16 and 64.
    const at::Tensor x = torch::randn({batch, 3, 17, 19});
    fx::GraphModule float_model = fx::symbolic_trace(model, x);
    fx::GraphModule prepared = fx::prepare_fx(
        float_model, fx::get_default_qconfig_mapping("onednn"));
    for (int i = 0; i < 4; ++i) {
      torch::manual_seed(100 + i);
      prepared(torch::randn_like(x));
    }
    fx::GraphModule int8 = fx::convert_fx(prepared);
    // What convert_fx leaves: hardswish and hardsigmoid quantized, silu
    // float32 between a dequantize and a quantize, the gates' products as
    // quantized::mul.
    REQUIRE(count_calls(int8, "quantized::hardswish") == 1);
    REQUIRE(count_calls(int8, "aten::silu") + count_calls(int8, "aten::silu_") == 2);
    REQUIRE(count_calls(int8, "quantized::mul") == 2);
    fx::GraphModule lowered(int8->copy());
    const fx::InferenceReport report = fx::optimize_for_inference(*lowered);
    const std::string printed = lowered->graph().to_string();
    INFO(printed);
    CHECK(report.int8_convolutions == 7);
    // The stem's hardswish, se1's relu and hardsigmoid, se2's sigmoid as
    // post-ops (se2's fc1 silu and mid's silu: looked up).
    CHECK(report.fused_activations == 4);
    CHECK(count_calls(lowered, "quantized::hardswish") == 0);
    CHECK(count_calls(lowered, "aten::hardsigmoid") == 0);
    CHECK(count_calls(lowered, "aten::sigmoid") == 0);
    CHECK(count_calls(lowered, "aten::silu") + count_calls(lowered, "aten::silu_") == 0);
    CHECK(count_calls(lowered, "fx_onednn::qactivation") == 2);
    CHECK(count_calls(lowered, "fx_onednn::qmul_channels") == 2);
    CHECK(count_calls(lowered, "quantized::mul") == 0);
    // se2's mean reads mid's silu (float32 before): now in int8.
    CHECK(count_calls(lowered, "fx_onednn::qmean_channels") == 1);
    CHECK(report.int8_elementwise == 5);

    const at::Tensor want = model->forward(x);
    const at::Tensor engine = run(int8, x);
    const at::Tensor got = run(lowered, x);
    REQUIRE(got.sizes() == engine.sizes());
    const double sqnr_engine = fx::sqnr_db(want, engine);
    const double sqnr_lowered = fx::sqnr_db(want, got);
    CAPTURE(sqnr_engine, sqnr_lowered);
    CHECK(sqnr_engine > 20.0);
    CHECK(sqnr_lowered > sqnr_engine - 0.5);
    CHECK(fx::sqnr_db(engine, got) > 25.0);
    // Deterministic: the same graph and output again.
    fx::GraphModule again(int8->copy());
    fx::optimize_for_inference(*again);
    CHECK(again->graph().to_string() == printed);
    CHECK(at::equal(run(again, x), got));
  }
}
