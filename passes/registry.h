// The by-name table of passes, for tools (`fx trace --passes
// fuse_conv_bn,eliminate_dead_code`) and PassManager::add(name). The list
// itself is passes/passes.def.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "passes/pass.h"

namespace fx {

struct PassInfo {
  std::string name;
  std::string description;
  std::function<std::unique_ptr<Pass>()> make;
};

// Every registered pass: passes.def's, in its order, then those added with
// register_pass.
std::vector<PassInfo> registered_passes();

// Adds a pass of a library above this one (lowering/ registers
// optimize_for_inference when it is linked). Throws fx::GraphError when the
// name is taken.
void register_pass(PassInfo info);

// A new instance of the pass named `name`; throws fx::GraphError listing
// the known names when there is none.
std::unique_ptr<Pass> make_pass(const std::string& name);

}  // namespace fx
