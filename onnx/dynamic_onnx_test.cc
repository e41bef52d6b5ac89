// Graphs with dynamic dimensions (fx::TraceOptions::dynamic) export with
// them: ONNX inputs of symbolic dimensions (dim_param), the sizes the graph
// computes as Shape / Gather / arithmetic, and ONNX Runtime runs other
// batch sizes and lengths as the GraphModule does. What needs a size that
// varies as a constant is refused by name.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include <onnx/onnx_pb.h>
#include <torch/script.h>
#include <torch/torch.h>

#include "fx/fx.h"
#include "fx/torchscript/torchscript.h"
#include "models/zoo.h"
#include "onnx/to_onnx.h"
#include "testdata/onnx_runtime.h"
#include "testdata/test_files.h"
#include "third_party/catch.h"

namespace {

namespace fs = std::filesystem;
using onnx_testing::check_against_ort;
using onnx_testing::scratch;

onnx::ModelProto read_model(const fs::path& file) {
  onnx::ModelProto proto;
  std::ifstream in(file, std::ios::binary);
  REQUIRE(proto.ParseFromIstream(&in));
  return proto;
}

// A CNN as LibTorch's examples write it: the batch read with x.size(0).
struct CnnImpl : torch::nn::Module {
  CnnImpl() {
    conv = register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 8, 3).padding(1)));
    fc = register_module("fc", torch::nn::Linear(8 * 4 * 4, 10));
  }
  at::Tensor forward(at::Tensor x) {
    x = torch::max_pool2d(torch::relu(conv(x)), 2);
    return fc(x.view({x.size(0), -1}));
  }
  torch::nn::Conv2d conv{nullptr};
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(Cnn);

// Tokens [B, T]: embeddings, positions sliced to T, attention by matmuls.
struct TokensImpl : torch::nn::Module {
  TokensImpl() {
    embed = register_module("embed", torch::nn::Embedding(100, 16));
    positions = register_parameter("positions", torch::randn({64, 16}) * 0.1);
    qkv = register_module("qkv", torch::nn::Linear(16, 48));
    norm = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({16})));
  }
  at::Tensor forward(at::Tensor ids) {
    const int64_t b = ids.size(0), t = ids.size(1);
    at::Tensor x = embed(ids) + positions.slice(0, 0, t);
    std::vector<at::Tensor> parts = qkv(x).view({b, t, 3, 16}).unbind(2);
    at::Tensor weights = torch::softmax(parts[0].matmul(parts[1].transpose(1, 2)) / 4.0, -1);
    return norm(x + weights.matmul(parts[2])).mean(1);
  }
  torch::nn::Embedding embed{nullptr};
  at::Tensor positions;
  torch::nn::Linear qkv{nullptr};
  torch::nn::LayerNorm norm{nullptr};
};
TORCH_MODULE(Tokens);

}  // namespace

TEST_CASE("a CNN traced with a dynamic batch exports one, and runs others") {
  torch::manual_seed(0);
  Cnn model;
  model->eval();
  fx::TraceOptions options;
  options.dynamic = {{.input = 0, .dim = 0, .symbol = "B", .max = 64}};
  fx::GraphModule gm = fx::symbolic_trace(model, {torch::randn({2, 3, 8, 8})}, options);
  const fs::path file = scratch() / "dynamic_cnn.onnx";
  fx::to_onnx(*gm, file.string());
  const onnx::ModelProto proto = read_model(file);
  CHECK(proto.graph().input(0).type().tensor_type().shape().dim(0).dim_param() == "B");
  CHECK(!proto.graph().output(0).type().tensor_type().shape().dim(0).has_dim_value());
  CHECK(proto.graph().output(0).type().tensor_type().shape().dim(1).dim_value() == 10);
  for (int64_t batch : {1, 3, 5}) {
    INFO("batch " << batch);
    check_against_ort(gm, file, {torch::randn({batch, 3, 8, 8})});
  }
}

TEST_CASE("a token model traced with dynamic batch and length exports both") {
  torch::manual_seed(1);
  Tokens model;
  model->eval();
  fx::TraceOptions options;
  options.dynamic = {{.input = 0, .dim = 0, .symbol = "B", .max = 32},
                     {.input = 0, .dim = 1, .symbol = "T", .max = 64}};
  fx::GraphModule gm = fx::symbolic_trace(
      model, {torch::randint(100, {2, 12}, torch::kLong)}, options);
  const fs::path file = scratch() / "dynamic_tokens.onnx";
  fx::to_onnx(*gm, file.string());
  const onnx::ModelProto proto = read_model(file);
  const auto& dims = proto.graph().input(0).type().tensor_type().shape().dim();
  CHECK(dims[0].dim_param() == "B");
  CHECK(dims[1].dim_param() == "T");
  for (auto [b, t] : {std::pair<int64_t, int64_t>{1, 5}, {3, 20}, {2, 12}}) {
    INFO(b << " x " << t);
    check_against_ort(gm, file, {torch::randint(100, {b, t}, torch::kLong)});
  }
}

TEST_CASE("the zoo's TransformerEncoder exports with dynamic length and batch") {
  models::ZooModel model = models::make_zoo_model("transformer_encoder");
  fx::TraceOptions options;
  options.leaf_modules = model.leaf_modules;
  options.dynamic = {{.input = 0, .dim = 0, .symbol = "S", .max = 512},
                     {.input = 0, .dim = 1, .symbol = "N"}};
  fx::GraphModule gm =
      fx::symbolic_trace(model.module, model.forward, model.example_inputs, options);
  const fs::path file = scratch() / "dynamic_transformer.onnx";
  fx::to_onnx(*gm, file.string());
  const at::Tensor x = model.example_inputs[0].toTensor();
  std::vector<int64_t> other = x.sizes().vec();
  other[0] += 3;
  other[1] += 1;
  check_against_ort(gm, file, {torch::randint(0, 10, other, torch::kLong)});
}

TEST_CASE("a U-Net with a dynamic batch: upsampling to fixed sizes, the batch read") {
  models::ZooModel model = models::make_zoo_model("unet");
  fx::TraceOptions options;
  options.leaf_modules = model.leaf_modules;
  options.dynamic = {{.input = 0, .dim = 0, .symbol = "B", .max = 16}};
  fx::GraphModule gm =
      fx::symbolic_trace(model.module, model.forward, model.example_inputs, options);
  const fs::path file = scratch() / "dynamic_unet.onnx";
  fx::to_onnx(*gm, file.string());
  std::vector<int64_t> sizes = model.example_inputs[0].toTensor().sizes().vec();
  sizes[0] += 2;
  check_against_ort(gm, file, {torch::randn(sizes)});
}

TEST_CASE("what needs a dynamic size as a constant is refused by name") {
  // Adaptive pooling to 2x2 of a varying height: its windows depend on it.
  auto fn = [](at::Tensor x) { return torch::adaptive_avg_pool2d(x, {2, 2}); };
  fx::TraceOptions options;
  options.dynamic = {{.input = 0, .dim = 2, .symbol = "H", .max = 64, .multiple_of = 2}};
  fx::GraphModule gm = fx::symbolic_trace(fn, {torch::randn({1, 2, 8, 8})}, options);
  const fs::path file = scratch() / "refused.onnx";
  CHECK_THROWS_WITH(fx::to_onnx(*gm, file.string()),
                    Catch::Contains("adaptive_avg_pool2d") &&
                        Catch::Contains("which is dynamic"));
  CHECK(!fs::exists(file));
}

TEST_CASE("a floor division of a dynamic size is seen to vary, never baked in") {
  // H // 2 is 4 at both 8 and 9: a one-step probe would call the flatten's
  // output fixed and bake [1, 32] into the model.
  auto fn = [](at::Tensor x) { return torch::max_pool2d(x, 2).flatten(1); };
  fx::TraceOptions options;
  options.dynamic = {{.input = 0, .dim = 2, .symbol = "H", .max = 64}};
  fx::GraphModule gm = fx::symbolic_trace(fn, {torch::randn({1, 2, 8, 8})}, options);
  const fs::path file = scratch() / "pooled_flatten.onnx";
  fx::to_onnx(*gm, file.string());
  for (int64_t h : {16, 9, 30}) {
    INFO("height " << h);
    check_against_ort(gm, file, {torch::randn({1, 2, h, 8})});
  }
}

TEST_CASE("a floor division of a negative size expression exports as a floor") {
  // The last dimension sliced to T + floor((T - 5) / 2): 3 at T = 4,
  // where ONNX's Div, truncating, gives 4; a negative end at T = 1 counts
  // from the end.
  auto fn = [](at::Tensor x) {
    const int64_t t = x.size(1);
    const auto k = static_cast<int64_t>(std::floor((t - 5) / 2.0));
    return x.slice(2, 0, t + k);
  };
  fx::TraceOptions options;
  options.dynamic = {fx::Dim("T").max(40).on(0, 1)};
  fx::GraphModule gm = fx::symbolic_trace(fn, {torch::randn({2, 8, 8})}, options);
  CHECK_THAT(gm->graph().to_string(), Catch::Contains("sym_floordiv"));
  const fs::path file = scratch() / "negative_floor.onnx";
  fx::to_onnx(*gm, file.string());
  for (int64_t t : {4, 3, 1, 8, 13}) {
    INFO("length " << t);
    const at::Tensor x = torch::randn({2, t, 8});
    CHECK(gm(x).toTensor().size(2) == fn(x).size(2));
    check_against_ort(gm, file, {x});
  }
}

TEST_CASE("unflatten and global pooling over dynamic sizes export") {
  auto fn = [](at::Tensor x) {
    return torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1).unflatten(1, {2, 4}).sum(2);
  };
  fx::TraceOptions options;
  options.dynamic = {{.input = 0, .dim = 0, .symbol = "B", .max = 16},
                     {.input = 0, .dim = 2, .symbol = "H", .max = 64}};
  fx::GraphModule gm = fx::symbolic_trace(fn, {torch::randn({2, 8, 6, 5})}, options);
  const fs::path file = scratch() / "unflatten_pool.onnx";
  fx::to_onnx(*gm, file.string());
  check_against_ort(gm, file, {torch::randn({3, 8, 9, 5})});
}

TEST_CASE("positions 0 .. T-1 of a dynamic length (arange) export as Range") {
  auto fn = [](at::Tensor x) {
    const at::Tensor positions = torch::arange(x.size(1), torch::kLong);
    return x * positions.to(torch::kFloat) +
           torch::arange(1, x.size(1) + 1, torch::TensorOptions().dtype(torch::kFloat));
  };
  fx::TraceOptions options;
  options.dynamic = {{.input = 0, .dim = 1, .symbol = "T", .max = 64}};
  fx::GraphModule gm = fx::symbolic_trace(fn, {torch::randn({2, 10})}, options);
  const fs::path file = scratch() / "arange.onnx";
  fx::to_onnx(*gm, file.string());
  for (int64_t t : {3, 17}) {
    INFO("length " << t);
    check_against_ort(gm, file, {torch::randn({2, t})});
  }
}

TEST_CASE("factories of dynamic sizes export as Expand of the computed size") {
  // A causal mask made at the length (ones, triu, masked_fill), a zero
  // initial state at the batch (zeros), and *_like / new_* / full: before,
  // refused at export ("no mapping") once their sizes were symbolic.
  auto fn = [](at::Tensor x) {
    const int64_t B = x.size(0), T = x.size(1);
    const at::Tensor causal = torch::ones({T, T}).triu(1).to(torch::kBool);
    const at::Tensor scores = x.matmul(x.transpose(1, 2)).masked_fill(
        causal, -std::numeric_limits<float>::infinity());
    const at::Tensor state = torch::zeros({2, B, x.size(2)});
    const at::Tensor lower = torch::full({T, T}, 0.5).tril(-1);
    return std::make_tuple(
        torch::softmax(scores, -1).matmul(x) + state[1].unsqueeze(1),
        lower + torch::ones_like(scores) + x.new_zeros({B, T, T}),
        torch::full_like(x, 2.0) * x.new_ones({B, T, x.size(2)}));
  };
  fx::TraceOptions options;
  options.dynamic = {fx::Dim("B").max(16).on(0, 0), fx::Dim("T").max(64).on(0, 1)};
  fx::GraphModule gm = fx::symbolic_trace(fn, {torch::randn({2, 6, 4})}, options);
  const fs::path file = scratch() / "factories.onnx";
  fx::to_onnx(*gm, file.string());
  for (auto [b, t] : {std::pair<int64_t, int64_t>{1, 1}, {3, 9}, {16, 64}}) {
    INFO(b << " x " << t);
    check_against_ort(gm, file, {torch::randn({b, t, 4})});
  }
}

TEST_CASE("scripted models with size checks and zero states export with dynamic sizes") {
  // Written by Debian's Python (torch 1.13): a model that asserts and
  // branches on its sizes (imported as fx_guard::check_size), and nn.LSTM's
  // scripted forward (its zero state is aten::zeros([2, B, 32])).
  static const std::string dir = testdata::torchscript_models(
      "dynamic_onnx_models",
      {"guards_length_scripted", "lstm_lm_scripted", "token_encoder_scripted",
       "causal_encoder_scripted", "causal_encoder_traced"});
  {
    torch::jit::Module script = torch::jit::load(dir + "/guards_length_scripted.pt");
    script.eval();
    fx::TraceOptions options;
    options.dynamic = {fx::Dim("B").max(8).on(0, 0), fx::Dim("T").max(32).on(0, 1)};
    fx::GraphModule gm = fx::symbolic_trace(script, {torch::randn({2, 16, 8})}, options);
    REQUIRE(gm->graph().to_string().find("fx_guard::check_size") != std::string::npos);
    const fs::path file = scratch() / "guards_length.onnx";
    fx::to_onnx(*gm, file.string());
    // ONNX cannot assert: the checks are stated in the file's metadata.
    const onnx::ModelProto proto = read_model(file);
    std::string checks;
    for (const auto& entry : proto.metadata_props()) {
      if (entry.key() == "fx_guard.check_size") checks = entry.value();
    }
    CHECK_THAT(checks, Catch::Contains("%T <= 32"));
    for (auto [b, t] : {std::pair<int64_t, int64_t>{1, 1}, {3, 20}, {8, 32}}) {
      INFO(b << " x " << t);
      check_against_ort(gm, file, {torch::randn({b, t, 8})});
    }
  }
  {
    torch::jit::Module script = torch::jit::load(dir + "/lstm_lm_scripted.pt");
    script.eval();
    fx::TraceOptions options;
    options.dynamic = {fx::Dim("B").max(8).on(0, 0), fx::Dim("T").max(64).on(0, 1)};
    fx::GraphModule gm = fx::symbolic_trace(
        script, {torch::randint(100, {2, 12}, torch::kLong)}, options);
    const fs::path file = scratch() / "lstm_lm.onnx";
    fx::to_onnx(*gm, file.string());
    for (auto [b, t] : {std::pair<int64_t, int64_t>{1, 3}, {4, 17}, {2, 12}}) {
      INFO(b << " x " << t);
      check_against_ort(gm, file, {torch::randint(100, {b, t}, torch::kLong)});
    }
  }
  // BERT- and GPT-style encoder layers (the GPT-style one makes its causal
  // mask with torch.ones(T, T, dtype=torch.bool).triu(1)), scripted and
  // traced.
  for (const char* name : {"token_encoder_scripted", "causal_encoder_scripted",
                           "causal_encoder_traced"}) {
    INFO(name);
    torch::jit::Module script = torch::jit::load(dir + "/" + name + ".pt");
    script.eval();
    fx::TraceOptions options;
    options.dynamic = {fx::Dim("B").max(8).on(0, 0), fx::Dim("T").max(64).on(0, 1)};
    fx::GraphModule gm = fx::symbolic_trace(
        script, {torch::randint(100, {2, 16}, torch::kLong)}, options);
    const fs::path file = scratch() / (std::string(name) + ".onnx");
    fx::to_onnx(*gm, file.string());
    for (auto [b, t] : {std::pair<int64_t, int64_t>{1, 1}, {3, 29}, {8, 64}}) {
      INFO(b << " x " << t);
      check_against_ort(gm, file, {torch::randint(100, {b, t}, torch::kLong)});
    }
  }
}
