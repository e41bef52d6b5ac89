#include "passes/eliminate_dead_code.h"
#include "fx/runtime/graph_module.h"

namespace fx {

bool eliminate_dead_code(GraphModuleImpl& module) {
  return module.graph().eliminate_dead_code();
}

}  // namespace fx
