// Graph: torch.fx's graph IR in C++.
//
// A Graph owns its Nodes in program order. Inserting and unlinking a node is
// O(1); Node pointers are stable; iterating over nodes() while erasing them is
// safe. Node names are unique within the graph and allocated in O(1).
//
//   fx::Graph g;
//   fx::Node* x = g.placeholder("x");
//   fx::Node* w = g.get_attr("linear.weight");
//   fx::Node* y = g.call_function(fx::op("aten::linear"), {x, w});
//   fx::Node* r = g.call_function(fx::op("aten::relu"), {y});
//   g.output(r);
//   std::cout << g;
//
//   graph():
//       %x : [#users=1] = placeholder[target=x]
//       %linear_weight : [#users=1] = get_attr[target=linear.weight]
//       %linear : [#users=1] = call_function[target=aten::linear](args = (%x, %linear_weight), kwargs = {})
//       %relu : [#users=1] = call_function[target=aten::relu](args = (%linear,), kwargs = {})
//       return relu
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <functional>
#include <iosfwd>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "fx/ir/argument.h"
#include "fx/ir/node.h"
#include "fx/ir/target.h"

namespace fx {

class Graph;

// The nodes of a graph in program order (or reversed). While a NodeRange is
// alive, erased nodes stay allocated, so erasing the current node (or any
// other) during iteration is safe; erased nodes are skipped.
class NodeRange {
 public:
  class iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = Node*;
    using difference_type = std::ptrdiff_t;
    using pointer = Node* const*;
    using reference = Node*;
    iterator(const detail::NodeLink* link, const detail::NodeLink* end,
             bool reversed)
        : link_(link), end_(end), reversed_(reversed) {
      skip_erased();
    }
    Node* operator*() const;
    iterator& operator++() {
      link_ = reversed_ ? link_->prev : link_->next;
      skip_erased();
      return *this;
    }
    bool operator==(const iterator& o) const { return link_ == o.link_; }
    bool operator!=(const iterator& o) const { return link_ != o.link_; }

   private:
    void skip_erased() {
      while (link_ != end_ && erased(link_)) {
        link_ = reversed_ ? link_->prev : link_->next;
      }
    }
    static bool erased(const detail::NodeLink* link);
    const detail::NodeLink* link_;
    const detail::NodeLink* end_;
    bool reversed_;
  };

  NodeRange(const Graph* graph, bool reversed);
  NodeRange(const NodeRange& other);
  NodeRange& operator=(const NodeRange&) = delete;
  ~NodeRange();

  iterator begin() const;
  iterator end() const;
  // The same nodes in reverse program order.
  NodeRange reversed() const { return NodeRange(graph_, !reversed_); }
  std::vector<Node*> to_vector() const;

 private:
  const Graph* graph_;
  bool reversed_;
};

inline bool NodeRange::iterator::erased(const detail::NodeLink* link) {
  return static_cast<const Node*>(link)->is_erased();
}

// Restores the graph's insertion point when it goes out of scope; returned
// by Graph::inserting_before / inserting_after. Move-only.
class InsertionGuard {
 public:
  InsertionGuard(InsertionGuard&& other) noexcept;
  InsertionGuard(const InsertionGuard&) = delete;
  InsertionGuard& operator=(const InsertionGuard&) = delete;
  InsertionGuard& operator=(InsertionGuard&&) = delete;
  ~InsertionGuard();

 private:
  friend class Graph;
  // New nodes go before (or after) `anchor`; nullptr stands for the graph's
  // sentinel, so {nullptr, before} is the end and {nullptr, after} the start.
  struct InsertPoint {
    Node* anchor = nullptr;
    bool before = true;
  };
  InsertionGuard(Graph* graph, InsertPoint saved);
  Graph* graph_;
  InsertPoint saved_;
};

// Tells a callback of each node erased from a graph while it lives;
// returned by Graph::on_erase. Move-only; must not outlive the graph.
class EraseListener {
 public:
  EraseListener(EraseListener&& other) noexcept;
  EraseListener(const EraseListener&) = delete;
  EraseListener& operator=(const EraseListener&) = delete;
  EraseListener& operator=(EraseListener&&) = delete;
  ~EraseListener();

 private:
  friend class Graph;
  EraseListener(Graph* graph, uint64_t id) : graph_(graph), id_(id) {}
  Graph* graph_;
  uint64_t id_;
};

// Maps nodes of one graph to nodes of another (graph_copy, node_copy).
using NodeMap = absl::flat_hash_map<const Node*, Node*>;

// Options of Graph::to_string.
struct PrintOptions {
  // Show each node's TensorMeta (when it has one) in the type slot:
  //   %conv2d : f32[1, 64, 112, 112] [#users=1] = ...
  bool tensor_meta = false;
};

// Implemented by the module that owns a graph (GraphModule), so that lint can
// check get_attr and call_module targets against it.
class GraphOwner {
 public:
  virtual ~GraphOwner() = default;
  virtual bool has_tensor_attribute(const std::string& path) const = 0;
  // A script object (a torchbind class's instance) a get_attr may read.
  virtual bool has_object_attribute(const std::string& /*path*/) const {
    return false;
  }
  virtual bool has_leaf_module(const std::string& path) const = 0;
};

class Graph {
 public:
  Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  ~Graph();

  NodeRange nodes() const { return NodeRange(this, /*reversed=*/false); }
  // Number of nodes (erased ones excluded).
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  // --- Creating nodes -----------------------------------------------------
  // Each inserts at the insertion point (by default, the end of the graph)
  // and names the node after its target, made unique: relu, relu_1, ...
  // A Node argument must belong to this graph.

  // An input of the graph; `name` is also the node's target.
  Node* placeholder(const std::string& name);
  // A parameter, buffer or constant by qualified path: "layer1.0.conv1.weight".
  Node* get_attr(const std::string& qualified_name);
  // A call of an operator (see fx::op) or a registered function.
  Node* call_function(const Target& target, std::vector<Argument> args = {},
                      Kwargs kwargs = {});
  // A call of a submodule's forward by qualified path: "layer1.0".
  Node* call_module(const std::string& module_path,
                    std::vector<Argument> args = {}, Kwargs kwargs = {});
  // A call of a tensor method by name, args[0] being the tensor: "relu"
  // resolves to the aten operator of that name (its overload chosen by the
  // arguments when the graph is compiled).
  Node* call_method(const std::string& method_name,
                    std::vector<Argument> args = {}, Kwargs kwargs = {});
  // The graph's result. A graph has exactly one output node.
  Node* output(Argument result);
  // The general form of the above. `name` ("" for the default) is a
  // candidate: it is made unique.
  Node* create_node(Opcode op, Target target, std::vector<Argument> args = {},
                    Kwargs kwargs = {}, std::string_view name = "");

  // Copies `node` (of any graph) into this one, mapping each node in its args
  // through `arg_transform`. The copy gets node's meta and name (made unique).
  Node* node_copy(const Node& node,
                  const std::function<Argument(Node*)>& arg_transform);
  // Copies every node of `other` but its output into this graph, recording
  // old -> new in `value_map` (which may be pre-seeded, e.g. to map
  // placeholders to existing nodes: those are then not copied). Returns
  // other's output value mapped into this graph (None if it has no output).
  Argument graph_copy(const Graph& other, NodeMap* value_map);
  // A deep copy (nodes, names, meta).
  std::unique_ptr<Graph> clone() const;

  // Removes `node`, which must have no users (else fx::GraphError naming
  // them). Its own uses of other nodes are dropped.
  void erase_node(Node* node);

  // Calls `callback` with each node erased from the graph (erase_node,
  // eliminate_dead_code), before it is freed, while the returned listener
  // lives, as MLIR's rewriter listener: a rewrite keeping facts about
  // nodes by Node* drops them there rather than at each erase.
  //   absl::flat_hash_set<const Node*> chain = ...;
  //   EraseListener listening =
  //       graph.on_erase([&](const Node* n) { chain.erase(n); });
  [[nodiscard]] EraseListener on_erase(
      std::function<void(const Node*)> callback);

  // --- Insertion point ----------------------------------------------------
  // Within the guard's scope, new nodes go before `node` (nullptr: the
  // start of the graph) or after it (nullptr: the end). As in torch.fx,
  // inserting_after(n) puts each new node right after n, so two nodes
  // created in turn end up in reverse order:
  //   { auto guard = g.inserting_after(a); b = ...; c = ...; }  // a, c, b
  // Use inserting_before(a->next()) to keep creation order.
  [[nodiscard]] InsertionGuard inserting_before(Node* node);
  [[nodiscard]] InsertionGuard inserting_after(Node* node);

  // --- Subgraphs: the bodies of control flow -----------------------------
  // A graph holds the branches of its cond nodes and the bodies of its
  // while_loop nodes by name, as torch.fx 2.x holds them as submodules; a
  // get_attr of that name reads one (fx/ir/function.h's cond, while_loop):
  //   %true_graph_0 = get_attr[target=true_graph_0]
  //   %cond = call_function[target=cond](args = (%gt, %true_graph_0, %false_graph_0, [%x]), kwargs = {})
  // A body sees its enclosing graph's owner (its get_attr targets are the
  // GraphModule's parameters and buffers), and an edit of a body changes
  // the version of every graph around it.
  //
  // Adds `body` (which must have no parent) as `name`: letters, digits and
  // '_', not starting with a digit, not taken (else fx::GraphError).
  Graph* add_subgraph(const std::string& name, std::unique_ptr<Graph> body);
  // Replaces the subgraph `name` by `body` (which must have no parent), as
  // a pass that re-traces a body does; returns it. Throws fx::GraphError,
  // changing nothing, if there is no subgraph of that name.
  Graph* replace_subgraph(const std::string& name, std::unique_ptr<Graph> body);
  // The subgraph `name`, or nullptr.
  Graph* subgraph(std::string_view name) const;
  const std::map<std::string, std::unique_ptr<Graph>, std::less<>>&
  subgraphs() const {
    return subgraphs_;
  }
  // `candidate`, or candidate_1, candidate_2, ...: the first name not taken
  // by a subgraph.
  std::string unique_subgraph_name(std::string_view candidate) const;
  // The graph holding this one as a subgraph, or nullptr.
  Graph* parent() const { return parent_; }
  // The outermost graph around this one (this one when it has no parent).
  const Graph& root() const {
    return parent_ != nullptr ? parent_->root() : *this;
  }
  // This graph and its subgraphs at every depth, in the order they print.
  std::vector<Graph*> all_graphs() const;
  // Whether `node` (a get_attr) reads a subgraph of its graph, not a tensor.
  static bool reads_subgraph(const Node& node);
  // Whether this graph holds control flow's bodies (for the layers that
  // refuse it).
  bool has_subgraphs() const { return !subgraphs_.empty(); }

  // --- Queries and checks -------------------------------------------------
  // The output node, or nullptr.
  Node* output_node() const;
  // The placeholders, in order.
  std::vector<Node*> placeholders() const;
  // Nodes with opcode `op` (and `target`), in program order.
  std::vector<Node*> find_nodes(Opcode op) const;
  std::vector<Node*> find_nodes(Opcode op, const Target& target) const;

  // Removes every node that is unused and not impure (Node::is_impure), in
  // one pass from the end, then the subgraphs no get_attr reads, and does
  // the same inside each subgraph. Returns whether anything was removed.
  //   before: %a = aten::add(%x, 1); %b = aten::relu_(%x); return x
  //   after:  %b = aten::relu_(%x); return x      (relu_ writes %x: kept)
  bool eliminate_dead_code();

  // Checks the graph's invariants and throws fx::GraphError describing the
  // first one broken: nodes belong to this graph, every argument is defined
  // before use, users lists agree with args, names are unique, exactly one
  // output node, targets have the kind their opcode needs. When the graph
  // belongs to a GraphModule, get_attr and call_module targets must exist in
  // it.
  void lint() const;

  // print(graph) in torch.fx's format; byte-identical across runs. The
  // subgraphs follow, in name order, each under a line naming its path
  // (nested ones by dotted path):
  //   graph():
  //       ...
  //
  //   true_graph_0 = graph():
  //       %x : [#users=1] = placeholder[target=x]
  //       ...
  std::string to_string(const PrintOptions& options = {}) const;
  // torch.fx's print_tabular: one row per node with opcode, name, target,
  // args and kwargs.
  std::string tabular() const;

  // Changed by every edit (nodes created, erased, moved, args changed), so
  // that a GraphModule can tell its compiled form is stale. Unique across all
  // graphs of the process: no two graphs, or two states of one, share one.
  uint64_t version() const { return version_; }

  // The module that owns this graph (a GraphModule), if any; set by it. A
  // subgraph's is its parent's.
  const GraphOwner* owner() const {
    return parent_ != nullptr ? parent_->owner() : owner_;
  }
  void set_owner(const GraphOwner* owner) { owner_ = owner; }

 private:
  friend class Node;
  friend class NodeRange;
  friend class InsertionGuard;
  friend class EraseListener;

  std::string unique_name(std::string_view candidate);
  void check_insert_point() const;
  void insert(Node* node);
  void unlink(Node* node);
  void link_before(detail::NodeLink* position, Node* node);
  void free_erased() const;

  detail::NodeLink root_;
  size_t size_ = 0;
  // Nodes per opcode, so that find_nodes stops at the last one (the
  // placeholders lead the graph: finding them reads only them).
  std::array<size_t, 6> op_counts_{};
  // The version last linted without an owner: lint is structural then, and
  // a graph that has not changed since need not be walked again.
  mutable std::atomic<uint64_t> linted_version_{0};
  InsertionGuard::InsertPoint insert_point_;

  // Unique names: used names, and for each base name the next suffix to try,
  // so that allocation is O(1) amortized (torch.fx 1.13 rescans suffixes).
  absl::flat_hash_set<std::string> used_names_;
  absl::flat_hash_map<std::string, int64_t> next_suffix_;

  // Erased nodes are kept here while a NodeRange is alive. The count is
  // atomic so that threads may iterate one graph at once (e.g. several
  // Interpreters over one GraphModule); editing is single-threaded.
  mutable std::vector<Node*> erased_;
  mutable std::atomic<int> live_ranges_{0};
  Node* output_ = nullptr;
  // on_erase's callbacks by id.
  std::vector<std::pair<uint64_t, std::function<void(const Node*)>>>
      erase_listeners_;
  uint64_t next_listener_ = 0;
  const GraphOwner* owner_ = nullptr;
  std::map<std::string, std::unique_ptr<Graph>, std::less<>> subgraphs_;
  Graph* parent_ = nullptr;
  uint64_t version_ = next_version();
  static uint64_t next_version();
  void touch() {
    for (Graph* g = this; g != nullptr; g = g->parent_) {
      g->version_ = next_version();
    }
  }
  void print(const std::string& path, const PrintOptions& options,
             std::string* out) const;
};

std::ostream& operator<<(std::ostream& os, const Graph& graph);
std::ostream& operator<<(std::ostream& os, const Node& node);

}  // namespace fx
