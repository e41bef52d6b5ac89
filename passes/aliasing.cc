#include "passes/aliasing.h"

#include <string>

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/function_schema.h>

#include "fx/ir/argument.h"
#include "fx/ir/function.h"
#include "fx/ir/target.h"

namespace fx {
namespace {

Node* first_node(const Argument& arg) {
  Node* found = nullptr;
  for_each_node(arg, [&](Node* n) {
    if (found == nullptr) found = n;
  });
  return found;
}

}  // namespace

std::vector<Node*> written_in_place(const Node& node) {
  std::vector<Node*> written;
  auto collect = [&](const Argument* arg) {
    if (arg != nullptr) {
      for_each_node(*arg, [&](Node* w) { written.push_back(w); });
    }
  };
  if (node.op() == Opcode::kCallFunction && node.target().is_operator()) {
    const auto& arguments = node.target().op().schema().arguments();
    for (size_t i = 0; i < arguments.size(); ++i) {
      const auto& alias = arguments[i].alias_info();
      if (!alias || !alias->isWrite()) continue;
      collect(i < node.args().size()
                  ? &node.args()[i]
                  : find_kwarg(node.kwargs(), arguments[i].name()));
    }
  } else if (node.op() == Opcode::kCallMethod && !node.args().empty()) {
    const std::string& method = node.target().str();
    if (!method.empty() && method.back() == '_') collect(&node.args()[0]);
  }
  return written;
}

Node* aliased_input(const Node& node) {
  const bool getitem_call = node.op() == Opcode::kCallFunction &&
                            node.target().is_function() &&
                            &node.target().function() == getitem();
  if ((node.op() == Opcode::kCallMethod || getitem_call) &&
      !node.args().empty()) {
    return first_node(node.args()[0]);
  }
  if (node.op() != Opcode::kCallFunction || !node.target().is_operator()) {
    return nullptr;
  }
  const c10::FunctionSchema& schema = node.target().op().schema();
  if (schema.returns().empty() || !schema.returns()[0].alias_info()) {
    return nullptr;
  }
  const auto& sets = schema.returns()[0].alias_info()->beforeSets();
  const auto& arguments = schema.arguments();
  for (size_t i = 0; i < arguments.size() && i < node.args().size(); ++i) {
    const auto& alias = arguments[i].alias_info();
    if (!alias) continue;
    for (const auto& set : alias->beforeSets()) {
      if (sets.count(set)) return first_node(node.args()[i]);
    }
  }
  return nullptr;
}

Node* StorageRoots::operator()(Node* node) {
  std::vector<Node*> chain;
  Node* root = node;
  while (true) {
    auto known = roots_.find(root);
    if (known != roots_.end()) {
      root = known->second;
      break;
    }
    chain.push_back(root);
    Node* input = aliased_input(*root);
    if (input == nullptr) break;
    root = input;
  }
  for (Node* n : chain) roots_[n] = root;
  return root;
}

}  // namespace fx
