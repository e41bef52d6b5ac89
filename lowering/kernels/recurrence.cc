#include "lowering/kernels/recurrence.h"

#include <ATen/Parallel.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "lowering/kernels/kernel_support.h"
#include "lowering/kernels/vector_math.h"

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

// A barrier for the threads of one group (libgomp's barrier is the whole
// team's): spinning, as libgomp's does between steps, and yielding the CPU
// after a while (more threads than CPUs).
class GroupBarrier {
 public:
  void set_size(int size) { size_ = size; }
  void wait() {
    const int generation = generation_.load(std::memory_order_acquire);
    if (arrived_.fetch_add(1, std::memory_order_acq_rel) + 1 == size_) {
      arrived_.store(0, std::memory_order_relaxed);
      generation_.fetch_add(1, std::memory_order_release);
      return;
    }
    for (int spins = 0;
         generation_.load(std::memory_order_acquire) == generation; ++spins) {
      if (spins < 4096) {
        _mm_pause();
      } else {
        std::this_thread::yield();
      }
    }
  }

 private:
  int size_ = 1;
  std::atomic<int> arrived_{0};
  std::atomic<int> generation_{0};
};

// A layer's steps on `threads` threads, this one the `thread`-th: each owns
// a slice of the hidden units for every step, and they meet after each step
// (the next reads every unit's h) at `barrier`, or at libgomp's where they
// are the whole team (null).
void run_steps(const Recurrence& layer, int thread, int threads,
               GroupBarrier* barrier) {
  const int64_t blocks = layer.hidden / 16;
  const int64_t width = (layer.lstm ? 4 : 3) * layer.hidden;
  const int64_t stride =
      layer.output_stride > 0 ? layer.output_stride : layer.hidden;
  const auto [first, last] = thread_share(blocks, thread, threads);
  auto* block_step = layer.lstm ? lstm_block : gru_block;
  for (int64_t s = 0; s < layer.steps; ++s) {
    const int64_t t = layer.reverse ? layer.steps - 1 - s : s;
    const float* h = s == 0 ? layer.h0
                            : layer.output + (layer.reverse ? t + 1 : t - 1) * stride;
    for (int64_t i = 0; i < last - first; ++i) {
      // Forward on even steps, backward on odd ones: the blocks the last
      // step read last, still in this core's cache, come first.
      const int64_t block = s % 2 == 0 ? first + i : last - 1 - i;
      block_step(layer, block * 16, h, layer.input_gates + t * width,
                 layer.output + t * stride);
    }
    if (threads == 1) continue;
    if (barrier == nullptr) {
      GOMP_barrier();
    } else {
      barrier->wait();
    }
  }
}

// The layers of run_recurrences and the groups' barriers.
struct Team {
  const Recurrence* layers;
  int count;
  std::vector<GroupBarrier> barriers;  // one per layer, made in place
};

// This thread's share: with at least as many threads as layers, one
// layer's units with the other threads of its group (layer l's: threads
// thread_share(threads, l, count)); else its layers, one after another,
// alone.
void run_team(void* data) {
  Team& team = *static_cast<Team*>(data);
  const int threads = omp_get_num_threads(), thread = omp_get_thread_num();
  if (threads < team.count) {
    const auto [first, last] = thread_share(team.count, thread, threads);
    for (int64_t l = first; l < last; ++l) {
      run_steps(team.layers[l], 0, 1, nullptr);
    }
    return;
  }
  if (team.count == 1) {
    run_steps(team.layers[0], thread, threads, nullptr);
    return;
  }
  // The groups' sizes from the team libgomp gave, before any step.
  if (thread == 0) {
    for (int l = 0; l < team.count; ++l) {
      const auto [first, last] = thread_share(threads, l, team.count);
      team.barriers[l].set_size(static_cast<int>(last - first));
    }
  }
  GOMP_barrier();
  for (int l = 0; l < team.count; ++l) {
    const auto [first, last] = thread_share(threads, l, team.count);
    if (thread >= first && thread < last) {
      run_steps(team.layers[l], thread - static_cast<int>(first),
                static_cast<int>(last - first), &team.barriers[l]);
    }
  }
}

}  // namespace

bool recurrence_runs(int64_t batch, int64_t hidden) {
  return has_avx512() && batch == 1 && hidden > 0 && hidden % 16 == 0;
}

void run_recurrences(const Recurrence* layers, int count) {
  // An LSTM's c_n holds the cell state from c0 on; each thread writes its
  // own units.
  for (int l = 0; l < count; ++l) {
    if (layers[l].lstm) {
      std::memmove(layers[l].c_n, layers[l].c0,
                   layers[l].hidden * sizeof(float));
    }
  }
  // The whole team, as every other operator runs (a thread with no units
  // only meets the others).
  Team team{layers, count, std::vector<GroupBarrier>(count)};
  GOMP_parallel(run_team, &team,
                static_cast<unsigned>(at::get_num_threads()), 0);
}

}  // namespace fx::onednn
