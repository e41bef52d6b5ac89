// libgomp, the OpenMP runtime LibTorch (Debian's 1.13 and the 2.x
// packages), its intra-op threads and oneDNN run on, called directly
// rather than through <omp.h>: clang (--config=fuzz) has no <omp.h> of its
// own here, and its -fopenmp would bring LLVM's runtime and a team of its
// own beside libgomp. GOMP_parallel is a parallel region as gcc compiles
// `#pragma omp parallel num_threads(n)`, GOMP_barrier the barrier
// `#pragma omp barrier` compiles to.
//
// ThreadsOfThisThread sets the calling thread's intra-op threads for a
// scope: OpenMP's count of this thread, which ATen reads
// (at::get_num_threads) and oneDNN plans its kernels for.
// at::set_num_threads would remake LibTorch's thread pools (about 8 ms a
// call in 1.13) and change the count of every thread started after it.
#pragma once

#include <ATen/Parallel.h>

extern "C" {
void GOMP_parallel(void (*fn)(void*), void* data, unsigned num_threads,
                   unsigned flags);
void GOMP_barrier();
int omp_get_thread_num();
int omp_get_num_threads();
int omp_get_max_threads();
void omp_set_num_threads(int threads);
}

namespace fx {

// Sets this thread's intra-op threads from now on. ATen sets a thread's
// count from its own default on the thread's first use of it: that use
// comes first here, so that it cannot undo the setting.
inline void set_threads_of_this_thread(int threads) {
  (void)at::get_num_threads();
  omp_set_num_threads(threads);
}

// This thread's intra-op threads `threads` until the scope ends, then what
// they were (read through at::get_num_threads, ATen's first use, for the
// same reason).
class ThreadsOfThisThread {
 public:
  explicit ThreadsOfThisThread(int threads) : before_(at::get_num_threads()) {
    omp_set_num_threads(threads);
  }
  ~ThreadsOfThisThread() { omp_set_num_threads(before_); }
  ThreadsOfThisThread(const ThreadsOfThisThread&) = delete;
  ThreadsOfThisThread& operator=(const ThreadsOfThisThread&) = delete;

 private:
  const int before_;
};

}  // namespace fx
