#include "passes/subgraph_rewriter.h"

#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <torch/torch.h>

#include "fx/fx.h"
#include "fx/ir/errors.h"
#include "models/zoo.h"
#include "testdata/test_helpers.h"
#include "third_party/catch.h"

namespace fx {
namespace {

using testdata::count_calls;

template <typename F>
GraphModule trace_function(F f, std::vector<c10::IValue> inputs,
                           std::vector<std::string> names = {}) {
  TraceOptions options;
  options.input_names = std::move(names);
  return symbolic_trace(nullptr, box_function(f), inputs, options);
}

std::vector<std::string> targets(const Graph& graph) {
  std::vector<std::string> out;
  for (Node* n : graph.nodes()) {
    if (n->op() == Opcode::kCallFunction) {
      out.push_back(n->target().to_string());
    }
  }
  return out;
}

// (One call per statement: C++ leaves the order of operands unspecified,
// and the order of calls is the order of nodes.)
at::Tensor docs_forward(at::Tensor x, at::Tensor w1, at::Tensor w2) {
  at::Tensor m1 = torch::cat({w1, w2}).sum();
  at::Tensor m2 = torch::cat({w1, w2}).sum();
  at::Tensor y = x + torch::max(m1);
  return y + torch::max(m2);
}

TEST_CASE("torch.fx's documentation example: cat().sum() becomes stack()") {
  at::Tensor x = torch::randn({3}), w1 = torch::randn({2, 3}),
             w2 = torch::randn({2, 3});
  GraphModule gm =
      trace_function(&docs_forward, {x, w1, w2}, {"x", "w1", "w2"});
  std::vector<Match> matches = replace_pattern(
      *gm,
      [](at::Tensor a, at::Tensor b) { return torch::cat({a, b}).sum(); },
      [](at::Tensor a, at::Tensor b) { return torch::stack({a, b}); },
      {torch::randn({1, 1}), torch::randn({1, 1})});

  CHECK((gm->graph().to_string() ==
         "graph():\n"
         "    %x : [#users=1] = placeholder[target=x]\n"
         "    %w1 : [#users=2] = placeholder[target=w1]\n"
         "    %w2 : [#users=2] = placeholder[target=w2]\n"
         "    %stack : [#users=1] = call_function[target=aten::stack](args = "
         "([%w1, %w2],), kwargs = {})\n"
         "    %stack_1 : [#users=1] = call_function[target=aten::stack](args = "
         "([%w1, %w2],), kwargs = {})\n"
         "    %max : [#users=1] = call_function[target=aten::max](args = "
         "(%stack,), kwargs = {})\n"
         "    %add : [#users=1] = call_function[target=aten::add.Tensor](args "
         "= (%x, %max), kwargs = {})\n"
         "    %max_1 : [#users=1] = call_function[target=aten::max](args = "
         "(%stack_1,), kwargs = {})\n"
         "    %add_1 : [#users=1] = call_function[target=aten::add.Tensor]"
         "(args = (%add, %max_1), kwargs = {})\n"
         "    return add_1"));
  at::Tensor stacked = torch::stack({w1, w2});
  CHECK(torch::equal(gm(x, w1, w2).toTensor(),
                     x + torch::max(stacked) + torch::max(stacked)));

  // The matches name what they replaced and point to what replaced it.
  REQUIRE(matches.size() == 2);
  CHECK(matches[0].anchor == "sum");
  CHECK(matches[1].anchor == "sum_1");
  CHECK((matches[0].nodes_map ==
         std::map<std::string, std::string>{{"cat", "cat"}, {"sum", "sum"}}));
  CHECK((matches[1].nodes_map ==
         std::map<std::string, std::string>{{"cat", "cat_1"},
                                            {"sum", "sum_1"}}));
  std::vector<Node*> placeholders = gm->graph().placeholders();
  for (const Match& m : matches) {
    REQUIRE(m.inputs.size() == 2);
    CHECK(m.inputs[0].to_node() == placeholders[1]);
    CHECK(m.inputs[1].to_node() == placeholders[2]);
    REQUIRE(m.outputs.size() == 1);
    REQUIRE(m.replacement_nodes.size() == 1);
    CHECK(m.outputs[0] == m.replacement_nodes[0]);
  }
  CHECK(matches[0].outputs[0]->name() == "stack");
  CHECK(matches[1].outputs[0]->name() == "stack_1");
}

TEST_CASE("the header's example: relu(add(x, y)) becomes clamp_min(x + y, 0)") {
  GraphModule gm = trace_function(
      [](at::Tensor x, at::Tensor bias) {
        return torch::relu(torch::add(x, bias)) * x;
      },
      {torch::randn({4}), torch::randn({4})}, {"x", "bias"});
  std::vector<Match> matches = replace_pattern(
      *gm,
      [](at::Tensor x, at::Tensor y) { return torch::relu(x + y); },
      [](at::Tensor x, at::Tensor y) { return torch::clamp_min(x + y, 0); },
      {torch::randn({2}), torch::randn({2})});
  REQUIRE(matches.size() == 1);
  CHECK((gm->graph().to_string() ==
         "graph():\n"
         "    %x : [#users=2] = placeholder[target=x]\n"
         "    %bias : [#users=1] = placeholder[target=bias]\n"
         "    %add_1 : [#users=1] = call_function[target=aten::add.Tensor]"
         "(args = (%x, %bias), kwargs = {})\n"
         "    %clamp_min : [#users=1] = call_function[target=aten::clamp_min]"
         "(args = (%add_1, 0), kwargs = {})\n"
         "    %mul : [#users=1] = call_function[target=aten::mul.Tensor](args "
         "= (%clamp_min, %x), kwargs = {})\n"
         "    return mul"));
  // The node taking the pattern's result's place takes its metadata too.
  const TensorMeta* tm = matches[0].outputs[0]->meta().get(kTensorMeta);
  REQUIRE(tm != nullptr);
  CHECK((tm->sizes == std::vector<int64_t>{4}));
  CHECK(matches[0].replacement_nodes[0]->meta().get(kTensorMeta) == nullptr);
}

models::ZooModel resnet18() { return models::make_zoo_model("resnet18"); }

TEST_CASE("every relu_ of ResNet-18 becomes clamp_min_(x, 0), same output") {
  torch::NoGradGuard no_grad;
  models::ZooModel model = resnet18();
  GraphModule gm = models::trace_zoo_model(model);
  std::shared_ptr<GraphModuleImpl> original = gm->copy();
  const size_t relus = count_calls(gm->graph(), "aten::relu_");
  REQUIRE(relus == 17);
  std::vector<Node*> relu_nodes =
      gm->graph().find_nodes(Opcode::kCallFunction, op("aten::relu_"));
  const TensorMeta stem_meta = *relu_nodes[0]->meta().get(kTensorMeta);

  std::vector<Match> matches = replace_pattern(
      *gm, [](at::Tensor x) { return torch::relu_(x); },
      [](at::Tensor x) { return torch::clamp_min_(x, 0); },
      {torch::randn({1, 1, 1, 1})});

  CHECK(matches.size() == relus);
  CHECK(count_calls(gm->graph(), "aten::relu_") == 0);
  CHECK(count_calls(gm->graph(), "aten::clamp_min_") == relus);
  gm->graph().lint();
  CHECK(matches[0].anchor == "relu_");
  CHECK(matches[0].outputs[0]->target() == op("aten::clamp_min_"));
  CHECK(matches[0].outputs[0]->args()[1] == Argument(0));
  CHECK(*matches[0].outputs[0]->meta().get(kTensorMeta) == stem_meta);
  // In place: the write stays where it was, right after batch_norm.
  CHECK(matches[0].outputs[0]->prev()->target() == op("aten::batch_norm"));
  at::Tensor input = model.example_inputs[0].toTensor();
  CHECK(torch::equal(gm(input).toTensor(),
                     original->forward({input}).toTensor()));
}

// batch_norm as ResNet's BatchNorm2d calls it in eval mode.
at::Tensor bn_relu(at::Tensor x, at::Tensor w, at::Tensor b, at::Tensor mean,
                   at::Tensor var, double eps) {
  return torch::batch_norm(x, w, b, mean, var, false, 0.1, eps, true)
      .relu_();
}

TEST_CASE("bn + relu_ in ResNet-18: literal arguments must match exactly") {
  torch::NoGradGuard no_grad;
  models::ZooModel model = resnet18();
  GraphModule gm = models::trace_zoo_model(model);
  std::shared_ptr<GraphModuleImpl> original = gm->copy();
  std::vector<c10::IValue> examples = {
      torch::randn({1, 3, 4, 4}), torch::randn({3}), torch::randn({3}),
      torch::randn({3}), torch::rand({3})};
  auto replacement = [](at::Tensor x, at::Tensor w, at::Tensor b,
                        at::Tensor mean, at::Tensor var) {
    return torch::relu(
        torch::batch_norm(x, w, b, mean, var, false, 0.1, 1e-5, true));
  };

  // eps=1e-3 is not the model's 1e-05: nothing matches, nothing changes.
  const std::string before = gm->graph().to_string();
  std::vector<Match> none = replace_pattern(
      *gm,
      [](at::Tensor x, at::Tensor w, at::Tensor b, at::Tensor mean,
         at::Tensor var) { return bn_relu(x, w, b, mean, var, 1e-3); },
      replacement, examples);
  CHECK(none.empty());
  CHECK(gm->graph().to_string() == before);

  // The stem's and each block's first batch_norm feed relu_ directly; the
  // second goes through add_ first.
  std::vector<Match> matches = replace_pattern(
      *gm,
      [](at::Tensor x, at::Tensor w, at::Tensor b, at::Tensor mean,
         at::Tensor var) { return bn_relu(x, w, b, mean, var, 1e-5); },
      replacement, examples);
  CHECK(matches.size() == 9);
  CHECK(count_calls(gm->graph(), "aten::relu_") == 17 - 9);
  CHECK(count_calls(gm->graph(), "aten::relu") == 9);
  CHECK(count_calls(gm->graph(), "aten::batch_norm") == 20);
  // The placeholders matched the BatchNorm's get_attr nodes.
  CHECK(matches[0].inputs[1].to_node()->target().str() == "bn1.weight");
  CHECK(matches[1].inputs[4].to_node()->target().str() ==
        "layer1.0.bn1.running_var");
  // The copies carry the module path of the matched nodes: batch_norm's
  // (relu_, called in forward, has none).
  for (Node* copy : matches[1].replacement_nodes) {
    const std::string* path = copy->meta().get(kModulePath);
    REQUIRE(path != nullptr);
    CHECK(*path == "layer1.0.bn1");
  }
  at::Tensor input = model.example_inputs[0].toTensor();
  CHECK(torch::equal(gm(input).toTensor(),
                     original->forward({input}).toTensor()));
}

TEST_CASE("matches do not overlap: the first in program order wins") {
  auto relu_relu = [](at::Tensor x) { return torch::relu(torch::relu(x)); };
  auto sigmoid = [](at::Tensor x) { return torch::sigmoid(x); };
  at::Tensor x = torch::randn({8});

  // relu(relu(relu(x))): (relu, relu_1) and (relu_1, relu_2) overlap.
  GraphModule three = trace_function(
      [](at::Tensor x) { return torch::relu(torch::relu(torch::relu(x))); },
      {x});
  std::vector<Match> matches =
      replace_pattern(*three, relu_relu, sigmoid, {torch::randn({1})});
  REQUIRE(matches.size() == 1);
  CHECK(matches[0].anchor == "relu_1");
  CHECK((targets(three->graph()) ==
         std::vector<std::string>{"aten::sigmoid", "aten::relu"}));
  CHECK(torch::equal(three(x).toTensor(), torch::relu(torch::sigmoid(x))));

  // Four: two matches, the second fed by the first's result.
  GraphModule four = trace_function(
      [](at::Tensor x) {
        return torch::relu(torch::relu(torch::relu(torch::relu(x))));
      },
      {x});
  matches = replace_pattern(*four, relu_relu, sigmoid, {torch::randn({1})});
  REQUIRE(matches.size() == 2);
  CHECK((targets(four->graph()) ==
         std::vector<std::string>{"aten::sigmoid", "aten::sigmoid"}));
  CHECK(matches[1].inputs[0].to_node() == matches[0].outputs[0]);
  CHECK(torch::equal(four(x).toTensor(), torch::sigmoid(torch::sigmoid(x))));
}

TEST_CASE("a pattern whose intermediate value is used outside does not match") {
  auto pattern = [](at::Tensor x) { return torch::sigmoid(torch::relu(x)); };
  auto replacement = [](at::Tensor x) { return torch::tanh(x); };
  at::Tensor x = torch::randn({8});

  GraphModule leaks = trace_function(
      [](at::Tensor x) {
        at::Tensor a = torch::relu(x);
        return torch::sigmoid(a) + a;
      },
      {x});
  const std::string before = leaks->graph().to_string();
  CHECK(replace_pattern(*leaks, pattern, replacement, {x}).empty());
  CHECK(leaks->graph().to_string() == before);

  GraphModule contained = trace_function(
      [](at::Tensor x) { return torch::sigmoid(torch::relu(x)) * 2; }, {x});
  CHECK(replace_pattern(*contained, pattern, replacement, {x}).size() == 1);
  CHECK(torch::equal(contained(x).toTensor(), torch::tanh(x) * 2));
}

TEST_CASE("literal arguments: add(x, y, 2) matches only alpha=2") {
  at::Tensor x = torch::randn({4}), y = torch::randn({4});
  GraphModule gm = trace_function(
      [](at::Tensor x, at::Tensor y) {
        at::Tensor a = torch::add(x, y);
        at::Tensor b = torch::add(x, y, 2);
        at::Tensor c = torch::add(x, y, 3);
        at::Tensor d = torch::add(x, y, 2.0);
        return a + b + c + d;
      },
      {x, y});
  std::vector<Match> matches = replace_pattern(
      *gm, [](at::Tensor x, at::Tensor y) { return torch::add(x, y, 2); },
      [](at::Tensor x, at::Tensor y) { return torch::sub(x, y); }, {x, y});
  // alpha=2.0 (a double) is another literal than 2.
  REQUIRE(matches.size() == 1);
  CHECK(matches[0].anchor == "add_1");
  CHECK(count_calls(gm->graph(), "aten::sub.Tensor") == 1);
  CHECK(torch::allclose(gm(x, y).toTensor(),
                        (x + y) + (x - y) + (x + 3 * y) + (x + 2 * y)));
}

TEST_CASE("a placeholder used twice matches the same value twice") {
  at::Tensor x = torch::randn({4}), y = torch::randn({4});
  GraphModule gm = trace_function(
      [](at::Tensor x, at::Tensor y) {
        at::Tensor square = x * x;
        return square + x * y;
      },
      {x, y});
  std::vector<Match> matches = replace_pattern(
      *gm, [](at::Tensor a) { return a * a; },
      [](at::Tensor a) { return torch::pow(a, 2); }, {x});
  REQUIRE(matches.size() == 1);
  CHECK(matches[0].anchor == "mul");
  CHECK(count_calls(gm->graph(), "aten::mul.Tensor") == 1);
  CHECK(torch::allclose(gm(x, y).toTensor(), x * x + x * y));
}

TEST_CASE("a pattern with two results, one used between the match's nodes") {
  auto pattern = [](at::Tensor x) {
    at::Tensor a = torch::relu(x);
    return std::make_tuple(a, torch::sigmoid(a));
  };
  auto replacement = [](at::Tensor x) {
    at::Tensor a = torch::clamp_min(x, 0);
    return std::make_tuple(a, torch::sigmoid(a));
  };
  at::Tensor x = torch::randn({8});

  // %mul uses the first result before the match's last node: the
  // replacement goes before %mul.
  GraphModule gm = trace_function(
      [](at::Tensor x) {
        at::Tensor a = torch::relu(x);
        at::Tensor c = a * 2;
        return c + torch::sigmoid(a);
      },
      {x});
  std::vector<Match> matches = replace_pattern(*gm, pattern, replacement, {x});
  REQUIRE(matches.size() == 1);
  CHECK(matches[0].anchor == "sigmoid");
  REQUIRE(matches[0].outputs.size() == 2);
  CHECK((targets(gm->graph()) ==
         std::vector<std::string>{"aten::clamp_min", "aten::sigmoid",
                                  "aten::mul.Scalar", "aten::add.Tensor"}));
  CHECK(torch::equal(gm(x).toTensor(),
                     torch::relu(x) * 2 + torch::sigmoid(torch::relu(x))));

  // Here the match's own input %mul needs its first result: no place for
  // the replacement keeps the graph valid, so it is not replaced.
  auto chained = [](at::Tensor x, at::Tensor y) {
    at::Tensor a = torch::relu(x);
    return std::make_tuple(a, a + y);
  };
  GraphModule cyclic = trace_function(
      [](at::Tensor x) {
        at::Tensor a = torch::relu(x);
        at::Tensor u = a * 2;
        return a + u;
      },
      {x});
  const std::string before = cyclic->graph().to_string();
  CHECK(replace_pattern(*cyclic, chained, chained, {x, x}).empty());
  CHECK(cyclic->graph().to_string() == before);
}

TEST_CASE("constants traced in the replacement are registered on the module") {
  at::Tensor x = torch::randn({5});
  GraphModule gm = trace_function(
      [](at::Tensor x) { return torch::relu(x) * torch::tensor({3.0f}); }, {x});
  REQUIRE(gm->has_tensor_attribute("_tensor_constant0"));
  std::vector<Match> matches = replace_pattern(
      *gm, [](at::Tensor x) { return torch::relu(x); },
      [](at::Tensor x) {
        return torch::clamp_min(x, 0) * torch::tensor({2.0f});
      },
      {x});
  REQUIRE(matches.size() == 1);
  // The module's own _tensor_constant0 keeps its name; the replacement's
  // gets a new one. (torch::tensor traces as a constant filled in place by
  // nodes, which are copied too.)
  std::set<std::string> constants;
  for (Node* n : gm->graph().find_nodes(Opcode::kGetAttr)) {
    constants.insert(n->target().str());
  }
  CHECK((constants ==
         std::set<std::string>{"_tensor_constant0", "_tensor_constant0_1"}));
  CHECK(gm->fetch_attr("_tensor_constant0_1").unsafeGetTensorImpl() !=
        gm->fetch_attr("_tensor_constant0").unsafeGetTensorImpl());
  CHECK(torch::equal(gm(x).toTensor(), torch::relu(x) * 2 * 3));
}

TEST_CASE("malformed patterns are rejected before anything changes") {
  at::Tensor x = torch::randn({4});
  GraphModule gm = trace_function(
      [](at::Tensor x, at::Tensor y) { return torch::relu(x) + y; }, {x, x});
  const std::string before = gm->graph().to_string();
  // Different numbers of inputs.
  GraphModule one_input =
      trace_function([](at::Tensor x) { return torch::relu(x); }, {x});
  GraphModule two_inputs = trace_function(
      [](at::Tensor x, at::Tensor y) { return x + y; }, {x, x});
  CHECK_THROWS_AS(
      replace_pattern(*gm, one_input->graph(), two_inputs->graph()),
      GraphError);
  // An unused pattern input would match anything.
  CHECK_THROWS_AS(
      replace_pattern(
          *gm, [](at::Tensor x, at::Tensor) { return torch::relu(x); },
          [](at::Tensor x, at::Tensor) { return x; }, {x, x}),
      GraphError);
  // The module's own graph as the pattern.
  CHECK_THROWS_AS(replace_pattern(*gm, gm->graph(), gm->graph()), GraphError);
  CHECK(gm->graph().to_string() == before);
}

}  // namespace
}  // namespace fx
