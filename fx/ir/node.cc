#include "fx/ir/node.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/function_schema.h>

#include <sstream>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "fx/ir/control_flow.h"
#include "fx/ir/errors.h"
#include "fx/ir/function.h"
#include "fx/ir/graph.h"

namespace fx {

const char* opcode_name(Opcode op) {
  switch (op) {
    case Opcode::kPlaceholder: return "placeholder";
    case Opcode::kGetAttr: return "get_attr";
    case Opcode::kCallFunction: return "call_function";
    case Opcode::kCallModule: return "call_module";
    case Opcode::kCallMethod: return "call_method";
    case Opcode::kOutput: return "output";
  }
  return "?";
}

std::vector<Node*> UserRange::to_vector() const {
  std::vector<Node*> out;
  out.reserve(size_);
  for (Node* n : *this) out.push_back(n);
  return out;
}

bool UserRange::contains(const Node* node) const {
  for (Node* n : *this) {
    if (n == node) return true;
  }
  return false;
}

Node::Node(Graph* graph, Opcode op, std::string name, Target target)
    : graph_(graph),
      op_(op),
      name_(std::move(name)),
      target_(std::move(target)) {}

Node::~Node() = default;

void Node::unlink_uses() {
  for (detail::Use& use : uses_) {
    Node* p = use.producer;
    if (use.prev) {
      use.prev->next = use.next;
    } else {
      p->first_use_ = use.next;
    }
    if (use.next) {
      use.next->prev = use.prev;
    } else {
      p->last_use_ = use.prev;
    }
    --p->num_users_;
  }
  uses_.clear();
  input_nodes_.clear();
}

void Node::refresh_uses() {
  // Validate first, so that a bad argument leaves the node unchanged
  // (callers restore args_ on throw).
  std::vector<Node*> inputs;
  auto collect = [&](const Argument& arg) {
    for_each_node(arg, [&](Node* n) {
      if (n == nullptr) {
        throw GraphError(absl::StrCat("node %", name_,
                                      ": an argument is a null Node*"));
      }
      if (n->graph_ != graph_ || n->erased_) {
        throw GraphError(absl::StrCat(
            "node %", name_, ": argument %", n->name_,
            n->erased_ ? " was erased from the graph"
                       : " belongs to another graph: copy it in first "
                         "(Graph::node_copy or graph_copy)"));
      }
      inputs.push_back(n);
    });
  };
  for (const Argument& a : args_) collect(a);
  for (const auto& kv : kwargs_) collect(kv.second);

  unlink_uses();
  graph_->touch();
  // Distinct, in order of first use.
  if (inputs.size() <= 16) {
    for (Node* n : inputs) {
      bool seen = false;
      for (Node* m : input_nodes_) seen = seen || m == n;
      if (!seen) input_nodes_.push_back(n);
    }
  } else {
    absl::flat_hash_set<Node*> seen;
    for (Node* n : inputs) {
      if (seen.insert(n).second) input_nodes_.push_back(n);
    }
  }
  uses_.resize(input_nodes_.size());
  for (size_t i = 0; i < input_nodes_.size(); ++i) {
    Node* p = input_nodes_[i];
    detail::Use& use = uses_[i];
    use.user = this;
    use.producer = p;
    use.next = nullptr;
    use.prev = p->last_use_;
    if (p->last_use_) {
      p->last_use_->next = &use;
    } else {
      p->first_use_ = &use;
    }
    p->last_use_ = &use;
    ++p->num_users_;
  }
}

void Node::set_args(std::vector<Argument> args) {
  std::swap(args_, args);
  try {
    refresh_uses();
  } catch (...) {
    std::swap(args_, args);
    throw;
  }
}

void Node::set_kwargs(Kwargs kwargs) {
  std::swap(kwargs_, kwargs);
  try {
    refresh_uses();
  } catch (...) {
    std::swap(kwargs_, kwargs);
    throw;
  }
}

void Node::update_arg(size_t index, Argument arg) {
  if (index >= args_.size()) {
    throw GraphError(absl::StrCat("node %", name_, " has ", args_.size(),
                                  " args; cannot update args[", index, "]"));
  }
  std::vector<Argument> args = args_;
  args[index] = std::move(arg);
  set_args(std::move(args));
}

void Node::update_kwarg(const std::string& key, Argument arg) {
  Kwargs kwargs = kwargs_;
  bool found = false;
  for (auto& kv : kwargs) {
    if (kv.first == key) {
      kv.second = arg;
      found = true;
    }
  }
  if (!found) kwargs.emplace_back(key, std::move(arg));
  set_kwargs(std::move(kwargs));
}

void Node::replace_input_with(Node* old_input, Node* new_input) {
  auto replace = [&](Node* n) -> Argument {
    return n == old_input ? Argument(new_input) : Argument(n);
  };
  std::vector<Argument> args;
  args.reserve(args_.size());
  for (const Argument& a : args_) args.push_back(map_arg(a, replace));
  Kwargs kwargs;
  kwargs.reserve(kwargs_.size());
  for (const auto& kv : kwargs_) {
    kwargs.emplace_back(kv.first, map_arg(kv.second, replace));
  }
  std::swap(args_, args);
  std::swap(kwargs_, kwargs);
  try {
    refresh_uses();
  } catch (...) {
    std::swap(args_, args);
    std::swap(kwargs_, kwargs);
    throw;
  }
}

Node* Node::prev() const {
  if (erased_ || detail::NodeLink::prev == &graph_->root_) return nullptr;
  return static_cast<Node*>(detail::NodeLink::prev);
}

Node* Node::next() const {
  if (erased_ || detail::NodeLink::next == &graph_->root_) return nullptr;
  return static_cast<Node*>(detail::NodeLink::next);
}

void Node::prepend(Node* x) {
  if (x == this) return;
  if (x->graph_ != graph_ || x->erased_ || erased_) {
    throw GraphError(absl::StrCat("cannot move %", x->name_, " before %",
                                  name_, ": both must be live nodes of one graph"));
  }
  graph_->unlink(x);
  graph_->link_before(this, x);
  graph_->touch();
}

void Node::append(Node* x) {
  if (x == this) return;
  if (x->graph_ != graph_ || x->erased_ || erased_) {
    throw GraphError(absl::StrCat("cannot move %", x->name_, " after %",
                                  name_, ": both must be live nodes of one graph"));
  }
  graph_->unlink(x);
  graph_->link_before(detail::NodeLink::next, x);
  graph_->touch();
}

bool Node::is_call() const {
  return op_ == Opcode::kCallFunction || op_ == Opcode::kCallMethod ||
         op_ == Opcode::kCallModule;
}

bool Node::is_call_to(std::initializer_list<std::string_view> names) const {
  if (op_ != Opcode::kCallFunction || !target_.is_operator()) return false;
  const c10::OperatorName& op = target_.op().operator_name();
  const std::string_view base = op.name;
  const std::string_view overload = op.overload_name;
  for (std::string_view name : names) {
    if (name.substr(0, base.size()) != base) continue;
    name.remove_prefix(base.size());
    if (overload.empty() ? name.empty()
                         : name.size() == overload.size() + 1 &&
                               name[0] == '.' && name.substr(1) == overload) {
      return true;
    }
  }
  return false;
}

std::vector<Node*> Node::replace_all_uses_with(
    Node* replace_with, const std::function<bool(Node*)>& delete_user_cb,
    bool propagate_meta) {
  if (replace_with == nullptr || replace_with->graph_ != graph_) {
    throw GraphError(absl::StrCat(
        "replace_all_uses_with: the replacement for %", name_,
        " must be a node of the same graph"));
  }
  if (propagate_meta) {
    if (!replace_with->meta_.empty()) {
      throw GraphError(absl::StrCat(
          "replace_all_uses_with(propagate_meta=true): %", replace_with->name_,
          " already has meta; clear it or propagate by hand"));
    }
    replace_with->meta_ = meta_;
  }
  std::vector<Node*> changed;
  // A snapshot: replacing an input edits the users list being walked.
  for (Node* user : users().to_vector()) {
    if (user == replace_with) continue;  // keep e.g. %y = f(%x) when x -> y
    if (delete_user_cb && !delete_user_cb(user)) continue;
    user->replace_input_with(this, replace_with);
    changed.push_back(user);
  }
  return changed;
}

namespace {

std::string schema_text(const c10::FunctionSchema& schema) {
  std::ostringstream os;
  os << schema;
  return os.str();
}

// The argument of `node` bound to schema argument `name`, or nullptr (also
// when the node's arguments do not fit the schema).
const Argument* bound_argument(const Node& node,
                               const c10::FunctionSchema& schema,
                               const std::string& name,
                               std::vector<std::optional<Argument>>* bound) {
  if (bound->empty()) {
    try {
      *bound = bind_node_arguments(node, schema);
    } catch (const GraphError&) {
      return nullptr;
    }
  }
  auto index = schema.argumentIndexWithName(name);
  if (!index || static_cast<size_t>(*index) >= bound->size() ||
      !(*bound)[*index]) {
    return nullptr;
  }
  return &*(*bound)[*index];
}

bool is_literal_false(const Argument* arg) {
  return arg && arg->is_bool() && !arg->to_bool();
}

bool schema_writes(const c10::FunctionSchema& schema) {
  for (const auto& a : schema.arguments()) {
    if (a.alias_info() && a.alias_info()->isWrite()) return true;
  }
  return false;
}

bool operator_is_impure(const Node& node, const c10::OperatorHandle& op) {
  const c10::FunctionSchema& schema = op.schema();
  std::vector<std::optional<Argument>> bound;
  if (schema_writes(schema) || schema.returns().empty()) return true;
  // Normalization ops update running statistics without saying so in their
  // schema; they are pure in inference mode, or without running stats.
  for (const char* mode : {"training", "use_input_stats"}) {
    if (schema.argumentIndexWithName(mode)) {
      const Argument* running = bound_argument(node, schema, "running_mean", &bound);
      if (schema.argumentIndexWithName("running_mean") &&
          !(running && running->is_none()) &&
          !is_literal_false(bound_argument(node, schema, mode, &bound))) {
        return true;
      }
    }
  }
  if (op.hasTag(at::Tag::nondeterministic_seeded)) {
    // Dropout in inference mode draws no random numbers.
    return !is_literal_false(bound_argument(node, schema, "train", &bound));
  }
  return false;
}

}  // namespace

bool Node::is_impure() const {
  switch (op_) {
    case Opcode::kPlaceholder:
    case Opcode::kOutput:
    case Opcode::kCallModule:
      return true;
    case Opcode::kGetAttr:
      return false;
    case Opcode::kCallFunction:
      if (target_.is_operator()) return operator_is_impure(*this, target_.op());
      if (is_control_flow_call(*this)) {
        // As impure as what its bodies run.
        for (const Graph* body : bodies_of(*this)) {
          for (const Node* n : body->nodes()) {
            if (n->op() != Opcode::kPlaceholder && n->op() != Opcode::kOutput &&
                n->is_impure()) {
              return true;
            }
          }
        }
        return false;
      }
      if (target_.is_function()) return !target_.function().is_pure();
      return true;
    case Opcode::kCallMethod: {
      if (!target_.is_string()) return true;
      const std::string& method = target_.str();
      if (!method.empty() && method.back() == '_') return true;
      auto handle =
          c10::Dispatcher::singleton().findSchema({"aten::" + method, ""});
      return !handle || operator_is_impure(*this, *handle);
    }
  }
  return true;
}

std::string Node::format_node() const {
  std::string head =
      absl::StrCat("%", name_, " : [#users=", num_users_, "] = ");
  switch (op_) {
    case Opcode::kPlaceholder:
      return absl::StrCat(head, "placeholder[target=", target_.to_string(),
                          "]");
    case Opcode::kGetAttr:
      return absl::StrCat(head, "get_attr[target=", target_.to_string(), "]");
    case Opcode::kOutput:
      return absl::StrCat(
          "return ", args_.empty() ? "None" : args_[0].to_string(false));
    default:
      return absl::StrCat(head, opcode_name(op_), "[target=",
                          target_.to_string(), "](args = ", format_args(args_),
                          ", kwargs = ", format_kwargs(kwargs_), ")");
  }
}

GraphError argument_misfit(const Node& node, const c10::FunctionSchema& schema,
                           const std::string& what) {
  return GraphError(absl::StrCat("%", node.name(), " calls ",
                                 node.target().to_string(), " but ", what,
                                 "; its schema is ", schema_text(schema),
                                 ": fix the node's args and kwargs to fit it"));
}

std::vector<std::optional<Argument>> bind_node_arguments(
    const Node& node, const c10::FunctionSchema& schema) {
  const auto& params = schema.arguments();
  size_t positional = 0;
  while (positional < params.size() && !params[positional].kwarg_only()) {
    ++positional;
  }
  if (node.args().size() > positional) {
    throw argument_misfit(node, schema,
                 absl::StrCat("it takes ", positional,
                              " positional argument(s) and is given ",
                              node.args().size()));
  }
  std::vector<std::optional<Argument>> bound(params.size());
  for (size_t i = 0; i < node.args().size(); ++i) bound[i] = node.args()[i];
  for (const auto& [name, value] : node.kwargs()) {
    auto index = schema.argumentIndexWithName(name);
    if (!index) {
      throw argument_misfit(node, schema,
                   absl::StrCat("it has no argument named '", name, "'"));
    }
    if (bound[*index]) {
      throw argument_misfit(node, schema,
                   absl::StrCat("argument '", name, "' is given twice"));
    }
    bound[*index] = value;
  }
  return bound;
}

}  // namespace fx
