// Internal to //lowering: what the kernels of our own (lowering/kernels/recurrence,
// lowering/kernels/channel_affine) and the thread pinning (lowering/threads) build
// on.
//
// libgomp, the OpenMP runtime LibTorch and oneDNN run on, called directly
// (third_party/libgomp.h): a parallel region is libgomp's team whichever
// compiler builds the caller.
//
// AVX-512 intrinsics, for functions built for AVX-512 (FX_AVX512) and
// called where has_avx512() says the CPU runs them.
#pragma once

#include "third_party/libgomp.h"

// gcc 12 warns, inside its own AVX-512 intrinsics, of the undefined vectors
// they start from.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstdint>
#include <utility>

#define FX_AVX512 __attribute__((target("avx512f")))

namespace fx::onednn {

// Whether this CPU runs AVX-512F (checked once).
inline bool has_avx512() {
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  return avx512;
}

// The 16 lanes of a vector that hold values when `left` of them remain
// (all 16 for 16 or more).
FX_AVX512 inline __mmask16 tail_mask(int64_t left) {
  return left >= 16 ? 0xffff : static_cast<__mmask16>((1u << left) - 1);
}

// Thread `thread` of `threads`' share [first, last) of [0, n): contiguous,
// its edges multiples of `align` (but n, the last one's end).
inline std::pair<int64_t, int64_t> thread_share(int64_t n, int thread,
                                                int threads,
                                                int64_t align = 1) {
  auto edge = [&](int t) {
    return t == threads ? n : n * t / threads / align * align;
  };
  return {edge(thread), edge(thread + 1)};
}

// Runs slice(thread, threads) on each of `threads` threads of libgomp's
// team (libgomp may give fewer: `threads` is then the team's size), or on
// the calling thread alone as slice(0, 1) for one: the kernels of ours
// split their work by the thread's index.
template <typename Slice>
void run_on_threads(int threads, const Slice& slice) {
  if (threads <= 1) {
    slice(0, 1);
    return;
  }
  GOMP_parallel(
      [](void* data) {
        (*static_cast<const Slice*>(data))(omp_get_thread_num(),
                                          omp_get_num_threads());
      },
      const_cast<Slice*>(&slice), static_cast<unsigned>(threads), 0);
}

}  // namespace fx::onednn
