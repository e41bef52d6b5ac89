#include "fx/runtime/graph_module.h"

#include <torch/torch.h>

#include "fx/fx.h"
#include "interpreter/interpreter.h"
#include "third_party/catch.h"

namespace {

using fx::Node;
using fx::Opcode;

// x -> linear(weight, bias) -> relu, written by hand.
std::unique_ptr<fx::Graph> linear_relu_graph() {
  auto g = std::make_unique<fx::Graph>();
  Node* x = g->placeholder("x");
  Node* w = g->get_attr("fc.weight");
  Node* b = g->get_attr("fc.bias");
  Node* linear = g->call_function(fx::op("aten::linear"), {x, w, b});
  g->output(g->call_function(fx::op("aten::relu"), {linear}));
  return g;
}

fx::Attributes linear_attributes(const torch::nn::Linear& fc) {
  fx::Attributes attributes;
  attributes.parameters["fc.weight"] = fc->weight;
  attributes.parameters["fc.bias"] = fc->bias;
  return attributes;
}

TEST_CASE("a GraphModule runs a hand-written graph on given attributes") {
  torch::nn::Linear fc(3, 2);
  fx::GraphModule gm(linear_relu_graph(), linear_attributes(fc));
  auto x = torch::randn({4, 3});
  CHECK(torch::equal(gm(x).toTensor(), torch::relu(fc(x))));
  auto params = gm->named_parameters();
  CHECK(params.keys() == std::vector<std::string>{"fc.weight", "fc.bias"});
  CHECK(params["fc.weight"].is_same(fc->weight));
  // Sharing, as torch.fx does: to() changes both.
  gm->to(torch::kDouble);
  CHECK(fc->weight.scalar_type() == torch::kDouble);
}

TEST_CASE("missing attributes and leaf modules are named") {
  CHECK_THROWS_WITH(fx::GraphModule(linear_relu_graph(), fx::Attributes()),
                    Catch::Contains("get_attr target 'fc.weight'"));
  auto g = std::make_unique<fx::Graph>();
  g->output(g->call_module("encoder", {g->placeholder("x")}));
  CHECK_THROWS_WITH(fx::GraphModule(std::move(g), fx::Attributes()),
                    Catch::Contains("call_module target 'encoder' has no "
                                    "module"));
}

TEST_CASE("leaf modules are called through their boxed forward") {
  torch::nn::Linear fc(3, 2);
  auto g = std::make_unique<fx::Graph>();
  Node* x = g->placeholder("x");
  g->output(g->call_function(fx::op("aten::sigmoid"),
                             {g->call_module("fc", {x})}));
  fx::Attributes attributes;
  attributes.modules["fc"] = fx::make_leaf_module(fc);
  fx::GraphModule gm(std::move(g), attributes);
  auto input = torch::randn({4, 3});
  CHECK(torch::equal(gm(input).toTensor(), torch::sigmoid(fc(input))));
  // Its parameters are the module's, under its path.
  CHECK(gm->named_parameters()["fc.weight"].is_same(fc->weight));
  CHECK(gm->graph().find_nodes(Opcode::kCallModule)[0]->is_impure());
}

TEST_CASE("an edited graph must be recompiled before it runs") {
  torch::nn::Linear fc(3, 2);
  fx::GraphModule gm(linear_relu_graph(), linear_attributes(fc));
  auto& g = gm->graph();
  Node* relu = g.find_nodes(Opcode::kCallFunction, fx::op("aten::relu"))[0];
  Node* gelu;
  {
    auto guard = g.inserting_after(relu);
    gelu = g.call_function(fx::op("aten::gelu"), {relu->args()[0]});
  }
  relu->replace_all_uses_with(gelu);
  g.erase_node(relu);
  auto x = torch::randn({4, 3});
  CHECK_THROWS_WITH(gm(x), Catch::Contains("call recompile()"));
  gm->recompile();
  CHECK(torch::equal(gm(x).toTensor(), torch::gelu(fc(x))));
}

TEST_CASE("call_method resolves the overload from the arguments") {
  auto g = std::make_unique<fx::Graph>();
  Node* x = g->placeholder("x");
  Node* y = g->placeholder("y");
  Node* a = g->call_method("add", {x, 1});        // add.Scalar
  Node* b = g->call_method("add", {a, y}, {{"alpha", 2}});  // add.Tensor
  g->output(g->call_method("relu", {b}));
  fx::GraphModule gm(std::move(g), fx::Attributes());
  auto tx = torch::randn({3}), ty = torch::randn({3});
  auto expected = torch::relu(tx.add(1).add(ty, 2));
  CHECK(torch::equal(gm(tx, ty).toTensor(), expected));
  CHECK(torch::equal(fx::Interpreter(gm).run({tx, ty}).toTensor(), expected));
  auto bad = std::make_unique<fx::Graph>();
  bad->output(bad->call_method("add", {bad->placeholder("x"), "text"}));
  CHECK_THROWS_WITH(fx::GraphModule(std::move(bad), fx::Attributes()),
                    Catch::Contains("no overload of aten::add takes arguments "
                                    "(Tensor, String)"));
}

TEST_CASE("a failing node is named: While executing %node") {
  auto g = std::make_unique<fx::Graph>();
  Node* x = g->placeholder("x");
  Node* y = g->placeholder("y");
  g->output(g->call_function(fx::op("aten::mm"), {x, y}));
  fx::GraphModule gm(std::move(g), fx::Attributes());
  auto a = torch::randn({2, 3}), b = torch::randn({4, 5});
  CHECK_THROWS_AS(gm(a, b), fx::ExecutionError);
  CHECK_THROWS_WITH(
      gm(a, b),
      Catch::StartsWith("While executing %mm : [#users=1] = "
                        "call_function[target=aten::mm](args = (%x, %y), "
                        "kwargs = {})\n") &&
          Catch::Contains("cannot be multiplied"));
  CHECK_THROWS_WITH(fx::Interpreter(gm).run({a, b}),
                    Catch::StartsWith("While executing %mm"));
}

torch::Tensor use_count_of(const torch::Tensor& t) {
  return torch::tensor({static_cast<int64_t>(t.use_count())});
}
const auto probe = fx::wrap("fx_test::use_count_of", &use_count_of);

TEST_CASE("the executor moves a value into its last use") {
  auto g = std::make_unique<fx::Graph>();
  Node* x = g->placeholder("x");
  Node* r = g->call_function(fx::op("aten::relu"), {x});
  Node* first = g->call_function(probe.function(), {r});
  Node* last = g->call_function(probe.function(), {r});
  g->output(fx::Argument::tuple({first, last}));
  fx::GraphModule gm(std::move(g), fx::Attributes());
  auto out = gm(torch::randn({3})).toTupleRef().elements();
  // At its last use relu's value is no longer held by its slot: one
  // reference fewer than at the use before.
  CHECK(out[0].toTensor().item<int64_t>() -
            out[1].toTensor().item<int64_t>() ==
        1);
}

TEST_CASE("copy() gives an independent graph over the same tensors") {
  torch::nn::Linear fc(3, 2);
  fx::GraphModule gm(linear_relu_graph(), linear_attributes(fc));
  fx::GraphModule copy(gm->copy());
  Node* relu =
      copy->graph().find_nodes(Opcode::kCallFunction, fx::op("aten::relu"))[0];
  relu->replace_all_uses_with(relu->args()[0].to_node());
  copy->graph().erase_node(relu);
  copy->recompile();
  auto x = torch::randn({4, 3});
  CHECK(torch::equal(copy(x).toTensor(), fc(x)));
  CHECK(torch::equal(gm(x).toTensor(), torch::relu(fc(x))));
  CHECK(copy->fetch_attr("fc.weight").is_same(fc->weight));
}

TEST_CASE("attributes can be replaced in the GraphModule only") {
  torch::nn::Linear fc(3, 2);
  fx::GraphModule gm(linear_relu_graph(), linear_attributes(fc));
  auto w = torch::ones({2, 3});
  gm->register_tensor_attribute("fc.weight", w, /*is_parameter=*/true);
  gm->recompile();
  CHECK(gm->named_parameters()["fc.weight"].is_same(w));
  CHECK_FALSE(fc->weight.is_same(w));
  auto x = torch::randn({4, 3});
  CHECK(torch::equal(gm(x).toTensor(),
                     torch::relu(torch::linear(x, w, fc->bias))));
}

TEST_CASE("a leaf module at a path does not disturb paths it prefixes by name") {
  // "layer1" is a prefix of "layer10" as a string, not as a path.
  torch::nn::Linear fc(3, 2);
  fx::GraphModule gm(linear_relu_graph(), linear_attributes(fc));
  gm->register_tensor_attribute("layer10.w", torch::ones({1}), true);
  torch::nn::Linear leaf(3, 3);
  gm->register_leaf_module("layer1", fx::make_leaf_module(leaf));
  gm->register_tensor_attribute("layer10.v", torch::zeros({1}), false);
  auto params = gm->named_parameters();
  CHECK(params.contains("layer10.w"));
  CHECK(params["layer1.weight"].is_same(leaf->weight));
  CHECK(gm->named_buffers().contains("layer10.v"));
}

TEST_CASE("set_graph swaps the graph in place, or changes nothing") {
  torch::nn::Linear fc(3, 2);
  fx::GraphModule gm(linear_relu_graph(), linear_attributes(fc));
  auto x = torch::randn({4, 3});
  // A graph reading an attribute the module lacks, with no Attributes.
  auto bad = std::make_unique<fx::Graph>();
  Node* bx = bad->placeholder("x");
  bad->output(bad->call_function(fx::op("aten::add.Tensor"),
                                 {bx, bad->get_attr("offset")}));
  CHECK_THROWS_WITH(gm->set_graph(std::move(bad)),
                    Catch::Contains("get_attr target 'offset'"));
  CHECK_FALSE(gm->has_tensor_attribute("offset"));
  CHECK(torch::equal(gm(x).toTensor(), torch::relu(fc(x))));
  // sigmoid(linear(x) + offset): existing attributes stay, the new one is
  // taken from the Attributes.
  auto g = std::make_unique<fx::Graph>();
  Node* gx = g->placeholder("x");
  Node* linear = g->call_function(
      fx::op("aten::linear"),
      {gx, g->get_attr("fc.weight"), g->get_attr("fc.bias")});
  Node* shifted = g->call_function(fx::op("aten::add.Tensor"),
                                   {linear, g->get_attr("offset")});
  g->output(g->call_function(fx::op("aten::sigmoid"), {shifted}));
  fx::Attributes attributes;
  auto offset = torch::full({2}, 0.5);
  attributes.buffers["offset"] = offset;
  gm->set_graph(std::move(g), std::move(attributes));
  CHECK(gm->fetch_attr("fc.weight").is_same(fc->weight));
  CHECK_FALSE(gm->is_parameter("offset"));
  CHECK(torch::equal(gm(x).toTensor(), torch::sigmoid(fc(x) + offset)));
}

TEST_CASE("a GraphModule composes with torch::nn modules") {
  torch::nn::Linear fc(3, 2);
  fx::GraphModule gm(linear_relu_graph(), linear_attributes(fc));
  torch::nn::Sequential seq(gm);
  auto x = torch::randn({4, 3});
  c10::IValue out = seq->forward<c10::IValue>(std::vector<c10::IValue>{x});
  CHECK(torch::equal(out.toTensor(), torch::relu(fc(x))));
  CHECK(seq->parameters().size() == 2);
}

}  // namespace

struct SmallNetImpl : torch::nn::Module {
  SmallNetImpl() { fc = register_module("fc", torch::nn::Linear(4, 3)); }
  torch::Tensor forward(torch::Tensor x) { return torch::relu(fc(x)); }
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(SmallNet);

TEST_CASE("to(kDouble) runs the graph in float64; what it cannot follow is named") {
  torch::NoGradGuard no_grad;
  torch::manual_seed(0);
  SmallNet model;
  const at::Tensor x = torch::randn({2, 4});
  fx::GraphModule gm = fx::symbolic_trace(model, x);
  gm->to(torch::kDouble);
  model->to(torch::kDouble);
  const at::Tensor y = gm(x.to(torch::kDouble)).toTensor();
  CHECK(y.scalar_type() == torch::kDouble);
  CHECK(torch::allclose(y, model->forward(x.to(torch::kDouble))));
  // float32 inputs are now the wrong dtype.
  CHECK_THROWS_AS(gm(x), fx::GuardError);
  CHECK(gm->graph().placeholders()[0]->meta().get(fx::kGuard)->dtype ==
        c10::ScalarType::Double);

  // A graph naming float32 itself cannot follow, and is left as it was.
  auto f = [](at::Tensor v) {
    return v * torch::ones({3}, torch::dtype(torch::kFloat));
  };
  fx::GraphModule named = fx::symbolic_trace(f, torch::randn({3}));
  CHECK_THROWS_WITH(named->to(torch::kDouble),
                    Catch::Contains("names a floating dtype") &&
                        Catch::Contains("trace the model again"));
  CHECK(named(torch::randn({3})).toTensor().scalar_type() == torch::kFloat);
}
