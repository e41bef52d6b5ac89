// Greedy generation with the loop in the graph: GptGenerator's forward
// (prompt at once, then an fx::while_loop over a key/value cache) gives the
// tokens of decoding without a cache; traced, it is one while_loop node and
// the GraphModule gives eager's tokens bitwise; lowered (the linear layers
// of the loop's body on oneDNN) the same tokens; exported to ONNX as a
// Loop, ONNX Runtime gives them too.
#include <filesystem>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "fx/fx.h"
#include "lowering/optimize_for_inference.h"
#include "models/gpt_generator.h"
#include "onnx/to_onnx.h"
#include "testdata/onnx_runtime.h"
#include "testdata/test_helpers.h"
#include "third_party/catch.h"

namespace {

using torch::Tensor;

models::GptConfig small_config(int64_t eos) {
  models::GptConfig config;
  config.layers = 2;
  config.d = 64;
  config.heads = 4;
  config.vocab = 50;
  config.length = 16;
  config.eos = eos;
  return config;
}

models::GptGenerator make(int64_t eos) {
  torch::manual_seed(3);
  models::GptGenerator model(small_config(eos));
  model->eval();
  return model;
}

Tensor prompt_of(int64_t batch, int64_t tokens, int64_t seed) {
  torch::manual_seed(seed);
  return torch::randint(1, 50, {batch, tokens}, torch::kLong);
}

size_t calls_everywhere(const fx::Graph& graph, const std::string& target) {
  size_t n = 0;
  for (const fx::Graph* g : graph.all_graphs()) {
    n += testdata::count_calls(*g, target);
  }
  return n;
}

void check_same(const std::vector<Tensor>& got, const std::vector<Tensor>& want) {
  REQUIRE(got.size() == 2);
  REQUIRE(want.size() == 2);
  CHECK(got[0].scalar_type() == torch::kLong);
  CHECK(torch::equal(got[0], want[0]));
  CHECK(got[1].item<int64_t>() == want[1].item<int64_t>());
}

std::vector<Tensor> tensors_of(const c10::IValue& value) {
  std::vector<Tensor> out;
  for (const c10::IValue& v : value.toListRef()) out.push_back(v.toTensor());
  return out;
}

}  // namespace

TEST_CASE("greedy generation with a key/value cache gives decoding's tokens") {
  torch::NoGradGuard no_grad;
  models::GptGenerator model = make(/*eos=*/-1);
  for (int64_t batch : {1, 3}) {
    for (int64_t p : {1, 5, 15}) {
      INFO("batch " << batch << ", prompt " << p);
      const Tensor prompt = prompt_of(batch, p, batch * 100 + p);
      const std::vector<Tensor> got = model(prompt);
      const std::vector<Tensor> want =
          models::greedy_without_cache(*model, prompt);
      check_same(got, want);
      // No end token: the sequence is full; the prompt kept.
      CHECK(got[1].item<int64_t>() == 16);
      CHECK(torch::equal(got[0].slice(1, 0, p), prompt));
    }
  }
}

TEST_CASE("generation stops at the end token, every sequence's") {
  torch::NoGradGuard no_grad;
  const Tensor prompt = prompt_of(1, 3, 7);
  const Tensor full = make(-1)(prompt)[0];
  // The 4th new token as the end token (the first position it appears at).
  const int64_t eos = full[0][3 + 3].item<int64_t>();
  int64_t first = 3;
  while (full[0][first].item<int64_t>() != eos) ++first;
  models::GptGenerator model = make(eos);
  const std::vector<Tensor> got = model(prompt);
  check_same(got, models::greedy_without_cache(*model, prompt));
  CHECK(got[1].item<int64_t>() == first + 1);
  CHECK(torch::equal(got[0].slice(1, 0, first + 1),
                     full.slice(1, 0, first + 1)));
  CHECK((got[0].slice(1, first) == eos).all().item<bool>());

  // Two sequences: generation goes on until both have ended.
  const Tensor two = torch::cat({prompt, prompt_of(1, 3, 8)}, 0);
  check_same(model(two), models::greedy_without_cache(*model, two));
}

TEST_CASE("GptGenerator refuses prompts it cannot hold, by name") {
  models::GptGenerator model = make(-1);
  CHECK_THROWS_WITH(model(prompt_of(1, 16, 1)),
                    Catch::Contains("the prompt must hold 1 to 15 tokens"));
  CHECK_THROWS_WITH(model(torch::zeros({1, 0}, torch::kLong)),
                    Catch::Contains("got 0"));
  CHECK_THROWS_WITH(model(torch::zeros({1, 4})),
                    Catch::Contains("the prompt must be int64"));
  CHECK_THROWS_WITH(models::GptGenerator(small_config(/*eos=*/50)),
                    Catch::Contains("eos must be a token below vocab (50)"));
}

TEST_CASE("traced, the generation loop is one while_loop node: eager's tokens, "
          "lowered and under ONNX Runtime") {
  torch::NoGradGuard no_grad;
  const Tensor example = prompt_of(1, 4, 11);
  const Tensor prompt = example;
  // The end token: one that greedy decoding gives after a few steps.
  const int64_t eos = make(-1)(example)[0][0][9].item<int64_t>();
  models::GptGenerator model = make(eos);
  fx::GraphModule gm = fx::symbolic_trace(model, example);
  REQUIRE(testdata::count_calls(gm->graph(), "while_loop") == 1);
  CHECK(calls_everywhere(gm->graph(), "aten::index_copy") == 5);

  // Prompts of the traced sizes: the GraphModule's tokens are eager's.
  std::vector<Tensor> prompts = {example};
  for (int64_t seed : {12, 13, 14}) prompts.push_back(prompt_of(1, 4, seed));
  for (const Tensor& p : prompts) {
    INFO("prompt " << p);
    check_same(tensors_of(gm(p)), model(p));
  }

  // Lowered: the block's linear layers in the loop's body on oneDNN.
  fx::GraphModule lowered(gm->copy());
  const fx::InferenceReport report = fx::optimize_for_inference(*lowered);
  INFO(lowered->graph());
  CHECK(calls_everywhere(lowered->graph(), "aten::linear") == 0);
  CHECK(calls_everywhere(lowered->graph(), "fx_onednn::linear") >= 8);
  CHECK(report.linear >= 8);
  for (const Tensor& p : prompts) {
    INFO("prompt " << p);
    check_same(tensors_of(lowered(p)), model(p));
  }

  // ONNX: the loop a Loop; ONNX Runtime's tokens and count are ours.
  const std::filesystem::path file =
      onnx_testing::scratch() / "gpt_generator.onnx";
  fx::to_onnx(*gm, file.string());
  for (const Tensor& p : prompts) {
    INFO("prompt " << p);
    onnx_testing::check_against_ort(gm, file, {p});
  }
  const std::filesystem::path lowered_file =
      onnx_testing::scratch() / "gpt_generator_lowered.onnx";
  fx::to_onnx(*lowered, lowered_file.string());
  onnx_testing::check_against_ort(lowered, lowered_file, {prompt});
}
