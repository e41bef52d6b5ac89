#include "lowering/kernels/image_layout.h"

#include <ATen/Parallel.h>

#include "lowering/kernels/kernel_support.h"

namespace fx::onednn {
namespace {

// Pixels [first, last) of one image: 16 at a time, the tail one by one.
FX_AVX512 void interleave(const float* in, float* out, int64_t pixels,
                          int64_t first, int64_t last) {
  const float* r = in;
  const float* g = in + pixels;
  const float* b = in + 2 * pixels;
  // Output vector k, lane l holds element 16k + l of r0 g0 b0 r1 g1 b1 ...:
  // pixel (16k + l) / 3 of plane (16k + l) % 3; the red and green lanes
  // from a two-source permute (green's indices 16 up), then the blue ones.
  alignas(64) int32_t rg_index[3][16], b_index[3][16];
  __mmask16 b_lanes[3] = {0, 0, 0};
  for (int k = 0; k < 3; ++k) {
    for (int l = 0; l < 16; ++l) {
      const int i = 16 * k + l, pixel = i / 3, plane = i % 3;
      rg_index[k][l] = plane == 1 ? 16 + pixel : pixel;
      b_index[k][l] = pixel;
      if (plane == 2) b_lanes[k] |= static_cast<__mmask16>(1u << l);
    }
  }
  const __m512i rg0 = _mm512_load_si512(rg_index[0]);
  const __m512i rg1 = _mm512_load_si512(rg_index[1]);
  const __m512i rg2 = _mm512_load_si512(rg_index[2]);
  const __m512i b0 = _mm512_load_si512(b_index[0]);
  const __m512i b1 = _mm512_load_si512(b_index[1]);
  const __m512i b2 = _mm512_load_si512(b_index[2]);
  int64_t p = first;
  for (; p + 16 <= last; p += 16) {
    const __m512 vr = _mm512_loadu_ps(r + p);
    const __m512 vg = _mm512_loadu_ps(g + p);
    const __m512 vb = _mm512_loadu_ps(b + p);
    float* o = out + 3 * p;
    _mm512_storeu_ps(o, _mm512_mask_permutexvar_ps(
                            _mm512_permutex2var_ps(vr, rg0, vg), b_lanes[0],
                            b0, vb));
    _mm512_storeu_ps(o + 16, _mm512_mask_permutexvar_ps(
                                 _mm512_permutex2var_ps(vr, rg1, vg),
                                 b_lanes[1], b1, vb));
    _mm512_storeu_ps(o + 32, _mm512_mask_permutexvar_ps(
                                 _mm512_permutex2var_ps(vr, rg2, vg),
                                 b_lanes[2], b2, vb));
  }
  for (; p < last; ++p) {
    out[3 * p] = r[p];
    out[3 * p + 1] = g[p];
    out[3 * p + 2] = b[p];
  }
}

struct Copy {
  const float* in;
  float* out;
  int64_t batch, pixels;
};

// Thread `thread` of `threads`' pixels of the batch, image by image.
void run_slice(const Copy& c, int thread, int threads) {
  const int64_t total = c.batch * c.pixels;
  const auto [first, last] = thread_share(total, thread, threads);
  for (int64_t n = first / c.pixels; n * c.pixels < last; ++n) {
    const int64_t begin = std::max(first, n * c.pixels) - n * c.pixels;
    const int64_t end = std::min(last, (n + 1) * c.pixels) - n * c.pixels;
    interleave(c.in + n * 3 * c.pixels, c.out + n * 3 * c.pixels, c.pixels,
               begin, end);
  }
}

}  // namespace

bool rgb_to_channels_last_runs() { return has_avx512(); }

void rgb_to_channels_last(const float* in, float* out, int64_t batch,
                          int64_t pixels) {
  const Copy copy{in, out, batch, pixels};
  // Small images on the calling thread alone: waking the team costs more.
  run_on_threads(batch * pixels * 3 < (1 << 14) ? 1 : at::get_num_threads(),
                 [&](int thread, int threads) {
                   run_slice(copy, thread, threads);
                 });
}

}  // namespace fx::onednn
