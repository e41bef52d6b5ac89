// Section 9 of benchmark_inference: our lowered float32 graph beside
// PyTorch 2.x's own compilers on the same model, weights, input, threads
// and LibTorch: torch.compile (Inductor, freezing on: its CPU inference
// setting) in Python, and AOTInductor's package of the same program run
// from C++ by LibTorch's torch::inductor::AOTIModelPackageLoader, in this
// process.
//
// Ours is the TorchScript file the earlier sections time (traced, then
// fx::optimize_for_inference); torch.compile and AOTInductor compile the
// Python module (testdata/vision_models.py's copies of torchvision's,
// testdata/onnx_runtime_models.py's transformers and recurrent models)
// with that file's parameters and buffers loaded
// (tools/inductor_reference.py). The three take turns round by round, each
// sample warm and after a pause, ours pinned as in the other tables; the
// Python process's torch.compile through tools/timed_process.h, as ONNX
// Runtime's. Each output is held against the TorchScript file's own.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tools/benchmark_support.h"

namespace fx {
namespace benchmark {

struct InductorRun {
  std::string model;
  int64_t batch = 1;
  double ours_ms = 0;
  std::optional<double> compile_ms, aoti_ms;
  // Medians of per-round ours / theirs.
  std::optional<double> vs_compile, vs_aoti;
  // Each output's largest difference from TorchScript's, relative.
  double ours_error = 0;
  std::optional<double> compile_error, aoti_error;
  std::optional<double> package_seconds;  // AOTInductor's compilation
  int rounds = 0;
  std::string failure;  // the row could not be measured
  // Why torch.compile's or AOTInductor's column is empty (the row still
  // measured against the other).
  std::string compile_failure, aoti_failure;
};

// The models section 9 times by default (those with a Python definition
// beside the build's torch), and with --quick.
const std::vector<std::string>& inductor_models(bool quick);

// Where a model's TorchScript file and input spec are, as the earlier
// sections wrote them.
struct InductorModel {
  std::string name;
  std::string script;  // the TorchScript file
  std::string spec;    // "1x128:int64", "1x3x224x224:float32"
};

// Times each model at each batch size; files under `dir`. Rows that could
// not be measured carry a failure.
std::vector<InductorRun> measure_inductor(
    const std::string& argv0, const std::string& dir,
    const std::vector<InductorModel>& models,
    const std::vector<int64_t>& batches, int rounds, int threads);

void print_inductor(const std::vector<InductorRun>& runs, int threads);

// The targets: ours at most 0.9x torch.compile's and AOTInductor's
// time on every row.
void check_inductor_targets(const std::vector<InductorRun>& runs,
                            std::vector<TargetCheck>* checks);

}  // namespace benchmark
}  // namespace fx
