// benchmark_inference: fx::optimize_for_inference (lowering to oneDNN)
// against TorchScript's own torch::jit::freeze + optimize_for_inference, in
// one C++ run, on torchvision models traced to TorchScript.
//
//   bazel run //tools:benchmark_inference            full run (about 20 minutes)
//   bazel run //tools:benchmark_inference -- --quick
//   ... -- --models=resnet18 --ort_models=bert_encoder,lstm_lm --batches=8
//
// 1. The convolution peak: GFLOP/s of our own convolution (fx_onednn, on
//    oneDNN) at its best shapes (256->256 3x3 at 56x56, 1024->1024 1x1 at
//    14x14). It is what the models are graded against, not the hardware's
//    peak FLOP/s.
// 2. Per model and batch size: GMACs (the cost model), our lowered
//    GraphModule's time, TorchScript-optimized's and that of our graph with
//    the same passes but the lowering, interleaved round by round (medians,
//    and the median of per-round ratios), the fraction of
//    the convolution peak each reaches, and the largest difference of our
//    output from TorchScript's unoptimized one, relative to its largest
//    magnitude. For the compute-bound models, also oneDNN's kernels alone:
//    each oneDNN call of the lowered graph repeated on its own arguments
//    (weights and activations in cache), which bounds what any graph of
//    these kernels reaches.
// 3. Python beside it: torch.fx's optimize_for_inference (MKLDNN) and
//    TorchScript in Python on the same torchvision models at batch 1.
// 4. The generated class of a lowered graph (fx_cc_library) against the
//    lowered GraphModule.
// 5. The opt-in bfloat16 lowering against float32's: speed and accuracy.
// 6. ONNX Runtime beside us: the convolution nets, torchvision's ViT-B/16
//    and Swin-T, BERT-style encoders (4 layers d=256, and BERT-base's
//    sizes), a GPT-style decoder, an LSTM language model and a
//    bidirectional LSTM tagger (testdata/onnx_runtime_models.py), each
//    exported by torch.onnx for ONNX Runtime (tools/timed_process.h) and
//    traced to TorchScript for us;
//    interleaved round by round, with TorchScript-optimized and the
//    unlowered graph beside the sequence models.
// 7. Isolated requests at batch 1: each call alone after a pause, ours
//    with the intra-op threads unpinned and pinned
//    (fx::pin_intra_op_threads), and ONNX Runtime's.
// 8. Beside a competing load: the models called while other processes
//    keep every CPU busy.
// 9. torch.compile (Inductor) and AOTInductor beside us in float32, on the
//    same model, weights and input (tools/inductor_compare.h).
// Ends with the targets, each PASS or MISS (exit status 1 on a miss).
#include <algorithm>
#include <array>
#include <cmath>
#include <iostream>
#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <torch/csrc/jit/passes/freeze_module.h>
#include <torch/csrc/jit/passes/frozen_graph_optimizations.h>
#include <torch/script.h>
#include <torch/torch.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "fx/fx.h"
#include "fx/torchscript/torchscript.h"
#include "interpreter/interpreter.h"
#include "lowering/onednn_ops.h"
#include "lowering/optimize_for_inference.h"
#include "lowering/threads.h"
#include "models/zoo.h"
#include "passes/cost_model.h"
#include "testdata/resnet18_lowered.h"
#include "tools/benchmark_support.h"
#include "tools/competing_load.h"
#include "tools/conv_peak.h"
#include "tools/inductor_compare.h"
#include "tools/timed_process.h"

ABSL_FLAG(std::vector<std::string>, models, {},
          "torchvision models to time (default: all the benchmark knows)");
ABSL_FLAG(std::vector<std::string>, ort_models, {},
          "models to time against ONNX Runtime (default: all the benchmark "
          "knows; --quick: bert_encoder; none: skip)");
ABSL_FLAG(std::vector<std::string>, inductor_models, {},
          "models to time against torch.compile and AOTInductor (default: "
          "those with a Python definition; --quick: bert_encoder; none: "
          "skip); each must be in --models or --ort_models too");
ABSL_FLAG(std::vector<std::string>, batches, {},
          "batch sizes (default 1,8; --quick: 1)");

namespace {

using namespace fx::benchmark;  // NOLINT: the benchmark vocabulary

constexpr char kTorchScriptModels[] = "testdata/torchscript_models.py";
constexpr char kPythonScript[] = "tools/pyfx_reference.py";
const std::vector<std::string> kModels = {
    "resnet18",      "resnet50",        "mobilenet_v2",  "mobilenet_v3_small",
    "squeezenet",    "densenet121",     "googlenet",     "efficientnet_b0",
    "regnet_x_400mf", "mnasnet0_5",     "convnext_tiny", "inception_v3",
    "vgg11",         "alexnet"};
const std::vector<std::string> kQuickModels = {"resnet18", "mobilenet_v2"};
// Compute-bound models, held to a fraction of the convolution peak.
const std::vector<std::string> kComputeBound = {"resnet18", "resnet50",
                                                "vgg11"};
const std::vector<std::string> kPythonModels = {"resnet18", "mobilenet_v2"};
// Timed again in bfloat16 (those of them being measured).
const std::vector<std::string> kBf16Models = {"resnet18", "resnet50",
                                              "mobilenet_v2", "densenet121",
                                              "vgg11"};
// 6. Against ONNX Runtime: the convolution nets and the transformer and
// recurrent models (testdata/onnx_runtime_models.py).
constexpr char kOrtModelsScript[] = "testdata/onnx_runtime_models.py";
constexpr char kOrtTimerScript[] = "tools/ort_timer.js";
const std::vector<std::string> kOrtModels = {
    "resnet18",     "resnet50",    "mobilenet_v2",  "mobilenet_v3_small",
    "efficientnet_b0", "densenet121", "convnext_tiny", "vit_b_16",
    "swin_t",       "bert_encoder", "bert_base",    "gpt_decoder",
    "gpt2_small",   "lstm_lm",      "bilstm_tagger"};
const std::vector<std::string> kQuickOrtModels = {"bert_encoder"};
// Not in section 2: timed against TorchScript-optimized and the unlowered
// graph here.
const std::vector<std::string> kSequenceModels = {
    "vit_b_16", "swin_t", "bert_encoder", "bert_base", "gpt_decoder",
    "gpt2_small", "lstm_lm", "bilstm_tagger"};
// Transformers timed again in bfloat16 (their linear layers), at batch 1.
const std::vector<std::string> kBf16SequenceModels = {"bert_encoder",
                                                      "vit_b_16"};
constexpr double kTolerance = 1e-4;
// The model and batch whose matmuls are held to the matmul peak.
constexpr char kMatmulModel[] = "bert_base";
constexpr int64_t kMatmulBatch = 8;
// Between variants timed beside ONNX Runtime (see measure_against_ort).
constexpr std::chrono::milliseconds kPause(50);
// Rounds are cut to fit each model and batch size into about this long
// (TorchScript-optimized ConvNeXt takes seconds per call), at least 3.
constexpr double kBudgetMs = 30000;
// Isolated requests timed per model at batch 1 (section 7).
constexpr int kIsolatedRounds = 15;
// Rounds beside a competing load per model at batch 1 (section 8), and
// the most ours may take of ONNX Runtime's time there.
constexpr int kLoadRounds = 15;
constexpr double kLoadedTarget = 1.2;

// --- 1. The machine's limit --------------------------------------------------

// The peak convolutions, also timed beside each model (interleaved with its
// rounds), so that a model's % of the convolution peak compares it with the
// peak measured under the same conditions: this machine's speed drifts by
// 20% and more within a run.
struct PeakConvolutions {
  PeakConvolution c3x3{256, 56, 3};
  PeakConvolution c1x1{1024, 14, 1};
  double warm_gflops() const {
    return std::max(c3x3.warm_gflops(2), c1x1.warm_gflops(2));
  }
};

struct Peak {
  double gflops_3x3 = 0, gflops_1x1 = 0;
  // Main memory: a copy far larger than the last-level cache.
  double memory_bytes_per_second = 0;
  double best() const { return std::max(gflops_3x3, gflops_1x1); }
};

// The peak convolutions alone, and main memory's bandwidth.
Peak measure_peak(const PeakConvolutions& peaks, int repeats) {
  Peak p;
  p.gflops_3x3 = peaks.c3x3.warm_gflops(repeats);
  p.gflops_1x1 = peaks.c1x1.warm_gflops(repeats);
  p.memory_bytes_per_second =
      copy_bytes_per_second(std::max(3, repeats / 2), int64_t{512} << 20);
  return p;
}

// --- 2. Models ------------------------------------------------------------------

struct ModelRun {
  std::string model;
  int64_t batch = 1;
  double gmacs = 0;
  // The roofline's time: each node of the lowered graph (what runs: the
  // activations and sums fused into a convolution move no bytes of their
  // own) at the peak or at main memory's bandwidth (every tensor read and
  // written once), whichever is slower, one node after another.
  double roofline_ms = 0;
  size_t unmodelled = 0;  // operators the cost model does not know
  // The peak convolutions' GFLOP/s, timed in the model's interleaved rounds
  // (median), and again between the runs of kernels alone.
  double peak_gflops = 0, kernels_alone_peak_gflops = 0;
  double ours_ms = 0, torchscript_ms = 0, unlowered_ms = 0;
  double ratio = 0;  // median of per-round ours / TorchScript-optimized
  double over_unlowered = 0;  // ... ours / the folded, unlowered graph
  int rounds = 0;
  double error = 0;  // relative to the reference output's largest magnitude
  double lowering_ms = 0;
  // Compute-bound models: oneDNN's kernels alone (KernelsAlone), 0 if not
  // measured.
  double kernels_alone_ms = 0;
  fx::InferenceReport report;  // what the lowering did
  std::string failure;  // non-empty: the model could not be measured
};

// Runs a lowered graph timing each oneDNN call alone: the call repeated on
// its own arguments, its median kept (its weights and activations in
// cache: the library's kernel at its best on that shape), and every other
// node as it runs. The sum is what the graph would take if every kernel
// ran as fast as it does by itself.
class KernelsAlone : public fx::Interpreter {
 public:
  KernelsAlone(fx::GraphModule module, int repeats)
      : fx::Interpreter(std::move(module)), repeats_(repeats) {}

  double run_ms(const std::vector<c10::IValue>& inputs) {
    total_ms_ = 0;
    run(inputs);
    return total_ms_;
  }

  c10::IValue call_function(const fx::Node& node, const fx::Target& target,
                            std::vector<c10::IValue> args,
                            fx::IValueKwargs kwargs) override {
    const std::string name =
        target.is_operator() ? target.to_string() : std::string();
    if (name.rfind("fx_onednn::", 0) != 0) {
      auto start = Clock::now();
      c10::IValue out = fx::Interpreter::call_function(
          node, target, std::move(args), std::move(kwargs));
      total_ms_ += ms_since(start);
      return out;
    }
    // conv_add_ writes into its first argument: each call gets a copy.
    const bool in_place = name == "fx_onednn::conv_add_";
    std::vector<double> samples;
    c10::IValue out;
    for (int i = 0; i <= repeats_; ++i) {
      std::vector<c10::IValue> call_args = args;
      if (in_place) call_args[0] = args[0].toTensor().clone();
      auto start = Clock::now();
      out = fx::Interpreter::call_function(node, target, std::move(call_args),
                                           kwargs);
      if (i > 0) samples.push_back(ms_since(start));
    }
    total_ms_ += median(samples);
    return out;
  }

 private:
  int repeats_;
  double total_ms_ = 0;
};

// optimize_for_inference's folding without any of its lowering: the
// unlowered graph each lowered one is held against.
fx::InferenceOptions fold_only() {
  fx::InferenceOptions options;
  options.split_attention = false;
  options.lower_convolutions = false;
  options.lower_linear = false;
  options.lower_matmul = false;
  options.lower_recurrent = false;
  return options;
}

ModelRun measure_model(const std::string& dir, const std::string& name,
                       int64_t batch, int rounds, const Peak& peak,
                       const PeakConvolutions& peaks) {
  ModelRun r;
  r.model = name;
  r.batch = batch;
  const int64_t size = name == "inception_v3" ? 299 : 224;
  torch::manual_seed(1);
  at::Tensor x = torch::randn({batch, 3, size, size});
  const std::string path = dir + "/" + name + "_traced.pt";
  try {
    torch::jit::Module script = torch::jit::load(path);
    script.eval();
    const at::Tensor want = first_tensor(script.forward({x}));

    torch::jit::Module frozen = torch::jit::freeze(script.clone());
    torch::jit::Module optimized = torch::jit::optimize_for_inference(frozen);

    fx::GraphModule gm = fx::symbolic_trace(script, {x});
    r.gmacs = fx::estimate_cost(gm->graph()).total.macs / 1e9;
    fx::GraphModule lowered(gm->copy());
    auto start = Clock::now();
    r.report = fx::optimize_for_inference(*lowered);
    r.lowering_ms = ms_since(start);
    r.error = relative_error(first_tensor(lowered(x)), want);
    const fx::CostReport cost = fx::estimate_cost(lowered->graph());
    r.unmodelled = cost.unmodelled_ops.size();

    // The same passes without the lowering: what lowering must beat.
    fx::GraphModule unlowered(gm->copy());
    fx::optimize_for_inference(*unlowered, fold_only());

    // Warm all (TorchScript's profiling executor optimizes on its second
    // and third runs), and fit the rounds into the time budget.
    double slowest = 0;
    for (int i = 0; i < 3; ++i) {
      auto warm = Clock::now();
      optimized.forward({x});
      slowest = std::max(slowest, ms_since(warm));
      lowered(x);
      unlowered(x);
    }
    r.rounds = std::max(3, std::min(rounds, static_cast<int>(
                                                kBudgetMs / (3 * slowest))));
    const int calls = batch == 1 ? 2 : 1;
    std::vector<double> peak_samples;
    auto samples = interleaved_samples_ms(
        {[&] { lowered(x); }, [&] { optimized.forward({x}); },
         [&] { unlowered(x); },
         [&] { peak_samples.push_back(peaks.warm_gflops()); }},
        r.rounds, calls);
    r.peak_gflops = median(peak_samples);
    r.roofline_ms =
        fx::estimated_seconds(
            cost, {r.peak_gflops * 1e9, peak.memory_bytes_per_second}) *
        1e3;
    r.ours_ms = median(samples[0]);
    r.torchscript_ms = median(samples[1]);
    r.unlowered_ms = median(samples[2]);
    r.ratio = median_paired_ratio(samples[0], samples[1]);
    r.over_unlowered = median_paired_ratio(samples[0], samples[2]);
    if (std::count(kComputeBound.begin(), kComputeBound.end(), name)) {
      KernelsAlone kernels(lowered, 5);
      std::vector<double> runs, peaks_between;
      for (int i = 0; i < 3; ++i) {
        peaks_between.push_back(peaks.warm_gflops());
        runs.push_back(kernels.run_ms({x}));
      }
      r.kernels_alone_ms = median(runs);
      r.kernels_alone_peak_gflops = median(peaks_between);
    }
  } catch (const std::exception& e) {
    r.failure = std::string(e.what()).substr(0, 200);
  }
  return r;
}

std::string percent(double fraction) {
  return absl::StrFormat("%.0f%%", fraction * 100);
}

// The fraction of `peak_gflops` a model of `gmacs` reaches in `ms`.
double fraction_of_peak(double gmacs, double ms, double peak_gflops) {
  return 2 * gmacs * 1e9 / (ms * 1e-3) / 1e9 / peak_gflops;
}

void print_models(const std::vector<ModelRun>& runs, const Peak& peak) {
  Table table({"model", "batch", "GMACs", "ours ms", "TS-opt ms",
               "ours / TS-opt", "unlowered ms", "ours / unlowered",
               "conv peak GFLOP/s", "ours % conv peak", "TS-opt % conv peak",
               "roofline ms", "roofline % conv peak", "ours % roofline",
               "kernels alone % conv peak",
               "ours % kernels alone", "rel. error", "lowering ms", "rounds"},
              2);
  for (const ModelRun& r : runs) {
    if (!r.failure.empty()) {
      table.add_row({r.model, absl::StrCat(r.batch), "failed: " + r.failure});
      continue;
    }
    auto fraction = [&](double ms) {
      return percent(fraction_of_peak(r.gmacs, ms, r.peak_gflops));
    };
    table.add_row({r.model, absl::StrCat(r.batch), fixed(r.gmacs, 2),
                   fixed(r.ours_ms, 2), fixed(r.torchscript_ms, 2),
                   times(r.ratio), fixed(r.unlowered_ms, 2),
                   times(r.over_unlowered), fixed(r.peak_gflops, 0),
                   fraction(r.ours_ms),
                   fraction(r.torchscript_ms),
                   fixed(r.roofline_ms, 2) + (r.unmodelled ? "*" : ""),
                   fraction(r.roofline_ms), percent(r.roofline_ms / r.ours_ms),
                   r.kernels_alone_ms > 0
                       ? percent(fraction_of_peak(r.gmacs, r.kernels_alone_ms,
                                                  r.kernels_alone_peak_gflops))
                       : "",
                   r.kernels_alone_ms > 0
                       ? percent(r.kernels_alone_ms / r.ours_ms)
                       : "",
                   absl::StrFormat("%.1e", r.error), fixed(r.lowering_ms, 0),
                   absl::StrCat(r.rounds)});
  }
  std::vector<std::string> notes = {
      absl::StrFormat("conv peak: our own convolution at its best shapes, "
                      "not the hardware's peak: the larger of fx_onednn's "
                      "(oneDNN's) 3x3 256->256 convolution at 56x56 and 1x1 "
                      "1024->1024 at 14x14 (batch 1, warm) on its direct "
                      "kernels, timed in each model's interleaved rounds "
                      "(the conv peak GFLOP/s column: medians); alone at "
                      "the start: %.0f GFLOP/s (3x3: %.0f; 1x1: %.0f). A "
                      "model's 3x3 layers of 14x14 and more run on "
                      "Winograd kernels, which do fewer multiply-adds than "
                      "the GMACs counted",
                      peak.best(), peak.gflops_3x3, peak.gflops_1x1),
      absl::StrFormat(
          "roofline: the cost model's time for the lowered graph on the row's "
          "conv peak and main memory's measured bandwidth (%.1f GB/s, a 512 "
          "MB copy): each node at max(FLOPs / conv peak, bytes / bandwidth), "
          "in turn. roofline %% conv peak is the ceiling of %% conv peak "
          "unless one node's memory traffic overlaps another's compute; "
          "above 100%% of the roofline, caches served what it counts from "
          "main memory (*: operators it does not model)",
          peak.memory_bytes_per_second / 1e9),
      "ours: fx::optimize_for_inference of the file imported with "
      "fx::symbolic_trace; TS-opt: torch::jit::optimize_for_inference("
      "torch::jit::freeze(file)); unlowered: the same passes but the "
      "lowering (batch norms folded, dropouts removed, constants folded); "
      "interleaved rounds, medians; ratios are medians of per-round ratios "
      "(below 1: ours is faster).",
      "kernels alone: the lowered graph with each oneDNN call timed by "
      "itself, repeated on its own arguments (weights and activations in "
      "cache; median of 5), other nodes as they run: the % of conv peak "
      "oneDNN 2.6's kernels reach on the model's shapes, the ceiling of ours "
      "short of kernels of our own (compute-bound models only).",
      "rel. error: max |ours - TorchScript as loaded| / max |TorchScript as "
      "loaded|."};
  for (const ModelRun& r : runs) {
    if (r.failure.empty() && r.batch == runs.front().batch) {
      notes.push_back(r.model + ": " + r.report.to_string());
    }
  }
  print_section("2. Lowered models against TorchScript-optimized (C++)", table,
                notes);
}

void print_python(const std::vector<ModelRun>& runs,
                  const PythonReference& py) {
  Table table({"model (batch 1)", "ours ms", "py fx optimize_for_inference ms",
               "py TS-opt ms", "py eager ms", "py fx / ours", "py TS / ours"});
  for (const std::string& name : kPythonModels) {
    auto it = std::find_if(runs.begin(), runs.end(), [&](const ModelRun& r) {
      return r.model == name && r.batch == 1 && r.failure.empty();
    });
    if (it == runs.end()) continue;
    auto fx_ms = py.number("inference." + name + "_fx_opt_ms");
    auto ts_ms = py.number("inference." + name + "_ts_opt_ms");
    auto eager_ms = py.number("inference." + name + "_eager_ms");
    table.add_row({name, fixed(it->ours_ms, 2), fixed(fx_ms, 2),
                   fixed(ts_ms, 2), fixed(eager_ms, 2),
                   times(ratio(fx_ms, it->ours_ms)),
                   times(ratio(ts_ms, it->ours_ms))});
  }
  print_section(
      "3. Beside Python torch.fx and TorchScript (batch 1)", table,
      {py.unavailable.empty()
           ? "tools/pyfx_reference.py --inference: torch " +
                 py.text("torch_version") + ", models from " +
                 py.text("models") +
                 " (times only: the same networks, their own random weights)"
           : "Python reference n/a: " + py.unavailable});
}

// --- 5. bfloat16 (opt-in) ------------------------------------------------------

struct Bf16Run {
  std::string model;
  double fp32_ms = 0, bf16_ms = 0;
  double ratio = 0;  // median of per-round bf16 / fp32
  double error = 0;  // max |bf16 - fp32| / max |fp32|
  bool same_top1 = false;
  std::string failure;
};

// The TorchScript file at `path` lowered in float32 and in bfloat16, timed
// on `x`.
Bf16Run measure_bf16(const std::string& path, const std::string& name,
                     const at::Tensor& x, int rounds) {
  Bf16Run r;
  r.model = name;
  try {
    torch::jit::Module script = torch::jit::load(path);
    script.eval();
    fx::GraphModule gm = fx::symbolic_trace(script, {x});
    fx::GraphModule fp32(gm->copy());
    fx::optimize_for_inference(*fp32);
    fx::InferenceOptions options;
    options.bf16 = true;
    fx::GraphModule bf16(gm->copy());
    fx::optimize_for_inference(*bf16, options);
    const at::Tensor want = first_tensor(fp32(x));
    const at::Tensor got = first_tensor(bf16(x));
    r.error = relative_error(got, want);
    r.same_top1 = torch::equal(got.argmax(-1), want.argmax(-1));
    auto samples = interleaved_samples_ms({[&] { fp32(x); }, [&] { bf16(x); }},
                                          rounds, 2);
    r.fp32_ms = median(samples[0]);
    r.bf16_ms = median(samples[1]);
    r.ratio = median_paired_ratio(samples[1], samples[0]);
  } catch (const std::exception& e) {
    r.failure = std::string(e.what()).substr(0, 200);
  }
  return r;
}

void print_bf16(const std::vector<Bf16Run>& runs) {
  Table table({"model (batch 1)", "fp32 lowered ms", "bf16 lowered ms",
               "bf16 / fp32", "rel. error vs fp32", "top-1"});
  for (const Bf16Run& r : runs) {
    if (!r.failure.empty()) {
      table.add_row({r.model, "failed: " + r.failure});
      continue;
    }
    table.add_row({r.model, fixed(r.fp32_ms, 2), fixed(r.bf16_ms, 2),
                   times(r.ratio), absl::StrFormat("%.1e", r.error),
                   r.same_top1 ? "same" : "differs"});
  }
  print_section(
      "5. bfloat16 (InferenceOptions::bf16, opt-in; not held to 1e-4)", table,
      {"Weights and activations in bfloat16 between lowered convolutions, "
       "and linear layers' weights and inputs (transformers: their "
       "attention, layer norms and softmax stay float32), float32 "
       "accumulation (AVX-512 BF16); rel. error: max |bf16 - fp32| / "
       "max |fp32| on random weights and input; top-1: the argmax over the "
       "last dimension."});
}

// --- 4. Generated C++ of a lowered graph --------------------------------------

struct GeneratedRun {
  double graph_module_ms = 0, generated_ms = 0;
  double ratio = 0;  // median of per-round generated / GraphModule
  bool equal = false;
};

// testdata:resnet18_lowered (fx_cc_library with passes =
// ["optimize_for_inference"]) against the lowered GraphModule of the same
// model, batch 1.
GeneratedRun measure_generated(int rounds) {
  GeneratedRun g;
  models::ZooModel model = models::make_zoo_model("resnet18");
  fx::GraphModule lowered = models::trace_zoo_model(model);
  fx::optimize_for_inference(*lowered);
  testdata::ResNet18Lowered generated(*model.module);
  const at::Tensor x = model.example_inputs[0].toTensor();
  g.equal = torch::equal(generated.forward(x), lowered(x).toTensor());
  auto samples = interleaved_samples_ms(
      {[&] { lowered(x); }, [&] { generated.forward(x); }}, rounds, 2);
  g.graph_module_ms = median(samples[0]);
  g.generated_ms = median(samples[1]);
  g.ratio = median_paired_ratio(samples[1], samples[0]);
  return g;
}

void print_generated(const GeneratedRun& g) {
  Table table({"model (batch 1)", "lowered GraphModule ms",
               "generated class ms", "generated / GraphModule", "outputs"});
  table.add_row({"resnet18 (the zoo's)", fixed(g.graph_module_ms, 2),
                 fixed(g.generated_ms, 2), times(g.ratio),
                 g.equal ? "bitwise equal" : "DIFFERENT"});
  print_section("4. Generated C++ of the lowered graph (fx_cc_library)", table);
}

// --- 6. Against ONNX Runtime ----------------------------------------------------

struct OrtRun {
  std::string model;
  int64_t batch = 1;
  double ours_ms = 0, ort_ms = 0;
  double ratio = 0;  // median of per-round ours / ONNX Runtime
  // Sequence models only (the others are in section 2): TorchScript-
  // optimized and the unlowered graph, and ours over each.
  double torchscript_ms = 0, unlowered_ms = 0;
  double over_torchscript = 0, over_unlowered = 0;
  double error = 0;           // ours against TorchScript as loaded
  double ort_difference = 0;  // ours against ONNX Runtime's output
  // kMatmulModel at kMatmulBatch: the lowered graph's matmuls and linear
  // layers timed as they run (MatmulsAlone), their GFLOP, and the matmul
  // peak timed beside them.
  double matmuls_ms = 0, matmul_gflop = 0, matmul_peak_gflops = 0;
  // Batch 1: one call after each pause (an isolated request), ours with
  // the intra-op threads unpinned and pinned (fx::pin_intra_op_threads),
  // and ONNX Runtime's; per-round ratios to ONNX Runtime's.
  double isolated_ms = 0, isolated_pinned_ms = 0, isolated_ort_ms = 0;
  double isolated_ratio = 0, isolated_pinned_ratio = 0;
  // Batch 1 beside a competing load (section 8): ours unpinned and pinned,
  // and ONNX Runtime's, each beside the same busy processes; per-round
  // ratios to ONNX Runtime's.
  double loaded_ms = 0, loaded_pinned_ms = 0, loaded_ort_ms = 0;
  double loaded_ratio = 0, loaded_pinned_ratio = 0;
  // Ours through fx::LoadAwareThreads beside the load, the share of the
  // loaded calls it ran on fewer threads, and whether it ran on all of them
  // again once the load stopped.
  double loaded_aware_ms = 0, loaded_aware_ratio = 0, aware_busy_share = 0;
  bool aware_quiet_after = false;
  int rounds = 0;
  fx::InferenceReport report;  // what the lowering did
  std::string failure;
};

// The matmul peak: our own linear layer (fx_onednn::linear, on oneDNN's
// matmul) at its best shapes, warm, as the convolution peak is our
// convolution's: BERT-base's feed-forward layers at batch 8 and a larger
// square product.
double matmul_peak_gflops(int repeats) {
  static const c10::OperatorHandle pack = c10::Dispatcher::singleton()
      .findSchemaOrThrow("fx_onednn::pack_linear_weight", "");
  static const c10::OperatorHandle linear = c10::Dispatcher::singleton()
      .findSchemaOrThrow("fx_onednn::linear", "");
  double best = 0;
  for (auto [rows, in, out] : std::vector<std::array<int64_t, 3>>{
           {1024, 768, 3072}, {1024, 3072, 768}, {2048, 2048, 2048}}) {
    const at::Tensor x = torch::randn({rows, in});
    std::vector<c10::IValue> stack = {torch::randn({out, in}),
                                      std::vector<int64_t>{rows, in}, false};
    pack.callBoxed(&stack);
    const at::Tensor packed = stack[0].toTensor();
    const at::Tensor bias = torch::randn({out});
    auto call = [&] {
      // A boxed call takes every argument: defaults included.
      std::vector<c10::IValue> args = {x,   packed, bias,         "none",
                                       0.0, 0.0,    c10::IValue()};
      linear.callBoxed(&args);
    };
    const double ms = median_ms([&] {
      auto start = Clock::now();
      call();
      return ms_since(start);
    }, repeats);
    best = std::max(best, 2.0 * rows * in * out / (ms * 1e-3) / 1e9);
  }
  return best;
}

// Runs a lowered graph timing its matmuls and linear layers (fx_onednn::
// matmul and linear) as they run, once each, and counting their FLOPs:
// what the model would take if nothing else ran.
class MatmulsAlone : public fx::Interpreter {
 public:
  using fx::Interpreter::Interpreter;

  void run_once(const std::vector<c10::IValue>& inputs) {
    ms = 0;
    gflop = 0;
    run(inputs);
  }

  c10::IValue call_function(const fx::Node& node, const fx::Target& target,
                            std::vector<c10::IValue> args,
                            fx::IValueKwargs kwargs) override {
    const bool linear = node.is_call_to({"fx_onednn::linear"});
    const bool matmul = node.is_call_to({"fx_onednn::matmul"});
    if (!linear && !matmul) {
      return fx::Interpreter::call_function(node, target, std::move(args),
                                            std::move(kwargs));
    }
    const at::Tensor a = args[0].toTensor();
    const at::Tensor b = args[1].toTensor();
    auto start = Clock::now();
    c10::IValue out = fx::Interpreter::call_function(
        node, target, std::move(args), std::move(kwargs));
    ms += ms_since(start);
    const at::Tensor y = out.toTensor();
    // linear: rows * in * out; matmul: output elements * the inner size.
    gflop += 2.0 * static_cast<double>(y.numel()) *
             static_cast<double>(linear ? b.size(1) : a.size(-1)) / 1e9;
    return out;
  }

  double ms = 0, gflop = 0;
};

bool is_sequence_model(const std::string& name) {
  return std::count(kSequenceModels.begin(), kSequenceModels.end(), name) > 0;
}

// The competing load's size: one busy process per CPU.
int load_processes() {
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

OrtRun measure_against_ort(const std::string& dir, const std::string& timer,
                           const std::string& name, const std::string& spec,
                           int64_t batch, int rounds, int threads) {
  OrtRun r;
  r.model = name;
  r.batch = batch;
  try {
    const at::Tensor x = ort_input(spec, batch);
    LoweredScript model = load_and_lower(dir + "/" + name + ".pt", x);
    torch::jit::Module& script = model.script;
    const at::Tensor& want = model.want;
    fx::GraphModule& gm = model.traced;
    fx::GraphModule& lowered = model.lowered;
    r.report = model.report;
    const at::Tensor ours = first_tensor(lowered(x));
    r.error = relative_error(ours, want);

    TimedProcess ort(
        ort_timer_command(timer, absl::StrCat(dir, "/", name, "_b", batch, ".onnx"),
                          threads),
        kOrt, {x}, dir);
    const std::vector<double> first_runs = ort.run(2);
    double slowest = *std::max_element(first_runs.begin(), first_runs.end());
    r.ort_difference = relative_error(ours, ort.output().reshape_as(ours));

    const bool sequence = is_sequence_model(name);
    std::optional<torch::jit::Module> optimized;
    fx::GraphModule unlowered(gm->copy());
    if (sequence) {
      torch::jit::Module frozen = torch::jit::freeze(script.clone());
      optimized = torch::jit::optimize_for_inference(frozen);
      fx::optimize_for_inference(*unlowered, fold_only());
    }
    // Each variant's sample: one untimed call, then the median of its
    // calls, each timed alone, as ONNX Runtime's process times its runs.
    // The untimed call makes the sample warm: the first call after the
    // pause wakes the threads and refills the caches (bilstm_tagger at
    // batch 8: ours 4.0 ms and ONNX Runtime's 5.0 ms for that call, 3.0
    // and 3.7 ms back to back).
    auto per_call = [](const std::function<void()>& call) {
      return [call](int calls) { return warm_median_ms(call, calls); };
    };
    std::vector<std::function<double(int)>> variants = {
        per_call([&] { lowered(x); }),
        [&](int calls) { return ort.warm_median_ms(calls); }};
    if (sequence) {
      variants.push_back(per_call([&] { optimized->forward({x}); }));
      variants.push_back(per_call([&] { unlowered(x); }));
    }
    // Warm every variant three times (TorchScript's profiling executor
    // optimizes on its second and third runs) and fit the rounds into the
    // time budget. Round by round, in order and then reversed, with a
    // pause between variants: idle threads spin after a run (ONNX
    // Runtime's pool, OpenBLAS's, OpenMP's) and took a core from whichever
    // ran next (with 2 ms between them, ours and ONNX Runtime's times each
    // rose by 30-70%). Our intra-op threads are pinned, as
    // docs/deploying.md advises a deployment: unpinned, the calls after
    // each pause waited for the scheduler (section 7), mobilenet_v3_small
    // 1.3 ms or 13 ms from one run to the next.
    TurnSamples turns =
        sample_in_turns(variants, rounds, 3, kBudgetMs, slowest, kPause);
    r.rounds = turns.rounds;
    const std::vector<std::vector<double>>& samples = turns.samples;
    const int calls = turns.calls;
    // Variant v's sample of `calls` calls.
    auto sample_of = [&variants, calls](size_t v) {
      return std::function<double()>(
          [&variants, v, calls] { return variants[v](calls); });
    };
    r.ours_ms = median(samples[0]);
    r.ort_ms = median(samples[1]);
    r.ratio = median_paired_ratio(samples[0], samples[1]);
    if (batch == 1) {
      // Isolated requests: each variant called once after the pause, in
      // turn, the pinned one pinned only for its own call.
      std::vector<std::function<double()>> isolated = {
          [&] { return per_call([&] { lowered(x); })(1); },
          [&] { return ort.run(1).front(); },
          [&] {
            const PinnedThreads pinned;
            std::this_thread::sleep_for(kPause);
            return per_call([&] { lowered(x); })(1);
          }};
      const std::vector<std::vector<double>> alone =
          take_turns(isolated, kIsolatedRounds, kPause);
      r.isolated_ms = median(alone[0]);
      r.isolated_ort_ms = median(alone[1]);
      r.isolated_pinned_ms = median(alone[2]);
      r.isolated_ratio = median_paired_ratio(alone[0], alone[1]);
      r.isolated_pinned_ratio = median_paired_ratio(alone[2], alone[1]);

      // Beside a competing load: one busy process per CPU, started once
      // for section 6's samples of ours (unpinned, then pinned) and ONNX
      // Runtime's, which take turns with no pause.
      // Ours through fx::LoadAwareThreads (unpinned: one thread on a busy
      // machine goes where the scheduler finds room), each of its samples'
      // calls through it.
      fx::LoadAwareThreads aware;
      int aware_calls = 0, aware_busy_calls = 0;
      auto through_aware = [&] {
        const auto one_call = per_call([&] {
          aware_busy_calls += aware.busy();
          ++aware_calls;
          aware.run([&] { return lowered(x); });
        });
        return one_call(calls);
      };
      const std::vector<std::function<double()>> loaded = {
          sample_of(0), sample_of(1),
          [&] {
            const PinnedThreads pinned;
            return sample_of(0)();
          },
          through_aware};
      std::vector<std::vector<double>> busy;
      {
        const CompetingLoad load(load_processes());
        std::this_thread::sleep_for(kPause);
        busy = take_turns(loaded, kLoadRounds,
                          std::chrono::milliseconds(0));
      }
      r.loaded_ms = median(busy[0]);
      r.loaded_ort_ms = median(busy[1]);
      r.loaded_pinned_ms = median(busy[2]);
      r.loaded_aware_ms = median(busy[3]);
      r.loaded_ratio = median_paired_ratio(busy[0], busy[1]);
      r.loaded_pinned_ratio = median_paired_ratio(busy[2], busy[1]);
      r.loaded_aware_ratio = median_paired_ratio(busy[3], busy[1]);
      r.aware_busy_share =
          static_cast<double>(aware_busy_calls) / std::max(1, aware_calls);
      // The load gone, back on every thread within a few calls.
      std::this_thread::sleep_for(kPause);
      for (int i = 0; i < 8; ++i) through_aware();
      r.aware_quiet_after = !aware.busy();
    }
    if (name == kMatmulModel && batch == kMatmulBatch) {
      MatmulsAlone matmuls(lowered);
      std::vector<double> runs, peaks;
      for (int i = 0; i < 3; ++i) {
        peaks.push_back(matmul_peak_gflops(3));
        matmuls.run_once({x});
        runs.push_back(matmuls.ms);
      }
      r.matmuls_ms = median(runs);
      r.matmul_gflop = matmuls.gflop;
      r.matmul_peak_gflops = median(peaks);
    }
    if (sequence) {
      r.torchscript_ms = median(samples[2]);
      r.unlowered_ms = median(samples[3]);
      r.over_torchscript = median_paired_ratio(samples[0], samples[2]);
      r.over_unlowered = median_paired_ratio(samples[0], samples[3]);
    }
  } catch (const std::exception& e) {
    r.failure = std::string(e.what()).substr(0, 300);
  }
  return r;
}

void print_ort(const std::vector<OrtRun>& runs) {
  Table table({"model", "batch", "ours ms", "ONNX Runtime ms", "ours / ORT",
               "TS-opt ms", "ours / TS-opt", "unlowered ms",
               "ours / unlowered", "rel. error", "vs ORT output", "rounds"},
              2);
  for (const OrtRun& r : runs) {
    if (!r.failure.empty()) {
      table.add_row({r.model, absl::StrCat(r.batch), "failed: " + r.failure});
      continue;
    }
    const bool sequence = r.torchscript_ms > 0;
    table.add_row({r.model, absl::StrCat(r.batch), fixed(r.ours_ms, 2),
                   fixed(r.ort_ms, 2), times(r.ratio),
                   sequence ? fixed(r.torchscript_ms, 2) : "(section 2)",
                   sequence ? times(r.over_torchscript) : "",
                   sequence ? fixed(r.unlowered_ms, 2) : "",
                   sequence ? times(r.over_unlowered) : "",
                   absl::StrFormat("%.1e", r.error),
                   absl::StrFormat("%.1e", r.ort_difference),
                   absl::StrCat(r.rounds)});
  }
  std::vector<std::string> notes = {
      "ours: the TorchScript file (traced in eval mode without autograd, "
      "PyTorch's fused transformer ops included) imported and lowered by "
      "fx::optimize_for_inference; ONNX Runtime 1.30's CPU library "
      "(onnxruntime-node) on torch.onnx's export of the same module (opset "
      "14, fixed shapes, all graph optimizations), kept loaded in a Node.js "
      "process (tools/ort_timer.js) and run on the same input; the same "
      "thread count on both sides (ours pinned, fx::pin_intra_op_threads: "
      "see section 7; unpinned when the threads outnumber the CPUs); "
      "TorchScript-optimized and the unlowered graph multiply on "
      "libtorch's BLAS (the run's header names it); "
      "interleaved round by round, warm (each sample: an untimed call, "
      "then the median of 3 timed calls, or of 1 where a variant takes 20 "
      "ms or more), medians; ratios are medians of per-round ratios (below "
      "1: ours is faster).",
      "rel. error: max |ours - TorchScript as loaded| / max |TorchScript|; "
      "vs ORT output: the same against ONNX Runtime's output."};
  std::string micro;
  for (const OrtRun& r : runs) {
    if (r.failure.empty() && r.batch == runs.front().batch) {
      notes.push_back(r.model + ": " + r.report.to_string());
    }
    if (r.failure.empty() && r.report.micro_batched > 0) {
      absl::StrAppend(&micro, micro.empty() ? "" : ", ", r.model,
                      " at batch ", r.batch, " (", r.report.micro_batched,
                      " nodes x ", r.report.micro_batches, ")");
    }
  }
  if (!micro.empty()) {
    notes.push_back("micro-batched (lowering/micro_batch.h): " + micro);
  }
  print_section("6. Against ONNX Runtime (C++ deployment's other choice)",
                table, notes);

  Table isolated({"model", "back to back ms", "isolated ms",
                  "pinned, isolated ms", "ONNX Runtime isolated ms",
                  "isolated / ORT", "pinned / ORT"},
                 1);
  for (const OrtRun& r : runs) {
    if (!r.failure.empty() || r.batch != 1) continue;
    isolated.add_row({r.model, fixed(r.ours_ms, 2), fixed(r.isolated_ms, 2),
                      fixed(r.isolated_pinned_ms, 2),
                      fixed(r.isolated_ort_ms, 2), times(r.isolated_ratio),
                      times(r.isolated_pinned_ratio)});
  }
  print_section(
      "7. Isolated requests (batch 1)", isolated,
      {absl::StrCat(
          "each call alone after a ", kPause.count(),
          " ms pause, as a control loop or an idle server calls: ours with "
          "the intra-op threads as libtorch leaves them and pinned by "
          "fx::pin_intra_op_threads (pinned for its own calls only), and "
          "ONNX Runtime's, in turn, ",
          kIsolatedRounds, " rounds, medians; back to back: section 6.")});
}

std::string env_or(const char* name, const std::string& otherwise) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : otherwise;
}

void print_loaded(const std::vector<OrtRun>& runs) {
  Table table({"model", "ours ms", "ours pinned ms", "load-aware ms",
               "ONNX Runtime ms", "ours / ORT", "pinned / ORT",
               "load-aware / ORT", "its calls on fewer threads",
               "quiet: ours / ORT"},
              1);
  for (const OrtRun& r : runs) {
    if (!r.failure.empty() || r.batch != 1) continue;
    table.add_row({r.model, fixed(r.loaded_ms, 2),
                   fixed(r.loaded_pinned_ms, 2), fixed(r.loaded_aware_ms, 2),
                   fixed(r.loaded_ort_ms, 2), times(r.loaded_ratio),
                   times(r.loaded_pinned_ratio), times(r.loaded_aware_ratio),
                   percent(r.aware_busy_share), times(r.ratio)});
  }
  print_section(
      "8. Beside a competing load (batch 1)", table,
      {absl::StrCat(
          "each variant beside the same load: ", load_processes(),
          " processes spinning on the CPU (one per CPU, started before the "
          "rounds and stopped after), as a build or another service on the "
          "same machine; ours with the intra-op threads as libtorch leaves "
          "them, pinned (fx::pin_intra_op_threads) and through "
          "fx::LoadAwareThreads (unpinned; one thread while the calling "
          "thread waits for a CPU more than a tenth of the time), and ONNX "
          "Runtime's, in turn, ",
          kLoadRounds,
          " rounds, each sample as in section 6; medians, ratios medians of "
          "per-round ratios; quiet: section 6's ratio. Gated: load-aware, "
          "and its return to every thread once the load stops (8 calls)."),
       "libgomp's waiting, read from the environment when it loaded: "
       "GOMP_SPINCOUNT=" + env_or("GOMP_SPINCOUNT", "(unset: 300000 spins)") +
           ", OMP_WAIT_POLICY=" + env_or("OMP_WAIT_POLICY", "(unset)") +
           " (docs/deploying.md: a bounded spin on a shared machine)."});
}

void check_ort_targets(const std::vector<OrtRun>& runs,
                       std::vector<TargetCheck>* checks) {
  double log_sum = 0;
  int n = 0;
  for (const OrtRun& r : runs) {
    const std::string what =
        absl::StrCat(r.model, " batch ", r.batch, " beside ONNX Runtime");
    if (!r.failure.empty()) {
      checks->push_back({what + " measured", r.failure, false, false});
      continue;
    }
    checks->push_back({what + ": output within 1e-4 (relative)",
                       absl::StrFormat("%.1e", r.error), r.error <= kTolerance,
                       false});
    checks->push_back({what + ": not slower than ONNX Runtime (<= 1.0x)",
                       times(r.ratio), r.ratio <= 1.0});
    if (r.torchscript_ms > 0) {
      checks->push_back({what + ": not slower than TS-opt (<= 1.0x)",
                         times(r.over_torchscript), r.over_torchscript <= 1.0});
      checks->push_back({what + ": not slower than unlowered (<= 1.0x)",
                         times(r.over_unlowered), r.over_unlowered <= 1.0});
    }
    if (r.matmuls_ms > 0) {
      const double fraction =
          r.matmul_gflop / (r.matmuls_ms * 1e-3) / r.matmul_peak_gflops;
      checks->push_back(
          {what + ": its matmuls at >= 80% of the matmul peak",
           absl::StrFormat("%s (%.0f of %.0f GFLOP/s)", percent(fraction),
                           r.matmul_gflop / (r.matmuls_ms * 1e-3),
                           r.matmul_peak_gflops),
           fraction >= 0.8});
      const double over = r.ours_ms / r.matmuls_ms;
      checks->push_back({what + ": within 1.3x of its matmuls alone",
                         absl::StrFormat("%s (%.1f ms of matmuls)",
                                         times(over), r.matmuls_ms),
                         over <= 1.3});
    }
    if (r.batch == 1) {
      checks->push_back(
          {absl::StrFormat("%s beside a competing load: <= %.1fx ONNX "
                           "Runtime's time",
                           what, kLoadedTarget),
           absl::StrFormat("%s load-aware (%.2f vs %.2f ms; pinned %s)",
                           times(r.loaded_aware_ratio), r.loaded_aware_ms,
                           r.loaded_ort_ms, times(r.loaded_pinned_ratio)),
           r.loaded_aware_ratio <= kLoadedTarget});
      checks->push_back(
          {what + ": load-aware threads all back once the load stops",
           r.aware_quiet_after ? "yes" : "no", r.aware_quiet_after});
    }
    log_sum += std::log(r.ratio);
    ++n;
  }
  const bool matmul_target_timed = std::any_of(
      runs.begin(), runs.end(), [](const OrtRun& r) {
        return r.model == kMatmulModel && r.batch == kMatmulBatch;
      });
  if (!matmul_target_timed && !runs.empty()) {
    checks->push_back({absl::StrCat(kMatmulModel, " batch ", kMatmulBatch,
                                    ": matmul peak and matmuls-alone targets"),
                       "not timed in this run", std::nullopt});
  }
  if (n > 0) {
    const double geomean = std::exp(log_sum / n);
    checks->push_back({"geometric mean <= 0.85x ONNX Runtime's time",
                       times(geomean), geomean <= 0.85});
  }
}

std::vector<TargetCheck> check_targets(const std::vector<ModelRun>& runs,
                                       const std::vector<int64_t>& batches,
                                       const GeneratedRun& generated,
                                       const std::vector<Bf16Run>& bf16) {
  std::vector<TargetCheck> checks;
  for (const Bf16Run& r : bf16) {
    if (!fx::onednn::bf16_supported()) {
      // A CPU without AVX-512 (AVX2) has no bfloat16 kernels: the option is
      // refused by name instead.
      const bool refused = r.failure.find("avx512_core") != std::string::npos;
      checks.push_back({r.model + " bf16 refused by name without AVX-512",
                        refused ? "refused" : "not refused: " + r.failure,
                        refused, false});
      continue;
    }
    checks.push_back({r.model + " bf16 within 5e-2 of fp32 (relative)",
                      r.failure.empty() ? absl::StrFormat("%.1e", r.error)
                                        : r.failure,
                      r.failure.empty() && r.error <= 5e-2, false});
  }
  checks.push_back({"generated lowered resnet18 equal to the GraphModule",
                    generated.equal ? "bitwise equal" : "different",
                    generated.equal, false});
  checks.push_back({"generated lowered resnet18 within 2% of the GraphModule",
                    times(generated.ratio), generated.ratio <= 1.02});
  for (const ModelRun& r : runs) {
    const std::string what = absl::StrCat(r.model, " batch ", r.batch);
    if (!r.failure.empty()) {
      checks.push_back({what + " measured", r.failure, false, false});
      continue;
    }
    checks.push_back({what + " output within 1e-4 (relative)",
                      absl::StrFormat("%.1e", r.error), r.error <= kTolerance,
                      false});
    checks.push_back({what + " not slower than TS-opt (<= 1.0x)",
                      times(r.ratio), r.ratio <= 1.0});
    checks.push_back({what + " not slower than unlowered (<= 1.0x)",
                      times(r.over_unlowered), r.over_unlowered <= 1.0});
    if (std::count(kComputeBound.begin(), kComputeBound.end(), r.model)) {
      const double fraction =
          fraction_of_peak(r.gmacs, r.ours_ms, r.peak_gflops);
      checks.push_back({what + " at >= 90% of the convolution peak",
                        percent(fraction), fraction >= 0.9});
    }
    if (r.model == "resnet50" && r.batch == 1) {
      checks.push_back({"lowering resnet50 (with packing) < 1 s",
                        fixed(r.lowering_ms, 0) + " ms",
                        r.lowering_ms < 1000});
    }
  }
  for (int64_t batch : batches) {
    double log_sum = 0;
    int n = 0;
    for (const ModelRun& r : runs) {
      if (r.batch == batch && r.failure.empty()) {
        log_sum += std::log(r.ratio);
        ++n;
      }
    }
    if (n == 0) continue;
    const double geomean = std::exp(log_sum / n);
    checks.push_back({absl::StrCat("geometric mean at batch ", batch,
                                   " <= 0.8x TS-opt"),
                      times(geomean), geomean <= 0.8});
  }
  return checks;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "fx::optimize_for_inference against TorchScript's freeze + "
      "optimize_for_inference.\n  bazel run //tools:benchmark_inference -- "
      "[--quick] [--threads=N] [--repeats=N] [--models=a,b] [--batches=1,8]"
      "\n--quick: resnet18 and mobilenet_v2 at batch 1, 3 rounds.");
  absl::ParseCommandLine(argc, argv);
  const auto [quick, threads, repeats] = run_flags();
  at::set_num_threads(threads);
  // TorchScript's and the unlowered graphs' matmuls run on the BLAS, here
  // and in the Python reference this starts.
  const std::string blas = run_openblas_at_one_thread();
  torch::NoGradGuard no_grad;
  const std::string before = machine_summary();

  std::vector<std::string> names = absl::GetFlag(FLAGS_models);
  if (names.empty()) names = quick ? kQuickModels : kModels;
  std::vector<int64_t> batches;
  for (const std::string& b : absl::GetFlag(FLAGS_batches)) {
    batches.push_back(std::stoll(b));
  }
  if (batches.empty()) batches = quick ? std::vector<int64_t>{1}
                                       : std::vector<int64_t>{1, 8};

  const std::string dir = "/tmp/fx_benchmark_inference";
  std::vector<std::string> files;
  for (const std::string& name : names) {
    files.push_back(name + "_traced");
  }
  PythonReference written = run_python_reference(
      argv[0], kTorchScriptModels,
      absl::StrCat(dir, " ", absl::StrJoin(files, " ")),
      Python::kTorchvision);
  if (!written.unavailable.empty()) {
    std::cerr << "TorchScript models not written: " << written.unavailable
              << "\n";
    return 1;
  }
  PythonReference py = run_python_reference(
      argv[0], kPythonScript,
      absl::StrFormat("--inference %s --threads=%d --repeats=%d",
                      absl::StrJoin(kPythonModels, " "), threads, repeats));

  std::cerr << "measuring the convolution peak\n";
  const PeakConvolutions peaks;
  const Peak peak = measure_peak(peaks, quick ? 3 : 10);
  std::vector<ModelRun> runs;
  for (int64_t batch : batches) {
    for (const std::string& name : names) {
      std::cerr << "timing " << name << " at batch " << batch << "\n";
      runs.push_back(measure_model(dir, name, batch, repeats, peak, peaks));
    }
  }

  std::cerr << "timing the generated lowered resnet18\n";
  const GeneratedRun generated = measure_generated(repeats);
  std::vector<Bf16Run> bf16;
  for (const std::string& name : names) {
    if (std::count(kBf16Models.begin(), kBf16Models.end(), name) == 0) continue;
    std::cerr << "timing " << name << " in bfloat16\n";
    torch::manual_seed(1);
    bf16.push_back(measure_bf16(dir + "/" + name + "_traced.pt", name,
                                torch::randn({1, 3, 224, 224}), repeats));
  }

  std::vector<std::string> ort_names = absl::GetFlag(FLAGS_ort_models);
  if (ort_names.empty()) ort_names = quick ? kQuickOrtModels : kOrtModels;
  std::vector<OrtRun> ort_runs;
  const std::string ort_dir = "/tmp/fx_benchmark_onnx_runtime";
  std::map<std::string, std::string> ort_specs;  // as the script wrote them
  if (!ort_names.empty() && ort_names.front() != "none") {
    std::vector<std::string> requests;
    for (const std::string& name : ort_names) {
      requests.push_back(absl::StrCat(name, ":", absl::StrJoin(batches, ":")));
    }
    const PythonReference specs = run_python_reference(
        argv[0], kOrtModelsScript,
        absl::StrCat(ort_dir, " ", absl::StrJoin(requests, " ")),
        Python::kTorchvision);
    if (specs.unavailable.empty()) ort_specs = specs.values;
    const std::optional<std::string> timer =
        find_runfile(argv[0], kOrtTimerScript);
    // A model's input spec, as the script printed it, or nullopt.
    auto spec_of = [&](const std::string& name) -> std::optional<std::string> {
      auto it = specs.values.find(name);
      if (!specs.unavailable.empty() || it == specs.values.end()) {
        return std::nullopt;
      }
      return it->second;
    };
    for (int64_t batch : batches) {
      for (const std::string& name : ort_names) {
        const std::optional<std::string> spec = spec_of(name);
        if (!spec || !timer) {
          OrtRun failed;
          failed.model = name;
          failed.batch = batch;
          failed.failure =
              !timer ? std::string(kOrtTimerScript) + " not found"
              : specs.unavailable.empty()
                  ? "not exported by " + std::string(kOrtModelsScript)
                  : specs.unavailable;
          ort_runs.push_back(failed);
          continue;
        }
        std::cerr << "timing " << name << " at batch " << batch
                  << " beside ONNX Runtime\n";
        ort_runs.push_back(measure_against_ort(ort_dir, *timer, name, *spec,
                                               batch, repeats, threads));
      }
    }
    for (const std::string& name : ort_names) {
      const std::optional<std::string> spec = spec_of(name);
      if (std::count(kBf16SequenceModels.begin(), kBf16SequenceModels.end(),
                     name) == 0 ||
          !spec) {
        continue;
      }
      std::cerr << "timing " << name << " in bfloat16\n";
      bf16.push_back(measure_bf16(ort_dir + "/" + name + ".pt", name,
                                  ort_input(*spec, 1), repeats));
    }
  }

  // 9. torch.compile and AOTInductor, on the files written above.
  std::vector<std::string> inductor_names =
      absl::GetFlag(FLAGS_inductor_models);
  if (inductor_names.empty()) inductor_names = inductor_models(quick);
  std::vector<InductorRun> inductor_runs;
  if (inductor_names.front() != "none") {
    std::vector<InductorModel> models;
    for (const std::string& name : inductor_names) {
      InductorModel m{name, "", ""};
      if (std::count(names.begin(), names.end(), name) > 0) {
        m = {name, dir + "/" + name + "_traced.pt", "1x3x224x224:float32"};
      } else if (ort_specs.count(name) > 0) {
        m = {name, ort_dir + "/" + name + ".pt", ort_specs.at(name)};
      }
      models.push_back(m);
    }
    inductor_runs = measure_inductor(argv[0], "/tmp/fx_benchmark_inductor",
                                     models, batches, repeats, threads);
  }

  std::cout << "fx for LibTorch inference benchmark ("
            << (quick ? "--quick" : "full") << " run)\n"
            << "before: " << before << "; after: " << machine_summary()
            << "\nthreads: " << threads << "; rounds: " << repeats << "; "
            << blas << "\n";
  print_models(runs, peak);
  print_python(runs, py);
  print_generated(generated);
  print_bf16(bf16);
  print_ort(ort_runs);
  print_loaded(ort_runs);
  if (!inductor_runs.empty()) print_inductor(inductor_runs, threads);
  std::vector<TargetCheck> checks =
      check_targets(runs, batches, generated, bf16);
  check_ort_targets(ort_runs, &checks);
  check_inductor_targets(inductor_runs, &checks);
  return print_targets(checks, quick);
}
