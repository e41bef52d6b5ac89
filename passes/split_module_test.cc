#include "passes/split_module.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "fx/fx.h"
#include "fx/ir/errors.h"
#include "models/zoo.h"
#include "third_party/catch.h"

namespace fx {
namespace {

template <typename F>
GraphModule trace_function(F f, std::vector<c10::IValue> inputs) {
  return symbolic_trace(nullptr, box_function(f), inputs);
}

// Partitions by operator name.
std::function<int64_t(const Node&)> by_operator(
    std::map<std::string, int64_t> partitions) {
  return [partitions](const Node& n) {
    return partitions.at(n.target().op().schema().name());
  };
}

std::shared_ptr<GraphModuleImpl> submodule(const GraphModule& split,
                                           const std::string& name) {
  const LeafModule* leaf = split->leaf_module(name);
  REQUIRE(leaf != nullptr);
  auto module = std::dynamic_pointer_cast<GraphModuleImpl>(leaf->module);
  REQUIRE(module != nullptr);
  return module;
}

std::vector<std::string> called_modules(const Graph& graph) {
  std::vector<std::string> out;
  for (Node* n : graph.find_nodes(Opcode::kCallModule)) {
    out.push_back(n->target().str());
  }
  return out;
}

TEST_CASE("the header's example: a partition feeding two later ones") {
  at::Tensor x = torch::randn({3, 4});
  GraphModule gm = trace_function(
      [](at::Tensor x) {
        at::Tensor r = torch::relu(x);
        at::Tensor n = torch::neg(x);
        at::Tensor s = torch::sigmoid(r);
        at::Tensor t = torch::tanh(n);
        return torch::add(s, t);
      },
      {x});
  GraphModule split = split_module(
      gm, by_operator({{"aten::relu", 0},
                       {"aten::neg", 0},
                       {"aten::sigmoid", 1},
                       {"aten::tanh", 2},
                       {"aten::add", 1}}));
  CHECK((split->graph().to_string() ==
         "graph():\n"
         "    %x : [#users=1] = placeholder[target=x]\n"
         "    %submod_0 : [#users=2] = call_module[target=submod_0](args = "
         "(%x,), kwargs = {})\n"
         "    %relu : [#users=1] = call_function[target=getitem](args = "
         "(%submod_0, 0), kwargs = {})\n"
         "    %neg : [#users=1] = call_function[target=getitem](args = "
         "(%submod_0, 1), kwargs = {})\n"
         "    %submod_2 : [#users=1] = call_module[target=submod_2](args = "
         "(%neg,), kwargs = {})\n"
         "    %submod_1 : [#users=1] = call_module[target=submod_1](args = "
         "(%relu, %submod_2), kwargs = {})\n"
         "    return submod_1"));
  CHECK((submodule(split, "submod_0")->graph().to_string() ==
         "graph():\n"
         "    %x : [#users=2] = placeholder[target=x]\n"
         "    %relu : [#users=1] = call_function[target=aten::relu](args = "
         "(%x,), kwargs = {})\n"
         "    %neg : [#users=1] = call_function[target=aten::neg](args = "
         "(%x,), kwargs = {})\n"
         "    return (relu, neg)"));
  CHECK((submodule(split, "submod_1")->graph().to_string() ==
         "graph():\n"
         "    %relu : [#users=1] = placeholder[target=relu]\n"
         "    %tanh : [#users=1] = placeholder[target=tanh]\n"
         "    %sigmoid : [#users=1] = call_function[target=aten::sigmoid](args "
         "= (%relu,), kwargs = {})\n"
         "    %add : [#users=1] = call_function[target=aten::add.Tensor](args "
         "= (%sigmoid, %tanh), kwargs = {})\n"
         "    return add"));
  CHECK(torch::equal(split(x).toTensor(), gm(x).toTensor()));
  // The values crossing keep their metadata.
  std::vector<Node*> nodes = split->graph().nodes().to_vector();
  const TensorMeta* tm = nodes[2]->meta().get(kTensorMeta);
  REQUIRE(tm != nullptr);
  CHECK((tm->sizes == std::vector<int64_t>{3, 4}));
  const auto* list = nodes[1]->meta().get(kTensorMetaList);
  REQUIRE(list != nullptr);
  CHECK(list->size() == 2);
}

// ResNet-18 in four stages by module path: the stem, layer1-2, layer3-4 and
// the head. Nodes traced in a forward without a module call of their own
// (relu_, add_, pooling) have no path and stay in the current stage.
int64_t resnet_stage(const Node& n, int64_t* current) {
  if (const std::string* path = n.meta().get(kModulePath)) {
    const std::string top = path->substr(0, path->find('.'));
    if (top == "layer1" || top == "layer2") {
      *current = 1;
    } else if (top == "layer3" || top == "layer4") {
      *current = 2;
    } else if (top == "fc") {
      *current = 3;
    }
  }
  return *current;
}

TEST_CASE("ResNet-18 split in four stages runs bitwise as the original") {
  torch::NoGradGuard no_grad;
  models::ZooModel model = models::make_zoo_model("resnet18");
  GraphModule gm = models::trace_zoo_model(model);
  int64_t current = 0;
  GraphModule split = split_module(
      gm, [&](const Node& n) { return resnet_stage(n, &current); });

  CHECK((called_modules(split->graph()) ==
         std::vector<std::string>{"submod_0", "submod_1", "submod_2",
                                  "submod_3"}));
  split->graph().lint();
  std::map<std::string, int> crossing;  // stage -> number of inputs
  size_t nodes = 0;
  for (const std::string& name : called_modules(split->graph())) {
    std::shared_ptr<GraphModuleImpl> stage = submodule(split, name);
    stage->graph().lint();
    crossing[name] = static_cast<int>(stage->graph().placeholders().size());
    nodes += stage->graph().size();
  }
  // One tensor flows from each stage to the next.
  CHECK((crossing == std::map<std::string, int>{{"submod_0", 1},
                                                {"submod_1", 1},
                                                {"submod_2", 1},
                                                {"submod_3", 1}}));
  // Each stage's graph: the original nodes plus a placeholder and an output.
  CHECK(nodes == gm->graph().size() - 2 + 2 * 4);

  // Parameters and buffers are the original tensors, under the stage.
  auto split_tensors = split->named_parameters(/*recurse=*/true);
  for (const auto& item : gm->named_parameters(/*recurse=*/true)) {
    const std::string& path = item.key();
    const std::string stage =
        path.rfind("layer1", 0) == 0 || path.rfind("layer2", 0) == 0
            ? "submod_1"
        : path.rfind("layer3", 0) == 0 || path.rfind("layer4", 0) == 0
            ? "submod_2"
        : path.rfind("fc", 0) == 0 ? "submod_3"
                                   : "submod_0";
    INFO(path);
    const at::Tensor* shared = split_tensors.find(stage + "." + path);
    REQUIRE(shared != nullptr);
    CHECK(shared->unsafeGetTensorImpl() == item.value().unsafeGetTensorImpl());
  }
  CHECK(split_tensors.size() == gm->named_parameters(true).size());

  at::Tensor input = model.example_inputs[0].toTensor();
  at::Tensor expected = gm(input).toTensor();
  CHECK(torch::equal(split(input).toTensor(), expected));
  CHECK(torch::equal(model.forward(model.example_inputs).toTensor(), expected));
  // The input guards stay on the result.
  CHECK_THROWS_AS(split(torch::randn({1, 3, 224})), GuardError);
}

TEST_CASE("an MLP split per layer") {
  torch::NoGradGuard no_grad;
  models::ZooModel model = models::make_zoo_model("mlp");
  GraphModule gm = models::trace_zoo_model(model);
  int64_t current = 0;
  GraphModule split = split_module(gm, [&](const Node& n) {
    if (const std::string* path = n.meta().get(kModulePath)) {
      current = std::stoll(path->substr(std::string("fc").size())) - 1;
    }
    return current;
  });
  CHECK((called_modules(split->graph()) ==
         std::vector<std::string>{"submod_0", "submod_1", "submod_2"}));
  CHECK((submodule(split, "submod_1")->graph().to_string() ==
         "graph():\n"
         "    %relu : [#users=1] = placeholder[target=relu]\n"
         "    %fc2_weight : [#users=1] = get_attr[target=fc2.weight]\n"
         "    %t_1 : [#users=1] = call_function[target=aten::t](args = "
         "(%fc2_weight,), kwargs = {})\n"
         "    %fc2_bias : [#users=1] = get_attr[target=fc2.bias]\n"
         "    %addmm_1 : [#users=1] = call_function[target=aten::addmm](args = "
         "(%fc2_bias, %relu, %t_1), kwargs = {})\n"
         "    %relu_1 : [#users=1] = call_function[target=aten::relu](args = "
         "(%addmm_1,), kwargs = {})\n"
         "    return relu_1"));
  CHECK(submodule(split, "submod_1")->fetch_attr("fc2.weight")
            .unsafeGetTensorImpl() ==
        gm->fetch_attr("fc2.weight").unsafeGetTensorImpl());
  at::Tensor input = model.example_inputs[0].toTensor();
  CHECK(torch::equal(split(input).toTensor(), gm(input).toTensor()));
}

TEST_CASE("partitions that use each other throw, naming the cycle") {
  models::ZooModel model = models::make_zoo_model("mlp");
  GraphModule gm = models::trace_zoo_model(model);
  // fc1's addmm in 0, its relu in 1, fc2's addmm back in 0.
  auto cyclic = [](const Node& n) -> int64_t {
    return n.name() == "relu" ? 1 : 0;
  };
  CHECK_THROWS_AS(split_module(gm, cyclic), GraphError);
  // (c10::Error's what() ends the message with a newline.)
  CHECK_THROWS_WITH(
      split_module(gm, cyclic),
      Catch::Contains(
          "split_module: the partitions depend on each other in a cycle, so "
          "no order runs them: partition 0 -> partition 1 (%relu uses "
          "%addmm), partition 1 -> partition 0 (%addmm_1 uses %relu); assign "
          "nodes so that each partition uses only values of partitions that "
          "can run before it"));
  CHECK_THROWS_AS(split_module(gm, [](const Node&) -> int64_t { return -1; }),
                  GraphError);
}

at::Tensor read_then_write(at::Tensor x) {
  at::Tensor a = torch::relu(x);
  at::Tensor n = torch::neg(x);
  at::Tensor s = torch::sigmoid(a);
  a.mul_(2);
  at::Tensor sum = torch::add(n, s);
  return torch::add(sum, a);
}

TEST_CASE("a write in place runs after reads of the old value elsewhere") {
  at::Tensor x = torch::randn({6});
  GraphModule gm = trace_function(&read_then_write, {x});
  // mul_ writes relu's value, which sigmoid (in partition 2) reads first:
  // partition 2 must run before partition 1, though 1 appears first.
  GraphModule split = split_module(gm, by_operator({{"aten::relu", 0},
                                                    {"aten::neg", 1},
                                                    {"aten::sigmoid", 2},
                                                    {"aten::mul_", 1},
                                                    {"aten::add", 3}}));
  CHECK((called_modules(split->graph()) ==
         std::vector<std::string>{"submod_0", "submod_2", "submod_1",
                                  "submod_3"}));
  CHECK(torch::equal(split(x).toTensor(), read_then_write(x)));

  // With the write and the read's producer together, no order works.
  CHECK_THROWS_WITH(
      split_module(gm, by_operator({{"aten::relu", 0},
                                    {"aten::neg", 0},
                                    {"aten::sigmoid", 1},
                                    {"aten::mul_", 0},
                                    {"aten::add", 2}})),
      Catch::Contains("partition 1 -> partition 0 (%mul_ writes %relu in "
                      "place, which %sigmoid reads before)"));
}

TEST_CASE("a returned parameter, and a partition with no outputs") {
  // The graph returns a parameter directly; the in-place write to the input
  // is used by nothing, but its partition still runs.
  torch::nn::Linear linear(2, 2);
  GraphModule gm = symbolic_trace(
      linear.ptr(),
      [linear](const std::vector<c10::IValue>& in) mutable -> c10::IValue {
        at::Tensor x = in[0].toTensor();
        at::Tensor y = linear(x);
        x.add_(1);
        return c10::ivalue::Tuple::create({y, linear->weight});
      },
      {torch::randn({3, 2})});
  int64_t next = 0;
  GraphModule split =
      split_module(gm, [&](const Node&) -> int64_t { return next++; });
  CHECK((called_modules(split->graph()) ==
         std::vector<std::string>{"submod_0", "submod_1", "submod_2"}));
  CHECK(submodule(split, "submod_2")->graph().output_node()->args()[0] ==
        Argument());
  at::Tensor x = torch::randn({3, 2});
  at::Tensor x_copy = x.clone();
  auto expected = gm(x_copy).toTupleRef().elements();
  auto got = split(x).toTupleRef().elements();
  REQUIRE(got.size() == 2);
  CHECK(torch::equal(got[0].toTensor(), expected[0].toTensor()));
  CHECK(got[1].toTensor().unsafeGetTensorImpl() ==
        linear->weight.unsafeGetTensorImpl());
  CHECK(torch::equal(x, x_copy));
}

}  // namespace
}  // namespace fx
