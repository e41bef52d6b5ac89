#include "passes/normalize_args.h"

#include <string>
#include <utility>
#include <vector>

#include <ATen/core/function_schema.h>

#include "absl/strings/str_cat.h"
#include "fx/ir/errors.h"
#include "fx/ir/operator_schemas.h"
#include "fx/runtime/graph_module.h"

namespace fx {
namespace {

// The schema of the operator `node` calls, or nullptr when it calls none.
const c10::FunctionSchema* operator_schema(const Node& node) {
  if (node.op() != Opcode::kCallFunction || !node.target().is_operator()) {
    return nullptr;
  }
  return &node.target().op().schema();
}

// Gives `node` these args and kwargs; returns whether that changed them.
bool set_call(Node* node, std::vector<Argument> args, Kwargs kwargs) {
  bool changed = false;
  if (args != node->args()) {
    node->set_args(std::move(args));
    changed = true;
  }
  if (kwargs != node->kwargs()) {
    node->set_kwargs(std::move(kwargs));
    changed = true;
  }
  return changed;
}

}  // namespace

bool normalize_args(GraphModuleImpl& module, const NormalizeOptions& options) {
  bool changed = false;
  for (Node* node : module.graph().nodes()) {
    const c10::FunctionSchema* schema = operator_schema(*node);
    if (schema == nullptr) continue;
    std::vector<std::optional<Argument>> bound =
        bind_node_arguments(*node, *schema);
    Kwargs kwargs;
    for (size_t i = 0; i < bound.size(); ++i) {
      const std::string& name = schema->arguments()[i].name();
      if (bound[i]) {
        kwargs.emplace_back(name, std::move(*bound[i]));
      } else if (!schema->arguments()[i].default_value()) {
        full_arguments(*node, *schema);  // throws: missing, no default
      } else if (options.fill_defaults) {
        kwargs.emplace_back(name, default_argument(*schema, i));
      }
    }
    changed = set_call(node, {}, std::move(kwargs)) || changed;
  }
  return changed;
}

bool denormalize_args(GraphModuleImpl& module) {
  bool changed = false;
  for (Node* node : module.graph().nodes()) {
    const c10::FunctionSchema* schema = operator_schema(*node);
    if (schema == nullptr) continue;
    auto [args, kwargs] = split_arguments(*schema, full_arguments(*node, *schema));
    changed = set_call(node, std::move(args), std::move(kwargs)) || changed;
  }
  return changed;
}

}  // namespace fx
