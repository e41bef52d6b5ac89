#include "quantization/quantize_fx.h"

#include <torch/torch.h>

#include <sstream>

#include "fx/fx.h"
#include "fx/io/parser.h"
#include "fx/io/serialization.h"
#include "models/zoo.h"
#include "quantization/numeric_suite.h"
#include "testdata/test_helpers.h"
#include "third_party/catch.h"

namespace {

using testdata::count_calls;

at::Tensor first_tensor(const c10::IValue& v) {
  return v.isTensor() ? v.toTensor() : v.toTupleRef().elements()[0].toTensor();
}

// Random calibration batches shaped like the model's first input.
std::vector<at::Tensor> batches(const models::ZooModel& model, int n) {
  std::vector<at::Tensor> out;
  const at::Tensor x = model.example_inputs[0].toTensor();
  for (int i = 0; i < n; ++i) {
    torch::manual_seed(100 + i);
    out.push_back(torch::randn_like(x));
  }
  return out;
}

struct Quantized {
  fx::GraphModule prepared;
  fx::GraphModule converted;
};

Quantized quantize(const models::ZooModel& model, const std::string& engine,
                   int calibration = 4) {
  fx::set_quantized_engine(engine);
  fx::GraphModule gm = models::trace_zoo_model(model);
  fx::GraphModule prepared =
      fx::prepare_fx(gm, fx::get_default_qconfig_mapping(engine));
  torch::NoGradGuard no_grad;
  for (const at::Tensor& b : batches(model, calibration)) prepared(b);
  return {prepared, fx::convert_fx(prepared)};
}

}  // namespace

TEST_CASE("prepare inserts observers and leaves the module alone") {
  models::ZooModel model = models::make_zoo_model("resnet18");
  fx::GraphModule gm = models::trace_zoo_model(model);
  const std::string before = gm->graph().to_string();
  const size_t tensors_before = gm->tensor_attributes().size();
  fx::GraphModule prepared =
      fx::prepare_fx(gm, fx::get_default_qconfig_mapping("onednn"));
  CHECK(gm->graph().to_string() == before);
  CHECK(gm->tensor_attributes().size() == tensors_before);

  const fx::Graph& g = prepared->graph();
  // Batch norms are folded, each conv has a weight observer, and the
  // conv-relu pairs have no observer between them.
  CHECK(count_calls(g, "aten::batch_norm") == 0);
  const int observers = count_calls(g, "fx_quant::observe");
  CHECK(observers > 40);
  for (const fx::Node* n : g.nodes()) {
    if (n->op() == fx::Opcode::kCallFunction &&
        n->target().to_string() == "aten::conv2d") {
      REQUIRE(n->args()[1].is_node());
      CHECK(n->args()[1].to_node()->target().to_string() == "fx_quant::observe");
      const fx::Node* user = *n->users().begin();
      if (user->target().to_string() == "aten::relu_") {
        CHECK(n->users().size() == 1);
      }
    }
  }
  // Running it gives the float output (observers pass values through).
  torch::NoGradGuard no_grad;
  const at::Tensor x = model.example_inputs[0].toTensor();
  CHECK(torch::allclose(first_tensor(prepared(x)), first_tensor(gm(x)), 1e-4,
                        1e-4));
  // The observer states are buffers of the prepared module.
  bool has_state = false;
  for (const auto& [path, t] : prepared->tensor_attributes()) {
    has_state = has_state || path.rfind("activation_post_process_", 0) == 0;
  }
  CHECK(has_state);
}

TEST_CASE("convert gives quantized kernels close to float on the zoo") {
  torch::NoGradGuard no_grad;
  for (const char* name : {"resnet18", "mobilenet_v2", "lenet", "mlp", "unet"}) {
    CAPTURE(name);
    models::ZooModel model = models::make_zoo_model(name);
    Quantized q = quantize(model, "onednn");
    const fx::QuantizedSummary s = fx::summarize_quantized(q.converted);
    CAPTURE(s.to_string(), q.converted->graph().to_string());
    CHECK(s.quantized_ops > 0);
    CHECK(count_calls(q.converted->graph(), "fx_quant::observe") == 0);
    const at::Tensor x = model.example_inputs[0].toTensor();
    const at::Tensor want = first_tensor(model.forward(model.example_inputs));
    const at::Tensor got = first_tensor(q.converted(x));
    CHECK(got.scalar_type() == at::kFloat);
    CHECK(fx::sqnr_db(want, got) > 15);
  }
}

TEST_CASE("conv-relu and add-relu fuse into one quantized kernel") {
  torch::NoGradGuard no_grad;
  models::ZooModel model = models::make_zoo_model("resnet18");
  Quantized q = quantize(model, "onednn", 2);
  const fx::Graph& g = q.converted->graph();
  CHECK(count_calls(g, "quantized::conv2d_relu.new") > 5);
  CHECK(count_calls(g, "quantized::add_relu") == 8);
  CHECK(count_calls(g, "quantized::linear") == 1);
  // One quantize at the input, one dequantize at the output.
  CHECK(count_calls(g, "aten::quantize_per_tensor") == 1);
  CHECK(count_calls(g, "aten::dequantize.self") == 1);
}

TEST_CASE("the reference model computes what the quantized one does") {
  torch::NoGradGuard no_grad;
  models::ZooModel model = models::make_zoo_model("lenet");
  Quantized q = quantize(model, "onednn");
  fx::GraphModule reference = fx::convert_to_reference_fx(q.prepared);
  const fx::Graph& g = reference->graph();
  CHECK(count_calls(g, "aten::quantize_per_tensor") > 0);
  CHECK(count_calls(g, "aten::dequantize.self") > 0);
  CHECK(count_calls(g, "aten::conv2d") > 0);
  const at::Tensor x = model.example_inputs[0].toTensor();
  const at::Tensor got = first_tensor(q.converted(x));
  const at::Tensor ref = first_tensor(reference(x));
  CHECK(fx::sqnr_db(ref, got) > 25);
}

TEST_CASE("the mapping chooses per module, operator and node") {
  torch::NoGradGuard no_grad;
  models::ZooModel model = models::make_zoo_model("resnet18");
  fx::GraphModule gm = models::trace_zoo_model(model);
  fx::QConfigMapping mapping = fx::get_default_qconfig_mapping("onednn");
  mapping.set_module_name("fc", std::nullopt)
      .set_object_type("add", std::nullopt);
  fx::GraphModule prepared = fx::prepare_fx(gm, mapping);
  CAPTURE(prepared->graph().to_string());
  for (const at::Tensor& b : batches(model, 2)) prepared(b);
  fx::GraphModule converted = fx::convert_fx(prepared);
  const fx::Graph& g = converted->graph();
  CHECK(count_calls(g, "quantized::linear") == 0);
  CHECK(count_calls(g, "quantized::add_relu") == 0);
  CHECK(count_calls(g, "aten::addmm") + count_calls(g, "aten::linear") == 1);
  CHECK(count_calls(g, "quantized::conv2d_relu.new") > 0);
  const at::Tensor x = model.example_inputs[0].toTensor();
  CHECK(fx::sqnr_db(first_tensor(model.forward(model.example_inputs)),
                    first_tensor(converted(x))) > 15);

  // Nothing quantized: no observers at all.
  fx::QConfigMapping none;
  fx::GraphModule untouched = fx::prepare_fx(gm, none);
  CHECK(count_calls(untouched->graph(), "fx_quant::observe") == 0);
}

TEST_CASE("converting before calibrating, or in training mode, is refused") {
  models::ZooModel model = models::make_zoo_model("lenet");
  fx::GraphModule gm = models::trace_zoo_model(model);
  fx::GraphModule prepared =
      fx::prepare_fx(gm, fx::get_default_qconfig_mapping("onednn"));
  CHECK_THROWS_AS(fx::convert_fx(prepared), fx::QuantizationError);
  CHECK_THROWS_WITH(fx::convert_fx(prepared),
                    Catch::Contains("saw no data") &&
                        Catch::Contains("calibration inputs"));
  CHECK_THROWS_WITH(fx::convert_fx(gm), Catch::Contains("no observers"));
  CHECK_THROWS_WITH(fx::prepare_fx(prepared, fx::get_default_qconfig_mapping("onednn")),
                    Catch::Contains("prepared"));
  // A calibration input of the wrong shape is the GraphModule's GuardError,
  // naming the input.
  CHECK_THROWS_AS(prepared(torch::randn({1, 28, 28})), fx::GuardError);

  model.module->train();
  fx::GraphModule training = models::trace_zoo_model(model);
  CHECK_THROWS_WITH(fx::prepare_fx(training, fx::get_default_qconfig_mapping("onednn")),
                    Catch::Contains("training mode") && Catch::Contains("eval()"));
}

TEST_CASE("a quantized module saves, loads (packing again) and runs the same") {
  torch::NoGradGuard no_grad;
  models::ZooModel model = models::make_zoo_model("resnet18");
  Quantized q = quantize(model, "onednn", 2);
  std::stringstream file;
  fx::save(q.converted, file);
  fx::GraphModule loaded = fx::load(file);
  const at::Tensor x = model.example_inputs[0].toTensor();
  CHECK(torch::equal(first_tensor(loaded(x)), first_tensor(q.converted(x))));
  CHECK(loaded->graph().to_string() == q.converted->graph().to_string());
}

TEST_CASE("qnnpack packs per-tensor weights for its own kernels") {
  torch::NoGradGuard no_grad;
  models::ZooModel model = models::make_zoo_model("lenet");
  Quantized q = quantize(model, "qnnpack");
  const at::Tensor x = model.example_inputs[0].toTensor();
  CHECK(fx::sqnr_db(first_tensor(model.forward(model.example_inputs)),
                    first_tensor(q.converted(x))) > 15);
  CHECK_THAT(q.converted->init_steps().back().graph->to_string(),
             Catch::Contains("'qnnpack'") &&
                 Catch::Contains("per_tensor_symmetric"));
  fx::set_quantized_engine("onednn");
}

TEST_CASE("qnnpack's relu6 reads its convolutions' channels-last outputs right") {
  // libtorch's qnnpack hardtanh reads a channels-last input as contiguous;
  // convert_fx makes it contiguous first (MobileNetV2 was at 1.4 dB).
  torch::NoGradGuard no_grad;
  models::ZooModel model = models::make_zoo_model("mobilenet_v2");
  Quantized q = quantize(model, "qnnpack");
  const at::Tensor x = model.example_inputs[0].toTensor();
  CHECK(fx::sqnr_db(first_tensor(model.forward(model.example_inputs)),
                    first_tensor(q.converted(x))) > 25);
  CHECK(count_calls(q.converted->graph(), "aten::contiguous") > 0);
  fx::set_quantized_engine("onednn");
}

TEST_CASE("dynamic quantization covers linear layers and LSTMs") {
  torch::NoGradGuard no_grad;
  for (const char* name : {"lstm_tagger", "transformer_encoder", "mlp"}) {
    CAPTURE(name);
    models::ZooModel model = models::make_zoo_model(name);
    fx::GraphModule gm = models::trace_zoo_model(model);
    fx::GraphModule dynamic = fx::quantize_dynamic_fx(gm);
    const fx::Graph& g = dynamic->graph();
    CAPTURE(g.to_string());
    CHECK(count_calls(g, "quantized::linear_dynamic") +
              count_calls(g, "quantized::linear_relu_dynamic") +
              count_calls(g, "aten::quantized_lstm.input") >
          0);
    if (std::string(name) == "lstm_tagger") {
      CHECK(count_calls(g, "aten::quantized_lstm.input") == 1);
    }
    const at::Tensor want = first_tensor(model.forward(model.example_inputs));
    const at::Tensor got = first_tensor(dynamic->forward(model.example_inputs));
    CHECK(fx::sqnr_db(want, got) > 20);
  }
}

namespace {

// A gate on the input's mean picking one of two MLP heads (linear layers in
// both branches of a cond), then a linear layer around it.
struct GatedHeadsImpl : torch::nn::Module {
  GatedHeadsImpl() {
    wide = register_module("wide", torch::nn::Linear(16, 32));
    narrow = register_module("narrow", torch::nn::Linear(16, 32));
    out = register_module("out", torch::nn::Linear(32, 8));
  }
  torch::Tensor forward(torch::Tensor x) {
    using Tensors = std::vector<at::Tensor>;
    at::Tensor y = fx::cond(
        x.mean() > 0,
        [&](const Tensors& in) { return Tensors{torch::relu(wide(in[0]))}; },
        [&](const Tensors& in) { return Tensors{narrow(in[0]).tanh()}; },
        {x})[0];
    return out(y);
  }
  torch::nn::Linear wide{nullptr}, narrow{nullptr}, out{nullptr};
};
TORCH_MODULE(GatedHeads);

}  // namespace

TEST_CASE("dynamic quantization goes into the bodies of control flow") {
  torch::manual_seed(0);
  torch::NoGradGuard no_grad;
  GatedHeads model;
  model->eval();
  fx::GraphModule gm = fx::symbolic_trace(model, torch::randn({4, 16}));
  fx::GraphModule dynamic = fx::quantize_dynamic_fx(gm);
  const fx::Graph& g = dynamic->graph();
  CAPTURE(g.to_string());
  auto dynamic_calls = [](const fx::Graph& graph) {
    return count_calls(graph, "quantized::linear_dynamic") +
           count_calls(graph, "quantized::linear_relu_dynamic");
  };
  CHECK(dynamic_calls(g) == 1);
  CHECK(dynamic_calls(*g.subgraph("true_graph_0")) == 1);
  CHECK(dynamic_calls(*g.subgraph("false_graph_0")) == 1);
  // Each packed weight under a name of its own.
  CHECK(dynamic->object_attributes().size() == 3);
  for (float sign : {1.0f, -1.0f}) {
    const at::Tensor x = torch::randn({4, 16}).abs() * sign;
    CHECK(fx::sqnr_db(model->forward(x), dynamic(x).toTensor()) > 25);
  }
}

TEST_CASE("the report gives each quantized node's SQNR") {
  torch::NoGradGuard no_grad;
  models::ZooModel model = models::make_zoo_model("lenet");
  Quantized q = quantize(model, "onednn");
  std::vector<std::vector<c10::IValue>> inputs;
  for (const at::Tensor& b : batches(model, 2)) inputs.push_back({b});
  const auto rows = fx::quantization_report(q.prepared, q.converted, inputs);
  REQUIRE(rows.size() > 3);
  for (const auto& r : rows) {
    CAPTURE(r.node, r.op);
    CHECK(r.sqnr_db > 10);
    CHECK(r.sqnr_db < 80);
  }
  const std::string table = fx::format_quantization_report(rows);
  CHECK_THAT(table, Catch::Contains("SQNR (dB)") && Catch::Contains("lowest:"));
  // The prepared module's observers did not run.
  fx::GraphModule again = fx::convert_fx(q.prepared);
  const at::Tensor x = model.example_inputs[0].toTensor();
  CHECK(torch::equal(first_tensor(again(x)), first_tensor(q.converted(x))));
}

namespace {

// A convolution whose output an in-place activation overwrites (as
// MobileNetV3's hardswish_ and EfficientNet's silu_ do), then a second
// convolution.
struct ConvInPlaceActivation : torch::nn::Module {
  ConvInPlaceActivation() {
    conv = register_module(
        "conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 8, 3).padding(1)));
    conv2 = register_module(
        "conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(8, 8, 1)));
  }
  at::Tensor forward(at::Tensor x) {
    at::Tensor y = conv(x);
    at::hardswish_(y);
    return conv2(y);
  }
  torch::nn::Conv2d conv{nullptr}, conv2{nullptr};
};

}  // namespace

TEST_CASE("the report compares a value an in-place op later overwrites as it was") {
  // Before, the float side's value was recorded by reference and read
  // after hardswish_ had overwritten it: the convolution's row said -1 dB
  // (MobileNetV3-Small's first convolution: -1.4 dB, EfficientNet-B0's
  // -0.7 dB) while the activation after it said 33 dB.
  torch::NoGradGuard no_grad;
  torch::manual_seed(0);
  auto model = std::make_shared<ConvInPlaceActivation>();
  model->eval();
  fx::set_quantized_engine("onednn");
  const at::Tensor x = torch::randn({1, 3, 8, 8});
  fx::GraphModule gm = fx::symbolic_trace(model, x);
  fx::GraphModule prepared =
      fx::prepare_fx(gm, fx::get_default_qconfig_mapping("onednn"));
  for (int i = 0; i < 4; ++i) prepared(torch::randn({1, 3, 8, 8}));
  fx::GraphModule converted = fx::convert_fx(prepared);
  const auto rows = fx::quantization_report(prepared, converted, {{x}});
  int convolutions = 0;
  for (const auto& r : rows) {
    CAPTURE(r.node, r.op);
    CHECK(r.sqnr_db > 20);
    convolutions += r.op.rfind("quantized::conv2d", 0) == 0;
  }
  CHECK(convolutions == 2);
}

TEST_CASE("a linear layer of t(weight) quantizes, as addmm of t(weight) does") {
  torch::NoGradGuard no_grad;
  // x @ w + b with w [in, out], written as linear(x, t(w), b).
  torch::manual_seed(0);
  fx::Attributes attributes;
  attributes.parameters["w"] = torch::randn({3, 4});
  attributes.parameters["b"] = torch::randn({4});
  fx::GraphModule gm(fx::parse_graph(R"(graph():
    %x : f32[8, 3] = placeholder[target=x]
    %w : f32[3, 4] = get_attr[target=w]
    %b : f32[4] = get_attr[target=b]
    %t : f32[4, 3] = call_function[target=aten::t](args = (%w,), kwargs = {})
    %linear : f32[8, 4] = call_function[target=aten::linear](args = (%x, %t, %b), kwargs = {})
    %relu : f32[8, 4] = call_function[target=aten::relu](args = (%linear,), kwargs = {})
    return relu)"),
                     attributes);
  gm->eval();
  const at::Tensor x = torch::randn({8, 3});
  const at::Tensor want = gm(x).toTensor();

  fx::set_quantized_engine("onednn");
  fx::GraphModule prepared =
      fx::prepare_fx(gm, fx::get_default_qconfig_mapping("onednn"));
  for (int i = 0; i < 4; ++i) prepared(torch::randn({8, 3}));
  prepared(x);
  fx::GraphModule converted = fx::convert_fx(prepared);
  CAPTURE(converted->graph().to_string());
  CHECK(count_calls(converted->graph(), "quantized::linear_relu") == 1);
  CHECK(fx::sqnr_db(want, first_tensor(converted(x))) > 25);

  fx::GraphModule reference = fx::convert_to_reference_fx(prepared);
  // The linear reads its weight fake-quantized by the init step.
  bool reads_reference_weight = false;
  for (const fx::Node* n : reference->graph().find_nodes(fx::Opcode::kGetAttr)) {
    reads_reference_weight |= n->target().str() == "_reference.linear_weight";
  }
  CHECK(reads_reference_weight);
  CHECK(fx::sqnr_db(want, first_tensor(reference(x))) > 25);

  fx::GraphModule dynamic = fx::quantize_dynamic_fx(gm);
  CHECK(count_calls(dynamic->graph(), "quantized::linear_relu_dynamic") == 1);
  CHECK(fx::sqnr_db(want, first_tensor(dynamic(x))) > 20);
}

namespace {

// Two branches added: one whose activations are near zero (weights of
// 1e-9), one of ordinary size.
struct NearZeroBranch : torch::nn::Module {
  NearZeroBranch() {
    tiny = register_module("tiny", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 8, 3).padding(1)));
    normal = register_module("normal", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 8, 3).padding(1)));
    torch::NoGradGuard no_grad;
    tiny->weight.mul_(1e-9);
    tiny->bias.mul_(1e-9);
  }
  at::Tensor forward(at::Tensor x) { return tiny(x) + normal(x); }
  torch::nn::Conv2d tiny{nullptr}, normal{nullptr};
};

}  // namespace

TEST_CASE("qnnpack's add refuses near-zero activations at convert time, by node") {
  // Before, convert_fx accepted them and the converted graph died in
  // libtorch's BinaryOps.cpp with "createStatus == pytorch_qnnp_status_success
  // INTERNAL ASSERT FAILED" on its first call.
  torch::NoGradGuard no_grad;
  torch::manual_seed(0);
  auto model = std::make_shared<NearZeroBranch>();
  model->eval();
  const at::Tensor x = torch::randn({1, 3, 8, 8});
  for (const std::string engine : {"qnnpack", "onednn"}) {
    CAPTURE(engine);
    fx::set_quantized_engine(engine);
    fx::GraphModule gm = fx::symbolic_trace(model, x);
    fx::GraphModule prepared =
        fx::prepare_fx(gm, fx::get_default_qconfig_mapping(engine));
    for (int i = 0; i < 4; ++i) prepared(torch::randn({1, 3, 8, 8}));
    if (engine == "qnnpack") {
      CHECK_THROWS_WITH(fx::convert_fx(prepared),
                        Catch::Contains("%add") &&
                            Catch::Contains("qnnpack engine") &&
                            Catch::Contains("near zero"));
    } else {
      fx::GraphModule converted = fx::convert_fx(prepared);
      CHECK(fx::sqnr_db(model->forward(x), first_tensor(converted(x))) > 15);
    }
  }
  fx::set_quantized_engine("onednn");
}
