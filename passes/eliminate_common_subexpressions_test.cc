#include "passes/eliminate_common_subexpressions.h"

#include <torch/torch.h>

#include "fx/fx.h"
#include "passes/pass_manager.h"
#include "models/zoo.h"
#include "testdata/test_helpers.h"
#include "testdata/zoo_testing.h"
#include "third_party/catch.h"

namespace {

using testdata::count_calls;

using fx::Argument;
using fx::Node;
using models::make_zoo_model;
using models::ZooModel;

at::Tensor element(const c10::IValue& tuple, size_t i) {
  return tuple.toTupleRef().elements().at(i).toTensor();
}

TEST_CASE("duplicate pure nodes merge into the first, in cascade") {
  auto g = std::make_unique<fx::Graph>();
  Node* x = g->placeholder("x");
  Node* w = g->get_attr("fc.weight");
  Node* t = g->call_function(fx::op("aten::t"), {w});
  Node* mm = g->call_function(fx::op("aten::mm"), {x, t});
  Node* w_1 = g->get_attr("fc.weight");
  Node* t_1 = g->call_function(fx::op("aten::t"), {w_1});
  Node* mm_1 = g->call_function(fx::op("aten::mm"), {x, t_1});
  Node* add = g->call_function(fx::op("aten::add.Tensor"), {mm, mm_1});
  // Same operator, other kwargs or constants: not the same computation.
  Node* add_1 =
      g->call_function(fx::op("aten::add.Tensor"), {mm, mm_1}, {{"alpha", 2}});
  Node* mul = g->call_function(fx::op("aten::mul.Scalar"), {add, 2});
  Node* mul_1 = g->call_function(fx::op("aten::mul.Scalar"), {add, 2.0});
  g->output(Argument::tuple({mul, mul_1, add_1}));
  fx::Attributes attributes;
  at::Tensor weight = torch::randn({3, 3});
  attributes.parameters["fc.weight"] = weight;
  fx::GraphModule gm(std::move(g), attributes);

  // The graph it leaves: testdata/ir/passes/
  // eliminate_common_subexpressions_merges_weight_t.ir; here, what it
  // computes.
  CHECK(fx::eliminate_common_subexpressions(*gm));
  CHECK(count_calls(gm->graph(), "aten::t") == 1);
  CHECK(count_calls(gm->graph(), "aten::mm") == 1);
  CHECK_FALSE(fx::eliminate_common_subexpressions(*gm));
  gm->recompile();
  at::Tensor in = torch::randn({2, 3});
  c10::IValue out = gm(in);
  at::Tensor y = in.mm(weight.t());
  CHECK(torch::equal(element(out, 0), (y + y) * 2));
  CHECK(torch::equal(element(out, 2), torch::add(y, y, 2)));
}

TEST_CASE("random operators are never merged") {
  auto g = std::make_unique<fx::Graph>();
  Node* x = g->placeholder("x");
  Node* a = g->call_function(fx::op("aten::rand_like"), {x});
  Node* b = g->call_function(fx::op("aten::rand_like"), {x});
  g->output(Argument::tuple({a, b}));
  fx::GraphModule gm(std::move(g), fx::Attributes());
  // The graph stays as it was: testdata/ir/passes/
  // eliminate_common_subexpressions_keeps_random_and_inplace.ir. Here, what
  // it computes.
  CHECK_FALSE(fx::eliminate_common_subexpressions(*gm));
  c10::IValue out = gm(torch::zeros({100}));
  CHECK_FALSE(torch::equal(element(out, 0), element(out, 1)));
}

TEST_CASE("in-place operators are never merged") {
  auto g = std::make_unique<fx::Graph>();
  Node* x = g->placeholder("x");
  Node* a = g->call_function(fx::op("aten::clone"), {x});
  g->call_function(fx::op("aten::add_.Scalar"), {a, 1});
  Node* second = g->call_function(fx::op("aten::add_.Scalar"), {a, 1});
  g->output(second);
  fx::GraphModule gm(std::move(g), fx::Attributes());
  CHECK_FALSE(fx::eliminate_common_subexpressions(*gm));
  CHECK(count_calls(gm->graph(), "aten::add_.Scalar") == 2);
  at::Tensor in = torch::randn({4});
  CHECK(torch::equal(gm(in).toTensor(), in + 1 + 1));
}

TEST_CASE("a write through a view between two equal nodes keeps both") {
  // %b reads %x after %add_ wrote to it through the view %view.
  auto g = std::make_unique<fx::Graph>();
  Node* x = g->placeholder("x");
  Node* a = g->call_function(fx::op("aten::relu"), {x});
  Node* view =
      g->call_function(fx::op("aten::view"), {x, std::vector<int64_t>{-1}});
  g->call_function(fx::op("aten::add_.Scalar"), {view, 1});
  Node* b = g->call_function(fx::op("aten::relu"), {x});
  g->output(Argument::tuple({a, b}));
  fx::GraphModule gm(std::move(g), fx::Attributes());
  CHECK_FALSE(fx::eliminate_common_subexpressions(*gm));
  CHECK(count_calls(gm->graph(), "aten::relu") == 2);
  at::Tensor in = torch::randn({2, 3});
  c10::IValue out = gm(in.clone());
  CHECK(torch::equal(element(out, 0), in.relu()));
  CHECK(torch::equal(element(out, 1), (in + 1).relu()));
}

// relu(x) twice, then `write` on the first, returning (write, second).
fx::GraphModule written_later(
    const std::function<Node*(fx::Graph&, Node* first)>& write) {
  auto g = std::make_unique<fx::Graph>();
  Node* x = g->placeholder("x");
  Node* a = g->call_function(fx::op("aten::relu"), {x});
  Node* b = g->call_function(fx::op("aten::relu"), {x});
  Node* w = write(*g, a);
  g->output(Argument::tuple({w, b}));
  return fx::GraphModule(std::move(g), fx::Attributes());
}

TEST_CASE("a value written later, even through an alias, is not merged") {
  std::vector<std::pair<const char*, std::function<Node*(fx::Graph&, Node*)>>>
      writes = {
          {"directly",
           [](fx::Graph& g, Node* a) {
             return g.call_function(fx::op("aten::add_.Scalar"), {a, 1});
           }},
          {"through a view",
           [](fx::Graph& g, Node* a) {
             Node* t = g.call_function(fx::op("aten::t"), {a});
             return g.call_function(fx::op("aten::add_.Scalar"), {t, 1});
           }},
          {"through a chunk",
           [](fx::Graph& g, Node* a) {
             Node* chunk = g.call_function(fx::op("aten::chunk"), {a, 2});
             Node* piece = g.call_function(fx::getitem(), {chunk, 0});
             return g.call_function(fx::op("aten::add_.Scalar"), {piece, 1});
           }},
          {"through an eval-mode dropout",
           [](fx::Graph& g, Node* a) {
             Node* d =
                 g.call_function(fx::op("aten::dropout"), {a, 0.5, false});
             return g.call_function(fx::op("aten::add_.Scalar"), {d, 1});
           }},
      };
  for (const auto& [how, write] : writes) {
    INFO(how);
    fx::GraphModule gm = written_later(write);
    CHECK_FALSE(fx::eliminate_common_subexpressions(*gm));
    CHECK(count_calls(gm->graph(), "aten::relu") == 2);
    gm->recompile();
    at::Tensor in = torch::randn({4, 4});
    CHECK(torch::equal(element(gm(in), 1), in.relu()));
  }
  // Without the write, the two merge.
  fx::GraphModule gm = written_later([](fx::Graph& g, Node* a) {
    return g.call_function(fx::op("aten::add.Scalar"), {a, 1});
  });
  CHECK(fx::eliminate_common_subexpressions(*gm));
  CHECK(count_calls(gm->graph(), "aten::relu") == 1);
}

TEST_CASE("long chains of duplicates merge in one pass") {
  constexpr int kLength = 2000;
  auto g = std::make_unique<fx::Graph>();
  Node* x = g->placeholder("x");
  Node* a = x;
  Node* b = x;
  for (int i = 0; i < kLength; ++i) {
    a = g->call_function(fx::op("aten::sin"), {a});
    b = g->call_function(fx::op("aten::sin"), {b});
  }
  g->output(g->call_function(fx::op("aten::sub.Tensor"), {a, b}));
  fx::GraphModule gm(std::move(g), fx::Attributes());
  CHECK(fx::eliminate_common_subexpressions(*gm));
  CHECK(count_calls(gm->graph(), "aten::sin") == kLength);
  gm->graph().lint();
}

// A linear layer applied twice (tied weights): F::linear computes
// weight.t() at each call.
struct TiedImpl : torch::nn::Module {
  TiedImpl() : fc(register_module("fc", torch::nn::Linear(8, 8))) {}
  at::Tensor forward(const at::Tensor& x) { return fc(torch::relu(fc(x))); }
  torch::nn::Linear fc;
};
TORCH_MODULE(Tied);

TEST_CASE("a tied linear layer transposes its weight once") {
  torch::NoGradGuard no_grad;
  torch::manual_seed(0);
  Tied model;
  model->eval();
  at::Tensor x = torch::randn({4, 8});
  fx::GraphModule gm = fx::symbolic_trace(model, x);
  REQUIRE(count_calls(gm->graph(), "aten::t") == 2);
  CHECK(fx::eliminate_common_subexpressions(*gm));
  CHECK(count_calls(gm->graph(), "aten::t") == 1);
  CHECK(gm->graph().find_nodes(fx::Opcode::kGetAttr).size() == 2);
  gm->recompile();
  CHECK(torch::equal(gm(x).toTensor(), model(x)));
}

TEST_CASE("the LSTM tagger's two zero states become one") {
  torch::NoGradGuard no_grad;
  ZooModel model = make_zoo_model("lstm_tagger");
  fx::GraphModule gm = models::trace_zoo_model(model);
  REQUIRE(count_calls(gm->graph(), "aten::zeros") == 2);
  CHECK(fx::eliminate_common_subexpressions(*gm));
  CHECK(count_calls(gm->graph(), "aten::zeros") == 1);
  Node* lstm =
      gm->graph()
          .find_nodes(fx::Opcode::kCallFunction, fx::op("aten::lstm.input"))
          .at(0);
  CHECK(lstm->args().at(1).to_string() == "[%zeros, %zeros]");
  gm->recompile();
  testdata::check_outputs_equal(gm->forward(model.example_inputs),
                                model.forward(model.example_inputs));
}

TEST_CASE("every zoo model computes the same after CSE") {
  torch::NoGradGuard no_grad;
  for (const std::string& name : models::traceable_zoo_model_names()) {
    INFO(name);
    ZooModel model = make_zoo_model(name);
    fx::GraphModule gm = models::trace_zoo_model(model);
    fx::eliminate_common_subexpressions(*gm);
    gm->recompile();
    testdata::check_outputs_equal(gm->forward(model.example_inputs),
                                  model.forward(model.example_inputs));
  }
}

TEST_CASE("EliminateCommonSubexpressions is the pass of its name") {
  auto pass = std::make_unique<fx::EliminateCommonSubexpressions>();
  CHECK(pass->name() == "eliminate_common_subexpressions");
  auto g = std::make_unique<fx::Graph>();
  Node* x = g->placeholder("x");
  Node* a = g->call_function(fx::op("aten::exp"), {x});
  Node* b = g->call_function(fx::op("aten::exp"), {x});
  g->output(g->call_function(fx::op("aten::mul.Tensor"), {a, b}));
  fx::GraphModule gm(std::move(g), fx::Attributes());
  fx::PassResult result = fx::PassManager().add(std::move(pass)).run(gm);
  CHECK(result.modified);
  CHECK(count_calls(result.module->graph(), "aten::exp") == 1);
}

}  // namespace
