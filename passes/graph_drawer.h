// Graph drawer: a Graph as Graphviz DOT text, and DOT rendered to SVG or PNG
// (torch.fx's passes/graph_drawer.py FxGraphDrawer, without pydot).
//
// One record-shaped box per node, coloured by opcode, listing its name,
// opcode, target, the arguments that are not nodes, its shape and dtype
// (kTensorMeta, or kTensorMetaList) and, given a CostReport, its FLOPs and
// bytes; one edge from each node to each of its users.
//
//   %x : f32[2, 3] = placeholder[target=x]
//   %relu : f32[2, 3] = call_function[target=aten::relu](args = (%x,), kwargs = {})
//   return relu
//
//   fx::render_dot(fx::to_dot(gm->graph()), "graph.svg");
//
//   digraph "fx_graph" {
//     rankdir=TB;
//     node [shape=record, style="filled,rounded", fontname="Helvetica", fontsize=10];
//     "x" [label="{name=%x|op_code=placeholder|target=x|f32[2, 3]}", fillcolor="AliceBlue"];
//     "relu" [label="{name=%relu|op_code=call_function|target=aten::relu|f32[2, 3]}", fillcolor="#CAFFE3"];
//     "output" [label="{name=%output|op_code=output|target=output}", fillcolor="PowderBlue"];
//     "x" -> "relu";
//     "relu" -> "output";
//   }
//
// The text is the same for the same graph every time (program order, users
// order), so it can be diffed and kept in golden files.
#pragma once

#include <string>

#include "fx/ir/graph.h"
#include "passes/cost_model.h"

namespace fx {

struct DotOptions {
  // The digraph's name.
  std::string name = "fx_graph";
  // Rows for each node's shape and dtype, when it has them.
  bool tensor_meta = true;
  // A row for the arguments (and one for the keyword arguments) that hold
  // no node: `args=(None, [2, 2], [3, 3])`; nodes are the edges.
  bool args = true;
  // Draw get_attr nodes (parameters, buffers) and their edges (torch.fx's
  // ignore_getattr, inverted).
  bool get_attr = true;
  // When set, rows with each node's FLOPs, MACs and bytes; unmodelled nodes
  // get a dashed border. The report must be of this graph.
  const CostReport* cost = nullptr;
};

// The fill colour of each opcode (X11 colour names or #RRGGBB), as
// torch.fx's drawer uses where it has one.
const char* dot_fill_color(Opcode op);

// `text` escaped for a field of a record label inside a quoted DOT string:
// backslash, quote, braces, bar and angle brackets are escaped, newlines
// become \n.
std::string escape_dot_record(const std::string& text);

std::string to_dot(const Graph& graph, const DotOptions& options = {});

// Renders DOT text with Graphviz's `dot` (found on PATH) into
// `output_path`, in the format its extension names: .svg, .png or .pdf.
// Throws fx::GraphError when the extension is none of those, when `dot` is
// not installed, or when it fails (with its error output).
void render_dot(const std::string& dot, const std::string& output_path);

}  // namespace fx
