#include "lowering/kernels/squeeze_excite.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "lowering/kernels/kernel_support.h"
#include "lowering/kernels/vector_math.h"

namespace fx::onednn {
namespace {

using Activation = SqueezeExcite::Activation;
using Gate = SqueezeExcite::Gate;

// `v < 0 ? 0 : v` and the clamps below keep NaN (std::fmax would not).
float activate(float v, Activation a) {
  switch (a) {
    case Activation::kNone: return v;
    case Activation::kRelu: return v < 0.f ? 0.f : v;
    case Activation::kSilu: return v / (1.f + std::exp(-v));
  }
  return v;
}

float gate_of(float v, Gate g) {
  if (g == Gate::kSigmoid) return 1.f / (1.f + std::exp(-v));
  v = v / 6.f + 0.5f;
  return v < 0.f ? 0.f : (v > 1.f ? 1.f : v);
}

// --- Any x86-64 CPU ------------------------------------------------------------
// acc[c] += the sum over `count` pixels of x[p, c].
void sum_pixels(const float* x, int64_t count, int64_t channels, float* acc) {
  for (int64_t p = 0; p < count; ++p) {
    for (int64_t c = 0; c < channels; ++c) acc[c] += x[p * channels + c];
  }
}

void scale_pixels(const float* x, const float* gate, float* y, int64_t count,
                  int64_t channels) {
  for (int64_t p = 0; p < count; ++p) {
    for (int64_t c = 0; c < channels; ++c) {
      y[p * channels + c] = x[p * channels + c] * gate[c];
    }
  }
}

// squeezed[j] for j in [j0, j1), from the channel means.
void squeeze_rows(const SqueezeExcite& op, const float* mean, int64_t j0,
                  int64_t j1, float* squeezed) {
  const int64_t C = op.channels;
  for (int64_t j = j0; j < j1; ++j) {
    float v = op.b1 != nullptr ? op.b1[j] : 0.f;
    for (int64_t c = 0; c < C; ++c) v += op.w1[j * C + c] * mean[c];
    squeezed[j] = activate(v, op.activation);
  }
}

// gate[c] for c in [c0, c1), from the squeezed values.
void excite_columns(const SqueezeExcite& op, const float* squeezed,
                    int64_t c0, int64_t c1, float* gate) {
  const int64_t C = op.channels;
  for (int64_t c = c0; c < c1; ++c) {
    float v = op.b2 != nullptr ? op.b2[c] : 0.f;
    for (int64_t j = 0; j < op.squeezed; ++j) {
      v += op.w2_t[j * C + c] * squeezed[j];
    }
    gate[c] = gate_of(v, op.gate);
  }
}

// --- AVX-512: 16 channels at a time, the last ones masked ------------------

FX_AVX512 void sum_pixels_avx512(const float* x, int64_t count,
                                 int64_t channels, float* acc) {
  // Four pixels per pass over the sums (which stay in the L1 cache), each
  // pixel's channels read in order.
  int64_t p = 0;
  for (; p + 4 <= count; p += 4) {
    const float* in = x + p * channels;
    for (int64_t c = 0; c < channels; c += 16) {
      const __mmask16 m = tail_mask(channels - c);
      const __m512 a = _mm512_add_ps(
          _mm512_maskz_loadu_ps(m, in + c),
          _mm512_maskz_loadu_ps(m, in + channels + c));
      const __m512 b = _mm512_add_ps(
          _mm512_maskz_loadu_ps(m, in + 2 * channels + c),
          _mm512_maskz_loadu_ps(m, in + 3 * channels + c));
      _mm512_mask_storeu_ps(
          acc + c, m,
          _mm512_add_ps(_mm512_maskz_loadu_ps(m, acc + c),
                        _mm512_add_ps(a, b)));
    }
  }
  for (; p < count; ++p) {
    const float* in = x + p * channels;
    for (int64_t c = 0; c < channels; c += 16) {
      const __mmask16 m = tail_mask(channels - c);
      _mm512_mask_storeu_ps(acc + c, m,
                            _mm512_add_ps(_mm512_maskz_loadu_ps(m, acc + c),
                                          _mm512_maskz_loadu_ps(m, in + c)));
    }
  }
}

FX_AVX512 void scale_pixels_avx512(const float* x, const float* gate, float* y,
                                   int64_t count, int64_t channels) {
  for (int64_t p = 0; p < count; ++p) {
    const float* in = x + p * channels;
    float* out = y + p * channels;
    for (int64_t c = 0; c < channels; c += 16) {
      const __mmask16 m = tail_mask(channels - c);
      _mm512_mask_storeu_ps(
          out + c, m,
          _mm512_mul_ps(_mm512_maskz_loadu_ps(m, in + c),
                        _mm512_maskz_loadu_ps(m, gate + c)));
    }
  }
}

FX_AVX512 void squeeze_rows_avx512(const SqueezeExcite& op,
                                   const float* mean, int64_t j0, int64_t j1,
                                   float* squeezed) {
  const int64_t C = op.channels;
  for (int64_t j = j0; j < j1; ++j) {
    const float* w = op.w1 + j * C;
    // Two chains over alternate blocks of channels.
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    int64_t c = 0;
    for (; c + 32 <= C; c += 32) {
      a0 = _mm512_fmadd_ps(_mm512_loadu_ps(w + c), _mm512_loadu_ps(mean + c),
                           a0);
      a1 = _mm512_fmadd_ps(_mm512_loadu_ps(w + c + 16),
                           _mm512_loadu_ps(mean + c + 16), a1);
    }
    for (; c < C; c += 16) {
      const __mmask16 m = tail_mask(C - c);
      a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, w + c),
                           _mm512_maskz_loadu_ps(m, mean + c), a0);
    }
    const float v = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1)) +
                    (op.b1 != nullptr ? op.b1[j] : 0.f);
    squeezed[j] = activate(v, op.activation);
  }
}

FX_AVX512 void excite_columns_avx512(const SqueezeExcite& op,
                                     const float* squeezed, int64_t c0,
                                     int64_t c1, float* gate) {
  const int64_t C = op.channels;
  const __m512 sixth = _mm512_set1_ps(1.f / 6), half = _mm512_set1_ps(0.5f);
  const __m512 zero = _mm512_setzero_ps(), one = _mm512_set1_ps(1.f);
  for (int64_t c = c0; c < c1; c += 16) {
    const __mmask16 m = tail_mask(c1 - c);
    // Two chains over alternate squeezed values.
    __m512 v0 = op.b2 != nullptr ? _mm512_maskz_loadu_ps(m, op.b2 + c) : zero;
    __m512 v1 = zero;
    int64_t j = 0;
    for (; j + 2 <= op.squeezed; j += 2) {
      v0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, op.w2_t + j * C + c),
                           _mm512_set1_ps(squeezed[j]), v0);
      v1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, op.w2_t + (j + 1) * C + c),
                           _mm512_set1_ps(squeezed[j + 1]), v1);
    }
    if (j < op.squeezed) {
      v0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, op.w2_t + j * C + c),
                           _mm512_set1_ps(squeezed[j]), v0);
    }
    __m512 v = _mm512_add_ps(v0, v1);
    // The clamps take v second: NaN stays NaN.
    v = op.gate == Gate::kSigmoid
            ? sigmoid16(v)
            : _mm512_min_ps(one, _mm512_max_ps(zero, _mm512_fmadd_ps(
                                                          v, sixth, half)));
    _mm512_mask_storeu_ps(gate + c, m, v);
  }
}

// --- The parallel region ----------------------------------------------------
// Each thread: the sums of its pixels; [barrier]; the means (each thread
// all of them: a few thousand adds) and its share of the squeezed values
// of every sample; [barrier]; its share of the gates; [barrier]; its
// pixels scaled. The weights (up to half a megabyte: EfficientNet's last
// blocks) are read once between the threads, not once by each.
struct Region {
  const SqueezeExcite* op;
  float* partial;   // [threads, N, C]: each thread's sums
  float* squeezed;  // [N, S]
  float* gate;      // [N, C]
};

// Thread `thread` of `threads` (libgomp may give fewer than asked for).
void run_slice(const Region& r, int thread, int threads) {
  const SqueezeExcite& op = *r.op;
  const int64_t C = op.channels, S = op.squeezed, P = op.pixels, N = op.batch;
  const bool avx512 = has_avx512();
  auto barrier = [&] {
    if (threads > 1) GOMP_barrier();
  };
  // (Not a structured binding: clang does not let the lambda below
  // capture one.)
  const std::pair<int64_t, int64_t> mine =
      thread_share(N * P, thread, threads);
  const int64_t first = mine.first, last = mine.second;
  // The samples this thread's pixels belong to, and its pixels of each.
  const int64_t n_first = first / P;
  const int64_t n_last = last == first ? n_first : (last - 1) / P + 1;
  auto pixels = [&](int64_t n) {
    return std::pair<int64_t, int64_t>{std::max(first, n * P),
                                       std::min(last, (n + 1) * P)};
  };
  float* acc = r.partial + thread * N * C;
  std::fill(acc, acc + N * C, 0.f);
  for (int64_t n = n_first; n < n_last; ++n) {
    const auto [a, b] = pixels(n);
    (avx512 ? sum_pixels_avx512 : sum_pixels)(op.input + a * C, b - a, C,
                                              acc + n * C);
  }
  barrier();
  const auto [j0, j1] = thread_share(S, thread, threads);
  std::vector<float> mean(C);
  for (int64_t n = 0; n < N && j0 < j1; ++n) {
    for (int64_t c = 0; c < C; ++c) {
      float sum = 0.f;
      for (int t = 0; t < threads; ++t) sum += r.partial[(t * N + n) * C + c];
      mean[c] = sum / static_cast<float>(P);
    }
    (avx512 ? squeeze_rows_avx512 : squeeze_rows)(op, mean.data(), j0, j1,
                                                  r.squeezed + n * S);
  }
  barrier();
  const auto [c0, c1] = thread_share(C, thread, threads, 16);
  for (int64_t n = 0; n < N && c0 < c1; ++n) {
    (avx512 ? excite_columns_avx512 : excite_columns)(
        op, r.squeezed + n * S, c0, c1, r.gate + n * C);
  }
  barrier();
  for (int64_t n = n_first; n < n_last; ++n) {
    const auto [a, b] = pixels(n);
    (avx512 ? scale_pixels_avx512 : scale_pixels)(
        op.input + a * C, r.gate + n * C, op.output + a * C, b - a, C);
  }
}

}  // namespace

void run_squeeze_excite(const SqueezeExcite& op) {
  // Small tensors on the calling thread alone: waking the team costs more.
  const int threads = op.batch * op.pixels * op.channels < (1 << 14)
                          ? 1
                          : std::max(1, at::get_num_threads());
  std::vector<float> partial(threads * op.batch * op.channels);
  std::vector<float> squeezed(op.batch * op.squeezed);
  std::vector<float> gate(op.batch * op.channels);
  const Region region{&op, partial.data(), squeezed.data(), gate.data()};
  run_on_threads(threads, [&](int thread, int team) {
    run_slice(region, thread, team);
  });
}

}  // namespace fx::onednn
