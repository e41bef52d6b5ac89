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

// Every registered pass, in the order of passes.def.
const std::vector<PassInfo>& registered_passes();

// A new instance of the pass named `name`; throws fx::GraphError listing
// the known names when there is none.
std::unique_ptr<Pass> make_pass(const std::string& name);

}  // namespace fx
