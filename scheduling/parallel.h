// Independent branches at once, in one process: a GraphModule cut into
// segments (maximal chains of nodes), scheduled statically onto worker
// threads by the cost model so that branches balance (inception blocks,
// two-tower models, a U-Net's skip paths), each worker running its
// segments in order and waiting only for the values it needs.
//
//   fx::ParallelOptions options;            // 2 workers x 1 intra-op thread
//   fx::ParallelModule parallel = fx::parallelize_branches(gm, options);
//   at::Tensor y = parallel->forward({x}).toTensor();
//
//   an inception block, 4 branches from %x:       the schedule (2 workers):
//       %b1 = conv(%x)                               worker 0: b1, b3, cat
//       %b2 = conv(conv(%x))                         worker 1: b2, b4
//       %b3 = conv(conv(%x))
//       %b4 = conv(pool(%x))
//       %cat = cat([%b1, %b2, %b3, %b4])
//
// - Threads: `workers` threads of this object's own, each running
//   operators with `threads_per_worker` intra-op threads: the total the user
//   set is divided, not multiplied (2 workers x 1 thread against one
//   sequential run with 2).
// - Deterministic: every operator runs exactly as in the sequential
//   GraphModule with `threads_per_worker` threads, so outputs are bitwise
//   equal to it; only the order of independent segments changes. A segment
//   that writes a value in place (or a view of it) runs after the segments
//   that read it before, and before those that read it after; when that
//   orders two segments both ways (a view read before the write and after
//   it, in one chain), no schedule keeps the program's order and the
//   sequential module runs.
// - Whether it pays: the schedule's predicted makespan against the
//   sequential module on all the threads (each node `workers` times faster
//   than on one worker plus thread_split_seconds, or as fast, whichever is
//   faster; a graph without parallel branches gains nothing), and,
//   with `decide_by_measuring` and example inputs, timing both ways
//   (sequential with workers x threads_per_worker threads) and keeping the
//   faster: `used_parallel()` says which one forward runs.
// - A lowered graph (fx::optimize_for_inference) packs its weights for the
//   thread count it was lowered at: lower it at threads_per_worker, or
//   oneDNN reorders the weights on every call.
// - Each worker sets the intra-op threads of its own thread (OpenMP's
//   count of that thread, for as long as the worker runs); the process's
//   count, and the count threads started later begin with, stay as they
//   were.
// - forward is safe to call from one thread at a time (it uses the
//   workers).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/ivalue.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "fx/runtime/graph_module.h"
#include "passes/cost_model.h"

namespace fx {

struct ParallelOptions {
  int64_t workers = 2;
  int64_t threads_per_worker = 1;
  // How the cost model prices each node on one worker's threads, with the
  // graph's weights in memory when they exceed machine.cache_bytes (or
  // node_seconds, when set).
  Machine machine{100e9, 20e9};
  std::function<double(const Node&)> node_seconds;
  // What the alternative, the sequential module on all workers x
  // threads_per_worker threads, pays per computing node for splitting it
  // over the threads (starting and joining a parallel region): it runs each
  // node `workers` times faster than one worker, plus this, where that is
  // faster than one worker. About 14 us here (2 cores): googlenet and
  // inception_v3 lowered run 1.67-1.79x faster on 2 threads than on 1.
  double thread_split_seconds = 14e-6;
  // With example inputs: time the parallel schedule against the
  // sequential GraphModule (at workers x threads_per_worker threads) and
  // keep the faster.
  bool decide_by_measuring = false;
  std::vector<c10::IValue> example_inputs;
  int measure_rounds = 5;
};

// The static schedule, for reading and printing.
struct ParallelSchedule {
  // Per worker, its segments in the order it runs them ("submod_3", ...).
  std::vector<std::vector<std::string>> workers;
  int64_t segments = 0;
  // The cost model's view: one worker running every segment, the
  // sequential module on all the workers' threads (what the schedule must
  // beat), and the schedule's makespan.
  double sequential_seconds = 0;
  double all_threads_seconds = 0;
  double parallel_seconds = 0;
};

class ParallelModuleImpl : public torch::nn::Module {
 public:
  ParallelModuleImpl(const GraphModule& module, const ParallelOptions& options);
  ~ParallelModuleImpl() override;

  // Runs the graph: in parallel when the schedule pays (see above), else the
  // sequential GraphModule.
  c10::IValue forward(std::vector<c10::IValue> inputs);

  const ParallelSchedule& schedule() const;
  bool used_parallel() const;
  // Median milliseconds of both ways, when decided by measuring (else 0).
  double measured_parallel_ms() const;
  double measured_sequential_ms() const;
  // The sequential module (the original).
  const GraphModule& sequential() const;

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};
TORCH_MODULE(ParallelModule);

// Builds the schedule. Throws fx::GraphError for fewer than 1 worker or
// thread, and for modules with script objects.
ParallelModule parallelize_branches(const GraphModule& module,
                                    const ParallelOptions& options = {});

// The schedule as text: one line per worker, with the predicted times.
std::string format_schedule(const ParallelSchedule& schedule);

}  // namespace fx
