// Interpreter: runs a GraphModule node by node (torch.fx's Interpreter).
//
// Each opcode has a virtual method receiving the node's target and its
// arguments with node references replaced by their values; run_node
// dispatches to them. Subclass to observe or change execution:
//
//   class CountingInterpreter : public fx::Interpreter {
//    public:
//     using fx::Interpreter::Interpreter;
//     c10::IValue call_function(const fx::Node& node, const fx::Target& target,
//                               std::vector<c10::IValue> args,
//                               fx::IValueKwargs kwargs) override {
//       ++calls;
//       return fx::Interpreter::call_function(node, target, std::move(args),
//                                             std::move(kwargs));
//     }
//     int calls = 0;
//   };
//
// A failing node raises fx::ExecutionError("While executing %conv2d = ...").
// Values are freed after their last use. Unlike GraphModule::forward, run()
// checks no guards: interpreting is for analyses on any input.
//
// An Interpreter keeps the values of the run in progress in its members (as
// torch.fx's does in self.env), so one object must not run on two threads at
// once: make one Interpreter per thread (they may share the GraphModule),
// or run the GraphModule itself, whose forward is safe to call from many
// threads.
#pragma once

#include <utility>
#include <vector>

#include <ATen/core/ivalue.h>

#include "absl/container/flat_hash_map.h"
#include "fx/ir/operator_schemas.h"
#include "fx/runtime/graph_module.h"

namespace fx {

class Interpreter {
 public:
  explicit Interpreter(GraphModule module);
  virtual ~Interpreter();

  // Runs the graph on one value per placeholder and returns its output.
  // The bodies of control flow (cond, while_loop) run node by node through
  // run_node too, so an override sees their nodes.
  c10::IValue run(std::vector<c10::IValue> inputs);

  // Runs one node: fetches its arguments and calls the method of its
  // opcode.
  virtual c10::IValue run_node(const Node& node);

  virtual c10::IValue placeholder(const Node& node, const Target& target,
                                  std::vector<c10::IValue> args,
                                  IValueKwargs kwargs);
  virtual c10::IValue get_attr(const Node& node, const Target& target,
                               std::vector<c10::IValue> args,
                               IValueKwargs kwargs);
  virtual c10::IValue call_function(const Node& node, const Target& target,
                                    std::vector<c10::IValue> args,
                                    IValueKwargs kwargs);
  virtual c10::IValue call_module(const Node& node, const Target& target,
                                  std::vector<c10::IValue> args,
                                  IValueKwargs kwargs);
  virtual c10::IValue call_method(const Node& node, const Target& target,
                                  std::vector<c10::IValue> args,
                                  IValueKwargs kwargs);
  virtual c10::IValue output(const Node& node, const Target& target,
                             std::vector<c10::IValue> args,
                             IValueKwargs kwargs);

  GraphModule& module() { return module_; }

 protected:
  // The node's args and kwargs with node references replaced by values.
  std::pair<std::vector<c10::IValue>, IValueKwargs> fetch_args_kwargs_from_env(
      const Node& node);
  // An Argument with node references replaced by values.
  c10::IValue materialize(const Argument& arg);
  // The value of a node computed so far in this run.
  const c10::IValue& value_of(const Node& node) const;
  // Runs `graph` (the module's graph or a body in it) on one value per
  // placeholder, inside the run in progress, whose values it leaves as
  // they were.
  c10::IValue run_graph(const Graph& graph, std::vector<c10::IValue> inputs);

  GraphModule module_;
  absl::flat_hash_map<const Node*, c10::IValue> env_;

 private:
  // For each node, the nodes whose last use it is.
  absl::flat_hash_map<const Node*, std::vector<const Node*>> last_uses_;
  std::vector<c10::IValue> inputs_;
  size_t next_input_ = 0;
};

}  // namespace fx
