// PassManager: runs passes in order (optionally again until none changes
// anything), lints the graph after each, and works on a copy, so the
// GraphModule given to it is left as it was (torch.fx's PassManager):
//
//   fx::GraphModule folded = fx::PassManager()
//                                .add("fuse_conv_bn")
//                                .add("eliminate_dead_code")
//                                .run(gm)
//                                .module;
//
// or a pipeline's steps: PassManager().add(fx::parse_pass_pipeline(
// "fuse_conv_bn,eliminate_dead_code")).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "fx/runtime/graph_module.h"
#include "passes/pass.h"
#include "passes/pass_pipeline.h"

namespace fx {

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
  // A step of a pipeline: a registered pass with its options; and each
  // step of a pipeline, in order (passes/pass_pipeline.h).
  PassManager& add(const PassStep& step);
  PassManager& add(const std::vector<PassStep>& steps);
  // Runs the whole list again while any pass changes something, at most
  // `max_rounds` times (torch.fx's PassManager `steps`).
  PassManager& to_fixpoint(int max_rounds = 10);

  // Runs the passes on a copy of `module` (sharing its tensors), linting
  // after each pass, and returns the copy, recompiled. Throws
  // fx::GraphError naming the pass after which the graph fails to lint.
  PassResult run(const GraphModule& module) const;
  // The same on `module` itself (as each pass edits the module it is
  // given); returns whether any pass changed it. A pass that throws, or a
  // graph that fails to lint, leaves it as that step left it.
  bool run_in_place(GraphModuleImpl& module) const;

  // Each pass's statistics from its last round (Pass::statistics; a pass
  // run on each body too, Pass::Bodies::kEachGraph, summed over the
  // graphs), in the passes' order: {pass name, counter name, value}.
  struct Statistic {
    std::string pass;
    std::string name;
    int64_t value = 0;
  };
  std::vector<Statistic> statistics() const;

  std::vector<std::string> names() const;

 private:
  std::vector<std::unique_ptr<Pass>> passes_;
  int max_rounds_ = 1;
  // Per pass, the statistics of the last run_in_place's last round.
  mutable std::vector<std::vector<std::pair<std::string, int64_t>>>
      statistics_;
};

}  // namespace fx
