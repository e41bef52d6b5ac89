// ONNX Runtime beside a benchmark: a Node.js process running
// tools/ort_timer.js on onnxruntime-node's CPU library (tools/setup.sh
// installs it), which keeps a model loaded and runs it on request, so that
// its runs interleave with ours round by round on the same input.
//
//   fx::benchmark::OrtTimer ort(script, "/tmp/m_b1.onnx", 2, {x}, "/tmp/m");
//   std::vector<double> ms = ort.run(2);   // two runs, ms each
//   at::Tensor y = ort.output();           // the last run's first output
#pragma once

#include <sys/types.h>

#include <cstdio>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace fx {
namespace benchmark {

class OrtTimer {
 public:
  // Starts `node script model threads ...` with the inputs written to raw
  // files under `scratch_dir`, and waits until the model is loaded. Throws
  // std::runtime_error (with the process's last words) when it cannot.
  OrtTimer(const std::string& script, const std::string& model, int threads,
           const std::vector<at::Tensor>& inputs,
           const std::string& scratch_dir);
  ~OrtTimer();
  OrtTimer(const OrtTimer&) = delete;
  OrtTimer& operator=(const OrtTimer&) = delete;

  // Runs the model `n` times; each run's milliseconds.
  std::vector<double> run(int n);
  // One warm sample: `calls` + 1 runs, the median of all but the first.
  double warm_median_ms(int calls);
  // The last run's first output (float32).
  at::Tensor output();

 private:
  std::string request(const std::string& line);
  // Closes the pipes and waits for the process.
  void stop();

  pid_t pid_ = -1;
  FILE* to_ = nullptr;
  FILE* from_ = nullptr;
  std::string scratch_dir_;
};

// Where onnxruntime-node's modules are: $FX_ORT_DIR/node_modules, by
// default tools/setup.sh's /usr/local/lib/fx-libtorch/onnxruntime.
std::string ort_node_modules();

}  // namespace benchmark
}  // namespace fx
