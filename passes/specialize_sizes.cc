#include "passes/specialize_sizes.h"

#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "fx/ir/data_dependent.h"
#include "fx/ir/errors.h"
#include "fx/ir/function.h"
#include "fx/runtime/graph_module.h"
#include "fx/runtime/guards.h"

namespace fx {
namespace {

using Values = absl::flat_hash_map<const Node*, int64_t>;

int64_t int_of(const Argument& a, const Values& values) {
  return a.is_node() ? values.at(a.to_node()) : a.to_int();
}

// `a` with the size nodes in it replaced by their values.
Argument with_values(const Argument& a, const Values& values) {
  return map_arg(a, [&values](Node* n) {
    auto it = values.find(n);
    return it == values.end() ? Argument(n) : Argument(it->second);
  });
}

}  // namespace

bool specialize_sizes(GraphModuleImpl& module) {
  Graph& graph = module.graph();
  // Values computed from an operator whose output's size depends on data
  // (aten::nonzero, ...: fx/ir/data_dependent.h), and the sizes read from
  // them: those stay nodes, whatever their example's size was.
  absl::flat_hash_set<const Node*> data_dependent;
  for (const Node* n : graph.nodes()) {
    bool from_data = returns_data_dependent_size(*n);
    for (const Node* input : n->all_input_nodes()) {
      from_data = from_data || data_dependent.contains(input);
    }
    if (from_data) data_dependent.insert(n);
  }
  // Every size's value first, so that a missing tensor_meta leaves the
  // graph as it was.
  Values values;
  std::vector<Node*> sizes;
  for (Node* n : graph.nodes()) {
    if (!is_sym_call(*n) || data_dependent.contains(n)) continue;
    const Function& f = n->target().function();
    if (n->args().size() != 2) {
      throw GraphError(absl::StrCat("specialize_sizes: %", n->name(),
                                    " takes two arguments"));
    }
    int64_t value = 0;
    if (&f == sym_size()) {
      const Argument& tensor = n->args()[0];
      const TensorMeta* meta =
          tensor.is_node() ? tensor.to_node()->meta().get(kTensorMeta) : nullptr;
      const int64_t d = n->args()[1].to_int();
      if (meta == nullptr || d < 0 ||
          d >= static_cast<int64_t>(meta->sizes.size())) {
        throw GraphError(absl::StrCat(
            "specialize_sizes: %", n->name(), " measures ",
            tensor.to_string(),
            ", whose example sizes are unknown (no tensor_meta): run "
            "ShapeProp on the graph first"));
      }
      value = meta->sizes[d];
    } else {
      // The builtin itself, as the GraphModule runs it.
      value = f({int_of(n->args()[0], values), int_of(n->args()[1], values)})
                  .toInt();
    }
    values[n] = value;
    sizes.push_back(n);
  }
  for (Node* n : graph.nodes()) {
    if (values.contains(n)) continue;
    bool uses = false;
    for (const Node* input : n->all_input_nodes()) {
      uses = uses || values.contains(input);
    }
    if (!uses) continue;
    std::vector<Argument> args;
    for (const Argument& a : n->args()) args.push_back(with_values(a, values));
    Kwargs kwargs;
    for (const auto& [name, a] : n->kwargs()) {
      kwargs.emplace_back(name, with_values(a, values));
    }
    n->set_args(std::move(args));
    n->set_kwargs(std::move(kwargs));
  }
  // Checks of sizes (fx_guard::check_size) hold at the example's.
  for (Node* n : graph.nodes().to_vector()) {
    if (n->op() != Opcode::kCallFunction || !n->target().is_operator() ||
        n->target().op().schema().name() != "fx_guard::check_size" ||
        n->args().size() != 4 || !n->args()[0].is_int() ||
        !n->args()[1].is_int() || !n->args()[2].is_string()) {
      continue;
    }
    if (size_relation_holds(n->args()[0].to_int(), n->args()[1].to_int(),
                            n->args()[2].to_string_ref())) {
      graph.erase_node(n);
    }
  }
  for (auto it = sizes.rbegin(); it != sizes.rend(); ++it) {
    graph.erase_node(*it);
  }
  // The shapes are now the example's.
  bool dynamic = false;
  for (Node* ph : graph.placeholders()) {
    const InputGuard* guard = ph->meta().get(kGuard);
    dynamic = dynamic || (guard != nullptr && !guard->dynamic.empty());
  }
  if (sizes.empty() && !dynamic) return false;
  for (Node* ph : graph.placeholders()) {
    InputGuard* guard = ph->meta().get_mutable(kGuard);
    if (guard == nullptr) continue;
    if (guard->kind == InputGuard::Kind::kTensor &&
        (!guard->check_sizes || !guard->dynamic.empty())) {
      guard->check_sizes = true;
      guard->dynamic.clear();
    }
    for (InputGuard& e : guard->elements) e.check_sizes = true;
  }
  for (Node* n : graph.nodes()) {
    if (data_dependent.contains(n)) continue;  // still symbolic
    if (TensorMeta* meta = n->meta().get_mutable(kTensorMeta)) {
      meta->symbolic_sizes.clear();
      meta->symbolic_strides.clear();
    }
    if (auto* list = n->meta().get_mutable(kTensorMetaList)) {
      for (TensorMeta& meta : *list) {
        meta.symbolic_sizes.clear();
        meta.symbolic_strides.clear();
      }
    }
  }
  module.recompile();
  return true;
}

}  // namespace fx
