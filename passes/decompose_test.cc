#include "passes/decompose.h"

#include <torch/torch.h>

#include "absl/strings/match.h"
#include "fx/fx.h"
#include "passes/pass_manager.h"
#include "models/zoo.h"
#include "third_party/catch.h"

namespace {

using fx::Opcode;

TEST_CASE("a custom table rewrites only its operators") {
  fx::DecompositionTable table;
  table.add("aten::sigmoid", [](const std::vector<c10::IValue>& args) {
    at::Tensor x = args[0].toTensor();
    return c10::IValue(1 / (1 + torch::exp(-x)));
  });
  CHECK(table.names() == std::vector<std::string>{"aten::sigmoid"});
  CHECK_THROWS_AS(table.add("aten::no_such_op", nullptr), fx::GraphError);
  auto fn = [](torch::Tensor x) { return torch::sigmoid(x).relu(); };
  auto x = torch::randn({5});
  fx::GraphModule out = fx::symbolic_trace(fn, x);
  CHECK(fx::decompose(*out, table));
  auto& g = out->graph();
  CHECK(g.find_nodes(Opcode::kCallFunction, fx::op("aten::sigmoid")).empty());
  CHECK(g.find_nodes(Opcode::kCallFunction, fx::op("aten::relu")).size() == 1);
  CHECK(torch::allclose(out(x).toTensor(), fn(x)));
}

TEST_CASE("the decompose pass runs in place on zoo models") {
  torch::NoGradGuard no_grad;
  for (const char* name : {"mlp", "lenet"}) {
    INFO(name);
    models::ZooModel model = models::make_zoo_model(name);
    fx::GraphModule gm =
        fx::symbolic_trace(model.module, model.forward, model.example_inputs);
    fx::PassResult result = fx::PassManager().add("decompose").run(gm);
    CHECK(result.modified);
    auto& g = result.module->graph();
    CHECK(g.find_nodes(Opcode::kCallFunction, fx::op("aten::relu")).empty());
    CHECK(g.find_nodes(Opcode::kCallFunction, fx::op("aten::addmm")).empty());
    // The nodes an addmm became keep its module path (fc1, ...).
    auto mms = g.find_nodes(Opcode::kCallFunction, fx::op("aten::mm"));
    REQUIRE_FALSE(mms.empty());
    for (fx::Node* mm : mms) {
      const std::string* path = mm->meta().get(fx::kModulePath);
      REQUIRE(path != nullptr);
      CHECK(absl::StartsWith(*path, "fc"));
    }
    CHECK(torch::allclose(result.module->forward(model.example_inputs).toTensor(),
                          model.forward(model.example_inputs).toTensor(),
                          1e-5, 1e-6));
  }
}

TEST_CASE("decompose keeps the init steps of folded weights") {
  torch::NoGradGuard no_grad;
  models::ZooModel model = models::make_zoo_model("resnet18");
  model.module->eval();
  fx::GraphModule gm =
      fx::symbolic_trace(model.module, model.forward, model.example_inputs);
  fx::PassResult folded = fx::PassManager().add("fuse_conv_bn").run(gm);
  REQUIRE(folded.module->init_steps().size() == 1);
  fx::PassResult decomposed =
      fx::PassManager().add("decompose").run(folded.module);
  CHECK(decomposed.modified);
  CHECK(decomposed.module->init_steps().size() == 1);
  auto& g = decomposed.module->graph();
  CHECK(g.find_nodes(Opcode::kCallFunction, fx::op("aten::relu")).empty());
  CHECK(g.find_nodes(Opcode::kCallFunction, fx::op("aten::relu_")).empty());
  CHECK(torch::allclose(
      decomposed.module->forward(model.example_inputs).toTensor(),
      model.forward(model.example_inputs).toTensor(), 1e-4, 1e-5));
}

}  // namespace
