// Internal to fx::symbolic_trace(torch::jit::Module): runs a TorchScript
// method node by node, so that the tracer sees its operators.
//
// TorchScript's own interpreter would do the same, but on first use it
// builds a graph executor and execution plan for every method of every
// submodule (about 3.5 ms for a freshly loaded ResNet-50, more than the
// trace itself). This one walks the method graphs as they were loaded:
// module attribute reads (prim::GetAttr), calls into submodules
// (prim::CallMethod) and functions (prim::CallFunction), constants, lists,
// tuples, prim::If and prim::Loop on concrete values; every other node runs
// as its registered operator, through the dispatcher. Sizes, and the
// integer arithmetic on them, are recorded in the graph:
//
//   B, T = x.size()                     %B = sym_size(%x, 0)
//   h = x.view(B * T, -1)               %sym_mul = sym_mul(%B, %T)
//                                       %view = aten::view(%x, [%sym_mul, -1])
//
// An error inside a node is rethrown as fx::TraceError naming the node's
// operator and its TorchScript source location, outermost call first. A node
// kind it does not know (prim::fork, say) throws UnsupportedNode before it
// runs, and the caller retraces with TorchScript's interpreter.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/core/ivalue.h>
#include <torch/csrc/jit/api/module.h>

namespace fx {
class Tracer;
}

namespace fx::internal {

class UnsupportedNode : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Runs `method` with `inputs` (its arguments after self) and returns its
// result. With `tracer` (the running trace), the sizes the method reads from
// proxies and its integer arithmetic on them are recorded as sym_* nodes,
// which the nodes using them take in place of their ints
// (Tracer::substitute_next); a size used otherwise (a branch, a loop count,
// a float, tensor data) specializes the trace.
c10::IValue run_torchscript_method(const torch::jit::Method& method,
                                   std::vector<c10::IValue> inputs,
                                   Tracer* tracer = nullptr);

}  // namespace fx::internal
