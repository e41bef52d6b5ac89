#include "passes/eliminate_common_subexpressions.h"

#include <cstdint>
#include <cstring>
#include <functional>
#include <numeric>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <ATen/core/function_schema.h>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "fx/runtime/graph_module.h"

namespace fx {
namespace {

// Aten operators whose schema declares a fresh result but which return an
// input itself, or a view of one, in some cases: dropout with train=False
// or p=0, type_as/_cast_* to the same dtype, atleast_1d of a matrix,
// einsum("ij->ji"), broadcast_tensors of one tensor, ... (each checked on
// libtorch 1.13 by comparing data pointers).
constexpr std::string_view kUndeclaredAliases[] = {
    "aten::dropout",
    "aten::feature_dropout",
    "aten::alpha_dropout",
    "aten::feature_alpha_dropout",
    "aten::type_as",
    "aten::_cast_Byte",
    "aten::_cast_Char",
    "aten::_cast_Double",
    "aten::_cast_Float",
    "aten::_cast_Half",
    "aten::_cast_Int",
    "aten::_cast_Long",
    "aten::_cast_Short",
    "aten::sum_to_size",
    "aten::atleast_1d",
    "aten::atleast_2d",
    "aten::atleast_3d",
    "aten::einsum",
    "aten::broadcast_tensors",
    "aten::meshgrid",
    "aten::cartesian_prod",
    "aten::conj_physical",
    "aten::to_dense",
    "aten::dequantize",
    "aten::lift",
    "aten::align_as",
};

bool declares_no_alias_but_may(const c10::FunctionSchema& schema) {
  for (std::string_view name : kUndeclaredAliases) {
    if (schema.name() == name) return true;
  }
  return false;
}

// The argument `node` passes as schema argument `i`, or nullptr when it
// leaves it to its default (defaults are never nodes).
const Argument* argument_at(const Node& node, const c10::FunctionSchema& schema,
                            size_t i) {
  if (i < node.args().size()) return &node.args()[i];
  return find_kwarg(node.kwargs(), schema.arguments()[i].name());
}

void for_each_input(const Node& node, const std::function<void(Node*)>& fn) {
  for (Node* input : node.all_input_nodes()) fn(input);
}

// Calls fn on each node whose value `node`'s value may alias.
void for_each_aliased_input(const Node& node,
                            const std::function<void(Node*)>& fn) {
  switch (node.op()) {
    case Opcode::kCallFunction: {
      if (!node.target().is_operator()) return for_each_input(node, fn);
      const c10::FunctionSchema& schema = node.target().op().schema();
      if (declares_no_alias_but_may(schema)) return for_each_input(node, fn);
      bool returns_alias = false;
      for (const c10::Argument& r : schema.returns()) {
        returns_alias = returns_alias || r.alias_info() != nullptr;
      }
      if (!returns_alias) return;
      for (size_t i = 0; i < schema.arguments().size(); ++i) {
        const Argument* arg = argument_at(node, schema, i);
        if (schema.arguments()[i].alias_info() && arg) for_each_node(*arg, fn);
      }
      return;
    }
    case Opcode::kCallModule:
    case Opcode::kCallMethod:
      return for_each_input(node, fn);
    default:
      return;
  }
}

// Calls fn on each node whose value the impure `node` may write.
void for_each_written_input(const Node& node,
                            const std::function<void(Node*)>& fn) {
  if (node.op() == Opcode::kCallFunction && node.target().is_operator()) {
    const c10::FunctionSchema& schema = node.target().op().schema();
    bool declared = false;
    for (size_t i = 0; i < schema.arguments().size(); ++i) {
      const auto& alias = schema.arguments()[i].alias_info();
      if (!alias || !alias->isWrite()) continue;
      declared = true;
      if (const Argument* arg = argument_at(node, schema, i)) {
        for_each_node(*arg, fn);
      }
    }
    if (declared) return;
  }
  for_each_input(node, fn);
}

// Disjoint sets of node indices (union by size, path halving).
class AliasSets {
 public:
  explicit AliasSets(size_t n) : parent_(n), size_(n, 1) {
    std::iota(parent_.begin(), parent_.end(), size_t{0});
  }
  size_t find(size_t i) {
    while (parent_[i] != i) {
      parent_[i] = parent_[parent_[i]];
      i = parent_[i];
    }
    return i;
  }
  void unite(size_t a, size_t b) {
    a = find(a);
    b = find(b);
    if (a == b) return;
    if (size_[a] < size_[b]) std::swap(a, b);
    parent_[b] = a;
    size_[a] += size_[b];
  }

 private:
  std::vector<size_t> parent_;
  std::vector<size_t> size_;
};

// For each node (by program-order index), whether its value, or a value
// aliasing it, is written by an impure node.
std::vector<bool> written_values(const std::vector<Node*>& nodes) {
  absl::flat_hash_map<const Node*, size_t> index;
  index.reserve(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) index[nodes[i]] = i;
  AliasSets sets(nodes.size());
  std::vector<size_t> writes;
  for (size_t i = 0; i < nodes.size(); ++i) {
    for_each_aliased_input(*nodes[i],
                           [&](Node* input) { sets.unite(i, index[input]); });
    Opcode op = nodes[i]->op();
    if (op != Opcode::kPlaceholder && op != Opcode::kOutput &&
        nodes[i]->is_impure()) {
      for_each_written_input(
          *nodes[i], [&](Node* input) { writes.push_back(index[input]); });
    }
  }
  std::vector<bool> written_set(nodes.size(), false);
  for (size_t w : writes) written_set[sets.find(w)] = true;
  std::vector<bool> written(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    written[i] = written_set[sets.find(i)];
  }
  return written;
}

template <typename H>
H hash_argument(H h, const Argument& arg) {
  h = H::combine(std::move(h), arg.kind());
  switch (arg.kind()) {
    case ArgumentKind::kNone:
      return h;
    case ArgumentKind::kBool:
      return H::combine(std::move(h), arg.to_bool());
    case ArgumentKind::kInt:
      return H::combine(std::move(h), arg.to_int());
    case ArgumentKind::kDouble: {
      // Argument's == compares doubles bitwise.
      double value = arg.to_double();
      uint64_t bits;
      std::memcpy(&bits, &value, sizeof(bits));
      return H::combine(std::move(h), bits);
    }
    case ArgumentKind::kComplex: {
      // == compares by value, so that -0.0 == 0.0: hash them alike.
      c10::complex<double> value = arg.to_complex();
      return H::combine(std::move(h), value.real() + 0.0, value.imag() + 0.0);
    }
    case ArgumentKind::kString:
      return H::combine(std::move(h), arg.to_string_ref());
    case ArgumentKind::kDtype:
      return H::combine(std::move(h), arg.to_dtype());
    case ArgumentKind::kLayout:
      return H::combine(std::move(h), arg.to_layout());
    case ArgumentKind::kDevice:
      return H::combine(std::move(h), arg.to_device().type(),
                        arg.to_device().index());
    case ArgumentKind::kMemoryFormat:
      return H::combine(std::move(h), arg.to_memory_format());
    case ArgumentKind::kNode:
      // Nodes are equal only to themselves.
      return H::combine(std::move(h), arg.to_node());
    case ArgumentKind::kList:
    case ArgumentKind::kTuple:
      for (const Argument& element : arg.elements()) {
        h = hash_argument(std::move(h), element);
      }
      return H::combine(std::move(h), arg.elements().size());
  }
  return h;
}

// A node as the key of what it computes: opcode, target, args and kwargs.
struct Computation {
  Node* node;

  friend bool operator==(const Computation& a, const Computation& b) {
    return a.node->op() == b.node->op() &&
           a.node->target() == b.node->target() &&
           a.node->args() == b.node->args() &&
           a.node->kwargs() == b.node->kwargs();
  }

  template <typename H>
  friend H AbslHashValue(H h, const Computation& c) {
    const Node& n = *c.node;
    h = H::combine(std::move(h), n.op(), n.target().to_string());
    for (const Argument& arg : n.args()) h = hash_argument(std::move(h), arg);
    h = H::combine(std::move(h), n.args().size());
    for (const auto& [name, value] : n.kwargs()) {
      h = hash_argument(H::combine(std::move(h), name), value);
    }
    return H::combine(std::move(h), n.kwargs().size());
  }
};

}  // namespace

bool eliminate_common_subexpressions(GraphModuleImpl& module) {
  Graph& graph = module.graph();
  // A snapshot: written_values is indexed by position in it.
  std::vector<Node*> nodes = graph.nodes().to_vector();
  std::vector<bool> written = written_values(nodes);
  // See Note [CSE and mutation] in the header.
  absl::flat_hash_map<std::string, Node*> attributes;
  absl::flat_hash_set<Computation> computations;
  bool changed = false;
  auto merge = [&](Node* duplicate, Node* kept) {
    duplicate->replace_all_uses_with(kept);
    graph.erase_node(duplicate);
    changed = true;
  };
  for (size_t i = 0; i < nodes.size(); ++i) {
    Node* node = nodes[i];
    if (node->op() == Opcode::kGetAttr) {
      auto [it, inserted] = attributes.emplace(node->target().str(), node);
      if (!inserted) merge(node, it->second);
    } else if (node->is_impure()) {
      computations.clear();
    } else if (!written[i]) {
      auto [it, inserted] = computations.insert(Computation{node});
      if (!inserted) merge(node, it->node);
    }
  }
  return changed;
}

}  // namespace fx
