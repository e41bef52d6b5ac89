// Greedy generation from C++, beside ONNX Runtime: models::GptGenerator's
// forward (the prompt through the decoder at once, then one fx::while_loop
// step per token over a key/value cache), traced to one GraphModule and
// lowered (fx::optimize_for_inference, the loop body's linear layers on
// oneDNN), against ONNX Runtime running that graph's ONNX export (the loop
// an ONNX Loop, graph optimizations on) in a process of its own, on the
// same prompt and threads; LibTorch eager (the module's forward, the loop a
// C++ loop) beside. A figure is a call's time over the tokens it generates
// (no end token: every call fills the sequence; the prompt's pass
// included). Samples are warm and interleaved round by round, ours pinned,
// as benchmark_inference's section 6 takes them; every side's tokens are
// checked equal to decoding without a cache.
//
//   bazel run //tools:benchmark_generation [-- --quick --threads=N --repeats=N]
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include <absl/flags/parse.h>
#include <absl/flags/usage.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>
#include <torch/torch.h>
#include <torch/version.h>

#include "fx/fx.h"
#include "lowering/optimize_for_inference.h"
#include "models/gpt_generator.h"
#include "onnx/to_onnx.h"
#include "tools/benchmark_support.h"
#include "tools/timed_process.h"

namespace {

using namespace fx::benchmark;  // NOLINT: the benchmark's helpers

constexpr char kOrtTimerScript[] = "tools/ort_timer.js";
constexpr char kDir[] = "/tmp/fx_benchmark_generation";
constexpr std::chrono::milliseconds kPause(50);
constexpr double kBudgetMs = 30000;
constexpr int64_t kPrompt = 8;

struct Model {
  std::string name;
  models::GptConfig config;
};

std::vector<Model> make_models(bool quick) {
  models::GptConfig decoder;  // testdata/onnx_runtime_models.py's gpt_decoder
  if (quick) {
    decoder.length = 24;
    return {{"gpt_decoder", decoder}};
  }
  models::GptConfig gpt2;  // GPT-2 small's sizes
  gpt2.layers = 12;
  gpt2.d = 768;
  gpt2.heads = 12;
  gpt2.vocab = 50257;
  gpt2.length = 128;
  return {{"gpt_decoder", decoder}, {"gpt2_small", gpt2}};
}

struct Row {
  std::string model;
  int64_t batch = 1;
  int64_t tokens = 0;  // generated per call
  double ours_ms = 0, ort_ms = 0, eager_ms = 0;  // per generated token
  double ratio = 0, eager_ratio = 0;  // ours / ORT's, ours / eager
  bool tokens_equal = false;
  int rounds = 0;
  std::string error;  // a side that could not run
};

Row measure(const Model& m, int64_t batch, const std::string& timer,
            int rounds, int threads) {
  Row r;
  r.model = m.name;
  r.batch = batch;
  r.tokens = m.config.length - kPrompt;
  try {
    torch::manual_seed(0);
    models::GptGenerator model(m.config);
    model->eval();
    torch::manual_seed(batch);
    const at::Tensor prompt =
        torch::randint(1, m.config.vocab, {batch, kPrompt}, torch::kLong);
    fx::GraphModule traced = fx::symbolic_trace(model, prompt);
    fx::GraphModule lowered(traced->copy());
    fx::optimize_for_inference(*lowered);
    const std::string onnx = absl::StrCat(kDir, "/", m.name, "_b", batch, ".onnx");
    fx::to_onnx(*traced, onnx);

    const at::Tensor want = models::greedy_without_cache(*model, prompt)[0];
    const at::Tensor ours = lowered(prompt).toListRef()[0].toTensor();
    const at::Tensor eager = model(prompt)[0];
    TimedProcess ort(ort_timer_command(timer, onnx, threads), kOrt, {prompt},
                     kDir);
    const std::vector<double> first_runs = ort.run(2);
    const double slowest = *std::max_element(first_runs.begin(), first_runs.end());
    const at::Tensor theirs = ort.output(at::kLong);
    r.tokens_equal = torch::equal(ours, want) && torch::equal(eager, want) &&
                     theirs.sizes() == want.sizes() && torch::equal(theirs, want);

    auto per_call = [](const std::function<void()>& call) {
      return [call](int calls) { return warm_median_ms(call, calls); };
    };
    const std::vector<std::function<double(int)>> variants = {
        per_call([&] { lowered(prompt); }),
        [&](int calls) { return ort.warm_median_ms(calls); },
        per_call([&] { model(prompt); })};
    const TurnSamples turns =
        sample_in_turns(variants, rounds, 2, kBudgetMs, slowest, kPause);
    r.rounds = turns.rounds;
    const auto& s = turns.samples;
    const double per_token = 1.0 / static_cast<double>(r.tokens);
    r.ours_ms = median(s[0]) * per_token;
    r.ort_ms = median(s[1]) * per_token;
    r.eager_ms = median(s[2]) * per_token;
    r.ratio = median_paired_ratio(s[0], s[1]);
    r.eager_ratio = median_paired_ratio(s[0], s[2]);
  } catch (const std::exception& e) {
    r.error = e.what();
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "greedy generation (a while_loop over a key/value cache) lowered, "
      "beside ONNX Runtime running its ONNX Loop and LibTorch eager.\n"
      "  bazel run //tools:benchmark_generation -- [--quick] [--threads=N] "
      "[--repeats=N]\n--quick: the GPT-style decoder with 24 positions at "
      "batch 1, 3 rounds.");
  absl::ParseCommandLine(argc, argv);
  const RunFlags flags = run_flags();
  at::set_num_threads(flags.threads);
  torch::NoGradGuard no_grad;
  std::filesystem::create_directories(kDir);
  const std::optional<std::string> timer = find_runfile(argv[0], kOrtTimerScript);
  const std::string before = machine_summary();

  std::vector<Row> rows;
  for (const Model& m : make_models(flags.quick)) {
    for (int64_t batch : {int64_t{1}, int64_t{4}}) {
      if (flags.quick && batch != 1) continue;
      std::cerr << "timing " << m.name << " at batch " << batch << "\n";
      if (!timer) {
        Row r;
        r.model = m.name;
        r.batch = batch;
        r.error = "tools/ort_timer.js not found";
        rows.push_back(r);
        continue;
      }
      rows.push_back(measure(m, batch, *timer, flags.repeats, flags.threads));
    }
  }

  Table table({"model", "batch", "tokens", "ours ms/token", "ORT ms/token",
               "ours / ORT", "eager ms/token", "ours / eager", "tokens equal",
               "rounds"});
  std::vector<TargetCheck> checks;
  for (const Row& r : rows) {
    const std::string at = absl::StrFormat("%s at batch %d", r.model, r.batch);
    if (!r.error.empty()) {
      table.add_row({r.model, std::to_string(r.batch), "-", "-", "-", "-", "-",
                     "-", "-", "-"});
      std::cerr << at << ": " << r.error << "\n";
      checks.push_back({"generation " + at + " measured", r.error, std::nullopt,
                        /*timing=*/false});
      continue;
    }
    table.add_row({r.model, std::to_string(r.batch), std::to_string(r.tokens),
                   fixed(r.ours_ms, 3), fixed(r.ort_ms, 3), times(r.ratio),
                   fixed(r.eager_ms, 3), times(r.eager_ratio),
                   r.tokens_equal ? "yes" : "no", std::to_string(r.rounds)});
    checks.push_back({"tokens of " + at + " equal on every side",
                      r.tokens_equal ? "equal" : "differ", r.tokens_equal,
                      /*timing=*/false});
    if (r.batch == 1) {
      checks.push_back({"generation " + at + " faster per token than ONNX "
                        "Runtime's Loop",
                        times(r.ratio), r.ratio < 1.0});
    }
  }
  std::cout << before << "\n";
  print_section(
      "Greedy generation: one GraphModule (a while_loop over a key/value "
      "cache), lowered, beside ONNX Runtime running its ONNX export",
      table,
      {absl::StrFormat("prompt of %d tokens; a figure is a call's median time "
                       "over the tokens it generates (the prompt's pass "
                       "included); %d threads on each side",
                       kPrompt, flags.threads),
       "ORT: onnxruntime-node, the file fx::to_onnx writes of the traced "
       "(unlowered) graph, the loop an ONNX Loop; eager: LibTorch " +
           std::string(TORCH_VERSION) + ", the module's own forward",
       "tokens equal: ours, ORT's and eager's against decoding without a "
       "cache (models::greedy_without_cache)"});
  return print_targets(checks, flags.quick);
}
