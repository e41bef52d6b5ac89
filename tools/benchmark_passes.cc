// benchmark_passes: the passes' targets, side by side with Python torch.fx.
//
//   bazel run //tools:benchmark_passes            full run (a few minutes)
//   bazel run //tools:benchmark_passes -- --quick
//
// 1. Forward time of ResNet-18, ResNet-50 and MobileNetV2 (the zoo's, at
//    1x3x224x224): eager, GraphModule, and the GraphModule after conv/bn
//    folding (fuse_conv_bn, remove_dropout, eliminate_noops,
//    eliminate_dead_code), interleaved round by round; beside them
//    torchvision's models eager, as a torch.fx GraphModule, and after
//    torch.fx's fuse(), measured by tools/pyfx_reference.py --fuse.
// 2. Each pass and analysis on graphs of 10k and 100k nodes (conv, batch
//    norm, relu blocks): time, and time per node at both sizes.
// Ends with the targets, each PASS or MISS.
#include <algorithm>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "fx/fx.h"
#include "passes/cost_model.h"
#include "passes/graph_drawer.h"
#include "passes/pass_manager.h"
#include "passes/registry.h"
#include "passes/split_module.h"
#include "models/blocks.h"
#include "models/zoo.h"
#include "tools/benchmark_support.h"

ABSL_FLAG(std::vector<std::string>, passes, {},
          "time only these passes and analyses on large graphs (default: all)");
ABSL_FLAG(bool, forward, true,
          "time forward after folding (section 1) and run the Python reference");

namespace {

using namespace fx::benchmark;  // NOLINT: the benchmark vocabulary

constexpr char kPythonScript[] = "tools/pyfx_reference.py";
const std::vector<std::string> kModels = {"resnet18", "resnet50",
                                          "mobilenet_v2"};
const std::vector<std::string> kInferencePasses = {
    "fuse_conv_bn", "remove_dropout", "eliminate_noops", "eliminate_dead_code"};

// --- 1. Folded forward -----------------------------------------------------

struct FoldTimes {
  std::string model;
  size_t nodes = 0;
  size_t folded_nodes = 0;
  double eager_ms = 0;
  double graph_module_ms = 0;
  double folded_ms = 0;
  double folded_over_eager = 0;  // median of per-round ratios
  double max_difference = 0;
  double max_magnitude = 0;  // max |eager output|, for the relative bound
};

fx::GraphModule inference_module(const fx::GraphModule& gm) {
  fx::PassManager manager;
  for (const std::string& pass : kInferencePasses) manager.add(pass);
  return manager.run(gm).module;
}

FoldTimes measure_fold(const std::string& name, int rounds) {
  torch::NoGradGuard no_grad;
  models::ZooModel model = models::make_zoo_model(name);
  fx::GraphModule gm =
      fx::symbolic_trace(model.module, model.forward, model.example_inputs);
  fx::GraphModule folded = inference_module(gm);
  const std::vector<c10::IValue>& inputs = model.example_inputs;
  at::Tensor expected = model.forward(inputs).toTensor();
  FoldTimes t;
  t.model = name;
  t.nodes = gm->graph().size();
  t.folded_nodes = folded->graph().size();
  t.max_difference =
      (folded->forward(inputs).toTensor() - expected).abs().max().item<double>();
  t.max_magnitude = expected.abs().max().item<double>();
  std::vector<std::vector<double>> ms = interleaved_samples_ms(
      {[&] { model.forward(inputs); }, [&] { gm->forward(inputs); },
       [&] { folded->forward(inputs); }},
      rounds, 1);
  t.eager_ms = median(ms[0]);
  t.graph_module_ms = median(ms[1]);
  t.folded_ms = median(ms[2]);
  t.folded_over_eager = median_paired_ratio(ms[2], ms[0]);
  return t;
}

void print_folds(const std::vector<FoldTimes>& folds,
                 const PythonReference& py) {
  Table table({"model", "nodes", "folded", "eager ms", "GM ms", "folded ms",
               "folded/eager", "max |diff|", "py eager", "py GM",
               "py fuse()", "py fused/eager"});
  for (const FoldTimes& f : folds) {
    auto get = [&](const std::string& what) {
      return py.number(absl::StrCat("fuse.", f.model, "_", what));
    };
    table.add_row({f.model, std::to_string(f.nodes),
                   std::to_string(f.folded_nodes), fixed(f.eager_ms, 2),
                   fixed(f.graph_module_ms, 2), fixed(f.folded_ms, 2),
                   times(f.folded_over_eager),
                   absl::StrFormat("%.2g", f.max_difference),
                   fixed(get("eager_ms"), 2), fixed(get("gm_ms"), 2),
                   fixed(get("fused_ms"), 2), times(get("fused_over_eager"))});
  }
  print_section(
      "1. Forward time after conv/bn folding (median ms, no grad, "
      "interleaved)",
      table,
      {"folded: PassManager " + absl::StrJoin(kInferencePasses, ",") +
           "; max |diff|: vs eager.",
       "C++: the zoo's models (calibrated batch norms); Python: "
       "torchvision's networks (torchvision, or testdata/vision_models.py's "
       "copies beside torch 2.x), default initialization;",
       "py fuse(): torch.fx.experimental.optimization.fuse. Ratios: medians "
       "of per-round ratios."});
}

// --- 2. Passes on large graphs ----------------------------------------------

struct PassTime {
  std::string pass;
  std::vector<std::pair<size_t, double>> nodes_and_ms;  // per graph size
};

// Times `work` on a fresh copy of `module`: a warm-up run, then the median
// of `rounds` runs (the copying not timed).
void time_on(PassTime* result, const fx::GraphModule& module, int rounds,
             const std::function<void(fx::GraphModuleImpl&)>& work) {
  size_t nodes = module->graph().size();
  std::vector<double> ms;
  for (int i = 0; i <= rounds; ++i) {
    fx::GraphModule copy(module->copy());
    auto start = Clock::now();
    work(*copy);
    if (i > 0) ms.push_back(ms_since(start));
  }
  result->nodes_and_ms.push_back({nodes, median(ms)});
}

// Whether --passes selects `name` (all when empty).
bool selected(const std::string& name) {
  const std::vector<std::string> only = absl::GetFlag(FLAGS_passes);
  if (only.empty()) return true;
  std::string first_word = name.substr(0, name.find(' '));
  return std::find(only.begin(), only.end(), first_word) != only.end();
}

std::vector<PassTime> measure_passes(const std::vector<int64_t>& sizes,
                                     int rounds) {
  std::vector<fx::GraphModule> modules;
  for (int64_t blocks : sizes) {
    std::cerr << "building and tracing " << blocks << " blocks\n";
    models::Blocks model(blocks);
    model->eval();
    modules.push_back(
        fx::symbolic_trace(model, torch::randn({1, 2, 4, 4})));
  }
  std::vector<PassTime> times;
  for (const fx::PassInfo& info : fx::registered_passes()) {
    if (!selected(info.name)) continue;
    std::cerr << "timing " << info.name << "\n";
    PassTime t{info.name, {}};
    for (const fx::GraphModule& module : modules) {
      time_on(&t, module, rounds,
              [&](fx::GraphModuleImpl& m) { info.make({})->run(m); });
    }
    times.push_back(std::move(t));
  }
  std::vector<std::pair<std::string,
                        std::function<void(fx::GraphModuleImpl&)>>>
      analyses = {
          {"lint", [](fx::GraphModuleImpl& m) { m.graph().lint(); }},
          {"recompile", [](fx::GraphModuleImpl& m) { m.recompile(); }},
          {"estimate_cost",
           [](fx::GraphModuleImpl& m) { fx::estimate_cost(m.graph()); }},
          {"to_dot", [](fx::GraphModuleImpl& m) { fx::to_dot(m.graph()); }},
          {"split_module (by block ranges of 1k)",
           [](fx::GraphModuleImpl& m) {
             int64_t count = 0;
             fx::split_module(m, [&](const fx::Node&) {
               return count++ / 8000;
             });
           }},
      };
  for (const auto& [name, work] : analyses) {
    if (!selected(name)) continue;
    std::cerr << "timing " << name << "\n";
    PassTime t{name, {}};
    for (const fx::GraphModule& module : modules) {
      time_on(&t, module, rounds, work);
    }
    times.push_back(std::move(t));
  }
  return times;
}

void print_passes(const std::vector<PassTime>& passes) {
  std::vector<std::string> header = {"pass"};
  for (const auto& [nodes, ms] : passes.front().nodes_and_ms) {
    header.push_back(absl::StrCat(nodes, " nodes ms"));
    header.push_back("us/node");
  }
  if (passes.front().nodes_and_ms.size() > 1) header.push_back("growth");
  Table table(header);
  for (const PassTime& t : passes) {
    std::vector<std::string> row = {t.pass};
    for (const auto& [nodes, ms] : t.nodes_and_ms) {
      row.push_back(fixed(ms, 1));
      row.push_back(fixed(ms * 1e3 / nodes, 2));
    }
    if (t.nodes_and_ms.size() > 1) {
      const auto& [n0, ms0] = t.nodes_and_ms.front();
      const auto& [n1, ms1] = t.nodes_and_ms.back();
      row.push_back(times((ms1 / n1) / (ms0 / n0)));
    }
    table.add_row(row);
  }
  print_section(
      "2. Passes on large graphs (conv, batch_norm, relu blocks)", table,
      {"each on a fresh copy: median of the rounds after a warm-up; growth: time per node at the largest size over "
       "the smallest (1.00x is linear).",
       "fuse_conv_bn includes computing the folded weights (its init step)."});
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "the passes' targets: folded models vs eager and torch.fx's fuse(), "
      "passes on 100k-node graphs.\n  bazel run //tools:benchmark_passes -- "
      "[--quick] [--threads=N] [--repeats=N] [--passes=a,b] [--forward=false]"
      "\n--quick: 3 rounds, pass scaling on 10k nodes only.");
  absl::ParseCommandLine(argc, argv);
  const auto [quick, threads, repeats] = run_flags();
  at::set_num_threads(threads);
  const std::string before = machine_summary();

  const bool forward = absl::GetFlag(FLAGS_forward);
  PythonReference py{"not run (--forward=false)", {}};
  if (forward) {
    py = run_python_reference(
        argv[0], kPythonScript,
        absl::StrFormat("--fuse --threads=%d --repeats=%d", threads, repeats));
  }
  std::vector<FoldTimes> folds;
  for (const std::string& name :
       forward ? kModels : std::vector<std::string>{}) {
    std::cerr << "timing " << name << " folded\n";
    folds.push_back(measure_fold(name, repeats));
  }
  // 1,250 and 12,500 blocks: 10k and 100k nodes.
  std::vector<int64_t> sizes = {1250};
  if (!quick) sizes.push_back(12500);
  // Each pass on the largest graph takes up to a second: fewer rounds than
  // the forward timings.
  std::vector<PassTime> passes = measure_passes(sizes, quick ? 3 : 5);

  std::cout << "fx for LibTorch pass benchmark ("
            << (quick ? "--quick" : "full") << " run)\n"
            << "before: " << before << "; after: " << machine_summary()
            << "\nthreads: " << threads << "; rounds: " << repeats
            << "; Python: "
            << (py.unavailable.empty()
                    ? "torch " + py.text("torch_version") + ", models from " +
                          py.text("models")
                    : "n/a (" + py.unavailable + ")")
            << "\n";
  if (forward) print_folds(folds, py);
  if (!passes.empty()) print_passes(passes);

  std::vector<TargetCheck> checks;
  for (const FoldTimes& f : folds) {
    checks.push_back({"folded " + f.model + " faster than eager",
                      absl::StrFormat("%.2fx eager (torch.fx fuse(): %s)",
                                      f.folded_over_eager,
                                      times(py.number(absl::StrCat(
                                          "fuse.", f.model,
                                          "_fused_over_eager")))),
                      f.folded_over_eager < 1.0});
    const double bound = 1e-4 * std::max(1.0, f.max_magnitude);
    checks.push_back(
        {"folded " + f.model + " matches eager (max |diff| <= 1e-4 relative)",
         absl::StrFormat("max |diff| %.2g (bound %.2g)", f.max_difference,
                         bound),
         f.max_difference <= bound, /*timing=*/false});
  }
  double slowest = 0;
  std::string slowest_name;
  for (const PassTime& t : passes) {
    if (t.nodes_and_ms.back().second > slowest) {
      slowest = t.nodes_and_ms.back().second;
      slowest_name = t.pass;
    }
  }
  size_t largest =
      passes.empty() ? 0 : passes.front().nodes_and_ms.back().first;
  if (!passes.empty()) checks.push_back(
      {absl::StrCat("every pass on a ", largest, "-node graph under 1 s"),
       absl::StrFormat("slowest: %s, %.0f ms", slowest_name, slowest),
       quick ? std::nullopt : std::optional<bool>(slowest < 1000)});
  return print_targets(checks, quick);
}
