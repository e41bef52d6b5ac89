// Transformer: an Interpreter that re-traces the graph it runs, producing a
// new GraphModule (torch.fx's Transformer).
//
// Each node runs on proxies, so what it computes is recorded into the new
// graph; overriding a per-opcode method (or run_node) changes what gets
// recorded. Swapping neg and sigmoid, as torch.fx's documentation does:
//
//   class NegSigmoidSwap : public fx::Transformer {
//    public:
//     using fx::Transformer::Transformer;
//     c10::IValue call_function(const fx::Node& node, const fx::Target& target,
//                               std::vector<c10::IValue> args,
//                               fx::IValueKwargs kwargs) override {
//       if (target == fx::op("aten::sigmoid")) return torch::neg(args[0].toTensor());
//       if (target == fx::op("aten::neg")) return torch::sigmoid(args[0].toTensor());
//       return fx::Transformer::call_function(node, target, std::move(args), std::move(kwargs));
//     }
//   };
//   fx::GraphModule swapped = NegSigmoidSwap(gm).transform();
//
//   before: %neg = aten::neg(%x); %sigmoid = aten::sigmoid(%neg); return sigmoid
//   after:  %sigmoid = aten::sigmoid(%x); %neg = aten::neg(%sigmoid); return neg
//
// Parameters stay get_attr nodes of the same names, leaf modules stay
// call_module nodes and registered functions stay opaque calls; the nodes a
// node becomes keep its module_path meta. Sizes computed in the graph
// (sym_size and its arithmetic) stay nodes, and the calls that used them
// use them again, unless an override computes with them as ints (the new
// graph is then specialized to the example shapes and guards them). The new
// GraphModule keeps the input guards and the traced training mode of the
// old one (its graph keeps whatever the old one specialized). A cond or
// while_loop is traced again through fx::cond and fx::while_loop: its
// bodies run node by node through the same overrides, into new bodies.
#pragma once

#include <vector>

#include "absl/container/flat_hash_map.h"
#include "fx/trace/tracer.h"
#include "interpreter/interpreter.h"

namespace fx {

class Transformer : public Interpreter {
 public:
  explicit Transformer(GraphModule module);
  ~Transformer() override;

  // Re-traces the graph on proxies built from each placeholder's metadata
  // (its guard, or its tensor_meta), and returns the new GraphModule.
  GraphModule transform();
  // The same, with explicit example inputs (needed when a placeholder has
  // no metadata, e.g. in a graph written by hand).
  GraphModule transform(const std::vector<c10::IValue>& example_inputs);

  // What transform() builds its GraphModule from: the new graph, and the
  // attributes it reads that the old module lacks. For a pass that updates
  // the module in place: module.set_graph(std::move(r.graph),
  // std::move(r.attributes)).
  struct Result {
    std::unique_ptr<Graph> graph;
    Attributes attributes;
  };
  Result transform_graph();
  Result transform_graph(const std::vector<c10::IValue>& example_inputs);

  // Nodes recorded while `node` runs inherit its module_path meta.
  c10::IValue run_node(const Node& node) override;
  c10::IValue call_function(const Node& node, const Target& target,
                            std::vector<c10::IValue> args,
                            IValueKwargs kwargs) override;
  c10::IValue call_module(const Node& node, const Target& target,
                          std::vector<c10::IValue> args,
                          IValueKwargs kwargs) override;

 private:
  // A cond or while_loop re-traced through fx::cond / fx::while_loop, its
  // bodies run here node by node (overrides apply inside them).
  c10::IValue control_flow(const Node& node,
                           const std::vector<c10::IValue>& args);
  // The sizes a node's args hold (old sym_* nodes), as the new graph's
  // nodes: None where an arg holds no size.
  Argument new_sizes(const Argument& old) const;

  Tracer* tracer_ = nullptr;
  // Whether the graph checks the lengths of tensor lists
  // (fx_guard::check_length): the new one then does too.
  bool list_checks_ = false;
  // Each sym_* node run so far, and the node it became in the new graph.
  absl::flat_hash_map<const Node*, Node*> sizes_;
};

}  // namespace fx
