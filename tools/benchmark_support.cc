#include "tools/benchmark_support.h"

#include <dlfcn.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "fx/torchscript/torchscript.h"
#include "libtorch/python.h"
#include "lowering/optimize_for_inference.h"
#include "lowering/threads.h"

ABSL_FLAG(bool, quick, false,
          "smoke run: fewer rounds and smaller sizes (the usage message says "
          "which)");
ABSL_FLAG(int, threads, 2,
          "intra-op threads (at::set_num_threads, torch.set_num_threads)");
ABSL_FLAG(int, repeats, 0,
          "timed runs or interleaved rounds per figure (0: 20, or 3 with "
          "--quick)");

namespace fx {
namespace benchmark {
namespace {

// Debian's Python, torch 1.13 with torchvision 0.14: what writes the
// TorchScript files of torchvision's models (they load in LibTorch 2.13).
constexpr char kTorchvisionPython[] = "/usr/bin/python3";
// The runfiles directory of this workspace, to find a script when the binary
// is run directly rather than through `bazel run`.
constexpr char kRunfilesWorkspace[] = ".runfiles/fx_libtorch/";

// Runs `command` (stderr merged into stdout) and returns its output lines and
// exit status.
std::pair<std::vector<std::string>, int> run_command(
    const std::string& command) {
  std::vector<std::string> lines;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return {lines, -1};
  std::string line;
  char buffer[4096];
  while (fgets(buffer, sizeof(buffer), pipe) != nullptr) {
    line += buffer;
    if (line.back() != '\n') continue;
    line.pop_back();
    lines.push_back(std::move(line));
    line.clear();
  }
  if (!line.empty()) lines.push_back(line);
  int status = pclose(pipe);
  return {lines, WIFEXITED(status) ? WEXITSTATUS(status) : -1};
}

std::string load_average() {
  std::ifstream file("/proc/loadavg");
  std::string one, five, fifteen;
  file >> one >> five >> fifteen;
  return file ? absl::StrJoin({one, five, fifteen}, " ") : "n/a";
}

void print_row(std::ostream& out, const std::vector<std::string>& row,
               const std::vector<size_t>& widths, size_t left_columns) {
  std::string line;
  for (size_t c = 0; c < row.size(); ++c) {
    std::string pad(widths[c] - row[c].size(), ' ');
    if (c > 0) line += "  ";
    line += c < left_columns ? row[c] + pad : pad + row[c];
  }
  // No trailing blanks after an empty last column.
  line.erase(line.find_last_not_of(' ') + 1);
  out << "  " << line << "\n";
}

void print_rule(std::ostream& out, const std::vector<size_t>& widths) {
  size_t total = 0;
  for (size_t w : widths) total += w;
  out << "  " << std::string(total + 2 * (widths.size() - 1), '-') << "\n";
}

}  // namespace

// Median milliseconds of `timed_run` over `repeats` runs after one warm-up;
// timed_run returns the milliseconds of the part it measures.
double median_ms(const std::function<double()>& timed_run, int repeats) {
  timed_run();
  std::vector<double> samples;
  for (int i = 0; i < repeats; ++i) samples.push_back(timed_run());
  return median(samples);
}

// Milliseconds per call of each variant, one sample per round. After a
// warm-up call of each, every round times `calls_per_sample` calls of each
// variant (each after an untimed call of it with Sample::kWarm), in order
// on even rounds and in reverse order on odd ones.
std::vector<std::vector<double>> interleaved_samples_ms(
    const std::vector<std::function<void()>>& variants, int rounds,
    int calls_per_sample, Sample sample) {
  for (const auto& variant : variants) variant();
  std::vector<std::vector<double>> samples(variants.size());
  for (int round = 0; round < rounds; ++round) {
    for (size_t k = 0; k < variants.size(); ++k) {
      size_t v = round % 2 == 0 ? k : variants.size() - 1 - k;
      if (sample == Sample::kWarm) variants[v]();
      auto start = Clock::now();
      for (int call = 0; call < calls_per_sample; ++call) variants[v]();
      samples[v].push_back(ms_since(start) / calls_per_sample);
    }
  }
  return samples;
}

double warm_median_ms(const std::function<void()>& call, int calls) {
  call();
  std::vector<double> ms;
  for (int i = 0; i < calls; ++i) {
    auto start = Clock::now();
    call();
    ms.push_back(ms_since(start));
  }
  return median(ms);
}

std::vector<std::vector<double>> take_turns(
    const std::vector<std::function<double()>>& variants, int rounds,
    std::chrono::milliseconds pause) {
  std::vector<std::vector<double>> samples(variants.size());
  for (int round = 0; round < rounds; ++round) {
    for (size_t k = 0; k < variants.size(); ++k) {
      const size_t v = round % 2 == 0 ? k : variants.size() - 1 - k;
      std::this_thread::sleep_for(pause);
      samples[v].push_back(variants[v]());
    }
  }
  return samples;
}

TurnSamples sample_in_turns(
    const std::vector<std::function<double(int)>>& variants, int rounds,
    int warmups, double budget_ms, double slowest_ms,
    std::chrono::milliseconds pause) {
  double slowest = slowest_ms;
  for (int i = 0; i < warmups; ++i) {
    for (const auto& v : variants) slowest = std::max(slowest, v(1));
  }
  const int calls = slowest < budget_ms / 1500 ? 3 : 1;
  TurnSamples out;
  out.calls = calls;
  out.rounds = std::max(
      3, std::min(rounds,
                  static_cast<int>(budget_ms / (static_cast<double>(
                                                    variants.size()) *
                                                std::max(slowest, 1e-3) *
                                                (calls + 1)))));
  std::vector<std::function<double()>> sampled;
  for (const auto& variant : variants) {
    sampled.push_back([&variant, calls] { return variant(calls); });
  }
  const PinnedThreads pinned;
  out.samples = take_turns(sampled, out.rounds, pause);
  return out;
}

PinnedThreads::PinnedThreads() {
  try {
    fx::pin_intra_op_threads();
    pinned_ = true;
  } catch (const std::exception&) {
  }
}

PinnedThreads::~PinnedThreads() {
  if (pinned_) fx::unpin_intra_op_threads();
}

// Medians of a[i] / b[i] and a[i] - b[i] over rounds: comparing samples of
// the same round cancels the drift between rounds.
double median_paired_ratio(const std::vector<double>& a,
                           const std::vector<double>& b) {
  std::vector<double> ratios;
  for (size_t i = 0; i < a.size(); ++i) ratios.push_back(a[i] / b[i]);
  return median(std::move(ratios));
}

double median_paired_difference(const std::vector<double>& a,
                                const std::vector<double>& b) {
  std::vector<double> differences;
  for (size_t i = 0; i < a.size(); ++i) differences.push_back(a[i] - b[i]);
  return median(std::move(differences));
}

std::string fixed(std::optional<double> value, int decimals) {
  if (!value) return "n/a";
  return absl::StrFormat("%.*f", decimals, *value);
}

std::string times(std::optional<double> ratio) {
  return ratio ? absl::StrFormat("%.2fx", *ratio) : "n/a";
}

std::optional<double> ratio(std::optional<double> a, std::optional<double> b) {
  if (!a || !b || *b == 0) return std::nullopt;
  return *a / *b;
}

Table::Table(std::vector<std::string> header, size_t left_columns)
    : rows_{std::move(header)}, left_columns_(left_columns) {}

void Table::add_row(std::vector<std::string> row) {
  row.resize(rows_[0].size());
  rows_.push_back(std::move(row));
}

void Table::print(std::ostream& out) const {
  std::vector<size_t> widths(rows_[0].size(), 0);
  for (const auto& row : rows_) {
    for (size_t c = 0; c < row.size(); ++c) {
      widths[c] = std::max(widths[c], row[c].size());
    }
  }
  for (size_t r = 0; r < rows_.size(); ++r) {
    print_row(out, rows_[r], widths, left_columns_);
    if (r == 0) print_rule(out, widths);
  }
}

void print_section(const std::string& title, const Table& table,
                   const std::vector<std::string>& notes) {
  std::cout << "\n" << title << "\n";
  table.print(std::cout);
  for (const std::string& note : notes) std::cout << "  " << note << "\n";
}

int print_targets(const std::vector<TargetCheck>& checks, bool quick) {
  Table table({"target", "measured", "result"}, 3);
  int missed = 0;
  for (const TargetCheck& c : checks) {
    const bool gated = !quick || !c.timing;
    std::string result;
    if (c.met && *c.met) {
      result = "PASS";
    } else if (!gated) {
      result = c.met ? "MISS (not gated: --quick)" : "n/a (not gated: --quick)";
    } else {
      // A target that could not be measured is not met.
      result = c.met ? "MISS" : "MISS (not measured)";
      ++missed;
    }
    table.add_row({c.target, c.measured, result});
  }
  print_section("Targets", table,
                {missed == 0 ? "every gated target met"
                             : absl::StrCat(missed, " gated target(s) missed: "
                                                    "exit status 1")});
  return missed == 0 ? 0 : 1;
}

std::string machine_summary() {
  return absl::StrCat("machine: nproc ", sysconf(_SC_NPROCESSORS_ONLN),
                      ", load average ", load_average());
}

std::string run_openblas_at_one_thread() {
  setenv("OPENBLAS_NUM_THREADS", "1", 1);
  using SetThreads = void (*)(int);
  auto set = reinterpret_cast<SetThreads>(
      dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  if (set != nullptr) set(1);
  return set != nullptr
             ? "libtorch's BLAS: OpenBLAS, at 1 thread of its own (beside "
               "libtorch's, its threads made the unlowered times bimodal)"
             : "libtorch's BLAS: not OpenBLAS";
}

std::optional<double> PythonReference::number(const std::string& key) const {
  auto it = values.find(key);
  double value;
  if (it == values.end() || !absl::SimpleAtod(it->second, &value)) {
    return std::nullopt;
  }
  return value;
}

std::string PythonReference::text(const std::string& key) const {
  auto it = values.find(key);
  return it == values.end() ? "n/a" : it->second;
}

std::optional<std::string> find_runfile(const std::string& argv0,
                                        const std::string& path) {
  for (const std::string& candidate :
       {path, argv0 + kRunfilesWorkspace + path}) {
    if (std::filesystem::exists(candidate)) return candidate;
  }
  return std::nullopt;
}

const char* python_interpreter(Python python) {
  return python == Python::kBuild    ? FX_LIBTORCH_PYTHON
         : python == Python::kExport ? FX_EXPORT_PYTHON
                                     : kTorchvisionPython;
}

PythonReference run_python_reference(const std::string& argv0,
                                     const std::string& script,
                                     const std::string& arguments,
                                     Python python) {
  PythonReference ref;
  const char* interpreter = python_interpreter(python);
  if (access(interpreter, X_OK) != 0) {
    ref.unavailable = absl::StrCat(interpreter, " not found");
    return ref;
  }
  const std::optional<std::string> path = find_runfile(argv0, script);
  if (!path) {
    ref.unavailable = absl::StrCat(script, " not found in runfiles");
    return ref;
  }
  std::string command = absl::StrCat(interpreter, " ", *path, " ", arguments);
  std::cerr << "running " << command << " ...\n";
  auto [lines, status] = run_command(command);
  for (const std::string& line : lines) {
    // Only `key value` lines; warnings and tracebacks have more words.
    std::vector<std::string> words =
        absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (absl::StartsWith(line, "error ")) {
      ref.unavailable = std::string(absl::StripPrefix(line, "error "));
    } else if (words.size() == 2) {
      ref.values[words[0]] = words[1];
    }
  }
  if (status != 0 && ref.unavailable.empty()) {
    ref.unavailable = lines.empty() ? absl::StrCat("exit status ", status)
                                    : lines.back();
  }
  if (!ref.unavailable.empty()) ref.values.clear();
  return ref;
}

RunFlags run_flags() {
  const bool quick = absl::GetFlag(FLAGS_quick);
  const int repeats = absl::GetFlag(FLAGS_repeats);
  return {quick, absl::GetFlag(FLAGS_threads),
          repeats > 0 ? repeats : (quick ? 3 : 20)};
}

at::Tensor ort_input(const std::string& spec, int64_t batch) {
  const std::vector<std::string> parts = absl::StrSplit(spec, ':');
  std::vector<int64_t> sizes;
  for (absl::string_view d : absl::StrSplit(parts.at(0), 'x')) {
    sizes.push_back(std::stoll(std::string(d)));
  }
  sizes.at(0) = batch;
  torch::manual_seed(batch);
  if (parts.size() > 1 && parts[1] == "int64") {
    return torch::randint(0, 1000, sizes);
  }
  return torch::randn(sizes);
}

double relative_error(const at::Tensor& got, const at::Tensor& want) {
  const double scale = std::max(want.abs().max().item<double>(), 1e-30);
  return (got - want).abs().max().item<double>() / scale;
}

LoweredScript load_and_lower(const std::string& path, const at::Tensor& x) {
  torch::jit::Module script = torch::jit::load(path);
  script.eval();
  at::Tensor want = first_tensor(script.forward({x}));
  fx::GraphModule traced = fx::symbolic_trace(script, {x});
  fx::GraphModule lowered(traced->copy());
  fx::InferenceReport report = fx::optimize_for_inference(*lowered);
  return {std::move(script), std::move(want), std::move(traced),
          std::move(lowered), std::move(report)};
}

at::Tensor first_tensor(const c10::IValue& v) {
  if (v.isTensor()) return v.toTensor();
  if (v.isTuple()) return first_tensor(v.toTupleRef().elements().at(0));
  throw std::runtime_error("the model returned no tensor");
}

}  // namespace benchmark
}  // namespace fx
