// Internal to //lowering: exp, sigmoid and tanh on 16 floats at a time
// (AVX-512), for the kernels of our own (lowering/recurrence,
// lowering/elementwise). Include after lowering/kernel_support.h.
#pragma once

#include "lowering/kernel_support.h"

namespace fx::onednn {

// exp(x) = 2^n * p(r), x = n ln2 + r, |r| <= ln2 / 2 (Cephes' polynomial,
// relative error ~1e-7); NaN stays NaN (the clamps take x second).
FX_AVX512 inline __m512 exp16(__m512 x) {
  x = _mm512_max_ps(_mm512_set1_ps(-87.f),
                    _mm512_min_ps(_mm512_set1_ps(88.3762626647949f), x));
  const __m512 n = _mm512_roundscale_ps(
      _mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r),
                      _mm512_add_ps(r, _mm512_set1_ps(1.f)));
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
