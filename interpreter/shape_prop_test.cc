#include "interpreter/shape_prop.h"

#include <torch/torch.h>

#include "absl/container/flat_hash_set.h"
#include "fx/fx.h"
#include "fx/runtime/guards.h"
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

// Attention over [B, T, 16] tokens that reads its sizes, with a batch norm
// whose statistics a run changes.
struct AttentionImpl : torch::nn::Module {
  AttentionImpl() {
    norm = register_module("norm", torch::nn::BatchNorm1d(16));
    qkv = register_module("qkv", torch::nn::Linear(16, 48));
  }
  torch::Tensor forward(torch::Tensor x) {
    const int64_t B = x.size(0), T = x.size(1);
    torch::Tensor h = norm(x.view({B * T, 16})).view({B, T, 16});
    std::vector<torch::Tensor> parts = qkv(h).chunk(3, -1);
    torch::Tensor q = parts[0].view({B, T, 4, 4}).transpose(1, 2);
    torch::Tensor k = parts[1].view({B, T, 4, 4}).transpose(1, 2);
    return torch::softmax(q.matmul(k.transpose(-2, -1)), -1);
  }
  torch::nn::BatchNorm1d norm{nullptr};
  torch::nn::Linear qkv{nullptr};
};
TORCH_MODULE(Attention);

TEST_CASE("ShapeProp gives a dynamic graph's sizes as functions of its symbols") {
  Attention model;
  fx::TraceOptions options;
  options.dynamic = {{.input = 0, .dim = 0, .symbol = "B"},
                     {.input = 0, .dim = 1, .symbol = "T", .max = 64}};
  fx::GraphModule gm = fx::symbolic_trace(model, {torch::randn({2, 8, 16})}, options);
  const fx::PrintOptions print{.tensor_meta = true};
  const std::string traced = gm->graph().to_string(print);
  CHECK_THAT(traced, Catch::Contains("%x : f32[B, T, 16]") &&
                         Catch::Contains("%view : f32[B*T, 16]") &&
                         Catch::Contains("%getitem : f32[B, T, 16]{48*T, 48, 1}") &&
                         Catch::Contains("%softmax : f32[B, 4, T, T]"));

  // Erased and propagated again, at other sizes, in training mode: the same
  // functions, the new example's sizes, and the batch norm's statistics
  // moved by the one run the caller asked for only.
  for (Node* n : gm->graph().nodes()) n->meta().erase(fx::kTensorMeta.name);
  gm->train();
  model->train();
  torch::Tensor x = torch::randn({3, 5, 16});
  c10::IValue out = fx::ShapeProp(gm).propagate({x});
  CHECK(torch::allclose(out.toTensor(), model->forward(x)));
  CHECK(torch::allclose(gm->tensor_attributes().at("norm.running_mean"),
                        model->norm->running_mean));
  const std::string propagated = gm->graph().to_string(print);
  CHECK_THAT(propagated, Catch::Contains("%x : f32[B, T, 16]") &&
                             Catch::Contains("%view : f32[B*T, 16]") &&
                             Catch::Contains("(f32[B, T, 16]{48*T, 48, 1}, f32[B, T, 16]"
                                             "{48*T, 48, 1}, f32[B, T, 16]{48*T, 48, 1})") &&
                             Catch::Contains("%softmax : f32[B, 4, T, T]"));
  const fx::TensorMeta& softmax = meta_of(by_name(gm->graph(), "softmax"));
  CHECK(softmax.sizes == std::vector<int64_t>{3, 4, 5, 5});
  CHECK(softmax.symbolic_strides.at(0).to_string() == "4*T*T");
  CHECK(softmax.symbolic_sizes.at(3).at({{"B", 7}, {"T", 11}}) == 11);

  // Without symbols, or turned off: the example's sizes only.
  fx::ShapeProp(gm, fx::ShapePropOptions{.symbolic = false}).propagate({x});
  CHECK(meta_of(by_name(gm->graph(), "softmax")).symbolic_sizes.empty());
  CHECK_THAT(gm->graph().to_string(print), Catch::Contains("%x : f32[3, 5, 16]"));
}

TEST_CASE("size expressions print, parse and fit") {
  using fx::SizeExpr;
  for (const char* text : {"B", "4*T", "B*T", "T + 1", "T - 3", "(T + 1)//2",
                           "T//4", "-T + 9", "-2*T + 40", "(-3*B + 7)//2",
                           "64*B*T", "T*T", "?", "12", "-1"}) {
    std::optional<SizeExpr> e = SizeExpr::parse(text);
    REQUIRE(e.has_value());
    CHECK(e->to_string() == text);
  }
  for (const char* bad : {"", "B +", "2*", "(T + 1)//0", "T//x", "3B", "B**T",
                          "B + 1//2", "(T)//2", "T + 0", "0*T", "1*T"}) {
    INFO(bad);
    CHECK_FALSE(SizeExpr::parse(bad).has_value());
  }
  const std::vector<fx::SymbolSizes> at = {{{"B", 2}, {"T", 8}},
                                           {{"B", 3}, {"T", 9}},
                                           {{"B", 9}, {"T", 23}}};
  auto fit = [&](std::vector<int64_t> values) {
    std::optional<SizeExpr> e = SizeExpr::fit(values, at);
    return e ? e->to_string() : std::string("none");
  };
  CHECK(fit({7, 7, 7}) == "7");
  CHECK(fit({2, 3, 9}) == "B");
  CHECK(fit({16, 27, 207}) == "B*T");
  CHECK(fit({6, 7, 21}) == "T - 2");
  CHECK(fit({64, 81, 529}) == "T*T");
  CHECK(fit({65, 82, 530}) == "none");  // T*T + 1
  // (T + 1)//2 is 4, 5, 12: three traces cannot pin down the rounding of a
  // division by what does not divide every size T takes; no guess.
  CHECK(fit({4, 5, 12}) == "none");
  // (T + 2)//4 at T = 16, 17, 37 (4, 4, 9) looks like T//4.
  CHECK(SizeExpr::fit({4, 4, 9}, {{{"T", 16}}, {{"T", 17}}, {{"T", 37}}}) ==
        std::nullopt);
  // With T a multiple of 4, T//4 is exact on every size T takes.
  CHECK(SizeExpr::fit({4, 5, 9}, {{{"T", 16}}, {{"T", 20}}, {{"T", 36}}},
                      {{"T", 4}})
            ->to_string() == "T//4");
  // Sizes where T = 2*B + 3 in every run cannot tell T from 2*B + 3.
  CHECK(SizeExpr::fit({5, 7, 17}, {{{"B", 1}, {"T", 5}},
                                   {{"B", 2}, {"T", 7}},
                                   {{"B", 7}, {"T", 17}}}) == std::nullopt);
}

TEST_CASE("the sizes traced and run at leave no two symbols on one line") {
  // B = 1, T = 5: the near and far sizes used to put T at 2*B + 3 each time.
  std::vector<fx::DynamicDim> dims = {{.input = 0, .dim = 0, .symbol = "B"},
                                      {.input = 0, .dim = 1, .symbol = "T"}};
  const fx::SymbolSizes example = {{"B", 1}, {"T", 5}};
  std::vector<fx::SymbolSizes> samples = fx::sample_sizes(dims, example);
  REQUIRE(samples.size() == 2);
  const int64_t b1 = samples[0].at("B") - 1, b2 = samples[1].at("B") - 1;
  const int64_t t1 = samples[0].at("T") - 5, t2 = samples[1].at("T") - 5;
  CHECK(b1 * t2 != b2 * t1);
  // And a C++ program reading T there generalizes to T.
  fx::TraceOptions options;
  options.dynamic = dims;
  fx::GraphModule gm = fx::symbolic_trace(
      [](torch::Tensor x) { return x.narrow(1, 0, x.size(1) - 1); },
      std::vector<c10::IValue>{torch::randn({1, 5})}, options);
  torch::Tensor x = torch::randn({1, 10});
  CHECK(torch::equal(gm->forward({x}).toTensor(), x.narrow(1, 0, 9)));
}

}  // namespace
