#include "quantization/numeric_suite.h"

#include <ATen/ATen.h>

#include <cmath>
#include <limits>
#include <map>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "interpreter/interpreter.h"
#include "quantization/qconfig.h"
#include "quantization/quantize_fx.h"

namespace fx {
namespace {

// Records the tensor each node computes.
class Recorder : public Interpreter {
 public:
  Recorder(GraphModule module, std::function<bool(const Node&)> wanted)
      : Interpreter(std::move(module)), wanted_(std::move(wanted)) {}

  // A copy: a later in-place node (hardswish_, silu_) may overwrite the
  // value itself.
  c10::IValue run_node(const Node& node) override {
    c10::IValue v = Interpreter::run_node(node);
    if (v.isTensor() && wanted_(node)) values[&node] = v.toTensor().clone();
    return v;
  }

  absl::flat_hash_map<const Node*, at::Tensor> values;

 private:
  std::function<bool(const Node&)> wanted_;
};

// `prepared` without its observers: each observe node replaced by what it
// observes.
GraphModule without_observers(const GraphModule& prepared) {
  GraphModule copy(prepared->copy());
  Graph& g = copy->graph();
  for (Node* n : g.nodes()) {
    if (n->is_call_to({"fx_quant::observe"})) {
      n->replace_all_uses_with(n->args()[0].to_node());
      g.erase_node(n);
    }
  }
  g.eliminate_dead_code();
  copy->recompile();
  return copy;
}

struct Sums {
  double signal = 0, noise = 0;
};

double to_db(const Sums& s) {
  if (s.noise == 0) return std::numeric_limits<double>::infinity();
  if (s.signal == 0) return -std::numeric_limits<double>::infinity();
  return 10 * std::log10(s.signal / s.noise);
}

}  // namespace

double sqnr_db(const at::Tensor& reference, const at::Tensor& other) {
  const at::Tensor r = reference.to(at::kDouble);
  const at::Tensor o = (other.is_quantized() ? other.dequantize() : other)
                           .to(at::kDouble);
  Sums s{r.pow(2).sum().item<double>(), (r - o).pow(2).sum().item<double>()};
  return to_db(s);
}

std::vector<NodeQuantizationError> quantization_report(
    const GraphModule& prepared, const GraphModule& quantized,
    const std::vector<std::vector<c10::IValue>>& inputs) {
  if (inputs.empty()) {
    throw QuantizationError("quantization_report: give at least one input");
  }
  GraphModule reference = without_observers(prepared);
  absl::flat_hash_map<std::string, const Node*> by_name;
  for (const Node* n : reference->graph().nodes()) by_name[n->name()] = n;
  // The quantized module's nodes that stand for a reference node, in order.
  std::vector<std::pair<const Node*, const Node*>> pairs;
  for (const Node* n : quantized->graph().nodes()) {
    const std::string* from = n->meta().get(kQuantizedFrom);
    if (from == nullptr) continue;
    auto it = by_name.find(*from);
    if (it != by_name.end()) pairs.emplace_back(n, it->second);
  }
  absl::flat_hash_map<const Node*, const Node*> wanted_float;
  absl::flat_hash_map<const Node*, const Node*> wanted_quantized;
  for (const auto& [q, f] : pairs) {
    wanted_float[f] = q;
    wanted_quantized[q] = f;
  }
  std::map<size_t, Sums> sums;  // by index in pairs
  torch::NoGradGuard no_grad;
  for (const std::vector<c10::IValue>& in : inputs) {
    Recorder f(reference, [&](const Node& n) { return wanted_float.contains(&n); });
    f.run(in);
    Recorder q(quantized,
               [&](const Node& n) { return wanted_quantized.contains(&n); });
    q.run(in);
    for (size_t i = 0; i < pairs.size(); ++i) {
      auto fv = f.values.find(pairs[i].second);
      auto qv = q.values.find(pairs[i].first);
      if (fv == f.values.end() || qv == q.values.end()) continue;
      at::Tensor a = fv->second.to(at::kDouble);
      at::Tensor b = qv->second.is_quantized() ? qv->second.dequantize()
                                               : qv->second;
      b = b.to(at::kDouble);
      if (a.sizes() != b.sizes()) continue;
      Sums& s = sums[i];
      s.signal += a.pow(2).sum().item<double>();
      s.noise += (a - b).pow(2).sum().item<double>();
    }
  }
  std::vector<NodeQuantizationError> rows;
  for (const auto& [i, s] : sums) {
    rows.push_back({pairs[i].second->name(), pairs[i].first->target().to_string(),
                    to_db(s)});
  }
  return rows;
}

std::string format_quantization_report(
    const std::vector<NodeQuantizationError>& rows) {
  size_t node_width = 4, op_width = 8;
  for (const auto& r : rows) {
    node_width = std::max(node_width, r.node.size());
    op_width = std::max(op_width, r.op.size());
  }
  std::string out = absl::StrFormat("%-*s  %-*s  %s\n", node_width, "node",
                                    op_width, "operator", "SQNR (dB)");
  const NodeQuantizationError* worst = nullptr;
  for (const auto& r : rows) {
    absl::StrAppend(&out, absl::StrFormat("%-*s  %-*s  %.1f\n", node_width,
                                          r.node, op_width, r.op, r.sqnr_db));
    if (worst == nullptr || r.sqnr_db < worst->sqnr_db) worst = &r;
  }
  if (worst != nullptr) {
    absl::StrAppend(&out, absl::StrFormat("lowest: %s (%s), %.1f dB\n",
                                          worst->node, worst->op,
                                          worst->sqnr_db));
  }
  return out;
}

}  // namespace fx
