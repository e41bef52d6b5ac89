#include "lowering/kernels/elementwise.h"

#include <ATen/Parallel.h>

#include <cmath>

#include "lowering/kernels/kernel_support.h"
#include "lowering/kernels/vector_math.h"

namespace fx::onednn {
namespace {

// x / (1 + exp(-x)), 32 values per iteration (two independent chains keep
// the multiply-add units busy through exp's latency), the tail masked.
FX_AVX512 void silu_range(float* data, int64_t count) {
  const __m512 one = _mm512_set1_ps(1.f);
  const __m512 zero = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= count; i += 32) {
    const __m512 x0 = _mm512_loadu_ps(data + i);
    const __m512 x1 = _mm512_loadu_ps(data + i + 16);
    const __m512 d0 = _mm512_add_ps(one, exp16(_mm512_sub_ps(zero, x0)));
    const __m512 d1 = _mm512_add_ps(one, exp16(_mm512_sub_ps(zero, x1)));
    _mm512_storeu_ps(data + i, _mm512_div_ps(x0, d0));
    _mm512_storeu_ps(data + i + 16, _mm512_div_ps(x1, d1));
  }
  for (; i < count; i += 16) {
    const __mmask16 m = tail_mask(count - i);
    const __m512 x = _mm512_maskz_loadu_ps(m, data + i);
    const __m512 d = _mm512_add_ps(one, exp16(_mm512_sub_ps(zero, x)));
    _mm512_mask_storeu_ps(data + i, m, _mm512_div_ps(x, d));
  }
}

struct Span {
  float* data;
  int64_t count;
};

// Thread `thread` of `threads`' range, starting on a 64-byte line.
void run_slice(const Span& span, int thread, int threads) {
  const auto [first, last] = thread_share(span.count, thread, threads, 16);
  silu_range(span.data + first, last - first);
}

}  // namespace

bool silu_pass_runs() { return has_avx512(); }

void silu_in_place(float* data, int64_t count) {
  if (!has_avx512()) {
    for (int64_t i = 0; i < count; ++i) {
      data[i] = data[i] / (1.f + std::exp(-data[i]));
    }
    return;
  }
  const Span span{data, count};
  // Small tensors on the calling thread alone: waking the team costs more.
  run_on_threads(count < (1 << 14) ? 1 : at::get_num_threads(),
                 [&](int thread, int threads) {
                   run_slice(span, thread, threads);
                 });
}

}  // namespace fx::onednn
