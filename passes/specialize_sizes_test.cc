#include "passes/specialize_sizes.h"

#include <torch/torch.h>

#include <string>

#include "fx/fx.h"
#include "passes/pass_manager.h"
#include "third_party/catch.h"

namespace {

// Heads split and merged with the batch and length read from the input.
torch::Tensor heads(torch::Tensor x) {
  const int64_t b = x.size(0), t = x.size(1);
  torch::Tensor h = x.view({b, t, 4, -1}).transpose(1, 2);
  return h.softmax(-1).transpose(1, 2).reshape({b * t, -1});
}

fx::GraphModule dynamic_heads() {
  fx::TraceOptions options;
  options.dynamic = {{.input = 0, .dim = 0, .symbol = "B", .max = 64},
                     {.input = 0, .dim = 1, .symbol = "T", .max = 512}};
  return fx::symbolic_trace(&heads, {torch::randn({2, 5, 16})}, options);
}

TEST_CASE("size nodes become the example's sizes, and the shapes are guarded") {
  fx::GraphModule gm = dynamic_heads();
  REQUIRE_THAT(gm->graph().to_string(), Catch::Contains("sym_size"));
  const torch::Tensor x = torch::randn({2, 5, 16});
  const torch::Tensor expected = heads(x);
  const torch::Tensor other = torch::randn({3, 7, 16});
  CHECK(torch::equal(gm(other).toTensor(), heads(other)));
  CHECK(fx::specialize_sizes(*gm));
  const std::string printed = gm->graph().to_string();
  INFO(printed);
  CHECK(printed.find("sym_") == std::string::npos);
  CHECK_THAT(printed, Catch::Contains("[2, 5, 4, -1]"));
  CHECK_THAT(printed, Catch::Contains("[10, -1]"));
  CHECK(torch::equal(gm(x).toTensor(), expected));
  CHECK_THROWS_WITH(gm(torch::randn({3, 7, 16})),
                    Catch::Contains("has shape [3, 7, 16]"));
  // Nothing left to specialize.
  CHECK_FALSE(fx::specialize_sizes(*gm));
}

TEST_CASE("specialize_sizes runs by name and leaves a static graph alone") {
  fx::GraphModule gm = dynamic_heads();
  CHECK(fx::PassManager().add("specialize_sizes").run(gm).modified);
  fx::GraphModule relu = fx::symbolic_trace(
      [](torch::Tensor x) { return torch::relu(x); }, torch::randn({2, 3}));
  const std::string before = relu->graph().to_string();
  CHECK_FALSE(fx::specialize_sizes(*relu));
  CHECK(relu->graph().to_string() == before);
}

TEST_CASE("a size node whose tensor has no metadata is refused, graph unchanged") {
  fx::GraphModule gm = dynamic_heads();
  fx::Node* size = nullptr;
  for (fx::Node* n : gm->graph().nodes()) {
    if (fx::is_sym_call(*n) && n->target().function().name() == "sym_size") {
      size = n;
      break;
    }
  }
  REQUIRE(size != nullptr);
  fx::Node* tensor = size->args()[0].to_node();
  tensor->meta().erase(fx::kTensorMeta.name);
  const std::string before = gm->graph().to_string();
  CHECK_THROWS_WITH(fx::specialize_sizes(*gm),
                    Catch::Contains("%" + size->name()) &&
                        Catch::Contains("no tensor_meta"));
  CHECK(gm->graph().to_string() == before);
}

}  // namespace
