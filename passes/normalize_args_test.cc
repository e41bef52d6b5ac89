#include "passes/normalize_args.h"

#include <torch/torch.h>

#include "fx/ir/errors.h"
#include "fx/fx.h"
#include "interpreter/interpreter.h"
#include "fx/ir/operator_schemas.h"
#include "models/zoo.h"
#include "testdata/zoo_testing.h"
#include "third_party/catch.h"

namespace {

using fx::Argument;
using fx::Node;
using models::make_zoo_model;
using models::ZooModel;

Node* first(const fx::Graph& graph, const char* op) {
  auto nodes = graph.find_nodes(fx::Opcode::kCallFunction, fx::op(op));
  REQUIRE(!nodes.empty());
  return nodes.front();
}

// Every call_function of an operator passes kwargs only.
bool all_kwargs(const fx::Graph& graph) {
  for (Node* n : graph.nodes()) {
    if (n->op() == fx::Opcode::kCallFunction && n->target().is_operator() &&
        !n->args().empty()) {
      return false;
    }
  }
  return true;
}

TEST_CASE("normalize_args passes every argument by its schema name") {
  ZooModel model = make_zoo_model("resnet18");
  fx::GraphModule gm = models::trace_zoo_model(model);
  REQUIRE(first(gm->graph(), "aten::conv2d")->format_node() ==
          "%conv2d : [#users=1] = call_function[target=aten::conv2d](args = "
          "(%x, %conv1_weight, None, [2, 2], [3, 3]), kwargs = {})");
  CHECK(fx::normalize_args(*gm));
  CHECK(first(gm->graph(), "aten::conv2d")->format_node() ==
        "%conv2d : [#users=1] = call_function[target=aten::conv2d](args = (), "
        "kwargs = {input: %x, weight: %conv1_weight, bias: None, stride: [2, "
        "2], padding: [3, 3], dilation: [1, 1], groups: 1})");
  CHECK(first(gm->graph(), "aten::batch_norm")->format_node() ==
        "%batch_norm : [#users=1] = call_function[target=aten::batch_norm]("
        "args = (), kwargs = {input: %conv2d, weight: %bn1_weight, bias: "
        "%bn1_bias, running_mean: %bn1_running_mean, running_var: "
        "%bn1_running_var, training: False, momentum: 0.1, eps: 1e-05, "
        "cudnn_enabled: True})");
  CHECK(all_kwargs(gm->graph()));
  // Already normalized: nothing changes.
  CHECK_FALSE(fx::normalize_args(*gm));
  gm->graph().lint();
}

TEST_CASE("without fill_defaults, only the arguments given become kwargs") {
  ZooModel model = make_zoo_model("resnet18");
  fx::GraphModule gm = models::trace_zoo_model(model);
  fx::NormalizeOptions options;
  options.fill_defaults = false;
  CHECK(fx::normalize_args(*gm, options));
  CHECK(first(gm->graph(), "aten::conv2d")->format_node() ==
        "%conv2d : [#users=1] = call_function[target=aten::conv2d](args = (), "
        "kwargs = {input: %x, weight: %conv1_weight, bias: None, stride: [2, "
        "2], padding: [3, 3]})");
  // Keyword-only arguments the tracer wrote stay, by name.
  CHECK(first(gm->graph(), "aten::flatten.using_ints")->format_node() ==
        "%flatten : [#users=1] = call_function[target=aten::flatten.using_ints]"
        "(args = (), kwargs = {self: %adaptive_avg_pool2d, start_dim: 1})");
}

TEST_CASE("normalize then denormalize gives back every zoo graph exactly") {
  torch::NoGradGuard no_grad;
  for (const std::string& name : models::traceable_zoo_model_names()) {
    INFO(name);
    ZooModel model = make_zoo_model(name);
    c10::IValue expected = model.forward(model.example_inputs);
    fx::GraphModule gm = models::trace_zoo_model(model);
    const std::string traced = gm->graph().to_string();

    CHECK(fx::normalize_args(*gm));
    CHECK(all_kwargs(gm->graph()));
    CHECK(gm->graph().to_string() != traced);
    gm->recompile();
    testdata::check_outputs_equal(gm->forward(model.example_inputs), expected);
    fx::Interpreter interpreter(gm);
    testdata::check_outputs_equal(interpreter.run(model.example_inputs),
                                  expected);
    CHECK_NOTHROW(gm->code());

    CHECK(fx::denormalize_args(*gm));
    CHECK(gm->graph().to_string() == traced);
    CHECK_FALSE(fx::denormalize_args(*gm));

    fx::NormalizeOptions given_only;
    given_only.fill_defaults = false;
    CHECK(fx::normalize_args(*gm, given_only));
    CHECK(fx::denormalize_args(*gm));
    CHECK(gm->graph().to_string() == traced);
    gm->recompile();
    testdata::check_outputs_equal(gm->forward(model.example_inputs), expected);
  }
}

// A GraphModule over x -> relu(x); the executor checks calls against their
// schemas, so tests break the call after compiling.
fx::GraphModule relu_module() {
  auto g = std::make_unique<fx::Graph>();
  g->output(g->call_function(fx::op("aten::relu"), {g->placeholder("x")}));
  return fx::GraphModule(std::move(g), fx::Attributes());
}

Node* relu_node(fx::GraphModule& gm) {
  return gm->graph()
      .find_nodes(fx::Opcode::kCallFunction, fx::op("aten::relu"))
      .at(0);
}

TEST_CASE("arguments that do not fit the schema are reported with the node") {
  fx::GraphModule unknown = relu_module();
  relu_node(unknown)->set_kwargs({{"inplace", true}});
  CHECK_THROWS_AS(fx::normalize_args(*unknown), fx::GraphError);
  CHECK_THROWS_WITH(fx::normalize_args(*unknown),
                    Catch::Contains("%relu calls aten::relu but it has no "
                                    "argument named 'inplace'") &&
                        Catch::Contains("aten::relu(Tensor self) -> Tensor"));

  fx::GraphModule twice = relu_module();
  Node* x = twice->graph().placeholders().at(0);
  relu_node(twice)->set_kwargs({{"self", x}});
  CHECK_THROWS_WITH(fx::denormalize_args(*twice),
                    Catch::Contains("argument 'self' is given twice"));

  fx::GraphModule many = relu_module();
  Node* y = many->graph().placeholders().at(0);
  relu_node(many)->set_args({y, y});
  CHECK_THROWS_WITH(fx::normalize_args(*many),
                    Catch::Contains("it takes 1 positional argument(s) and is "
                                    "given 2"));

  fx::GraphModule none = relu_module();
  relu_node(none)->set_args({});
  CHECK_THROWS_WITH(fx::normalize_args(*none),
                    Catch::Contains("it does not give argument 'self', which "
                                    "has no default"));
}

TEST_CASE(
    "operator_argument reads an argument wherever it is, or its default") {
  fx::Graph g;
  Node* x = g.placeholder("x");
  Node* dropout =
      g.call_function(fx::op("aten::dropout"), {x, 0.5}, {{"train", false}});
  Node* contiguous = g.call_function(fx::op("aten::contiguous"), {x});
  CHECK(*fx::operator_argument(*dropout, "input") == Argument(x));
  CHECK(*fx::operator_argument(*dropout, "p") == Argument(0.5));
  CHECK(*fx::operator_argument(*dropout, "train") == Argument(false));
  CHECK(*fx::operator_argument(*contiguous, "memory_format") ==
        Argument(c10::MemoryFormat::Contiguous));
  CHECK_FALSE(fx::operator_argument(*contiguous, "dtype").has_value());
  CHECK_THROWS_WITH(fx::operator_argument(*x, "self"),
                    Catch::Contains("%x is a placeholder of x, not a "
                                    "call_function of an operator"));
}

}  // namespace
