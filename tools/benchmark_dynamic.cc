// Dynamic dimensions (fx::TraceOptions::dynamic): one generic graph, traced
// once, against graphs specialized to each shape, side by side in one run
// (interleaved rounds, medians of paired ratios), plain and lowered to
// oneDNN, at batch 1 and 8; on ResNet-50, a BERT-style encoder written in
// C++ (hand-written attention, 4 layers, d=256, 128 tokens) and the stock
// C++ TransformerEncoder (4 layers, d=256, 128 tokens). Then what tracing
// with dynamic dimensions costs beside a plain trace.
//
//   bazel run //tools:benchmark_dynamic [-- --quick --repeats=N --threads=N]
//
// Targets: a generic graph within 2% of the specialized one (plain and
// lowered); outputs bitwise equal to the specialized graph's (plain) and
// within 1e-5 of eager's largest magnitude (lowered); a dynamic trace at
// most 6x a plain trace (three traces near the example were held to 3x;
// the traces at the bounds may at most double that).
#include <cmath>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_format.h"
#include "fx/fx.h"
#include "lowering/optimize_for_inference.h"
#include "models/zoo.h"
#include "tools/benchmark_support.h"

namespace {

using namespace fx::benchmark;

// A BERT-style encoder as a C++ user writes it: token and position
// embeddings, then layers of multi-head attention (heads reshaped out of the
// model dimension with the sizes read from the input) and a GELU
// feed-forward block, post-norm.
struct EncoderLayerImpl : torch::nn::Module {
  EncoderLayerImpl(int64_t dim, int64_t heads)
      : heads(heads),
        qkv(register_module("qkv", torch::nn::Linear(dim, 3 * dim))),
        out(register_module("out", torch::nn::Linear(dim, dim))),
        ff1(register_module("ff1", torch::nn::Linear(dim, 4 * dim))),
        ff2(register_module("ff2", torch::nn::Linear(4 * dim, dim))),
        ln1(register_module("ln1", torch::nn::LayerNorm(
                                       torch::nn::LayerNormOptions({dim})))),
        ln2(register_module("ln2", torch::nn::LayerNorm(
                                       torch::nn::LayerNormOptions({dim})))) {}
  torch::Tensor forward(torch::Tensor x) {
    const int64_t B = x.size(0), T = x.size(1), D = x.size(2);
    std::vector<torch::Tensor> parts = qkv(x).chunk(3, -1);
    auto split = [&](const torch::Tensor& t) {
      return t.view({B, T, heads, D / heads}).transpose(1, 2);
    };
    torch::Tensor att =
        split(parts[0]).matmul(split(parts[1]).transpose(-2, -1)) /
        std::sqrt(static_cast<double>(D / heads));
    torch::Tensor y = att.softmax(-1).matmul(split(parts[2]));
    y = y.transpose(1, 2).contiguous().view({B, T, D});
    x = ln1(x + out(y));
    return ln2(x + ff2(torch::gelu(ff1(x))));
  }
  int64_t heads;
  torch::nn::Linear qkv, out, ff1, ff2;
  torch::nn::LayerNorm ln1, ln2;
};
TORCH_MODULE(EncoderLayer);

struct BertImpl : torch::nn::Module {
  BertImpl(int64_t dim, int64_t layers)
      : tok(register_module("tok", torch::nn::Embedding(1000, dim))),
        pos(register_module("pos", torch::nn::Embedding(512, dim))) {
    for (int64_t i = 0; i < layers; ++i) {
      blocks.push_back(register_module("layer" + std::to_string(i),
                                       EncoderLayer(dim, 4)));
    }
  }
  torch::Tensor forward(torch::Tensor tokens) {
    torch::Tensor x =
        tok(tokens) + pos(torch::arange(tokens.size(1), tokens.options()));
    for (auto& block : blocks) x = block->forward(x);
    return x;
  }
  torch::nn::Embedding tok, pos;
  std::vector<EncoderLayer> blocks;
};
TORCH_MODULE(Bert);

struct Model {
  std::string name;
  std::shared_ptr<torch::nn::Module> module;
  fx::BoxedForward forward;
  // An input at batch b (the other dynamic sizes at their benchmark value).
  std::function<at::Tensor(int64_t b)> input;
  std::vector<fx::DynamicDim> dynamic;
};

fx::DynamicDim dim(int64_t d, const std::string& symbol, int64_t max) {
  fx::DynamicDim out;
  out.dim = d;
  out.symbol = symbol;
  out.max = max;
  return out;
}

std::vector<Model> make_models(bool quick) {
  std::vector<Model> out;
  {
    models::ZooModel zoo = models::make_zoo_model(quick ? "resnet18" : "resnet50");
    const int64_t side = quick ? 112 : 224;
    out.push_back({zoo.name, zoo.module, zoo.forward,
                   [side](int64_t b) { return torch::randn({b, 3, side, side}); },
                   {dim(0, "N", 64)}});
  }
  const int64_t tokens = quick ? 32 : 128;
  {
    torch::manual_seed(0);
    Bert bert(256, quick ? 2 : 4);
    bert->eval();
    out.push_back({"bert-style encoder (C++)", bert.ptr(),
                   [bert](const std::vector<c10::IValue>& in) mutable {
                     return c10::IValue(bert->forward(in[0].toTensor()));
                   },
                   [tokens](int64_t b) {
                     return torch::randint(1000, {b, tokens}, torch::kLong);
                   },
                   {dim(0, "B", 64), dim(1, "T", 512)}});
  }
  {
    torch::manual_seed(0);
    torch::nn::TransformerEncoder encoder(torch::nn::TransformerEncoderOptions(
        torch::nn::TransformerEncoderLayerOptions(256, 4)
            .dim_feedforward(1024)
            .dropout(0.0),
        quick ? 2 : 4));
    encoder->eval();
    out.push_back({"torch::nn::TransformerEncoder", encoder.ptr(),
                   [encoder](const std::vector<c10::IValue>& in) mutable {
                     return c10::IValue(encoder->forward(in[0].toTensor()));
                   },
                   [tokens](int64_t b) {
                     return torch::randn({tokens, b, 256});
                   },
                   {dim(0, "T", 512), dim(1, "B", 64)}});
  }
  return out;
}

fx::GraphModule trace(const Model& m, const at::Tensor& x, bool dynamic) {
  fx::TraceOptions options;
  if (dynamic) options.dynamic = m.dynamic;
  return fx::symbolic_trace(m.module, m.forward, {x}, options);
}

double max_difference(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

struct Row {
  std::string model;
  int64_t batch;
  double plain_specialized_ms, plain_ratio, lowered_specialized_ms,
      lowered_ratio;
  double plain_difference, lowered_error, bound;
  int64_t sym_nodes;
};

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "a generic graph (TraceOptions::dynamic) beside graphs specialized to "
      "each shape.\n  bazel run //tools:benchmark_dynamic -- [--quick] "
      "[--threads=N] [--repeats=N]\n--quick: ResNet-18 at 112x112, 2-layer "
      "transformers over 32 tokens, 3 rounds.");
  absl::ParseCommandLine(argc, argv);
  const RunFlags flags = run_flags();
  at::set_num_threads(flags.threads);
  // The unlowered graphs' matmuls run on the BLAS.
  const std::string blas = run_openblas_at_one_thread();
  torch::NoGradGuard no_grad;
  const std::string before = machine_summary();
  std::vector<Row> rows;
  Table trace_table({"model", "plain trace ms", "dynamic trace ms", "ratio",
                     "sym nodes"});
  std::vector<TargetCheck> checks;
  for (Model& m : make_models(flags.quick)) {
    std::cerr << "timing " << m.name << "\n";
    // One generic graph, traced at batch 2, for every batch.
    const at::Tensor example = m.input(2);
    fx::GraphModule generic = trace(m, example, true);
    fx::GraphModule generic_lowered = trace(m, example, true);
    fx::optimize_for_inference(*generic_lowered);
    int64_t sym_nodes = 0;
    for (const fx::Node* n : generic->graph().nodes()) {
      sym_nodes += fx::is_sym_call(*n);
    }
    for (int64_t b : {int64_t{1}, int64_t{8}}) {
      torch::manual_seed(b);
      const at::Tensor x = m.input(b);
      fx::GraphModule specialized = trace(m, x, false);
      fx::GraphModule lowered = trace(m, x, false);
      fx::optimize_for_inference(*lowered);
      c10::IValue out;
      auto samples = interleaved_samples_ms(
          {[&] { out = specialized(x); }, [&] { out = generic(x); },
           [&] { out = lowered(x); }, [&] { out = generic_lowered(x); }},
          flags.repeats, 1, Sample::kWarm);
      Row r;
      r.model = m.name;
      r.batch = b;
      r.plain_specialized_ms = median(samples[0]);
      r.plain_ratio = median_paired_ratio(samples[1], samples[0]);
      r.lowered_specialized_ms = median(samples[2]);
      r.lowered_ratio = median_paired_ratio(samples[3], samples[2]);
      const at::Tensor eager = m.forward({x}).toTensor();
      r.plain_difference =
          max_difference(generic(x).toTensor(), specialized(x).toTensor());
      r.lowered_error = max_difference(generic_lowered(x).toTensor(), eager);
      r.bound = 1e-5 * eager.abs().max().item<double>();
      r.sym_nodes = sym_nodes;
      rows.push_back(r);
    }
    // Tracing: plain against dynamic, interleaved.
    auto trace_samples = interleaved_samples_ms(
        {[&] { trace(m, example, false); }, [&] { trace(m, example, true); }},
        flags.repeats, 1);
    const double trace_ratio =
        median_paired_ratio(trace_samples[1], trace_samples[0]);
    trace_table.add_row({m.name, fixed(median(trace_samples[0]), 2),
                         fixed(median(trace_samples[1]), 2),
                         times(trace_ratio), std::to_string(sym_nodes)});
    checks.push_back({"dynamic trace of " + m.name + " <= 6x a plain trace",
                      absl::StrFormat("%.2fx", trace_ratio),
                      trace_ratio <= 6.0});
  }
  Table table({"model", "batch", "specialized ms", "generic / specialized",
               "lowered specialized ms", "lowered generic / specialized"});
  for (const Row& r : rows) {
    table.add_row({r.model, std::to_string(r.batch),
                   fixed(r.plain_specialized_ms, 2), times(r.plain_ratio),
                   fixed(r.lowered_specialized_ms, 2), times(r.lowered_ratio)});
    const std::string at = absl::StrFormat("%s at batch %d", r.model, r.batch);
    checks.push_back({"generic " + at + " within 2% of specialized",
                      times(r.plain_ratio), r.plain_ratio <= 1.02});
    checks.push_back({"lowered generic " + at + " within 2% of specialized",
                      times(r.lowered_ratio), r.lowered_ratio <= 1.02});
    checks.push_back({"generic " + at + " bitwise equal to specialized",
                      absl::StrFormat("max |diff| %g", r.plain_difference),
                      r.plain_difference == 0, /*timing=*/false});
    checks.push_back(
        {"lowered generic " + at + " within 1e-5 of eager (relative)",
         absl::StrFormat("max |diff| %.2g (bound %.2g)", r.lowered_error,
                         r.bound),
         r.lowered_error <= r.bound, /*timing=*/false});
  }
  std::cout << before << "\n";
  print_section(
      "One generic graph (traced once, at batch 2) against graphs "
      "specialized to each batch",
      table,
      {absl::StrFormat("%d threads, %d interleaved rounds, warm (each "
                       "sample after an untimed call of the same graph), "
                       "medians; ratios are medians of per-round ratios",
                       flags.threads, flags.repeats),
       blas});
  print_section("Tracing with dynamic dimensions (3 traces near the "
                "example, compared and fitted, and those at the bounds) "
                "against a plain trace",
                trace_table);
  return print_targets(checks, flags.quick);
}
