// Pipeline stages: a GraphModule cut into N GraphModules that run one after
// another, each on its own process or machine (torch.distributed.pipelining's
// split, for LibTorch), with the cost model's prediction of each stage's time
// and of the pipeline's throughput (performance simulation without the
// hardware). pipeline_runtime.h runs the stages across processes on c10d.
//
//   fx::Pipeline p = fx::split_pipeline(gm, {.stages = 2});
//   fx::save(p.stages[1].module, "stage_1.fx");   // ship it to another host
//
//   before (one graph):
//       %x = placeholder[target=x]
//       %conv = aten::conv2d(%x, %conv_weight)
//       %relu = aten::relu(%conv)
//       %pool = aten::max_pool2d(%relu, [2, 2])
//       %flatten = aten::flatten(%pool, 1)
//       %fc = aten::linear(%flatten, %fc_weight, %fc_bias)
//       return fc
//   after, cut after %relu:
//     stage 0:                                stage 1:
//       %x = placeholder[target=x]              %relu = placeholder[target=relu]
//       %conv = aten::conv2d(%x, ...)           %pool = aten::max_pool2d(%relu, [2, 2])
//       %relu = aten::relu(%conv)               %flatten = aten::flatten(%pool, 1)
//       return relu                             %fc = aten::linear(%flatten, ...)
//                                               return fc
//
// - Stages are contiguous runs of the graph's call nodes in program order,
//   so stage k uses only values of stages before it. Stage 0 takes the
//   graph's inputs; stage k > 0 takes the values live across its cut (named
//   after them, in program order), and passes on whatever a later stage or
//   the output still needs, its own values and ones it was given; the last
//   stage returns the graph's output. Running the stages in turn, each on
//   the previous one's output, computes exactly what the graph computes.
// - Only tensors with known metadata (kTensorMeta: shape and dtype, so a
//   receiver knows its buffers) may cross a cut. A cut where a list or a
//   tensor without metadata is live is never chosen, and is an
//   fx::GraphError when asked for.
// - A graph with dynamic dimensions (TraceOptions::dynamic) is split from a
//   copy ShapeProp gave symbolic sizes, so every stage runs every shape the
//   graph runs: what crosses a cut says how its sizes follow the symbols
//   (f32[B, T, 768]), and a size the program computed (sym_size and its
//   arithmetic) is not sent but read again in the next stage from a
//   dimension of that symbol of a tensor it receives:
//     stage 0: ... %view = aten::view(%x, [%B, %T, 12, 64]) ...
//     stage 1: %B = sym_size(%layer_norm, 0); %T = sym_size(%layer_norm, 1)
//   A cut where no tensor crossing has such a dimension, or where a tensor
//   crossing has a size no function of the symbols gives ("?"), is never
//   chosen (and named when asked for).
// - A cut is also refused when a later node writes in place to a value
//   whose storage two live values share (each stage gets its own copy, so
//   the other would miss the write), or to a graph input (the caller would).
// - Each stage holds the parameters, buffers and leaf modules it uses
//   (shared with the module, as split_module's submodules do) and keeps the
//   module's training mode and the input guards of the graph's inputs.
//   Modules with init steps (lowered or quantized graphs: packed weights)
//   are refused: split first, then lower or quantize each stage.
//
// Balancing: each call node's time comes from the cost model (on
// `machine`, with the weights in memory when its stage's weights exceed
// machine.cache_bytes: each stage runs in a process and cache of its own;
// see fx::WeightsIn) or from `node_seconds` (say, measured with
// profile_node_seconds), and a stage also takes the time to receive its
// inputs over `link`; the cuts minimise the slowest stage's time, with ties
// going to the cuts that move fewest bytes (exactly, by dynamic
// programming, up to 2,000 usable cuts; beyond, compute alone is balanced
// exactly and the bytes break ties).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "fx/runtime/graph_module.h"
#include "passes/cost_model.h"

namespace fx {

// The link between two stages' processes.
struct Link {
  double bytes_per_second = 1e9;
  double latency_seconds = 50e-6;
};

struct PipelineOptions {
  // The number of stages (>= 1), when split_points is empty.
  int64_t stages = 2;
  // Cuts chosen by the user (torch.distributed.pipelining's split points),
  // in program order; stages = split_points.size() + 1. Each is a node name
  // (the cut goes right after that node) or a module path such as "layer3"
  // (the cut goes right before the first node traced inside it).
  std::vector<std::string> split_points;
  // The machine the cost model's roofline prices each node on, and the
  // link a stage receives its inputs over (a cut that moves more bytes
  // costs its stage more).
  Machine machine{100e9, 20e9};
  Link link;
  // When set, each call node's seconds, instead of the cost model's.
  std::function<double(const Node&)> node_seconds;
};

struct PipelineStage {
  GraphModule module = nullptr;
  // What crosses into the stage and out of it (the original graph's value
  // names; a stage's own placeholders are named the same), with metadata.
  std::vector<std::string> inputs;
  std::vector<std::string> outputs;
  std::vector<TensorMeta> input_meta;
  std::vector<TensorMeta> output_meta;
  // The original graph's call nodes this stage runs (their names, in
  // order), and the sum of their seconds (cost model or node_seconds, as
  // balanced).
  std::vector<std::string> node_names;
  int64_t nodes = 0;
  double compute_seconds = 0;
  // Bytes received (the previous stage's outputs) and sent.
  double bytes_in = 0;
  double bytes_out = 0;
};

struct Pipeline {
  std::vector<PipelineStage> stages;
};

// Cuts `module` into stages as above. Throws fx::GraphError for a stage
// count below 1 or above the number of usable cuts + 1, a split point that
// names neither a node nor a module path (or is out of order), a cut that
// carries a value other than a tensor with metadata, and a module with init
// steps or script objects.
Pipeline split_pipeline(const GraphModule& module,
                        const PipelineOptions& options = {});

// One round of measured feedback: each node's seconds (as `options`
// prices them, with its stage's weights in cache or in memory) scaled by
// measured / predicted of the stage it ran in, and the graph cut again
// (each node keeps that price wherever the new cuts put it).
// `measured_stage_seconds` holds each stage of `pipeline` timed as it
// really runs (after lowering, say). Balances what
// the cost model cannot see (how well each kind of layer uses the
// machine) while keeping its view inside each stage.
Pipeline rebalance_pipeline(const GraphModule& module, const Pipeline& pipeline,
                            const std::vector<double>& measured_stage_seconds,
                            PipelineOptions options);

// Cuts tuned by measurement. One rebalance can overshoot: a cut's
// measured stages do not add up to the next cut's (a cut inside a residual
// block sends two tensors; each stage lowers and fuses on its own side),
// and the graph's cuts are coarse (ResNet-50 cut by the cost model into 2
// stages measured 33.5 and 37.6 ms, rebalanced once 41.0 and 36.1).
// tune_pipeline cuts by the cost model, then up to `rounds` times cuts
// again from every cut measured so far, and keeps the cut whose slowest
// stage measured fastest: a pipeline's throughput is its slowest stage's.
// After the first cut it rebalances as rebalance_pipeline does; after
// more, the nodes fall into segments (those in the same stage in every
// cut: a cut moved once makes the nodes it moved a segment of their own),
// each segment's time is fitted to every stage measured (least squares),
// and the next cut lands between two that overshot each other. It stops
// early at a cut already measured. `measure` times a cut's stages as they will run and returns
// each stage's seconds; it may change the stages' modules in place
// (lowering them, say), and the cut returned is as it left it.
//
//   fx::TunedPipeline tuned = fx::tune_pipeline(gm, options,
//       [&](fx::Pipeline& p) {
//         for (auto& stage : p.stages) fx::optimize_for_inference(*stage.module);
//         return time_each_stage(p);  // seconds, one per stage
//       });
//
// Throws fx::GraphError when `measure` returns a count other than the
// stages' or a time that is not positive and finite, and what
// split_pipeline throws.
struct TunedPipeline {
  Pipeline pipeline;                 // the cut kept, as `measure` left it
  std::vector<double> stage_seconds;  // its stages, measured
  // Every cut measured, in order (the cost model's first), and which was
  // kept.
  std::vector<std::vector<double>> measured;
  size_t kept = 0;
};
TunedPipeline tune_pipeline(
    const GraphModule& module, const PipelineOptions& options,
    const std::function<std::vector<double>(Pipeline&)>& measure,
    int rounds = 3);

// Each stage's median seconds over `rounds` calls, all stages running at
// once as in the pipeline's steady state: each on a thread of its own with
// `threads_per_stage` intra-op threads, on its own input (made by running
// the stages before it once, in turn, on `inputs`), calling its stage until
// every stage has its `rounds` timed calls. The stages share the caches and
// the memory as the pipeline's processes on one machine do (ResNet-50's two
// stages: 33.5 and 37.6 ms alone, 36-38 ms each at once). The measure for
// tune_pipeline on one machine. Throws fx::GraphError for rounds or
// threads_per_stage below 1, and what a stage throws.
std::vector<double> time_stages_at_once(const Pipeline& pipeline,
                                        const std::vector<c10::IValue>& inputs,
                                        int rounds = 10,
                                        int threads_per_stage = 1);

// Runs the stages one after another in this process: the reference the
// distributed run is compared with, bitwise.
c10::IValue run_pipeline_locally(const Pipeline& pipeline,
                                 std::vector<c10::IValue> inputs);

// Each call node's median seconds over `rounds` runs of `module` on
// `inputs` through the Interpreter (after one warm-up run), for
// PipelineOptions::node_seconds: balance by measurement rather than by the
// roofline. Nodes are keyed by name.
std::map<std::string, double> profile_node_seconds(
    const GraphModule& module, const std::vector<c10::IValue>& inputs,
    int rounds = 5);

// --- Simulation --------------------------------------------------------------

struct PipelinePrediction {
  // Per stage: compute + receiving its inputs over the link, per
  // micro-batch.
  std::vector<double> stage_seconds;
  // A batch of `micro_batches` through the GPipe schedule (forward only):
  // the first micro-batch goes through every stage, then one comes out per
  // slowest stage time.
  double batch_seconds = 0;
  // Each batch of an endless stream of them (PipelineDriver::run_all, in
  // the steady state: the pipeline stays full): one micro-batch per
  // slowest stage time. A stream of k batches also fills and drains once:
  // (batch_seconds - stream_batch_seconds) / k more per batch.
  double stream_batch_seconds = 0;
  // The same batch run by one process, one stage after another, without
  // any link.
  double sequential_seconds = 0;
  double speedup() const {
    return batch_seconds > 0 ? sequential_seconds / batch_seconds : 0;
  }
};

PipelinePrediction predict_pipeline(const Pipeline& pipeline,
                                    int64_t micro_batches, const Link& link);

// One line per stage (nodes, inputs and outputs with shapes, predicted
// time, bytes in and out), the same for the same pipeline every time.
std::string format_pipeline(const Pipeline& pipeline);

}  // namespace fx
