#include "passes/subgraph_rewriter.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "fx/ir/errors.h"
#include "fx/ir/meta.h"
#include "fx/runtime/graph_module.h"

namespace fx {
namespace {

bool is_operation(const Node* n) {
  return n->op() != Opcode::kPlaceholder && n->op() != Opcode::kOutput;
}

// The values a graph returns: its output's argument, or the elements of a
// returned tuple or list.
std::vector<Argument> returned_values(const Graph& graph) {
  Node* out = graph.output_node();
  if (out == nullptr || out->args().empty()) return {};
  const Argument& result = out->args()[0];
  if (result.is_sequence()) return result.elements();
  return {result};
}

// The program-order position of every node, kept up to date as nodes are
// inserted: new nodes get positions between their neighbours', and when
// there is no room left everything is renumbered (rarely: positions start
// 2^20 apart).
class Positions {
 public:
  explicit Positions(const Graph& graph) : graph_(graph) { renumber(); }

  int64_t of(const Node* n) const { return positions_.at(n); }

  // Numbers `inserted`, which were just inserted, in order, right before
  // `next`.
  void add(const std::vector<Node*>& inserted, const Node* next) {
    if (inserted.empty()) return;
    const int64_t count = static_cast<int64_t>(inserted.size());
    const Node* before = inserted.front()->prev();
    const int64_t low = before != nullptr ? of(before) : 0;
    const int64_t step = (of(next) - low) / (count + 1);
    if (step < 1) {
      renumber();
      return;
    }
    for (int64_t i = 0; i < count; ++i) {
      positions_[inserted[i]] = low + step * (i + 1);
    }
  }

 private:
  void renumber() {
    positions_.clear();
    int64_t i = 0;
    for (Node* n : graph_.nodes()) positions_[n] = ++i << 20;
  }

  const Graph& graph_;
  absl::flat_hash_map<const Node*, int64_t> positions_;
};

// A candidate occurrence of the pattern.
struct Candidate {
  // Pattern operation -> graph node, and the reverse.
  absl::flat_hash_map<const Node*, Node*> nodes;
  absl::flat_hash_map<const Node*, const Node*> matched_by;
  // Pattern placeholder -> the graph value it matched.
  absl::flat_hash_map<const Node*, Argument> bindings;
  // The graph nodes inside bindings.
  absl::flat_hash_set<const Node*> bound;
  Node* anchor = nullptr;
};

class Matcher {
 public:
  Matcher(const Graph& pattern, const Graph& graph, const Positions& positions)
      : graph_(graph), positions_(positions) {
    placeholders_ = pattern.placeholders();
    for (const Argument& value : returned_values(pattern)) {
      returned_.push_back(value.to_node());
    }
    Node* out = pattern.output_node();
    for (Node* n : returned_) {
      if (n->users().size() == 1 && n->users().contains(out)) {
        anchors_.push_back(n);
      }
    }
  }

  const std::vector<Node*>& placeholders() const { return placeholders_; }
  const std::vector<Node*>& returned() const { return returned_; }

  // Every valid, non-overlapping occurrence, in program order of the first
  // anchor's match.
  std::vector<Candidate> find_all() {
    std::vector<Candidate> found;
    for (Node* g : candidates_of(anchors_[0])) {
      if (claimed_.contains(g)) continue;
      Candidate c;
      if (!match_node(anchors_[0], g, &c)) continue;
      c.anchor = g;
      if (match_anchors(1, &c)) {
        for (const auto& entry : c.nodes) claimed_.insert(entry.second);
        found.push_back(std::move(c));
      }
    }
    return found;
  }

  // Where the replacement of `c` goes: before the match's last node, or
  // before the first use of a returned value outside the match if that is
  // earlier. False if an input of the match (each node mapped through
  // `resolve`: what stands for it now) is not computed before that point.
  bool can_place(const Candidate& c,
                 const std::function<Node*(Node*)>& resolve,
                 Node** insert_before) const {
    Node* point = nullptr;
    for (const auto& entry : c.nodes) {
      if (point == nullptr ||
          positions_.of(entry.second) > positions_.of(point)) {
        point = entry.second;
      }
    }
    for (const Node* p : returned_) {
      for (Node* user : c.nodes.at(p)->users()) {
        if (!c.matched_by.contains(user) &&
            positions_.of(user) < positions_.of(point)) {
          point = user;
        }
      }
    }
    bool placeable = true;
    for (const auto& entry : c.bindings) {
      for_each_node(entry.second, [&](Node* n) {
        placeable = placeable &&
                    positions_.of(resolve(n)) < positions_.of(point);
      });
    }
    *insert_before = point;
    return placeable;
  }

 private:
  // Graph nodes with the opcode and target of pattern node `p`, in program
  // order; when an input of `p` is already matched to a graph node, only
  // that node's users qualify.
  std::vector<Node*> candidates_of(const Node* p,
                                   const Candidate* c = nullptr) {
    if (c != nullptr) {
      for (Node* input : p->all_input_nodes()) {
        Node* g = nullptr;
        if (auto it = c->nodes.find(input); it != c->nodes.end()) {
          g = it->second;
        } else if (auto it = c->bindings.find(input);
                   it != c->bindings.end() && it->second.is_node()) {
          g = it->second.to_node();
        }
        if (g == nullptr) continue;
        std::vector<Node*> users;
        for (Node* u : g->users()) {
          if (same_operation(p, u)) users.push_back(u);
        }
        std::sort(users.begin(), users.end(), [&](Node* a, Node* b) {
          return positions_.of(a) < positions_.of(b);
        });
        return users;
      }
    }
    auto it = all_candidates_.find(p);
    if (it == all_candidates_.end()) {
      std::vector<Node*> nodes;
      for (Node* n : graph_.nodes()) {
        if (same_operation(p, n)) nodes.push_back(n);
      }
      it = all_candidates_.emplace(p, std::move(nodes)).first;
    }
    return it->second;
  }

  // Matches anchors_[index...] given the match so far, trying candidates in
  // order and keeping the first full match that is valid.
  bool match_anchors(size_t index, Candidate* c) {
    if (index == anchors_.size()) return is_valid(*c);
    const Node* anchor = anchors_[index];
    for (Node* g : candidates_of(anchor, c)) {
      if (claimed_.contains(g)) continue;
      Candidate attempt = *c;
      if (match_node(anchor, g, &attempt) &&
          match_anchors(index + 1, &attempt)) {
        *c = std::move(attempt);
        return true;
      }
    }
    return false;
  }

  static bool same_operation(const Node* p, const Node* g) {
    return p->op() == g->op() && p->target() == g->target();
  }

  bool bind(const Node* placeholder, const Argument& value, Candidate* c) {
    if (auto it = c->bindings.find(placeholder); it != c->bindings.end()) {
      return it->second == value;
    }
    // A node the pattern's operations match cannot also be an input. (A
    // result of another match can: it is replaced before this one.)
    bool free = true;
    for_each_node(value, [&](Node* n) {
      free = free && !c->matched_by.contains(n);
    });
    if (!free) return false;
    for_each_node(value, [&](Node* n) { c->bound.insert(n); });
    c->bindings.emplace(placeholder, value);
    return true;
  }

  bool match_node(const Node* p, Node* g, Candidate* c) {
    if (p->op() == Opcode::kPlaceholder) return bind(p, g, c);
    if (auto it = c->nodes.find(p); it != c->nodes.end()) {
      return it->second == g;
    }
    if (c->matched_by.contains(g) || c->bound.contains(g) ||
        claimed_.contains(g) || !same_operation(p, g)) {
      return false;
    }
    if (p->args().size() != g->args().size() ||
        p->kwargs().size() != g->kwargs().size()) {
      return false;
    }
    c->nodes.emplace(p, g);
    c->matched_by.emplace(g, p);
    for (size_t i = 0; i < p->args().size(); ++i) {
      if (!match_argument(p->args()[i], g->args()[i], c)) return false;
    }
    for (const auto& [key, value] : p->kwargs()) {
      const Argument* other = find_kwarg(g->kwargs(), key);
      if (other == nullptr || !match_argument(value, *other, c)) return false;
    }
    return true;
  }

  bool match_argument(const Argument& p, const Argument& g, Candidate* c) {
    if (p.is_node()) {
      const Node* pn = p.to_node();
      if (pn->op() == Opcode::kPlaceholder) return bind(pn, g, c);
      return g.is_node() && match_node(pn, g.to_node(), c);
    }
    if (p.is_sequence()) {
      if (p.kind() != g.kind() || p.elements().size() != g.elements().size()) {
        return false;
      }
      for (size_t i = 0; i < p.elements().size(); ++i) {
        if (!match_argument(p.elements()[i], g.elements()[i], c)) return false;
      }
      return true;
    }
    return p == g;
  }

  // Contained (internal nodes used only inside the match) and placeable.
  bool is_valid(const Candidate& c) const {
    absl::flat_hash_set<const Node*> returned(returned_.begin(),
                                              returned_.end());
    for (const auto& [p, g] : c.nodes) {
      if (returned.contains(p)) continue;
      for (Node* user : g->users()) {
        if (!c.matched_by.contains(user)) return false;
      }
    }
    Node* point;
    return can_place(c, [](Node* n) { return n; }, &point);
  }

  const Graph& graph_;
  const Positions& positions_;
  std::vector<Node*> placeholders_;
  std::vector<Node*> returned_;
  std::vector<Node*> anchors_;
  absl::flat_hash_map<const Node*, std::vector<Node*>> all_candidates_;
  // Graph nodes taken by the matches found so far.
  absl::flat_hash_set<const Node*> claimed_;
};

void check_pattern(const Graph& pattern, const Graph& replacement,
                   const Graph& graph) {
  if (&pattern == &graph || &replacement == &graph) {
    throw GraphError(
        "replace_pattern: the pattern and the replacement must be graphs of "
        "their own, not the module's graph");
  }
  pattern.lint();
  replacement.lint();
  if (pattern.output_node() == nullptr ||
      replacement.output_node() == nullptr) {
    throw GraphError(
        "replace_pattern: the pattern and the replacement need an output");
  }
  std::vector<Argument> results = returned_values(pattern);
  if (results.empty()) {
    throw GraphError("replace_pattern: the pattern returns nothing to match");
  }
  absl::flat_hash_set<const Node*> seen;
  for (const Argument& value : results) {
    if (!value.is_node() || !is_operation(value.to_node()) ||
        !seen.insert(value.to_node()).second) {
      throw GraphError(absl::StrCat(
          "replace_pattern: the pattern returns ",
          pattern.output_node()->args()[0].to_string(),
          "; it must return distinct values it computes (nodes that are not "
          "placeholders), one or a tuple of them"));
    }
  }
  if (std::none_of(results.begin(), results.end(), [&](const Argument& v) {
        return v.to_node()->users().size() == 1;
      })) {
    throw GraphError(
        "replace_pattern: every value the pattern returns is also used "
        "inside it; one at least must be used only by the output");
  }
  for (Node* n : pattern.nodes()) {
    if (n->op() != Opcode::kOutput && n->users().empty()) {
      throw GraphError(absl::StrCat(
          "replace_pattern: pattern node %", n->name(),
          " is unused; every pattern node (placeholders included) must be "
          "used, or the pattern would match nothing in particular"));
    }
  }
  const size_t pattern_inputs = pattern.placeholders().size();
  const size_t replacement_inputs = replacement.placeholders().size();
  if (pattern_inputs != replacement_inputs) {
    throw GraphError(absl::StrCat(
        "replace_pattern: the pattern has ", pattern_inputs,
        " placeholder(s) but the replacement has ", replacement_inputs,
        "; give them the same parameters (a replacement may ignore some)"));
  }
  std::vector<Argument> replacement_results = returned_values(replacement);
  if (replacement_results.size() != results.size()) {
    throw GraphError(absl::StrCat(
        "replace_pattern: the pattern returns ", results.size(),
        " value(s) but the replacement returns ", replacement_results.size()));
  }
  for (const Argument& result : replacement_results) {
    if (!result.is_node()) {
      throw GraphError(absl::StrCat(
          "replace_pattern: the replacement returns the literal ",
          result.to_string(), "; it must return nodes"));
    }
  }
}

// The innermost module path containing those of the matched nodes that
// have one ("layer1.0" for "layer1.0.conv1" and "layer1.0.bn1"), or null if
// none has one.
std::optional<std::string> common_module_path(const Candidate& c) {
  std::optional<std::vector<std::string>> common;
  for (const auto& entry : c.nodes) {
    const std::string* path = entry.second->meta().get(kModulePath);
    if (path == nullptr) continue;
    std::vector<std::string> parts = absl::StrSplit(*path, '.');
    if (!common) {
      common = std::move(parts);
      continue;
    }
    size_t same = 0;
    while (same < common->size() && same < parts.size() &&
           (*common)[same] == parts[same]) {
      ++same;
    }
    common->resize(same);
  }
  if (!common) return std::nullopt;
  return absl::StrJoin(*common, ".");
}

// A path for an attribute taken from the replacement: `path` itself if
// free, else path_1, path_2, ...
std::string free_path(const GraphModuleImpl& module, const std::string& path) {
  std::string candidate = path;
  for (int i = 1; module.has_tensor_attribute(candidate) ||
                  module.has_leaf_module(candidate);
       ++i) {
    candidate = absl::StrCat(path, "_", i);
  }
  return candidate;
}

// Where each get_attr and call_module target of `replacement` lives in
// `module`. Targets found only in the GraphModule owning `replacement` are
// registered in `module` when `import` is set.
absl::flat_hash_map<std::string, std::string> import_attributes(
    GraphModuleImpl& module, const Graph& replacement, bool import) {
  const auto* owner =
      dynamic_cast<const GraphModuleImpl*>(replacement.owner());
  absl::flat_hash_map<std::string, std::string> paths;
  for (Node* n : replacement.nodes()) {
    if (n->op() != Opcode::kGetAttr && n->op() != Opcode::kCallModule) {
      continue;
    }
    const std::string& path = n->target().str();
    if (paths.contains(path)) continue;
    const bool tensor = n->op() == Opcode::kGetAttr;
    const bool in_owner = owner != nullptr &&
                          (tensor ? owner->has_tensor_attribute(path)
                                  : owner->has_leaf_module(path));
    const bool in_module = tensor ? module.has_tensor_attribute(path)
                                  : module.has_leaf_module(path);
    if (!in_owner) {
      if (!in_module) {
        throw GraphError(absl::StrCat(
            "replace_pattern: the replacement's ", opcode_name(n->op()),
            " target '", path,
            "' is in neither the module nor the replacement's GraphModule; "
            "register it on the module first"));
      }
      paths.emplace(path, path);
      continue;
    }
    const bool same =
        in_module &&
        (tensor ? module.fetch_attr(path).unsafeGetTensorImpl() ==
                      owner->fetch_attr(path).unsafeGetTensorImpl()
                : module.leaf_module(path)->module ==
                      owner->leaf_module(path)->module);
    std::string target = same ? path : free_path(module, path);
    if (import && !same) {
      if (tensor) {
        const bool is_parameter =
            owner->named_parameters(/*recurse=*/true).find(path) != nullptr;
        module.register_tensor_attribute(target, owner->fetch_attr(path),
                                         is_parameter);
      } else {
        module.register_leaf_module(target, *owner->leaf_module(path));
      }
    }
    paths.emplace(path, std::move(target));
  }
  return paths;
}

}  // namespace

std::vector<Match> replace_pattern(GraphModuleImpl& module,
                                   const Graph& pattern,
                                   const Graph& replacement) {
  Graph& graph = module.graph();
  check_pattern(pattern, replacement, graph);
  // Throws for missing targets before anything is edited.
  import_attributes(module, replacement, /*import=*/false);

  Positions positions(graph);
  Matcher matcher(pattern, graph, positions);
  std::vector<Candidate> candidates = matcher.find_all();

  std::vector<Node*> replacement_inputs = replacement.placeholders();
  std::vector<Argument> replacement_results = returned_values(replacement);
  // Replacement results that are its placeholders: the pattern's inputs
  // passed through, which must have matched nodes.
  for (const Candidate& c : candidates) {
    for (const Argument& result : replacement_results) {
      const Node* r = result.to_node();
      if (r->op() != Opcode::kPlaceholder) continue;
      size_t index = std::find(replacement_inputs.begin(),
                               replacement_inputs.end(), r) -
                     replacement_inputs.begin();
      const Argument& value =
          c.bindings.at(matcher.placeholders()[index]);
      if (!value.is_node()) {
        throw GraphError(absl::StrCat(
            "replace_pattern: the replacement returns its input %", r->name(),
            ", which matched the literal ", value.to_string(), " at %",
            c.anchor->name(), "; a node's uses cannot be replaced by a "
            "literal"));
      }
    }
  }
  if (candidates.empty()) return {};
  absl::flat_hash_map<std::string, std::string> paths =
      import_attributes(module, replacement, /*import=*/true);

  // Results of earlier replacements: original node -> node standing for it.
  absl::flat_hash_map<const Node*, Node*> replaced;
  auto resolve = [&](Node* n) {
    for (auto it = replaced.find(n); it != replaced.end();
         it = replaced.find(n)) {
      n = it->second;
    }
    return n;
  };
  auto resolve_argument = [&](const Argument& a) {
    return map_arg(a, [&](Node* n) -> Argument { return resolve(n); });
  };

  std::vector<Match> matches;
  for (const Candidate& c : candidates) {
    Node* insert_before = nullptr;
    if (!matcher.can_place(c, resolve, &insert_before)) continue;
    Match match;
    match.anchor = c.anchor->name();
    for (const auto& [p, g] : c.nodes) match.nodes_map[p->name()] = g->name();

    absl::flat_hash_map<const Node*, Argument> values;
    for (size_t i = 0; i < replacement_inputs.size(); ++i) {
      values[replacement_inputs[i]] =
          resolve_argument(c.bindings.at(matcher.placeholders()[i]));
    }
    std::optional<std::string> module_path = common_module_path(c);
    {
      auto guard = graph.inserting_before(insert_before);
      for (Node* n : replacement.nodes()) {
        if (!is_operation(n)) continue;
        auto lookup = [&](Node* input) -> Argument {
          return values.at(input);
        };
        std::vector<Argument> args;
        for (const Argument& a : n->args()) args.push_back(map_arg(a, lookup));
        Kwargs kwargs;
        for (const auto& [key, value] : n->kwargs()) {
          kwargs.emplace_back(key, map_arg(value, lookup));
        }
        Target target = n->op() == Opcode::kGetAttr ||
                                n->op() == Opcode::kCallModule
                            ? Target(paths.at(n->target().str()))
                            : n->target();
        // No meta of the replacement's: its shapes are the examples'.
        Node* copy = graph.create_node(n->op(), target, std::move(args),
                                       std::move(kwargs), n->name());
        if (module_path) copy->meta().set(kModulePath, *module_path);
        values[n] = copy;
        match.replacement_nodes.push_back(copy);
      }
    }
    positions.add(match.replacement_nodes, insert_before);

    absl::flat_hash_set<const Node*> copies(match.replacement_nodes.begin(),
                                            match.replacement_nodes.end());
    for (size_t i = 0; i < matcher.returned().size(); ++i) {
      Node* original = c.nodes.at(matcher.returned()[i]);
      Node* result = values.at(replacement_results[i].to_node()).to_node();
      if (copies.contains(result)) {
        if (const TensorMeta* tm = original->meta().get(kTensorMeta)) {
          result->meta().set(kTensorMeta, *tm);
        }
        if (const auto* list = original->meta().get(kTensorMetaList)) {
          result->meta().set(kTensorMetaList, *list);
        }
      }
      original->replace_all_uses_with(result);
      replaced[original] = result;
      match.outputs.push_back(result);
    }
    std::vector<Node*> erased;
    for (const auto& entry : c.nodes) erased.push_back(entry.second);
    std::sort(erased.begin(), erased.end(), [&](Node* a, Node* b) {
      return positions.of(a) > positions.of(b);
    });
    for (Node* n : erased) graph.erase_node(n);
    for (Node* p : matcher.placeholders()) {
      match.inputs.push_back(c.bindings.at(p));
    }
    matches.push_back(std::move(match));
  }
  // Inputs and outputs replaced by later matches: their replacements.
  for (Match& match : matches) {
    for (Argument& input : match.inputs) input = resolve_argument(input);
    for (Node*& output : match.outputs) output = resolve(output);
  }
  if (!matches.empty()) module.recompile();
  return matches;
}

}  // namespace fx
