// parse_graph: reads the text that Graph::to_string prints back into a Graph.
//
// The printed graph is the textual IR: torch.fx's print(graph) format, which
// a parser reads back into an identical graph (same nodes, names, targets,
// args and kwargs, in the same order), so graphs can be saved, diffed,
// written by hand in tests, and edited in a text editor.
//
//   std::unique_ptr<fx::Graph> g = fx::parse_graph(R"(graph():
//       %x : [#users=1] = placeholder[target=x]
//       %linear_weight : [#users=1] = get_attr[target=linear.weight]
//       %linear : [#users=1] = call_function[target=aten::linear](args = (%x, %linear_weight), kwargs = {})
//       %relu : [#users=1] = call_function[target=aten::relu](args = (%linear,), kwargs = {})
//       return relu)");
//   g->to_string() == the text above
//
// What the parser accepts:
//   - `%name : [#users=N] = opcode[target=T](args = (...), kwargs = {...})`,
//     one node per line, with placeholder and get_attr lines ending after
//     `[target=T]`, and one `return value` line. Indentation is free; blank
//     lines and lines starting with `#` are skipped.
//   - ` : [#users=N]` is optional and not checked: users are recomputed
//     (`%r = call_function[...](...)` is enough).
//   - The type slot that PrintOptions::tensor_meta prints
//     (`%x : f32[1, 3]{3, 1} [#users=1] = ...`, or a tuple of such types) sets
//     the node's kTensorMeta (kTensorMetaList for a tuple). The text has no
//     device or requires_grad: the parsed meta says cpu and false.
//   - Values as Argument::to_string prints them: None, True, False, ints,
//     floats (1.0, 1e-05, inf, nan), complex numbers (2j, (1+2j)),
//     'strings' (with Python escapes), torch.float32 and the other dtypes,
//     torch.strided, torch.contiguous_format, device(type='cpu'),
//     [lists], (tuples,), and `%name` references to earlier nodes (bare
//     names in the return line).
//   - After the return line, subgraphs (the bodies of control flow,
//     fx/ir/control_flow.h), each from a line `name = graph():` to its own
//     return line; a nested one is named by its dotted path (`a.b`) and
//     follows its parent.
//   - call_function targets name a registered function (fx::wrap,
//     register_function) or else an operator (`aten::add.Tensor`); both
//     must be registered in this program before parsing.
//
// Anything else throws fx::ParseError with the line and column of the first
// problem, the offending line, and what was expected; it never crashes and
// never returns a partial graph.
#pragma once

#include <memory>
#include <string_view>

#include "fx/ir/graph.h"

namespace fx {

std::unique_ptr<Graph> parse_graph(std::string_view text);

}  // namespace fx
