// The machine's measured limits for the benchmarks that grade against them:
// the GFLOP/s of a large oneDNN convolution (fx_onednn::conv on a packed
// weight, channels-last, on oneDNN's direct kernels), and the bandwidth of a large tensor copy, each at
// the current intra-op thread count.
#pragma once

#include <cstdint>
#include <memory>

namespace fx {
namespace benchmark {

// A channels x channels convolution with a kernel x kernel window on a
// size x size image (batch 1), its weight packed once: timed beside other
// work (interleaved with it) as well as alone.
class PeakConvolution {
 public:
  PeakConvolution(int64_t channels, int64_t size, int64_t kernel);
  ~PeakConvolution();
  // GFLOP/s of one warm call: a call to warm its weights and activations,
  // then the median of `calls` timed ones.
  double warm_gflops(int calls = 3) const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Such a convolution's warm_gflops over `repeats` timed calls.
double conv_gflops(int64_t channels, int64_t size, int64_t kernel,
                   int repeats);

// Bytes read and written per second by copying a tensor of `bytes` (64 MB
// by default; a copy larger than the last-level cache measures the main
// memory's bandwidth).
double copy_bytes_per_second(int repeats, int64_t bytes = int64_t{64} << 20);

// The cache a core has to itself (L2), which the weights of a model must
// fit in to stay from one run to the next: the last-level cache is shared
// with the machine's other processes. 1 MB when the system does not say.
double core_cache_bytes();

}  // namespace benchmark
}  // namespace fx
