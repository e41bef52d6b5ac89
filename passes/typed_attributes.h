// A GraphModule for a graph written as text: the graph's get_attr targets
// get tensors made from the types their nodes are printed with, so that
// passes can run on a graph that never had a model (pass tests written as
// IR, `fx opt`):
//
//   fx::GraphModule gm = fx::parse_graph_module(R"(graph():
//       %x : f32[2, 3] = placeholder[target=x]
//       %fc_weight : f32[4, 3] = get_attr[target=fc.weight]
//       %t = call_function[target=aten::t](args = (%fc_weight,), kwargs = {})
//       %mm = call_function[target=aten::mm](args = (%x, %t), kwargs = {})
//       return mm)");
//   gm->fetch_attr("fc.weight").sizes() == [4, 3]
#pragma once

#include <string_view>

#include "fx/ir/graph.h"
#include "fx/runtime/graph_module.h"

namespace fx {

// A tensor for each get_attr target of `graph` and its bodies of control
// flow, of the type (dtype and sizes) of the first of its get_attr nodes
// that has one: floating-point
// tensors hold normal noise (seeded by the target's position in the graph,
// so a graph's tensors do not depend on other graphs), those whose path ends
// in running_var uniform noise in [0.5, 1.5) (a variance batch_norm can
// divide by), others zeros. Paths of buffers (running_*,
// num_batches_tracked, _tensor_constant*) are buffers, the others
// parameters. Throws fx::GraphError naming a target none of whose nodes has
// a type, and how to write one.
Attributes typed_attributes(const Graph& graph);

// parse_graph (fx/io/parser.h) and a GraphModule over the graph with its
// typed_attributes. Throws fx::ParseError or fx::GraphError.
GraphModule parse_graph_module(std::string_view text);

}  // namespace fx
