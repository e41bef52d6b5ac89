// The by-name table of passes, for tools (`fx trace --passes
// fuse_conv_bn,eliminate_dead_code`) and PassManager::add(name). The list
// itself is passes/passes.def.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "passes/pass.h"

namespace fx {

struct PassInfo {
  std::string name;
  std::string description;
  // Makes the pass with its options (none, for a pass that takes none:
  // make_pass refuses any option before calling it).
  std::function<std::unique_ptr<Pass>(const PassOptions&)> make;
  // The options it takes, each with what it does ({"bf16", "..."}).
  std::vector<std::pair<std::string, std::string>> options = {};
};

// Every registered pass: passes.def's, in its order, then those added with
// register_pass.
std::vector<PassInfo> registered_passes();

// Adds a pass of a library above this one (lowering/ registers
// optimize_for_inference when it is linked). Throws fx::GraphError when the
// name is taken.
void register_pass(PassInfo info);

// A new instance of the pass named `name` with `options`; throws
// fx::GraphError listing the known names when there is none, and the
// pass's options when it takes no option of a name given.
std::unique_ptr<Pass> make_pass(const std::string& name,
                                const PassOptions& options = {});

}  // namespace fx
