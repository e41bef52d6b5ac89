// Decomposition by re-tracing: each call of an operator that has a rule in
// a DecompositionTable is replaced by what the rule computes with other
// operators. The graph is re-traced with a Transformer
// (interpreter/transformer.h), so a rule is ordinary LibTorch code.
//
// torch.fx's documentation example, relu as (x > 0) * x:
//
//   table.add("aten::relu", [](const std::vector<c10::IValue>& args) {
//     at::Tensor x = args[0].toTensor();
//     return c10::IValue((x > 0) * x);
//   });
//
//   before:
//       %relu : [#users=1] = call_function[target=aten::relu](args = (%x,), kwargs = {})
//   after:
//       %gt : [#users=1] = call_function[target=aten::gt.Scalar](args = (%x, 0), kwargs = {})
//       %mul : [#users=1] = call_function[target=aten::mul.Tensor](args = (%gt, %x), kwargs = {})
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include <ATen/core/ivalue.h>

#include "fx/ir/target.h"
#include "passes/pass.h"

namespace fx {

// Computes a call's value from its arguments: one per schema parameter,
// defaults filled in (as an operator's boxed stack).
using DecompositionRule =
    std::function<c10::IValue(const std::vector<c10::IValue>& args)>;

class DecompositionTable {
 public:
  // Adds (or replaces) the rule for an operator: "aten::relu",
  // "aten::add.Tensor". Throws fx::GraphError for an unknown operator.
  DecompositionTable& add(const std::string& op_name, DecompositionRule rule);
  // The rule for `op`, or nullptr.
  const DecompositionRule* find(const Target& op) const;
  std::vector<std::string> names() const;

 private:
  std::map<std::string, DecompositionRule> rules_;
};

// Rules for aten::relu, relu6, hardtanh, silu, hardswish, hardsigmoid, gelu
// (exact and tanh), linear and addmm, in terms of simpler aten operators;
// and for the in-place relu_ and hardtanh_ (ReLU and ReLU6 with inplace),
// which stay in place: relu_(x) becomes x.mul_(x > 0).
const DecompositionTable& default_decompositions();

// Rules for PyTorch's fused inference paths, which nn.TransformerEncoderLayer
// and nn.MultiheadAttention take in eval mode without autograd (a
// TorchScript file traced so holds them): aten::_transformer_encoder_layer_fwd
// and aten::_native_multi_head_attention become their parts, as aten
// computes them: the QKV projection (one linear layer for self-attention),
// the heads as views, softmax(q @ k^T * scale) @ v (a mask by masked_fill),
// the output projection, the residual adds, the layer norms and
// the feed-forward layers with their activation. What the lowering
// (lowering/optimize_for_inference.h) then runs on oneDNN.
//
//   before:
//       %fwd = call_function[target=aten::_transformer_encoder_layer_fwd](args = (%x, 32, 4, %qkv_w, %qkv_b, %proj_w, %proj_b, False, False, 1e-05, ...))
//   after:
//       %linear = call_function[target=aten::linear](args = (%x, %qkv_w, %qkv_b))
//       %unflatten = call_function[target=aten::unflatten.int](args = (%linear, -1, [3, 4, 8]))
//       ...
//       %matmul = call_function[target=aten::matmul](args = (%select, %transpose))
//       %mul = call_function[target=aten::mul.Tensor](args = (%matmul, 0.35355339059327373))
//       %softmax = call_function[target=aten::softmax.int](args = (%mul, -1))
//       ...
//       %layer_norm_1 = call_function[target=aten::layer_norm](args = (%add_1, [32], %norm2_w, %norm2_b, 1e-05))
const DecompositionTable& fused_attention_decompositions();

// Decomposes every call of `module` that has a rule in `table`, in place
// (through GraphModuleImpl::set_graph: guards, init steps, attributes and
// leaf modules stay). Returns whether any call was decomposed.
bool decompose(GraphModuleImpl& module,
               const DecompositionTable& table = default_decompositions());

class Decompose : public Pass {
 public:
  std::string name() const override { return "decompose"; }
  Bodies bodies() const override { return Bodies::kEachGraph; }
  bool run(GraphModuleImpl& module) override { return decompose(module); }
};

// Statistics: "attention", the fused ops split.
class DecomposeAttention : public Pass {
 public:
  std::string name() const override { return "decompose_attention"; }
  Bodies bodies() const override { return Bodies::kEachGraph; }
  bool run(GraphModuleImpl& module) override;
  std::vector<std::pair<std::string, int64_t>> statistics() const override {
    return {{"attention", split_}};
  }

 private:
  int64_t split_ = 0;
};

}  // namespace fx
