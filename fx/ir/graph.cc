#include "fx/ir/graph.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <ostream>

#include <ATen/core/dispatch/Dispatcher.h>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "fx/ir/errors.h"
#include "fx/ir/function.h"

namespace fx {
namespace {

// Names a generated C++ forward cannot use for a local variable.
bool is_reserved_name(std::string_view name) {
  static const auto* reserved = new absl::flat_hash_set<std::string_view>{
      // C++ keywords and alternative tokens.
      "alignas", "alignof", "and", "and_eq", "asm", "auto", "bitand", "bitor",
      "bool", "break", "case", "catch", "char", "char8_t", "char16_t",
      "char32_t", "class", "compl", "concept", "const", "consteval",
      "constexpr", "constinit", "const_cast", "continue", "co_await",
      "co_return", "co_yield", "decltype", "default", "delete", "do",
      "double", "dynamic_cast", "else", "enum", "explicit", "export",
      "extern", "false", "float", "for", "friend", "goto", "if", "inline",
      "int", "long", "mutable", "namespace", "new", "noexcept", "not",
      "not_eq", "nullptr", "operator", "or", "or_eq", "private", "protected",
      "public", "register", "reinterpret_cast", "requires", "return",
      "short", "signed", "sizeof", "static", "static_assert", "static_cast",
      "struct", "switch", "template", "this", "thread_local", "throw", "true",
      "try", "typedef", "typeid", "typename", "union", "unsigned", "using",
      "virtual", "void", "volatile", "wchar_t", "while", "xor", "xor_eq",
      // Namespaces and names the generated code refers to.
      "at", "c10", "std", "torch", "fx", "inputs", "self"};
  // Most node names are longer than any of these, and need no lookup.
  static const size_t longest = std::max_element(
      reserved->begin(), reserved->end(),
      [](std::string_view a, std::string_view b) {
        return a.size() < b.size();
      })->size();
  return name.size() <= longest && reserved->contains(name);
}

// torch.fx's candidate cleaning: runs of characters that cannot appear in an
// identifier become '_', and a leading digit gets a '_' in front.
std::string sanitize(std::string_view candidate) {
  auto valid = [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_';
  };
  if (!candidate.empty() &&
      !absl::ascii_isdigit(static_cast<unsigned char>(candidate[0])) &&
      std::all_of(candidate.begin(), candidate.end(), valid)) {
    return std::string(candidate);
  }
  std::string out;
  bool in_bad_run = false;
  for (char c : candidate) {
    if (valid(c)) {
      out += c;
      in_bad_run = false;
    } else if (!in_bad_run) {
      out += '_';
      in_bad_run = true;
    }
  }
  if (out.empty()) out = "_";
  if (absl::ascii_isdigit(static_cast<unsigned char>(out[0]))) out = "_" + out;
  return out;
}

// The default name of a node calling `target`.
std::string base_name(Opcode op, const Target& target) {
  std::string name;
  if (target.is_operator()) {
    name = target.op().operator_name().name;
  } else if (target.is_function()) {
    name = target.function().name();
  } else {
    name = target.str();
  }
  if (op == Opcode::kCallFunction || op == Opcode::kCallMethod) {
    size_t ns = name.rfind("::");
    if (ns != std::string::npos) name = name.substr(ns + 2);
    // Magic methods: __and__ -> and
    if (name.size() > 4 && name.compare(0, 2, "__") == 0 &&
        name.compare(name.size() - 2, 2, "__") == 0) {
      name = name.substr(2, name.size() - 4);
    }
  }
  return name;
}

std::string describe_nodes(const std::vector<Node*>& nodes) {
  std::vector<std::string> names;
  for (Node* n : nodes) names.push_back("%" + n->name());
  return absl::StrJoin(names, ", ");
}

}  // namespace

// --- NodeRange ---------------------------------------------------------------

Node* NodeRange::iterator::operator*() const {
  return static_cast<Node*>(const_cast<detail::NodeLink*>(link_));
}

NodeRange::NodeRange(const Graph* graph, bool reversed)
    : graph_(graph), reversed_(reversed) {
  ++graph_->live_ranges_;
}

NodeRange::NodeRange(const NodeRange& other)
    : graph_(other.graph_), reversed_(other.reversed_) {
  ++graph_->live_ranges_;
}

NodeRange::~NodeRange() {
  if (--graph_->live_ranges_ == 0) graph_->free_erased();
}

NodeRange::iterator NodeRange::begin() const {
  const detail::NodeLink* root = &graph_->root_;
  return iterator(reversed_ ? root->prev : root->next, root, reversed_);
}

NodeRange::iterator NodeRange::end() const {
  return iterator(&graph_->root_, &graph_->root_, reversed_);
}

std::vector<Node*> NodeRange::to_vector() const {
  std::vector<Node*> out;
  out.reserve(graph_->size());
  for (Node* n : *this) out.push_back(n);
  return out;
}

// --- InsertionGuard ----------------------------------------------------------

InsertionGuard::InsertionGuard(Graph* graph, InsertPoint saved)
    : graph_(graph), saved_(saved) {
  // Nodes erased while an insertion point is set stay allocated (as while
  // a NodeRange is live), so that an erased anchor is reported, not read
  // after it was freed.
  ++graph_->live_ranges_;
}

InsertionGuard::InsertionGuard(InsertionGuard&& other) noexcept
    : graph_(other.graph_), saved_(other.saved_) {
  other.graph_ = nullptr;
}

InsertionGuard::~InsertionGuard() {
  if (!graph_) return;
  graph_->insert_point_ = saved_;
  if (--graph_->live_ranges_ == 0) graph_->free_erased();
}

EraseListener::EraseListener(EraseListener&& other) noexcept
    : graph_(other.graph_), id_(other.id_) {
  other.graph_ = nullptr;
}

EraseListener::~EraseListener() {
  if (!graph_) return;
  auto& listeners = graph_->erase_listeners_;
  listeners.erase(std::remove_if(listeners.begin(), listeners.end(),
                                 [&](const auto& l) { return l.first == id_; }),
                  listeners.end());
}

// --- Graph -------------------------------------------------------------------

uint64_t Graph::next_version() {
  static std::atomic<uint64_t> counter{1};
  return counter.fetch_add(1, std::memory_order_relaxed);
}

Graph::Graph() = default;

Graph::~Graph() {
  detail::NodeLink* link = root_.next;
  while (link != &root_) {
    detail::NodeLink* next = link->next;
    delete static_cast<Node*>(link);
    link = next;
  }
  for (Node* n : erased_) delete n;
}

std::string Graph::unique_name(std::string_view candidate) {
  std::string name = sanitize(candidate);
  if (!is_reserved_name(name) && used_names_.insert(name).second) return name;
  // Taken: count up from a numeric suffix (add_3 -> add_4) or from the last
  // number given to this base.
  std::string_view base = name;
  int64_t number = 0;
  size_t underscore = name.rfind('_');
  if (underscore != std::string::npos && underscore > 0 &&
      underscore + 1 < name.size() &&
      std::all_of(name.begin() + underscore + 1, name.end(),
                  [](char c) { return absl::ascii_isdigit(c); }) &&
      name.size() - underscore - 1 < 18) {
    base = std::string_view(name).substr(0, underscore);
    number = std::stoll(name.substr(underscore + 1));
  }
  const absl::string_view prefix(base.data(), base.size());
  int64_t& next = next_suffix_[prefix];
  int64_t n = std::max(number, next);
  std::string candidate_name;
  do {
    candidate_name = absl::StrCat(prefix, "_", ++n);
  } while (!used_names_.insert(candidate_name).second);
  next = n;
  return candidate_name;
}

void Graph::link_before(detail::NodeLink* position, Node* node) {
  detail::NodeLink* link = node;
  link->prev = position->prev;
  link->next = position;
  position->prev->next = link;
  position->prev = link;
}

void Graph::unlink(Node* node) {
  detail::NodeLink* link = node;
  link->prev->next = link->next;
  link->next->prev = link->prev;
  // The node's own links are kept, so that an iterator standing on it can
  // still move on.
}

void Graph::check_insert_point() const {
  const Node* anchor = insert_point_.anchor;
  if (anchor != nullptr && anchor->erased_) {
    throw GraphError(absl::StrCat("the insertion point %", anchor->name(),
                                  " was erased; set a new one"));
  }
}

void Graph::insert(Node* node) {
  touch();
  const InsertionGuard::InsertPoint& p = insert_point_;
  detail::NodeLink* anchor =
      p.anchor ? static_cast<detail::NodeLink*>(p.anchor) : &root_;
  link_before(p.before ? anchor : anchor->next, node);
  ++size_;
}

Node* Graph::create_node(Opcode op, Target target, std::vector<Argument> args,
                         Kwargs kwargs, std::string_view name) {
  switch (op) {
    case Opcode::kPlaceholder:
    case Opcode::kGetAttr:
    case Opcode::kCallModule:
    case Opcode::kCallMethod:
      if (!target.is_string() || target.str().empty()) {
        throw GraphError(absl::StrCat(
            "a ", opcode_name(op),
            " node needs a non-empty string target, got '",
            target.to_string(), "'"));
      }
      break;
    case Opcode::kCallFunction:
      if (target.is_string()) {
        throw GraphError(absl::StrCat(
            "a call_function node needs an operator (fx::op(\"aten::relu\")) "
            "or a registered function as target, got the string '",
            target.str(), "'"));
      }
      break;
    case Opcode::kOutput:
      if (output_ != nullptr) {
        throw GraphError(absl::StrCat(
            "the graph already has an output node (%", output_->name(),
            "): a graph has exactly one"));
      }
      break;
  }
  check_insert_point();
  std::string candidate =
      name.empty() ? base_name(op, target) : std::string(name);
  // Arguments are validated before the node takes a name or a place, so
  // that a rejected node leaves no trace in the graph.
  auto node = std::unique_ptr<Node>(
      new Node(this, op, candidate, std::move(target)));
  node->args_ = std::move(args);
  node->kwargs_ = std::move(kwargs);
  node->refresh_uses();
  node->name_ = unique_name(candidate);
  Node* raw = node.release();
  insert(raw);
  ++op_counts_[static_cast<size_t>(op)];
  if (op == Opcode::kOutput) output_ = raw;
  return raw;
}

Node* Graph::placeholder(const std::string& name) {
  return create_node(Opcode::kPlaceholder, Target(name), {}, {}, name);
}

Node* Graph::get_attr(const std::string& qualified_name) {
  return create_node(Opcode::kGetAttr, Target(qualified_name));
}

Node* Graph::call_function(const Target& target, std::vector<Argument> args,
                           Kwargs kwargs) {
  return create_node(Opcode::kCallFunction, target, std::move(args),
                     std::move(kwargs));
}

Node* Graph::call_module(const std::string& module_path,
                         std::vector<Argument> args, Kwargs kwargs) {
  return create_node(Opcode::kCallModule, Target(module_path),
                     std::move(args), std::move(kwargs));
}

Node* Graph::call_method(const std::string& method_name,
                         std::vector<Argument> args, Kwargs kwargs) {
  return create_node(Opcode::kCallMethod, Target(method_name),
                     std::move(args), std::move(kwargs));
}

Node* Graph::output(Argument result) {
  return create_node(Opcode::kOutput, Target("output"), {std::move(result)});
}

Node* Graph::node_copy(const Node& node,
                       const std::function<Argument(Node*)>& arg_transform) {
  std::vector<Argument> args;
  args.reserve(node.args().size());
  for (const Argument& a : node.args()) {
    args.push_back(map_arg(a, arg_transform));
  }
  Kwargs kwargs;
  for (const auto& kv : node.kwargs()) {
    kwargs.emplace_back(kv.first, map_arg(kv.second, arg_transform));
  }
  Target target = node.target();
  if (node.op() == Opcode::kGetAttr && &node.graph() != this) {
    if (const Graph* body = node.graph().subgraph(target.str())) {
      // A body read from another graph comes along: reused if this graph
      // holds the same one under that name, else copied under a new name.
      const Graph* mine = subgraph(target.str());
      if (mine == nullptr || mine->to_string() != body->to_string()) {
        std::string name = unique_subgraph_name(target.str());
        add_subgraph(name, body->clone());
        target = Target(name);
      }
    }
  }
  Node* copy = create_node(node.op(), std::move(target), std::move(args),
                           std::move(kwargs), node.name());
  copy->meta_ = node.meta_;
  return copy;
}

Argument Graph::graph_copy(const Graph& other, NodeMap* value_map) {
  auto lookup = [&](Node* n) -> Argument {
    auto it = value_map->find(n);
    if (it == value_map->end()) {
      throw GraphError(absl::StrCat("graph_copy: %", n->name(),
                                    " is used before it is defined"));
    }
    return it->second;
  };
  Argument result;
  for (Node* n : other.nodes()) {
    if (value_map->contains(n)) continue;
    if (n->op() == Opcode::kOutput) {
      result = n->args().empty() ? Argument() : map_arg(n->args()[0], lookup);
      continue;
    }
    (*value_map)[n] = node_copy(*n, lookup);
  }
  return result;
}

std::unique_ptr<Graph> Graph::clone() const {
  auto copy = std::make_unique<Graph>();
  // Every subgraph keeps its name, read by a get_attr or not.
  for (const auto& [name, body] : subgraphs_) {
    copy->add_subgraph(name, body->clone());
  }
  NodeMap map;
  Argument result = copy->graph_copy(*this, &map);
  if (output_ != nullptr) {
    Node* out = copy->create_node(Opcode::kOutput, Target("output"), {result},
                                  {}, output_->name());
    out->meta_ = output_->meta_;
  }
  return copy;
}

void Graph::erase_node(Node* node) {
  if (node->graph_ != this) {
    throw GraphError(absl::StrCat("erase_node: %", node->name(),
                                  " belongs to another graph"));
  }
  if (node->erased_) {
    throw GraphError(absl::StrCat("erase_node: %", node->name(),
                                  " was already erased"));
  }
  if (node->num_users_ > 0) {
    throw GraphError(absl::StrCat(
        "erase_node: %", node->name(), " still has ", node->num_users_,
        " user(s): ", describe_nodes(node->users().to_vector()),
        "; replace its uses (replace_all_uses_with) or erase them first"));
  }
  for (size_t i = 0; i < erase_listeners_.size(); ++i) {
    erase_listeners_[i].second(node);
  }
  node->unlink_uses();
  unlink(node);
  touch();
  node->erased_ = true;
  --size_;
  --op_counts_[static_cast<size_t>(node->op())];
  if (node == output_) output_ = nullptr;
  if (live_ranges_ > 0) {
    erased_.push_back(node);
  } else {
    delete node;
  }
}

EraseListener Graph::on_erase(std::function<void(const Node*)> callback) {
  const uint64_t id = next_listener_++;
  erase_listeners_.emplace_back(id, std::move(callback));
  return EraseListener(this, id);
}

void Graph::free_erased() const {
  if (erased_.empty()) return;
  for (Node* n : erased_) delete n;
  erased_.clear();
}

InsertionGuard Graph::inserting_before(Node* node) {
  InsertionGuard guard(this, insert_point_);
  if (node != nullptr && node->graph_ != this) {
    throw GraphError(absl::StrCat("inserting_before: %", node->name(),
                                  " is not a node of this graph"));
  }
  // nullptr: the start of the graph, i.e. after the sentinel.
  insert_point_ = node ? InsertionGuard::InsertPoint{node, true}
                       : InsertionGuard::InsertPoint{nullptr, false};
  return guard;
}

InsertionGuard Graph::inserting_after(Node* node) {
  InsertionGuard guard(this, insert_point_);
  if (node != nullptr && node->graph_ != this) {
    throw GraphError(absl::StrCat("inserting_after: %", node->name(),
                                  " is not a node of this graph"));
  }
  // nullptr: the end of the graph, i.e. before the sentinel.
  insert_point_ = node ? InsertionGuard::InsertPoint{node, false}
                       : InsertionGuard::InsertPoint{nullptr, true};
  return guard;
}

Node* Graph::output_node() const { return output_; }

std::vector<Node*> Graph::placeholders() const {
  return find_nodes(Opcode::kPlaceholder);
}

std::vector<Node*> Graph::find_nodes(Opcode op) const {
  std::vector<Node*> out;
  const size_t count = op_counts_[static_cast<size_t>(op)];
  if (count == 0) return out;
  out.reserve(count);
  for (Node* n : nodes()) {
    if (n->op() == op) {
      out.push_back(n);
      if (out.size() == count) break;
    }
  }
  return out;
}

std::vector<Node*> Graph::find_nodes(Opcode op, const Target& target) const {
  std::vector<Node*> out;
  size_t left = op_counts_[static_cast<size_t>(op)];
  for (Node* n : nodes()) {
    if (left == 0) break;
    if (n->op() != op) continue;
    --left;
    if (n->target() == target) out.push_back(n);
  }
  return out;
}

bool Graph::eliminate_dead_code() {
  lint();
  bool changed = false;
  for (Node* n : nodes().reversed()) {
    if (n->num_users_ == 0 && !n->is_impure()) {
      erase_node(n);
      changed = true;
    }
  }
  if (!subgraphs_.empty()) {
    absl::flat_hash_set<std::string_view> read;
    for (Node* n : find_nodes(Opcode::kGetAttr)) read.insert(n->target().str());
    for (auto it = subgraphs_.begin(); it != subgraphs_.end();) {
      if (read.contains(it->first)) {
        changed = it->second->eliminate_dead_code() || changed;
        ++it;
      } else {
        it = subgraphs_.erase(it);
        touch();
        changed = true;
      }
    }
  }
  return changed;
}

Graph* Graph::add_subgraph(const std::string& name,
                           std::unique_ptr<Graph> body) {
  if (body == nullptr) throw GraphError("add_subgraph: the body is null");
  if (name.empty() || sanitize(name) != name) {
    throw GraphError(absl::StrCat(
        "add_subgraph: '", name, "' is not a subgraph name (letters, digits "
        "and '_', not starting with a digit)"));
  }
  if (subgraphs_.count(name) > 0) {
    throw GraphError(absl::StrCat("add_subgraph: the graph already holds a "
                                  "subgraph named '", name, "'"));
  }
  if (body->parent_ != nullptr || body->owner_ != nullptr) {
    throw GraphError(absl::StrCat(
        "add_subgraph: the body given as '", name,
        "' already belongs to a graph or a GraphModule"));
  }
  for (const Graph* g = this; g != nullptr; g = g->parent_) {
    if (g == body.get()) {
      throw GraphError("add_subgraph: a graph cannot hold itself");
    }
  }
  body->parent_ = this;
  Graph* raw = body.get();
  subgraphs_.emplace(name, std::move(body));
  touch();
  return raw;
}

Graph* Graph::replace_subgraph(const std::string& name,
                              std::unique_ptr<Graph> body) {
  auto it = subgraphs_.find(name);
  if (it == subgraphs_.end()) {
    throw GraphError(absl::StrCat("replace_subgraph: the graph holds no "
                                  "subgraph named '", name, "'"));
  }
  std::unique_ptr<Graph> old = std::move(it->second);
  subgraphs_.erase(it);
  try {
    return add_subgraph(name, std::move(body));
  } catch (...) {
    subgraphs_.emplace(name, std::move(old));
    throw;
  }
}

std::vector<Graph*> Graph::all_graphs() const {
  std::vector<Graph*> out{const_cast<Graph*>(this)};
  for (const auto& [name, body] : subgraphs_) {
    std::vector<Graph*> inner = body->all_graphs();
    out.insert(out.end(), inner.begin(), inner.end());
  }
  return out;
}

bool Graph::reads_subgraph(const Node& node) {
  return node.op() == Opcode::kGetAttr && node.target().is_string() &&
         node.graph().subgraph(node.target().str()) != nullptr;
}

Graph* Graph::subgraph(std::string_view name) const {
  auto it = subgraphs_.find(name);
  return it == subgraphs_.end() ? nullptr : it->second.get();
}

std::string Graph::unique_subgraph_name(std::string_view candidate) const {
  std::string base = sanitize(candidate.empty() ? "subgraph" : candidate);
  if (subgraphs_.count(base) == 0) return base;
  for (int64_t i = 1;; ++i) {
    std::string name = absl::StrCat(base, "_", i);
    if (subgraphs_.count(name) == 0) return name;
  }
}

void Graph::lint() const {
  const GraphOwner* owner = this->owner();
  if (owner == nullptr &&
      linted_version_.load(std::memory_order_relaxed) == version_) {
    return;
  }
  for (const auto& [name, body] : subgraphs_) {
    try {
      body->lint();
    } catch (const GraphError& e) {
      throw GraphError(absl::StrCat("in subgraph '", name, "': ", e.msg()));
    }
  }
  auto fail = [](const Node* n, const std::string& what) {
    throw GraphError(absl::StrCat("lint: %", n->name(), ": ", what));
  };
  absl::flat_hash_set<const Node*> defined;
  absl::flat_hash_set<std::string_view> names;
  defined.reserve(size());
  names.reserve(size());
  size_t outputs = 0;
  size_t count = 0;
  // Every users entry is checked to be a use its user records, and every
  // recorded use; equal totals mean each recorded use is in its input's
  // users.
  size_t edges_from_inputs = 0;
  size_t edges_from_users = 0;
  for (Node* n : nodes()) {
    ++count;
    if (n->graph_ != this) fail(n, "belongs to another graph");
    if (!names.insert(n->name()).second) fail(n, "its name is not unique");
    for (size_t i = 0; i < n->input_nodes_.size(); ++i) {
      Node* input = n->input_nodes_[i];
      if (input->graph_ != this) {
        fail(n, absl::StrCat("uses %", input->name(),
                             ", a node of another graph"));
      }
      if (!defined.contains(input)) {
        fail(n, absl::StrCat("uses %", input->name(),
                             " before it is defined"));
      }
      if (i >= n->uses_.size() || n->uses_[i].user != n ||
          n->uses_[i].producer != input) {
        fail(n, absl::StrCat("its use of %", input->name(),
                             " is not recorded"));
      }
    }
    // Each entry of the users list must be one of the user's own uses of
    // this node (checked by address: linear, where searching each user's
    // inputs is quadratic for an output of many values).
    size_t counted_users = 0;
    for (const detail::Use* use = n->first_use_;
         use != nullptr && counted_users <= n->num_users_; use = use->next) {
      ++counted_users;
      const Node* user = use->user;
      const auto address = reinterpret_cast<std::uintptr_t>(use);
      const auto first = reinterpret_cast<std::uintptr_t>(user->uses_.data());
      const size_t index = (address - first) / sizeof(detail::Use);
      if (use->producer != n || address < first ||
          index >= user->uses_.size() || &user->uses_[index] != use) {
        fail(n, absl::StrCat("lists %", user->name(),
                             " as a user, but it does not use it"));
      }
    }
    if (counted_users != n->num_users_) fail(n, "its user count is wrong");
    edges_from_inputs += n->input_nodes_.size();
    edges_from_users += counted_users;
    switch (n->op()) {
      case Opcode::kCallFunction:
        if (n->target().is_string()) {
          fail(n, "call_function needs an operator or function target");
        }
        break;
      case Opcode::kOutput:
        ++outputs;
        if (n->args().size() != 1) fail(n, "output takes exactly one arg");
        break;
      case Opcode::kGetAttr:
        if (!n->target().is_string()) fail(n, "get_attr needs a string target");
        if (subgraph(n->target().str()) != nullptr) break;
        if (owner && !owner->has_tensor_attribute(n->target().str()) &&
            !owner->has_object_attribute(n->target().str())) {
          fail(n, absl::StrCat("get_attr target '", n->target().str(),
                               "' is not a parameter, buffer, constant or "
                               "object of the owning GraphModule"));
        }
        break;
      case Opcode::kCallModule:
        if (owner && !owner->has_leaf_module(n->target().str())) {
          fail(n, absl::StrCat("call_module target '", n->target().str(),
                               "' is not a submodule of the owning "
                               "GraphModule"));
        }
        break;
      default:
        if (!n->target().is_string()) {
          fail(n, absl::StrCat(opcode_name(n->op()),
                               " needs a string target"));
        }
    }
    defined.insert(n);
  }
  if (edges_from_users != edges_from_inputs) {
    // Some use is missing from its input's users: name it.
    for (Node* n : nodes()) {
      for (Node* input : n->all_input_nodes()) {
        if (!input->users().contains(n)) {
          fail(n, absl::StrCat("uses %", input->name(),
                               " but is missing from its users"));
        }
      }
    }
    throw GraphError("lint: the users lists do not match the nodes' inputs");
  }
  if (count != size_) {
    throw GraphError(absl::StrCat("lint: the graph counts ", size_,
                                  " nodes but holds ", count));
  }
  if (outputs != 1) {
    throw GraphError(absl::StrCat("lint: the graph has ", outputs,
                                  " output nodes; it needs exactly one"));
  }
  if (owner == nullptr) {
    linted_version_.store(version_, std::memory_order_relaxed);
  }
}

std::string Graph::to_string(const PrintOptions& options) const {
  std::string out;
  print("", options, &out);
  return out;
}

void Graph::print(const std::string& path, const PrintOptions& options,
                  std::string* text) const {
  std::string& out = *text;
  if (!path.empty()) absl::StrAppend(&out, "\n\n", path, " = ");
  out += "graph():";
  for (Node* n : nodes()) {
    std::string line = n->format_node();
    if (options.tensor_meta && n->op() != Opcode::kOutput) {
      std::string type;
      if (const TensorMeta* tm = n->meta().get(kTensorMeta)) {
        type = tm->to_string();
      } else if (const auto* list = n->meta().get(kTensorMetaList)) {
        std::vector<std::string> parts;
        for (const TensorMeta& m : *list) parts.push_back(m.to_string());
        type = absl::StrCat("(", absl::StrJoin(parts, ", "), ")");
      }
      if (!type.empty()) {
        // "%x : [#users=1] = ..." -> "%x : f32[2, 3] [#users=1] = ..."
        size_t colon = line.find(" : ");
        line.insert(colon + 3, type + " ");
      }
    }
    absl::StrAppend(&out, "\n    ", line);
  }
  for (const auto& [name, body] : subgraphs_) {
    body->print(path.empty() ? name : absl::StrCat(path, ".", name), options,
                text);
  }
}

std::string Graph::tabular() const {
  std::vector<std::array<std::string, 5>> rows;
  rows.push_back({"opcode", "name", "target", "args", "kwargs"});
  for (Node* n : nodes()) {
    std::string args = Argument::tuple(n->args()).to_string(false);
    std::string kwargs = "{";
    for (size_t i = 0; i < n->kwargs().size(); ++i) {
      if (i) kwargs += ", ";
      absl::StrAppend(&kwargs, "'", n->kwargs()[i].first,
                      "': ", n->kwargs()[i].second.to_string(false));
    }
    kwargs += "}";
    rows.push_back({opcode_name(n->op()), n->name(), n->target().to_string(),
                    args, kwargs});
  }
  std::array<size_t, 5> width{};
  for (const auto& row : rows) {
    for (size_t c = 0; c < 5; ++c) width[c] = std::max(width[c], row[c].size());
  }
  std::string out;
  auto append_row = [&](const std::array<std::string, 5>& row) {
    std::string line;
    for (size_t c = 0; c < 5; ++c) {
      if (c) line += "  ";
      line += row[c];
      if (c + 1 < 5) line += std::string(width[c] - row[c].size(), ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    absl::StrAppend(&out, line, "\n");
  };
  append_row(rows[0]);
  std::array<std::string, 5> dashes;
  for (size_t c = 0; c < 5; ++c) dashes[c] = std::string(width[c], '-');
  append_row(dashes);
  for (size_t r = 1; r < rows.size(); ++r) append_row(rows[r]);
  return out;
}

std::ostream& operator<<(std::ostream& os, const Graph& graph) {
  return os << graph.to_string();
}

std::ostream& operator<<(std::ostream& os, const Node& node) {
  return os << node.format_node();
}

}  // namespace fx
