#include "fx/trace/internal/generalize.h"

#include <algorithm>
#include <cctype>
#include <numeric>
#include <optional>
#include <set>
#include <tuple>
#include <utility>
#include <variant>

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/zeros.h>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "fx/ir/errors.h"
#include "fx/ir/function.h"
#include "fx/ir/node.h"
#include "fx/trace/internal/size_fit.h"

namespace fx::internal {

std::string describe(const SymbolSizes& sizes) {
  std::vector<std::string> parts;
  for (const auto& [symbol, size] : sizes) {
    parts.push_back(absl::StrCat(symbol, "=", size));
  }
  return absl::StrJoin(parts, ", ");
}

namespace {

// Where an int literal sits in a node: an argument or a keyword, then
// indices into nested lists.
struct Position {
  size_t node = 0;  // in the graph's node order
  bool keyword = false;
  size_t index = 0;  // of the argument or keyword
  std::vector<size_t> path;

  friend bool operator<(const Position& a, const Position& b) {
    return std::tie(a.node, a.keyword, a.index, a.path) <
           std::tie(b.node, b.keyword, b.index, b.path);
  }
};

const Argument& argument_at(const Node& n, const Position& p) {
  const Argument* a =
      p.keyword ? &n.kwargs().at(p.index).second : &n.args().at(p.index);
  for (size_t i : p.path) a = &a->elements().at(i);
  return *a;
}

std::string describe_literal(const Node& n, const Position& p) {
  std::string where =
      p.keyword ? absl::StrCat("keyword '", n.kwargs().at(p.index).first, "'")
                : absl::StrCat("argument ", p.index);
  for (size_t i : p.path) absl::StrAppend(&where, "[", i, "]");
  return absl::StrCat(where, " of %", n.name(), " (", n.target().to_string(),
                      ")");
}

bool same_call(const Node& a, const Node& b) {
  return a.op() == b.op() && a.target() == b.target();
}

// aten::contiguous of a tensor that is contiguous already: C++'s
// Tensor::contiguous() returns it without a call, so a trace at sizes where
// it is (a length of 1 after a transpose) lacks the node.
bool is_contiguous_call(const Node& n) {
  static const Target contiguous = op("aten::contiguous");
  return n.op() == Opcode::kCallFunction && n.target() == contiguous &&
         !n.args().empty() && n.args()[0].is_node();
}

// Which node of `other` each node of `base` is, in order: -1 for a
// contiguous call the other trace skipped (at its sizes a no-op, which
// the base graph may keep). Never the other way: a base without the call
// would be wrong at sizes where it copies.
std::vector<int64_t> match_nodes(const std::vector<Node*>& base,
                                 const std::vector<Node*>& other) {
  std::vector<int64_t> match(base.size(), -1);
  size_t j = 0;
  for (size_t i = 0; i < base.size(); ++i) {
    if (is_contiguous_call(*base[i]) &&
        (j >= other.size() || !same_call(*base[i], *other[j]))) {
      continue;
    }
    match[i] = j < other.size() ? static_cast<int64_t>(j) : -2;  // -2: none
    ++j;
  }
  return match;
}

// Compares the graph of one trace with the base's, node for node.
class Comparison {
 public:
  Comparison(const Trace& base, const Trace& other,
             const std::vector<Node*>& base_nodes,
             const std::vector<Node*>& other_nodes,
             const std::vector<int64_t>& match)
      : base_(base),
        other_(other),
        base_nodes_(base_nodes),
        other_nodes_(other_nodes),
        match_(match) {
    for (size_t i = 0; i < base_nodes_.size(); ++i) {
      base_index_[base_nodes_[i]] = i;
    }
    for (size_t i = 0; i < other_nodes_.size(); ++i) {
      other_index_[other_nodes_[i]] = i;
    }
  }

  // Adds the positions of int literals that differ to `changed`.
  void run(std::set<Position>* changed) {
    changed_ = changed;
    size_t matched = 0;
    for (size_t i = 0; i < base_nodes_.size(); ++i) {
      if (match_[i] == -1) continue;
      if (match_[i] == -2) {
        differ(i, absl::StrCat("the graph at ", describe(other_.sizes),
                               " ends before it"));
      }
      node(i);
      ++matched;
    }
    if (matched < other_nodes_.size()) {
      differ(base_nodes_.size() - 1,
             absl::StrCat("the graph at ", describe(base_.sizes),
                          " ends before ",
                          other_nodes_[matched]->format_node()));
    }
  }

 private:
  // A base node as the other trace has it: a skipped contiguous call is
  // its input.
  size_t resolved(const Node* n) const {
    size_t i = base_index_.at(n);
    while (match_[i] == -1) i = base_index_.at(base_nodes_[i]->args()[0].to_node());
    return static_cast<size_t>(match_[i]);
  }

  void node(size_t i) {
    const Node& a = *base_nodes_[i];
    const Node& b = *other_nodes_[static_cast<size_t>(match_[i])];
    if (a.op() != b.op() || !(a.target() == b.target()) ||
        a.args().size() != b.args().size() ||
        a.kwargs().size() != b.kwargs().size()) {
      differs_at(i);
    }
    if (a.op() == Opcode::kGetAttr) constant(i, a.target().str());
    Position p;
    p.node = i;
    for (size_t k = 0; k < a.args().size(); ++k) {
      p.index = k;
      argument(a.args()[k], b.args()[k], &p);
    }
    p.keyword = true;
    for (size_t k = 0; k < a.kwargs().size(); ++k) {
      p.index = k;
      if (a.kwargs()[k].first != b.kwargs()[k].first) differs_at(i);
      argument(a.kwargs()[k].second, b.kwargs()[k].second, &p);
    }
  }

  // A constant the trace made from C++ data must not change with a size.
  void constant(size_t i, const std::string& name) {
    auto find = [&](const Attributes& a) -> const at::Tensor* {
      auto it = a.buffers.find(name);
      return it == a.buffers.end() ? nullptr : &it->second;
    };
    const at::Tensor* a = find(base_.attributes);
    const at::Tensor* b = find(other_.attributes);
    if (a == nullptr && b == nullptr) return;  // the module's own
    if (a == nullptr || b == nullptr || a->sizes() != b->sizes() ||
        a->scalar_type() != b->scalar_type() || !at::equal(*a, *b)) {
      differ(i, absl::StrCat(
                    "the constant ", name, " (a tensor made from C++ data "
                    "while tracing) has shape ",
                    a ? c10::str(a->sizes()) : "none", " at ",
                    describe(base_.sizes), " and ",
                    b ? c10::str(b->sizes()) : "none", " at ",
                    describe(other_.sizes),
                    ", so it depends on a dynamic size; make it from the "
                    "input (e.g. torch::ones with the input's sizes inside "
                    "forward) instead of from C++ data"));
    }
  }

  void argument(const Argument& a, const Argument& b, Position* p) {
    auto mismatch = [&] { differs_at(p->node); };
    if (a.kind() != b.kind()) mismatch();
    switch (a.kind()) {
      case ArgumentKind::kInt:
        if (a.to_int() != b.to_int()) changed_->insert(*p);
        return;
      case ArgumentKind::kNode:
        if (resolved(a.to_node()) != other_index_.at(b.to_node())) {
          mismatch();
        }
        return;
      case ArgumentKind::kList:
      case ArgumentKind::kTuple:
        if (a.elements().size() != b.elements().size()) mismatch();
        for (size_t k = 0; k < a.elements().size(); ++k) {
          p->path.push_back(k);
          argument(a.elements()[k], b.elements()[k], p);
          p->path.pop_back();
        }
        return;
      default:
        if (a != b) mismatch();
    }
  }

  // Node i is another node, or another call, in the other trace.
  [[noreturn]] void differs_at(size_t i) {
    differ(i, absl::StrCat(
                  "it is ",
                  other_nodes_[static_cast<size_t>(match_[i])]->format_node(),
                  " at ", describe(other_.sizes)));
  }

  [[noreturn]] void differ(size_t i, const std::string& what) {
    throw TraceError(absl::StrCat(
        "the dynamic dimensions cannot be generalized: the graph traced at ",
        describe(other_.sizes), " differs from the one at ",
        describe(base_.sizes), " at node ", base_nodes_[i]->format_node(),
        ": ", what,
        ". The program's structure depends on a dynamic size (a branch or a "
        "loop count on a size, or a float computed from one), which one "
        "graph cannot hold: make the dimension static, or bound it "
        "(DynamicDim::min/max) to sizes where the program does not change"));
  }

  const Trace& base_;
  const Trace& other_;
  const std::vector<Node*>& base_nodes_;
  const std::vector<Node*>& other_nodes_;
  const std::vector<int64_t>& match_;
  absl::flat_hash_map<const Node*, size_t> base_index_;
  absl::flat_hash_map<const Node*, size_t> other_index_;
  std::set<Position>* changed_ = nullptr;
};

Argument replaced(const Argument& a, const std::vector<size_t>& path,
                  size_t depth, Node* value) {
  if (depth == path.size()) return Argument(value);
  std::vector<Argument> elements = a.elements();
  elements.at(path[depth]) =
      replaced(elements[path[depth]], path, depth + 1, value);
  return a.is_tuple() ? Argument::tuple(std::move(elements))
                      : Argument::list(std::move(elements));
}

// Builds the nodes that compute fits, sharing what they have in common:
// those of the inputs' sizes before the graph's first node, those with a
// data-dependent size before their first user.
class Builder {
 public:
  Builder(Graph& graph, const std::vector<DynamicDim>& dims,
          const std::map<std::string, Trace::Unbacked>& unbacked, Node* first)
      : graph_(graph),
        dims_(dims),
        unbacked_(unbacked),
        placeholders_(graph.placeholders()),
        first_(first) {}

  Node* build(const std::variant<SizeExpr, SizeFit>& fit, Node* user) {
    std::vector<std::string> names;
    if (const auto* f = std::get_if<SizeFit>(&fit)) {
      for (const auto& term : f->terms) names.push_back(term.first);
      if (f->a != 0) names.push_back(f->outer);
    } else {
      names = std::get<SizeExpr>(fit).symbols;
    }
    bool late = false;
    for (const std::string& name : names) late = late || unbacked_.count(name);
    auto insertion = graph_.inserting_before(late ? user : first_);
    if (const auto* f = std::get_if<SizeFit>(&fit)) return build(*f);
    return build(std::get<SizeExpr>(fit));
  }

  // The node reading a symbol's size: %B = sym_size(%x, 0) from the first
  // input that has it, %u0 = sym_size(%nonzero, 0) from its operator.
  Node* symbol(const std::string& name) {
    Node*& n = symbols_[name];
    if (n != nullptr) return n;
    for (const DynamicDim& d : dims_) {
      if (d.symbol != name) continue;
      if (d.data_dependent()) {
        const Trace::Unbacked& u = unbacked_.at(name);
        Node* value = u.node;
        if (value->meta().get(kTensorMeta) == nullptr) {
          auto insertion = graph_.inserting_after(u.node);
          value = graph_.call_function(Target(fx::getitem()),
                                       {u.node, static_cast<int64_t>(u.output)});
          if (const auto* list = u.node->meta().get(kTensorMetaList)) {
            value->meta().set(kTensorMeta, list->at(u.output));
          }
        }
        auto insertion = graph_.inserting_after(value);
        n = graph_.create_node(Opcode::kCallFunction, Target(sym_size()),
                               {value, d.dim}, {}, d.symbol);
      } else {
        // Named after its symbol: %B = sym_size(%x, 0).
        auto insertion = graph_.inserting_before(first_);
        n = graph_.create_node(Opcode::kCallFunction, Target(sym_size()),
                               {placeholders_.at(d.input), d.dim}, {},
                               d.symbol);
      }
      break;
    }
    return n;
  }

 private:
  Node* build(const SizeFit& f) {
    const std::string key = f.to_string();
    auto it = fits_.find(key);
    if (it != fits_.end()) return it->second;
    Node* n = nullptr;
    for (const auto& [name, c] : f.terms) {
      Node* term = symbol(name);
      if (c != 1) term = graph_.call_function(Target(sym_mul()), {term, c});
      n = n == nullptr ? term
                       : graph_.call_function(Target(sym_add()), {n, term});
    }
    if (f.q != 0) n = graph_.call_function(Target(sym_add()), {n, f.q});
    if (f.r != 1) n = graph_.call_function(Target(sym_floordiv()), {n, f.r});
    if (f.m != 1) n = graph_.call_function(Target(sym_mul()), {n, f.m});
    if (f.a != 0) {
      Node* outer = symbol(f.outer);
      if (f.a != 1) outer = graph_.call_function(Target(sym_mul()), {outer, f.a});
      n = graph_.call_function(Target(sym_add()), {n, outer});
    }
    fits_[key] = n;
    return n;
  }

  Node* build(const SizeExpr& f) {
    const std::string key = f.to_string();
    auto it = fits_.find(key);
    if (it != fits_.end()) return it->second;
    Node* n = symbol(f.symbols[0]);
    for (size_t i = 1; i < f.symbols.size(); ++i) {
      n = graph_.call_function(Target(sym_mul()), {n, symbol(f.symbols[i])});
    }
    if (f.p != 1) n = graph_.call_function(Target(sym_mul()), {n, f.p});
    if (f.q != 0) n = graph_.call_function(Target(sym_add()), {n, f.q});
    if (f.r != 1) n = graph_.call_function(Target(sym_floordiv()), {n, f.r});
    fits_[key] = n;
    return n;
  }

  Graph& graph_;
  const std::vector<DynamicDim>& dims_;
  const std::map<std::string, Trace::Unbacked>& unbacked_;
  std::vector<Node*> placeholders_;
  Node* first_;
  std::map<std::string, Node*> symbols_;
  std::map<std::string, Node*> fits_;
};

}  // namespace

SymbolSizes example_sizes(const std::vector<DynamicDim>& dims,
                          const std::vector<c10::IValue>& inputs) {
  SymbolSizes sizes;
  std::map<std::string, const DynamicDim*> first;
  std::set<std::pair<size_t, int64_t>> seen;
  for (const DynamicDim& d : dims) {
    const std::string entry = absl::StrCat(
        "TraceOptions::dynamic's entry for input ", d.input, " dimension ",
        d.dim, " ('", d.symbol, "')");
    const bool identifier =
        !d.symbol.empty() && !std::isdigit(static_cast<unsigned char>(d.symbol[0])) &&
        std::all_of(d.symbol.begin(), d.symbol.end(), [](char c) {
          return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
        });
    if (!identifier) {
      throw TraceError(absl::StrCat(
          entry, ": a symbol is an identifier (\"B\", \"T\", \"seq_len\"); "
                 "dimensions that must be equal share one"));
    }
    if (d.input >= inputs.size() || !inputs[d.input].isTensor() ||
        !inputs[d.input].toTensor().defined()) {
      throw TraceError(absl::StrCat(
          entry, ": forward takes ", inputs.size(),
          " example input(s) and dynamic dimensions are for tensor inputs"));
    }
    const at::Tensor& t = inputs[d.input].toTensor();
    if (d.dim < 0 || d.dim >= t.dim()) {
      throw TraceError(absl::StrCat(entry, ": the input has ", t.dim(),
                                    " dimensions (count from 0)"));
    }
    if (!seen.emplace(d.input, d.dim).second) {
      throw TraceError(absl::StrCat(entry, " is given twice"));
    }
    if (d.min < 0 || d.max < d.min || d.multiple_of < 1) {
      throw TraceError(absl::StrCat(entry, " has bounds ", d.relation(),
                                    ", which no size meets"));
    }
    const int64_t size = t.size(d.dim);
    if (size < d.min || size > d.max || size % d.multiple_of != 0) {
      throw TraceError(absl::StrCat(entry, ": the example's size ", size,
                                    " breaks ", d.relation()));
    }
    auto [it, added] = first.emplace(d.symbol, &d);
    if (!added) {
      const DynamicDim& f = *it->second;
      if (f.min != d.min || f.max != d.max || f.multiple_of != d.multiple_of) {
        throw TraceError(absl::StrCat(entry, " has bounds ", d.relation(),
                                      " but input ", f.input, " dimension ",
                                      f.dim, " gives ", d.symbol, " ",
                                      f.relation(),
                                      ": give one symbol one set of bounds"));
      }
      if (sizes.at(d.symbol) != size) {
        throw TraceError(absl::StrCat(
            entry, ": the example's size is ", size, " but input ", f.input,
            " dimension ", f.dim, " has ", d.symbol, " = ",
            sizes.at(d.symbol), "; dimensions sharing a symbol are equal"));
      }
    }
    sizes[d.symbol] = size;
  }
  return sizes;
}

void mark_dynamic(Graph& graph, const std::vector<DynamicDim>& dims) {
  std::vector<Node*> placeholders = graph.placeholders();
  for (size_t i = 0; i < placeholders.size(); ++i) {
    InputGuard* guard = placeholders[i]->meta().get_mutable(kGuard);
    if (guard == nullptr) continue;
    guard->dynamic.clear();
    for (const DynamicDim& d : dims) {
      if (d.input == i) guard->dynamic.push_back(d);
    }
    if (guard->dynamic.empty() || !guard->check_strides) continue;
    const c10::MemoryFormat format =
        memory_format_of(guard->sizes, guard->strides);
    if (format != c10::MemoryFormat::Contiguous &&
        format != c10::MemoryFormat::ChannelsLast) {
      throw TraceError(absl::StrCat(
          "input ", i, " ('", placeholders[i]->name(),
          "') has strides [", absl::StrJoin(guard->strides, ", "),
          "], which the traced code read, and dynamic dimensions: fx "
          "generalizes strides of contiguous and channels-last inputs only; "
          "pass a contiguous example input"));
    }
  }
}

void fit_metadata(const std::vector<Node*>& nodes,
                  const std::vector<std::vector<Node*>>& other_nodes,
                  const std::vector<SymbolSizes>& sizes,
                  const std::vector<DynamicDim>& dims) {
  for (const auto& graph_nodes : other_nodes) {
    if (graph_nodes.size() != nodes.size()) return;
  }
  SymbolicShapeFitter fitter(sizes, symbol_multiples(dims));
  for (size_t i = 0; i < nodes.size(); ++i) {
    std::vector<TensorMeta*> runs = {nodes[i]->meta().get_mutable(kTensorMeta)};
    for (const auto& graph_nodes : other_nodes) {
      runs.push_back(graph_nodes[i]->meta().get_mutable(kTensorMeta));
    }
    fitter.fit(runs);
    auto* list = nodes[i]->meta().get_mutable(kTensorMetaList);
    if (list == nullptr) continue;
    for (size_t k = 0; k < list->size(); ++k) {
      std::vector<TensorMeta*> elements = {&(*list)[k]};
      for (const auto& graph_nodes : other_nodes) {
        auto* other = graph_nodes[i]->meta().get_mutable(kTensorMetaList);
        elements.push_back(other && k < other->size() ? &(*other)[k] : nullptr);
      }
      fitter.fit(elements);
    }
  }
}

void fit_metadata(Trace& base, const std::vector<Trace>& others,
                  const std::vector<DynamicDim>& dims) {
  std::vector<std::vector<Node*>> other_nodes;
  std::vector<SymbolSizes> sizes = {base.sizes};
  for (const Trace& other : others) {
    other_nodes.push_back(other.graph->nodes().to_vector());
    sizes.push_back(other.sizes);
  }
  fit_metadata(base.graph->nodes().to_vector(), other_nodes, sizes, dims);
}

namespace {

// The graphs of `traces` compared with the base's node for node, and each
// int literal that changes fitted over all of them. Throws fx::TraceError.
struct Literals {
  std::vector<Node*> nodes;
  std::vector<std::vector<Node*>> other_nodes;
  std::vector<std::vector<int64_t>> matches;  // match_nodes, per trace
  std::vector<SymbolSizes> sizes;
  std::vector<std::pair<Position, std::variant<SizeExpr, SizeFit>>> fitted;
  // With `undecided`: the sizes where two fits of a literal that explain
  // every trace differ, instead of an error.
  std::optional<SymbolSizes> undecided;
};
Literals fit_literals(const Trace& base, const std::vector<const Trace*>& traces,
                      const std::vector<DynamicDim>& dims,
                      bool undecided = false) {
  Literals l;
  l.nodes = base.graph->nodes().to_vector();
  l.other_nodes.reserve(traces.size());
  l.sizes = {base.sizes};
  std::set<Position> changed;
  for (const Trace* other : traces) {
    l.other_nodes.push_back(other->graph->nodes().to_vector());
    l.matches.push_back(match_nodes(l.nodes, l.other_nodes.back()));
    Comparison(base, *other, l.nodes, l.other_nodes.back(), l.matches.back())
        .run(&changed);
    l.sizes.push_back(other->sizes);
  }
  for (const Position& p : changed) {
    std::vector<int64_t> values = {argument_at(*l.nodes[p.node], p).to_int()};
    for (size_t t = 0; t < l.other_nodes.size(); ++t) {
      const int64_t j = l.matches[t][p.node];
      values.push_back(argument_at(*l.other_nodes[t][j], p).to_int());
    }
    SizeFitResult f = fit_size(values, l.sizes, dims);
    auto seen = [&] {
      std::vector<std::string> out;
      for (size_t t = 0; t < values.size(); ++t) {
        out.push_back(absl::StrCat(values[t], " at ", describe(l.sizes[t])));
      }
      return absl::StrJoin(out, "; ");
    };
    if (const auto* u = std::get_if<Undecided>(&f)) {
      if (undecided) {
        l.undecided = u->at;
        return l;
      }
      throw TraceError(absl::StrCat(
          "the dynamic dimensions cannot be generalized: the size in ",
          describe_literal(*l.nodes[p.node], p), " is ", seen(),
          ", which both ", u->first, " and ",
          u->second, " explain, and they differ at ", describe(u->at),
          ". Make the dimension static, or bound it"));
    }
    if (std::holds_alternative<std::monostate>(f)) {
      throw TraceError(absl::StrCat(
          "the dynamic dimensions cannot be generalized: the size in ",
          describe_literal(*l.nodes[p.node], p), " is ", seen(),
          ", which fx cannot express as a function of the dynamic sizes "
          "(it tries a * S + b with floor division, products of sizes, each "
          "at most squared, roundings (S + q)//r and r*((S + q)//r) with r "
          "up to ", kMaxDivisor, ", and sums a * S1 + b * S2 + c; a C++ "
          "division whose numerator can be negative within the bounds "
          "truncates where the graph would floor, and is refused: raise "
          "the dimension's min so that it stays non-negative). "
          "Make the dimension static, or give it DynamicDim::multiple_of if "
          "the program divides it"));
    }
    if (const auto* e = std::get_if<SizeExpr>(&f)) {
      l.fitted.emplace_back(p, *e);
    } else {
      l.fitted.emplace_back(p, std::get<SizeFit>(f));
    }
  }
  return l;
}

std::vector<const Trace*> pointers(const std::vector<Trace>& traces,
                                   const std::vector<const Trace*>& more) {
  std::vector<const Trace*> out;
  for (const Trace& t : traces) out.push_back(&t);
  out.insert(out.end(), more.begin(), more.end());
  return out;
}

}  // namespace

std::optional<SymbolSizes> undecided_sizes(const Trace& base,
                                           const std::vector<Trace>& others,
                                           const std::vector<DynamicDim>& dims) {
  return fit_literals(base, pointers(others, {}), dims, /*undecided=*/true)
      .undecided;
}

void check_generalizes(const Trace& base, const std::vector<Trace>& others,
                       const std::vector<DynamicDim>& dims,
                       const Trace* check) {
  std::vector<const Trace*> more;
  if (check != nullptr) more.push_back(check);
  fit_literals(base, pointers(others, more), dims);
}

namespace {

bool at_least_two(const SymbolSizes& sizes) {
  for (const auto& [symbol, size] : sizes) {
    if (size < 2) return false;
  }
  return true;
}

}  // namespace

void generalize(Trace& base, const std::vector<Trace>& others,
                const std::vector<DynamicDim>& dims,
                const std::vector<const Trace*>& checks) {
  // Every fit first; the graph changes only once all are found.
  Literals l = fit_literals(base, pointers(others, checks), dims);
  const std::vector<Node*>& nodes = l.nodes;
  const auto& fitted = l.fitted;
  // The metadata's symbolic sizes from `others` and from the checks at
  // sizes of 2 and more (at 0 and 1 a dimension's stride may be any, which
  // no fit explains): a check at the high bounds tells a size the near
  // traces explain wrongly (x.slice(0, 0, 20) is [B] below B = 20), which
  // is then left unknown.
  std::vector<std::vector<Node*>> meta_nodes(
      l.other_nodes.begin(), l.other_nodes.begin() + others.size());
  std::vector<SymbolSizes> meta_sizes(l.sizes.begin(),
                                      l.sizes.begin() + others.size() + 1);
  for (size_t c = 0; c < checks.size(); ++c) {
    if (!at_least_two(checks[c]->sizes)) continue;
    meta_nodes.push_back(l.other_nodes[others.size() + c]);
    meta_sizes.push_back(l.sizes[others.size() + 1 + c]);
  }
  fit_metadata(nodes, meta_nodes, meta_sizes, dims);
  mark_dynamic(*base.graph, dims);
  Node* first = nullptr;
  for (Node* n : nodes) {
    if (n->op() != Opcode::kPlaceholder) {
      first = n;
      break;
    }
  }
  Builder builder(*base.graph, dims, base.unbacked, first);
  // A data-dependent size narrowed from its operator's bounds (the program
  // fails at 0) is checked where it is read.
  for (const DynamicDim& d : dims) {
    if (!d.data_dependent() || !base.unbacked.count(d.symbol)) continue;
    const Trace::Unbacked& u = base.unbacked.at(d.symbol);
    const Node* op = u.node;
    std::vector<std::pair<int64_t, std::string>> checks;
    if (d.min > 0) checks.emplace_back(d.min, ">=");
    if (d.max < u.max) checks.emplace_back(d.max, "<=");
    if (checks.empty()) continue;
    Node* size = builder.symbol(d.symbol);
    static const c10::OperatorHandle check =
        c10::Dispatcher::singleton().findSchemaOrThrow("fx_guard::check_size",
                                                       "");
    auto insertion = base.graph->inserting_before(size->next());
    for (const auto& [bound, relation] : checks) {
      base.graph->call_function(
          Target(check),
          {size, bound, relation,
           absl::StrCat("%", d.symbol, " ", relation, " ", bound, " (",
                        d.symbol, " is the size ", op->target().to_string(),
                        " %", op->name(), " returned; the graph was traced "
                        "for ", d.relation(), ")")});
    }
  }
  for (const auto& [p, f] : fitted) {
    Node& n = *nodes[p.node];
    Node* value = builder.build(f, &n);
    if (p.keyword) {
      const std::string key = n.kwargs().at(p.index).first;
      n.update_kwarg(key, replaced(n.kwargs().at(p.index).second, p.path, 0,
                                   value));
    } else {
      n.update_arg(p.index, replaced(n.args().at(p.index), p.path, 0, value));
    }
  }
}

}  // namespace fx::internal
