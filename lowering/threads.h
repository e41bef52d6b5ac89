// The intra-op threads a model runs on, pinned to CPUs: for a model called
// now and then rather than back to back (a control loop at a fixed rate, a
// server between requests), where an unpinned call pays for the scheduler.
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

}  // namespace fx
