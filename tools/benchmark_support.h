// Shared pieces of the benchmark programs: timing with medians and
// interleaved rounds, plain-text tables, and running a Python reference
// script (with the Python of the build's LibTorch, or Debian's with
// torchvision) that prints `key value` lines.
#pragma once

#include <chrono>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <torch/script.h>

#include "fx/runtime/graph_module.h"
#include "lowering/inference_options.h"

#include "passes/timing.h"
#include "third_party/libgomp.h"

namespace fx {
namespace benchmark {

// --- Flags -------------------------------------------------------------------

// The flags every benchmark takes, read after absl::ParseCommandLine:
//   --quick       a smoke run: fewer rounds and smaller sizes (each
//                 benchmark's usage message says which)
//   --threads=N   intra-op threads (at::set_num_threads, and Python's)
//   --repeats=N   timed runs or interleaved rounds per figure (default 20,
//                 or 3 with --quick)
struct RunFlags {
  bool quick;
  int threads;
  int repeats;
};
RunFlags run_flags();

// --- Timing ------------------------------------------------------------------

// Clock, ms_since and median: passes/timing.h's.
using fx::Clock;
using fx::median;
using fx::ms_since;

// Median milliseconds of `timed_run` over `repeats` runs after one warm-up;
// timed_run returns the milliseconds of the part it measures.
double median_ms(const std::function<double()>& timed_run, int repeats);

// Milliseconds per call of each variant, one sample per round. After a
// warm-up call of each, every round times `calls_per_sample` calls of each
// variant, in order on even rounds and in reverse order on odd ones, so that
// drift on a shared machine hits them alike.
//
// Sample::kWarm puts one untimed call of the variant before each sample,
// so that every timed call follows a call of itself (its weights and
// activations in the caches, as in a server's steady state). Without it, the
// order 0 1 2 3 | 3 2 1 0 | 0 1 2 3 ... has the first and last variants
// follow themselves every other round and the middle ones never: a
// comparison of variants 0 and 1 favours 0 (the unlowered generic
// transformers of benchmark_dynamic: 1.02-1.04x their specialized twins
// in cold samples, 1.00-1.01x warm).
enum class Sample { kCold, kWarm };
std::vector<std::vector<double>> interleaved_samples_ms(
    const std::vector<std::function<void()>>& variants, int rounds,
    int calls_per_sample, Sample sample = Sample::kCold);

// Variants timed at different thread counts in one run set the calling
// thread's count only: fx::set_threads_of_this_thread (third_party/libgomp.h).
// Not at::set_num_threads: in Debian's libtorch 1.13 each call takes about
// 8 ms (it also makes a new thread pool for QNNPACK) and the run after it
// is slower still (googlenet lowered: 25 ms instead of 11 when called
// before each run), which a timed variant must not carry.
using fx::set_threads_of_this_thread;

// One warm sample of `call`: an untimed call (the first after a pause
// wakes the threads and refills the caches), then the median of `calls`
// calls, each timed alone, as ONNX Runtime's process times its runs
// (TimedProcess::warm_median_ms).
double warm_median_ms(const std::function<void()>& call, int calls);

// Calls each of `variants` once a round for `rounds` rounds, in order and
// then reversed, each after `pause` (beside another process, such as ONNX
// Runtime's, whose threads spin for a while after its calls): each
// variant's samples, as the variants return them.
std::vector<std::vector<double>> take_turns(
    const std::vector<std::function<double()>>& variants, int rounds,
    std::chrono::milliseconds pause);

// The intra-op threads pinned (fx::pin_intra_op_threads) while it lives,
// when there is a CPU per thread (else left as they are): ours as ONNX
// Runtime pins its pool.
class PinnedThreads {
 public:
  PinnedThreads();
  ~PinnedThreads();
  PinnedThreads(const PinnedThreads&) = delete;
  PinnedThreads& operator=(const PinnedThreads&) = delete;

 private:
  bool pinned_ = false;
};

// Warm samples of each variant (a function of how many calls a sample
// takes, returning its time), interleaved: each variant called once
// `warmups` times, then take_turns with our intra-op threads pinned, each
// sample of 3 calls (1 where a variant took `budget_ms` / 1500 ms or more:
// 20 ms for a 30 s budget), `rounds` rounds or as many as the budget
// holds (at least 3). `slowest_ms`: the slowest call already seen (a
// process's first runs), or 0.
struct TurnSamples {
  std::vector<std::vector<double>> samples;  // per variant
  int rounds = 0;
  int calls = 1;  // per sample
};
TurnSamples sample_in_turns(
    const std::vector<std::function<double(int)>>& variants, int rounds,
    int warmups, double budget_ms, double slowest_ms,
    std::chrono::milliseconds pause);

// Medians of a[i] / b[i] and a[i] - b[i] over rounds: comparing samples of
// the same round cancels the drift between rounds.
double median_paired_ratio(const std::vector<double>& a,
                           const std::vector<double>& b);
double median_paired_difference(const std::vector<double>& a,
                                const std::vector<double>& b);

// --- Models' inputs and outputs ----------------------------------------------

// The example input of `spec` ("1x128:int64", "1x3x224x224:float32", as
// testdata/onnx_runtime_models.py prints them) at `batch`, seeded by the
// batch: token ids below 1000, or normal noise.
at::Tensor ort_input(const std::string& spec, int64_t batch);

// A model's first output tensor (the value, or a tuple's first element);
// std::runtime_error when it returned none.
at::Tensor first_tensor(const c10::IValue& v);

// The largest difference of `got` from `want`, over want's largest
// magnitude.
double relative_error(const at::Tensor& got, const at::Tensor& want);

// A TorchScript file as the benchmarks take it: loaded in eval mode, its
// own output on `x` (what every side's output is held against), traced
// at `x`, and a copy of that graph lowered by fx::optimize_for_inference.
struct LoweredScript {
  torch::jit::Module script;
  at::Tensor want;
  fx::GraphModule traced;
  fx::GraphModule lowered;
  fx::InferenceReport report;
};
LoweredScript load_and_lower(const std::string& path, const at::Tensor& x);

// --- Formatting --------------------------------------------------------------

std::string fixed(std::optional<double> value, int decimals);
std::string times(std::optional<double> ratio);
std::optional<double> ratio(std::optional<double> a, std::optional<double> b);

// A plain-text table: the first `left_columns` columns left-aligned (labels),
// the others right-aligned (numbers).
class Table {
 public:
  explicit Table(std::vector<std::string> header, size_t left_columns = 1);
  void add_row(std::vector<std::string> row);
  void print(std::ostream& out) const;

 private:
  std::vector<std::vector<std::string>> rows_;
  size_t left_columns_;
};

void print_section(const std::string& title, const Table& table,
                   const std::vector<std::string>& notes = {});

// One line of the final "targets" section.
struct TargetCheck {
  std::string target;
  std::string measured;
  // nullopt: could not be measured (no Python torch for a comparison with
  // Python, say), which misses the target wherever it is gated.
  std::optional<bool> met;
  // A speed or scale target: gated in full runs only (a --quick run is too
  // short to time). Accuracy and allocation targets hold in every run.
  bool timing = true;
};
// Prints the checks; returns the benchmark's exit code: 1 if a gated target
// (every target in a full run, non-timing ones with --quick) was missed or
// could not be measured.
int print_targets(const std::vector<TargetCheck>& checks, bool quick);

// "machine: nproc 2, load average ..." for report headers.
std::string machine_summary();

// OpenBLAS at one thread of its own, in this process
// (openblas_set_num_threads, looked up at run time) and in the processes
// it starts (OPENBLAS_NUM_THREADS), for benchmarks whose TorchScript or
// unlowered side runs on the BLAS. Debian's libopenblas0-pthread runs its
// own threads beside libtorch's OpenMP threads: with 2 of each on 2 cores,
// a transformer at batch 8 whose matmuls run on the BLAS and the rest on
// OpenMP took 100-230 ms a call, the same graph's time differing by up to
// 1.4x from one process to the next, and 60 ms, steady, with OpenBLAS at 1
// thread (TorchScript-optimized's LSTM at batch 8: 49-260 ms, 30 ms); no
// interleaving evens that out. Returns what the report says of it:
// "libtorch's BLAS: OpenBLAS, at 1 thread of its own (...)" or
// "libtorch's BLAS: not OpenBLAS".
std::string run_openblas_at_one_thread();

// --- The Python reference ----------------------------------------------------

// The `key value` lines of a reference script, or why there are none.
struct PythonReference {
  std::string unavailable;  // empty when the script ran
  std::map<std::string, std::string> values;

  std::optional<double> number(const std::string& key) const;
  std::string text(const std::string& key) const;
};

// A data file of the benchmark (`tools/ort_timer.js`): beside `bazel run`'s
// working directory (the runfiles root of the workspace) or in the runfiles
// of the binary at argv0; nullopt when in neither.
std::optional<std::string> find_runfile(const std::string& argv0,
                                        const std::string& path);

// Which Python runs a script: the one whose torch is the LibTorch the build
// uses (FX_LIBTORCH_PYTHON: 2.13's virtual environment by default, Debian's
// under --config=libtorch113), for every reference a table compares with;
// or Debian's /usr/bin/python3 (torch 1.13, torchvision 0.14), for writing
// the TorchScript files of torchvision's models, since PyPI's torchvision
// does not import beside the CPU wheel of torch 2.13; or the default
// LibTorch's (FX_EXPORT_PYTHON: 2.13's virtual environment, also under
// --config=libtorch113), for what only it has (onnxruntime's Python
// package, torch.export).
enum class Python { kBuild, kTorchvision, kExport };

// That Python's path.
const char* python_interpreter(Python python);

// Runs `<python> <script> <arguments>`; the script is looked up beside
// `bazel run`'s working directory (the runfiles root of the workspace) or
// in the runfiles of the binary at argv0. A script that prints
// `error <reason>` or fails makes the reference unavailable.
PythonReference run_python_reference(const std::string& argv0,
                                     const std::string& script,
                                     const std::string& arguments,
                                     Python python = Python::kBuild);

}  // namespace benchmark
}  // namespace fx
