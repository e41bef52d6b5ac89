// Sequence models lowered. Transformers: PyTorch's fused inference ops
// (aten::_transformer_encoder_layer_fwd, aten::_native_multi_head_attention,
// what nn.TransformerEncoderLayer and nn.MultiheadAttention run in eval
// mode without autograd) split into their parts by the decompose_attention
// pass, then lowered by fx::optimize_for_inference, on TorchScript files
// written by testdata/torchscript_models.py; their matmuls on oneDNN;
// hand-written attention and LibTorch's C++ modules likewise. LSTMs and
// GRUs (one direction or two) on oneDNN's primitives, at batch 1 on a
// recurrence of ours.
#include <torch/script.h>
#include <torch/torch.h>

#include <atomic>
#include <thread>
#include <string>

#include "fx/fx.h"
#include "fx/torchscript/torchscript.h"
#include "lowering/onednn_ops.h"
#include "lowering/optimize_for_inference.h"
#include "models/zoo.h"
#include "passes/decompose.h"
#include "passes/registry.h"
#include "quantization/numeric_suite.h"
#include "quantization/quantize_fx.h"
#include "testdata/bert_base.h"
#include "testdata/round_trip.h"
#include "testdata/test_files.h"
#include "testdata/test_helpers.h"
#include "third_party/catch.h"

namespace {

using testdata::relative_error;

std::string model_path(const std::string& name) {
  static const std::string dir = testdata::torchscript_models(
      "transformer_models", {"fused_encoder_traced", "small_vit_scripted",
                             "causal_encoder_traced", "lstm_lm_scripted"});
  return dir + "/" + name + ".pt";
}

// A TorchScript file of testdata/torchscript_models.py, in eval mode.
torch::jit::Module load_script(const std::string& name) {
  torch::jit::Module script = torch::jit::load(model_path(name));
  script.eval();
  return script;
}

at::Tensor first_tensor(const c10::IValue& v) {
  return v.isTuple() ? first_tensor(v.toTupleRef().elements().at(0))
                     : v.toTensor();
}

int count_calls(const fx::GraphModule& gm, const std::string& op) {
  int n = 0;
  for (const fx::Node* node : gm->graph().nodes()) {
    if (node->is_call_to({op})) ++n;
  }
  return n;
}

// Of `threads` threads calling gm(inputs) 5 times each at once, the calls
// whose first output is not `want`.
int calls_differing(fx::GraphModule gm,
                    const std::vector<c10::IValue>& inputs,
                    const at::Tensor& want, int threads) {
  std::vector<std::thread> running;
  std::atomic<int> wrong{0};
  for (int t = 0; t < threads; ++t) {
    running.emplace_back([&] {
      torch::NoGradGuard no_grad;
      for (int i = 0; i < 5; ++i) {
        if (!at::equal(first_tensor(gm->forward(inputs)), want)) ++wrong;
      }
    });
  }
  for (std::thread& t : running) t.join();
  return wrong;
}

const char kEncoderLayer[] = "aten::_transformer_encoder_layer_fwd";
const char kAttention[] = "aten::_native_multi_head_attention";

}  // namespace

TEST_CASE("the fused transformer ops split into their parts compute what they "
          "compute") {
  torch::NoGradGuard no_grad;
  torch::jit::Module script = load_script("fused_encoder_traced");
  torch::manual_seed(0);
  const at::Tensor x = torch::randn({2, 16, 32});
  fx::GraphModule gm = fx::symbolic_trace(script, {x});
  REQUIRE(count_calls(gm, kEncoderLayer) == 2);
  REQUIRE(count_calls(gm, kAttention) == 1);

  std::unique_ptr<fx::Pass> pass = fx::make_pass("decompose_attention");
  REQUIRE(pass->run(*gm));
  CHECK(count_calls(gm, kEncoderLayer) == 0);
  CHECK(count_calls(gm, kAttention) == 0);
  // Self-attention: one QKV projection per layer; the padding mask of the
  // second layer by masked_fill, its gelu kept.
  CHECK(count_calls(gm, "aten::linear") == 3 * 2 + 2 + 2);
  CHECK(count_calls(gm, "aten::masked_fill.Scalar") == 1);
  CHECK(count_calls(gm, "aten::softmax.int") == 3);
  CHECK(count_calls(gm, "aten::gelu") == 1);
  CHECK(count_calls(gm, "aten::layer_norm") == 4);
  CHECK_FALSE(pass->run(*gm));  // nothing left to split

  for (int seed : {1, 2}) {
    torch::manual_seed(seed);
    at::Tensor input = torch::randn({2, 16, 32});
    // Some keys padded in the second layer.
    input.select(2, 0).select(1, seed).fill_(2.0);
    CHECK(relative_error(gm(input).toTensor(),
                         script.forward({input}).toTensor()) < 1e-5);
  }
}

TEST_CASE("dynamic int8 reaches the fused transformer ops' linear layers") {
  // quantize_dynamic_fx splits aten::_transformer_encoder_layer_fwd and
  // aten::_native_multi_head_attention first: their QKV and output
  // projections and feed-forward layers become quantized::linear_dynamic.
  torch::NoGradGuard no_grad;
  torch::jit::Module script = load_script("fused_encoder_traced");
  torch::manual_seed(0);
  at::Tensor x = torch::randn({2, 16, 32});
  x.select(2, 0).select(1, 3).fill_(2.0);
  const at::Tensor want = script.forward({x}).toTensor();
  fx::GraphModule gm = fx::symbolic_trace(script, {x});
  fx::GraphModule int8 = fx::quantize_dynamic_fx(gm);
  CAPTURE(int8->graph().to_string());
  CHECK(count_calls(int8, kEncoderLayer) == 0);
  CHECK(count_calls(int8, kAttention) == 0);
  // (The feed-forward layer with relu as quantized::linear_relu_dynamic.)
  CHECK(count_calls(int8, "quantized::linear_dynamic") +
            count_calls(int8, "quantized::linear_relu_dynamic") ==
        3 * 2 + 2 + 2);
  CHECK(count_calls(int8, "aten::linear") == 0);
  CHECK(fx::sqnr_db(want, int8(x).toTensor()) > 25);
  // Lowered: the float parts on oneDNN, the int8 linear layers on
  // oneDNN's int8 matmul where it has VNNI (the feed-forward relu fused).
  fx::GraphModule lowered(int8->copy());
  const fx::InferenceReport report = fx::optimize_for_inference(*lowered);
  CAPTURE(report.to_string());
  CHECK(report.matmul == 6);
  const size_t kept = count_calls(lowered, "quantized::linear_dynamic") +
                      count_calls(lowered, "quantized::linear_relu_dynamic");
  if (fx::onednn::int8_supported()) {
    CHECK(kept == 0);
    CHECK(report.int8_linear == 10);
    CHECK(count_calls(lowered, "fx_onednn::qlinear_dynamic") == 10);
    // The residual adds (each encoder layer's two, after attention and
    // after the feed-forward layers, and the one after the last
    // attention) as the int8 layers' post-ops.
    INFO(lowered->graph().to_string());
    CHECK(report.fused_sums == 5);
    CHECK(count_calls(lowered, "aten::add.Tensor") == 0);
  } else {
    CHECK(kept == 10);
  }
  CHECK(fx::sqnr_db(want, lowered(x).toTensor()) > 25);
  // Without the split, the fused ops stay float.
  fx::DynamicOptions keep;
  keep.decompose_fused_attention = false;
  fx::GraphModule fused = fx::quantize_dynamic_fx(gm, keep);
  CHECK(count_calls(fused, kEncoderLayer) == 2);
  CHECK(count_calls(fused, "quantized::linear_dynamic") == 0);
}

TEST_CASE("transformers lower: the fused ops' projections and feed-forward "
          "layers run on oneDNN") {
  torch::NoGradGuard no_grad;
  SECTION("nn.TransformerEncoderLayer and nn.MultiheadAttention, traced") {
    torch::jit::Module script = load_script("fused_encoder_traced");
    torch::manual_seed(0);
    at::Tensor x = torch::randn({2, 16, 32});
    x.select(2, 0).select(1, 3).fill_(2.0);
    fx::GraphModule gm = fx::symbolic_trace(script, {x});
    const fx::InferenceReport report = fx::optimize_for_inference(*gm);
    CHECK(report.attention == 3);
    CHECK(report.linear == 10);
    CHECK(report.matmul == 6);  // q @ k^T (scale fused) and weights @ v
    CHECK(report.fused_activations >= 1);  // relu into the feed-forward
    // The residual adds (each layer's two and the one after the last
    // attention) as the linear layers' sum post-op.
    CHECK(report.fused_sums == 5);
    CHECK(count_calls(gm, "aten::add.Tensor") == 0);
    CHECK(count_calls(gm, kEncoderLayer) == 0);
    CHECK(count_calls(gm, kAttention) == 0);
    CHECK(relative_error(gm(x).toTensor(), script.forward({x}).toTensor()) <
          1e-4);
  }
  SECTION("torchvision's VisionTransformer, scripted") {
    torch::jit::Module script = load_script("small_vit_scripted");
    // torchvision starts the classifier at zero: an output to compare.
    for (const auto& p : script.named_parameters()) {
      if (p.name.rfind("heads.", 0) == 0) p.value.normal_();
    }
    torch::manual_seed(0);
    const at::Tensor x = torch::randn({2, 3, 32, 32});
    fx::GraphModule gm = fx::symbolic_trace(script, {x});
    REQUIRE(count_calls(gm, kAttention) == 2);
    const fx::InferenceReport report = fx::optimize_for_inference(*gm);
    CHECK(report.attention == 2);
    CHECK(report.matmul == 4);
    CHECK(count_calls(gm, kAttention) == 0);
    CHECK(relative_error(gm(x).toTensor(), script.forward({x}).toTensor()) <
          1e-4);
  }
}

TEST_CASE("hand-written attention and LibTorch's C++ TransformerEncoder "
          "lower their matmuls") {
  torch::NoGradGuard no_grad;
  SECTION("q @ k.transpose(-2, -1) * scale, a causal mask, softmax, @ v") {
    torch::jit::Module script = load_script("causal_encoder_traced");
    const at::Tensor ids = torch::randint(0, 100, {2, 16});
    fx::GraphModule gm = fx::symbolic_trace(script, {ids});
    const fx::InferenceReport report = fx::optimize_for_inference(*gm);
    CHECK(report.matmul == 2);
    CHECK(count_calls(gm, "aten::matmul") == 0);
    CHECK(relative_error(gm(ids).toTensor(),
                         script.forward({ids}).toTensor()) < 1e-4);
  }
  SECTION("torch::nn::TransformerEncoder (bmm)") {
    models::ZooModel model = models::make_zoo_model("transformer_encoder");
    fx::GraphModule gm = models::trace_zoo_model(model);
    const fx::InferenceReport report = fx::optimize_for_inference(*gm);
    CHECK(report.matmul >= 2);
    CHECK(count_calls(gm, "aten::bmm") == 0);
    const at::Tensor want = model.forward(model.example_inputs).toTensor();
    CHECK(relative_error(gm->forward(model.example_inputs).toTensor(), want) <
          1e-4);
  }
}

TEST_CASE("LSTMs lower to oneDNN's LSTM primitive") {
  torch::NoGradGuard no_grad;
  SECTION("nn.LSTM, 2 layers, batch_first, scripted") {
    torch::jit::Module script = load_script("lstm_lm_scripted");
    const at::Tensor ids = torch::randint(0, 100, {2, 16});
    fx::GraphModule gm = fx::symbolic_trace(script, {ids});
    const fx::InferenceReport report = fx::optimize_for_inference(*gm);
    CHECK(report.recurrent == 1);
    CHECK(count_calls(gm, "aten::lstm.input") == 0);
    CHECK(relative_error(gm(ids).toTensor(),
                         script.forward({ids}).toTensor()) < 1e-4);
  }
  SECTION("torch::nn::LSTM, its state returned") {
    models::ZooModel model = models::make_zoo_model("lstm_tagger");
    fx::GraphModule gm = models::trace_zoo_model(model);
    const fx::InferenceReport report = fx::optimize_for_inference(*gm);
    CHECK(report.recurrent == 1);
    const c10::IValue want = model.forward(model.example_inputs);
    const c10::IValue got = gm->forward(model.example_inputs);
    const auto& w = want.toTupleRef().elements();
    const auto& g = got.toTupleRef().elements();
    CHECK(relative_error(g[0].toTensor(), w[0].toTensor()) < 1e-4);
    const auto& w_state = w[1].toTupleRef().elements();
    const auto& g_state = g[1].toTupleRef().elements();
    for (size_t i = 0; i < 2; ++i) {
      CHECK(relative_error(g_state[i].toTensor(), w_state[i].toTensor()) <
            1e-4);
    }
  }
}

namespace {
// A GRU tagger as LibTorch users write one.
struct GruTaggerImpl : torch::nn::Module {
  GruTaggerImpl()
      : gru(register_module(
            "gru", torch::nn::GRU(torch::nn::GRUOptions(12, 20)
                                      .num_layers(2)
                                      .batch_first(true)))),
        head(register_module("head", torch::nn::Linear(20, 5))) {}
  torch::Tensor forward(torch::Tensor x) {
    return head(std::get<0>(gru->forward(x)));
  }
  torch::nn::GRU gru;
  torch::nn::Linear head;
};
TORCH_MODULE(GruTagger);
}  // namespace

TEST_CASE("GRUs lower to oneDNN's linear-before-reset GRU primitive") {
  torch::NoGradGuard no_grad;
  torch::manual_seed(0);
  GruTagger tagger;
  tagger->eval();
  const at::Tensor x = torch::randn({3, 9, 12});
  fx::GraphModule gm = fx::symbolic_trace(tagger, x);
  const fx::InferenceReport report = fx::optimize_for_inference(*gm);
  CHECK(report.recurrent == 1);
  CHECK(count_calls(gm, "aten::gru.input") == 0);
  CHECK(count_calls(gm, "fx_onednn::gru") == 1);
  CHECK(relative_error(gm(x).toTensor(), tagger(x)) < 1e-4);
}

namespace {
// A bidirectional tagger: two LSTM layers in both directions, then a GRU
// in both directions on their outputs side by side.
struct BidirectionalTaggerImpl : torch::nn::Module {
  BidirectionalTaggerImpl()
      : lstm(register_module(
            "lstm", torch::nn::LSTM(torch::nn::LSTMOptions(24, 32)
                                        .num_layers(2)
                                        .bidirectional(true)
                                        .batch_first(true)))),
        gru(register_module(
            "gru", torch::nn::GRU(torch::nn::GRUOptions(64, 16)
                                      .bidirectional(true)
                                      .batch_first(true)))),
        head(register_module("head", torch::nn::Linear(32, 7))) {}
  std::tuple<torch::Tensor, torch::Tensor> forward(torch::Tensor x) {
    auto [y, state] = lstm->forward(x);
    auto [z, h] = gru->forward(y);
    return {head(z), std::get<1>(state) + h.sum()};
  }
  torch::nn::LSTM lstm;
  torch::nn::GRU gru;
  torch::nn::Linear head;
};
TORCH_MODULE(BidirectionalTagger);
}  // namespace

TEST_CASE("bidirectional LSTMs and GRUs lower, both directions at once at "
          "batch 1") {
  torch::NoGradGuard no_grad;
  torch::manual_seed(3);
  BidirectionalTagger tagger;
  tagger->eval();
  for (int64_t batch : {1, 4}) {
    CAPTURE(batch);
    const at::Tensor x = torch::randn({batch, 11, 24});
    fx::GraphModule gm = fx::symbolic_trace(tagger, x);
    const fx::InferenceReport report = fx::optimize_for_inference(*gm);
    CHECK(report.recurrent == 2);
    CHECK(count_calls(gm, "aten::lstm.input") == 0);
    CHECK(count_calls(gm, "aten::gru.input") == 0);
    for (const fx::Node* n : gm->graph().nodes()) {
      if (n->is_call_to({"fx_onednn::lstm", "fx_onednn::gru"})) {
        // (input, hx, params, num_layers, batch_first, bidirectional)
        REQUIRE(n->args().size() == 6);
        CHECK(n->args()[5].to_bool());
      }
    }
    const auto want = tagger->forward(x);
    const c10::IValue got = gm(x);
    const auto& g = got.toTupleRef().elements();
    CHECK(relative_error(g[0].toTensor(), std::get<0>(want)) < 1e-4);
    CHECK(relative_error(g[1].toTensor(), std::get<1>(want)) < 1e-4);
    // Saved and loaded, exported to TorchScript: the same values.
    testdata::check_round_trips(gm, {x});
    // From several threads at once, each call's thread groups its own.
    CHECK(calls_differing(gm, {x}, g[0].toTensor(), 3) == 0);
  }
}

TEST_CASE("a BERT-base-sized C++ encoder (testdata/bert_base.h) lowers "
          "whole, within 1e-4 of eager, at two lengths and batch sizes") {
  torch::NoGradGuard no_grad;
  torch::manual_seed(0);
  testdata::BertBase bert;
  bert->eval();
  // 128 tokens of 2 sequences, and 37 of 1: a graph traced at each.
  for (const auto& [length, batch] :
       {std::pair<int64_t, int64_t>{128, 2}, {37, 1}}) {
    CAPTURE(length, batch);
    const at::Tensor ids = torch::randint(0, 30522, {length, batch});
    fx::GraphModule gm = fx::symbolic_trace(bert, ids);
    const fx::InferenceReport report = fx::optimize_for_inference(*gm);
    INFO(report.to_string());
    // Per layer on oneDNN: the attention's projections (q, k and v in
    // one, and its output's) and the feed-forward's two layers, and the
    // attention's two batched matmuls.
    CHECK(report.linear == 12 * 4);
    CHECK(report.matmul == 12 * 2);
    CHECK(count_calls(gm, "aten::linear") == 0);
    CHECK(count_calls(gm, "aten::bmm") == 0);
    CHECK(relative_error(gm(ids).toTensor(), bert(ids)) < 1e-4);
  }
}

TEST_CASE("lowered sequence models save, load, export to TorchScript, print "
          "C++ and run from many threads") {
  torch::NoGradGuard no_grad;
  for (const char* name : {"transformer_encoder", "lstm_tagger"}) {
    CAPTURE(name);
    models::ZooModel model = models::make_zoo_model(name);
    fx::GraphModule gm = models::trace_zoo_model(model);
    const fx::InferenceReport report = fx::optimize_for_inference(*gm);
    CHECK(report.matmul + report.recurrent > 0);
    const at::Tensor want =
        first_tensor(gm->forward(model.example_inputs));
    testdata::check_round_trips(gm, model.example_inputs);
    CHECK_THAT(gm->code(), Catch::Contains("fx_onednn::"));
    CHECK(calls_differing(gm, model.example_inputs, want, 4) == 0);
  }
}

TEST_CASE("bf16 lowers a transformer's linear layers in bfloat16 and its "
          "attention in float32") {
  torch::NoGradGuard no_grad;
  torch::jit::Module script = load_script("fused_encoder_traced");
  torch::manual_seed(0);
  const at::Tensor x = torch::randn({2, 16, 32});
  fx::GraphModule gm = fx::symbolic_trace(script, {x});
  fx::InferenceOptions options;
  options.bf16 = true;
  if (!fx::onednn::bf16_supported()) {
    // No AVX-512 (an AVX2 machine): refused by name.
    CHECK_THROWS_WITH(fx::optimize_for_inference(*gm, options),
                      Catch::Contains("avx512_core"));
    return;
  }
  const fx::InferenceReport report = fx::optimize_for_inference(*gm, options);
  CHECK(report.linear == 10);
  CHECK(report.matmul == 6);
  const at::Tensor got = gm(x).toTensor();
  CHECK(got.scalar_type() == at::kFloat);
  CHECK(relative_error(got, script.forward({x}).toTensor()) < 5e-2);
}

TEST_CASE("a lowered TorchScript transformer runs other batch sizes and "
          "lengths") {
  torch::NoGradGuard no_grad;
  for (const char* name : {"fused_encoder_traced", "lstm_lm_scripted"}) {
    CAPTURE(name);
    torch::jit::Module script = load_script(name);
    const bool tokens = std::string(name) == "lstm_lm_scripted";
    auto input = [&](int64_t batch, int64_t length) {
      return tokens ? torch::randint(0, 100, {batch, length})
                    : torch::randn({batch, length, 32});
    };
    fx::GraphModule gm = fx::symbolic_trace(script, {input(2, 16)});
    fx::optimize_for_inference(*gm);
    for (auto [batch, length] : {std::pair<int64_t, int64_t>{1, 16}, {3, 9},
                                 {2, 23}}) {
      CAPTURE(batch, length);
      const at::Tensor x = input(batch, length);
      CHECK(relative_error(gm(x).toTensor(), script.forward({x}).toTensor()) <
            1e-4);
    }
  }
}
