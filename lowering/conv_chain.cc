#include "lowering/conv_chain.h"

#include <c10/core/ScalarType.h>

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "fx/ir/function.h"
#include "fx/ir/graph.h"
#include "fx/ir/operator_schemas.h"
#include "lowering/operators.h"

namespace fx {
namespace {

constexpr size_t kMinLayers = 3;
// A layer joins a chain when its multiply-accumulates are at most these:
// the chain pays where a layer works about as long as forking and joining
// the threads takes (MobileNetV2's layers: 2.7-20M), and costs where its
// rows, split between the threads, leave oneDNN too few to block on:
// AlexNet's three 3x3 layers of 256-384 channels at 13x13 (100-150M each)
// chained, its lowered graph took 42 ms at batch 1, and 17-24 ms called
// one by one (unlowered: 22 ms; 2 threads); Inception-v3's chains of
// 30-200M layers gained nothing (52-58 ms either way).
constexpr double kMaxLayerMacs = 32e6;

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
  const auto conv = onednn::conv_call(*n);
  if (!conv) return false;
  Member m;
  m.node = n;
  if (!conv->input.is_node() || !conv->weight.is_node() ||
      !conv->bias.is_node()) {
    return false;
  }
  m.input = conv->input.to_node();
  m.weight = conv->weight.to_node();
  m.bias = conv->bias.to_node();
  int64_t dilation = 0;
  if (!square(conv->stride, &m.stride) ||
      !square(conv->padding, &m.padding) ||
      !square(conv->dilation, &dilation) || dilation != 1 ||
      !conv->groups.is_int() || !conv->alpha.is_double() ||
      !conv->beta.is_double()) {
    return false;
  }
  m.groups = conv->groups.to_int();
  if (conv->in_place) {
    if (!conv->residual.is_node()) return false;
    m.residual = conv->residual.to_node();
  } else if (!conv->residual.is_none()) {
    return false;  // a residual into a copy
  }
  m.activation = conv->activation;
  m.alpha = conv->alpha.to_double();
  m.beta = conv->beta.to_double();
  if (m.activation.find(',') != std::string::npos) return false;
  const TensorMeta* w = m.weight->tensor_meta();
  if (w == nullptr || w->sizes.size() != 4 || w->sizes[2] != w->sizes[3]) {
    return false;
  }
  if (!batch_one_float(m.input) || !batch_one_float(n)) return false;
  // Output elements times each one's multiply-accumulates.
  const TensorMeta* y = n->tensor_meta();
  double macs = static_cast<double>(y->numel());
  for (size_t d = 1; d < 4; ++d) macs *= static_cast<double>(w->sizes[d]);
  if (macs > kMaxLayerMacs) return false;
  *out = std::move(m);
  return true;
}

class ChainFinder {
 public:
  explicit ChainFinder(GraphModuleImpl& module) : graph_(module.graph()) {}

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
    std::vector<onednn::ConvChainLayer> layers;
    for (size_t i = 0; i < chain.size(); ++i) {
      const Member& m = chain[i];
      onednn::ConvChainLayer layer;
      layer.weight = m.weight;
      layer.bias = m.bias;
      layer.stride = m.stride;
      layer.padding = m.padding;
      layer.groups = m.groups;
      layer.adds_into = m.residual == nullptr ? -1 : value.at(m.residual);
      layer.activation = m.activation;
      layer.alpha = m.alpha;
      layer.beta = m.beta;
      layers.push_back(std::move(layer));
      value[m.node] = static_cast<int64_t>(i + 1);
    }
    Node* last = chain.back().node;
    Node* call = nullptr;
    {
      auto guard = graph_.inserting_before(last);
      call = graph_.call_function(
          op("fx_onednn::conv_chain"),
          onednn::conv_chain_arguments(chain[0].input, layers));
    }
    call->meta().set(kTensorMeta, *last->tensor_meta());
    last->replace_all_uses_with(call);
    for (size_t i = chain.size(); i-- > 0;) graph_.erase_node(chain[i].node);
  }

  Graph& graph_;
};

}  // namespace

ConvChainReport chain_convolutions(GraphModuleImpl& module) {
  return ChainFinder(module).run();
}

std::optional<double> conv_chain_macs(const Node& call) {
  const auto layers = onednn::conv_chain_layers(call);
  const Argument input = CallArguments(call)["input"];
  const TensorMeta* in = input.is_node() ? input.to_node()->tensor_meta()
                                         : nullptr;
  if (!layers || in == nullptr || in->sizes.size() != 4) return std::nullopt;
  int64_t height = in->sizes[2], width = in->sizes[3];
  double macs = 0;
  for (const onednn::ConvChainLayer& layer : *layers) {
    const TensorMeta* w =
        layer.weight.is_node() ? layer.weight.to_node()->tensor_meta() : nullptr;
    if (w == nullptr || w->sizes.size() != 4 || layer.stride < 1) {
      return std::nullopt;
    }
    // [out, in / groups, kh, kw]: each output element reads one window.
    height = (height + 2 * layer.padding - w->sizes[2]) / layer.stride + 1;
    width = (width + 2 * layer.padding - w->sizes[3]) / layer.stride + 1;
    macs += static_cast<double>(in->sizes[0]) * height * width *
            static_cast<double>(w->numel());
  }
  return macs;
}

}  // namespace fx
