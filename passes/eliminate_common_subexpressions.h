// Common subexpression elimination: a pure node that computes what an
// earlier node computes (same opcode, target, args and kwargs) is merged
// into it: its users use the earlier node and it is erased. get_attr nodes
// of the same target merge too.
//
//   before:  %t = call_function[target=aten::t](args = (%fc_weight,), kwargs = {})
//            %addmm = call_function[target=aten::addmm](args = (%fc_bias, %x, %t), kwargs = {})
//            %t_1 = call_function[target=aten::t](args = (%fc_weight,), kwargs = {})
//            %addmm_1 = call_function[target=aten::addmm](args = (%fc_bias, %addmm, %t_1), kwargs = {})
//   after:   %t = call_function[target=aten::t](args = (%fc_weight,), kwargs = {})
//            %addmm = call_function[target=aten::addmm](args = (%fc_bias, %x, %t), kwargs = {})
//            %addmm_1 = call_function[target=aten::addmm](args = (%fc_bias, %addmm, %t), kwargs = {})
//
// One walk in program order with a hash table of the nodes seen (linear in
// the graph's size); which node is kept never depends on hash values.
//
// Note [CSE and mutation]
// Impure nodes (Node::is_impure: in-place and out= operators, random
// operators, batch_norm in training mode, leaf modules, impure functions)
// are never merged. Two more rules keep merging sound in graphs that mutate
// tensors, as traced graphs with relu_ or add_ do:
//  1. Whenever the walk passes an impure node, it forgets every node seen so
//     far: the impure node may have written to an input of those nodes, or
//     to a view of one, so a later node with the same arguments may compute
//     something else.
//       %a = aten::relu(%x); %v = aten::view(%x, [-1]); %w = aten::add_.Scalar(%v, 1); %b = aten::relu(%x)
//     %b is not merged into %a: %x changed in between, through its view %v.
//  2. A node whose value is written by an impure node anywhere in the graph,
//     directly or through an alias, neither is merged nor absorbs others:
//     after the merge, the users of one would see the writes to the other.
//       %a = aten::relu(%x); %b = aten::relu(%x); %w = aten::add_.Scalar(%a, 1); return (%w, %b)
//     %b is not merged into %a.
//     Aliases are what operator schemas declare (views such as aten::t and
//     aten::view, in-place results, aten::chunk's pieces), plus getitem
//     of a container, calls of leaf modules, methods and registered
//     functions (assumed to alias all their inputs), and the few aten
//     operators known to return an input without declaring it (dropout in
//     eval mode, type_as, broadcast_tensors, ...; see kUndeclaredAliases).
//     An impure operator writes what its schema marks as written (`a!`);
//     other impure nodes are assumed to write every input.
// get_attr nodes of one target read the same tensor object, so they merge
// regardless of both rules.
#pragma once

#include "passes/pass.h"

namespace fx {

// Returns whether any node was merged.
bool eliminate_common_subexpressions(GraphModuleImpl& module);

class EliminateCommonSubexpressions : public Pass {
 public:
  std::string name() const override {
    return "eliminate_common_subexpressions";
  }
  Bodies bodies() const override { return Bodies::kEachGraph; }
  bool run(GraphModuleImpl& module) override {
    return eliminate_common_subexpressions(module);
  }
};

}  // namespace fx
