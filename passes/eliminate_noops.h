// No-op elimination: calls that return their input, or a view of it with
// the same metadata, are replaced by that input.
//
//   before:  %relu : f32[2, 8] = call_function[target=aten::relu](args = (%x,), kwargs = {})
//            %contiguous : f32[2, 8] = call_function[target=aten::contiguous](args = (%relu,), kwargs = {})
//            %to : f32[2, 8] = call_function[target=aten::to.dtype](args = (%contiguous, torch.float32), kwargs = {})
//            %view : f32[2, 8] = call_function[target=aten::view](args = (%to, [2, 8]), kwargs = {})
//            %add : f32[2, 8] = call_function[target=aten::add.Tensor](args = (%view, %y), kwargs = {})
//   after:   %relu : f32[2, 8] = call_function[target=aten::relu](args = (%x,), kwargs = {})
//            %add : f32[2, 8] = call_function[target=aten::add.Tensor](args = (%relu, %y), kwargs = {})
//
// The rule: only operators whose result is the input itself, or a view of
// it, are removed, and only when the node's kTensorMeta equals its input's
// (same sizes, strides, dtype, device): then the result holds the input's
// values in the input's memory with the input's layout, so using the input
// instead changes neither values nor aliasing (a later in-place write goes
// to the same memory either way). The operators:
//   aten::contiguous                     returns its input when it is already
//                                        contiguous in that memory format
//   aten::to.dtype, to.device,           return their input when nothing
//     to.dtype_layout, to.other          changes; required here: copy=False,
//                                        no memory_format (or preserve), no
//                                        layout or pin_memory request
//   aten::view, reshape, expand          to the input's own sizes
//   aten::flatten.using_ints             of a single dim (start_dim and
//                                        end_dim the same): returns its input
// Not removed, although they return an alias with the same metadata:
// aten::detach (it cuts the autograd graph), aten::alias, and anything else
// not listed. Dropout in eval mode is passes/remove_dropout.h's.
//
// kTensorMeta describes the values the graph was traced with; for other
// inputs:
//  - dtype, device and rank are guarded by the GraphModule, so the `to`
//    rules hold for every input it accepts;
//  - sizes are guarded only when the traced code read them
//    (fx/runtime/guards.h): the rules that depend on sizes (view, reshape,
//    expand) apply only when every input's sizes are guarded, i.e. when the
//    trace is specialized to its input shapes;
//  - strides are not guarded: the contiguous rule assumes inputs laid out
//    like the example inputs (a transposed or channels_last input where the
//    example was contiguous would then reach code that expected a
//    contiguous tensor).
// A call whose value is passed to an operator that changes its argument's
// metadata in place (tag inplace_view: t_, squeeze_, as_strided_, ...) or
// to an opaque call (leaf module, method, impure registered function) is
// kept: there the identity of the tensor object matters, and a view is
// another object than its input.
#pragma once

#include "passes/pass.h"

namespace fx {

// Returns whether any node was removed.
bool eliminate_noops(GraphModuleImpl& module);

class EliminateNoops : public Pass {
 public:
  std::string name() const override { return "eliminate_noops"; }
  Bodies bodies() const override { return Bodies::kEachGraph; }
  bool run(GraphModuleImpl& module) override { return eliminate_noops(module); }
};

}  // namespace fx
