// benchmark: fx for LibTorch and Python torch.fx, side by side.
//
//   bazel run //tools:benchmark                 full run (about a minute)
//   bazel run //tools:benchmark -- --quick      smoke run: fewer repetitions,
//                                               chains of 1k and 10k nodes only
//   bazel run //tools:benchmark -- --threads=2 --repeats=20
//
// Measures tracing (per zoo model, and on chains of n additions, for
// scaling), forward time (eager, GraphModule, Interpreter on ResNet-18 and on
// a chain of 1,000 tiny ops) and the CPU memory allocated while tracing
// ResNet-50. The Python columns come from tools/pyfx_reference.py, run here
// with /usr/bin/python3 (Debian's torch 1.13 and torchvision 0.14) before the
// C++ measurements, so that the two never compete for the cores. Figures are
// medians after a warm-up; variants of a forward measurement alternate round
// by round so that drift on a shared machine hits them alike. The report
// ends with the performance targets, each PASS or MISS.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <c10/core/CPUAllocator.h>
#include <torch/script.h>
#include <torch/torch.h>
#include <torch/version.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "fx/fx.h"
#include "fx/ir/libtorch_compat.h"
#include "interpreter/interpreter.h"
#include "fx/torchscript/torchscript.h"
#include "models/zoo.h"
#include "tools/benchmark_support.h"

namespace {

using namespace fx::benchmark;  // NOLINT: the benchmark vocabulary

constexpr char kPythonScript[] = "tools/pyfx_reference.py";
const std::vector<std::string> kPythonModels = {"resnet18", "resnet50",
                                                "mobilenet_v2"};
constexpr int64_t kForwardChainLength = 1000;
// A forward of the chain takes a few ms: each sample times this many calls.
constexpr int kChainCallsPerSample = 10;
// The largest activation of ResNet-50 on 1x3x224x224: 1x64x112x112 floats.
constexpr int64_t kLargestActivationBytes = 64 * 112 * 112 * sizeof(float);

// --- 1. Trace time per model -----------------------------------------------

struct ModelTrace {
  std::string name;
  fx::TraceStats stats;
  double trace_ms = 0;           // fx::Tracer::trace
  double symbolic_trace_ms = 0;  // fx::symbolic_trace: trace + GraphModule
};

fx::TraceOptions trace_options(const models::ZooModel& model) {
  fx::TraceOptions options;
  options.leaf_modules = model.leaf_modules;
  return options;
}

// Median time of fx::Tracer::trace with a fresh Tracer each time (the graph
// is destroyed outside the timed part).
double median_trace_ms(const models::ZooModel& model, int repeats,
                       fx::TraceStats* stats) {
  return median_ms(
      [&] {
        fx::Tracer tracer(trace_options(model));
        auto start = Clock::now();
        std::unique_ptr<fx::Graph> graph =
            tracer.trace(model.module, model.forward, model.example_inputs);
        double ms = ms_since(start);
        *stats = tracer.stats();
        return ms;
      },
      repeats);
}

ModelTrace measure_model_trace(const std::string& name, int repeats) {
  models::ZooModel model = models::make_zoo_model(name);
  ModelTrace result;
  result.name = name;
  result.trace_ms = median_trace_ms(model, repeats, &result.stats);
  result.symbolic_trace_ms = median_ms(
      [&] {
        auto start = Clock::now();
        fx::GraphModule gm = fx::symbolic_trace(
            model.module, model.forward, model.example_inputs,
            trace_options(model));
        return ms_since(start);
      },
      repeats);
  return result;
}

std::vector<ModelTrace> measure_model_traces(int repeats) {
  std::vector<ModelTrace> traces;
  for (const std::string& name : models::zoo_model_names()) {
    if (name == "data_dependent") continue;  // untraceable by design
    std::cerr << "tracing " << name << "\n";
    traces.push_back(measure_model_trace(name, repeats));
  }
  return traces;
}

void print_model_traces(const std::vector<ModelTrace>& traces,
                        const PythonReference& py) {
  Table table({"model", "nodes", "trace ms", "+GM ms", "shape_rule",
               "meta_kernel", "shape_fn", "real_kernel", "in_place",
               "py nodes", "py ms", "py/C++"});
  for (const ModelTrace& t : traces) {
    bool in_python = std::count(kPythonModels.begin(), kPythonModels.end(),
                                t.name) > 0;
    std::optional<double> py_ms;
    if (in_python) py_ms = py.number("trace_ms." + t.name);
    table.add_row({t.name, std::to_string(t.stats.nodes), fixed(t.trace_ms, 2),
                   fixed(t.symbolic_trace_ms, 2),
                   std::to_string(t.stats.shape_rule),
                   std::to_string(t.stats.meta_kernel),
                   std::to_string(t.stats.shape_function),
                   std::to_string(t.stats.real_kernel),
                   std::to_string(t.stats.in_place),
                   in_python ? py.text("nodes." + t.name) : "",
                   in_python ? fixed(py_ms, 2) : "",
                   in_python ? times(ratio(py_ms, t.symbolic_trace_ms)) : ""});
  }
  print_section(
      "1. Trace time per model (median ms)", table,
      {"trace ms: fx::Tracer::trace, a fresh Tracer each run. +GM ms: "
       "fx::symbolic_trace (trace + GraphModule).",
       "shape_rule .. in_place: where output metadata came from "
       "(Tracer::stats()).",
       "py: torch.fx.symbolic_trace (trace + GraphModule) of torchvision's "
       "model; py/C++ = py ms / +GM ms (like with like).",
       "C++ records aten ops and get_attr nodes, torch.fx stops at "
       "nn.Module calls: node counts differ."});
}

// --- 2. Trace time scaling -------------------------------------------------

// forward: n additions of 1, as pyfx_reference.py's Chain.
class ChainImpl : public torch::nn::Module {
 public:
  explicit ChainImpl(int64_t n) : n_(n) {}

  at::Tensor forward(at::Tensor x) {
    for (int64_t i = 0; i < n_; ++i) x = x + 1;
    return x;
  }

 private:
  int64_t n_;
};
TORCH_MODULE(Chain);

struct ChainTrace {
  int64_t n = 0;
  double ms = 0;
  double us_per_node() const { return ms * 1e3 / n; }
};

ChainTrace measure_chain_trace(int64_t n, int repeats) {
  Chain chain(n);
  fx::BoxedForward forward = fx::box_forward(chain.ptr());
  std::vector<c10::IValue> inputs = {torch::zeros({1})};
  double ms = median_ms(
      [&] {
        fx::Tracer tracer;
        auto start = Clock::now();
        std::unique_ptr<fx::Graph> graph =
            tracer.trace(chain.ptr(), forward, inputs);
        return ms_since(start);
      },
      repeats);
  return {n, ms};
}

std::vector<ChainTrace> measure_chain_traces(int repeats, bool quick) {
  std::vector<int64_t> lengths = {1000, 10000};
  if (!quick) lengths.push_back(100000);
  std::vector<ChainTrace> traces;
  for (int64_t n : lengths) {
    std::cerr << "tracing a chain of " << n << "\n";
    // A 100k-node trace takes about half a second: fewer runs.
    traces.push_back(
        measure_chain_trace(n, n >= 100000 ? std::min(repeats, 3) : repeats));
  }
  return traces;
}

void print_chain_traces(const std::vector<ChainTrace>& traces,
                        const PythonReference& py) {
  Table table({"chain n", "C++ trace ms", "C++ us/node", "py trace ms",
               "py us/node", "py/C++"});
  for (const ChainTrace& t : traces) {
    // Python has no 100k figure, and no 10k one with --quick.
    std::optional<double> py_ms =
        py.number(absl::StrCat("chain_trace_ms.", t.n));
    std::optional<double> py_us;
    if (py_ms) py_us = *py_ms * 1e3 / t.n;
    table.add_row({std::to_string(t.n), fixed(t.ms, 1),
                   fixed(t.us_per_node(), 3), fixed(py_ms, 1), fixed(py_us, 2),
                   times(ratio(py_ms, t.ms))});
  }
  std::vector<std::string> notes = {
      "forward: `x = x + 1` n times on a 1-element tensor. Python: 10k is "
      "one run (skipped with --quick),",
      "100k is not run (torch.fx 1.13 traces in quadratic time, 2.13 in "
      "linear)."};
  if (traces.size() > 1) {
    notes.push_back(absl::StrFormat(
        "per-node time at %d vs %d nodes: %s", traces.back().n,
        traces.front().n,
        times(traces.back().us_per_node() / traces.front().us_per_node())));
  }
  print_section("2. Trace time scaling", table, notes);
}

// --- 3. Forward time -------------------------------------------------------

// Forward figures of one workload, in its unit (ms per call for ResNet-18,
// us per op for the chain): medians over rounds, and medians of the
// per-round comparisons with eager. Missing for Python when it did not run.
struct ForwardTimes {
  std::optional<double> eager;
  std::optional<double> graph_module;
  std::optional<double> interpreter;
  std::optional<double> graph_module_over_eager;   // a ratio
  std::optional<double> graph_module_minus_eager;  // in the unit
  std::optional<double> interpreter_over_eager;    // a ratio
  // Against eager's output on the same input (C++ only).
  double graph_module_max_diff = 0;
  double interpreter_max_diff = 0;
};

// Times eager, GraphModule and Interpreter runs under torch::NoGradGuard,
// interleaved, after checking that the three agree. `scale` converts ms
// per call to the workload's unit.
ForwardTimes measure_forward(const std::shared_ptr<torch::nn::Module>& root,
                             const fx::BoxedForward& forward,
                             const std::vector<c10::IValue>& inputs,
                             int rounds, int calls_per_sample, double scale) {
  torch::NoGradGuard no_grad;
  fx::GraphModule gm = fx::symbolic_trace(root, forward, inputs);
  fx::Interpreter interpreter(gm);
  at::Tensor expected = forward(inputs).toTensor();
  auto max_diff = [&](const at::Tensor& t) {
    return (t - expected).abs().max().item<double>();
  };
  const double graph_module_max_diff =
      max_diff(gm->forward(inputs).toTensor());
  const double interpreter_max_diff =
      max_diff(interpreter.run(inputs).toTensor());
  std::vector<std::vector<double>> ms = interleaved_samples_ms(
      {[&] { forward(inputs); }, [&] { gm->forward(inputs); },
       [&] { interpreter.run(inputs); }},
      rounds, calls_per_sample);
  const std::vector<double>& eager = ms[0];
  const std::vector<double>& graph_module = ms[1];
  const std::vector<double>& interpreted = ms[2];
  return {median(eager) * scale,
          median(graph_module) * scale,
          median(interpreted) * scale,
          median_paired_ratio(graph_module, eager),
          median_paired_difference(graph_module, eager) * scale,
          median_paired_ratio(interpreted, eager),
          graph_module_max_diff,
          interpreter_max_diff};
}

ForwardTimes measure_resnet18_forward(int rounds) {
  models::ZooModel model = models::make_zoo_model("resnet18");
  return measure_forward(model.module, model.forward, model.example_inputs,
                         rounds, 1, 1.0);
}

ForwardTimes measure_chain_forward(int rounds) {
  Chain chain(kForwardChainLength);
  return measure_forward(chain.ptr(), fx::box_forward(chain.ptr()),
                         {torch::zeros({1})}, rounds, kChainCallsPerSample,
                         1e3 / kForwardChainLength);
}

// The same figures from pyfx_reference.py: `<workload>_eager<unit>`, ...
ForwardTimes python_forward(const PythonReference& py,
                            const std::string& workload,
                            const std::string& unit) {
  auto get = [&](const std::string& key) { return py.number(workload + key); };
  return {get("_eager" + unit),
          get("_gm" + unit),
          get("_interp" + unit),
          get("_gm_over_eager"),
          get("_gm_minus_eager" + unit),
          get("_interp_over_eager")};
}

std::string percent_over(std::optional<double> ratio) {
  return ratio ? absl::StrFormat("%+.2f%%", (*ratio - 1) * 100) : "n/a";
}

// Rows of one workload; the GraphModule overhead in percent, or else in the
// unit per node.
void add_forward_rows(Table* table, const std::string& workload,
                      const std::string& unit, int decimals,
                      bool overhead_in_percent, const ForwardTimes& cpp,
                      const ForwardTimes& python) {
  table->add_row({workload, "eager " + unit, fixed(cpp.eager, decimals),
                  fixed(python.eager, decimals)});
  table->add_row({"", "GraphModule " + unit, fixed(cpp.graph_module, decimals),
                  fixed(python.graph_module, decimals)});
  table->add_row({"", "Interpreter " + unit, fixed(cpp.interpreter, decimals),
                  fixed(python.interpreter, decimals)});
  if (overhead_in_percent) {
    table->add_row({"", "GraphModule overhead",
                    percent_over(cpp.graph_module_over_eager),
                    percent_over(python.graph_module_over_eager)});
  } else {
    table->add_row({"", "GraphModule overhead us/node",
                    fixed(cpp.graph_module_minus_eager, decimals),
                    fixed(python.graph_module_minus_eager, decimals)});
  }
  table->add_row({"", "Interpreter / eager",
                  times(cpp.interpreter_over_eager),
                  times(python.interpreter_over_eager)});
}

void print_forward(const ForwardTimes& resnet, const ForwardTimes& chain,
                   const PythonReference& py) {
  Table table({"workload", "measure", "C++", "Python"}, 2);
  add_forward_rows(&table, "ResNet-18 1x3x224x224", "ms", 2,
                   /*overhead_in_percent=*/true, resnet,
                   python_forward(py, "resnet18", "_ms"));
  add_forward_rows(&table,
                   absl::StrFormat("chain of %d x + 1", kForwardChainLength),
                   "us/op", 3, /*overhead_in_percent=*/false, chain,
                   python_forward(py, "chain", "_us_per_op"));
  print_section(
      "3. Forward time (median, no grad, variants interleaved round by round)",
      table,
      {"C++: model.forward, gm->forward, fx::Interpreter::run. Python: "
       "torchvision's resnet18 or the",
       "chain, torch.fx GraphModule, torch.fx.Interpreter.run. TorchScript "
       "is not measured.",
       "Overheads and ratios: medians of the per-round comparisons with "
       "eager."});
}

// --- 4. Allocation during tracing ------------------------------------------

// Counts CPU allocations and hands them to the allocator it replaced. The
// DataPtrs it returns carry that allocator's deleter, so tensors allocated
// while counting outlive the counting.
class CountingAllocator final : public fx::compat::CpuAllocator {
 public:
  void reset(c10::Allocator* delegate) {
    delegate_ = delegate;
    count_ = 0;
    total_bytes_ = 0;
    largest_bytes_ = 0;
  }

  c10::DataPtr allocate_hook(size_t n) const override {
    ++count_;
    total_bytes_ += n;
    size_t largest = largest_bytes_.load();
    while (n > largest && !largest_bytes_.compare_exchange_weak(largest, n)) {
    }
    return delegate_->allocate(n);
  }

  c10::DeleterFnPtr raw_deleter() const override {
    return delegate_->raw_deleter();
  }

  int64_t count() const { return count_; }
  int64_t total_bytes() const { return total_bytes_; }
  int64_t largest_bytes() const { return largest_bytes_; }

 private:
  c10::Allocator* delegate_ = nullptr;
  mutable std::atomic<int64_t> count_{0};
  mutable std::atomic<int64_t> total_bytes_{0};
  mutable std::atomic<size_t> largest_bytes_{0};
};

struct AllocationCount {
  int64_t count = 0;
  int64_t total_bytes = 0;
  int64_t largest_bytes = 0;
};

// Runs `fn` with every CPU allocation counted. c10::SetCPUAllocator replaces
// the allocator only at a priority at least that of the current one (the
// default CPU allocator is registered at 0), so both the counting allocator
// and the restored one are set at the highest priority. The counting
// allocator is never destroyed: storages keep a pointer to the allocator
// that made them (for resizing).
AllocationCount count_cpu_allocations(const std::function<void()>& fn) {
  constexpr uint8_t kHighestPriority = 255;
  static CountingAllocator* counting = new CountingAllocator;
  c10::Allocator* previous = c10::GetCPUAllocator();
  counting->reset(previous);
  c10::SetCPUAllocator(counting, kHighestPriority);
  try {
    fn();
  } catch (...) {
    c10::SetCPUAllocator(previous, kHighestPriority);
    throw;
  }
  c10::SetCPUAllocator(previous, kHighestPriority);
  return {counting->count(), counting->total_bytes(),
          counting->largest_bytes()};
}

struct ResNet50Allocations {
  AllocationCount trace;
  AllocationCount forward;  // an eager forward, to show what counting sees
};

ResNet50Allocations measure_resnet50_allocations() {
  models::ZooModel model = models::make_zoo_model("resnet50");
  auto trace = [&] {
    fx::Tracer tracer(trace_options(model));
    tracer.trace(model.module, model.forward, model.example_inputs);
  };
  trace();  // warm-up: one-time initialisations are not the trace's
  ResNet50Allocations result;
  result.trace = count_cpu_allocations(trace);
  torch::NoGradGuard no_grad;
  result.forward =
      count_cpu_allocations([&] { model.forward(model.example_inputs); });
  return result;
}

std::string bytes(int64_t n) {
  return absl::StrFormat("%d B (%.2f MB)", n, n / 1e6);
}

void print_allocations(const ResNet50Allocations& a) {
  Table table({"ResNet-50, 1x3x224x224", "allocations", "largest",
               "total", "largest / activation"});
  auto row = [](const std::string& label, const AllocationCount& c) {
    return std::vector<std::string>{
        label, std::to_string(c.count), bytes(c.largest_bytes),
        bytes(c.total_bytes),
        absl::StrFormat("%.4f", static_cast<double>(c.largest_bytes) /
                                    kLargestActivationBytes)};
  };
  table.add_row(row("Tracer::trace", a.trace));
  table.add_row(row("eager forward (reference)", a.forward));
  print_section(
      "4. CPU allocation during tracing (counting c10::Allocator)", table,
      {"largest activation: 1x64x112x112 floats = " +
       bytes(kLargestActivationBytes) + "."});
}

// --- 5. Importing TorchScript ----------------------------------------------

constexpr char kTorchScriptModels[] = "testdata/torchscript_models.py";
const std::vector<std::string> kTorchScriptNames = {
    "resnet18_scripted", "resnet50_scripted", "resnet50_traced"};

struct TorchScriptImport {
  std::string name;
  size_t nodes = 0;
  double cold_ms = 0;  // a freshly loaded module: includes TorchScript's
                       // first-run setup of its graph executor
  double warm_ms = 0;  // the same module traced again
};

std::vector<TorchScriptImport> measure_torchscript_imports(
    const std::string& argv0, int repeats) {
  const std::string dir = "/tmp/fx_benchmark_torchscript";
  PythonReference written = run_python_reference(
      argv0, kTorchScriptModels,
      absl::StrCat(dir, " ", absl::StrJoin(kTorchScriptNames, " ")),
      Python::kTorchvision);
  std::vector<TorchScriptImport> out;
  if (!written.unavailable.empty()) {
    std::cerr << "TorchScript models not written: " << written.unavailable
              << "\n";
    return out;
  }
  at::Tensor x = torch::randn({1, 3, 224, 224});
  for (const std::string& name : kTorchScriptNames) {
    std::cerr << "importing " << name << "\n";
    const std::string path = dir + "/" + name + ".pt";
    TorchScriptImport t;
    t.name = name;
    std::vector<double> cold;
    for (int i = 0; i < repeats; ++i) {
      torch::jit::Module script = torch::jit::load(path);
      script.eval();
      auto start = Clock::now();
      fx::GraphModule gm = fx::symbolic_trace(script, {x});
      cold.push_back(ms_since(start));
      t.nodes = gm->graph().size();
    }
    t.cold_ms = median(cold);
    torch::jit::Module script = torch::jit::load(path);
    script.eval();
    t.warm_ms = median_ms(
        [&] {
          auto start = Clock::now();
          fx::symbolic_trace(script, {x});
          return ms_since(start);
        },
        repeats);
    out.push_back(t);
  }
  return out;
}

void print_torchscript_imports(const std::vector<TorchScriptImport>& imports,
                               const PythonReference& py) {
  Table table({"TorchScript file", "nodes", "import ms (fresh module)",
               "py ms (fresh model)", "py / fresh", "import ms (again)",
               "py ms (again)", "py / again"});
  for (const TorchScriptImport& t : imports) {
    std::string model = t.name.substr(0, t.name.find('_'));
    std::optional<double> py_fresh = py.number("trace_fresh_ms." + model);
    std::optional<double> py_again = py.number("trace_ms." + model);
    table.add_row({t.name + ".pt", absl::StrCat(t.nodes), fixed(t.cold_ms, 2),
                   fixed(py_fresh, 2), times(ratio(py_fresh, t.cold_ms)),
                   fixed(t.warm_ms, 2), fixed(py_again, 2),
                   times(ratio(py_again, t.warm_ms))});
  }
  print_section(
      "5. Importing TorchScript (fx::symbolic_trace of a torch::jit::Module)",
      table,
      {"Files: torchvision 0.14 models scripted / traced by "
       "testdata/torchscript_models.py.",
       "fresh: each import on a newly loaded module; Python: symbolic_trace "
       "of a newly built model (the building not timed). Nothing of either "
       "is in the caches yet.",
       "again: the same module imported again; Python: the same model traced "
       "again (median, as in section 1)."});
}

// --- Targets ---------------------------------------------------------------

struct Results {
  std::vector<ModelTrace> model_traces;
  std::vector<ChainTrace> chain_traces;
  ForwardTimes resnet18;
  ForwardTimes chain;
  ResNet50Allocations allocations;
  std::vector<TorchScriptImport> torchscript_imports;
};

std::vector<TargetCheck> check_targets(const Results& r,
                                       const PythonReference& py) {
  std::vector<TargetCheck> checks;
  auto resnet50 = std::find_if(
      r.model_traces.begin(), r.model_traces.end(),
      [](const ModelTrace& t) { return t.name == "resnet50"; });
  // Like with like: fx::symbolic_trace (trace + GraphModule) against
  // torch.fx.symbolic_trace (trace + GraphModule and its Python code).
  std::optional<double> py_resnet50 = py.number("trace_ms.resnet50");
  std::optional<double> speedup =
      ratio(py_resnet50, resnet50->symbolic_trace_ms);
  std::string measured =
      speedup ? absl::StrFormat("%.2f ms vs %.2f ms: %.2fx faster",
                                resnet50->symbolic_trace_ms, *py_resnet50,
                                *speedup)
              : absl::StrFormat("%.2f ms (Python n/a)",
                                resnet50->symbolic_trace_ms);
  checks.push_back({"ResNet-50 symbolic_trace <= 1/4 of Python's", measured,
                    speedup ? std::optional<bool>(*speedup >= 4)
                            : std::nullopt});

  const ChainTrace& first = r.chain_traces.front();
  const ChainTrace& last = r.chain_traces.back();
  if (last.n == 100000) {
    double growth = last.us_per_node() / first.us_per_node();
    checks.push_back({"chain trace per node, 100k vs 1k <= 1.5x",
                      absl::StrFormat("%.3f vs %.3f us/node: %.2fx",
                                      last.us_per_node(), first.us_per_node(),
                                      growth),
                      growth <= 1.5});
    checks.push_back({"chain of 100k traced in < 2 s",
                      absl::StrFormat("%.0f ms", last.ms), last.ms < 2000});
  } else {
    checks.push_back({"chain trace per node, 100k vs 1k <= 1.5x",
                      "not run (--quick)", std::nullopt});
    checks.push_back(
        {"chain of 100k traced in < 2 s", "not run (--quick)", std::nullopt});
  }

  // The eager baseline itself: the zoo's C++ ResNet-18 against torchvision's
  // in Python (same architecture, threads and BLAS), so that overheads are
  // not measured against a slow eager run.
  std::optional<double> py_eager = py.number("resnet18_eager_ms");
  std::optional<double> eager_ratio = ratio(r.resnet18.eager, py_eager);
  checks.push_back(
      {"C++ eager ResNet-18 within 10% of Python eager torchvision resnet18",
       eager_ratio ? absl::StrFormat("%.2f ms vs %.2f ms: %.2fx",
                                     *r.resnet18.eager, *py_eager,
                                     *eager_ratio)
                   : "Python n/a",
       eager_ratio ? std::optional<bool>(*eager_ratio <= 1.10)
                   : std::nullopt});

  double overhead_us = *r.chain.graph_module_minus_eager;
  checks.push_back({"GraphModule overhead on the chain <= 0.2 us/node",
                    absl::StrFormat("%.3f us/node", overhead_us),
                    overhead_us <= 0.2});
  double overhead_percent = (*r.resnet18.graph_module_over_eager - 1) * 100;
  checks.push_back({"GraphModule overhead on ResNet-18 <= 2%",
                    absl::StrFormat("%+.2f%%", overhead_percent),
                    overhead_percent <= 2});
  double interpreter_ratio = *r.chain.interpreter_over_eager;
  checks.push_back({"Interpreter on the chain <= 1.5x eager",
                    absl::StrFormat("%.2fx", interpreter_ratio),
                    interpreter_ratio <= 1.5});
  for (const TorchScriptImport& t : r.torchscript_imports) {
    if (t.name != "resnet50_scripted") continue;
    // Each figure against its like: a freshly loaded file against a freshly
    // built Python model, an import repeated against a trace repeated.
    for (bool fresh : {false, true}) {
      double ms = fresh ? t.cold_ms : t.warm_ms;
      std::optional<double> py_ms = fresh
                                        ? py.number("trace_fresh_ms.resnet50")
                                        : py_resnet50;
      std::optional<double> speedup = ratio(py_ms, ms);
      checks.push_back(
          {fresh ? "ResNet-50 TorchScript import, fresh module, <= 1/4 of "
                   "Python's symbolic_trace of a fresh model"
                 : "ResNet-50 TorchScript import, again, <= 1/4 of Python's "
                   "symbolic_trace, again",
           speedup ? absl::StrFormat("%.2f ms vs %.2f ms: %.2fx", ms, *py_ms,
                                     *speedup)
                   : absl::StrFormat("%.2f ms (Python n/a)", ms),
           speedup ? std::optional<bool>(*speedup >= 4) : std::nullopt});
    }
  }
  const AllocationCount& traced = r.allocations.trace;
  checks.push_back({"ResNet-50 trace allocates 0 bytes of tensor data",
                    absl::StrFormat("%d allocations, %s", traced.count,
                                    bytes(traced.total_bytes)),
                    traced.total_bytes == 0, /*timing=*/false});
  for (const auto& [workload, f] :
       {std::pair<std::string, const ForwardTimes*>{"ResNet-18", &r.resnet18},
        {"the chain", &r.chain}}) {
    checks.push_back(
        {"GraphModule and Interpreter equal eager bitwise on " + workload,
         absl::StrFormat("max |diff| %g, %g", f->graph_module_max_diff,
                         f->interpreter_max_diff),
         f->graph_module_max_diff == 0 && f->interpreter_max_diff == 0,
         /*timing=*/false});
  }
  return checks;
}

// --- Report ----------------------------------------------------------------

void print_header(int threads, int repeats, bool quick,
                  const PythonReference& py, const std::string& before) {
  std::cout << "fx for LibTorch benchmark (" << (quick ? "--quick" : "full")
            << " run)\n"
            << "before: " << before << "; after: " << machine_summary()
            << "\n"
            << "threads: " << threads
            << " (at::set_num_threads, torch.set_num_threads); repeats: "
            << repeats << " (medians after a warm-up)\n"
            << "C++: libtorch " << TORCH_VERSION << "; Python: ";
  if (py.unavailable.empty()) {
    std::cout << "torch " << py.text("torch_version") << ", models from "
              << py.text("models") << ", threads "
              << py.text("threads") << "\n";
  } else {
    std::cout << "n/a (" << py.unavailable << ")\n";
  }
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "fx for LibTorch and Python torch.fx, side by side: trace time, "
      "forward time, allocations.\n  bazel run //tools:benchmark -- "
      "[--quick] [--threads=N] [--repeats=N]\n--quick: 3 rounds, chains of "
      "1k and 10k nodes only, no 10k-node Python trace.");
  absl::ParseCommandLine(argc, argv);
  const auto [quick, threads, repeats] = run_flags();
  at::set_num_threads(threads);
  const std::string before = machine_summary();

  PythonReference py = run_python_reference(
      argv[0], kPythonScript,
      absl::StrFormat("--threads=%d --repeats=%d%s", threads, repeats,
                      quick ? " --quick" : ""));
  Results r;
  r.model_traces = measure_model_traces(repeats);
  r.chain_traces = measure_chain_traces(repeats, quick);
  std::cerr << "timing forward passes\n";
  r.resnet18 = measure_resnet18_forward(repeats);
  r.chain = measure_chain_forward(repeats);
  std::cerr << "counting allocations\n";
  r.allocations = measure_resnet50_allocations();
  r.torchscript_imports = measure_torchscript_imports(argv[0], repeats);

  print_header(threads, repeats, quick, py, before);
  print_model_traces(r.model_traces, py);
  print_chain_traces(r.chain_traces, py);
  print_forward(r.resnet18, r.chain, py);
  print_allocations(r.allocations);
  print_torchscript_imports(r.torchscript_imports, py);
  return print_targets(check_targets(r, py), quick);
}
