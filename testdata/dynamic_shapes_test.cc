// Dynamic dimensions (fx::TraceOptions::dynamic) on real models: each traced
// once, then run at other batch sizes and lengths, bitwise equal to eager
// (the graph calls the same operators). C++ models that read sizes as
// LibTorch's examples do (`x.view({x.size(0), -1})`), a GPT-style decoder
// with position embeddings and a causal mask, a BERT-style encoder whose
// mask input shares the tokens' dimensions, the stock C++
// TransformerEncoder and GRU, every zoo model at other batch sizes,
// a TorchScript module; under four threads at different shapes at once,
// after fx::save / fx::load and through the printed IR. And what is
// refused: a program whose graph changes with a size, a constant made from
// a size, a division without multiple_of, and inputs that break a relation.
#include <cmath>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <torch/script.h>
#include <torch/torch.h>

#include "codegen/module_codegen.h"
#include "fx/fx.h"
#include "fx/torchscript/torchscript.h"
#include "interpreter/transformer.h"
#include "lowering/optimize_for_inference.h"
#include "passes/split_module.h"
#include "quantization/numeric_suite.h"
#include "quantization/qat.h"
#include "quantization/quantize_fx.h"
#include "models/zoo.h"
#include "third_party/catch.h"

namespace {

fx::DynamicDim dim(size_t input, int64_t d, std::string symbol,
                   int64_t max = std::numeric_limits<int64_t>::max(),
                   int64_t multiple_of = 1) {
  fx::DynamicDim out;
  out.input = input;
  out.dim = d;
  out.symbol = std::move(symbol);
  out.max = max;
  out.multiple_of = multiple_of;
  return out;
}

fx::TraceOptions dynamic(std::vector<fx::DynamicDim> dims) {
  fx::TraceOptions options;
  options.dynamic = std::move(dims);
  return options;
}

bool same(const c10::IValue& a, const c10::IValue& b) {
  if (a.isTensor() && b.isTensor()) {
    return a.toTensor().sizes() == b.toTensor().sizes() &&
           torch::equal(a.toTensor(), b.toTensor());
  }
  if (a.isTuple() && b.isTuple()) {
    const auto& x = a.toTupleRef().elements();
    const auto& y = b.toTupleRef().elements();
    if (x.size() != y.size()) return false;
    for (size_t i = 0; i < x.size(); ++i) {
      if (!same(x[i], y[i])) return false;
    }
    return true;
  }
  return false;
}

// LibTorch's MNIST example's way of flattening: a size read in C++.
struct ConvNetImpl : torch::nn::Module {
  ConvNetImpl()
      : conv(register_module("conv", torch::nn::Conv2d(
                                         torch::nn::Conv2dOptions(1, 8, 3)
                                             .padding(1)))),
        fc(register_module("fc", torch::nn::Linear(8 * 7 * 7, 10))) {}
  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(conv(x)), 2);
    x = x.view({x.size(0), -1});
    return fc(x);
  }
  torch::nn::Conv2d conv;
  torch::nn::Linear fc;
};
TORCH_MODULE(ConvNet);

// A GPT-style block: token and position embeddings, hand-written causal
// multi-head attention (the heads reshaped out of the model dimension),
// an optional padding mask [B, T] that shares the tokens' sizes.
struct TinyGptImpl : torch::nn::Module {
  static constexpr int64_t kDim = 32, kHeads = 4;
  TinyGptImpl()
      : tok(register_module("tok", torch::nn::Embedding(100, kDim))),
        pos(register_module("pos", torch::nn::Embedding(64, kDim))),
        qkv(register_module("qkv", torch::nn::Linear(kDim, 3 * kDim))),
        proj(register_module("proj", torch::nn::Linear(kDim, kDim))),
        ln(register_module("ln", torch::nn::LayerNorm(
                                     torch::nn::LayerNormOptions({kDim})))),
        head(register_module("head", torch::nn::Linear(kDim, 100))) {}

  torch::Tensor forward(torch::Tensor tokens, torch::Tensor mask = {}) {
    const int64_t B = tokens.size(0), T = tokens.size(1);
    torch::Tensor x = tok(tokens) + pos(torch::arange(T, tokens.options()));
    std::vector<torch::Tensor> parts = qkv(ln(x)).chunk(3, -1);
    auto heads = [&](const torch::Tensor& t) {
      return t.view({B, T, kHeads, kDim / kHeads}).transpose(1, 2);
    };
    torch::Tensor q = heads(parts[0]), k = heads(parts[1]),
                  v = heads(parts[2]);
    torch::Tensor att = q.matmul(k.transpose(-2, -1)) /
                        std::sqrt(static_cast<double>(kDim / kHeads));
    torch::Tensor causal =
        torch::ones({T, T}, x.options()).triu(1).to(torch::kBool);
    att = att.masked_fill(causal, -1e9);
    if (mask.defined()) att = att + (1 - mask).view({B, 1, 1, T}) * -1e4;
    torch::Tensor y = att.softmax(-1).matmul(v).transpose(1, 2).contiguous()
                          .view({B, T, kDim});
    return head(x + proj(y));
  }
  torch::nn::Embedding tok, pos;
  torch::nn::Linear qkv, proj;
  torch::nn::LayerNorm ln;
  torch::nn::Linear head;
};
TORCH_MODULE(TinyGpt);

torch::Tensor tokens(int64_t b, int64_t t) {
  return torch::randint(100, {b, t}, torch::kLong);
}

}  // namespace

TEST_CASE("a C++ CNN that flattens with x.size(0) runs at every batch size") {
  torch::manual_seed(0);
  ConvNet model;
  model->eval();
  fx::Tracer tracer(dynamic({dim(0, 0, "B", 64)}));
  auto graph = tracer.trace(
      model.ptr(),
      [&](const std::vector<c10::IValue>& in) {
        return c10::IValue(model->forward(in[0].toTensor()));
      },
      {torch::randn({2, 1, 14, 14})});
  CHECK(tracer.stats().traces == 5);  // B = 2, two near it, 1 and 64
  fx::GraphModule gm(model.ptr(), std::move(graph), tracer.take_attributes());
  const std::string printed = gm->graph().to_string();
  CHECK(printed.find("%B : [#users=1] = call_function[target=sym_size](args "
                     "= (%x, 0)") != std::string::npos);
  for (int64_t b : {1, 3, 8, 64}) {
    torch::Tensor x = torch::randn({b, 1, 14, 14});
    CHECK(torch::equal(gm(x).toTensor(), model->forward(x)));
  }
  // Outside the bounds, and a fixed dimension changed: refused by name.
  CHECK_THROWS_WITH(gm(torch::randn({65, 1, 14, 14})),
                    Catch::Contains("B = 65") &&
                        Catch::Contains("1 <= B <= 64"));
  CHECK_THROWS_WITH(gm(torch::randn({2, 1, 16, 16})),
                    Catch::Contains("dimension 2 must be 14") &&
                        Catch::Contains("0 (B)"));
}

TEST_CASE("a GPT-style decoder runs at other batch sizes and lengths") {
  torch::manual_seed(0);
  TinyGpt model;
  model->eval();
  auto forward = [&](torch::Tensor t) { return model->forward(t); };
  fx::GraphModule gm = fx::symbolic_trace(
      forward, {tokens(2, 8)},
      dynamic({dim(0, 0, "B"), dim(0, 1, "T", /*max=*/64)}));
  for (auto [b, t] : {std::pair<int64_t, int64_t>{1, 1}, {1, 5}, {3, 17},
                      {4, 64}, {2, 8}}) {
    torch::Tensor x = tokens(b, t);
    INFO("B=" << b << " T=" << t);
    CHECK(torch::equal(gm(x).toTensor(), model->forward(x)));
  }

  SECTION("four threads at four shapes at once") {
    std::vector<torch::Tensor> inputs = {tokens(1, 3), tokens(2, 9),
                                         tokens(3, 20), tokens(5, 33)};
    std::vector<torch::Tensor> expected;
    for (const auto& x : inputs) expected.push_back(model->forward(x));
    std::vector<int> ok(inputs.size(), 0);
    std::vector<std::thread> threads;
    for (size_t i = 0; i < inputs.size(); ++i) {
      threads.emplace_back([&, i] {
        bool all = true;
        for (int r = 0; r < 20; ++r) {
          all = all && torch::equal(gm(inputs[i]).toTensor(), expected[i]);
        }
        ok[i] = all;
      });
    }
    for (auto& t : threads) t.join();
    CHECK(ok == std::vector<int>(inputs.size(), 1));
  }

  SECTION("through a Transformer, and lowered to oneDNN") {
    fx::GraphModule transformed = fx::Transformer(gm).transform();
    CHECK(transformed->graph().to_string().find("sym_size") !=
          std::string::npos);
    fx::GraphModule lowered = fx::symbolic_trace(
        forward, {tokens(2, 8)},
        dynamic({dim(0, 0, "B"), dim(0, 1, "T", /*max=*/64)}));
    lowered->eval();
    fx::optimize_for_inference(*lowered);
    for (auto [b, t] : {std::pair<int64_t, int64_t>{1, 3}, {3, 17}}) {
      torch::Tensor x = tokens(b, t);
      torch::Tensor expected = model->forward(x);
      CHECK(torch::equal(transformed(x).toTensor(), expected));
      const double error =
          (lowered(x).toTensor() - expected).abs().max().item<double>();
      CHECK(error <= 1e-5 * expected.abs().max().item<double>());
    }
  }

  SECTION("generated C++ reads the sizes from its inputs") {
    fx::codegen::ModuleOptions options;
    const std::string source = fx::codegen::emit_module(*gm, options).source;
    CHECK(source.find("const int64_t B = x.size(0);") != std::string::npos);
    CHECK(source.find("const int64_t T = x.size(1);") != std::string::npos);
    CHECK(source.find("fx::check_dynamic_tensor_input(x, ") !=
          std::string::npos);
  }

  SECTION("exported to TorchScript, shape-generic, with the relations") {
    torch::jit::Module exported = fx::to_torchscript(gm);
    for (auto [b, t] : {std::pair<int64_t, int64_t>{1, 2}, {4, 30}}) {
      torch::Tensor x = tokens(b, t);
      CHECK(torch::equal(exported.forward({x}).toTensor(), model->forward(x)));
    }
    CHECK_THROWS_WITH(exported.forward({tokens(1, 65)}),
                      Catch::Contains("has T = 65 (dimension 1), outside what "
                                      "the trace allows: 1 <= T <= 64"));
  }

  SECTION("through fx::save / fx::load and the printed IR") {
    std::stringstream file;
    fx::save(gm, file);
    fx::GraphModule loaded = fx::load(file);
    torch::Tensor x = tokens(3, 11);
    CHECK(torch::equal(loaded(x).toTensor(), model->forward(x)));
    CHECK_THROWS_WITH(loaded(tokens(1, 65)),
                      Catch::Contains("1 <= T <= 64"));
    std::unique_ptr<fx::Graph> parsed =
        fx::parse_graph(gm->graph().to_string());
    CHECK(parsed->to_string() == gm->graph().to_string());
  }
}

TEST_CASE("an encoder whose mask shares the tokens' sizes guards equality") {
  torch::manual_seed(0);
  TinyGpt model;
  model->eval();
  auto forward = [&](torch::Tensor t, torch::Tensor m) {
    return model->forward(t, m);
  };
  fx::GraphModule gm = fx::symbolic_trace(
      forward, {tokens(2, 6), torch::ones({2, 6})},
      dynamic({dim(0, 0, "B"), dim(0, 1, "T"), dim(1, 0, "B"),
               dim(1, 1, "T")}));
  for (auto [b, t] : {std::pair<int64_t, int64_t>{1, 4}, {3, 10}, {5, 2}}) {
    torch::Tensor x = tokens(b, t);
    torch::Tensor m = (torch::rand({b, t}) > 0.3).to(torch::kFloat);
    CHECK(torch::equal(gm(x, m).toTensor(), model->forward(x, m)));
  }
  CHECK_THROWS_WITH(gm(tokens(2, 10), torch::ones({2, 12})),
                    Catch::Contains("T = 12") &&
                        Catch::Contains("dimensions named T must be equal"));
}

TEST_CASE("the stock C++ TransformerEncoder and GRU at other shapes") {
  torch::manual_seed(0);
  torch::nn::TransformerEncoder encoder(torch::nn::TransformerEncoderOptions(
      torch::nn::TransformerEncoderLayerOptions(32, 4)
          .dim_feedforward(64)
          .dropout(0.0),
      2));
  encoder->eval();
  auto run_encoder = [&](torch::Tensor src) { return encoder->forward(src); };
  fx::GraphModule gm = fx::symbolic_trace(
      run_encoder, {torch::randn({10, 2, 32})},
      dynamic({dim(0, 0, "T"), dim(0, 1, "B")}));
  for (auto [t, b] : {std::pair<int64_t, int64_t>{3, 1}, {17, 4}, {10, 2}}) {
    torch::Tensor src = torch::randn({t, b, 32});
    CHECK(torch::equal(gm(src).toTensor(), encoder->forward(src)));
  }

  torch::nn::GRU gru(torch::nn::GRUOptions(16, 24).batch_first(true)
                         .num_layers(2).bidirectional(true));
  gru->eval();
  auto run_gru = [&](torch::Tensor x) { return std::get<0>(gru->forward(x)); };
  fx::GraphModule tagger = fx::symbolic_trace(
      run_gru, {torch::randn({2, 7, 16})},
      dynamic({dim(0, 0, "B"), dim(0, 1, "T")}));
  for (auto [b, t] : {std::pair<int64_t, int64_t>{1, 1}, {5, 12}, {3, 4}}) {
    torch::Tensor x = torch::randn({b, t, 16});
    CHECK(torch::equal(tagger(x).toTensor(), run_gru(x)));
  }
}

TEST_CASE("every zoo model at other batch sizes") {
  for (const std::string& name : models::traceable_zoo_model_names()) {
    DYNAMIC_SECTION(name) {
      models::ZooModel model = models::make_zoo_model(name);
      fx::TraceOptions options;
      options.leaf_modules = model.leaf_modules;
      // The sequence models take [S, N] tokens.
      const bool sequence =
          name == "transformer_encoder" || name == "lstm_tagger";
      options.dynamic = {dim(0, sequence ? 1 : 0, "N")};
      if (sequence) options.dynamic.push_back(dim(0, 0, "S"));
      fx::GraphModule gm = fx::symbolic_trace(
          model.module, model.forward, model.example_inputs, options);
      const at::Tensor example = model.example_inputs[0].toTensor();
      for (int64_t scale : {2, 3}) {
        std::vector<int64_t> sizes = example.sizes().vec();
        sizes[sequence ? 1 : 0] = sizes[sequence ? 1 : 0] * scale + 1;
        if (sequence) sizes[0] += scale;
        torch::manual_seed(scale);
        at::Tensor x = example.is_floating_point()
                           ? torch::randn(sizes)
                           : torch::randint(100, sizes, torch::kLong);
        INFO("sizes " << c10::IntArrayRef(sizes));
        CHECK(same(gm->forward({x}), model.forward({x})));
      }
    }
  }
}

TEST_CASE("a TorchScript module at other batch sizes") {
  torch::jit::Module m("Heads");
  m.register_parameter("w", torch::randn({16, 16}), false);
  m.define(R"(
    def forward(self, x):
        b = x.size(0)
        t = x.size(1)
        y = x.matmul(self.w).view(b, t, 4, 4).transpose(1, 2)
        return y.reshape(b * 4, t * 4)
  )");
  fx::GraphModule gm = fx::symbolic_trace(
      m, {torch::randn({2, 5, 16})},
      dynamic({dim(0, 0, "B"), dim(0, 1, "T")}));
  for (auto [b, t] : {std::pair<int64_t, int64_t>{1, 1}, {4, 9}}) {
    torch::Tensor x = torch::randn({b, t, 16});
    CHECK(torch::equal(gm(x).toTensor(), m.forward({x}).toTensor()));
  }
}

TEST_CASE("what cannot be made generic is refused at trace time") {
  auto branch = [](torch::Tensor x) {
    return x.size(1) > 10 ? x * 2 : x + 1;
  };
  CHECK_THROWS_WITH(
      fx::symbolic_trace(branch, {torch::randn({2, 8})},
                         dynamic({dim(0, 1, "T")})),
      Catch::Contains("cannot be generalized") &&
          Catch::Contains("differs from the one at T=8"));
  // Bounded below the branch, the same program generalizes.
  fx::GraphModule bounded = fx::symbolic_trace(
      branch, {torch::randn({2, 8})}, dynamic({dim(0, 1, "T", /*max=*/10)}));
  torch::Tensor x = torch::randn({2, 10});
  CHECK(torch::equal(bounded(x).toTensor(), branch(x)));

  auto constant = [](torch::Tensor x) {
    return x + torch::tensor(std::vector<float>(x.size(1), 1.0f));
  };
  CHECK_THROWS_WITH(
      fx::symbolic_trace(constant, {torch::randn({2, 8})},
                         dynamic({dim(0, 1, "T")})),
      Catch::Contains("_tensor_constant0") &&
          Catch::Contains("depends on a dynamic size"));

  auto windows = [](torch::Tensor x) {
    return x.view({x.size(0), x.size(1) / 4, 4 * x.size(2)});
  };
  CHECK_THROWS_WITH(
      fx::symbolic_trace(windows, {torch::randn({2, 8, 3})},
                         dynamic({dim(0, 1, "T")})),
      Catch::Contains("tracing again at T=10") &&
          Catch::Contains("multiple_of"));
  fx::GraphModule fitted = fx::symbolic_trace(
      windows, {torch::randn({2, 8, 3})},
      dynamic({dim(0, 1, "T", /*max=*/1024, /*multiple_of=*/4)}));
  for (int64_t t : {4, 12, 100}) {
    torch::Tensor y = torch::randn({2, t, 3});
    CHECK(torch::equal(fitted(y).toTensor(), windows(y)));
  }
  CHECK_THROWS_WITH(fitted(torch::randn({2, 10, 3})),
                    Catch::Contains("T % 4 == 0"));

  CHECK_THROWS_WITH(
      fx::symbolic_trace(windows, {torch::randn({2, 8, 3})},
                         dynamic({dim(0, 3, "T")})),
      Catch::Contains("the input has 3 dimensions"));
  CHECK_THROWS_WITH(
      fx::symbolic_trace(windows, {torch::randn({2, 8, 3})},
                         dynamic({dim(0, 1, "T", /*max=*/4)})),
      Catch::Contains("the example's size 8 breaks 1 <= T <= 4"));
}

TEST_CASE("a cache of specializations for what cannot be generalized") {
  // Its graph changes with the length: one graph cannot hold it.
  auto branch = [](torch::Tensor x) {
    return x.size(1) > 10 ? (x * 2).sum(1) : (x + 1).mean(1);
  };
  int passes = 0;
  fx::SpecializationOptions options;
  options.capacity = 2;
  options.passes = [&](fx::GraphModuleImpl&) { ++passes; };
  fx::SpecializationCache cache(
      [&](const std::vector<c10::IValue>& inputs) {
        return fx::symbolic_trace(branch, inputs, fx::TraceOptions{});
      },
      options);
  torch::Tensor a = torch::randn({2, 8}), b = torch::randn({2, 12}),
                c = torch::randn({3, 12});
  CHECK(torch::equal(cache({a}).toTensor(), branch(a)));
  CHECK(torch::equal(cache({b}).toTensor(), branch(b)));
  CHECK(torch::equal(cache({a}).toTensor(), branch(a)));
  CHECK(cache.made() == 2);
  CHECK(passes == 2);
  std::vector<fx::SpecializationCache::Specialization> held =
      cache.specializations();
  REQUIRE(held.size() == 2);
  CHECK(held[0].shapes == "f32[2, 8]");  // most recently used first
  CHECK(held[0].runs == 2);
  CHECK(held[1].shapes == "f32[2, 12]");
  // Past the capacity the least recently used one goes; seen again, it is
  // made again.
  CHECK(torch::equal(cache({c}).toTensor(), branch(c)));
  CHECK(cache.dropped() == 1);
  CHECK(cache.specializations().size() == 2);
  CHECK(torch::equal(cache({b}).toTensor(), branch(b)));
  CHECK(cache.made() == 4);
  CHECK(cache.report().find("2 specializations held (capacity 2), 4 made, "
                            "2 dropped") != std::string::npos);

  SECTION("four threads at four shapes at once: each shape made once") {
    fx::SpecializationCache shared(
        [&](const std::vector<c10::IValue>& inputs) {
          return fx::symbolic_trace(branch, inputs, fx::TraceOptions{});
        });
    std::vector<torch::Tensor> inputs = {
        torch::randn({1, 4}), torch::randn({2, 11}), torch::randn({3, 5}),
        torch::randn({4, 20})};
    std::vector<int> ok(16, 0);
    std::vector<std::thread> threads;
    for (size_t i = 0; i < ok.size(); ++i) {
      threads.emplace_back([&, i] {
        const torch::Tensor& x = inputs[i % inputs.size()];
        bool all = true;
        for (int r = 0; r < 10; ++r) {
          all = all && torch::equal(shared({x}).toTensor(), branch(x));
        }
        ok[i] = all;
      });
    }
    for (auto& t : threads) t.join();
    CHECK(ok == std::vector<int>(ok.size(), 1));
    CHECK(shared.made() == 4);
  }

  SECTION("a capacity of 0 or no trace function is refused by name") {
    fx::SpecializationOptions none;
    none.capacity = 0;
    CHECK_THROWS_WITH(
        fx::SpecializationCache(
            [&](const std::vector<c10::IValue>& inputs) {
              return fx::symbolic_trace(branch, inputs, fx::TraceOptions{});
            },
            none),
        Catch::Contains("capacity 0"));
    CHECK_THROWS_WITH(fx::SpecializationCache(nullptr),
                      Catch::Contains("no trace function"));
  }

  SECTION("a trace that fails keeps nothing") {
    fx::SpecializationCache failing(
        [&](const std::vector<c10::IValue>& inputs) -> fx::GraphModule {
          if (inputs[0].toTensor().size(0) == 5) {
            throw fx::TraceError("no trace at batch 5");
          }
          return fx::symbolic_trace(branch, inputs, fx::TraceOptions{});
        });
    CHECK_THROWS_WITH(failing({torch::randn({5, 3})}),
                      Catch::Contains("no trace at batch 5"));
    CHECK(failing.specializations().empty());
    CHECK_THROWS_WITH(failing({torch::randn({5, 3})}),
                      Catch::Contains("no trace at batch 5"));
    torch::Tensor x = torch::randn({4, 3});
    CHECK(torch::equal(failing({x}).toTensor(), branch(x)));
    CHECK(failing.made() == 1);
  }
}

TEST_CASE("int8 (static, dynamic, quantization-aware) and split_module keep a dynamic graph generic") {
  torch::manual_seed(0);
  ConvNet model;
  model->eval();
  fx::GraphModule gm = fx::symbolic_trace(model, {torch::randn({2, 1, 14, 14})},
                                          dynamic({dim(0, 0, "B", 64)}));

  // Two partitions, the size read in the first and used in the second.
  int64_t index = 0;
  fx::GraphModule split = fx::split_module(
      gm, [&](const fx::Node&) { return index++ < 3 ? 0 : 1; });
  for (int64_t b : {1, 7}) {
    torch::Tensor x = torch::randn({b, 1, 14, 14});
    CHECK(torch::equal(split(x).toTensor(), model->forward(x)));
  }
  CHECK_THROWS_AS(split(torch::randn({65, 1, 14, 14})), fx::GuardError);

  fx::set_quantized_engine("onednn");
  fx::GraphModule prepared =
      fx::prepare_fx(gm, fx::get_default_qconfig_mapping("onednn"));
  for (int i = 0; i < 4; ++i) prepared(torch::randn({1 + i, 1, 14, 14}));
  fx::GraphModule int8 = fx::convert_fx(prepared);
  // At batch 9, each sample as the same graph computes it alone (fixed
  // activation scales make samples independent), and close to float.
  torch::Tensor x = torch::randn({9, 1, 14, 14});
  torch::Tensor out = int8(x).toTensor();
  CHECK(fx::sqnr_db(model->forward(x), out) > 20);
  for (int64_t i = 0; i < 9; ++i) {
    CHECK(torch::equal(out[i], int8(x.narrow(0, i, 1)).toTensor()[0]));
  }
  CHECK_THROWS_AS(int8(torch::randn({65, 1, 14, 14})), fx::GuardError);

  // Dynamic quantization (weights ahead, activations per call) and
  // quantization-aware training, trained at two batch sizes, run a third.
  fx::DynamicOptions dynamic_options;
  fx::GraphModule dynamic_int8 = fx::quantize_dynamic_fx(gm, dynamic_options);
  for (int64_t b : {1, 6}) {
    torch::Tensor y = torch::randn({b, 1, 14, 14});
    CHECK(fx::sqnr_db(model->forward(y), dynamic_int8(y).toTensor()) > 20);
  }
  fx::GraphModule qat =
      fx::prepare_qat_fx(gm, fx::get_default_qat_qconfig_mapping("onednn"));
  fx::DistillationOptions distill;
  distill.steps = 4;
  fx::distill_qat(qat, gm, {{torch::randn({2, 1, 14, 14})}, {torch::randn({3, 1, 14, 14})}},
                  distill);
  fx::disable_observer(qat);
  fx::GraphModule qat_int8 = fx::convert_fx(qat);
  // At batch 9: int8 computes what the QAT module simulates.
  CHECK(fx::sqnr_db(qat(x).toTensor(), qat_int8(x).toTensor()) > 25);
  CHECK(fx::sqnr_db(model->forward(x), qat_int8(x).toTensor()) > 12);
  CHECK_THROWS_AS(qat_int8(torch::randn({65, 1, 14, 14})), fx::GuardError);
}
