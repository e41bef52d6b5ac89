#include "passes/eliminate_noops.h"

#include <optional>
#include <string_view>

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/function_schema.h>

#include "fx/ir/function.h"
#include "fx/ir/meta.h"
#include "fx/ir/operator_schemas.h"
#include "fx/runtime/graph_module.h"

namespace fx {
namespace {

enum class Rule {
  kContiguous,  // aten::contiguous
  kTo,          // aten::to.*
  kSizes,       // aten::view, reshape, expand
  // aten::flatten.using_ints: it leaves the sizes as they are only when
  // start_dim and end_dim name the same dim, whatever the sizes; then it
  // returns its input.
  kFlatten,
};

struct NoopOperator {
  std::string_view name;
  std::string_view overload;
  Rule rule;
};

constexpr NoopOperator kNoopOperators[] = {
    {"aten::contiguous", "", Rule::kContiguous},
    {"aten::to", "dtype", Rule::kTo},
    {"aten::to", "device", Rule::kTo},
    {"aten::to", "dtype_layout", Rule::kTo},
    {"aten::to", "other", Rule::kTo},
    {"aten::view", "", Rule::kSizes},
    {"aten::reshape", "", Rule::kSizes},
    {"aten::expand", "", Rule::kSizes},
    {"aten::flatten", "using_ints", Rule::kFlatten},
};

std::optional<Rule> rule_for(const c10::FunctionSchema& schema) {
  for (const NoopOperator& op : kNoopOperators) {
    if (schema.name() == op.name && schema.overload_name() == op.overload) {
      return op.rule;
    }
  }
  return std::nullopt;
}

// Whether every input of the graph is guarded on its sizes, so that the
// sizes in kTensorMeta hold whenever the GraphModule runs.
bool sizes_guarded(const Graph& graph) {
  for (Node* placeholder : graph.placeholders()) {
    const InputGuard* guard = placeholder->meta().get(kGuard);
    if (guard == nullptr) return false;
    switch (guard->kind) {
      case InputGuard::Kind::kTensor:
        if (!guard->sizes_fixed()) return false;
        break;
      case InputGuard::Kind::kTensorList:
        for (const InputGuard& element : guard->elements) {
          if (!element.sizes_fixed()) return false;
        }
        break;
      case InputGuard::Kind::kValue:
        break;
    }
  }
  return true;
}

bool is_none_or(const std::optional<Argument>& arg, const Argument& value) {
  return arg && (arg->is_none() || *arg == value);
}

// Whether a call of aten::to.* with these arguments returns its input when
// dtype and device do not change (ATen's to_will_alias).
bool to_may_return_input(const Node& node) {
  if (!is_none_or(operator_argument(node, "copy"), false) ||
      !is_none_or(operator_argument(node, "memory_format"),
                  c10::MemoryFormat::Preserve)) {
    return false;
  }
  // to.dtype_layout only; the other overloads have neither argument.
  std::optional<Argument> layout = operator_argument(node, "layout");
  std::optional<Argument> pin_memory = operator_argument(node, "pin_memory");
  return (!layout || is_none_or(layout, c10::Layout::Strided)) &&
         (!pin_memory || is_none_or(pin_memory, false));
}

// The input whose value `node` returns unchanged, or nullptr.
Node* noop_input(const Node& node, bool sizes_are_guarded) {
  if (node.op() != Opcode::kCallFunction || !node.target().is_operator()) {
    return nullptr;
  }
  std::optional<Rule> rule = rule_for(node.target().op().schema());
  if (!rule) return nullptr;
  std::optional<Argument> self = operator_argument(node, "self");
  if (!self || !self->is_node()) return nullptr;
  Node* input = self->to_node();
  const TensorMeta* out = node.meta().get(kTensorMeta);
  const TensorMeta* in = input->meta().get(kTensorMeta);
  if (out == nullptr || in == nullptr || *out != *in) return nullptr;
  switch (*rule) {
    case Rule::kContiguous:
    case Rule::kFlatten:
      return input;
    case Rule::kTo:
      return to_may_return_input(node) ? input : nullptr;
    case Rule::kSizes:
      return sizes_are_guarded ? input : nullptr;
  }
  return nullptr;
}

// Whether a user of `node` could tell its value from its input's although
// both have the same metadata and memory: it changes the metadata of its
// argument in place, or is opaque.
bool identity_matters(const Node& node) {
  for (Node* user : node.users()) {
    switch (user->op()) {
      case Opcode::kCallFunction:
        if (user->target().is_operator()) {
          if (user->target().op().hasTag(at::Tag::inplace_view)) return true;
        } else if (!user->target().function().is_pure()) {
          return true;
        }
        break;
      case Opcode::kCallModule:
      case Opcode::kCallMethod:
        return true;
      default:
        break;
    }
  }
  return false;
}

}  // namespace

bool eliminate_noops(GraphModuleImpl& module) {
  Graph& graph = module.graph();
  const bool sizes_are_guarded = sizes_guarded(graph);
  bool changed = false;
  for (Node* node : graph.nodes()) {
    Node* input = noop_input(*node, sizes_are_guarded);
    if (input == nullptr || identity_matters(*node)) continue;
    node->replace_all_uses_with(input);
    graph.erase_node(node);
    changed = true;
  }
  return changed;
}

}  // namespace fx
