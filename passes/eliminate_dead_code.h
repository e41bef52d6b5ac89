// Dead code elimination as a pass: Graph::eliminate_dead_code, which keeps
// every impure node (in-place and out= operators, random operators,
// batch_norm in training mode, leaf modules; see Node::is_impure).
//
//   before:  %a = aten::add.Tensor(%x, %x); %b = aten::mul_.Scalar(%x, 2); return x
//   after:   %b = aten::mul_.Scalar(%x, 2); return x
#pragma once

#include "passes/pass.h"

namespace fx {

// Returns whether anything was removed.
bool eliminate_dead_code(GraphModuleImpl& module);

class EliminateDeadCode : public Pass {
 public:
  std::string name() const override { return "eliminate_dead_code"; }
  bool run(GraphModuleImpl& module) override {
    return eliminate_dead_code(module);
  }
  // Graph::eliminate_dead_code goes into the bodies.
  Bodies bodies() const override { return Bodies::kItself; }
};

}  // namespace fx
