// Convolution chains: at batch 1, a run of lowered convolutions each
// reading the one before becomes one fx_onednn::conv_chain call, whose
// threads each take the same rows of every layer in one parallel region
// and wait for each other only where a layer reads rows another wrote (a
// k x k convolution's neighbours) or writes memory another may still read.
// Called one by one, each layer forks and joins the threads, and a small
// layer waits about as long as it works: MobileNetV2's 51 layers after its
// first run in 0.94-0.96x their time as one region, at two threads.
//
//   before (batch 1):
//       %conv_1 = call_function[target=fx_onednn::conv](args = (%conv, %pack_1, %b_1, [1, 1], [1, 1], [1, 1], 32, None, clip, 0.0, 6.0))
//       %conv_2 = call_function[target=fx_onednn::conv](args = (%conv_1, %pack_2, %b_2, [1, 1], [0, 0], [1, 1], 1))
//       %conv_3 = call_function[target=fx_onednn::conv](args = (%conv_2, %pack_3, %b_3, [1, 1], [0, 0], [1, 1], 1, None, clip, 0.0, 6.0))
//       %conv_add_ = call_function[target=fx_onednn::conv_add_](args = (%conv_2, %conv_3, %pack_4, %b_4, [1, 1], [0, 0], [1, 1], 1))
//   after:
//       %conv_chain = call_function[target=fx_onednn::conv_chain](args = (%conv, [%pack_1, %pack_2, %pack_3, %pack_4], [%b_1, %b_2, %b_3, %b_4], [1, 1, 32, -1, 1, 0, 1, -1, 1, 0, 1, -1, 1, 0, 1, 2], clip,none,clip,none, [0.0, 6.0, 0.0, 0.0, 0.0, 6.0, 0.0, 0.0]))
//
// Per layer, `layers` holds its stride, padding, groups and the value it
// adds into in place (-1: none; i: the output of the chain's layer i - 1,
// 0 being the chain's input), `params` its activation's alpha and beta.
// A chain's members are 2-d float32 convolutions of batch 1 with a bias,
// equal strides and paddings in both dimensions and no dilation, of at
// most 32M multiply-accumulates each (larger layers run faster on
// oneDNN's own threading), whose outputs only the chain reads (but the
// last's); it starts at the first such convolution and needs three or
// more. Called at another batch or
// type, fx_onednn::conv_chain runs its layers one by one. The graph still
// prints, saves, generates C++ and exports to TorchScript.
#pragma once

#include <optional>

#include "fx/runtime/graph_module.h"
#include "passes/pass.h"

namespace fx {

struct ConvChainReport {
  int chains = 0;  // fx_onednn::conv_chain calls made
  int layers = 0;  // ... of this many convolutions
};

// Rewrites `module`'s graph in place (it must carry tensor metadata, as a
// lowered graph does); does not recompile.
ConvChainReport chain_convolutions(GraphModuleImpl& module);

// The multiply-accumulates of one fx_onednn::conv_chain call, layer by
// layer from its input's sizes and its weights' (the cost model's price:
// passes/cost_model.h, price_by_macs); nullopt when metadata is missing.
std::optional<double> conv_chain_macs(const Node& call);

// The pass "chain_convolutions" of the inference pipeline. Statistics:
// "conv_chains" (calls made), "chained" (convolutions in them).
class ChainConvolutions : public Pass {
 public:
  std::string name() const override { return "chain_convolutions"; }
  Bodies bodies() const override { return Bodies::kEachGraph; }
  bool run(GraphModuleImpl& module) override {
    report_ = chain_convolutions(module);
    return report_.chains > 0;
  }
  std::vector<std::pair<std::string, int64_t>> statistics() const override {
    return {{"conv_chains", report_.chains}, {"chained", report_.layers}};
  }

 private:
  ConvChainReport report_;
};

}  // namespace fx
