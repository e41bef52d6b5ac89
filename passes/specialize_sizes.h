// Size specialization: a graph that computes sizes from its inputs (sym_size
// and its arithmetic, from a TorchScript file's size arithmetic or from
// TraceOptions::dynamic) made into one for the example shapes only: each
// size node replaced by the example's value, read from the tensor_meta of
// the tensor it measures, and every input's shape guarded.
//
//   before:  %B = call_function[target=sym_size](args = (%x, 0), kwargs = {})
//            %view = call_function[target=aten::view](args = (%x, [%B, -1]), kwargs = {})
//   after:   %view = call_function[target=aten::view](args = (%x, [2, -1]), kwargs = {})
//            (and the placeholder %x guards f32[2, 16] instead of f32[?, ?])
//
// A size read from a value an operator gave a data-dependent size
// (aten::nonzero's rows, ...: fx/ir/data_dependent.h), or from one computed
// from such a value, stays a node: its example's size holds for the
// example's data only.
//
// For back ends and formats that take fixed shapes: the ONNX export runs it
// on the graph it writes. Throws fx::GraphError naming a size node whose
// tensor has no tensor_meta; the graph is then unchanged.
#pragma once

#include "passes/pass.h"

namespace fx {

// Returns whether the graph had size nodes or dynamic dimensions.
bool specialize_sizes(GraphModuleImpl& module);

class SpecializeSizes : public Pass {
 public:
  std::string name() const override { return "specialize_sizes"; }
  Bodies bodies() const override { return Bodies::kEachGraph; }
  bool run(GraphModuleImpl& module) override {
    return specialize_sizes(module);
  }
};

}  // namespace fx
