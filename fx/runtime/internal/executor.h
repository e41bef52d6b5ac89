// Executor: runs a Graph with operator handles and argument slots resolved
// once, at construction (GraphModule builds one at recompile()).
//
// Each node becomes an instruction that fills a boxed stack from constants
// and value slots and calls the operator (or registered function, or leaf
// module). Values are released after their last use; the last use of a value
// moves it into the call instead of copying it, and a functional operator
// that writes a copy of its `self` (index_copy, index_put, scatter) writes
// into `self` itself when that last use holds the only reference to it and
// its memory (nothing could see the write: the loop-carried key/value cache
// of a generation loop is updated in place instead of copied each step).
// run() is const and keeps its state on the stack, so one Executor may run
// on several threads at once.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <ATen/core/ivalue.h>

#include "fx/ir/graph.h"
#include "fx/runtime/leaf_module.h"

namespace fx {

// Where a graph's get_attr and call_module targets come from.
struct ExecutionEnvironment {
  // The tensor or script object at a qualified path; throws
  // (fx::GraphError) if none.
  std::function<c10::IValue(const std::string& path)> attribute;
  // The leaf module at a qualified path; nullptr if none.
  std::function<const LeafModule*(const std::string& path)> module;
};

class Executor {
 public:
  // Compiles `graph` (which must lint). Throws fx::GraphError naming the
  // node whose target or arguments cannot be resolved.
  Executor(const Graph& graph, const ExecutionEnvironment& environment);
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Runs the graph on one value per placeholder. Throws
  // fx::ExecutionError("While executing %node = ...") when a node fails.
  // `donated`: the inputs are values a graph computed that the caller
  // gives up (Body::run_donated), which an in-place twin may write over.
  c10::IValue run(std::vector<c10::IValue> inputs, bool donated = false) const;

  // The compiled form (opaque; defined in executor.cc).
  struct Program;

 private:
  struct Frame;
  std::unique_ptr<Frame> acquire_frame() const;
  void release_frame(std::unique_ptr<Frame> frame) const;

  std::unique_ptr<Program> program_;
  mutable std::mutex pool_mutex_;
  mutable std::vector<std::unique_ptr<Frame>> pool_;
};

// A subgraph (a body of control flow) compiled in `environment`, as a value
// cond and while_loop call (fx/ir/control_flow.h's Body).
c10::IValue compile_body(const Graph& body,
                         const ExecutionEnvironment& environment);

// Wraps the exception being handled into fx::ExecutionError naming `node`:
// "While executing %conv2d = call_function[...](...)\n<what went wrong>".
[[noreturn]] void rethrow_for_node(const Node& node);

}  // namespace fx
