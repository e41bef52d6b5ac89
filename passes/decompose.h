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

// Decomposes every call of `module` that has a rule in `table`, in place
// (through GraphModuleImpl::set_graph: guards, init steps, attributes and
// leaf modules stay). Returns whether any call was decomposed.
bool decompose(GraphModuleImpl& module,
               const DecompositionTable& table = default_decompositions());

class Decompose : public Pass {
 public:
  std::string name() const override { return "decompose"; }
  bool run(GraphModuleImpl& module) override { return decompose(module); }
};

}  // namespace fx
