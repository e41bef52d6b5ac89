#include "lowering/recurrence.h"

#include <ATen/Parallel.h>

#include <cstring>

#include "lowering/kernel_support.h"
#include "lowering/vector_math.h"

namespace fx::onednn {
namespace {

// A gate's 16 pre-activations: the recurrent sums, the input's and the
// bias.
FX_AVX512 inline __m512 gate_sum(__m512 a, __m512 b, const float* input,
                                 const float* bias) {
  return _mm512_add_ps(_mm512_add_ps(a, b),
                       _mm512_add_ps(_mm512_loadu_ps(input),
                                     _mm512_loadu_ps(bias)));
}

// One LSTM step of 16 units (j0 .. j0 + 15): the 4 gates' recurrent sums
// over the hidden state h (two chains of accumulators over alternate k),
// then c = f * c + i * g and h = o * tanh(c).
FX_AVX512 void lstm_block(const Recurrence& layer, int64_t j0, const float* h,
                          const float* input_gates, float* h_out) {
  float* c = layer.c_n;
  const int64_t hidden = layer.hidden;
  const float* w = layer.packed_weights + j0 * hidden * 4;
  // Written out: kept in registers (gcc -O2 leaves a loop over the gates
  // rolled, its accumulators in memory, at 1.4x the time).
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  __m512 b0 = a0, b1 = a0, b2 = a0, b3 = a0;
  for (int64_t k = 0; k < hidden; k += 2, w += 128) {
    const __m512 x = _mm512_set1_ps(h[k]);
    a0 = _mm512_fmadd_ps(x, _mm512_loadu_ps(w), a0);
    a1 = _mm512_fmadd_ps(x, _mm512_loadu_ps(w + 16), a1);
    a2 = _mm512_fmadd_ps(x, _mm512_loadu_ps(w + 32), a2);
    a3 = _mm512_fmadd_ps(x, _mm512_loadu_ps(w + 48), a3);
    const __m512 y = _mm512_set1_ps(h[k + 1]);
    b0 = _mm512_fmadd_ps(y, _mm512_loadu_ps(w + 64), b0);
    b1 = _mm512_fmadd_ps(y, _mm512_loadu_ps(w + 80), b1);
    b2 = _mm512_fmadd_ps(y, _mm512_loadu_ps(w + 96), b2);
    b3 = _mm512_fmadd_ps(y, _mm512_loadu_ps(w + 112), b3);
  }
  const float* in = input_gates + j0;
  const float* bias = layer.bias + j0;
  const __m512 i = sigmoid16(gate_sum(a0, b0, in, bias));
  const __m512 f = sigmoid16(gate_sum(a1, b1, in + hidden, bias + hidden));
  const __m512 g =
      tanh16(gate_sum(a2, b2, in + 2 * hidden, bias + 2 * hidden));
  const __m512 o =
      sigmoid16(gate_sum(a3, b3, in + 3 * hidden, bias + 3 * hidden));
  const __m512 c_new =
      _mm512_fmadd_ps(f, _mm512_loadu_ps(c + j0), _mm512_mul_ps(i, g));
  _mm512_storeu_ps(c + j0, c_new);
  _mm512_storeu_ps(h_out + j0, _mm512_mul_ps(o, tanh16(c_new)));
}

// One GRU step of 16 units, PyTorch's (linear before reset): z and r from
// their sums, n = tanh(x W_in + b_in + r * (h W_hn + b_hn)), then
// h = (1 - z) * n + z * h.
FX_AVX512 void gru_block(const Recurrence& layer, int64_t j0, const float* h,
                         const float* input_gates, float* h_out) {
  const int64_t hidden = layer.hidden;
  const float* w = layer.packed_weights + j0 * hidden * 3;
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0;
  __m512 b0 = a0, b1 = a0, b2 = a0;
  for (int64_t k = 0; k < hidden; k += 2, w += 96) {
    const __m512 x = _mm512_set1_ps(h[k]);
    a0 = _mm512_fmadd_ps(x, _mm512_loadu_ps(w), a0);
    a1 = _mm512_fmadd_ps(x, _mm512_loadu_ps(w + 16), a1);
    a2 = _mm512_fmadd_ps(x, _mm512_loadu_ps(w + 32), a2);
    const __m512 y = _mm512_set1_ps(h[k + 1]);
    b0 = _mm512_fmadd_ps(y, _mm512_loadu_ps(w + 48), b0);
    b1 = _mm512_fmadd_ps(y, _mm512_loadu_ps(w + 64), b1);
    b2 = _mm512_fmadd_ps(y, _mm512_loadu_ps(w + 80), b2);
  }
  const float* in = input_gates + j0;
  const float* bias = layer.bias + j0;
  const __m512 z = sigmoid16(gate_sum(a0, b0, in, bias));
  const __m512 r = sigmoid16(gate_sum(a1, b1, in + hidden, bias + hidden));
  const __m512 hidden_n =
      _mm512_add_ps(_mm512_add_ps(a2, b2), _mm512_loadu_ps(bias + 3 * hidden));
  const __m512 n = tanh16(_mm512_fmadd_ps(
      r, hidden_n,
      _mm512_add_ps(_mm512_loadu_ps(in + 2 * hidden),
                    _mm512_loadu_ps(bias + 2 * hidden))));
  const __m512 previous = _mm512_loadu_ps(h + j0);
  _mm512_storeu_ps(h_out + j0,
                   _mm512_fmadd_ps(z, _mm512_sub_ps(previous, n), n));
}

// Each thread's units for every step; the threads meet after each step (the
// next reads every unit's h).
void run_steps(void* data) {
  const Recurrence& layer = *static_cast<const Recurrence*>(data);
  const int64_t blocks = layer.hidden / 16;
  const int64_t width = (layer.lstm ? 4 : 3) * layer.hidden;
  const int threads = omp_get_num_threads(), thread = omp_get_thread_num();
  const auto [first, last] = thread_share(blocks, thread, threads);
  auto* block_step = layer.lstm ? lstm_block : gru_block;
  for (int64_t t = 0; t < layer.steps; ++t) {
    const float* h =
        t == 0 ? layer.h0 : layer.output + (t - 1) * layer.hidden;
    for (int64_t i = 0; i < last - first; ++i) {
      // Forward on even steps, backward on odd ones: the blocks the last
      // step read last, still in this core's cache, come first.
      const int64_t block = t % 2 == 0 ? first + i : last - 1 - i;
      block_step(layer, block * 16, h, layer.input_gates + t * width,
                 layer.output + t * layer.hidden);
    }
    GOMP_barrier();
  }
}

}  // namespace

bool recurrence_runs(int64_t batch, int64_t hidden) {
  return has_avx512() && batch == 1 && hidden > 0 && hidden % 16 == 0;
}

void run_recurrence(const Recurrence& layer) {
  // An LSTM's c_n holds the cell state from c0 on; each thread writes its
  // own units.
  if (layer.lstm) {
    std::memmove(layer.c_n, layer.c0, layer.hidden * sizeof(float));
  }
  // The whole team, as every other operator runs (a thread with no units
  // only meets the others).
  GOMP_parallel(run_steps, const_cast<Recurrence*>(&layer),
                static_cast<unsigned>(at::get_num_threads()), 0);
}

}  // namespace fx::onednn
