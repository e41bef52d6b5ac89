#include "tools/conv_peak.h"

#include <vector>

#include <unistd.h>

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/torch.h>

#include "lowering/onednn_ops.h"
#include "tools/benchmark_support.h"

namespace fx {
namespace benchmark {

struct PeakConvolution::State {
  explicit State(c10::OperatorHandle handle) : conv(std::move(handle)) {}
  c10::OperatorHandle conv;
  at::Tensor input, packed;
  std::vector<int64_t> one, padding;
  double flops = 0;
};

PeakConvolution::PeakConvolution(int64_t channels, int64_t size,
                                 int64_t kernel)
    : state_((fx::onednn::register_operators(),
              new State(c10::Dispatcher::singleton().findSchemaOrThrow(
                  "fx_onednn::conv", "")))) {
  auto pack = c10::Dispatcher::singleton().findSchemaOrThrow(
      "fx_onednn::pack_conv_weight", "");
  state_->input = torch::randn({1, channels, size, size})
                      .contiguous(at::MemoryFormat::ChannelsLast);
  const at::Tensor w = torch::randn({channels, channels, kernel, kernel});
  state_->one = {1, 1};
  state_->padding = {kernel / 2, kernel / 2};
  torch::jit::Stack stack = {w,          state_->input.sizes().vec(),
                             state_->one, state_->padding,
                             state_->one, int64_t{1},
                             false};
  pack.callBoxed(&stack);
  state_->packed = stack[0].toTensor();
  state_->flops =
      2.0 * channels * channels * kernel * kernel * size * size;
}

PeakConvolution::~PeakConvolution() = default;

double PeakConvolution::warm_gflops(int calls) const {
  const State& s = *state_;
  // The direct kernels' peak: a Winograd convolution does fewer
  // multiply-adds than the ones counted (a model whose 3x3 layers run on
  // them may then pass 100% of this peak).
  struct Direct {
    const bool winograd = onednn::winograd_convolutions();
    Direct() { onednn::set_winograd_convolutions(false); }
    ~Direct() { onednn::set_winograd_convolutions(winograd); }
  } direct;
  auto run = [&] {
    torch::jit::Stack stack = {s.input,   s.packed,      c10::IValue(),
                               s.one,     s.padding,     s.one,
                               int64_t{1}, c10::IValue(), "none",
                               0.0,       0.0};
    s.conv.callBoxed(&stack);
  };
  run();
  std::vector<double> samples;
  for (int i = 0; i < std::max(calls, 1); ++i) {
    auto start = Clock::now();
    run();
    samples.push_back(ms_since(start));
  }
  return s.flops / (median(samples) * 1e-3) / 1e9;
}

double conv_gflops(int64_t channels, int64_t size, int64_t kernel,
                   int repeats) {
  return PeakConvolution(channels, size, kernel).warm_gflops(repeats);
}

double copy_bytes_per_second(int repeats, int64_t bytes) {
  at::Tensor from = torch::randn({bytes / 4});
  at::Tensor to = torch::empty_like(from);
  const double ms = median_ms(
      [&] {
        auto start = Clock::now();
        to.copy_(from);
        return ms_since(start);
      },
      repeats);
  return 2.0 * static_cast<double>(from.nbytes()) / (ms * 1e-3);
}

double core_cache_bytes() {
  const long bytes = ::sysconf(_SC_LEVEL2_CACHE_SIZE);
  return bytes > 0 ? static_cast<double>(bytes) : 1e6;
}

}  // namespace benchmark
}  // namespace fx
