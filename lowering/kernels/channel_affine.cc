#include "lowering/kernels/channel_affine.h"

#include <ATen/Parallel.h>

#include "lowering/kernels/kernel_support.h"

namespace fx::onednn {
namespace {

// Pixels on any x86-64 CPU. `v < 0 ? 0 : v` keeps NaN (std::fmax would
// not).
template <bool kRelu>
void affine_pixels(const float* x, int64_t pitch, const float* scale,
                   const float* shift, float* y, int64_t pixels,
                   int64_t channels) {
  for (int64_t p = 0; p < pixels; ++p) {
    for (int64_t c = 0; c < channels; ++c) {
      const float v = x[p * pitch + c] * scale[c] + shift[c];
      y[p * channels + c] = kRelu ? (v < 0.f ? 0.f : v) : v;
    }
  }
}

// ... and on AVX-512: 16 channels at a time, the last ones masked.
template <bool kRelu>
FX_AVX512 void affine_pixels_avx512(
    const float* x, int64_t pitch, const float* scale, const float* shift,
    float* y, int64_t pixels, int64_t channels) {
  const __m512 zero = _mm512_setzero_ps();
  for (int64_t p = 0; p < pixels; ++p) {
    const float* in = x + p * pitch;
    float* out = y + p * channels;
    for (int64_t c = 0; c < channels; c += 16) {
      const __mmask16 m = tail_mask(channels - c);
      __m512 v = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, in + c),
                                 _mm512_maskz_loadu_ps(m, scale + c),
                                 _mm512_maskz_loadu_ps(m, shift + c));
      // Where v < 0 (false for NaN), 0.
      if (kRelu) {
        v = _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, zero, _CMP_LT_OQ),
                               zero);
      }
      _mm512_mask_storeu_ps(out + c, m, v);
    }
  }
}

// Thread `thread` of `threads`' pixels.
void run_slice(const ChannelAffine& op, int thread, int threads) {
  const auto [first, last] = thread_share(op.pixels, thread, threads);
  const int64_t pitch = op.input_pitch > 0 ? op.input_pitch : op.channels;
  auto* kernel =
      has_avx512()
          ? (op.relu ? affine_pixels_avx512<true> : affine_pixels_avx512<false>)
          : (op.relu ? affine_pixels<true> : affine_pixels<false>);
  kernel(op.input + first * pitch, pitch, op.scale, op.shift,
         op.output + first * op.channels,
         last - first, op.channels);
}

}  // namespace

void channel_affine(const ChannelAffine& op) {
  // Small tensors on the calling thread alone: waking the team costs more.
  const bool small = op.pixels * op.channels < (1 << 14);
  run_on_threads(small ? 1 : at::get_num_threads(),
                 [&](int thread, int threads) {
                   run_slice(op, thread, threads);
                 });
}

}  // namespace fx::onednn
