// Control flow in the graph: torch.cond and torch.while_loop as
// call_function nodes whose bodies are subgraphs (Graph::add_subgraph) read
// by get_attr nodes, as torch.fx 2.x keeps torch.ops.higher_order.cond:
//
//   graph():
//       %x : [#users=2] = placeholder[target=x]
//       %sum : [#users=1] = call_function[target=aten::sum](args = (%x,), kwargs = {})
//       %gt : [#users=1] = call_function[target=aten::gt.Scalar](args = (%sum, 0), kwargs = {})
//       %true_graph_0 : [#users=1] = get_attr[target=true_graph_0]
//       %false_graph_0 : [#users=1] = get_attr[target=false_graph_0]
//       %cond : [#users=1] = call_function[target=cond](args = (%gt, %true_graph_0, %false_graph_0, [%x]), kwargs = {})
//       %getitem : [#users=1] = call_function[target=getitem](args = (%cond, 0), kwargs = {})
//       return getitem
//
//   true_graph_0 = graph():
//       %x : [#users=1] = placeholder[target=x]
//       ...
//
// cond(pred, true_graph, false_graph, operands) runs one body on the
// operands and returns its outputs, a tuple.
//   pred: a tensor of one element (bool, or a number: nonzero is true), or
//         a bool or an int.
//   Each body takes the operands as its placeholders, in order.
//
// while_loop(cond_graph, body_graph, carried, additional) runs body_graph
// while cond_graph says so and returns the carried values, a tuple.
//   Both take (*carried, *additional) as their placeholders; cond_graph
//   returns a one-element tensor (or a bool), body_graph the next carried
//   values: as many, each of the same dtype and sizes as before (as
//   torch.while_loop requires), else fx::ExecutionError says which.
//
// scan(combine_graph, init, xs, additional) runs combine_graph once per
// slice along dimension 0 of the xs (torch.ops.higher_order.scan, whose
// frontend moves the scanned dimension first), carrying values from one
// step to the next, and returns (*final carried values, *ys), each y its
// steps' outputs stacked along a new dimension 0.
//   combine_graph takes (*carried, *one slice of each xs, *additional) and
//   returns (*next carried values, *y): the carried values keep their
//   dtypes and sizes, each y its dtype and sizes from step to step.
//   The xs share their length, at least 1 (no step would give no ys'
//   shapes).
//
// map(body_graph, xs, additional) runs body_graph on each slice along
// dimension 0 of the xs (torch.ops.higher_order.map_impl) and returns its
// outputs, each stacked along a new dimension 0: a scan without carried
// values.
//
// At run time a get_attr of a body gives a Body (a capsule), which these
// call; the executor and the Interpreter make them.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/ivalue.h>

#include "fx/ir/function.h"

namespace fx {

class Graph;
class Node;

// A compiled body, as a value a get_attr of a subgraph gives at run time.
class Body : public torch::CustomClassHolder {
 public:
  // Runs the body on one value per placeholder; returns its output.
  virtual c10::IValue run(std::vector<c10::IValue> inputs) const = 0;
  // The same, the caller giving up `inputs`: values the graph computed that
  // nothing outside the body will read again (a while_loop's carried values
  // after its first iteration). The body may write over a tensor of them in
  // place where it holds the only reference to it and its memory (the
  // Executor's in-place twins, fx/runtime/internal/executor.cc).
  virtual c10::IValue run_donated(std::vector<c10::IValue> inputs) const {
    return run(std::move(inputs));
  }
};

c10::IValue body_value(c10::intrusive_ptr<Body> body);
// The Body in `value`; throws fx::ExecutionError naming `what` if it holds
// none.
const Body& as_body(const c10::IValue& value, const char* what);

const Function* cond_function();
const Function* while_loop_function();
const Function* scan_function();
const Function* map_function();

// Whether `node` calls cond, while_loop, scan or map.
bool is_control_flow_call(const Node& node);
// The bodies a control-flow node reads (its get_attr arguments' subgraphs),
// in argument order: {true, false} for cond, {cond, body} for while_loop,
// {combine} for scan, {body} for map.
// Throws fx::GraphError if an argument that should name one does not.
std::vector<const Graph*> bodies_of(const Node& node);

// For the layers that do not handle control flow yet: throws fx::GraphError
// naming `layer` and the graph's first cond or while_loop node when `graph`
// holds bodies; does nothing otherwise.
void refuse_control_flow(const Graph& graph, const std::string& layer);

// How control flow's messages name a value: a tensor by its metadata
// ("f32[2, 3]", TensorMeta::to_string), anything else by its kind.
std::string value_description(const c10::IValue& value);

// while_loop's (and scan's: `function`) check of one iteration (the
// executor's, generated code's and eager fx::while_loop's): `after` holds
// as many values as `before`, each a tensor of the same dtype and sizes (or
// a value of the same kind); else fx::ExecutionError naming the iteration
// and the value.
void check_carried_values(const std::vector<c10::IValue>& before,
                          const std::vector<c10::IValue>& after,
                          int64_t iteration,
                          const char* function = "while_loop");
void check_carried_values(const std::vector<at::Tensor>& before,
                          const std::vector<at::Tensor>& after,
                          int64_t iteration,
                          const char* function = "while_loop");

// The steps of scan and map: the common length along dimension 0 of `xs`
// (tensors, at least one, each of at least one dimension); else
// fx::ExecutionError naming `function` and what differs. A length of 0 is
// refused too: no step, no ys' shapes.
int64_t scan_length(const std::vector<at::Tensor>& xs, const char* function);
// Stacks each y of the steps along a new dimension 0, checking that a y
// keeps its dtype and sizes from step to step (fx::ExecutionError naming
// `function`, the step and the y otherwise).
std::vector<at::Tensor> stack_steps(
    const std::vector<std::vector<at::Tensor>>& steps, const char* function);

// One step of scan or map: the carried values and step `i`'s slices of
// the xs in; the next carried values and the step's ys out.
using StepFunction =
    std::function<std::pair<std::vector<c10::IValue>, std::vector<at::Tensor>>(
        const std::vector<c10::IValue>& carried, std::vector<at::Tensor> x,
        int64_t i)>;
// scan's and map's loop (the executor's and eager fx::scan's and
// fx::map's): `step` for each slice along dimension 0 of `xs`
// (scan_length), each step's carried values checked against the ones
// before (check_carried_values) and its ys counted against step 0's; the
// last carried values and the ys stacked (stack_steps). fx::ExecutionError
// names `function` otherwise.
std::pair<std::vector<c10::IValue>, std::vector<at::Tensor>> run_steps(
    std::vector<c10::IValue> carried, const std::vector<at::Tensor>& xs,
    const StepFunction& step, const char* function);

// The value `pred` stands for, for cond and while_loop: a one-element
// tensor's truth, or a bool's or an int's. Throws fx::ExecutionError naming
// `what` otherwise.
bool truth_of(const c10::IValue& pred, const char* what);

}  // namespace fx
