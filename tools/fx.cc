// fx: the command-line tool.
//
//   bazel run //tools:fx -- demo       trace the bundled ResNet-18, print its
//                                      graph and code, run it against eager
//   bazel run //tools:fx -- zoo        list the bundled models
//   bazel run //tools:fx -- passes     list the passes --passes takes
//   bazel run //tools:fx -- trace resnet50 --passes=fuse_conv_bn,eliminate_dead_code
//       --before --print=graph,code --dot=/tmp/resnet50.svg --cost
//       --save=/tmp/resnet50.fx
//   bazel run //tools:fx -- trace /tmp/resnet50.fx --print=tabular
//   bazel run //tools:fx -- trace model.pt --input=1x3x224x224
//       --passes=fuse_conv_bn --torchscript=/tmp/folded.pt
//   bazel run //tools:fx -- quantize resnet18 --calibrate=random:8
//       --engine=onednn --report --save=/tmp/resnet18_int8.fx
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include <unistd.h>

#include <torch/script.h>

#include <torch/torch.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "fx/input_spec.h"
#include "fx/internal/files.h"
#include "lowering/optimize_for_inference.h"
#include "fx/fx.h"
#include "fx/torchscript.h"
#include "passes/cost_model.h"
#include "passes/graph_drawer.h"
#include "passes/pass_manager.h"
#include "passes/registry.h"
#include "models/zoo.h"
#include "quantization/numeric_suite.h"
#include "quantization/quantize_fx.h"
#include "scheduling/parallel.h"
#include "scheduling/pipeline.h"
#include "scheduling/pipeline_runtime.h"

ABSL_FLAG(std::string, print, "graph",
          "what `trace` prints after the passes, comma-separated: graph, "
          "tabular, code, readable, meta (the graph with each node's shape), "
          "none");
ABSL_FLAG(std::string, passes, "",
          "passes to run on the traced graph, in order, comma-separated "
          "(`fx passes` lists them)");
ABSL_FLAG(bool, before, false,
          "with --passes: also print the graph before the passes");
ABSL_FLAG(std::string, dot, "",
          "write the graph (after the passes) as a picture: .dot (DOT "
          "text), .svg, .png or .pdf (rendered with graphviz's dot)");
ABSL_FLAG(bool, cost, false,
          "print the cost model's table: FLOPs, MACs, bytes and a roofline "
          "time per module");
ABSL_FLAG(std::string, save, "",
          "write the GraphModule (after the passes) to this file (fx::save); "
          "`fx trace FILE` reads it back");
ABSL_FLAG(std::vector<std::string>, input, {},
          "for a TorchScript MODEL.pt: the example inputs, comma-separated, "
          "as 1x3x224x224 or 1x3x224x224:float32 (zeros of that shape)");
ABSL_FLAG(std::string, torchscript, "",
          "export the GraphModule (after the passes) as TorchScript to this "
          "file (torch.jit.load reads it)");
ABSL_FLAG(std::string, calibrate, "random:8",
          "quantize: the calibration data, random:N (N batches of normal "
          "noise shaped like the inputs) or a directory whose files (in "
          "name order) each hold one batch: a tensor, or a list of tensors "
          "for several inputs, as torch.save writes them");
ABSL_FLAG(std::string, engine, "onednn",
          "quantize: the quantized engine, onednn (x86) or qnnpack (ARM)");
ABSL_FLAG(bool, dynamic, false,
          "quantize: dynamic quantization (linear layers and LSTMs; no "
          "calibration) instead of static");
ABSL_FLAG(bool, report, false,
          "quantize: print each quantized node's SQNR against float32 "
          "(on up to 4 calibration batches)");
ABSL_FLAG(int64_t, stages, 2,
          "pipeline: the number of stages, balanced by the cost model");
ABSL_FLAG(std::vector<std::string>, split_points, {},
          "pipeline: cut here instead, comma-separated: node names (cut "
          "after) or module paths such as layer3 (cut before)");
ABSL_FLAG(std::string, balance, "cost",
          "pipeline: balance the stages by the cost model's roofline "
          "(cost) or by each node's measured time (measure)");
ABSL_FLAG(int64_t, micro_batches, 8,
          "pipeline run: micro-batches per batch (the model is traced at "
          "one micro-batch)");
ABSL_FLAG(int64_t, rounds, 5,
          "pipeline run / serve --rank=0: batches to run (medians reported)");
ABSL_FLAG(int64_t, threads, 1,
          "pipeline: intra-op threads of each stage's process");
ABSL_FLAG(int64_t, rank, -1, "pipeline serve: this process's rank");
ABSL_FLAG(int64_t, world, 0, "pipeline serve: the number of ranks (stages)");
ABSL_FLAG(std::string, master, "",
          "pipeline serve: HOST:PORT where rank 0 meets the others (run: "
          "127.0.0.1 and a free port)");
ABSL_FLAG(int64_t, timeout_ms, 30000,
          "pipeline: how long to wait for a rank to join and for each "
          "message before failing");
ABSL_FLAG(std::string, out, "",
          "pipeline split: the directory to write stage_0.fx ... into");
ABSL_FLAG(std::string, output, "",
          "pipeline serve --rank=0: write the last batch's output here "
          "(torch::save)");
ABSL_FLAG(double, peak_gflops, 100,
          "the cost model's machine: peak GFLOP/s (--cost, pipeline split "
          "--balance=cost)");
ABSL_FLAG(double, bandwidth_gbps, 20,
          "the cost model's machine: memory bandwidth in GB/s (--cost, "
          "pipeline split --balance=cost)");
ABSL_FLAG(double, cache_mb, std::numeric_limits<double>::infinity(),
          "the machine's cache for weights in MB (--cost, pipeline split "
          "--balance=cost): a graph or stage with more weights reads them "
          "from memory on every run, without overlapping compute (inf: "
          "always in cache)");

namespace {

constexpr char kUsage[] =
    "fx: capture and transform LibTorch programs.\n\n"
    "  fx demo                         trace the bundled ResNet-18, print "
    "its graph and\n"
    "                                  generated C++, run it and compare "
    "with eager\n"
    "  fx zoo                          list the bundled models\n"
    "  fx passes                       list the passes --passes takes\n"
    "  fx trace MODEL [--passes=a,b] [--before] [--print=...] [--dot=FILE] "
    "[--cost]\n"
    "           [--save=FILE]          trace a bundled model, transform it "
    "and print\n"
    "                                  it (graph, tabular, code, readable, "
    "meta), draw\n"
    "                                  it, estimate its cost, save it\n"
    "  fx trace FILE [...]             the same for a GraphModule saved "
    "with --save\n"
    "  fx trace MODEL.pt --input=1x3x224x224[:float32],... [...] "
    "[--torchscript=OUT.pt]\n"
    "                                  the same for a TorchScript file "
    "(torch.jit.save);\n"
    "                                  export the result as TorchScript\n"
    "  fx quantize MODEL [--input=...] [--calibrate=random:N|DIR] "
    "[--engine=onednn]\n"
    "           [--dynamic] [--report] [--save=FILE] [--torchscript=FILE]\n"
    "                                  int8 post-training quantization "
    "(prepare,\n"
    "                                  calibrate, convert) of a bundled "
    "model or a file\n"
    "  fx branches MODEL [--passes=...] [--threads=T]\n"
    "                                  independent branches on 2 workers: "
    "the schedule,\n"
    "                                  and whether it beats the sequential "
    "module\n"
    "  fx pipeline split MODEL [--stages=N | --split_points=a,b] "
    "[--passes=...] --out=DIR\n"
    "                                  cut a model into pipeline stages "
    "(stage_R.fx)\n"
    "  fx pipeline serve --rank=R --world=N --master=HOST:PORT STAGE.fx\n"
    "                                  run one stage on this host; rank 0 "
    "drives, with\n"
    "                                  --input=8x3x224x224 (a batch of "
    "micro-batches)\n"
    "  fx pipeline run MODEL [--stages=N] [--micro_batches=M] "
    "[--passes=...] [--threads=T]\n"
    "                                  the stages as N local processes, "
    "timed against\n"
    "                                  one process and compared with it "
    "bitwise\n";

double milliseconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now() - start)
      .count();
}

struct Traced {
  models::ZooModel model;
  fx::GraphModule module{nullptr};
  fx::TraceStats stats{};
  double milliseconds = 0;
};

Traced trace_zoo_model(const std::string& name) {
  Traced t{models::make_zoo_model(name)};
  fx::TraceOptions options;
  options.leaf_modules = t.model.leaf_modules;
  fx::Tracer tracer(options);
  auto start = std::chrono::steady_clock::now();
  std::unique_ptr<fx::Graph> graph =
      tracer.trace(t.model.module, t.model.forward, t.model.example_inputs);
  t.module = fx::GraphModule(t.model.module, std::move(graph),
                             tracer.take_attributes());
  t.milliseconds = milliseconds_since(start);
  t.stats = tracer.stats();
  return t;
}

void print_stats(const Traced& t) {
  std::cout << "traced " << t.model.name << " in " << t.milliseconds
            << " ms: " << t.stats.nodes << " nodes; output shapes from "
            << t.stats.shape_rule << " shape rules, " << t.stats.meta_kernel
            << " meta kernels, " << t.stats.shape_function
            << " shape functions, " << t.stats.in_place
            << " in-place ops, and " << t.stats.real_kernel
            << " real kernels on zeros; "
            << (t.stats.read_sizes ? "specialized to the example shapes"
                                   : "not specialized to the example shapes")
            << "\n";
}

// Median milliseconds per call of each variant, interleaved round by round.
std::vector<double> interleaved_ms(
    const std::vector<std::function<void()>>& variants, int rounds) {
  std::vector<std::vector<double>> samples(variants.size());
  for (const auto& run : variants) run();
  for (int round = 0; round < rounds; ++round) {
    for (size_t k = 0; k < variants.size(); ++k) {
      const size_t i = round % 2 == 0 ? k : variants.size() - 1 - k;
      auto start = std::chrono::steady_clock::now();
      variants[i]();
      samples[i].push_back(std::chrono::duration<double, std::milli>(
                               std::chrono::steady_clock::now() - start)
                               .count());
    }
  }
  std::vector<double> medians;
  for (auto& s : samples) {
    std::sort(s.begin(), s.end());
    medians.push_back(s[s.size() / 2]);
  }
  return medians;
}

// The deployment story: eager, TorchScript's freeze + optimize_for_inference
// (of the graph exported with fx::to_torchscript), the graph lowered by
// fx::optimize_for_inference, and int8 (fx::prepare_fx / convert_fx), timed
// side by side. Returns whether the lowered output matches eager.
bool deployment(const Traced& t, const at::Tensor& x) {
  const int threads = 2;
  at::set_num_threads(threads);
  std::cout << "\n== Deploying it (" << threads
            << " threads, batch 1, medians of 15 interleaved rounds)\n";
  auto start = std::chrono::steady_clock::now();
  fx::GraphModule lowered = fx::optimize_for_inference(t.module);
  const double lowering_ms = std::chrono::duration<double, std::milli>(
                                 std::chrono::steady_clock::now() - start)
                                 .count();
  torch::jit::Module exported = fx::to_torchscript(t.module);
  exported.eval();
  torch::jit::Module frozen = torch::jit::freeze(exported);
  torch::jit::Module optimized = torch::jit::optimize_for_inference(frozen);
  // int8: calibrated on 8 batches of noise shaped like the input.
  start = std::chrono::steady_clock::now();
  fx::set_quantized_engine("onednn");
  fx::GraphModule prepared =
      fx::prepare_fx(t.module, fx::get_default_qconfig_mapping("onednn"));
  for (int i = 0; i < 8; ++i) {
    torch::manual_seed(500 + i);
    prepared(torch::randn_like(x));
  }
  fx::GraphModule int8 = fx::convert_fx(prepared);
  const double quantizing_ms = std::chrono::duration<double, std::milli>(
                                   std::chrono::steady_clock::now() - start)
                                   .count();
  const at::Tensor eager = t.model.forward({x}).toTensor();
  const at::Tensor ours = lowered(x).toTensor();
  const at::Tensor theirs = optimized.forward({x}).toTensor();
  const at::Tensor quantized = int8(x).toTensor();
  for (int i = 0; i < 3; ++i) optimized.forward({x});  // TorchScript's warm-up
  const std::vector<double> ms = interleaved_ms(
      {[&] { t.model.forward({x}); }, [&] { optimized.forward({x}); },
       [&] { lowered(x); }, [&] { int8(x); }},
      15);
  auto error = [&](const at::Tensor& y) {
    return (y - eager).abs().max().item<double>() /
           eager.abs().max().item<double>();
  };
  const double ours_error = error(ours);
  std::cout << absl::StrFormat(
      "  eager (torch::nn::Module)                     %7.2f ms\n"
      "  TorchScript freeze + optimize_for_inference   %7.2f ms  "
      "(max difference from eager %.1e, relative)\n"
      "  fx::optimize_for_inference (oneDNN, fused)    %7.2f ms  "
      "(max difference from eager %.1e, relative; lowered in %.0f ms)\n"
      "  fx::convert_fx (int8, onednn)                 %7.2f ms  "
      "(SQNR against eager %.1f dB; calibrated and converted in %.0f ms)\n"
      "  lowered / eager %.2fx, lowered / TorchScript-optimized %.2fx, "
      "int8 / eager %.2fx\n",
      ms[0], ms[1], error(theirs), ms[2], ours_error, lowering_ms, ms[3],
      fx::sqnr_db(eager, quantized), quantizing_ms, ms[2] / ms[0],
      ms[2] / ms[1], ms[3] / ms[0]);
  return ours_error < 1e-4;
}

int demo() {
  std::cout << "== Tracing ResNet-18 (models/resnet.h, eval mode) on a "
               "1x3x224x224 input\n";
  Traced t = trace_zoo_model("resnet18");
  print_stats(t);
  std::cout << "\n== The graph (print(gm.graph) in torch.fx)\n"
            << t.module->graph() << "\n";
  std::cout << "\n== The generated C++ forward (gm.code in torch.fx)\n"
            << t.module->code();
  std::cout << "\n== Running it\n";
  torch::NoGradGuard no_grad;
  at::Tensor x = t.model.example_inputs[0].toTensor();
  at::Tensor eager = t.model.forward({x}).toTensor();
  at::Tensor traced = t.module(x).toTensor();
  bool equal = torch::equal(eager, traced);
  std::cout << "eager output      " << eager.sizes()
            << ", top class " << eager.argmax().item<int64_t>() << "\n"
            << "GraphModule output " << traced.sizes() << ", top class "
            << traced.argmax().item<int64_t>() << "\n"
            << "max |difference| = "
            << (eager - traced).abs().max().item<double>() << ", "
            << (equal ? "bitwise equal" : "NOT bitwise equal") << "\n";
  try {
    t.module(torch::randn({1, 3, 112, 112}));
  } catch (const fx::GuardError& e) {
    std::cout << "\nA 112x112 input is rejected, as the trace read sizes:\n  "
              << e.what() << "\n";
  }
  return deployment(t, x) && equal ? 0 : 1;
}

int zoo() {
  for (const std::string& name : models::zoo_model_names()) {
    std::cout << name << "\n";
  }
  return 0;
}

int list_passes() {
  for (const fx::PassInfo& info : fx::registered_passes()) {
    std::cout << info.name << "\n    " << info.description << "\n";
  }
  return 0;
}

bool print_what(const fx::GraphModule& module) {
  for (absl::string_view what :
       absl::StrSplit(absl::GetFlag(FLAGS_print), ',', absl::SkipEmpty())) {
    if (what == "graph") {
      std::cout << module->graph() << "\n";
    } else if (what == "meta") {
      fx::PrintOptions options;
      options.tensor_meta = true;
      std::cout << module->graph().to_string(options) << "\n";
    } else if (what == "tabular") {
      std::cout << module->graph().tabular();
    } else if (what == "code") {
      std::cout << module->code();
    } else if (what == "readable") {
      std::cout << module->print_readable();
    } else if (what != "none") {
      std::cerr << "fx trace: --print takes graph, meta, tabular, code, "
                   "readable or none, not '"
                << what << "'\n";
      return false;
    }
  }
  return true;
}

// The machine --peak_gflops, --bandwidth_gbps and --cache_mb describe.
fx::Machine machine_from_flags() {
  fx::Machine machine;
  machine.peak_flops_per_second = absl::GetFlag(FLAGS_peak_gflops) * 1e9;
  machine.memory_bytes_per_second = absl::GetFlag(FLAGS_bandwidth_gbps) * 1e9;
  machine.cache_bytes = absl::GetFlag(FLAGS_cache_mb) * 1e6;
  return machine;
}

void print_cost(const fx::Graph& graph) {
  fx::CostReport report = fx::estimate_cost(graph);
  const fx::Machine machine = machine_from_flags();
  fx::CostTableOptions options;
  options.group_by = fx::CostTableOptions::GroupBy::kModuleTree;
  options.top_n = 20;
  options.machine = &machine;
  std::cout << "== Cost (roofline: " << absl::GetFlag(FLAGS_peak_gflops)
            << " GFLOP/s, " << absl::GetFlag(FLAGS_bandwidth_gbps)
            << " GB/s; weights in "
            << (fx::weights_in(report.total.weight_bytes, machine) ==
                        fx::WeightsIn::kMemory
                    ? "memory"
                    : "cache")
            << ")\n"
            << fx::format_cost_table(report, options);
}

void write_picture(const fx::Graph& graph, const std::string& path) {
  fx::CostReport report = fx::estimate_cost(graph);
  fx::DotOptions options;
  options.cost = &report;
  std::string dot = fx::to_dot(graph, options);
  if (absl::EndsWith(path, ".dot")) {
    std::ofstream out(path);
    out << dot;
    if (!out) throw fx::GraphError("cannot write " + path);
  } else {
    fx::render_dot(dot, path);
  }
  std::cerr << "wrote " << path << "\n";
}

// A TorchScript file traced on --input, or a GraphModule file read back;
// null (after saying why) if it is neither.
fx::GraphModule load_file(const std::string& path) {
  std::string torchscript_error;
  torch::jit::Module script;
  try {
    script = torch::jit::load(path);
  } catch (const c10::Error& e) {
    torchscript_error = e.what_without_backtrace();
  }
  if (torchscript_error.empty()) {
    std::vector<c10::IValue> inputs;
    for (const std::string& spec : absl::GetFlag(FLAGS_input)) {
      inputs.push_back(fx::example_input(spec));
    }
    if (inputs.empty()) {
      std::cerr << "fx trace: " << path
                << " is TorchScript: give its example inputs, e.g. "
                   "--input=1x3x224x224 (or 1x3x224x224:float32,1x10:int64)\n";
      return fx::GraphModule(nullptr);
    }
    script.eval();
    auto start = std::chrono::steady_clock::now();
    fx::GraphModule module = fx::symbolic_trace(script, inputs);
    std::cerr << "traced TorchScript " << path << " in "
              << milliseconds_since(start) << " ms: "
              << module->graph().size() << " nodes\n";
    return module;
  }
  try {
    fx::GraphModule module = fx::load(path);
    std::cerr << "loaded " << path << ": " << module->graph().size()
              << " nodes\n";
    return module;
  } catch (const fx::ParseError&) {
    throw;
  } catch (const fx::GraphError& e) {
    std::cerr << "fx trace: " << path
              << " is neither a TorchScript file (torch::jit::load: "
              << torchscript_error.substr(0, torchscript_error.find('\n'))
              << ") nor a GraphModule file (" << e.what() << ")\n";
    return fx::GraphModule(nullptr);
  }
}

// A bundled model traced, or a file read (load_file); null after saying
// why not. `inputs` gets the example inputs when known.
fx::GraphModule open_model(const std::string& command, const std::string& name,
                           std::vector<c10::IValue>* inputs) {
  std::vector<std::string> names = models::zoo_model_names();
  if (std::find(names.begin(), names.end(), name) != names.end()) {
    Traced t = trace_zoo_model(name);
    print_stats(t);
    *inputs = t.model.example_inputs;
    return t.module;
  }
  if (std::ifstream(name).good()) {
    for (const std::string& spec : absl::GetFlag(FLAGS_input)) {
      inputs->push_back(fx::example_input(spec));
    }
    return load_file(name);
  }
  std::cerr << "fx " << command << ": '" << name
            << "' is neither a bundled model (`fx zoo` lists them) nor a "
               "readable file\n";
  return fx::GraphModule(nullptr);
}

int trace(const std::string& name) {
  std::vector<c10::IValue> inputs;
  fx::GraphModule module = open_model("trace", name, &inputs);
  if (!module) return 2;
  const size_t nodes_before = module->graph().size();
  std::string passes = absl::GetFlag(FLAGS_passes);
  if (!passes.empty()) {
    fx::PassManager manager;
    for (absl::string_view pass :
         absl::StrSplit(passes, ',', absl::SkipEmpty())) {
      manager.add(std::string(pass));
    }
    if (absl::GetFlag(FLAGS_before)) {
      std::cout << "== Before " << passes << "\n" << module->graph() << "\n";
    }
    fx::PassResult result = manager.run(module);
    module = result.module;
    std::cerr << "passes " << passes << ": "
              << (result.modified ? "changed the graph" : "changed nothing")
              << ", " << nodes_before << " -> "
              << module->graph().size() << " nodes\n";
    if (absl::GetFlag(FLAGS_before)) std::cout << "== After\n";
  }
  if (!print_what(module)) return 2;
  if (absl::GetFlag(FLAGS_cost)) print_cost(module->graph());
  if (!absl::GetFlag(FLAGS_dot).empty()) {
    write_picture(module->graph(), absl::GetFlag(FLAGS_dot));
  }
  if (!absl::GetFlag(FLAGS_torchscript).empty()) {
    fx::to_torchscript(module).save(absl::GetFlag(FLAGS_torchscript));
    std::cerr << "wrote " << absl::GetFlag(FLAGS_torchscript) << "\n";
  }
  if (!absl::GetFlag(FLAGS_save).empty()) {
    fx::save(module, absl::GetFlag(FLAGS_save));
    std::cerr << "wrote " << absl::GetFlag(FLAGS_save) << "\n";
  }
  return 0;
}

}  // namespace

// One calibration batch per entry (the forward's inputs).
std::vector<std::vector<c10::IValue>> calibration_batches(
    const std::vector<c10::IValue>& examples) {
  const std::string spec = absl::GetFlag(FLAGS_calibrate);
  std::vector<std::vector<c10::IValue>> batches;
  if (absl::StartsWith(spec, "random:")) {
    int n = 0;
    if (!absl::SimpleAtoi(spec.substr(7), &n) || n <= 0) {
      throw fx::QuantizationError("--calibrate=" + spec +
                                  ": give a positive count, e.g. random:8");
    }
    if (examples.empty()) {
      throw fx::QuantizationError(
          "--calibrate=random:N needs the inputs' shapes: give --input");
    }
    for (int i = 0; i < n; ++i) {
      torch::manual_seed(1000 + i);
      std::vector<c10::IValue> batch;
      for (const c10::IValue& e : examples) {
        batch.push_back(e.isTensor() && e.toTensor().is_floating_point()
                            ? c10::IValue(torch::randn_like(e.toTensor()))
                            : e);
      }
      batches.push_back(std::move(batch));
    }
    return batches;
  }
  std::error_code error;
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(spec, error)) {
    if (entry.is_regular_file()) files.push_back(entry.path().string());
  }
  if (error) {
    throw fx::QuantizationError("--calibrate=" + spec +
                                ": neither random:N nor a readable directory (" +
                                error.message() + ")");
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) {
    throw fx::QuantizationError("--calibrate=" + spec +
                                ": the directory holds no files");
  }
  for (const std::string& file : files) {
    c10::IValue v;
    std::string problem;
    try {
      std::optional<c10::IValue> loaded =
          fx::checked_pickle_load(fx::read_file(file, "fx quantize"), &problem);
      if (loaded) v = std::move(*loaded);
    } catch (const c10::Error& e) {
      problem = e.what_without_backtrace();
    } catch (const std::exception& e) {
      problem = e.what();
    }
    if (!problem.empty()) {
      throw fx::QuantizationError("--calibrate: " + file +
                                  " is not a tensor file (torch.save): " +
                                  problem);
    }
    std::vector<c10::IValue> batch;
    if (v.isTensor()) {
      batch.push_back(v);
    } else if (v.isList() || v.isTuple()) {
      for (const c10::IValue& e : v.isList() ? v.toListRef()
                                              : v.toTupleRef().elements()) {
        batch.push_back(e);
      }
    } else {
      throw fx::QuantizationError("--calibrate: " + file +
                                  " holds neither a tensor nor a list of "
                                  "tensors");
    }
    batches.push_back(std::move(batch));
  }
  return batches;
}

void progress(const char* what, size_t done, size_t total) {
  const size_t width = 30;
  const size_t filled = total == 0 ? width : done * width / total;
  std::cerr << "\r" << what << " [" << std::string(filled, '#')
            << std::string(width - filled, '.') << "] " << done << "/"
            << total << (done == total ? "\n" : "") << std::flush;
}

int quantize(const std::string& name) {
  std::vector<c10::IValue> examples;
  fx::GraphModule module = open_model("quantize", name, &examples);
  if (!module) return 2;
  const std::string engine = absl::GetFlag(FLAGS_engine);
  fx::set_quantized_engine(engine);
  torch::NoGradGuard no_grad;
  const auto start = std::chrono::steady_clock::now();
  fx::GraphModule quantized{nullptr};
  fx::GraphModule prepared{nullptr};
  std::vector<std::vector<c10::IValue>> batches;
  if (absl::GetFlag(FLAGS_dynamic)) {
    fx::DynamicOptions options;
    options.engine = engine;
    quantized = fx::quantize_dynamic_fx(module, options);
    prepared = module;
    if (!examples.empty()) batches.push_back(examples);
  } else {
    prepared = fx::prepare_fx(module, fx::get_default_qconfig_mapping(engine),
                              examples);
    batches = calibration_batches(examples);
    for (size_t i = 0; i < batches.size(); ++i) {
      progress("calibrating", i, batches.size());
      prepared->forward(batches[i]);
    }
    progress("calibrating", batches.size(), batches.size());
    quantized = fx::convert_fx(prepared);
  }
  std::cerr << "quantized " << name << " for " << engine << " in "
            << milliseconds_since(start) << " ms: "
            << fx::summarize_quantized(quantized).to_string() << "\n";
  if (!print_what(quantized)) return 2;
  if (absl::GetFlag(FLAGS_report) && !batches.empty()) {
    std::vector<std::vector<c10::IValue>> some(
        batches.begin(), batches.begin() + std::min<size_t>(4, batches.size()));
    std::cout << fx::format_quantization_report(
        fx::quantization_report(prepared, quantized, some));
  }
  if (!examples.empty()) {
    const c10::IValue want = module->forward(examples);
    const c10::IValue got = quantized->forward(examples);
    if (want.isTensor() && got.isTensor()) {
      std::cout << absl::StrFormat(
          "output SQNR against float32 on the example input: %.1f dB\n",
          fx::sqnr_db(want.toTensor(), got.toTensor()));
    }
  }
  if (!absl::GetFlag(FLAGS_torchscript).empty()) {
    fx::to_torchscript(quantized).save(absl::GetFlag(FLAGS_torchscript));
    std::cerr << "wrote " << absl::GetFlag(FLAGS_torchscript) << "\n";
  }
  if (!absl::GetFlag(FLAGS_save).empty()) {
    fx::save(quantized, absl::GetFlag(FLAGS_save));
    std::cerr << "wrote " << absl::GetFlag(FLAGS_save) << "\n";
  }
  return 0;
}

// --- fx pipeline -----------------------------------------------------------

// The model a pipeline command cuts: a bundled model traced in eval mode at
// its example inputs (one micro-batch), or a file (with --input for
// TorchScript). `inputs` gets the micro-batch's example inputs.
fx::GraphModule open_pipeline_model(const std::string& name,
                                    std::vector<c10::IValue>* inputs) {
  std::vector<std::string> names = models::zoo_model_names();
  if (std::find(names.begin(), names.end(), name) != names.end()) {
    models::ZooModel model = models::make_zoo_model(name);
    model.module->eval();
    *inputs = model.example_inputs;
    return models::trace_zoo_model(model);
  }
  return open_model("pipeline", name, inputs);
}

fx::GraphModule run_passes(fx::GraphModule module) {
  const std::string passes = absl::GetFlag(FLAGS_passes);
  if (passes.empty()) return module;
  fx::PassManager manager;
  for (absl::string_view pass : absl::StrSplit(passes, ',', absl::SkipEmpty())) {
    manager.add(std::string(pass));
  }
  return manager.run(module).module;
}

fx::Pipeline split_from_flags(const fx::GraphModule& module,
                              const std::vector<c10::IValue>& inputs) {
  fx::PipelineOptions options;
  options.machine = machine_from_flags();
  options.stages = absl::GetFlag(FLAGS_stages);
  options.split_points = absl::GetFlag(FLAGS_split_points);
  const std::string balance = absl::GetFlag(FLAGS_balance);
  std::map<std::string, double> seconds;
  if (balance == "measure") {
    seconds = fx::profile_node_seconds(module, inputs, 5);
    options.node_seconds = [&seconds](const fx::Node& n) {
      auto it = seconds.find(n.name());
      return it == seconds.end() ? 0.0 : it->second;
    };
  } else if (balance != "cost") {
    throw fx::GraphError("--balance is cost or measure, not '" + balance + "'");
  }
  fx::Pipeline pipeline = fx::split_pipeline(module, options);
  for (fx::PipelineStage& stage : pipeline.stages) {
    stage.module = run_passes(stage.module);
  }
  return pipeline;
}

void print_plan(const fx::Pipeline& pipeline) {
  std::cout << fx::format_pipeline(pipeline);
  const int64_t micro_batches = absl::GetFlag(FLAGS_micro_batches);
  fx::PipelinePrediction prediction =
      fx::predict_pipeline(pipeline, micro_batches, fx::Link{});
  std::cout << "predicted for " << micro_batches
            << " micro-batches (cost model, 1 GB/s link): "
            << fx::format_seconds(prediction.batch_seconds) << " per batch ("
            << fx::format_seconds(prediction.stream_batch_seconds)
            << " each in a stream of batches), "
            << absl::StrFormat("%.2fx", prediction.speedup())
            << " the throughput of one process running the stages in turn\n";
}

int pipeline_split(const std::string& name) {
  const std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty()) {
    std::cerr << "fx pipeline split: give --out=DIR for the stage files\n";
    return 2;
  }
  std::vector<c10::IValue> inputs;
  fx::GraphModule module = open_pipeline_model(name, &inputs);
  if (!module) return 2;
  fx::Pipeline pipeline = split_from_flags(module, inputs);
  std::filesystem::create_directories(out);
  print_plan(pipeline);
  for (size_t r = 0; r < pipeline.stages.size(); ++r) {
    const std::string path = absl::StrCat(out, "/stage_", r, ".fx");
    fx::save(pipeline.stages[r].module, path);
    std::cerr << "wrote " << path << "\n";
  }
  return 0;
}

fx::PipelineGroup group_from_flags() {
  fx::PipelineGroup group;
  group.master = absl::GetFlag(FLAGS_master);
  group.rank = absl::GetFlag(FLAGS_rank);
  group.world = absl::GetFlag(FLAGS_world);
  group.timeout = std::chrono::milliseconds(absl::GetFlag(FLAGS_timeout_ms));
  return group;
}

// Normal noise shaped as `spec` (a batch), the same every time.
std::vector<at::Tensor> batch_inputs(const std::vector<std::string>& specs) {
  torch::manual_seed(0);
  std::vector<at::Tensor> batch;
  for (const std::string& spec : specs) {
    at::Tensor shape = fx::example_input(spec);
    batch.push_back(shape.is_floating_point()
                        ? torch::randn(shape.sizes(), shape.options())
                        : shape);
  }
  return batch;
}

int pipeline_serve(const std::string& path) {
  fx::PipelineGroup group = group_from_flags();
  if (group.rank < 0 || group.world < 1 || group.master.empty()) {
    std::cerr << "fx pipeline serve: give --rank, --world and "
                 "--master=HOST:PORT\n";
    return 2;
  }
  at::set_num_threads(static_cast<int>(absl::GetFlag(FLAGS_threads)));
  fx::GraphModule stage = fx::load(path);
  if (group.rank > 0) {
    fx::serve_pipeline_stage(stage, group);
    std::cerr << "fx pipeline serve: rank " << group.rank << " done\n";
    return 0;
  }
  const std::vector<std::string> specs = absl::GetFlag(FLAGS_input);
  if (specs.empty()) {
    std::cerr << "fx pipeline serve: rank 0 drives: give --input, the "
                 "batch's shape (a multiple of the stage's micro-batch)\n";
    return 2;
  }
  std::vector<at::Tensor> batch = batch_inputs(specs);
  fx::PipelineDriver driver(stage, group);
  std::cerr << "rank 0: all " << group.world << " ranks joined\n";
  c10::IValue output;
  std::vector<double> samples;
  for (int64_t r = 0; r < std::max<int64_t>(absl::GetFlag(FLAGS_rounds), 1);
       ++r) {
    auto start = std::chrono::steady_clock::now();
    output = driver.run(batch);
    samples.push_back(milliseconds_since(start));
  }
  driver.stop();
  std::sort(samples.begin(), samples.end());
  std::cout << "rank 0: " << samples.size() << " batches, median "
            << absl::StrFormat("%.2f", samples[samples.size() / 2])
            << " ms per batch\n";
  const std::string out = absl::GetFlag(FLAGS_output);
  if (!out.empty()) {
    torch::save(fx::output_tensors(output), out);
    std::cerr << "wrote " << out << "\n";
  }
  return 0;
}

int pipeline_run(const std::string& name) {
  const int64_t threads = absl::GetFlag(FLAGS_threads);
  const int64_t micro_batches = absl::GetFlag(FLAGS_micro_batches);
  std::vector<c10::IValue> inputs;
  fx::GraphModule module = open_pipeline_model(name, &inputs);
  if (!module) return 2;
  at::set_num_threads(static_cast<int>(threads));
  fx::Pipeline pipeline = split_from_flags(module, inputs);
  const int64_t world = static_cast<int64_t>(pipeline.stages.size());
  print_plan(pipeline);

  // The stages as files, as another host would get them.
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() /
      absl::StrCat("fx_pipeline_", ::getpid());
  std::filesystem::create_directories(dir);
  struct RemoveDir {
    std::filesystem::path dir;
    ~RemoveDir() {
      std::error_code ignored;
      std::filesystem::remove_all(dir, ignored);
    }
  } remove_dir{dir};
  for (int64_t r = 0; r < world; ++r) {
    fx::save(pipeline.stages[r].module,
             (dir / absl::StrCat("stage_", r, ".fx")).string());
  }
  fx::PipelineGroup group;
  group.master = absl::StrCat("127.0.0.1:", fx::free_local_port());
  group.world = world;
  group.timeout = std::chrono::milliseconds(absl::GetFlag(FLAGS_timeout_ms));
  fx::ChildProcesses children;
  for (int64_t r = 1; r < world; ++r) {
    children.spawn({"/proc/self/exe", "pipeline", "serve",
                    absl::StrCat("--rank=", r), absl::StrCat("--world=", world),
                    "--master=" + group.master,
                    absl::StrCat("--threads=", threads),
                    absl::StrCat("--timeout_ms=", group.timeout.count()),
                    (dir / absl::StrCat("stage_", r, ".fx")).string()});
  }
  std::cout << "started ranks 1 to " << world - 1 << " (" << world - 1
            << " processes, " << threads << " thread(s) each) on "
            << group.master << "\n";
  fx::PipelineDriver driver(
      fx::load((dir / "stage_0.fx").string()), group);

  // A batch of micro-batches of normal noise.
  torch::manual_seed(0);
  std::vector<at::Tensor> batch;
  for (const c10::IValue& input : inputs) {
    if (!input.isTensor()) {
      std::cerr << "fx pipeline run: the model takes a non-tensor input\n";
      return 2;
    }
    at::Tensor x = input.toTensor();
    std::vector<int64_t> sizes = x.sizes().vec();
    sizes[0] *= micro_batches;
    batch.push_back(x.is_floating_point() ? torch::randn(sizes, x.options())
                                          : x.repeat_interleave(micro_batches, 0));
  }
  fx::GraphModule whole = run_passes(module);
  auto run_in_one_process = [&](bool whole_model) {
    std::vector<std::vector<at::Tensor>> parts;
    for (int64_t m = 0; m < micro_batches; ++m) {
      std::vector<c10::IValue> piece;
      for (size_t i = 0; i < batch.size(); ++i) {
        const int64_t micro = inputs[i].toTensor().size(0);
        piece.push_back(batch[i].narrow(0, m * micro, micro));
      }
      parts.push_back(fx::output_tensors(
          whole_model ? whole->forward(piece)
                      : fx::run_pipeline_locally(pipeline, piece)));
    }
    std::vector<at::Tensor> joined;
    for (size_t k = 0; k < parts[0].size(); ++k) {
      std::vector<at::Tensor> pieces;
      for (const auto& p : parts) pieces.push_back(p[k]);
      joined.push_back(at::cat(pieces, 0));
    }
    return joined;
  };
  std::vector<at::Tensor> distributed = fx::output_tensors(driver.run(batch));
  std::vector<at::Tensor> stages_here = run_in_one_process(false);
  std::vector<at::Tensor> model_here = run_in_one_process(true);
  bool bitwise = distributed.size() == stages_here.size();
  double max_diff = 0;
  for (size_t k = 0; bitwise && k < distributed.size(); ++k) {
    bitwise = torch::equal(distributed[k], stages_here[k]);
    max_diff = std::max(
        max_diff,
        (distributed[k] - model_here[k]).abs().max().item<double>());
  }
  std::cout << "outputs: " << (bitwise ? "bitwise equal" : "DIFFERENT")
            << " to the stages run in one process; max |diff| to the whole "
               "model in one process: "
            << max_diff << "\n";

  const int rounds = static_cast<int>(absl::GetFlag(FLAGS_rounds));
  auto pipelined = [&] { driver.run(batch); };
  auto one_process = [&] { run_in_one_process(true); };
  auto one_process_all_threads = [&] {
    at::set_num_threads(static_cast<int>(threads * world));
    run_in_one_process(true);
    at::set_num_threads(static_cast<int>(threads));
  };
  std::vector<double> ms = interleaved_ms(
      {pipelined, one_process, one_process_all_threads}, rounds);
  std::cout << absl::StrFormat(
      "batch of %d micro-batches, medians of %d interleaved rounds:\n"
      "  pipeline, %d processes x %d thread(s)   %9.2f ms\n"
      "  one process, %d thread(s)               %9.2f ms  (%.2fx the "
      "pipeline's time)\n"
      "  one process, %d thread(s)               %9.2f ms  (%.2fx)\n",
      micro_batches, rounds, world, threads, ms[0], threads, ms[1],
      ms[1] / ms[0], threads * world, ms[2], ms[2] / ms[0]);
  driver.stop();
  std::vector<int> statuses = children.wait(group.timeout);
  for (size_t r = 0; r < statuses.size(); ++r) {
    if (statuses[r] != 0) {
      std::cerr << "fx pipeline run: rank " << r + 1 << " exited with status "
                << statuses[r] << "\n";
      return 1;
    }
  }
  return bitwise ? 0 : 1;
}

// --- fx branches -------------------------------------------------------------

// The schedule of a model's independent branches on 2 workers, and whether
// it pays, measured on the example inputs.
int branches(const std::string& name) {
  std::vector<c10::IValue> inputs;
  fx::GraphModule module = open_pipeline_model(name, &inputs);
  if (!module) return 2;
  module = run_passes(module);
  if (inputs.empty()) {
    std::cerr << "fx branches: give the example inputs (--input)\n";
    return 2;
  }
  const int64_t threads = absl::GetFlag(FLAGS_threads);
  fx::ParallelOptions options;
  options.workers = 2;
  options.threads_per_worker = threads;
  options.decide_by_measuring = true;
  options.example_inputs = inputs;
  options.measure_rounds = static_cast<int>(absl::GetFlag(FLAGS_rounds));
  fx::ParallelModule parallel = fx::parallelize_branches(module, options);
  std::cout << fx::format_schedule(parallel->schedule());
  std::cout << absl::StrFormat(
      "measured: 2 workers x %d thread(s) %.2f ms, sequential with %d "
      "threads %.2f ms: %s\n",
      threads, parallel->measured_parallel_ms(), 2 * threads,
      parallel->measured_sequential_ms(),
      parallel->used_parallel() ? "the branches at once pay"
                                : "keeping the sequential module");
  return 0;
}

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(kUsage);
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() < 2) {
    std::cerr << kUsage;
    return 2;
  }
  std::string command = args[1];
  try {
    if (command == "demo" && args.size() == 2) return demo();
    if (command == "zoo" && args.size() == 2) return zoo();
    if (command == "passes" && args.size() == 2) return list_passes();
    if (command == "trace" && args.size() == 3) return trace(args[2]);
    if (command == "quantize" && args.size() == 3) return quantize(args[2]);
    if (command == "branches" && args.size() == 3) return branches(args[2]);
    if (command == "pipeline" && args.size() == 4) {
      const std::string sub = args[2];
      if (sub == "split") return pipeline_split(args[3]);
      if (sub == "serve") return pipeline_serve(args[3]);
      if (sub == "run") return pipeline_run(args[3]);
    }
  } catch (const fx::Error& e) {
    std::cerr << "fx " << command << ": " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "fx " << command << ": " << e.what() << "\n";
    return 1;
  }
  std::cerr << "fx: unknown command or wrong arguments\n\n" << kUsage;
  return 2;
}
