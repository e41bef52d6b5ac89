#include "interpreter/shape_prop.h"

#include <torch/torch.h>

#include "absl/container/flat_hash_set.h"
#include "fx/fx.h"
#include "models/zoo.h"
#include "third_party/catch.h"

namespace {

using fx::Node;
using fx::Opcode;

// x -> linear -> relu -> (max over dim 1: values, indices) -> transpose;
// written by hand, so no node has metadata.
struct HandBuilt {
  fx::GraphModule gm{nullptr};
  torch::nn::Linear fc{nullptr};
};

HandBuilt hand_built() {
  HandBuilt h;
  h.fc = torch::nn::Linear(3, 5);
  auto g = std::make_unique<fx::Graph>();
  Node* x = g->placeholder("x");
  Node* w = g->get_attr("fc.weight");
  Node* b = g->get_attr("fc.bias");
  Node* linear = g->call_function(fx::op("aten::linear"), {x, w, b});
  Node* relu = g->call_function(fx::op("aten::relu"), {linear});
  Node* max = g->call_function(fx::op("aten::max.dim"), {relu, 1});
  Node* indices = g->call_function(fx::getitem(), {max, 1});
  Node* t = g->call_function(fx::op("aten::transpose.int"), {relu, 0, 1});
  Node* size = g->call_function(fx::op("aten::size.int"), {relu, 0});
  g->output(fx::Argument::tuple({t, indices, size}));
  fx::Attributes attributes;
  attributes.parameters["fc.weight"] = h.fc->weight;
  attributes.parameters["fc.bias"] = h.fc->bias;
  h.gm = fx::GraphModule(std::move(g), attributes);
  return h;
}

fx::TensorMeta meta_of(const Node* node) {
  INFO(node->format_node());
  const fx::TensorMeta* tm = node->meta().get(fx::kTensorMeta);
  REQUIRE(tm != nullptr);
  return *tm;
}

Node* by_name(const fx::Graph& graph, const std::string& name) {
  for (Node* n : graph.nodes()) {
    if (n->name() == name) return n;
  }
  FAIL("no node named " << name);
  return nullptr;
}

TEST_CASE(
    "ShapeProp records the metadata of every value of a hand-built "
    "graph") {
  torch::NoGradGuard no_grad;
  HandBuilt h = hand_built();
  const fx::Graph& graph = h.gm->graph();
  for (Node* n : graph.nodes()) CHECK(n->meta().empty());

  auto x = torch::randn({4, 3});
  c10::IValue out = fx::ShapeProp(h.gm).propagate({x});

  // The real values, computed eagerly.
  at::Tensor linear = torch::linear(x, h.fc->weight, h.fc->bias);
  at::Tensor relu = torch::relu(linear);
  auto [values, indices] = torch::max(relu, 1);
  at::Tensor t = relu.transpose(0, 1);
  CHECK(meta_of(by_name(graph, "x")) == fx::tensor_meta_of(x));
  CHECK(meta_of(by_name(graph, "fc_weight")) ==
        fx::tensor_meta_of(h.fc->weight));
  CHECK(meta_of(by_name(graph, "fc_weight")).requires_grad);
  CHECK(meta_of(by_name(graph, "linear")) == fx::tensor_meta_of(linear));
  CHECK(meta_of(by_name(graph, "relu")) == fx::tensor_meta_of(relu));
  CHECK(meta_of(by_name(graph, "getitem")) == fx::tensor_meta_of(indices));
  CHECK(meta_of(by_name(graph, "getitem")).dtype == c10::ScalarType::Long);

  // A transposed view: strides that follow no memory format.
  fx::TensorMeta tm = meta_of(by_name(graph, "transpose"));
  CHECK(tm.sizes == std::vector<int64_t>{5, 4});
  CHECK(tm.strides == std::vector<int64_t>{1, 5});
  CHECK(tm.memory_format == c10::MemoryFormat::Preserve);
  CHECK(tm == fx::tensor_meta_of(t));

  // Several outputs: one entry per element.
  const auto* list = by_name(graph, "max")->meta().get(fx::kTensorMetaList);
  REQUIRE(list != nullptr);
  CHECK(
      (*list == std::vector<fx::TensorMeta>{fx::tensor_meta_of(values),
                                            fx::tensor_meta_of(indices)}));
  // An int is no tensor: no metadata.
  CHECK(!by_name(graph, "size")->meta().contains(fx::kTensorMeta.name));
  CHECK(!by_name(graph, "size")->meta().contains(fx::kTensorMetaList.name));
  // A tuple holding an int is not a list of tensors either.
  CHECK(graph.output_node()->meta().empty());

  REQUIRE(out.isTuple());
  CHECK(torch::equal(out.toTupleRef().elements()[0].toTensor(), t));
}

TEST_CASE("ShapeProp overwrites metadata and erases what no longer holds") {
  torch::NoGradGuard no_grad;
  HandBuilt h = hand_built();
  fx::Graph& graph = h.gm->graph();
  fx::ShapeProp prop(h.gm);
  prop.propagate({torch::randn({4, 3})});
  CHECK(meta_of(by_name(graph, "relu")).sizes == std::vector<int64_t>{4, 5});

  // A stale tensor meta on a node whose value is an int goes away.
  by_name(graph, "size")->meta().set(fx::kTensorMeta, fx::TensorMeta{});
  prop.propagate({torch::randn({7, 3})});
  CHECK(meta_of(by_name(graph, "relu")).sizes == std::vector<int64_t>{7, 5});
  CHECK(meta_of(by_name(graph, "getitem")).sizes == std::vector<int64_t>{7});
  CHECK(!by_name(graph, "size")->meta().contains(fx::kTensorMeta.name));

  // With the output printed per node.
  CHECK(graph.to_string(fx::PrintOptions{.tensor_meta = true}) ==
        "graph():\n"
        "    %x : f32[7, 3] [#users=1] = placeholder[target=x]\n"
        "    %fc_weight : f32[5, 3] [#users=1] = get_attr[target=fc.weight]\n"
        "    %fc_bias : f32[5] [#users=1] = get_attr[target=fc.bias]\n"
        "    %linear : f32[7, 5] [#users=1] = call_function[target=aten::"
        "linear](args = (%x, %fc_weight, %fc_bias), kwargs = {})\n"
        "    %relu : f32[7, 5] [#users=3] = call_function[target=aten::relu]"
        "(args = (%linear,), kwargs = {})\n"
        "    %max : (f32[7], i64[7]) [#users=1] = call_function[target=aten::"
        "max.dim](args = (%relu, 1), kwargs = {})\n"
        "    %getitem : i64[7] [#users=1] = call_function[target=getitem]"
        "(args = (%max, 1), kwargs = {})\n"
        "    %transpose : f32[5, 7]{1, 5} [#users=1] = call_function[target="
        "aten::transpose.int](args = (%relu, 0, 1), kwargs = {})\n"
        "    %size : [#users=1] = call_function[target=aten::size.int](args "
        "= (%relu, 0), kwargs = {})\n"
        "    return (transpose, getitem, size)");

  // A failing run names the node and leaves the metadata as it was.
  CHECK_THROWS_WITH(prop.propagate({torch::randn({7, 4})}),
                    Catch::Contains("%linear"));
  CHECK(meta_of(by_name(graph, "relu")).sizes == std::vector<int64_t>{7, 5});
}

fx::GraphModule trace(const models::ZooModel& model,
                      std::vector<c10::IValue> inputs) {
  fx::TraceOptions options;
  options.leaf_modules = model.leaf_modules;
  return fx::symbolic_trace(model.module, model.forward, inputs, options);
}

// Propagating new inputs through a traced graph gives, node by node, the
// metadata a trace on those inputs records.
void check_against_fresh_trace(const std::string& name,
                               const at::Tensor& new_input, int64_t new_batch) {
  INFO(name);
  torch::NoGradGuard no_grad;
  models::ZooModel model = models::make_zoo_model(name);
  fx::GraphModule gm = trace(model, model.example_inputs);
  c10::IValue out = fx::ShapeProp(gm).propagate({new_input});
  CHECK(torch::allclose(out.toTensor(), model.forward({new_input}).toTensor()));

  fx::GraphModule fresh = trace(model, {new_input});
  std::vector<Node*> nodes = gm->graph().nodes().to_vector();
  std::vector<Node*> expected = fresh->graph().nodes().to_vector();
  REQUIRE(nodes.size() == expected.size());
  // The nodes computed from the input (not from parameters alone).
  absl::flat_hash_set<const Node*> from_input;
  int checked = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (Node* input : nodes[i]->all_input_nodes()) {
      if (input->op() == Opcode::kPlaceholder || from_input.contains(input)) {
        from_input.insert(nodes[i]);
      }
    }
    INFO(nodes[i]->format_node());
    REQUIRE(nodes[i]->name() == expected[i]->name());
    const fx::TensorMeta* want = expected[i]->meta().get(fx::kTensorMeta);
    if (want == nullptr) continue;
    fx::TensorMeta got = meta_of(nodes[i]);
    CHECK(got.sizes == want->sizes);
    CHECK(got.strides == want->strides);
    CHECK(got.dtype == want->dtype);
    CHECK(got.memory_format == want->memory_format);
    // Activations carry the new batch.
    if (from_input.contains(nodes[i]) && got.sizes.size() >= 2) {
      CHECK(got.sizes[0] == new_batch);
    }
    ++checked;
  }
  CHECK(checked > 10);
}

TEST_CASE("ShapeProp on a traced zoo model with another batch size") {
  check_against_fresh_trace("lenet", torch::randn({5, 1, 32, 32}), 5);
  check_against_fresh_trace("resnet18", torch::randn({3, 3, 64, 64}), 3);
}

}  // namespace
