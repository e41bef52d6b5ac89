// Pass: a transformation of a GraphModule.
//
// A pass edits a GraphModule in place (its graph, and the tensors it
// registers on it) and says whether it changed anything:
//
//   class MyPass : public fx::Pass {
//    public:
//     std::string name() const override { return "my_pass"; }
//     bool run(fx::GraphModuleImpl& module) override { ... }
//   };
//
// Passes never write to tensors shared with the traced model: a pass that
// computes new weights registers them as new tensors of the GraphModule.
// To run several, in order and checked, see passes/pass_manager.h; a named
// list of passes with their options is a PassPipeline (passes/pass_pipeline.h).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace fx {

// fx/runtime/graph_module.h, which pulls in the C++ frontend (torch/nn), is
// for the passes' sources: their headers only name the module.
class GraphModuleImpl;

// A pass's options as written after its name in a pipeline
// (`lower_onednn{bf16=true,decision=all}`, passes/pass_pipeline.h): name
// and value, in order. A pass that takes options is made from them
// (passes/registry.h).
using PassOptions = std::vector<std::pair<std::string, std::string>>;

// An option's value as a bool ("true", "false") or an integer; throws
// fx::GraphError naming the pass, the option and what it takes otherwise.
bool bool_option(const std::string& pass, const std::string& option,
                 const std::string& value);
int64_t int_option(const std::string& pass, const std::string& option,
                   const std::string& value);

class Pass {
 public:
  virtual ~Pass() = default;
  // The name the by-name table knows it by: "fuse_conv_bn".
  virtual std::string name() const = 0;
  // Transforms `module` in place and returns whether anything changed. The
  // graph must lint afterwards; the caller recompiles.
  virtual bool run(GraphModuleImpl& module) = 0;
  // How the pass meets control flow: the bodies of cond and while_loop
  // (fx/ir/control_flow.h), subgraphs that read the module's attributes by
  // name and take their operands as placeholders.
  enum class Bodies {
    // PassManager refuses a graph with bodies, naming the pass.
    kRefused,
    // Its work is local to a graph (a rewrite of nodes and the attributes
    // they read): PassManager runs it on the graph, then on each body in
    // turn as the module's graph (GraphModuleImpl::with_body_as_graph).
    // A body's placeholders are values of the graph around it: a pass of
    // this kind writes into none, as into no graph input.
    kEachGraph,
    // It walks the bodies itself (eliminate_dead_code, and pipelines run
    // as one pass, whose own PassManager does).
    kItself,
  };
  virtual Bodies bodies() const { return Bodies::kRefused; }
  // What the last run did, as named counts ({"convolutions", 20}), in a
  // fixed order (MLIR's pass statistics): PassManager::statistics()
  // gathers them. None by default.
  virtual std::vector<std::pair<std::string, int64_t>> statistics() const {
    return {};
  }
};

}  // namespace fx
