#include "lowering/kernels/int8_elementwise.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "lowering/kernels/kernel_support.h"

#define FX_AVX512_VBMI __attribute__((target("avx512f,avx512bw,avx512vbmi")))
#define FX_AVX512_BW __attribute__((target("avx512f,avx512bw,avx512vl")))

namespace fx::onednn {
namespace {

bool has_vbmi() {
  static const bool vbmi = __builtin_cpu_supports("avx512f") &&
                           __builtin_cpu_supports("avx512bw") &&
                           __builtin_cpu_supports("avx512vbmi");
  return vbmi;
}

bool has_avx512bw() {
  static const bool bw = __builtin_cpu_supports("avx512f") &&
                         __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("avx512vl");
  return bw;
}

// The byte of a 256-entry table at each input byte: the low seven bits
// pick one of 128 entries from each half, the high bit which half.
FX_AVX512_VBMI __m512i lookup64(__m512i index, __m512i t0, __m512i t1,
                                __m512i t2, __m512i t3) {
  const __m512i low = _mm512_permutex2var_epi8(t0, index, t1);
  const __m512i high = _mm512_permutex2var_epi8(t2, index, t3);
  return _mm512_mask_blend_epi8(_mm512_movepi8_mask(index), low, high);
}

FX_AVX512_VBMI void lookup_range(const uint8_t* in, uint8_t* out,
                                 int64_t count, const uint8_t* table) {
  const __m512i t0 = _mm512_loadu_si512(table);
  const __m512i t1 = _mm512_loadu_si512(table + 64);
  const __m512i t2 = _mm512_loadu_si512(table + 128);
  const __m512i t3 = _mm512_loadu_si512(table + 192);
  int64_t i = 0;
  for (; i + 64 <= count; i += 64) {
    const __m512i x = _mm512_loadu_si512(in + i);
    _mm512_storeu_si512(out + i, lookup64(x, t0, t1, t2, t3));
  }
  if (i < count) {
    const __mmask64 m = (~0ULL) >> (64 - (count - i));
    const __m512i x = _mm512_maskz_loadu_epi8(m, in + i);
    _mm512_mask_storeu_epi8(out + i, m, lookup64(x, t0, t1, t2, t3));
  }
}

void lookup_range_scalar(const uint8_t* in, uint8_t* out, int64_t count,
                         const uint8_t* table) {
  for (int64_t i = 0; i < count; ++i) out[i] = table[in[i]];
}

// multiply_channels_u8's rows [first, last): 16 channels per step, the
// tail masked.
FX_AVX512_BW void multiply_rows_avx512(const ChannelProduct& p, int64_t first,
                                       int64_t last) {
  const __m512i x_zero_point = _mm512_set1_epi32(p.x_zero_point);
  const __m512i zero_point = _mm512_set1_epi32(p.zero_point);
  const __m512 multiplier = _mm512_set1_ps(p.multiplier);
  const __m512i low = _mm512_setzero_si512();
  const __m512i high = _mm512_set1_epi32(255);
  for (int64_t r = first; r < last; ++r) {
    const uint8_t* in = p.in + r * p.channels;
    uint8_t* out = p.out + r * p.channels;
    const int32_t* gate = p.gate + (r / p.rows_per_gate) * p.channels;
    for (int64_t c = 0; c < p.channels; c += 16) {
      const __mmask16 m = tail_mask(p.channels - c);
      const __m128i bytes = _mm_maskz_loadu_epi8(m, in + c);
      const __m512i x =
          _mm512_sub_epi32(_mm512_cvtepu8_epi32(bytes), x_zero_point);
      const __m512i g = _mm512_maskz_loadu_epi32(m, gate + c);
      const __m512 product = _mm512_mul_ps(
          _mm512_cvtepi32_ps(_mm512_mullo_epi32(x, g)), multiplier);
      // Rounded to nearest even, as nearbyint in the default rounding mode.
      __m512i q = _mm512_add_epi32(
          _mm512_cvt_roundps_epi32(
              product, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),
          zero_point);
      q = _mm512_min_epi32(_mm512_max_epi32(q, low), high);
      _mm_mask_storeu_epi8(out + c, m, _mm512_cvtepi32_epi8(q));
    }
  }
}

void multiply_rows(const ChannelProduct& p, int64_t first, int64_t last) {
  if (has_avx512bw()) {
    multiply_rows_avx512(p, first, last);
    return;
  }
  for (int64_t r = first; r < last; ++r) {
    const uint8_t* in = p.in + r * p.channels;
    uint8_t* out = p.out + r * p.channels;
    const int32_t* gate = p.gate + (r / p.rows_per_gate) * p.channels;
    for (int64_t c = 0; c < p.channels; ++c) {
      const float product =
          static_cast<float>((in[c] - p.x_zero_point) * gate[c]) * p.multiplier;
      const int64_t q =
          p.zero_point + static_cast<int64_t>(std::nearbyint(product));
      out[c] = static_cast<uint8_t>(std::clamp<int64_t>(q, 0, 255));
    }
  }
}

// sum_channels_u8 for channels [first, last) of every image: 16 channels
// per step, the tail masked.
FX_AVX512_BW void sum_channels_avx512(const ChannelSum& p, int64_t first,
                                      int64_t last) {
  for (int64_t i = 0; i < p.images; ++i) {
    const uint8_t* image = p.in + i * p.pixels * p.channels;
    for (int64_t c = first; c < last; c += 16) {
      const __mmask16 m = tail_mask(last - c);
      __m512i sum = _mm512_setzero_si512();
      for (int64_t r = 0; r < p.pixels; ++r) {
        sum = _mm512_add_epi32(
            sum, _mm512_cvtepu8_epi32(
                     _mm_maskz_loadu_epi8(m, image + r * p.channels + c)));
      }
      _mm512_mask_storeu_epi32(p.sums + i * p.channels + c, m, sum);
    }
  }
}

void sum_channels(const ChannelSum& p, int64_t first, int64_t last) {
  if (has_avx512bw()) {
    sum_channels_avx512(p, first, last);
    return;
  }
  for (int64_t i = 0; i < p.images; ++i) {
    const uint8_t* image = p.in + i * p.pixels * p.channels;
    for (int64_t c = first; c < last; ++c) {
      int32_t sum = 0;
      for (int64_t r = 0; r < p.pixels; ++r) sum += image[r * p.channels + c];
      p.sums[i * p.channels + c] = sum;
    }
  }
}

// Four accumulators each of the least and greatest, so that the loop is
// not one chain of dependent min/max instructions.
FX_AVX512 std::pair<float, float> min_max_avx512(const float* x,
                                                 int64_t count) {
  const __m512 first = _mm512_set1_ps(x[0]);
  __m512 lo[4] = {first, first, first, first};
  __m512 hi[4] = {first, first, first, first};
  __m512 nan = _mm512_setzero_ps();  // NaN lanes seen, as all-ones
  int64_t i = 0;
  for (; i + 64 <= count; i += 64) {
    for (int k = 0; k < 4; ++k) {
      const __m512 v = _mm512_loadu_ps(x + i + 16 * k);
      lo[k] = _mm512_min_ps(lo[k], v);
      hi[k] = _mm512_max_ps(hi[k], v);
      nan = _mm512_mask_mov_ps(nan, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), v);
    }
  }
  for (; i < count; i += 16) {
    const __mmask16 m = tail_mask(count - i);
    const __m512 v = _mm512_mask_loadu_ps(first, m, x + i);
    lo[0] = _mm512_min_ps(lo[0], v);
    hi[0] = _mm512_max_ps(hi[0], v);
    nan = _mm512_mask_mov_ps(nan, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), v);
  }
  if (_mm512_cmp_ps_mask(nan, nan, _CMP_UNORD_Q) != 0) {
    return {std::nanf(""), std::nanf("")};
  }
  const __m512 l = _mm512_min_ps(_mm512_min_ps(lo[0], lo[1]),
                                 _mm512_min_ps(lo[2], lo[3]));
  const __m512 h = _mm512_max_ps(_mm512_max_ps(hi[0], hi[1]),
                                 _mm512_max_ps(hi[2], hi[3]));
  return {_mm512_reduce_min_ps(l), _mm512_reduce_max_ps(h)};
}

std::pair<float, float> min_max_range(const float* x, int64_t count,
                                      bool avx512) {
  if (avx512) return min_max_avx512(x, count);
  float lo = x[0], hi = x[0];
  for (int64_t i = 0; i < count; ++i) {
    if (std::isnan(x[i])) return {x[i], x[i]};
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  return {lo, hi};
}

FX_AVX512 void quantize_avx512(const float* x, uint8_t* out, int64_t count,
                               float inverse_scale, int32_t zero_point) {
  const __m512 inv = _mm512_set1_ps(inverse_scale);
  const __m512i zp = _mm512_set1_epi32(zero_point);
  const __m512i low = _mm512_setzero_si512();
  const __m512i high = _mm512_set1_epi32(255);
  for (int64_t i = 0; i < count; i += 16) {
    const __mmask16 m = tail_mask(count - i);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    __m512i q = _mm512_add_epi32(
        _mm512_cvt_roundps_epi32(_mm512_mul_ps(v, inv),
                                 _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),
        zp);
    q = _mm512_min_epi32(_mm512_max_epi32(q, low), high);
    _mm512_mask_cvtepi32_storeu_epi8(out + i, m, q);
  }
}

// Below this many bytes, the calling thread alone: waking the team costs
// more.
constexpr int64_t kParallelBytes = 1 << 15;

}  // namespace

void lookup_u8(const uint8_t* in, uint8_t* out, int64_t count,
               const uint8_t table[256]) {
  const bool vbmi = has_vbmi();
  run_on_threads(count < kParallelBytes ? 1 : at::get_num_threads(),
                 [&](int thread, int threads) {
                   const auto [first, last] =
                       thread_share(count, thread, threads, 64);
                   if (vbmi) {
                     lookup_range(in + first, out + first, last - first, table);
                   } else {
                     lookup_range_scalar(in + first, out + first, last - first,
                                         table);
                   }
                 });
}

void multiply_channels_u8(const ChannelProduct& p) {
  run_on_threads(p.rows * p.channels < kParallelBytes ? 1
                                                      : at::get_num_threads(),
                 [&](int thread, int threads) {
                   const auto [first, last] =
                       thread_share(p.rows, thread, threads);
                   multiply_rows(p, first, last);
                 });
}

void sum_channels_u8(const ChannelSum& p) {
  const int64_t bytes = p.images * p.pixels * p.channels;
  run_on_threads(bytes < kParallelBytes ? 1 : at::get_num_threads(),
                 [&](int thread, int threads) {
                   // Each thread its channels, in blocks of 16.
                   const auto [first, last] =
                       thread_share(p.channels, thread, threads, 16);
                   if (first < last) sum_channels(p, first, last);
                 });
}

std::pair<float, float> min_max(const float* x, int64_t count) {
  const bool avx512 = has_avx512();
  const int threads =
      count * static_cast<int64_t>(sizeof(float)) < kParallelBytes
          ? 1
          : at::get_num_threads();
  // Each thread's least and greatest (NaN where it saw one).
  std::vector<std::pair<float, float>> parts(threads, {x[0], x[0]});
  run_on_threads(threads, [&](int thread, int team) {
    const auto [first, last] = thread_share(count, thread, team, 16);
    if (first < last) parts[thread] = min_max_range(x + first, last - first, avx512);
  });
  std::pair<float, float> out = parts[0];
  for (const auto& [lo, hi] : parts) {
    if (std::isnan(lo)) return {lo, hi};
    out = {std::min(out.first, lo), std::max(out.second, hi)};
  }
  return out;
}

void quantize_u8(const float* x, uint8_t* out, int64_t count,
                 float inverse_scale, int32_t zero_point) {
  const bool avx512 = has_avx512();
  run_on_threads(count < kParallelBytes ? 1 : at::get_num_threads(),
                 [&](int thread, int threads) {
                   const auto [first, last] =
                       thread_share(count, thread, threads, 16);
                   if (avx512) {
                     quantize_avx512(x + first, out + first, last - first,
                                     inverse_scale, zero_point);
                     return;
                   }
                   for (int64_t i = first; i < last; ++i) {
                     const int64_t q =
                         static_cast<int64_t>(std::nearbyint(x[i] * inverse_scale)) +
                         zero_point;
                     out[i] = static_cast<uint8_t>(std::clamp<int64_t>(q, 0, 255));
                   }
                 });
}

}  // namespace fx::onednn
