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
// To run several, in order and checked, see passes/pass_manager.h.
#pragma once

#include <string>

namespace fx {

// fx/runtime/graph_module.h, which pulls in the C++ frontend (torch/nn), is
// for the passes' sources: their headers only name the module.
class GraphModuleImpl;

class Pass {
 public:
  virtual ~Pass() = default;
  // The name the by-name table knows it by: "fuse_conv_bn".
  virtual std::string name() const = 0;
  // Transforms `module` in place and returns whether anything changed. The
  // graph must lint afterwards; the caller recompiles.
  virtual bool run(GraphModuleImpl& module) = 0;
};

}  // namespace fx
