// Internal to //lowering: what the kernels of our own (lowering/recurrence,
// lowering/channel_affine) and the thread pinning (lowering/threads) build
// on.
//
// libgomp, the OpenMP runtime Debian's libtorch and oneDNN run on, called
// directly: a parallel region as gcc compiles `#pragma omp parallel
// num_threads(n)`, so that the region is libgomp's team whichever compiler
// builds the caller (clang's -fopenmp would bring LLVM's runtime and a team
// of its own), and the barrier `#pragma omp barrier` compiles to.
//
// AVX-512 intrinsics, for functions built for AVX-512 (FX_AVX512) and
// called where has_avx512() says the CPU runs them.
#pragma once

extern "C" {
void GOMP_parallel(void (*fn)(void*), void* data, unsigned num_threads,
                   unsigned flags);
void GOMP_barrier();
int omp_get_thread_num();
int omp_get_num_threads();
}

// gcc 12 warns, inside its own AVX-512 intrinsics, of the undefined vectors
// they start from.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#define FX_AVX512 __attribute__((target("avx512f")))

namespace fx::onednn {

// Whether this CPU runs AVX-512F (checked once).
inline bool has_avx512() {
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  return avx512;
}

}  // namespace fx::onednn
