#include "passes/decompose.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "fx/ir/errors.h"
#include "fx/ir/operator_schemas.h"
#include "fx/runtime/graph_module.h"
#include "interpreter/transformer.h"

namespace fx {
namespace {

// The table's rule for a target (nullptr: none), looked up by name once
// per operator, not per node.
class RuleLookup {
 public:
  explicit RuleLookup(const DecompositionTable& table) : table_(table) {}

  const DecompositionRule* find(const Target& target) {
    if (!target.is_operator()) return nullptr;
    const c10::FunctionSchema* key = &target.op().schema();
    auto cached = rules_.find(key);
    if (cached == rules_.end()) {
      cached = rules_.emplace(key, table_.find(target)).first;
    }
    return cached->second;
  }

 private:
  const DecompositionTable& table_;
  absl::flat_hash_map<const c10::FunctionSchema*, const DecompositionRule*>
      rules_;
};

class Decomposer : public Transformer {
 public:
  Decomposer(GraphModule module, RuleLookup& rules)
      : Transformer(std::move(module)), rules_(rules) {}

  c10::IValue call_function(const Node& node, const Target& target,
                            std::vector<c10::IValue> args,
                            IValueKwargs kwargs) override {
    if (const DecompositionRule* rule = rules_.find(target)) {
      ++decomposed;
      return (*rule)(bind_arguments(target.op().schema(), std::move(args),
                                    std::move(kwargs)));
    }
    return Transformer::call_function(node, target, std::move(args),
                                      std::move(kwargs));
  }

  int decomposed = 0;

 private:
  RuleLookup& rules_;
};

at::Tensor tensor(const std::vector<c10::IValue>& args, size_t i) {
  return args.at(i).toTensor();
}

}  // namespace

DecompositionTable& DecompositionTable::add(const std::string& op_name,
                                            DecompositionRule rule) {
  rules_[op(op_name).to_string()] = std::move(rule);
  return *this;
}

const DecompositionRule* DecompositionTable::find(const Target& target) const {
  auto it = rules_.find(target.to_string());
  return it == rules_.end() ? nullptr : &it->second;
}

std::vector<std::string> DecompositionTable::names() const {
  std::vector<std::string> out;
  for (const auto& entry : rules_) out.push_back(entry.first);
  return out;
}

const DecompositionTable& default_decompositions() {
  static const DecompositionTable* table = [] {
    auto* t = new DecompositionTable();
    t->add("aten::relu", [](const std::vector<c10::IValue>& a) {
      at::Tensor x = tensor(a, 0);
      return c10::IValue((x > 0) * x);
    });
    t->add("aten::relu_", [](const std::vector<c10::IValue>& a) {
      at::Tensor x = tensor(a, 0);
      return c10::IValue(x.mul_(x > 0));
    });
    t->add("aten::hardtanh", [](const std::vector<c10::IValue>& a) {
      return c10::IValue(
          at::clamp(tensor(a, 0), a.at(1).toScalar(), a.at(2).toScalar()));
    });
    t->add("aten::hardtanh_", [](const std::vector<c10::IValue>& a) {
      return c10::IValue(
          tensor(a, 0).clamp_(a.at(1).toScalar(), a.at(2).toScalar()));
    });
    t->add("aten::relu6", [](const std::vector<c10::IValue>& a) {
      return c10::IValue(at::clamp(tensor(a, 0), 0, 6));
    });
    t->add("aten::silu", [](const std::vector<c10::IValue>& a) {
      at::Tensor x = tensor(a, 0);
      return c10::IValue(x * at::sigmoid(x));
    });
    t->add("aten::hardsigmoid", [](const std::vector<c10::IValue>& a) {
      return c10::IValue(at::clamp(tensor(a, 0) + 3, 0, 6) / 6);
    });
    t->add("aten::hardswish", [](const std::vector<c10::IValue>& a) {
      at::Tensor x = tensor(a, 0);
      return c10::IValue(x * at::clamp(x + 3, 0, 6) / 6);
    });
    t->add("aten::gelu", [](const std::vector<c10::IValue>& a) {
      at::Tensor x = tensor(a, 0);
      if (a.at(1).toStringRef() == "tanh") {
        const double k = std::sqrt(2.0 / M_PI);
        return c10::IValue(0.5 * x *
                           (1 + at::tanh(k * (x + 0.044715 * x * x * x))));
      }
      return c10::IValue(0.5 * x * (1 + at::erf(x / std::sqrt(2.0))));
    });
    t->add("aten::linear", [](const std::vector<c10::IValue>& a) {
      at::Tensor y = at::matmul(tensor(a, 0), tensor(a, 1).t());
      if (!a.at(2).isNone()) y = y + tensor(a, 2);
      return c10::IValue(y);
    });
    t->add("aten::addmm", [](const std::vector<c10::IValue>& a) {
      at::Tensor product = at::mm(tensor(a, 1), tensor(a, 2));
      const c10::Scalar beta = a.at(3).toScalar();
      const c10::Scalar alpha = a.at(4).toScalar();
      at::Tensor self = tensor(a, 0);
      if (!(alpha.isIntegral(false) && alpha.toLong() == 1)) {
        product = product * alpha;
      }
      if (!(beta.isIntegral(false) && beta.toLong() == 1)) self = self * beta;
      return c10::IValue(self + product);
    });
    return t;
  }();
  return *table;
}

namespace {

c10::optional<at::Tensor> optional_tensor(const c10::IValue& v) {
  if (v.isNone()) return c10::nullopt;
  return v.toTensor();
}

c10::optional<int64_t> optional_int(const c10::IValue& v) {
  if (v.isNone()) return c10::nullopt;
  return v.toInt();
}

// at::native::native_multi_head_attention_cpu by its parts. q, k and v are
// [B, T, E]; the heads [B, H, T, E / H] are views of the projections.
std::tuple<at::Tensor, at::Tensor> attention_by_parts(
    const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
    int64_t embed_dim, int64_t heads, const at::Tensor& qkv_weight,
    const at::Tensor& qkv_bias, const at::Tensor& proj_weight,
    const at::Tensor& proj_bias, c10::optional<at::Tensor> mask,
    bool need_weights, bool average_weights,
    c10::optional<int64_t> mask_type) {
  TORCH_CHECK(heads > 0 && embed_dim % heads == 0,
              "_native_multi_head_attention: embed_dim ", embed_dim,
              " does not divide into ", heads, " heads");
  const int64_t head_dim = embed_dim / heads;
  at::Tensor q, k, v;
  // No list-returning operator (unbind, chunk): its length would
  // specialize a graph that reads its sizes.
  if (query.is_same(key) && key.is_same(value)) {
    // Self-attention: one projection, three views of it.
    const at::Tensor qkv = at::linear(query, qkv_weight, qkv_bias)
                               .unflatten(-1, {3, heads, head_dim})
                               .permute({2, 0, 3, 1, 4});
    q = qkv.select(0, 0);
    k = qkv.select(0, 1);
    v = qkv.select(0, 2);
  } else {
    auto project = [&](const at::Tensor& x, int64_t i) {
      return at::linear(x, qkv_weight.narrow(0, i * embed_dim, embed_dim),
                        qkv_bias.narrow(0, i * embed_dim, embed_dim))
          .unflatten(-1, {heads, head_dim})
          .transpose(1, 2);
    };
    q = project(query, 0);
    k = project(key, 1);
    v = project(value, 2);
  }
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  at::Tensor scores = at::matmul(q, k.transpose(-2, -1)) * scale;
  if (mask) {
    // True masks a score out. A key padding mask is [B, T] (mask_type 1);
    // an attention mask broadcasts as it is. Rows masked entirely give NaN,
    // as aten's masked softmax on CPU does.
    at::Tensor m = mask->to(at::kBool);
    if (mask_type == 1) m = m.unsqueeze(1).unsqueeze(2);
    scores = scores.masked_fill(m, -std::numeric_limits<double>::infinity());
  }
  at::Tensor weights = at::softmax(scores, -1);
  at::Tensor out = at::linear(at::matmul(weights, v).transpose(1, 2).flatten(2),
                              proj_weight, proj_bias);
  if (!need_weights) return {out, at::Tensor()};
  if (average_weights) weights = weights.sum(1) / heads;
  return {out, weights};
}

// aten::scaled_dot_product_attention by its math, as aten's reference
// (_scaled_dot_product_attention_math) computes it: softmax(q @ k^T * scale
// + mask) @ v, a boolean mask (or is_causal's lower triangle) keeping the
// scores where it is true. q is [..., L, E], k [..., S, E], v [..., S, Ev].
at::Tensor attention_by_math(const at::Tensor& query, at::Tensor key,
                             at::Tensor value,
                             const c10::optional<at::Tensor>& mask,
                             double dropout_p, bool is_causal,
                             c10::optional<double> scale, bool enable_gqa) {
  TORCH_CHECK(dropout_p == 0.0,
              "scaled_dot_product_attention with dropout_p = ", dropout_p,
              ": its dropout draws new random numbers at every call, which "
              "a decomposed graph cannot repeat; trace the model in eval "
              "mode (nn.MultiheadAttention then passes dropout_p = 0)");
  TORCH_CHECK(!(is_causal && mask),
              "scaled_dot_product_attention: is_causal with an attn_mask "
              "(aten refuses the pair too)");
  if (enable_gqa && query.size(-3) != key.size(-3)) {
    // Grouped-query attention: each key and value head serves a group of
    // query heads.
    const int64_t group = query.size(-3) / key.size(-3);
    key = key.repeat_interleave(group, -3);
    value = value.repeat_interleave(group, -3);
  }
  // Without a scale, 1 / sqrt(E); with is_causal, an [L, S] mask: reading
  // E, L and S specializes a graph whose sizes were dynamic to the traced
  // ones (a decomposition computes with ints), and makes the mask a
  // constant that folds.
  const double factor =
      scale ? *scale : 1.0 / std::sqrt(static_cast<double>(query.size(-1)));
  at::Tensor scores = at::matmul(query, key.transpose(-2, -1)) * factor;
  const double inf = std::numeric_limits<double>::infinity();
  if (is_causal) {
    // Position i sees keys 0..i: the scores above the diagonal are out.
    scores = scores.masked_fill(
        at::ones({query.size(-2), key.size(-2)},
                 scores.options().dtype(at::kBool))
            .triu(1),
        -inf);
  } else if (mask) {
    scores = mask->scalar_type() == at::kBool
                 ? scores.masked_fill(mask->logical_not(), -inf)
                 : scores + *mask;
  }
  return at::matmul(at::softmax(scores, -1), value);
}

}  // namespace

const DecompositionTable& fused_attention_decompositions() {
  static const DecompositionTable* table = [] {
    auto* t = new DecompositionTable();
    // What LibTorch 2.x's nn.MultiheadAttention and nn.TransformerEncoderLayer
    // call when traced with autograd on; 1.13 has no such operator.
    if (c10::Dispatcher::singleton().findSchema(
            {"aten::scaled_dot_product_attention", ""})) {
      t->add("aten::scaled_dot_product_attention",
             [](const std::vector<c10::IValue>& a) {
               c10::optional<double> scale;
               if (!a.at(6).isNone()) scale = a.at(6).toDouble();
               return c10::IValue(attention_by_math(
                   tensor(a, 0), tensor(a, 1), tensor(a, 2),
                   optional_tensor(a.at(3)), a.at(4).toDouble(),
                   a.at(5).toBool(), scale, a.at(7).toBool()));
             });
    }
    t->add("aten::_native_multi_head_attention",
           [](const std::vector<c10::IValue>& a) {
             auto [out, weights] = attention_by_parts(
                 tensor(a, 0), tensor(a, 1), tensor(a, 2), a.at(3).toInt(),
                 a.at(4).toInt(), tensor(a, 5), tensor(a, 6), tensor(a, 7),
                 tensor(a, 8), optional_tensor(a.at(9)), a.at(10).toBool(),
                 a.at(11).toBool(), optional_int(a.at(12)));
             return c10::IValue(std::make_tuple(out, weights));
           });
    // at::native::transformer_encoder_layer_forward.
    t->add("aten::_transformer_encoder_layer_fwd",
           [](const std::vector<c10::IValue>& a) {
             const at::Tensor src = tensor(a, 0);
             const int64_t embed_dim = a.at(1).toInt();
             const bool use_gelu = a.at(7).toBool();
             const bool norm_first = a.at(8).toBool();
             const double eps = a.at(9).toDouble();
             auto norm = [&](const at::Tensor& x, int i) {
               return at::layer_norm(x, {embed_dim}, tensor(a, i),
                                     tensor(a, i + 1), eps);
             };
             at::Tensor x = norm_first ? norm(src, 10) : src;
             x = std::get<0>(attention_by_parts(
                     x, x, x, embed_dim, a.at(2).toInt(), tensor(a, 3),
                     tensor(a, 4), tensor(a, 5), tensor(a, 6),
                     optional_tensor(a.at(18)), false, true,
                     optional_int(a.at(19)))) +
                 src;
             if (!norm_first) x = norm(x, 10);
             const at::Tensor residual = x;
             if (norm_first) x = norm(x, 12);
             x = at::linear(x, tensor(a, 14), tensor(a, 15));
             x = use_gelu ? at::gelu(x) : at::relu(x);
             x = at::linear(x, tensor(a, 16), tensor(a, 17)) + residual;
             if (!norm_first) x = norm(x, 12);
             return c10::IValue(x);
           });
    return t;
  }();
  return *table;
}

bool decompose(GraphModuleImpl& module, const DecompositionTable& table) {
  // Only call_function nodes are decomposed: a graph with none whose
  // operator has a rule is left as it is, without retracing it.
  RuleLookup rules(table);
  const std::vector<Node*> calls =
      module.graph().find_nodes(Opcode::kCallFunction);
  if (std::none_of(calls.begin(), calls.end(), [&](const Node* n) {
        return rules.find(n->target()) != nullptr;
      })) {
    return false;
  }
  GraphModule holder(
      std::static_pointer_cast<GraphModuleImpl>(module.shared_from_this()));
  Decomposer decomposer(holder, rules);
  Transformer::Result decomposed = decomposer.transform_graph();
  if (decomposer.decomposed == 0) return false;
  module.set_graph(std::move(decomposed.graph),
                   std::move(decomposed.attributes));
  return true;
}

bool DecomposeAttention::run(GraphModuleImpl& module) {
  const DecompositionTable& table = fused_attention_decompositions();
  split_ = 0;
  for (const Node* n : module.graph().find_nodes(Opcode::kCallFunction)) {
    split_ += table.find(n->target()) != nullptr;
  }
  return split_ > 0 && decompose(module, table);
}

}  // namespace fx
