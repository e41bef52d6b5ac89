// Script objects (torchbind instances, here a quantized packed weight) as
// attributes: made by an init step, read by get_attr, run by the
// GraphModule and the Interpreter, copied, saved (as the step that makes
// them) and loaded, exported to TorchScript, printed as C++.
#include <torch/script.h>
#include <torch/torch.h>

#include <sstream>

#include "fx/fx.h"
#include "fx/io/serialization.h"
#include "fx/torchscript/torchscript.h"
#include "interpreter/interpreter.h"
#include "third_party/catch.h"

namespace {

// x -> quantized::linear_dynamic(x, packed(fc.weight)), with the packing
// (quantize, then quantized::linear_prepack) an init step.
fx::GraphModule packed_linear(const at::Tensor& weight) {
  auto init = std::make_unique<fx::Graph>();
  fx::Node* w = init->get_attr("fc.weight");
  fx::Node* q = init->call_function(fx::op("aten::quantize_per_tensor"),
                                    {w, 0.01, int64_t{0}, c10::ScalarType::QInt8});
  fx::Node* p = init->call_function(fx::op("quantized::linear_prepack"),
                                    {q, fx::Argument()});
  init->output(fx::Argument::tuple({p}));

  auto graph = std::make_unique<fx::Graph>();
  fx::Node* x = graph->placeholder("x");
  fx::Node* packed = graph->get_attr("_packed.fc");
  graph->output(graph->call_function(fx::op("quantized::linear_dynamic"),
                                     {x, packed}));
  fx::Attributes attributes;
  attributes.parameters["fc.weight"] = weight;
  std::vector<fx::GraphModuleImpl::InitStep> steps = {
      {std::shared_ptr<const fx::Graph>(std::move(init)), {"_packed.fc"}}};
  return fx::GraphModule(std::make_shared<fx::GraphModuleImpl>(
      std::move(graph), std::move(attributes), std::move(steps)));
}

}  // namespace

TEST_CASE("an init step makes a script object that get_attr reads") {
  at::globalContext().setQEngine(at::QEngine::ONEDNN);
  torch::manual_seed(0);
  // Within +-0.5: at most 50 quantization steps, so that oneDNN's int8
  // kernels on a CPU without VNNI (AVX2), which add pairs of uint8 x int8
  // products in 16 bits, never saturate.
  const at::Tensor w = torch::randn({4, 6}).clamp(-1, 1) * 0.5;
  const at::Tensor x = torch::randn({3, 6});
  fx::GraphModule gm = packed_linear(w);
  REQUIRE(gm->has_object_attribute("_packed.fc"));
  CHECK_FALSE(gm->has_tensor_attribute("_packed.fc"));
  CHECK(gm->fetch_attribute("_packed.fc").isObject());
  CHECK_THROWS_AS(gm->fetch_attr("_packed.fc"), fx::GraphError);
  // Not a parameter or buffer of the module.
  for (const auto& p : gm->named_parameters()) CHECK(p.key() != "_packed.fc");

  const at::Tensor want = at::linear(x, w);
  const at::Tensor got = gm(x).toTensor();
  CHECK((got - want).abs().max().item<double>() < 0.05);
  CHECK(torch::equal(fx::Interpreter(gm).run({x}).toTensor(), got));
  fx::GraphModule copy(gm->copy());
  CHECK(torch::equal(copy(x).toTensor(), got));

  // run_init packs the new weights.
  gm->named_parameters()["fc.weight"].detach().mul_(0.5);
  gm->run_init();
  CHECK((gm(x).toTensor() - 0.5 * want).abs().max().item<double>() < 0.05);
  gm->named_parameters()["fc.weight"].detach().mul_(2);
  gm->run_init();

  // C++ code reads it as a boxed member.
  CHECK_THAT(gm->code(), Catch::Contains("c10::IValue& _packed_fc"));
  CHECK_THAT(gm->print_readable(),
             Catch::Contains("c10::IValue _packed_fc_;  // _packed.fc: "
                             "__torch__.torch.classes.quantized."
                             "LinearPackedParamsBase"));
}

TEST_CASE("script objects are saved as the step that makes them") {
  at::globalContext().setQEngine(at::QEngine::ONEDNN);
  torch::manual_seed(1);
  const at::Tensor w = torch::randn({4, 6});
  const at::Tensor x = torch::randn({2, 6});
  fx::GraphModule gm = packed_linear(w);
  std::stringstream file;
  fx::save(gm, file);
  fx::GraphModule loaded = fx::load(file);
  CHECK(loaded->has_object_attribute("_packed.fc"));
  CHECK(torch::equal(loaded(x).toTensor(), gm(x).toTensor()));

  // A graph reading an object no step makes is refused.
  auto graph = std::make_unique<fx::Graph>();
  graph->output(graph->get_attr("_packed.missing"));
  CHECK_THROWS_WITH(fx::GraphModule(std::move(graph), fx::Attributes{}),
                    Catch::Contains("_packed.missing"));
}

TEST_CASE("script objects export to TorchScript as attributes") {
  at::globalContext().setQEngine(at::QEngine::ONEDNN);
  torch::manual_seed(2);
  const at::Tensor w = torch::randn({4, 6});
  const at::Tensor x = torch::randn({2, 6});
  fx::GraphModule gm = packed_linear(w);
  torch::jit::Module script = fx::to_torchscript(gm);
  CHECK(torch::equal(script.forward({x}).toTensor(), gm(x).toTensor()));
  std::stringstream saved;
  script.save(saved);
  torch::jit::Module again = torch::jit::load(saved);
  CHECK(torch::equal(again.forward({x}).toTensor(), gm(x).toTensor()));
}
