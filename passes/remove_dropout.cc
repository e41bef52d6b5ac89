#include "passes/remove_dropout.h"

#include <optional>
#include <string_view>

#include <ATen/core/function_schema.h>

#include "fx/ir/operator_schemas.h"
#include "fx/runtime/graph_module.h"

namespace fx {
namespace {

bool is_dropout(const c10::FunctionSchema& schema) {
  static constexpr std::string_view kDropouts[] = {
      "aten::dropout",
      "aten::dropout_",
      "aten::feature_dropout",
      "aten::feature_dropout_",
      "aten::alpha_dropout",
      "aten::alpha_dropout_",
      "aten::feature_alpha_dropout",
      "aten::feature_alpha_dropout_"};
  for (std::string_view name : kDropouts) {
    if (schema.name() == name) return true;
  }
  return false;
}

bool is_literal_false(const std::optional<Argument>& arg) {
  return arg && arg->is_bool() && !arg->to_bool();
}

bool is_literal_zero(const std::optional<Argument>& arg) {
  return arg && ((arg->is_int() && arg->to_int() == 0) ||
                 (arg->is_double() && arg->to_double() == 0.0));
}

// The input a dropout call that does nothing returns, or nullptr.
Node* dropout_input(const Node& node) {
  if (node.op() != Opcode::kCallFunction || !node.target().is_operator()) {
    return nullptr;
  }
  const c10::FunctionSchema& schema = node.target().op().schema();
  if (!is_dropout(schema)) return nullptr;
  if (!is_literal_false(operator_argument(node, "train")) &&
      !is_literal_zero(operator_argument(node, "p"))) {
    return nullptr;
  }
  std::optional<Argument> input =
      operator_argument(node, schema.arguments()[0].name());
  return input && input->is_node() ? input->to_node() : nullptr;
}

}  // namespace

bool is_dropout(const Node& node) {
  return node.op() == Opcode::kCallFunction && node.target().is_operator() &&
         is_dropout(node.target().op().schema());
}

bool remove_dropout(GraphModuleImpl& module) {
  Graph& graph = module.graph();
  bool changed = false;
  for (Node* node : graph.nodes()) {
    Node* input = dropout_input(*node);
    if (input == nullptr) continue;
    node->replace_all_uses_with(input);
    graph.erase_node(node);
    changed = true;
  }
  return changed;
}

}  // namespace fx
