#include "passes/remove_dropout.h"

#include <torch/torch.h>

#include "fx/fx.h"
#include "passes/pass_manager.h"
#include "models/zoo.h"
#include "testdata/test_helpers.h"
#include "third_party/catch.h"

namespace {

using testdata::count_calls;

using fx::Node;
using models::make_zoo_model;
using models::ZooModel;

TEST_CASE("the transformer encoder in eval mode loses every dropout") {
  torch::NoGradGuard no_grad;
  ZooModel model = make_zoo_model("transformer_encoder");
  fx::GraphModule gm = models::trace_zoo_model(model);
  // Attention weights, attention output, feed-forward inside and output, in
  // each of the two layers.
  REQUIRE(count_calls(gm->graph(), "aten::dropout") == 8);
  const size_t size = gm->graph().size();
  CHECK(fx::remove_dropout(*gm));
  CHECK(count_calls(gm->graph(), "aten::dropout") == 0);
  CHECK(gm->graph().size() == size - 8);
  CHECK_FALSE(fx::remove_dropout(*gm));
  gm->recompile();
  at::Tensor expected = model.forward(model.example_inputs).toTensor();
  CHECK(torch::equal(gm->forward(model.example_inputs).toTensor(), expected));
}

TEST_CASE("MobileNetV2's classifier dropout is removed") {
  torch::NoGradGuard no_grad;
  ZooModel model = make_zoo_model("mobilenet_v2");
  fx::GraphModule gm = models::trace_zoo_model(model);
  auto dropouts = gm->graph().find_nodes(fx::Opcode::kCallFunction,
                                         fx::op("aten::dropout"));
  REQUIRE(dropouts.size() == 1);
  REQUIRE(dropouts[0]->format_node() ==
          "%dropout : [#users=1] = call_function[target=aten::dropout](args = "
          "(%flatten, 0.2, False), kwargs = {})");
  CHECK(fx::remove_dropout(*gm));
  auto addmm =
      gm->graph().find_nodes(fx::Opcode::kCallFunction, fx::op("aten::addmm"));
  REQUIRE(addmm.size() == 1);
  CHECK(addmm[0]->format_node() ==
        "%addmm : [#users=1] = call_function[target=aten::addmm](args = "
        "(%classifier_1_bias, %flatten, %t), kwargs = {})");
  gm->recompile();
  at::Tensor expected = model.forward(model.example_inputs).toTensor();
  CHECK(torch::equal(gm->forward(model.example_inputs).toTensor(), expected));
}

// x -> relu -> `op`(relu, p, train) -> neg.
fx::GraphModule dropout_graph(const char* op, double p, bool train) {
  auto g = std::make_unique<fx::Graph>();
  Node* x = g->placeholder("x");
  Node* relu = g->call_function(fx::op("aten::relu"), {x});
  Node* dropout = g->call_function(fx::op(op), {relu, p, train});
  g->output(g->call_function(fx::op("aten::neg"), {dropout}));
  return fx::GraphModule(std::move(g), fx::Attributes());
}

// Which dropouts go and which stay, as graphs: testdata/ir/passes/
// remove_dropout_eval.ir and remove_dropout_variants.ir.
TEST_CASE("a dropout in training mode is kept, and stays random") {
  fx::GraphModule training = dropout_graph("aten::dropout", 0.5, true);
  CHECK_FALSE(fx::remove_dropout(*training));
  CHECK(count_calls(training->graph(), "aten::dropout") == 1);
  auto x = torch::ones({1000});
  CHECK_FALSE(torch::equal(training(x).toTensor(), -x));
}

TEST_CASE("RemoveDropout runs in a PassManager") {
  auto pass = std::make_unique<fx::RemoveDropout>();
  CHECK(pass->name() == "remove_dropout");
  fx::GraphModule gm = dropout_graph("aten::dropout", 0.1, false);
  fx::PassResult result = fx::PassManager().add(std::move(pass)).run(gm);
  CHECK(result.modified);
  CHECK(count_calls(result.module->graph(), "aten::dropout") == 0);
  // The given module is left as it was.
  CHECK(count_calls(gm->graph(), "aten::dropout") == 1);
}

}  // namespace
