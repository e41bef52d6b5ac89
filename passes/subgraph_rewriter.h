// Subgraph rewriting: find every occurrence of a pattern graph in a
// GraphModule's graph and replace it with a replacement graph (torch.fx's
// subgraph_rewriter.replace_pattern).
//
//   fx::replace_pattern(
//       *gm,
//       [](at::Tensor x, at::Tensor y) { return torch::relu(x + y); },
//       [](at::Tensor x, at::Tensor y) { return torch::clamp_min(x + y, 0); },
//       {torch::randn({2}), torch::randn({2})});
//
//   before:
//       %add : [#users=1] = call_function[target=aten::add.Tensor](args = (%x, %bias), kwargs = {})
//       %relu : [#users=1] = call_function[target=aten::relu](args = (%add,), kwargs = {})
//       %mul : [#users=1] = call_function[target=aten::mul.Tensor](args = (%relu, %x), kwargs = {})
//   after:
//       %add_1 : [#users=1] = call_function[target=aten::add.Tensor](args = (%x, %bias), kwargs = {})
//       %clamp_min : [#users=1] = call_function[target=aten::clamp_min](args = (%add_1, 0), kwargs = {})
//       %mul : [#users=1] = call_function[target=aten::mul.Tensor](args = (%clamp_min, %x), kwargs = {})
//
// How a pattern matches (as with torch.fx 1.13's SubgraphMatcher):
// - The pattern's placeholders are wildcards: each matches any value, a node
//   or a literal; a placeholder used twice must match the same value twice.
//   (Two placeholders may match the same value; torch.fx requires distinct.)
// - Every other pattern node matches a graph node with the same opcode and
//   target (aten::add.Tensor is not aten::add_.Tensor) whose args and kwargs
//   match its own: nodes recursively, lists and tuples element by element,
//   literals exactly by fx::Argument's == (so 2 does not match 2.0, and a
//   pattern written torch::add(x, y, 2) matches only adds with alpha=2: the
//   tracer records alpha=2 as a kwarg and drops alpha=1, the default). Kwargs
//   must have the same keys.
// - Matching starts from the pattern's anchors (the returned values used by
//   nothing else in the pattern), tried against graph nodes with the same
//   target in program order, and walks up through arguments: linear in the
//   graph for a pattern with one result. With several anchors, the later
//   ones are tried among the users of nodes already matched.
// - The pattern's internal nodes (all but the returned values) must have no
//   users outside the match: otherwise removing them would change the
//   program, and there is no match.
// - Matches do not overlap: when two would share a node, the one whose
//   anchor comes first in the graph wins.
// - The replacement is inserted before the match's last node, or before
//   the first node outside the match that uses a returned value if that
//   comes earlier (torch.fx inserts before that first user always). So side
//   effects keep their order: a relu_ replaced by clamp_min_ writes where
//   relu_ did. A match whose inputs are not all computed before that point
//   (a returned value feeds, outside the match, one of its inputs) is not
//   replaced, so the graph stays valid.
//
// Nodes copied from the replacement take none of its meta (its shapes are
// the example inputs'): the nodes that take the place of the pattern's
// returned values get those values' kTensorMeta/kTensorMetaList, and every
// copied node gets the innermost kModulePath containing those of
// the matched nodes ("layer1.0" for "layer1.0.conv1" and "layer1.0.bn1";
// none if no matched node has one).
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/ivalue.h>

#include "fx/ir/argument.h"
#include "fx/ir/graph.h"
#include "fx/ir/node.h"
#include "fx/runtime/graph_module.h"
#include "fx/trace/tracer.h"

namespace fx {

// One occurrence of the pattern that was replaced. Matched nodes are erased
// by the rewrite, so they are named, not pointed to (a graph never reuses a
// name); the Node pointers here are live when replace_pattern returns and
// stay valid until the graph is edited again.
struct Match {
  // The name of the graph node the pattern's first anchor matched (the node
  // that computed the pattern's result, for a pattern with one result).
  std::string anchor;
  // Pattern node name -> name of the graph node it matched, for every
  // pattern node but the placeholders and the output.
  std::map<std::string, std::string> nodes_map;
  // One per pattern placeholder, in order: the value it matched (a node, or
  // a literal). Where that node was itself a result replaced by another
  // match, the node that now stands for it.
  std::vector<Argument> inputs;
  // One per value the pattern returns, in order: the node that now computes
  // it (copied from the replacement, or one of `inputs` when the replacement
  // returns an input unchanged).
  std::vector<Node*> outputs;
  // The nodes copied from the replacement, in program order.
  std::vector<Node*> replacement_nodes;
};

// Replaces every non-overlapping occurrence of `pattern` in module's graph
// with a copy of `replacement` and recompiles the module if anything
// changed. Returns the replaced matches, in program order of their anchors.
//
// `pattern` and `replacement` have the same number of placeholders (the
// replacement's i-th placeholder receives what the pattern's i-th matched);
// each returns one value or a tuple of values, the same number. Every
// pattern node must be used (placeholders included). The replacement's
// get_attr and call_module targets must exist in `module`, or in the
// GraphModule that owns `replacement` (tensors it traced as constants): those
// are registered in `module`, under a new name if theirs is taken. Throws
// fx::GraphError, before editing anything, when these rules are broken or
// when a replacement result would be a literal.
std::vector<Match> replace_pattern(GraphModuleImpl& module,
                                   const Graph& pattern,
                                   const Graph& replacement);

// The same with the pattern and the replacement written as C++ functions
// over tensors, traced with fx::symbolic_trace on `example_inputs` (one per
// parameter). The tracer runs on shapes, so it needs example inputs; only
// their kind, rank and dtype matter to the ops traced, not their values or
// sizes, and the pattern matches graphs of any shape as long as it does not
// read sizes (x.size(0) would bake the example's size into the pattern as a
// literal). Non-tensor inputs are baked in, as literals to match.
//
//   fx::replace_pattern(
//       *gm, [](at::Tensor x) { return torch::relu_(x); },
//       [](at::Tensor x) { return torch::clamp_min_(x, 0); },
//       {torch::randn({1, 1, 1, 1})});
template <typename Pattern, typename Replacement>
std::vector<Match> replace_pattern(
    GraphModuleImpl& module, Pattern pattern, Replacement replacement,
    const std::vector<c10::IValue>& example_inputs) {
  GraphModule traced_pattern = symbolic_trace(
      nullptr, box_function(std::move(pattern), "pattern"), example_inputs);
  GraphModule traced_replacement = symbolic_trace(
      nullptr, box_function(std::move(replacement), "replacement"),
      example_inputs);
  return replace_pattern(module, traced_pattern->graph(),
                         traced_replacement->graph());
}

}  // namespace fx
