#include "lowering/conv_chain.h"

#include <c10/core/ScalarType.h>

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_join.h"
#include "fx/ir/function.h"
#include "fx/ir/graph.h"
#include "fx/ir/operator_schemas.h"

namespace fx {
namespace {

constexpr size_t kMinLayers = 3;

// A lowered convolution that can be a chain's member: its input, its
// residual (the value it adds into in place, or null) and its layer's
// arguments.
struct Member {
  Node* node = nullptr;
  Node* input = nullptr;
  Node* residual = nullptr;
  Node* weight = nullptr;
  Node* bias = nullptr;
  int64_t stride = 0, padding = 0, groups = 0;
  std::string activation = "none";
  double alpha = 0, beta = 0;
};

// Both values of a 2-element int list, when they are equal.
bool square(const Argument& a, int64_t* value) {
  if (!a.is_list()) return false;
  const std::vector<int64_t> v = a.to_int_list();
  if (v.size() != 2 || v[0] != v[1]) return false;
  *value = v[0];
  return true;
}

bool batch_one_float(const Node* n) {
  const TensorMeta* m = n == nullptr ? nullptr : n->tensor_meta();
  return m != nullptr && m->sizes.size() == 4 && m->sizes[0] == 1 &&
         (m->symbolic_sizes.empty() || m->symbolic_sizes[0].is_constant()) &&
         m->dtype == c10::ScalarType::Float;
}

bool member(Node* n, Member* out) {
  if (!n->is_call_to({"fx_onednn::conv", "fx_onednn::conv_add_"}) ||
      !n->kwargs().empty()) {
    return false;
  }
  const bool in_place = n->is_call_to({"fx_onednn::conv_add_"});
  const std::vector<Argument>& a = n->args();
  const size_t first = in_place ? 1 : 0;  // the input's index
  if (a.size() < first + 7) return false;
  Member m;
  m.node = n;
  if (!a[first].is_node() || !a[first + 1].is_node() ||
      !a[first + 2].is_node()) {
    return false;
  }
  m.input = a[first].to_node();
  m.weight = a[first + 1].to_node();
  m.bias = a[first + 2].to_node();
  int64_t dilation = 0;
  if (!square(a[first + 3], &m.stride) || !square(a[first + 4], &m.padding) ||
      !square(a[first + 5], &dilation) || dilation != 1 ||
      !a[first + 6].is_int()) {
    return false;
  }
  m.groups = a[first + 6].to_int();
  size_t next = first + 7;
  if (in_place) {
    if (!a[0].is_node()) return false;
    m.residual = a[0].to_node();
  } else if (a.size() > next) {
    if (!a[next].is_none()) return false;  // a residual into a copy
    ++next;
  }
  if (a.size() > next) {
    if (!a[next].is_string() || a.size() != next + 3) return false;
    m.activation = a[next].to_string_ref();
    m.alpha = a[next + 1].to_double();
    m.beta = a[next + 2].to_double();
  }
  if (m.activation.find(',') != std::string::npos) return false;
  const TensorMeta* w = m.weight->tensor_meta();
  if (w == nullptr || w->sizes.size() != 4 || w->sizes[2] != w->sizes[3]) {
    return false;
  }
  if (!batch_one_float(m.input) || !batch_one_float(n)) return false;
  *out = std::move(m);
  return true;
}

class Chains {
 public:
  explicit Chains(GraphModuleImpl& module) : graph_(module.graph()) {}

  ConvChainReport run() {
    ConvChainReport report;
    std::vector<Node*> nodes;
    for (Node* n : graph_.nodes()) nodes.push_back(n);
    absl::flat_hash_set<const Node*> taken;
    for (Node* start : nodes) {
      if (taken.count(start) > 0 || start->is_erased()) continue;
      std::vector<Member> chain = grow(start);
      if (chain.size() < kMinLayers) continue;
      for (const Member& m : chain) taken.insert(m.node);
      replace(chain);
      ++report.chains;
      report.layers += static_cast<int>(chain.size());
    }
    return report;
  }

 private:
  // The longest chain from `start` whose values between layers only the
  // chain reads.
  std::vector<Member> grow(Node* start) {
    std::vector<Member> chain;
    Member m;
    if (!member(start, &m) || m.residual != nullptr) return chain;
    chain.push_back(m);
    // The chain's values: each member's output (its index + 1).
    absl::flat_hash_map<const Node*, int64_t> value = {{m.input, 0},
                                                       {start, 1}};
    size_t valid = 1;  // the longest prefix whose inner values stay inside
    while (true) {
      Node* last = chain.back().node;
      Node* next = nullptr;
      for (Node* user : last->users()) {
        Member u;
        if (member(user, &u) && u.input == last) {
          next = user;
          m = u;
          break;
        }
      }
      if (next == nullptr) break;
      if (m.residual != nullptr) {
        auto it = value.find(m.residual);
        if (it == value.end() || it->second == 0 || m.residual == last) {
          break;
        }
      }
      chain.push_back(m);
      value[next] = static_cast<int64_t>(chain.size());
      if (inner_values_stay(chain)) valid = chain.size();
    }
    chain.resize(valid);
    return chain;
  }

  // Whether every member's output but the last's is read only by members.
  static bool inner_values_stay(const std::vector<Member>& chain) {
    absl::flat_hash_set<const Node*> in_chain;
    for (const Member& m : chain) in_chain.insert(m.node);
    for (size_t i = 0; i + 1 < chain.size(); ++i) {
      for (const Node* user : chain[i].node->users()) {
        if (in_chain.count(user) == 0) return false;
      }
    }
    return true;
  }

  void replace(const std::vector<Member>& chain) {
    absl::flat_hash_map<const Node*, int64_t> value = {{chain[0].input, 0}};
    std::vector<Node*> weights, biases;
    std::vector<int64_t> layers;
    std::vector<std::string> activations;
    std::vector<Argument> params;
    for (size_t i = 0; i < chain.size(); ++i) {
      const Member& m = chain[i];
      weights.push_back(m.weight);
      biases.push_back(m.bias);
      layers.insert(layers.end(),
                    {m.stride, m.padding, m.groups,
                     m.residual == nullptr ? -1 : value.at(m.residual)});
      activations.push_back(m.activation);
      params.push_back(m.alpha);
      params.push_back(m.beta);
      value[m.node] = static_cast<int64_t>(i + 1);
    }
    Node* last = chain.back().node;
    Node* call = nullptr;
    {
      auto guard = graph_.inserting_before(last);
      call = graph_.call_function(
          op("fx_onednn::conv_chain"),
          {chain[0].input, Argument(weights), Argument(biases),
           Argument(layers), absl::StrJoin(activations, ","),
           Argument::list(std::move(params))});
    }
    call->meta().set(kTensorMeta, *last->tensor_meta());
    last->replace_all_uses_with(call);
    for (size_t i = chain.size(); i-- > 0;) graph_.erase_node(chain[i].node);
  }

  Graph& graph_;
};

}  // namespace

ConvChainReport chain_convolutions(GraphModuleImpl& module) {
  return Chains(module).run();
}

std::optional<double> conv_chain_macs(const Node& call) {
  const CallArguments args(call);
  const Argument input = args["input"];
  const TensorMeta* in = input.is_node() ? input.to_node()->tensor_meta()
                                         : nullptr;
  if (in == nullptr || in->sizes.size() != 4) return std::nullopt;
  const std::vector<Argument>& weights = args["weights"].elements();
  const std::vector<int64_t> layers = args["layers"].to_int_list();
  if (layers.size() != 4 * weights.size()) return std::nullopt;
  int64_t height = in->sizes[2], width = in->sizes[3];
  double macs = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    const TensorMeta* w =
        weights[i].is_node() ? weights[i].to_node()->tensor_meta() : nullptr;
    const int64_t stride = layers[4 * i], padding = layers[4 * i + 1];
    if (w == nullptr || w->sizes.size() != 4 || stride < 1) {
      return std::nullopt;
    }
    // [out, in / groups, kh, kw]: each output element reads one window.
    height = (height + 2 * padding - w->sizes[2]) / stride + 1;
    width = (width + 2 * padding - w->sizes[3]) / stride + 1;
    macs += static_cast<double>(in->sizes[0]) * height * width *
            static_cast<double>(w->numel());
  }
  return macs;
}

}  // namespace fx
