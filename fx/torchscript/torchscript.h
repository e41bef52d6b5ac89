// TorchScript interop: a torch::jit::Module (torch::jit::load of a model
// scripted or traced in Python) traced into a GraphModule, and a
// GraphModule exported as a torch::jit::Module:
//
//   fx::to_torchscript(gm).save("folded.pt");   // torch.jit.load in Python
//
//   torch::jit::Module script = torch::jit::load("resnet50.pt");
//   fx::GraphModule gm = fx::symbolic_trace(script, {torch::randn({1, 3, 224, 224})});
//   std::cout << gm->graph();
//       %x : [#users=1] = placeholder[target=x]
//       %conv1_weight : [#users=1] = get_attr[target=conv1.weight]
//       %conv2d : [#users=1] = call_function[target=aten::conv2d](args = (%x, %conv1_weight, None, [2, 2], [3, 3]), kwargs = {})
//       ...
//
// fx runs the module's TorchScript graphs node by node (prim::GetAttr,
// prim::CallMethod, prim::If, prim::Loop on concrete values; every operator
// through the dispatcher), so the tracer records them as it does for
// torch::nn::Module: the module's parameters and buffers become get_attr
// nodes with their qualified names, its aten operators (aten::_convolution
// from torch.jit.trace, in-place ops, lists and tuples) become nodes. A
// module with nodes only TorchScript's own interpreter runs (`with` blocks,
// fork) is traced through that interpreter instead, at the cost of its
// first-run setup. The GraphModule shares the TorchScript module's tensors.
// Placeholders take the names of forward's arguments.
//
// What a trace cannot follow fails with fx::TraceError naming the operator
// and TorchScript's source location: control flow on tensor values inside a
// scripted model (`if x.sum() > 0:`), values read out of tensors (`int(x)`).
// Control flow on dtypes and other non-tensor values runs as in any trace:
// the graph keeps the branch taken.
//
// Sizes: what TorchScript computes from sizes (aten::size and integer
// arithmetic in a scripted file; aten::size, prim::NumToTensor, tensor
// arithmetic and aten::Int in a traced one), the graph computes too, as
// sym_* nodes, so that it runs every shape TorchScript runs:
//
//   B, T = ids.size()                   %B = sym_size(%ids, 0)
//   h = h.view(B, T, 4, -1)             %view = aten::view(%h, [%B, %T, 4, -1])
//
// A comparison of sizes (an assert, a branch) becomes a check that it comes
// out as it did while tracing (fx_guard::check_size, which raises
// fx::GuardError), and so does the number of tensors a chunk, split or
// unbind returned (fx_guard::check_length). A size an operator takes as a
// constant (a float made from it, as attention's head_dim ** -0.5) is
// checked to keep its value (fx_guard::check_size with "=="). A loop count
// on a size specializes the graph to the example's shapes instead, which
// its guards then check (TraceStats::specialized_by names the TorchScript
// node);
// TraceOptions::specialize_sizes asks for that always.
#pragma once

#include <vector>

#include <ATen/core/ivalue.h>
#include <torch/csrc/jit/api/module.h>

#include "fx/runtime/graph_module.h"
#include "fx/trace/tracer.h"

namespace fx {

// `stats`, if given, receives the trace's statistics (TraceStats: whether
// the graph is specialized to the example's shapes, and by what).
GraphModule symbolic_trace(const torch::jit::Module& module,
                           const std::vector<c10::IValue>& example_inputs,
                           TraceOptions options = {},
                           TraceStats* stats = nullptr);

// A torch::jit::Module whose forward runs `gm`'s graph: each node one
// TorchScript operator call, parameters and buffers under their qualified
// names (shared with `gm`), so that save() writes a file that
// torch::jit::load and Python's torch.jit.load read back. Init steps are not
// exported: their current results are, as parameters. The input guards
// (fx/runtime/guards.h) are, as checks at the top of forward that raise in the
// GraphModule's words (torch.jit.trace's output has none):
//
//   if torch.ne(torch.size(x), [1, 3, 224, 224]):
//     ops.prim.RaiseException(torch.format("... input 0 ('x') has shape {} ..."))
//
// Throws fx::GraphError for what TorchScript cannot hold: leaf modules and
// functions registered with fx::wrap (C++ code), non-tensor inputs.
torch::jit::Module to_torchscript(const GraphModuleImpl& gm);
inline torch::jit::Module to_torchscript(const GraphModule& gm) {
  return to_torchscript(*gm);
}

}  // namespace fx
