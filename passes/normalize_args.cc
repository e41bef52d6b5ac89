#include "passes/normalize_args.h"

#include <string>
#include <utility>
#include <vector>

#include <ATen/core/function_schema.h>

#include "absl/strings/str_cat.h"
#include "fx/errors.h"
#include "fx/operator_schemas.h"

namespace fx {
namespace {

// The schema of the operator `node` calls, or nullptr when it calls none.
const c10::FunctionSchema* operator_schema(const Node& node) {
  if (node.op() != Opcode::kCallFunction || !node.target().is_operator()) {
    return nullptr;
  }
  return &node.target().op().schema();
}

GraphError misfit(const Node& node, const c10::FunctionSchema& schema,
                  const std::string& what) {
  return GraphError(absl::StrCat("%", node.name(), " calls ",
                                 node.target().to_string(), " but ", what,
                                 "; its schema is ", schema_string(schema),
                                 ": fix the node's args and kwargs to fit it"));
}

// The node's args and kwargs bound to the schema's arguments: one slot per
// schema argument, empty where the node gives none.
std::vector<std::optional<Argument>> bind(const Node& node,
                                          const c10::FunctionSchema& schema) {
  const auto& params = schema.arguments();
  size_t positional = 0;
  while (positional < params.size() && !params[positional].kwarg_only()) {
    ++positional;
  }
  if (node.args().size() > positional) {
    throw misfit(node, schema,
                 absl::StrCat("it takes ", positional,
                              " positional argument(s) and is given ",
                              node.args().size()));
  }
  std::vector<std::optional<Argument>> bound(params.size());
  for (size_t i = 0; i < node.args().size(); ++i) bound[i] = node.args()[i];
  for (const auto& [name, value] : node.kwargs()) {
    auto index = schema.argumentIndexWithName(name);
    if (!index) {
      throw misfit(node, schema,
                   absl::StrCat("it has no argument named '", name, "'"));
    }
    if (bound[*index]) {
      throw misfit(node, schema,
                   absl::StrCat("argument '", name, "' is given twice"));
    }
    bound[*index] = value;
  }
  return bound;
}

// The default of schema argument `i` (which must have one) as an Argument,
// in the form the tracer records values of its type.
Argument default_argument(const c10::FunctionSchema& schema, size_t i) {
  const c10::Argument& param = schema.arguments()[i];
  return ivalue_to_argument(*param.default_value(), param.real_type(),
                            [](const at::Tensor&) { return Argument(); });
}

GraphError missing(const Node& node, const c10::FunctionSchema& schema,
                   size_t i) {
  return misfit(
      node, schema,
      absl::StrCat("it does not give argument '", schema.arguments()[i].name(),
                   "', which has no default"));
}

// One Argument per schema argument: the node's, else the default.
std::vector<Argument> full_call(const Node& node,
                                const c10::FunctionSchema& schema) {
  std::vector<std::optional<Argument>> bound = bind(node, schema);
  std::vector<Argument> full;
  full.reserve(bound.size());
  for (size_t i = 0; i < bound.size(); ++i) {
    if (bound[i]) {
      full.push_back(std::move(*bound[i]));
    } else if (schema.arguments()[i].default_value()) {
      full.push_back(default_argument(schema, i));
    } else {
      throw missing(node, schema, i);
    }
  }
  return full;
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
    std::vector<std::optional<Argument>> bound = bind(*node, *schema);
    Kwargs kwargs;
    for (size_t i = 0; i < bound.size(); ++i) {
      const std::string& name = schema->arguments()[i].name();
      if (bound[i]) {
        kwargs.emplace_back(name, std::move(*bound[i]));
      } else if (!schema->arguments()[i].default_value()) {
        throw missing(*node, *schema, i);
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
    auto [args, kwargs] = split_arguments(*schema, full_call(*node, *schema));
    changed = set_call(node, std::move(args), std::move(kwargs)) || changed;
  }
  return changed;
}

std::optional<Argument> operator_argument(const Node& node,
                                          std::string_view name) {
  const c10::FunctionSchema* schema = operator_schema(node);
  if (schema == nullptr) {
    throw GraphError(absl::StrCat("operator_argument: %", node.name(), " is a ",
                                  opcode_name(node.op()), " of ",
                                  node.target().to_string(),
                                  ", not a call_function of an operator"));
  }
  auto index =
      schema->argumentIndexWithName(c10::string_view(name.data(), name.size()));
  if (!index) return std::nullopt;
  std::optional<Argument> value = std::move(bind(node, *schema)[*index]);
  if (value) return value;
  if (!schema->arguments()[*index].default_value()) {
    throw missing(node, *schema, *index);
  }
  return default_argument(*schema, *index);
}

}  // namespace fx
