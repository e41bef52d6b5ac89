// Micro-batching: a lowered graph's leading layers, whose activations at
// the graph's batch size outgrow the caches, run one sample (or a few) at
// a time, the rest of the graph on the whole batch.
//
// At batch 8, MobileNetV2's 16 -> 96 expansion at 112x112 writes 38.5 MB
// that the depthwise convolution after it reads back from memory; one
// image's 4.8 MB stays in cache between them. Layers further on have small
// activations and larger weights, which a whole batch reads once. So the
// graph's leading per-sample part (each output sample depending on the
// same input sample alone: convolutions, pooling, batch norms,
// squeeze-excitation, elementwise operators, concatenations along the
// channels, ...) is copied once per micro-batch, each copy reading a slice
// of the input's rows, and the values the rest reads are concatenated
// along the batch:
//
//   before (batch 2):
//       %conv = call_function[target=fx_onednn::conv](args = (%x, %pack, ...))          f32[2, 96, 112, 112]
//       %conv_1 = call_function[target=fx_onednn::conv](args = (%conv, %pack_1, ...))   f32[2, 24, 56, 56]
//       %conv_2 = call_function[target=fx_onednn::conv](args = (%conv_1, %pack_2, ...)) f32[2, 320, 7, 7]
//   after:
//       %sym_size = call_function[target=sym_size](args = (%x, 0))
//       %sym_mul = call_function[target=sym_mul](args = (%sym_size, 1))
//       %sym_floordiv = call_function[target=sym_floordiv](args = (%sym_mul, 2))
//       %slice = call_function[target=aten::slice.Tensor](args = (%x, 0, 0, %sym_floordiv, 1))
//       %conv_3 = call_function[target=fx_onednn::conv](args = (%slice, %pack, ...))
//       %conv_4 = call_function[target=fx_onednn::conv](args = (%conv_3, %pack_1, ...))
//       %slice_1 = call_function[target=aten::slice.Tensor](args = (%x, 0, %sym_floordiv, %sym_size, 1))
//       %conv_5 = call_function[target=fx_onednn::conv](args = (%slice_1, %pack, ...))
//       %conv_6 = call_function[target=fx_onednn::conv](args = (%conv_5, %pack_1, ...))
//       %cat = call_function[target=aten::cat](args = ([%conv_4, %conv_6], 0))
//       %conv_2 = call_function[target=fx_onednn::conv](args = (%cat, %pack_2, ...))
//
// The copies share the weights (get_attr nodes), and the graph still
// prints, saves, generates C++ and exports to TorchScript. The rows come
// from the batch each call brings (sym_size), so a graph whose input
// guard leaves the batch free (a TorchScript file's) serves every batch
// size as before, a smaller one leaving some copies empty. Which part and
// what micro-batch follow from the nodes' tensor metadata alone, so the
// result is the same on every run: a node gains when its activations at
// the whole batch (`min_bytes` or more, read and written) come from
// memory rather than the caches, a compute-bound node loses a little
// running on fewer samples (and ends the part on images smaller than
// 56x56, where its kernels run at a fraction of their batch speed), each
// copy costs a call, the concatenation its bytes; the cut that saves most
// is taken, if it saves 2% or more of the graph's estimated time. A
// micro-batch is the largest divisor of the batch whose largest such node
// moves at most `micro_batch_bytes`. Graphs with a dynamic batch dimension
// (TraceOptions::dynamic), batch 1, or no saving that large stay as they
// are.
#pragma once

#include <cstdint>

#include "fx/runtime/graph_module.h"
#include "passes/pass.h"

namespace fx {

struct MicroBatchOptions {
  // A node's activations at the whole batch from which they are taken to
  // come from memory (a share of the 32 MB L3 the two cores see).
  int64_t min_bytes = int64_t{16} << 20;
  int64_t micro_batch_bytes = int64_t{8} << 20;
};

struct MicroBatchReport {
  int nodes = 0;             // nodes run per micro-batch (0: unchanged)
  int64_t micro_batch = 0;   // samples in each
  int64_t micro_batches = 0; // copies made
};

// Rewrites `module`'s graph in place (it must carry tensor metadata, as a
// lowered graph does); does not recompile.
MicroBatchReport micro_batch(GraphModuleImpl& module,
                             const MicroBatchOptions& options = {});

// The pass "micro_batch" of the inference pipeline: micro_batch() with the
// default options, on a lowered graph only (one holding a lowered
// convolution or linear layer: fx_onednn::conv, conv_add_,
// conv_transpose or linear); other graphs stay as they are. Statistics:
// "micro_batched" (nodes), "micro_batches".
class MicroBatch : public Pass {
 public:
  std::string name() const override { return "micro_batch"; }
  Bodies bodies() const override { return Bodies::kEachGraph; }
  bool run(GraphModuleImpl& module) override;
  std::vector<std::pair<std::string, int64_t>> statistics() const override {
    return {{"micro_batched", report_.nodes},
            {"micro_batches", report_.micro_batches}};
  }

 private:
  MicroBatchReport report_;
};

}  // namespace fx
