// The intra-op threads a model runs on: pinned to CPUs, for a model called
// now and then rather than back to back (a control loop at a fixed rate, a
// server between requests), where an unpinned call pays for the scheduler;
// and fewer of them while other processes keep the CPUs busy
// (LoadAwareThreads, at the end).
//
// libtorch, oneDNN and so every lowered operator run on the calling thread's
// OpenMP team. Idle, the team's threads sleep; the call after a pause wakes
// them, and the scheduler, finding the machine idle, may put a woken worker
// on the CPU of the thread that woke it, where the two spin against each
// other until it moves one away (milliseconds). Measured here, 2 threads,
// each call after a 50 ms pause, medians (tools/benchmark_inference,
// section 7): MobileNetV2 lowered 12.9 ms unpinned, 2.9 ms pinned (ONNX
// Runtime 6.4 ms); an LSTM language model 13.7 ms, 4.0 pinned (6.3).
// Binding the team (OMP_PROC_BIND=true in the environment before the
// process starts) does the same; this call does it from code, for the
// calling thread's team only:
//
//   at::set_num_threads(2);
//   fx::pin_intra_op_threads();        // thread i on the i-th allowed CPU
//   fx::pin_intra_op_threads({2, 3});  // or on CPUs of your choosing
//   ... run the model from this thread ...
//   fx::unpin_intra_op_threads();      // back to where they ran before
//
// It pins the calling thread too (it is the team's thread 0): pin from the
// thread that runs the model, after setting the thread count, and give two
// such threads CPUs of their own. It pins the team's threads as they are:
// libgomp ends a team's surplus threads when a smaller team runs (oneDNN
// starts one for small work with 3 or more threads) and makes new ones
// later, which inherit thread 0's CPU. Measured with 2 threads, where no
// smaller team runs; with more, bind in the environment instead
// (OMP_PLACES=cores OMP_PROC_BIND=close before the process starts).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace fx {

// Pins the calling thread's intra-op threads (at::get_num_threads() of
// them), thread i to cpus[i]; with no CPUs given, to the process's allowed
// CPUs in order. Throws, pinning nothing, when a CPU is not one the process
// may run on or is given twice, when there are fewer CPUs than threads, or
// when called inside a parallel region.
void pin_intra_op_threads(const std::vector<int>& cpus = {});

// Lets the calling thread's intra-op threads run on every CPU the process
// may run on again.
void unpin_intra_op_threads();

// The CPUs each of the calling thread's intra-op threads may run on now,
// thread by thread.
std::vector<std::vector<int>> intra_op_thread_cpus();

// --- On a busy machine -------------------------------------------------------
// A model's call on several intra-op threads waits at each barrier (every
// oneDNN primitive, every parallel region) for its slowest thread. Beside
// other busy processes the scheduler keeps taking one of them off its CPU,
// and the others wait for it; one thread waits for nobody. LoadAwareThreads
// runs each call on `busy_threads` (1) while the calling thread spends more
// than a tenth of its calls waiting for a CPU (its run-queue delay, Linux's
// /proc/thread-self/schedstat, a running average over calls), and on
// `threads` otherwise, back once the average falls under a twentieth.
// Measured beside one busy process per CPU (2 threads, batch 1;
// tools/benchmark_inference, section 8): BERT-style 52 ms a call on 2
// pinned threads, 20 ms on one, ONNX Runtime 24 ms; DenseNet-121 172, 78
// and 125 ms.
//
//   fx::LoadAwareThreads threads;  // at::get_num_threads() when quiet
//   for (const at::Tensor& x : requests) {
//     c10::IValue y = threads.run([&] { return gm(x); });
//   }
//
// The thread count is the calling thread's OpenMP one (omp_set_num_threads:
// what libtorch's and the lowering's parallel regions run on; a BLAS's own
// threads are left as they are), set for the call and restored after it.
// One object per serving thread; without
// /proc/thread-self/schedstat (not Linux, or no scheduler statistics) every
// call runs on `threads`.
class LoadAwareThreads {
 public:
  struct Options {
    // The intra-op threads of a call on a quiet machine (0: the calling
    // thread's at::get_num_threads() when the object is made) and on a busy
    // one.
    int threads = 0;
    int busy_threads = 1;
    // The share of its calls' time the calling thread waits for a CPU (a
    // running average) above which the machine counts as busy, and below
    // which it counts as quiet again.
    double busy_above = 0.10;
    double quiet_below = 0.05;
  };
  LoadAwareThreads() : LoadAwareThreads(Options{}) {}
  // Throws c10::Error for a thread count under 1 or bounds out of order.
  explicit LoadAwareThreads(Options options);

  // Returns call(), run on the thread count the machine's load allows.
  template <typename F>
  decltype(auto) run(F&& call) {
    const Call measuring(*this);
    return std::forward<F>(call)();
  }

  // Takes one call's measurement: `waited_ns` of its `wall_ns` spent
  // waiting for a CPU. run() records each call; exposed for tests.
  void record(double wall_ns, double waited_ns);
  bool busy() const { return busy_; }
  // The thread count of the next call.
  int threads() const { return busy_ ? options_.busy_threads : options_.threads; }
  // The running average of the share of time spent waiting.
  double waiting() const { return waiting_; }

 private:
  class Call {
   public:
    explicit Call(LoadAwareThreads& owner);
    ~Call();
    Call(const Call&) = delete;
    Call& operator=(const Call&) = delete;

   private:
    LoadAwareThreads& owner_;
    int threads_before_;
    int64_t start_ns_;
    int64_t waited_before_ns_;
  };

  Options options_;
  bool busy_ = false;
  double waiting_ = 0;
};

}  // namespace fx
