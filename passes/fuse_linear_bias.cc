#include "passes/fuse_linear_bias.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "fx/ir/operator_schemas.h"
#include "fx/runtime/graph_module.h"
#include "passes/patterns.h"

namespace fx {
namespace {

// The bias `add` adds to `product` (its one user): the other operand, a
// constant [features] tensor like `weight`; else nullptr.
Node* bias_added(const GraphModuleImpl& module, Node& add, const Node* product,
                 const at::Tensor& weight, int64_t features) {
  if (!add.is_call_to({"aten::add.Tensor", "aten::add_.Tensor"})) {
    return nullptr;
  }
  const CallArguments args(add);
  const Argument& self = args["self"];
  const Argument& other = args["other"];
  if (!self.is_node() || !other.is_node()) return nullptr;
  if (args.has("alpha") && constant_number(args["alpha"]) != 1.0) {
    return nullptr;
  }
  Node* bias;
  if (self.to_node() == product) {
    bias = other.to_node();
  } else if (!add.is_call_to({"aten::add_.Tensor"}) &&
             other.to_node() == product) {
    bias = self.to_node();
  } else {
    return nullptr;
  }
  if (bias == product || bias->op() != Opcode::kGetAttr ||
      !module.has_tensor_attribute(bias->target().str())) {
    return nullptr;
  }
  const at::Tensor b = module.fetch_attr(bias->target().str());
  if (b.dim() != 1 || b.size(0) != features ||
      b.scalar_type() != weight.scalar_type() ||
      b.device() != weight.device()) {
    return nullptr;
  }
  return bias;
}

}  // namespace

int64_t fuse_linear_bias(GraphModuleImpl& module) {
  Graph& graph = module.graph();
  int64_t fused = 0;
  std::vector<Node*> products;
  for (Node* n : graph.nodes()) {
    if (n->is_call_to({"aten::matmul"})) products.push_back(n);
  }
  for (Node* n : products) {
    const std::optional<Linear> l = match_linear(module, *n);
    if (!l || l->kind != Linear::Kind::kMatmul) continue;
    Node* add = n->only_user();
    if (add == nullptr) continue;
    const at::Tensor w = module.fetch_attr(l->weight.attr->target().str());
    // matmul's weight is [in, out] (attr, or t() of an [out, in] attr).
    const int64_t features = l->weight.transposed ? w.size(1) : w.size(0);
    Node* bias = bias_added(module, *add, n, w, features);
    if (bias == nullptr) continue;
    Node* linear;
    {
      auto guard = graph.inserting_before(add);
      Node* weight = l->weight.attr;
      if (l->weight.transposed) {
        weight = graph.call_function(fx::op("aten::t"), {weight});
        if (const TensorMeta* w_meta = l->weight.attr->tensor_meta()) {
          TensorMeta meta = *w_meta;
          std::reverse(meta.sizes.begin(), meta.sizes.end());
          std::reverse(meta.strides.begin(), meta.strides.end());
          weight->meta().set(kTensorMeta, std::move(meta));
        }
      }
      linear = graph.call_function(fx::op("aten::linear"),
                                   {Argument(l->input), weight, bias});
    }
    if (const TensorMeta* meta = add->tensor_meta()) {
      linear->meta().set(kTensorMeta, *meta);
    }
    add->replace_all_uses_with(linear);
    graph.erase_node(add);
    graph.erase_node(n);
    if (l->weight.t != nullptr && l->weight.t->users().empty()) {
      graph.erase_node(l->weight.t);
    }
    ++fused;
  }
  return fused;
}

}  // namespace fx
