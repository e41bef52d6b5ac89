#include "passes/fold_constants.h"

#include <ATen/core/dispatch/Dispatcher.h>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "fx/ir/function.h"
#include "fx/ir/operator_schemas.h"
#include "fx/runtime/graph_module.h"
#include "passes/aliasing.h"

namespace fx {
namespace {

// Whether `user`'s value may be a view of `input` (so writing to it would
// write to `input`): the schema marks the parameter `input` is bound to
// with an alias set (Tensor(a) self -> Tensor(a)), or the user is getitem.
bool may_alias(const Node& user, const Node* input) {
  if (user.op() == Opcode::kCallFunction && user.target().is_function()) {
    return user.target().function().name() == "getitem";
  }
  std::optional<AliasedUse> use = aliased_use(user, input);
  return !use || use->aliased;  // unknown: assume it may
}

// Whether `user` may write into `input`: an impure operator whose schema
// marks the parameter `input` is bound to as written (Tensor(a!)), or
// anything impure that is not an operator (or whose arguments do not bind).
// An impure operator that writes elsewhere (a random one, or
// fx_onednn::conv_add_ for its weight) leaves `input` alone.
bool may_write(const Node& user, const Node* input) {
  if (!user.is_impure()) return false;
  if (user.op() == Opcode::kCallFunction && user.target().is_operator()) {
    std::optional<AliasedUse> use = aliased_use(user, input);
    if (use) return use->written;
  }
  return true;
}

// Whether a node produces one tensor or one script object (a torchbind
// class's: quantized::conv2d_prepack's packed weights), what an init step
// can store.
bool produces_storable(const Node& n) {
  if (n.meta().get(kTensorMeta) != nullptr) return true;
  if (n.op() == Opcode::kCallFunction && n.target().is_operator()) {
    const auto& returns = n.target().op().schema().returns();
    if (returns.size() != 1) return false;
    const c10::TypePtr& type = returns[0].type();
    if (type->kind() == c10::TypeKind::TensorType) return true;
    const auto cls = type->cast<c10::ClassType>();
    return cls != nullptr && cls->name().has_value() &&
           cls->name()->qualifiedName().rfind("__torch__.torch.classes.", 0) ==
               0;
  }
  return false;
}

// The folded attribute for `boundary`: _folded.<name>, made unique.
std::string attribute_path(const GraphModuleImpl& module, const Node& boundary,
                           absl::flat_hash_set<std::string>* taken) {
  std::string path = absl::StrCat("_folded.", boundary.name());
  for (int i = 1; module.has_tensor_attribute(path) ||
                  module.has_object_attribute(path) || taken->contains(path);
       ++i) {
    path = absl::StrCat("_folded.", boundary.name(), "_", i);
  }
  taken->insert(path);
  return path;
}

// What folding does to a graph, worked out before anything changes: the init
// step, and the nodes whose values it stores (its outputs, in order).
struct FoldPlan {
  GraphModuleImpl::InitStep step;
  std::vector<Node*> boundary;
  absl::flat_hash_set<const Node*> foldable;
};

// Whether `n` makes a tensor of its own storage (a factory, or a clone):
// what a write into its value changes nothing else. An operator that may
// return its input without saying so (dropout in inference mode, type_as to
// the same dtype) is not one.
bool makes_new_tensor(const Node& n) {
  if (n.op() != Opcode::kCallFunction || !n.target().is_operator()) {
    return false;
  }
  static const absl::flat_hash_set<std::string> kFactories = {
      "aten::zeros",     "aten::ones",       "aten::full",
      "aten::empty",     "aten::zeros_like", "aten::ones_like",
      "aten::full_like", "aten::empty_like", "aten::new_zeros",
      "aten::new_ones",  "aten::new_full",   "aten::new_empty",
      "aten::clone",     "aten::arange",     "aten::eye"};
  return kFactories.contains(n.target().op().operator_name().name);
}

// FoldOptions::writes: an operator that writes in place only into tensors
// the graph's factories made (their storage roots, through views), and
// draws no random numbers. It folds when those factories fold.
bool writes_only_made_tensors(const Node& n, StorageRoots& roots) {
  if (n.op() != Opcode::kCallFunction || !n.target().is_operator() ||
      n.target().op().hasTag(at::Tag::nondeterministic_seeded)) {
    return false;
  }
  const std::vector<Node*> written = written_in_place(n);
  if (written.empty()) return false;
  for (Node* w : written) {
    if (!makes_new_tensor(*roots(w))) return false;
  }
  return true;
}

// new_zeros / new_ones / new_full of a literal size, which read their input
// for its dtype only, as the call of zeros / ones / full of that dtype that
// the init graph makes instead (FoldOptions::writes); nullopt for any other
// node.
struct NewTensorCall {
  Target target;
  std::vector<Argument> args;
  Kwargs kwargs;
};
std::optional<NewTensorCall> unbound_new_tensor(const Node& n) {
  const bool full = n.is_call_to({"aten::new_full"});
  if (!full && !n.is_call_to({"aten::new_zeros", "aten::new_ones"})) {
    return std::nullopt;
  }
  CallArguments args(n);
  const Argument& size = args["size"];
  bool literal = size.is_list();
  if (literal) {
    for (const Argument& d : size.elements()) literal = literal && d.is_int();
  }
  const TensorMeta* self = args["self"].is_node()
                               ? args["self"].to_node()->tensor_meta()
                               : nullptr;
  if (!literal || (full && args["fill_value"].is_node()) ||
      (args["dtype"].is_none() && self == nullptr) ||
      (!args["device"].is_none() && args["device"].is_node())) {
    return std::nullopt;
  }
  NewTensorCall call{op(full ? "aten::full"
                             : n.is_call_to({"aten::new_zeros"}) ? "aten::zeros"
                                                                   : "aten::ones"),
                     {size},
                     {{"dtype", args["dtype"].is_none() ? Argument(self->dtype)
                                                        : args["dtype"]},
                      {"layout", args["layout"]},
                      {"device", args["device"]},
                      {"pin_memory", args["pin_memory"]}}};
  if (full) call.args.push_back(args["fill_value"]);
  return call;
}

// The values of `graph` changed between runs: written by something impure,
// directly or through a view (but by `made_writers`, writers into tensors
// the graph makes).
absl::flat_hash_set<const Node*> mutated_values(
    const Graph& graph, const absl::flat_hash_set<const Node*>& made_writers) {
  absl::flat_hash_set<const Node*> mutated;
  for (Node* n : graph.nodes().reversed()) {
    for (Node* user : n->users()) {
      if ((!made_writers.contains(user) && may_write(*user, n)) ||
          (mutated.contains(user) && may_alias(*user, n))) {
        mutated.insert(n);
        break;
      }
    }
  }
  return mutated;
}

// The attributes some graph under `root` may write, a body of control flow
// included: what one graph reads, another (a loop's body updating a buffer)
// may change between runs.
absl::flat_hash_set<std::string> attributes_written(const Graph& root) {
  absl::flat_hash_set<std::string> written;
  for (const Graph* g : root.all_graphs()) {
    for (const Node* n : mutated_values(*g, {})) {
      if (n->op() == Opcode::kGetAttr) written.insert(n->target().str());
    }
  }
  return written;
}

FoldPlan plan_folding(GraphModuleImpl& module, const FoldOptions& options) {
  FoldPlan plan;
  const Graph& graph = module.graph();

  // FoldOptions::writes: writers into tensors the graph makes, the
  // new_zeros-like calls the init graph makes without their input, and the
  // position of each node (for reads after the last write).
  StorageRoots roots;
  absl::flat_hash_set<const Node*> made_writers;
  absl::flat_hash_map<const Node*, NewTensorCall> unbound;
  absl::flat_hash_map<const Node*, int64_t> position;
  if (options.writes) {
    int64_t i = 0;
    for (Node* n : graph.nodes()) {
      position[n] = i++;
      if (writes_only_made_tensors(*n, roots)) made_writers.insert(n);
      if (std::optional<NewTensorCall> call = unbound_new_tensor(*n)) {
        unbound.emplace(n, std::move(*call));
      }
    }
  }
  // What the writes need, given up: the plan without them.
  auto without_writes = [&] {
    FoldOptions without = options;
    without.writes = false;
    return plan_folding(module, without);
  };

  // Values changed between runs: written by something impure, directly or
  // through a view (but by writers into made tensors, which fold with what
  // they write or the whole plan is given up below).
  const absl::flat_hash_set<const Node*> mutated =
      mutated_values(graph, made_writers);
  // With control flow, those any graph of the module writes; the bodies
  // themselves (get_attr of a subgraph) are read by cond and while_loop
  // only, never folded.
  absl::flat_hash_set<std::string> written_elsewhere;
  if (graph.root().has_subgraphs()) {
    written_elsewhere = attributes_written(graph.root());
  }

  // What the caller wants folded: the `only` nodes and their inputs.
  absl::flat_hash_set<const Node*> needed;
  if (!options.only.empty()) {
    std::vector<const Node*> work(options.only.begin(), options.only.end());
    while (!work.empty()) {
      const Node* n = work.back();
      work.pop_back();
      if (!needed.insert(n).second) continue;
      for (Node* input : n->all_input_nodes()) work.push_back(input);
    }
  }

  // A graph traced in training mode is trained: a value folded from a
  // parameter that requires grad would carry no gradient back to it.
  const bool trains = module.traced_training().value_or(false);
  auto trained = [&](const Node& get_attr) {
    const std::string& path = get_attr.target().str();
    return trains && module.has_tensor_attribute(path) &&
           module.is_parameter(path) && module.fetch_attr(path).requires_grad();
  };

  absl::flat_hash_set<const Node*>& foldable = plan.foldable;
  for (Node* n : graph.nodes()) {
    if (mutated.contains(n)) continue;
    if (!options.only.empty() && !needed.contains(n)) continue;
    bool ok = false;
    switch (n->op()) {
      case Opcode::kGetAttr:
        ok = !Graph::reads_subgraph(*n) && !trained(*n) &&
             !written_elsewhere.contains(n->target().str());
        break;
      case Opcode::kCallFunction:
      case Opcode::kCallMethod: {
        if (unbound.contains(n)) {
          ok = true;  // reads its input's dtype only
          break;
        }
        ok = (!n->is_impure() || made_writers.contains(n)) &&
             produces_storable(*n);
        for (Node* input : n->all_input_nodes()) {
          ok = ok && foldable.contains(input);
        }
        break;
      }
      default:
        break;
    }
    if (ok) foldable.insert(n);
  }

  // Boundary: folded values something outside the fold still uses.
  std::vector<Node*>& boundary = plan.boundary;
  for (Node* n : graph.nodes()) {
    if (!foldable.contains(n) || n->op() == Opcode::kGetAttr) continue;
    for (Node* user : n->users()) {
      if (!foldable.contains(user)) {
        boundary.push_back(n);
        break;
      }
    }
  }

  // Writes into made tensors fold only all together with what they write,
  // and only when what stays reads those tensors after the last write.
  if (!made_writers.empty()) {
    absl::flat_hash_map<const Node*, int64_t> last_write;
    for (const Node* w : made_writers) {
      for (Node* written : written_in_place(*w)) {
        const Node* root = roots(written);
        if (!foldable.contains(w) || !foldable.contains(root)) {
          return without_writes();
        }
        last_write[root] = std::max(last_write[root], position.at(w));
      }
    }
    for (Node* n : graph.nodes()) {
      if (foldable.contains(n)) continue;
      for (Node* input : n->all_input_nodes()) {
        auto it = last_write.find(roots(input));
        if (foldable.contains(input) && it != last_write.end() &&
            position.at(n) < it->second) {
          return without_writes();
        }
      }
    }
  }

  // The init graph: the foldable nodes the boundary needs, in order, and the
  // writes into them.
  absl::flat_hash_set<const Node*> copied;
  {
    std::vector<const Node*> work(boundary.begin(), boundary.end());
    bool grew = true;
    while (grew) {
      while (!work.empty()) {
        const Node* n = work.back();
        work.pop_back();
        if (!copied.insert(n).second) continue;
        if (unbound.contains(n)) continue;
        for (Node* input : n->all_input_nodes()) work.push_back(input);
      }
      grew = false;
      for (const Node* w : made_writers) {
        if (copied.contains(w)) continue;
        for (Node* written : written_in_place(*w)) {
          if (copied.contains(roots(written))) {
            work.push_back(w);
            grew = true;
            break;
          }
        }
      }
    }
  }
  auto init = std::make_shared<Graph>();
  NodeMap map;
  for (Node* n : graph.nodes()) {
    if (!copied.contains(n)) continue;
    if (auto it = unbound.find(n); it != unbound.end()) {
      const NewTensorCall& call = it->second;
      map[n] = init->call_function(call.target, call.args, call.kwargs);
      map[n]->meta() = n->meta();
      continue;
    }
    map[n] = init->node_copy(*n, [&](Node* input) -> Argument {
      return map.at(input);
    });
  }
  std::vector<Argument> results;
  for (Node* b : boundary) results.emplace_back(map.at(b));
  init->output(Argument::tuple(std::move(results)));
  absl::flat_hash_set<std::string> taken;
  for (Node* b : boundary) {
    plan.step.outputs.push_back(attribute_path(module, *b, &taken));
  }
  plan.step.graph = std::move(init);
  return plan;
}

// The main graph reads the folded values; what only they used goes. Nothing
// here can fail, so a graph is never left half rewritten.
void apply_folding(Graph& graph, const FoldPlan& plan) {
  for (size_t i = 0; i < plan.boundary.size(); ++i) {
    Node* b = plan.boundary[i];
    const std::string& path = plan.step.outputs[i];
    Node* attribute;
    {
      auto guard = graph.inserting_before(b);
      attribute = graph.get_attr(path);
    }
    if (const TensorMeta* tm = b->meta().get(kTensorMeta)) {
      attribute->meta().set(kTensorMeta, *tm);
    }
    b->replace_all_uses_with(attribute);
  }
  // Users before what they use: erasing one frees its inputs.
  for (Node* n : graph.nodes().reversed()) {
    if (plan.foldable.contains(n) && n->users().empty()) graph.erase_node(n);
  }
}

}  // namespace

GraphModuleImpl::InitStep split_const_subgraphs(GraphModuleImpl& module,
                                                const FoldOptions& options) {
  FoldPlan plan = plan_folding(module, options);
  apply_folding(module.graph(), plan);
  return std::move(plan.step);
}

FoldConstants::FoldConstants(const PassOptions& options) {
  for (const auto& [name, value] : options) {
    if (name == "writes") {
      options_.writes = bool_option("fold_constants", name, value);
    }
  }
}

std::vector<std::pair<std::string, std::string>> FoldConstants::option_docs() {
  return {{"writes",
           "also fold in-place writes into tensors the folded part makes "
           "itself (a mask built in zeros; true/false)"}};
}

namespace {

bool fold_graph(GraphModuleImpl& module, const FoldOptions& options) {
  FoldPlan plan = plan_folding(module, options);
  if (plan.step.outputs.empty()) return false;
  // Computed and registered first: if that fails, the graph is unchanged.
  module.add_init_step(plan.step);
  apply_folding(module.graph(), plan);
  return true;
}

}  // namespace

bool fold_constants(GraphModuleImpl& module, const FoldOptions& options) {
  bool folded = fold_graph(module, options);
  // Then each body of control flow, into init steps of the same module,
  // whose attributes the bodies read.
  module.for_each_body(
      [&] { folded = fold_graph(module, options) || folded; });
  return folded;
}

}  // namespace fx
