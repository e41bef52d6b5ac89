// Dropout removal: dropout calls that do nothing are replaced by their input.
//
// A model traced in eval mode calls aten::dropout with train=False (as
// torch::nn::Dropout and the C++ Transformer layers do); such a call, and one
// with p=0, returns its input itself (ATen's _dropout_impl: `if (p == 0 ||
// !train || input.numel() == 0) return input;`), so its users may use the
// input directly, and the result is exactly the same tensor as before. This
// pass removes them for aten::dropout, aten::feature_dropout,
// aten::alpha_dropout, aten::feature_alpha_dropout and their in-place `_`
// forms, when `train` is the literal False or `p` the literal 0. (torch.fx's
// experimental remove_dropout replaces nn.Dropout modules; the tracer here
// records the aten calls, whatever module or function made them.)
//
//   before:  %relu = call_function[target=aten::relu](args = (%x,), kwargs = {})
//            %dropout = call_function[target=aten::dropout](args = (%relu, 0.2, False), kwargs = {})
//            %addmm = call_function[target=aten::addmm](args = (%b, %dropout, %t), kwargs = {})
//   after:   %relu = call_function[target=aten::relu](args = (%x,), kwargs = {})
//            %addmm = call_function[target=aten::addmm](args = (%b, %relu, %t), kwargs = {})
//
// A dropout in training mode (train=True, p > 0) draws random numbers and is
// kept.
#pragma once

#include "passes/pass.h"

namespace fx {

class Node;

// Returns whether any dropout was removed.
bool remove_dropout(GraphModuleImpl& module);

// Whether `node` calls one of aten's dropouts (dropout, feature_dropout,
// alpha_dropout, feature_alpha_dropout, in place or not).
bool is_dropout(const Node& node);

class RemoveDropout : public Pass {
 public:
  std::string name() const override { return "remove_dropout"; }
  Bodies bodies() const override { return Bodies::kEachGraph; }
  bool run(GraphModuleImpl& module) override { return remove_dropout(module); }
};

}  // namespace fx
