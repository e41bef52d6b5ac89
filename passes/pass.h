// Passes: transformations of a GraphModule, and a pipeline to run them.
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
//
// A PassManager runs passes in order (optionally again until none changes
// anything), lints the graph after each, and works on a copy, so the
// GraphModule given to it is left as it was:
//
//   fx::GraphModule folded = fx::PassManager()
//                                .add("fuse_conv_bn")
//                                .add("eliminate_dead_code")
//                                .run(gm)
//                                .module;
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "fx/graph_module.h"

namespace fx {

class Pass {
 public:
  virtual ~Pass() = default;
  // The name the by-name table knows it by: "fuse_conv_bn".
  virtual std::string name() const = 0;
  // Transforms `module` in place and returns whether anything changed. The
  // graph must lint afterwards; the caller recompiles.
  virtual bool run(GraphModuleImpl& module) = 0;
};

struct PassResult {
  GraphModule module;
  bool modified = false;
};

class PassManager {
 public:
  PassManager();
  ~PassManager();
  PassManager(PassManager&&) noexcept;
  PassManager& operator=(PassManager&&) noexcept;

  PassManager& add(std::unique_ptr<Pass> pass);
  // A pass from the by-name table (passes/registry.h). Throws
  // fx::GraphError naming the known passes for an unknown name.
  PassManager& add(const std::string& name);
  // Runs the whole list again while any pass changes something, at most
  // `max_rounds` times (torch.fx's PassManager `steps`).
  PassManager& to_fixpoint(int max_rounds = 10);

  // Runs the passes on a copy of `module` (sharing its tensors), linting
  // after each pass, and returns the copy, recompiled. Throws
  // fx::GraphError naming the pass after which the graph fails to lint.
  PassResult run(const GraphModule& module) const;

  std::vector<std::string> names() const;

 private:
  std::vector<std::unique_ptr<Pass>> passes_;
  int max_rounds_ = 1;
};

}  // namespace fx
