// A fixed competing load beside a benchmark: busy processes on the same
// CPUs, as a build or another service puts there, while it lives.
//
//   {
//     fx::benchmark::CompetingLoad load(2);  // two processes spinning
//     ... time ours and ONNX Runtime's, interleaved ...
//   }                                         // stopped and reaped
#pragma once

#include <sys/types.h>

#include <vector>

namespace fx {
namespace benchmark {

class CompetingLoad {
 public:
  // Starts `processes` processes that each spin on the CPU (a shell loop
  // doing nothing else: no memory traffic, no I/O). Throws
  // std::runtime_error when one cannot be started (those started are
  // stopped).
  explicit CompetingLoad(int processes);
  ~CompetingLoad();
  CompetingLoad(const CompetingLoad&) = delete;
  CompetingLoad& operator=(const CompetingLoad&) = delete;

 private:
  void stop();
  std::vector<pid_t> pids_;
};

}  // namespace benchmark
}  // namespace fx
