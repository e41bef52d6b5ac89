// Pipeline stages across processes and machines on c10d: PyTorch's own
// rendezvous (c10d::TCPStore) and point-to-point messages
// (c10d::ProcessGroupGloo::send / recv over TCP).
//
// Rank r runs stage r of a pipeline (split_pipeline). Rank 0 is the
// driver: it holds the batch, runs stage 0 on each micro-batch and sends
// the result on; every other rank serves, receiving from rank r-1 and
// sending to rank r+1, and the last rank sends the outputs back to rank 0.
// All ranks work at once on different micro-batches (GPipe's schedule,
// forward only):
//
//   // host A (rank 0):
//   fx::PipelineDriver driver(fx::load("stage_0.fx"),
//                             {.master = "hostA:29500", .rank = 0, .world = 2});
//   c10::IValue y = driver.run({batch});     // batch 8 -> 8 micro-batches of 1
//   // host B (rank 1):
//   fx::serve_pipeline_stage(fx::load("stage_1.fx"),
//                            {.master = "hostA:29500", .rank = 1, .world = 2});
//
// (or `fx pipeline serve --rank R --world N --master HOST:PORT stage_R.fx` on
// each host, and `fx pipeline run MODEL --stages N` for one machine).
//
// - Micro-batches: every input of stage 0 is cut along dim 0 into pieces of
//   the size its graph was traced at; the outputs are concatenated along
//   dim 0. They are bitwise equal to running the GraphModule on each
//   micro-batch in one process.
// - Buffers: each stage knows the shapes and dtypes it receives and sends
//   from its graph's metadata; all tensors of a micro-batch travel in one
//   message, received into two buffers per stage (so that the next
//   micro-batch arrives while this one computes).
// - Dynamic dimensions: stages split from a graph with them take every
//   shape its guards allow (stage 0's guards check each micro-batch). Each
//   batch's header carries the sizes of the symbols (B, T, ...), from which
//   every rank sizes its messages (its metadata's symbolic sizes); buffers
//   grow to the largest message seen. Batches of different sizes in one
//   run_all go as one round each.
// - Before any data moves, every rank publishes what it receives and sends
//   in the store and checks every neighbour against it: a rank missing
//   after the timeout, a rank started twice, different world sizes, and a
//   stage whose inputs are not what the stage before it sends are
//   PipelineErrors naming the ranks, on every rank.
// - Faults: a rank whose process exits closes its connections, and its
//   neighbours fail at once; a rank that sends nothing for `timeout` (it
//   hangs) makes the one waiting for it fail then. Failures spread along
//   the pipeline, so every rank stops within about (world - 1) x timeout,
//   each with a PipelineError naming the rank it waited for. Serving ranks
//   wait for the next batch without a timeout: between batches the pipeline
//   may idle.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/ivalue.h>

#include "fx/ir/errors.h"
#include "fx/runtime/graph_module.h"

namespace fx {

// Something went wrong between the stages of a pipeline: the rendezvous, a
// neighbour that does not fit, a rank that died or hung.
class PipelineError : public Error {
 public:
  using Error::Error;
};

struct PipelineGroup {
  // Where rank 0 listens for the rendezvous: "HOST:PORT".
  std::string master = "127.0.0.1:29500";
  int64_t rank = 0;
  int64_t world = 1;
  // How long to wait for the other ranks to join and for each message.
  std::chrono::milliseconds timeout{30000};
};

// Rank 0. Construction waits for every rank to join and checks the stages
// fit; the destructor (or stop()) tells the serving ranks to return.
class PipelineDriver {
 public:
  PipelineDriver(GraphModule stage, const PipelineGroup& group);
  ~PipelineDriver();
  PipelineDriver(const PipelineDriver&) = delete;
  PipelineDriver& operator=(const PipelineDriver&) = delete;

  // Runs one batch through the pipeline: each input tensor is cut into
  // micro-batches along dim 0 (its size must be a multiple of stage 0's
  // traced size; its other dimensions as traced, or any its guard allows
  // where they are dynamic), and each output is the last stage's outputs
  // concatenated.
  // Returns a tensor, or a tuple of them, as the last stage does.
  c10::IValue run(const std::vector<at::Tensor>& inputs);
  // Several batches back to back, as a server's stream of requests: the
  // next batch's micro-batches enter stage 0 while the last stages finish
  // the one before, so the pipeline fills once, not once per batch (its
  // throughput). One result per batch, as run() gives.
  std::vector<c10::IValue> run_all(
      const std::vector<std::vector<at::Tensor>>& batches);

  // The micro-batch size (stage 0's traced dim 0).
  int64_t micro_batch_size() const;
  // Tells the serving ranks to return. run() cannot be called after.
  void stop();

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// Ranks 1 to world - 1: joins, then serves batches until rank 0 stops the
// pipeline (returns) or something fails (throws PipelineError).
void serve_pipeline_stage(GraphModule stage, const PipelineGroup& group);

// What a stage (or PipelineDriver::run) returns, as its tensors: a tensor,
// or a tuple or list of them. Throws PipelineError for anything else.
std::vector<at::Tensor> output_tensors(const c10::IValue& value);

}  // namespace fx
