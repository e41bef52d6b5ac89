#include "passes/typed_attributes.h"

#include <torch/torch.h>

#include "fx/fx.h"
#include "third_party/catch.h"

namespace {

constexpr char kConvBn[] = R"(graph():
    %x : f32[1, 3, 8, 8] = placeholder[target=x]
    %conv_weight : f32[4, 3, 3, 3] = get_attr[target=conv.weight]
    %conv2d = call_function[target=aten::conv2d](args = (%x, %conv_weight), kwargs = {})
    %bn_running_var : f32[4] = get_attr[target=bn.running_var]
    %bn_running_var_1 = get_attr[target=bn.running_var]
    %steps : i64[] = get_attr[target=bn.num_batches_tracked]
    %add = call_function[target=aten::add.Tensor](args = (%bn_running_var, %bn_running_var_1), kwargs = {})
    return (conv2d, add, steps))";

TEST_CASE("get_attr targets get tensors of their printed types") {
  fx::GraphModule gm = fx::parse_graph_module(kConvBn);
  const at::Tensor weight = gm->fetch_attr("conv.weight");
  CHECK(weight.sizes().vec() == std::vector<int64_t>{4, 3, 3, 3});
  CHECK(weight.scalar_type() == at::kFloat);
  CHECK(weight.std().item<double>() > 0.5);  // noise, not zeros
  const at::Tensor var = gm->fetch_attr("bn.running_var");
  CHECK(var.min().item<double>() >= 0.5);
  CHECK(var.max().item<double>() < 1.5);
  const at::Tensor steps = gm->fetch_attr("bn.num_batches_tracked");
  CHECK(steps.scalar_type() == at::kLong);
  CHECK(steps.dim() == 0);
  CHECK(steps.item<int64_t>() == 0);
  // Runs: the tensors fit the graph.
  c10::IValue out = gm(torch::randn({1, 3, 8, 8}));
  CHECK(out.toTupleRef().elements().at(0).toTensor().sizes().vec() ==
        std::vector<int64_t>{1, 4, 6, 6});
}

TEST_CASE("buffers and parameters are told apart by their paths") {
  fx::Attributes attributes =
      fx::typed_attributes(*fx::parse_graph(kConvBn));
  CHECK(attributes.parameters.size() == 1);
  CHECK(attributes.parameters.count("conv.weight") == 1);
  CHECK(attributes.buffers.size() == 2);
  CHECK(attributes.buffers.count("bn.running_var") == 1);
  CHECK(attributes.buffers.count("bn.num_batches_tracked") == 1);
}

TEST_CASE("the same text gives the same tensors, whatever the global seed") {
  torch::manual_seed(1);
  fx::Attributes a = fx::typed_attributes(*fx::parse_graph(kConvBn));
  torch::manual_seed(2);
  fx::Attributes b = fx::typed_attributes(*fx::parse_graph(kConvBn));
  CHECK(torch::equal(a.parameters.at("conv.weight"),
                     b.parameters.at("conv.weight")));
  CHECK(torch::equal(a.buffers.at("bn.running_var"),
                     b.buffers.at("bn.running_var")));
}

TEST_CASE("a target none of whose nodes has a type is named") {
  const char* untyped = R"(graph():
    %w = get_attr[target=fc.weight]
    return w)";
  CHECK_THROWS_AS(fx::parse_graph_module(untyped), fx::GraphError);
  CHECK_THROWS_WITH(
      fx::parse_graph_module(untyped),
      Catch::Contains("get_attr %w reads fc.weight but has no type") &&
          Catch::Contains("%w : f32[3, 3] = get_attr[target=fc.weight]"));
  // A later typed node of the same target is enough.
  fx::GraphModule gm = fx::parse_graph_module(R"(graph():
    %w = get_attr[target=fc.weight]
    %w_1 : f64[2] = get_attr[target=fc.weight]
    return (w, w_1))");
  CHECK(gm->fetch_attr("fc.weight").scalar_type() == at::kDouble);
}

}  // namespace
