// Node: one operation of a Graph (torch.fx's Node).
//
// A Node has an opcode, a unique name, a target, args and kwargs (Arguments
// that may reference earlier Nodes), and meta. The Graph owns its Nodes in
// program order; Node pointers stay valid until the node is erased.
//
//   %conv2d : [#users=1] = call_function[target=aten::conv2d](args = (%x, %conv1_weight), kwargs = {})
//     op()       call_function
//     name()     "conv2d"
//     target()   aten::conv2d
//     args()     (%x, %conv1_weight)
//     users()    the nodes whose args use %conv2d, each once, in the order
//                they started using it
//
// Args and kwargs change only through the setters below, which keep the
// users of every input node up to date.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fx/ir/argument.h"
#include "fx/ir/meta.h"
#include "fx/ir/target.h"

namespace c10 {
struct FunctionSchema;
}  // namespace c10

namespace fx {
class GraphError;
}  // namespace fx

namespace fx {

class Graph;

enum class Opcode : uint8_t {
  kPlaceholder,
  kGetAttr,
  kCallFunction,
  kCallModule,
  kCallMethod,
  kOutput,
};

// "placeholder", "get_attr", "call_function", "call_module", "call_method",
// "output".
const char* opcode_name(Opcode op);

namespace detail {
// A link of the Graph's circular node list; the Graph's sentinel is a bare
// link, every Node is one.
struct NodeLink {
  NodeLink* prev = this;
  NodeLink* next = this;
};

// One (producer, user) pair: lives in the user, is linked into the
// producer's list of users. (A "use" is this pair; a "user" is a Node.)
struct Use {
  Node* user = nullptr;
  Node* producer = nullptr;
  Use* prev = nullptr;
  Use* next = nullptr;
};
}  // namespace detail

// The users of a node, in the order they started using it. Editing a user's
// args invalidates the range: take users().to_vector() first to edit while
// iterating (replace_all_uses_with does).
class UserRange {
 public:
  class iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = Node*;
    using difference_type = std::ptrdiff_t;
    using pointer = Node* const*;
    using reference = Node*;
    explicit iterator(const detail::Use* use) : use_(use) {}
    Node* operator*() const { return use_->user; }
    iterator& operator++() {
      use_ = use_->next;
      return *this;
    }
    bool operator==(const iterator& o) const { return use_ == o.use_; }
    bool operator!=(const iterator& o) const { return use_ != o.use_; }

   private:
    const detail::Use* use_;
  };
  UserRange(const detail::Use* first, size_t size)
      : first_(first), size_(size) {}
  iterator begin() const { return iterator(first_); }
  iterator end() const { return iterator(nullptr); }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  std::vector<Node*> to_vector() const;
  bool contains(const Node* node) const;

 private:
  const detail::Use* first_;
  size_t size_;
};

class Node : private detail::NodeLink {
 public:
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;
  ~Node();

  Graph& graph() const { return *graph_; }
  Opcode op() const { return op_; }
  const std::string& name() const { return name_; }
  const Target& target() const { return target_; }
  const std::vector<Argument>& args() const { return args_; }
  const Kwargs& kwargs() const { return kwargs_; }

  // Replace args / kwargs; users of old and new inputs are updated (this
  // node moves to the end of each input's users, as in torch.fx).
  void set_args(std::vector<Argument> args);
  void set_kwargs(Kwargs kwargs);
  // Replace args[index].
  void update_arg(size_t index, Argument arg);
  // Set (or add) kwargs[key].
  void update_kwarg(const std::string& key, Argument arg);
  // Replace every use of `old_input` in args and kwargs with `new_input`.
  void replace_input_with(Node* old_input, Node* new_input);

  // The distinct nodes used in args and kwargs, in order of first use.
  const std::vector<Node*>& all_input_nodes() const { return input_nodes_; }
  UserRange users() const { return UserRange(first_use_, num_users_); }

  // Neighbours in program order; nullptr at either end of the graph.
  Node* prev() const;
  Node* next() const;

  // Move `x` (a node of this graph) to just before / after this node.
  //   before: a, b, c, x      a->prepend(x)  ->  x, a, b, c
  void prepend(Node* x);
  void append(Node* x);

  // Make every user of this node use `replace_with` instead, for the users
  // for which `delete_user_cb` (if given) returns true. Returns the users
  // that were changed, in users order. `replace_with` itself is never
  // changed, so a node computed from this one can take its place (torch.fx
  // needs a delete_user_cb for that). With `propagate_meta`, copies this
  // node's meta into `replace_with` (which must have none).
  //   before: %b = f(%a); %c = g(%a, %b)      a->replace_all_uses_with(x)
  //   after:  %b = f(%x); %c = g(%x, %b)      (%a has no users left)
  std::vector<Node*> replace_all_uses_with(
      Node* replace_with,
      const std::function<bool(Node*)>& delete_user_cb = nullptr,
      bool propagate_meta = false);

  Meta& meta() { return meta_; }
  const Meta& meta() const { return meta_; }
  // The tensor metadata of this node's value (meta()'s kTensorMeta), or
  // nullptr when it has none.
  const TensorMeta* tensor_meta() const { return meta_.get(kTensorMeta); }

  // Whether this node calls something: call_function, call_method or
  // call_module.
  bool is_call() const;
  // Whether this node is a call_function of an operator named one of
  // `names`, each "namespace::name" (the default overload) or
  // "namespace::name.overload"; torch.fx's `node.target in {...}`. Compares
  // the operator's name in place, allocating nothing.
  //   %relu_ = call_function[target=aten::relu_](args = (%x,))
  //   relu_->is_call_to({"aten::relu", "aten::relu_"})      true
  //   relu_->is_call_to({"aten::relu"})                     false
  bool is_call_to(std::initializer_list<std::string_view> names) const;
  // The one node that uses this one, or nullptr when none or several do.
  Node* only_user() const {
    return num_users_ == 1 ? first_use_->user : nullptr;
  }

  // The line print(graph) shows for this node:
  //   %relu : [#users=1] = call_function[target=aten::relu](args = (%x,), kwargs = {})
  std::string format_node() const;

  // Whether dead code elimination must keep this node although nothing uses
  // it: placeholders and outputs; operators that write to an input (their
  // schema says so: relu_, add_, out= variants), that return nothing, that
  // draw random numbers, or that update running statistics (batch_norm and
  // instance_norm in training mode); calls of leaf modules (opaque, so
  // assumed to have effects); registered functions not declared pure;
  // call_method of an in-place method.
  bool is_impure() const;

  // Whether Graph::erase_node removed this node (for code that iterates
  // while erasing).
  bool is_erased() const { return erased_; }

 private:
  friend class Graph;
  friend class NodeRange;
  Node(Graph* graph, Opcode op, std::string name, Target target);

  // Recomputes input_nodes_ and the use lists after args_/kwargs_ changed.
  void refresh_uses();
  void unlink_uses();

  Graph* graph_;
  Opcode op_;
  bool erased_ = false;
  std::string name_;
  Target target_;
  std::vector<Argument> args_;
  Kwargs kwargs_;
  std::vector<Node*> input_nodes_;
  // One per input node, parallel to input_nodes_.
  std::vector<detail::Use> uses_;
  // This node's users.
  detail::Use* first_use_ = nullptr;
  detail::Use* last_use_ = nullptr;
  size_t num_users_ = 0;
  Meta meta_;
};

// A node's args and kwargs bound to the parameters of `schema` (which its
// target calls): one slot per parameter, empty where the node gives none.
// Throws fx::GraphError, naming the node and the schema, for too many
// positional arguments or an unknown or repeated keyword. The one binding
// of node arguments: the executor, the code generator, the passes
// (fx/ir/operator_schemas.h) and Node::is_impure all use it.
std::vector<std::optional<Argument>> bind_node_arguments(
    const Node& node, const c10::FunctionSchema& schema);

// The error for arguments of `node` that do not fit `schema`: "%add calls
// aten::add.Tensor but <what>; its schema is ...: fix the node's args and
// kwargs to fit it".
GraphError argument_misfit(const Node& node, const c10::FunctionSchema& schema,
                           const std::string& what);

}  // namespace fx
