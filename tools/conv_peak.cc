#include "tools/conv_peak.h"

#include <vector>

#include <unistd.h>

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/torch.h>

#include "lowering/onednn_ops.h"
#include "tools/benchmark_support.h"

namespace fx {
namespace benchmark {

double conv_gflops(int64_t channels, int64_t size, int64_t kernel,
                   int repeats) {
  fx::onednn::register_operators();
  auto pack = c10::Dispatcher::singleton().findSchemaOrThrow(
      "fx_onednn::pack_conv_weight", "");
  auto conv =
      c10::Dispatcher::singleton().findSchemaOrThrow("fx_onednn::conv", "");
  at::Tensor x = torch::randn({1, channels, size, size})
                     .contiguous(at::MemoryFormat::ChannelsLast);
  at::Tensor w = torch::randn({channels, channels, kernel, kernel});
  const std::vector<int64_t> one = {1, 1};
  const std::vector<int64_t> padding = {kernel / 2, kernel / 2};
  torch::jit::Stack stack = {w, x.sizes().vec(), one, padding, one, int64_t{1},
                             false};
  pack.callBoxed(&stack);
  at::Tensor packed = stack[0].toTensor();
  auto run = [&] {
    torch::jit::Stack s = {x,   packed, c10::IValue(), one,
                           padding, one, int64_t{1}, c10::IValue(),
                           "none", 0.0,    0.0};
    conv.callBoxed(&s);
  };
  const double ms = median_ms(
      [&] {
        auto start = Clock::now();
        run();
        return ms_since(start);
      },
      repeats);
  const double flops = 2.0 * channels * channels * kernel * kernel * size * size;
  return flops / (ms * 1e-3) / 1e9;
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
