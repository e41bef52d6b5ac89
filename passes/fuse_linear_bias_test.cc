#include "passes/fuse_linear_bias.h"

#include <torch/torch.h>

#include "fx/fx.h"
#include "models/gpt_generator.h"
#include "passes/pass_manager.h"
#include "testdata/test_helpers.h"
#include "third_party/catch.h"

namespace {

size_t calls_everywhere(const fx::Graph& graph, const std::string& target) {
  size_t n = 0;
  for (const fx::Graph* g : graph.all_graphs()) {
    n += testdata::count_calls(*g, target);
  }
  return n;
}

}  // namespace

TEST_CASE("fuse_linear_bias puts a GPT block's linear layers back together, "
          "in the generation loop's body too") {
  torch::NoGradGuard no_grad;
  torch::manual_seed(0);
  models::GptConfig config;
  config.layers = 2;
  config.d = 32;
  config.vocab = 40;
  config.length = 12;
  config.eos = -1;
  models::GptGenerator model(config);
  model->eval();
  const torch::Tensor prompt = torch::randint(0, 40, {2, 5}, torch::kLong);
  fx::GraphModule gm = fx::symbolic_trace(model, prompt);
  const size_t linear_before = calls_everywhere(gm->graph(), "aten::linear");
  const size_t matmul_before = calls_everywhere(gm->graph(), "aten::matmul");
  // 4 linear layers a block, 2 blocks, in the prompt's pass and in the
  // loop's body; the output projection (no bias) and attention's two
  // products a block stay matmuls.
  const size_t layers = 2 * 2 * 4;
  const size_t products = 2 + 2 * 2 * 2;
  REQUIRE(linear_before + matmul_before == layers + products);

  const fx::PassResult result =
      fx::PassManager().add("fuse_linear_bias").run(gm);
  CHECK(result.modified == (linear_before < layers));
  fx::GraphModule fused = result.module;
  CHECK(calls_everywhere(fused->graph(), "aten::linear") == layers);
  CHECK(calls_everywhere(fused->graph(), "aten::matmul") == products);
  CHECK(calls_everywhere(fused->graph(), "aten::add_") == 0);
  // The same tokens (linear adds the bias inside its product: equal
  // within rounding, and the greedy choices the same).
  for (int64_t seed : {1, 2}) {
    torch::manual_seed(seed);
    const torch::Tensor p = torch::randint(0, 40, {2, 5}, torch::kLong);
    const c10::IValue want = gm(p);
    const c10::IValue got = fused(p);
    for (size_t i : {0, 1}) {
      CHECK(torch::equal(got.toListRef()[i].toTensor(),
                         want.toListRef()[i].toTensor()));
    }
  }
  // Nothing left to put together: a second run changes nothing.
  CHECK_FALSE(fx::PassManager().add("fuse_linear_bias").run(fused).modified);
}
