// Another runtime beside a benchmark, in a process of its own that keeps a
// model loaded and runs it on request, so that its runs interleave with
// ours round by round on the same input: ONNX Runtime (a Node.js process
// running tools/ort_timer.js on onnxruntime-node's CPU library, which
// tools/setup.sh installs), or torch.compile (tools/inductor_reference.py
// in the build's Python). Both answer the same lines on stdin: `run N`
// ("ms T1 ... TN") and `save FILE` ("saved DIMS", the first output written
// raw).
//
//   fx::benchmark::TimedProcess ort(
//       fx::benchmark::ort_timer_command(script, "/tmp/m_b1.onnx", 2),
//       "ONNX Runtime", {x}, "/tmp/m");
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

class TimedProcess {
 public:
  // Starts the shell command `command`, the inputs written to raw files
  // under `scratch_dir` appended as FILE:DTYPE:SHAPE, and waits until it
  // prints "ready". Throws std::runtime_error naming `what` (with the
  // process's last words) when it cannot.
  TimedProcess(const std::string& command, const std::string& what,
               const std::vector<at::Tensor>& inputs,
               const std::string& scratch_dir);
  ~TimedProcess();
  TimedProcess(const TimedProcess&) = delete;
  TimedProcess& operator=(const TimedProcess&) = delete;

  // Runs the model `n` times; each run's milliseconds.
  std::vector<double> run(int n);
  // One warm sample: `calls` + 1 runs, the median of all but the first.
  double warm_median_ms(int calls);
  // The last run's first output, read as `dtype` (the process writes its
  // raw bytes: float32 from every model here but the generation loop's
  // int64 tokens).
  at::Tensor output(at::ScalarType dtype = at::kFloat);

 private:
  std::string request(const std::string& line);
  // Closes the pipes and waits for the process.
  void stop();

  pid_t pid_ = -1;
  FILE* to_ = nullptr;
  FILE* from_ = nullptr;
  std::string what_;
  std::string scratch_dir_;
};

// Where onnxruntime-node's modules are: $FX_ORT_DIR/node_modules, by
// default tools/setup.sh's /usr/local/lib/fx-libtorch/onnxruntime.
std::string ort_node_modules();

// Writes each input raw under `dir` (timed_input_I.bin) and returns them as
// the processes read them: "FILE:DTYPE:SHAPE ..." (DTYPE int64 or float32,
// SHAPE like 1x3x224x224).
std::string raw_inputs(const std::vector<at::Tensor>& inputs,
                       const std::string& dir);

// What a TimedProcess of ONNX Runtime calls it in its errors.
inline constexpr char kOrt[] =
    "ONNX Runtime (onnxruntime-node: tools/setup.sh installs it)";

// The command that runs tools/ort_timer.js (`script`) on an ONNX file with
// `threads` intra-op threads.
std::string ort_timer_command(const std::string& script,
                              const std::string& model, int threads);

}  // namespace benchmark
}  // namespace fx
