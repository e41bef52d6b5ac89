// Splitting a GraphModule into submodules (torch.fx's
// passes.split_module.split_module): a callback gives each call node a
// partition number; each partition becomes a GraphModule of its own,
// registered on the result as a leaf module "submod_<number>", and the
// result's graph calls them in an order that runs every partition after
// those whose values it uses.
//
//   partition_of: relu -> 0, neg -> 0, sigmoid -> 1, tanh -> 2, add -> 1
//
//   before:
//       %x : [#users=2] = placeholder[target=x]
//       %relu : [#users=2] = call_function[target=aten::relu](args = (%x,), kwargs = {})
//       %neg : [#users=1] = call_function[target=aten::neg](args = (%x,), kwargs = {})
//       %sigmoid : [#users=1] = call_function[target=aten::sigmoid](args = (%relu,), kwargs = {})
//       %tanh : [#users=1] = call_function[target=aten::tanh](args = (%neg,), kwargs = {})
//       %add : [#users=1] = call_function[target=aten::add.Tensor](args = (%sigmoid, %tanh), kwargs = {})
//       return add
//   after:
//       %x : [#users=1] = placeholder[target=x]
//       %submod_0 : [#users=2] = call_module[target=submod_0](args = (%x,), kwargs = {})
//       %relu : [#users=1] = call_function[target=getitem](args = (%submod_0, 0), kwargs = {})
//       %neg : [#users=1] = call_function[target=getitem](args = (%submod_0, 1), kwargs = {})
//       %submod_2 : [#users=1] = call_module[target=submod_2](args = (%neg,), kwargs = {})
//       %submod_1 : [#users=1] = call_module[target=submod_1](args = (%relu, %submod_2), kwargs = {})
//       return submod_1
//   submod_0.graph():
//       %x : [#users=2] = placeholder[target=x]
//       %relu : [#users=1] = call_function[target=aten::relu](args = (%x,), kwargs = {})
//       %neg : [#users=1] = call_function[target=aten::neg](args = (%x,), kwargs = {})
//       return (relu, neg)
//
// - Each partition keeps its nodes in their original order. Its
//   placeholders are the values it uses from the graph's inputs and other
//   partitions, named after them, in order of first use; it returns the
//   values that later partitions or the graph's output use, one value or a
//   tuple (unpacked by getitem nodes named after the values).
// - get_attr nodes are not assigned: each partition that uses a tensor gets
//   its own get_attr of it, under the same qualified path, and registers the
//   same tensor (parameters stay shared with the module, and so with the
//   traced model). Leaf modules called in a partition are registered on its
//   submodule under their path.
// - Partitions run in dependence order, ties broken by first appearance in
//   the graph. Besides data, a partition that writes a value in place
//   (relu_, add_: the operator's schema says so) runs after every other
//   partition that reads the value earlier in the graph and before those
//   that read it later, so splitting does not reorder a read and a write.
//   (Aliasing through views is not tracked.)
// - A cond or while_loop (fx/ir/control_flow.h) is a call like any other:
//   it goes whole into its partition, its bodies with it. One whose bodies
//   write in place (Node::is_impure) is refused.
// - If the partitions depend on each other in a cycle (a node of partition 0
//   uses partition 1, which uses partition 0), no order runs them: throws
//   fx::GraphError naming the cycle.
//
// Differences from torch.fx: get_attr nodes move into the partitions that
// use them instead of becoming submodule inputs, so qualname_map is not
// needed; partitions are called in the order above (torch.fx's is a stack
// order that may differ); in-place writes order partitions.
#pragma once

#include <cstdint>
#include <functional>

#include "fx/ir/node.h"
#include "fx/runtime/graph_module.h"

namespace fx {

// Splits `module` as above. `partition_of` is called once for every
// call_function, call_method and call_module node, in program order, and
// returns a partition number >= 0 (partitions need not be numbered densely
// or in order). Submodules and the result are guarded and trained as
// `module` (the result's placeholders keep the input guards). Throws
// fx::GraphError for a negative number or a cycle between partitions.
GraphModule split_module(
    const GraphModuleImpl& module,
    const std::function<int64_t(const Node&)>& partition_of);

inline GraphModule split_module(
    const GraphModule& module,
    const std::function<int64_t(const Node&)>& partition_of) {
  return split_module(*module, partition_of);
}

}  // namespace fx
