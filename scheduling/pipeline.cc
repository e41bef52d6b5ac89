#include "scheduling/pipeline.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <deque>
#include <functional>
#include <map>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <c10/core/ScalarType.h>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "fx/ir/control_flow.h"
#include "fx/ir/errors.h"
#include "fx/ir/function.h"
#include "fx/ir/meta.h"
#include "fx/runtime/guards.h"
#include "interpreter/interpreter.h"
#include "interpreter/shape_prop.h"
#include "passes/aliasing.h"
#include "passes/timing.h"
#include "third_party/libgomp.h"

namespace fx {
namespace {

// Up to this many usable cuts, the balance is found exactly (including the
// links' time); the dynamic program is quadratic in them.
constexpr size_t kExactCuts = 2000;

double meta_bytes(const TensorMeta& meta) {
  return static_cast<double>(meta.numel()) *
         static_cast<double>(c10::elementSize(meta.dtype));
}

double positive(double seconds) {
  return std::isfinite(seconds) && seconds > 0 ? seconds : 0.0;
}

// A node's seconds as `options` price it, with its stage's weights in cache
// and in memory, and the weight bytes it reads: node_seconds when set (the
// same seconds either way, no weights), else the cost model on the machine.
struct NodePrice {
  double in_cache = 0;
  double in_memory = 0;
  double weight_bytes = 0;

  double seconds(WeightsIn weights) const {
    return weights == WeightsIn::kMemory ? in_memory : in_cache;
  }
};

NodePrice price(const PipelineOptions& options, const Node& n) {
  NodePrice p;
  if (options.node_seconds) {
    p.in_cache = p.in_memory = positive(options.node_seconds(n));
    return p;
  }
  const NodeCost cost = estimate_node_cost(n);
  p.in_cache =
      positive(estimated_seconds(cost, options.machine, WeightsIn::kCache));
  p.in_memory =
      positive(estimated_seconds(cost, options.machine, WeightsIn::kMemory));
  p.weight_bytes = cost.weight_bytes;
  return p;
}

struct Cut {
  // Cut before calls[index].
  int64_t index = 0;
  // The tensors live across it, in program order.
  std::vector<Node*> live;
  // The sizes live across it (sym_* nodes of a graph with dynamic
  // dimensions): not sent, but read again in the next stage from the
  // dimensions of the tensors that cross.
  std::vector<Node*> sizes;
  double bytes = 0;
  // Empty when the cut may be used; else why not.
  std::string refusal;
};

class Splitter {
 public:
  Splitter(const GraphModuleImpl& module, const PipelineOptions& options)
      : module_(module), graph_(module.graph()), options_(options) {}

  Pipeline split() {
    check_module();
    collect_calls();
    find_cuts();
    std::vector<int64_t> chosen = options_.split_points.empty()
                                      ? balanced_cuts()
                                      : user_cuts();
    return build(chosen);
  }

 private:
  void check_module() {
    graph_.lint();
    if (!module_.init_steps().empty() || !module_.object_attributes().empty()) {
      throw GraphError(
          "split_pipeline: the module has init steps or script objects "
          "(packed weights of a lowered or quantized graph), which its "
          "stages cannot share; split the traced graph first, then lower "
          "or quantize each stage");
    }
    if (options_.split_points.empty() && options_.stages < 1) {
      throw GraphError(absl::StrCat("split_pipeline: stages = ",
                                    options_.stages, "; ask for 1 or more"));
    }
  }

  void collect_calls() {
    int64_t position = 0;
    for (Node* n : graph_.nodes()) {
      position_[n] = position++;
      if (!n->is_call()) continue;
      call_index_[n] = static_cast<int64_t>(calls_.size());
      calls_.push_back(n);
    }
    if (calls_.empty()) {
      throw GraphError("split_pipeline: the graph calls nothing to split");
    }
    // Prefix sums of each call's seconds with its stage's weights in cache
    // and in memory, and of its weight bytes (a stage's weights decide
    // where they are: each stage runs on its own process's cache).
    for (std::vector<double>* prefix :
         {&in_cache_, &in_memory_, &weight_bytes_}) {
      prefix->assign(calls_.size() + 1, 0.0);
    }
    for (size_t i = 0; i < calls_.size(); ++i) {
      const NodePrice p = price(options_, *calls_[i]);
      in_cache_[i + 1] = in_cache_[i] + p.in_cache;
      in_memory_[i + 1] = in_memory_[i] + p.in_memory;
      weight_bytes_[i + 1] = weight_bytes_[i] + p.weight_bytes;
    }
  }

  // Every cut between two calls, with its live values and whether it may
  // be used.
  void find_cuts() {
    const int64_t count = static_cast<int64_t>(calls_.size());
    const int64_t output_index = count;
    // The last call (or the output) using each value.
    absl::flat_hash_map<Node*, int64_t> last_use;
    std::vector<Node*> values;
    for (Node* n : graph_.nodes()) {
      if (n->op() != Opcode::kPlaceholder && !n->is_call()) continue;
      int64_t last = -2;
      for (Node* user : n->users()) {
        if (user->op() == Opcode::kOutput) {
          last = std::max(last, output_index);
        } else if (user->is_call()) {
          last = std::max(last, call_index_.at(user));
        }
      }
      last_use[n] = last;
      values.push_back(n);
    }
    // The last call writing in place to each storage root.
    absl::flat_hash_map<Node*, int64_t> last_write;
    for (int64_t i = 0; i < count; ++i) {
      for (Node* w : written_in_place(*calls_[i])) {
        if (w->op() == Opcode::kGetAttr) continue;
        Node* r = roots_(w);
        auto [it, added] = last_write.emplace(r, i);
        if (!added) it->second = std::max(it->second, i);
      }
    }
    // Sweep the cuts, keeping the live values ordered by position.
    std::set<std::pair<int64_t, Node*>> live;
    for (Node* p : graph_.placeholders()) {
      if (last_use[p] >= 0) live.emplace(position_.at(p), p);
    }
    for (int64_t c = 1; c < count; ++c) {
      Node* defined = calls_[c - 1];
      if (last_use[defined] >= c) live.emplace(position_.at(defined), defined);
      for (auto it = live.begin(); it != live.end();) {
        it = last_use[it->second] < c ? live.erase(it) : std::next(it);
      }
      Cut cut;
      cut.index = c;
      absl::flat_hash_map<Node*, Node*> seen_root;
      for (const auto& entry : live) {
        Node* v = entry.second;
        if (is_sym_call(*v)) {
          cut.sizes.push_back(v);
          continue;
        }
        cut.live.push_back(v);
        const TensorMeta* meta = v->meta().get(kTensorMeta);
        if (cut.refusal.empty() && meta != nullptr) {
          for (const SizeExpr& e : meta->symbolic_sizes) {
            if (e.known) continue;
            cut.refusal = absl::StrCat(
                "%", v->name(), " would cross it with a size no function of "
                "the dynamic dimensions gives (", meta->to_string(),
                "), so the next stage could not size its buffers");
            break;
          }
        }
        if (cut.refusal.empty() &&
            (meta == nullptr || v->meta().get(kTensorMetaList) != nullptr)) {
          cut.refusal = absl::StrCat(
              "%", v->name(),
              " would cross it, and only tensors with known shape and dtype "
              "(tensor_meta) can");
        }
        if (meta != nullptr) cut.bytes += meta_bytes(*meta);
        Node* r = roots_(v);
        auto w = last_write.find(r);
        if (!cut.refusal.empty() || w == last_write.end() || w->second < c) {
          continue;
        }
        if (r->op() == Opcode::kPlaceholder) {
          cut.refusal = absl::StrCat(
              "%", calls_[w->second]->name(), " after it writes in place to "
              "the graph input %", r->name(),
              ", which a later stage holds only a copy of");
        } else if (auto [other, added] = seen_root.emplace(r, v); !added) {
          cut.refusal = absl::StrCat(
              "%", other->second->name(), " and %", v->name(),
              " would cross it sharing storage, which %",
              calls_[w->second]->name(), " writes in place after it");
        }
      }
      for (Node* size : cut.sizes) {
        if (!cut.refusal.empty()) break;
        for (const std::string& symbol : symbols_read(size)) {
          if (symbol.empty()) {
            cut.refusal = absl::StrCat(
                "the size %", size->name(), " would cross it, and it is "
                "read from a dimension that is not one of the graph's "
                "dynamic ones (TraceOptions::dynamic)");
          } else if (find_dimension(cut.live, symbol).first == nullptr) {
            cut.refusal = absl::StrCat(
                "the size %", size->name(), " would cross it, and no tensor "
                "crossing it has a dimension of size ", symbol,
                " to read it from again");
          }
          if (!cut.refusal.empty()) break;
        }
      }
      cuts_.push_back(std::move(cut));
    }
  }

  // The symbols a size node reads (through sym_size calls, the dimensions'
  // symbolic sizes); "" for a dimension that is no symbol.
  std::set<std::string> symbols_read(Node* size) const {
    std::set<std::string> out;
    std::vector<Node*> pending = {size};
    while (!pending.empty()) {
      Node* n = pending.back();
      pending.pop_back();
      if (!is_sym_call(*n)) continue;
      if (&n->target().function() == sym_size()) {
        out.insert(symbol_of(*n));
        continue;
      }
      for (Node* input : n->all_input_nodes()) pending.push_back(input);
    }
    return out;
  }

  // The symbol sym_size(%x, d) reads: %x's dimension d, when its symbolic
  // size is a symbol alone.
  static std::string symbol_of(const Node& sym_size_call) {
    const Node* tensor = sym_size_call.args().at(0).to_node();
    const TensorMeta* meta = tensor->meta().get(kTensorMeta);
    int64_t d = sym_size_call.args().at(1).to_int();
    if (meta == nullptr) return "";
    if (d < 0) d += static_cast<int64_t>(meta->symbolic_sizes.size());
    if (d < 0 || d >= static_cast<int64_t>(meta->symbolic_sizes.size())) return "";
    const SizeExpr& e = meta->symbolic_sizes[d];
    return e.symbols.size() == 1 && e == SizeExpr::symbol(e.symbols[0]) ? e.symbols[0]
                                                                        : "";
  }

  // A tensor among `values` and its dimension of size `symbol`.
  static std::pair<Node*, int64_t> find_dimension(const std::vector<Node*>& values,
                                                  const std::string& symbol) {
    for (Node* v : values) {
      const TensorMeta* meta = v->meta().get(kTensorMeta);
      if (meta == nullptr) continue;
      for (size_t d = 0; d < meta->symbolic_sizes.size(); ++d) {
        if (meta->symbolic_sizes[d] == SizeExpr::symbol(symbol)) {
          return {v, static_cast<int64_t>(d)};
        }
      }
    }
    return {nullptr, 0};
  }

  const Cut& cut_at(int64_t index) const { return cuts_[index - 1]; }

  double stage_seconds(int64_t begin, int64_t end) const {
    const double weights = weight_bytes_[end] - weight_bytes_[begin];
    const bool in_memory =
        !options_.node_seconds && weights > options_.machine.cache_bytes;
    const std::vector<double>& prefix = in_memory ? in_memory_ : in_cache_;
    return prefix[end] - prefix[begin];
  }

  // Whether the calls can be cut into `stages` stages of at most
  // `limit` seconds each at usable cuts (the latest usable cut that keeps
  // each stage within the limit, greedily).
  bool fits(double limit, int64_t stages, const std::vector<int64_t>& usable)
      const {
    const int64_t count = static_cast<int64_t>(calls_.size());
    int64_t begin = 0;
    size_t next = 0;
    for (int64_t s = 1; s < stages; ++s) {
      int64_t best = -1;
      while (next < usable.size() &&
             stage_seconds(begin, usable[next]) <= limit) {
        best = usable[next++];
      }
      if (best < 0) return false;
      begin = best;
      if (stage_seconds(begin, count) <= limit) return true;
    }
    return stage_seconds(begin, count) <= limit;
  }

  std::vector<int64_t> balanced_cuts() {
    const int64_t stages = options_.stages;
    std::vector<int64_t> usable;
    std::string first_refusal;
    for (const Cut& cut : cuts_) {
      if (cut.refusal.empty()) {
        usable.push_back(cut.index);
      } else if (first_refusal.empty()) {
        first_refusal = absl::StrCat("(the cut before %",
                                     calls_[cut.index]->name(), ": ",
                                     cut.refusal, ")");
      }
    }
    if (stages - 1 > static_cast<int64_t>(usable.size())) {
      throw GraphError(absl::StrCat(
          "split_pipeline: ", stages, " stages need ", stages - 1,
          " cuts, and the graph has only ", usable.size(),
          " usable ones among its ", calls_.size(), " calls ", first_refusal,
          "; ask for fewer stages"));
    }
    if (stages == 1) return {};
    if (usable.size() <= kExactCuts) return exact_cuts(stages, usable);
    // The least achievable slowest stage, by bisection on the greedy test.
    const double total =
        stage_seconds(0, static_cast<int64_t>(calls_.size()));
    double low = 0;
    double high = total;
    for (int i = 0; i < 100 && high - low > 1e-12 * std::max(total, 1e-30);
         ++i) {
      const double middle = (low + high) / 2;
      (fits(middle, stages, usable) ? high : low) = middle;
    }
    const double limit = high * (1 + 1e-9) + 1e-15;
    // Among the cut sets within the limit, the fewest bytes crossing:
    // best[s][u] is the least bytes of s cuts ending at usable[u], the
    // window of feasible predecessors sliding forward with u.
    const size_t n = usable.size();
    const double kNone = std::numeric_limits<double>::infinity();
    const int64_t count = static_cast<int64_t>(calls_.size());
    std::vector<std::vector<double>> best(stages, std::vector<double>(n, kNone));
    std::vector<std::vector<int64_t>> from(stages, std::vector<int64_t>(n, -1));
    for (size_t u = 0; u < n; ++u) {
      if (stage_seconds(0, usable[u]) <= limit) {
        best[1][u] = cut_at(usable[u]).bytes;
      }
    }
    for (int64_t s = 2; s < stages; ++s) {
      std::deque<size_t> window;  // predecessors, increasing best[s-1]
      size_t added = 0;
      size_t low_index = 0;
      for (size_t u = 0; u < n; ++u) {
        while (added < u) {
          while (!window.empty() &&
                 best[s - 1][window.back()] >= best[s - 1][added]) {
            window.pop_back();
          }
          window.push_back(added++);
        }
        while (low_index < u &&
               stage_seconds(usable[low_index], usable[u]) > limit) {
          ++low_index;
        }
        while (!window.empty() && window.front() < low_index) {
          window.pop_front();
        }
        if (!window.empty() && best[s - 1][window.front()] < kNone) {
          best[s][u] = best[s - 1][window.front()] + cut_at(usable[u]).bytes;
          from[s][u] = static_cast<int64_t>(window.front());
        }
      }
    }
    int64_t last = -1;
    for (size_t u = 0; u < n; ++u) {
      if (best[stages - 1][u] < kNone &&
          stage_seconds(usable[u], count) <= limit &&
          (last < 0 || best[stages - 1][u] < best[stages - 1][last])) {
        last = static_cast<int64_t>(u);
      }
    }
    if (last < 0) {
      throw GraphError("split_pipeline: no balanced cut set was found");
    }
    std::vector<int64_t> chosen;
    for (int64_t s = stages - 1; s >= 1; --s) {
      chosen.push_back(usable[last]);
      last = from[s][last];
    }
    std::reverse(chosen.begin(), chosen.end());
    return chosen;
  }

  // A stage from the cut before calls[begin] (0: the graph's start) to the
  // one before calls[end]: its compute and the receiving of its inputs.
  double stage_cost(int64_t begin, int64_t end) const {
    double seconds = stage_seconds(begin, end);
    if (begin > 0) {
      seconds += options_.link.latency_seconds +
                 cut_at(begin).bytes / options_.link.bytes_per_second;
    }
    return seconds;
  }

  // Dynamic programming over the usable cuts: the least slowest stage
  // (compute and receiving), then the fewest bytes crossing.
  std::vector<int64_t> exact_cuts(int64_t stages,
                                  const std::vector<int64_t>& usable) const {
    struct Best {
      double slowest = std::numeric_limits<double>::infinity();
      double bytes = 0;
      int64_t from = -1;
    };
    auto better = [](double slowest, double bytes, const Best& than) {
      if (!std::isfinite(than.slowest)) return std::isfinite(slowest);
      const double tolerance = 1e-9 * std::max(std::abs(than.slowest), 1e-30);
      if (slowest < than.slowest - tolerance) return true;
      if (slowest > than.slowest + tolerance) return false;
      return bytes < than.bytes;
    };
    const size_t n = usable.size();
    const int64_t count = static_cast<int64_t>(calls_.size());
    std::vector<std::vector<Best>> best(stages, std::vector<Best>(n));
    for (size_t u = 0; u < n; ++u) {
      best[1][u] = {stage_cost(0, usable[u]), cut_at(usable[u]).bytes, -1};
    }
    for (int64_t s = 2; s < stages; ++s) {
      for (size_t u = 0; u < n; ++u) {
        for (size_t v = 0; v < u; ++v) {
          const Best& before = best[s - 1][v];
          if (!std::isfinite(before.slowest)) continue;
          const double slowest =
              std::max(before.slowest, stage_cost(usable[v], usable[u]));
          const double bytes = before.bytes + cut_at(usable[u]).bytes;
          if (better(slowest, bytes, best[s][u])) {
            best[s][u] = {slowest, bytes, static_cast<int64_t>(v)};
          }
        }
      }
    }
    Best final;
    int64_t last = -1;
    for (size_t u = 0; u < n; ++u) {
      const Best& before = best[stages - 1][u];
      if (!std::isfinite(before.slowest)) continue;
      const double slowest =
          std::max(before.slowest, stage_cost(usable[u], count));
      if (better(slowest, before.bytes, final)) {
        final = {slowest, before.bytes, -1};
        last = static_cast<int64_t>(u);
      }
    }
    if (last < 0) {
      throw GraphError("split_pipeline: no cut set was found");
    }
    std::vector<int64_t> chosen;
    for (int64_t s = stages - 1; s >= 1; --s) {
      chosen.push_back(usable[last]);
      last = best[s][last].from;
    }
    std::reverse(chosen.begin(), chosen.end());
    return chosen;
  }

  // The cut a split point names: after the node of that name, or before the
  // first node traced inside the module of that path.
  int64_t cut_index_of(const std::string& point) const {
    for (Node* n : calls_) {
      if (n->name() == point) return call_index_.at(n) + 1;
    }
    for (Node* n : calls_) {
      const std::string* path = n->meta().get(kModulePath);
      if (path != nullptr &&
          (*path == point || (path->size() > point.size() &&
                              path->compare(0, point.size(), point) == 0 &&
                              (*path)[point.size()] == '.'))) {
        return call_index_.at(n);
      }
    }
    throw GraphError(absl::StrCat(
        "split_pipeline: the split point '", point,
        "' names neither a call node nor a module path of the graph; give "
        "a node name (the cut goes after it) or a module path such as "
        "'layer3' (the cut goes before it)"));
  }

  std::vector<int64_t> user_cuts() {
    std::vector<int64_t> chosen;
    const int64_t count = static_cast<int64_t>(calls_.size());
    for (const std::string& point : options_.split_points) {
      const int64_t index = cut_index_of(point);
      if (index <= 0 || index >= count) {
        throw GraphError(absl::StrCat(
            "split_pipeline: the split point '", point, "' leaves a stage ",
            "with no calls (it is at the graph's ",
            index <= 0 ? "start" : "end", ")"));
      }
      if (!chosen.empty() && index <= chosen.back()) {
        throw GraphError(absl::StrCat(
            "split_pipeline: the split point '", point,
            "' does not come after the one before it; give split points in "
            "program order, each leaving a stage with calls"));
      }
      const Cut& cut = cut_at(index);
      if (!cut.refusal.empty()) {
        throw GraphError(absl::StrCat("split_pipeline: cannot cut at '",
                                      point, "': ", cut.refusal,
                                      "; choose another split point"));
      }
      chosen.push_back(index);
    }
    return chosen;
  }

  // A GraphModule running `g` on the module's tensors and leaf modules.
  GraphModule make_module(std::unique_ptr<Graph> g) {
    if (parameter_paths_.empty()) {
      for (const auto& item : module_.named_parameters(/*recurse=*/true)) {
        parameter_paths_.insert(item.key());
      }
    }
    Attributes attributes;
    // What the stage's graph and its bodies of control flow read.
    for (const Graph* graph : g->all_graphs()) {
      for (Node* n : graph->find_nodes(Opcode::kGetAttr)) {
        if (Graph::reads_subgraph(*n)) continue;
        const std::string& path = n->target().str();
        (parameter_paths_.count(path) ? attributes.parameters
                                      : attributes.buffers)
            .emplace(path, module_.fetch_attr(path));
      }
      for (Node* n : graph->find_nodes(Opcode::kCallModule)) {
        const std::string& path = n->target().str();
        attributes.modules.emplace(path, *module_.leaf_module(path));
      }
    }
    attributes.traced_training = module_.traced_training();
    auto made =
        std::make_shared<GraphModuleImpl>(std::move(g), std::move(attributes));
    if (!module_.traced_training()) made->train(module_.is_training());
    return GraphModule(made);
  }

  PipelineStage build_stage(int64_t begin, int64_t end, bool last) {
    PipelineStage stage;
    auto g = std::make_unique<Graph>();
    absl::flat_hash_map<const Node*, Node*> env;
    std::vector<Node*> inputs =
        begin == 0 ? graph_.placeholders() : cut_at(begin).live;
    for (Node* input : inputs) {
      Node* placeholder = g->placeholder(
          input->op() == Opcode::kPlaceholder ? input->target().str()
                                              : input->name());
      placeholder->meta() = input->meta();
      env[input] = placeholder;
      stage.inputs.push_back(input->name());
      if (const TensorMeta* meta = input->meta().get(kTensorMeta)) {
        stage.input_meta.push_back(*meta);
        stage.bytes_in += meta_bytes(*meta);
      }
    }
    std::map<std::string, Node*> symbols;
    std::function<Argument(Node*)> lookup = [&](Node* n) -> Argument {
      if (n->op() == Opcode::kGetAttr && !env.contains(n)) {
        env[n] = g->node_copy(*n, [](Node*) -> Argument {
          throw GraphError("split_pipeline: a get_attr with arguments");
        });
      }
      if (begin > 0 && is_sym_call(*n) && !env.contains(n) &&
          call_index_.at(n) < begin) {
        // A size from an earlier stage, read again here.
        if (&n->target().function() == sym_size()) {
          const std::string symbol = symbol_of(*n);
          Node*& read = symbols[symbol];
          if (read == nullptr) {
            auto [tensor, d] = find_dimension(cut_at(begin).live, symbol);
            read = g->call_function(Target(sym_size()), {env.at(tensor), d});
          }
          env[n] = read;
        } else {
          env[n] = g->node_copy(*n, lookup);
        }
      }
      return env.at(n);
    };
    for (int64_t i = begin; i < end; ++i) {
      const Node& n = *calls_[i];
      for (Node* input : n.all_input_nodes()) lookup(input);
      env[&n] = g->node_copy(n, lookup);
      stage.node_names.push_back(n.name());
    }
    if (last) {
      const Node* output = graph_.output_node();
      g->output(output->args().empty() ? Argument()
                                       : map_arg(output->args()[0], lookup));
    } else {
      std::vector<Argument> results;
      for (Node* v : cut_at(end).live) {
        results.push_back(env.at(v));
        stage.outputs.push_back(v->name());
        const TensorMeta& meta = *v->meta().get(kTensorMeta);
        stage.output_meta.push_back(meta);
        stage.bytes_out += meta_bytes(meta);
      }
      g->output(results.size() == 1 ? results[0]
                                    : Argument::tuple(std::move(results)));
    }
    if (last) {
      for (Node* v : graph_.output_node()->all_input_nodes()) {
        stage.outputs.push_back(v->name());
        if (const TensorMeta* meta = v->meta().get(kTensorMeta)) {
          stage.output_meta.push_back(*meta);
          stage.bytes_out += meta_bytes(*meta);
        }
      }
    }
    stage.nodes = end - begin;
    stage.compute_seconds = stage_seconds(begin, end);
    stage.module = make_module(std::move(g));
    return stage;
  }

  Pipeline build(const std::vector<int64_t>& chosen) {
    Pipeline pipeline;
    std::vector<int64_t> bounds{0};
    bounds.insert(bounds.end(), chosen.begin(), chosen.end());
    bounds.push_back(static_cast<int64_t>(calls_.size()));
    for (size_t s = 0; s + 1 < bounds.size(); ++s) {
      pipeline.stages.push_back(build_stage(bounds[s], bounds[s + 1],
                                            s + 2 == bounds.size()));
    }
    return pipeline;
  }

  const GraphModuleImpl& module_;
  const Graph& graph_;
  const PipelineOptions& options_;
  std::vector<Node*> calls_;
  absl::flat_hash_map<const Node*, int64_t> call_index_;
  absl::flat_hash_map<const Node*, int64_t> position_;
  StorageRoots roots_;
  std::vector<double> in_cache_;
  std::vector<double> in_memory_;
  std::vector<double> weight_bytes_;
  std::vector<Cut> cuts_;
  std::set<std::string> parameter_paths_;
};

// Times each call node of a run.
class ProfilingInterpreter : public Interpreter {
 public:
  using Interpreter::Interpreter;

  c10::IValue run_node(const Node& node) override {
    if (!node.is_call()) return Interpreter::run_node(node);
    const Clock::time_point start = Clock::now();
    c10::IValue value = Interpreter::run_node(node);
    samples[node.name()].push_back(ms_since(start) / 1000);
    return value;
  }

  std::map<std::string, std::vector<double>> samples;
};

std::string shapes(const std::vector<TensorMeta>& metas) {
  std::vector<std::string> parts;
  for (const TensorMeta& meta : metas) {
    parts.push_back(
        absl::StrCat(c10::toString(meta.dtype), "[", meta.sizes_text(), "]"));
  }
  return absl::StrJoin(parts, " ");
}

// A graph with dynamic dimensions is split from a copy whose metadata
// ShapeProp gave symbolic sizes afresh (on zeros of the example's shapes,
// buffers kept), so that each stage's inputs and outputs say how their
// sizes follow the dynamic ones, whatever passes ran since the trace.
Pipeline split(const GraphModule& module, const PipelineOptions& options) {
  // A cond or while_loop is one call, whole in its stage (its tuple of
  // outputs crosses no cut: only tensors do). One whose bodies write in
  // place is refused: the stages hold copies of what crosses.
  for (Node* n : module->graph().nodes()) {
    if (is_control_flow_call(*n) && n->is_impure()) {
      throw GraphError(absl::StrCat(
          "split_pipeline: %", n->name(), " (", n->target().to_string(),
          ") writes in place inside its bodies, which the stages cannot "
          "share; return the new value from the body instead"));
    }
  }
  if (dynamic_dims(module->graph()).empty()) return Splitter(*module, options).split();
  GraphModule copy(module->copy());
  propagate_symbolic_shapes(copy, "split_pipeline");
  // The last stage's message is sized from the outputs' symbolic sizes.
  for (const Node* n : copy->graph().output_node()->all_input_nodes()) {
    const TensorMeta* meta = n->meta().get(kTensorMeta);
    if (meta == nullptr) continue;
    for (const SizeExpr& e : meta->symbolic_sizes) {
      if (e.known) continue;
      throw GraphError(absl::StrCat(
          "split_pipeline: the graph returns %", n->name(), " ", meta->to_string(),
          ", a size no function of its dynamic dimensions gives, so the last "
          "stage could not size what it sends back; return it in another "
          "shape, or specialize the sizes (fx::specialize_sizes)"));
    }
  }
  return Splitter(*copy, options).split();
}

}  // namespace

Pipeline split_pipeline(const GraphModule& module,
                        const PipelineOptions& options) {
  return split(module, options);
}

namespace {

// What a stage's output gives the next stage: a tuple's elements, or the
// one value.
std::vector<c10::IValue> next_stage_inputs(const c10::IValue& output) {
  if (!output.isTuple()) return {output};
  const auto& elements = output.toTupleRef().elements();
  return std::vector<c10::IValue>(elements.begin(), elements.end());
}

// A cut and its stages as measured.
struct MeasuredCut {
  std::vector<std::vector<std::string>> stage_nodes;
  std::vector<double> seconds;
};

// Solves the n x n system `a` x = `b` in place (Gaussian elimination with
// partial pivoting; `a` is symmetric positive definite here).
std::vector<double> solve(std::vector<std::vector<double>> a,
                          std::vector<double> b) {
  const size_t n = b.size();
  for (size_t col = 0; col < n; ++col) {
    size_t pivot = col;
    for (size_t row = col + 1; row < n; ++row) {
      if (std::abs(a[row][col]) > std::abs(a[pivot][col])) pivot = row;
    }
    std::swap(a[col], a[pivot]);
    std::swap(b[col], b[pivot]);
    for (size_t row = col + 1; row < n; ++row) {
      const double f = a[row][col] / a[col][col];
      for (size_t k = col; k < n; ++k) a[row][k] -= f * a[col][k];
      b[row] -= f * b[col];
    }
  }
  std::vector<double> x(n);
  for (size_t i = n; i-- > 0;) {
    double sum = b[i];
    for (size_t k = i + 1; k < n; ++k) sum -= a[i][k] * x[k];
    x[i] = sum / a[i][i];
  }
  return x;
}

// Each node's seconds as every measured cut so far has it. The nodes fall
// into segments, those in the same stage in every cut (one per stage after
// one cut; a cut moved once adds the nodes it moved as a segment of their
// own). Each segment's seconds are fitted to every stage measured (least
// squares: a stage's seconds are its segments' sum), held near the last
// cut's estimate (its stage's measured / predicted times the segment's
// price) where the measurements leave them free; a node gets its share of
// its segment by its price. After one cut this is the last cut's estimate
// itself; after two that bracket the balance, the nodes between them are
// timed by what moving them changed.
std::map<std::string, double> calibrated_node_seconds(
    const GraphModule& module, const std::vector<MeasuredCut>& history,
    const PipelineOptions& options) {
  std::map<std::string, const Node*> by_name;
  for (const Node* n : module->graph().nodes()) by_name[n->name()] = n;
  // Each node's stage in every cut, and its price in the last.
  std::map<std::string, std::vector<size_t>> stages_of;
  for (const MeasuredCut& cut : history) {
    for (size_t s = 0; s < cut.stage_nodes.size(); ++s) {
      for (const std::string& name : cut.stage_nodes[s]) {
        if (by_name.count(name)) stages_of[name].push_back(s);
      }
    }
  }
  const MeasuredCut& last = history.back();
  std::map<std::string, double> node_price;
  std::vector<double> last_factor(last.stage_nodes.size(), 1.0);
  for (size_t s = 0; s < last.stage_nodes.size(); ++s) {
    std::vector<std::pair<std::string, NodePrice>> prices;
    double weight_bytes = 0;
    for (const std::string& name : last.stage_nodes[s]) {
      auto it = by_name.find(name);
      if (it == by_name.end()) continue;
      prices.emplace_back(name, price(options, *it->second));
      weight_bytes += prices.back().second.weight_bytes;
    }
    const WeightsIn weights = weights_in(weight_bytes, options.machine);
    double predicted = 0;
    for (const auto& [name, p] : prices) {
      node_price[name] = p.seconds(weights);
      predicted += node_price[name];
    }
    if (predicted > 0 && last.seconds[s] > 0) {
      last_factor[s] = last.seconds[s] / predicted;
    }
  }
  // Segments: nodes with the same stage in every cut.
  std::map<std::vector<size_t>, size_t> segment_of;
  std::vector<double> segment_price;
  std::vector<double> prior;
  std::map<std::string, size_t> node_segment;
  for (const auto& [name, stages] : stages_of) {
    if (stages.size() != history.size() || !node_price.count(name)) continue;
    auto [it, added] = segment_of.emplace(stages, segment_price.size());
    if (added) {
      segment_price.push_back(0);
      prior.push_back(0);
    }
    node_segment[name] = it->second;
    segment_price[it->second] += node_price[name];
    prior[it->second] += node_price[name] * last_factor[stages.back()];
  }
  const size_t k = segment_price.size();
  // Least squares, scaled by the mean stage time, with a light pull of
  // each segment toward its prior (relative to it).
  double scale = 0;
  size_t equations = 0;
  for (const MeasuredCut& cut : history) {
    for (double v : cut.seconds) {
      scale += v;
      ++equations;
    }
  }
  scale = equations > 0 && scale > 0 ? scale / equations : 1.0;
  constexpr double kPull = 1e-4;
  std::vector<std::vector<double>> normal(k, std::vector<double>(k, 0.0));
  std::vector<double> rhs(k, 0.0);
  for (size_t c = 0; c < history.size(); ++c) {
    for (size_t s = 0; s < history[c].seconds.size(); ++s) {
      std::vector<double> row(k, 0.0);
      for (const auto& [stages, seg] : segment_of) {
        if (stages[c] == s) row[seg] = 1.0;
      }
      for (size_t i = 0; i < k; ++i) {
        for (size_t j = 0; j < k; ++j) normal[i][j] += row[i] * row[j];
        rhs[i] += row[i] * history[c].seconds[s] / scale;
      }
    }
  }
  for (size_t i = 0; i < k; ++i) {
    const double p = std::max(prior[i] / scale, 1e-12);
    normal[i][i] += kPull / (p * p);
    rhs[i] += kPull / p;
  }
  std::vector<double> fitted = k > 0 ? solve(normal, rhs) : std::vector<double>{};
  std::map<std::string, double> seconds;
  for (const auto& [name, seg] : node_segment) {
    const double segment_seconds =
        std::max(fitted[seg] * scale, 0.01 * prior[seg]);
    seconds[name] = segment_price[seg] > 0
                        ? node_price[name] / segment_price[seg] * segment_seconds
                        : 0.0;
  }
  return seconds;
}

Pipeline split_by_history(const GraphModule& module,
                          const std::vector<MeasuredCut>& history,
                          PipelineOptions options) {
  auto corrected = std::make_shared<std::map<std::string, double>>(
      calibrated_node_seconds(module, history, options));
  options.split_points.clear();
  options.stages = static_cast<int64_t>(history.back().seconds.size());
  options.node_seconds = [priced = options, corrected](const Node& n) {
    auto it = corrected->find(n.name());
    return it != corrected->end() ? it->second : price(priced, n).in_cache;
  };
  return split_pipeline(module, options);
}

std::vector<std::vector<std::string>> stage_nodes(const Pipeline& p) {
  std::vector<std::vector<std::string>> names;
  for (const PipelineStage& stage : p.stages) names.push_back(stage.node_names);
  return names;
}

}  // namespace

Pipeline rebalance_pipeline(const GraphModule& module, const Pipeline& pipeline,
                            const std::vector<double>& measured_stage_seconds,
                            PipelineOptions options) {
  if (measured_stage_seconds.size() != pipeline.stages.size()) {
    throw GraphError(absl::StrCat(
        "rebalance_pipeline: ", measured_stage_seconds.size(),
        " measured times for ", pipeline.stages.size(), " stages"));
  }
  // The seconds each node was priced at (with its stage's weights where
  // they were), times its stage's measured / predicted.
  return split_by_history(
      module, {{stage_nodes(pipeline), measured_stage_seconds}},
      std::move(options));
}

TunedPipeline tune_pipeline(
    const GraphModule& module, const PipelineOptions& options,
    const std::function<std::vector<double>(Pipeline&)>& measure,
    int rounds) {
  if (rounds < 0) {
    throw GraphError(absl::StrCat("tune_pipeline: ", rounds,
                                  " rounds; give 0 (the cost model's cut) "
                                  "or more"));
  }
  auto measured = [&](Pipeline& cut) {
    std::vector<double> seconds = measure(cut);
    if (seconds.size() != cut.stages.size()) {
      throw GraphError(absl::StrCat("tune_pipeline: measure returned ",
                                    seconds.size(), " times for ",
                                    cut.stages.size(), " stages"));
    }
    for (size_t s = 0; s < seconds.size(); ++s) {
      if (!std::isfinite(seconds[s]) || seconds[s] <= 0) {
        throw GraphError(absl::StrCat("tune_pipeline: measure returned ",
                                      seconds[s], " seconds for stage ", s,
                                      "; each stage's time must be positive"));
      }
    }
    return seconds;
  };
  auto slowest = [](const std::vector<double>& seconds) {
    return *std::max_element(seconds.begin(), seconds.end());
  };
  TunedPipeline tuned;
  tuned.pipeline = split_pipeline(module, options);
  tuned.stage_seconds = measured(tuned.pipeline);
  tuned.measured.push_back(tuned.stage_seconds);
  std::vector<MeasuredCut> history{
      {stage_nodes(tuned.pipeline), tuned.stage_seconds}};
  std::set<std::vector<std::vector<std::string>>> seen{history[0].stage_nodes};
  for (int round = 0; round < rounds; ++round) {
    Pipeline next = split_by_history(module, history, options);
    if (!seen.insert(stage_nodes(next)).second) break;
    std::vector<double> seconds = measured(next);
    tuned.measured.push_back(seconds);
    history.push_back({stage_nodes(next), seconds});
    if (slowest(seconds) < slowest(tuned.stage_seconds)) {
      tuned.pipeline = std::move(next);
      tuned.stage_seconds = std::move(seconds);
      tuned.kept = tuned.measured.size() - 1;
    }
  }
  return tuned;
}

std::vector<double> time_stages_at_once(const Pipeline& pipeline,
                                        const std::vector<c10::IValue>& inputs,
                                        int rounds, int threads_per_stage) {
  if (rounds < 1 || threads_per_stage < 1) {
    throw GraphError(absl::StrCat(
        "time_stages_at_once: ", rounds, " rounds and ", threads_per_stage,
        " threads per stage; each must be at least 1"));
  }
  const size_t n = pipeline.stages.size();
  // Each stage's input: the stages before it, run once in turn.
  std::vector<std::vector<c10::IValue>> stage_inputs{inputs};
  for (size_t s = 0; s + 1 < n; ++s) {
    GraphModule stage = pipeline.stages[s].module;
    stage_inputs.push_back(next_stage_inputs(stage->forward(stage_inputs.back())));
  }
  const bool grad = c10::GradMode::is_enabled();
  std::vector<std::vector<double>> samples(n);
  std::vector<std::exception_ptr> errors(n);
  std::atomic<size_t> ready{0};
  std::atomic<size_t> done{0};
  std::vector<std::thread> threads;
  for (size_t s = 0; s < n; ++s) {
    threads.emplace_back([&, s] {
      bool announced = false;
      bool counted = false;
      try {
        c10::AutoGradMode mode(grad);
        set_threads_of_this_thread(threads_per_stage);
        GraphModule stage = pipeline.stages[s].module;
        stage->forward(stage_inputs[s]);  // warm
        announced = true;
        ++ready;
        while (ready.load() < n) std::this_thread::yield();
        while (!counted || done.load() < n) {
          const auto start = Clock::now();
          stage->forward(stage_inputs[s]);
          if (counted) continue;
          samples[s].push_back(ms_since(start) * 1e-3);
          if (static_cast<int>(samples[s].size()) == rounds) {
            counted = true;
            ++done;
          }
        }
      } catch (...) {
        errors[s] = std::current_exception();
        // Let the others start and finish.
        if (!announced) ++ready;
        if (!counted) ++done;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  std::vector<double> medians;
  for (std::vector<double>& s : samples) medians.push_back(median(std::move(s)));
  return medians;
}

c10::IValue run_pipeline_locally(const Pipeline& pipeline,
                                 std::vector<c10::IValue> inputs) {
  c10::IValue value;
  for (size_t s = 0; s < pipeline.stages.size(); ++s) {
    GraphModule module = pipeline.stages[s].module;
    value = module->forward(std::move(inputs));
    if (s + 1 == pipeline.stages.size()) break;
    inputs = next_stage_inputs(value);
  }
  return value;
}

std::map<std::string, double> profile_node_seconds(
    const GraphModule& module, const std::vector<c10::IValue>& inputs,
    int rounds) {
  ProfilingInterpreter interpreter(module);
  interpreter.run(inputs);
  interpreter.samples.clear();
  for (int r = 0; r < std::max(rounds, 1); ++r) interpreter.run(inputs);
  std::map<std::string, double> medians;
  for (auto& [name, samples] : interpreter.samples) {
    medians[name] = median(std::move(samples));
  }
  return medians;
}

PipelinePrediction predict_pipeline(const Pipeline& pipeline,
                                    int64_t micro_batches, const Link& link) {
  PipelinePrediction prediction;
  if (pipeline.stages.empty() || micro_batches < 1) return prediction;
  double slowest = 0;
  double through = 0;
  double compute = 0;
  for (size_t s = 0; s < pipeline.stages.size(); ++s) {
    const PipelineStage& stage = pipeline.stages[s];
    double seconds = stage.compute_seconds;
    if (s > 0) {
      seconds += link.latency_seconds + stage.bytes_in / link.bytes_per_second;
    }
    prediction.stage_seconds.push_back(seconds);
    slowest = std::max(slowest, seconds);
    through += seconds;
    compute += stage.compute_seconds;
  }
  double back = 0;
  if (pipeline.stages.size() > 1) {
    back = link.latency_seconds +
           pipeline.stages.back().bytes_out / link.bytes_per_second;
  }
  prediction.batch_seconds =
      through + back + static_cast<double>(micro_batches - 1) * slowest;
  prediction.stream_batch_seconds =
      static_cast<double>(micro_batches) * slowest;
  prediction.sequential_seconds = static_cast<double>(micro_batches) * compute;
  return prediction;
}

std::string format_pipeline(const Pipeline& pipeline) {
  std::string text;
  for (size_t s = 0; s < pipeline.stages.size(); ++s) {
    const PipelineStage& stage = pipeline.stages[s];
    absl::StrAppend(
        &text,
        absl::StrFormat("stage %d: %d nodes, %s predicted, in %s (%s), out "
                        "%s (%s)\n",
                        s, stage.nodes, format_seconds(stage.compute_seconds),
                        format_quantity(stage.bytes_in, "B"),
                        shapes(stage.input_meta),
                        format_quantity(stage.bytes_out, "B"),
                        shapes(stage.output_meta)));
  }
  return text;
}

}  // namespace fx
