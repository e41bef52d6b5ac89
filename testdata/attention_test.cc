// aten::scaled_dot_product_attention, LibTorch 2.x's attention operator:
// what 2.13's nn.MultiheadAttention and nn.TransformerEncoderLayer call when
// traced with autograd on. TorchScript files written by the Python of the
// same torch (testdata/attention_models.py) are imported and run bitwise
// as TorchScript runs them, lowered within 1e-5 (the operator decomposed,
// its matmuls on oneDNN), quantized (dynamic int8), exported to ONNX and
// run under ONNX Runtime within 1e-5, and priced by the cost model.
// LibTorch 1.13 has no such operator: there the test pins that difference.
#include <string>
#include <vector>

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/script.h>
#include <torch/torch.h>

#include "fx/fx.h"
#include "fx/ir/libtorch_compat.h"
#include "fx/torchscript/torchscript.h"
#include "lowering/optimize_for_inference.h"
#include "onnx/to_onnx.h"
#include "passes/cost_model.h"
#include "quantization/quantize_fx.h"
#include "testdata/onnx_runtime.h"
#include "testdata/round_trip.h"
#include "testdata/test_files.h"
#include "third_party/catch.h"

namespace {

constexpr char kSdpa[] = "aten::scaled_dot_product_attention";

bool sdpa_registered() {
  return c10::Dispatcher::singleton()
      .findSchema({kSdpa, ""})
      .has_value();
}

struct Model {
  std::string name;
  std::vector<c10::IValue> inputs;
  int attention_calls;
};

std::vector<Model> models() {
  torch::manual_seed(0);
  // 1 where a query sees a key (the model makes it boolean).
  at::Tensor keep = (torch::rand({2, 1, 10, 10}) > 0.3).to(at::kFloat);
  keep.select(3, 0).fill_(1);
  return {
      {"sdpa_encoder_traced", {torch::randn({2, 10, 64})}, 2},
      {"sdpa_causal_encoder_traced", {torch::randn({2, 10, 64})}, 2},
      {"sdpa_functional_traced", {torch::randn({2, 10, 32}), keep}, 3},
  };
}

torch::jit::Module load(const std::string& name) {
  static const std::string dir = testdata::attention_models("attention_models");
  torch::jit::Module script = torch::jit::load(dir + "/" + name + ".pt");
  script.eval();
  return script;
}

int count_calls(const fx::GraphModule& gm, const std::string& op) {
  int n = 0;
  for (const fx::Node* node : gm->graph().nodes()) {
    if (node->is_call_to({op})) ++n;
  }
  return n;
}

double max_difference(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

}  // namespace

TEST_CASE("scaled_dot_product_attention is LibTorch 2.x's: absent in 1.13") {
  CHECK(sdpa_registered() == static_cast<bool>(FX_LIBTORCH_2));
}

TEST_CASE("models that Python torch 2.x traced with scaled_dot_product_attention "
          "import, run, lower, quantize, export to ONNX and are priced") {
  if (!sdpa_registered()) {
    // LibTorch 1.13 (the case above checks that it is 1.13): Python 1.13's
    // nn.MultiheadAttention computes attention by bmm and softmax, which
    // lowering/sequence_models_test.cc covers.
    CHECK_FALSE(FX_LIBTORCH_2);
    return;
  }
  torch::NoGradGuard no_grad;
  for (const Model& model : models()) {
    INFO(model.name);
    torch::jit::Module script = load(model.name);
    const at::Tensor want = script.forward(model.inputs).toTensor();

    fx::GraphModule gm = fx::symbolic_trace(script, model.inputs);
    CHECK(count_calls(gm, kSdpa) == model.attention_calls);
    // Imported: TorchScript's operators, run as TorchScript runs them.
    CHECK(torch::equal(gm->forward(model.inputs).toTensor(), want));
    testdata::check_round_trips(gm, model.inputs);

    // Priced: each attention's two matrix products.
    const fx::CostReport cost = fx::estimate_cost(gm->graph());
    for (const std::string& op : cost.unmodelled_ops) CHECK(op != kSdpa);

    // Exported to ONNX (the operator by its parts), run by ONNX Runtime.
    const std::string file =
        (onnx_testing::scratch() / (model.name + ".onnx")).string();
    fx::to_onnx(*gm, file);
    onnx_testing::check_against_ort(gm, file, model.inputs, 1e-5);

    // Quantized dynamically: the linear layers int8, the attention split
    // into its parts (as the lowering splits it), float.
    fx::GraphModule quantized = fx::quantize_dynamic_fx(gm);
    CHECK(count_calls(quantized, kSdpa) == 0);
    CHECK(count_calls(quantized, "aten::linear") == 0);
    CHECK(count_calls(quantized, "quantized::linear_dynamic") +
              count_calls(quantized, "quantized::linear_relu_dynamic") >=
          1);
    const at::Tensor int8 = quantized->forward(model.inputs).toTensor();
    CHECK(max_difference(int8, want) < 0.1 * want.abs().max().item<double>());

    // Lowered: decomposed, its batched matmuls on oneDNN.
    const fx::InferenceReport report = fx::optimize_for_inference(*gm);
    CHECK(count_calls(gm, kSdpa) == 0);
    CHECK(report.matmul >= 2 * model.attention_calls);
    CHECK(max_difference(gm->forward(model.inputs).toTensor(), want) < 1e-5);
  }
}

TEST_CASE("scaled_dot_product_attention decomposed refuses what it cannot "
          "repeat") {
  if (!sdpa_registered()) {
    CHECK_FALSE(FX_LIBTORCH_2);
    return;
  }
  // Dropout inside the attention draws new numbers at every call.
  torch::jit::Module script = load("sdpa_functional_traced");
  const std::vector<c10::IValue> inputs = models().back().inputs;
  fx::GraphModule gm = fx::symbolic_trace(script, inputs);
  for (fx::Node* node : gm->graph().nodes()) {
    if (node->is_call_to({kSdpa})) {
      std::vector<fx::Argument> args = node->args();
      if (args.size() < 5) args.resize(5);
      args[4] = fx::Argument(0.5);
      node->set_args(args);
    }
  }
  gm->recompile();
  CHECK_THROWS_WITH(fx::optimize_for_inference(*gm),
                    Catch::Contains("dropout_p = 0.5") &&
                        Catch::Contains("eval mode"));
}
