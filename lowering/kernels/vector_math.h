// Internal to //lowering: exp, sigmoid and tanh on 16 floats at a time
// (AVX-512), for the kernels of our own (lowering/kernels/recurrence,
// lowering/kernels/elementwise). Include after lowering/kernels/kernel_support.h.
#pragma once

#include "lowering/kernels/kernel_support.h"

namespace fx::onednn {

// exp(x) = 2^t = 2^n * 2^f, t = x log2(e), n = round(t), |f| <= 1/2, 2^f
// by a polynomial of degree 6; t clamped to [-126, 126]. Relative error
// ~1e-7 for |x| <= 10 and up to 4e-6 near the clamps (t's rounding: one
// constant where a two-constant reduction of x is exact, for 25% more
// operations); sigmoid16 and tanh16 built on it stay within ~1e-7 and
// ~2e-7 absolute. NaN stays NaN (the clamps take t second).
FX_AVX512 inline __m512 exp16(__m512 x) {
  __m512 t = _mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f));
  t = _mm512_max_ps(_mm512_set1_ps(-126.f),
                    _mm512_min_ps(_mm512_set1_ps(126.f), t));
  const __m512 n =
      _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(t, n);
  // (f ln 2)^k / k!
  __m512 p = _mm512_set1_ps(1.535336188319500e-4f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.339887440266574e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.618437357674640e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.550332471162809e-2f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.402264791363012e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.931472028550421e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.f));
  return _mm512_scalef_ps(p, n);
}

FX_AVX512 inline __m512 sigmoid16(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.f);
  return _mm512_div_ps(
      one, _mm512_add_ps(one, exp16(_mm512_sub_ps(_mm512_setzero_ps(), x))));
}

// tanh(x) = 2 sigmoid(2x) - 1 (absolute error ~1e-7).
FX_AVX512 inline __m512 tanh16(__m512 x) {
  return _mm512_sub_ps(
      _mm512_mul_ps(_mm512_set1_ps(2.f), sigmoid16(_mm512_add_ps(x, x))),
      _mm512_set1_ps(1.f));
}

}  // namespace fx::onednn
