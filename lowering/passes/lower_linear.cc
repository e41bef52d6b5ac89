// The passes lower_onednn_linear and lower_onednn_matmul.
//
// lower_onednn_linear: linear layers (aten::linear, addmm of a constant
// weight, matmul by a constant 2-d weight, each also of t() of one:
// passes/patterns.h's linear fusions) become fx_onednn::linear on a weight
// packed by fx_onednn::pack_linear_weight, the activation after them
// fused, or the residual add that is their only user (a transformer's
// x + attention(x), x + feed_forward(x)) as the sum post-op. Option:
// bf16.
//
// lower_onednn_matmul: products of two activations of rank 3 or more
// (attention's q @ k^T and weights @ v) become fx_onednn::matmul, the
// scale after them fused.
#include <algorithm>
#include <memory>
#include <vector>

#include "fx/runtime/graph_module.h"
#include "lowering/lower_onednn.h"
#include "lowering/passes/passes.h"
#include "lowering/passes/rewrite_support.h"

namespace fx {
namespace lowering {
namespace {

class LowerLinear : public LoweringPass {
 public:
  explicit LowerLinear(const InferenceOptions& options)
      : LoweringPass("lower_onednn_linear", options) {}

 private:
  bool rewrite(GraphModuleImpl& module) override {
    check_bf16_supported(options());
    static const std::vector<Fusion> fusions = {
        Fusion::kLinearActivation, Fusion::kLinearAdd, Fusion::kLinear};
    for (Node* n : module.graph().nodes()) {
      if (auto m = match_fusion(module, *n, fusions)) lower(module, *m);
    }
    return report().linear > 0;
  }

  void lower(GraphModuleImpl& module, const FusionMatch& m) {
    Graph& graph = module.graph();
    const Linear& c = *m.linear;
    Node* n = m.root();
    const TensorMeta* in = c.input->tensor_meta();
    Node* pack;
    {
      auto guard = graph.inserting_before(n);
      Node* weight = !c.weight.transposed
                         ? c.weight.attr
                         : graph.call_function(fx::op("aten::t"),
                                               {c.weight.attr});
      pack = graph.call_function(
          fx::op("fx_onednn::pack_linear_weight"), {weight, in->sizes},
          options().bf16 ? Kwargs{{"bf16", true}} : Kwargs{});
    }
    // The packed weight's metadata: the logical sizes ([out, in]) in the
    // dtype it is packed in, what the cost model reads.
    if (const TensorMeta* w = c.weight.attr->tensor_meta()) {
      TensorMeta meta = *w;
      if (c.weight.transposed) {
        // [in, out]: the weight is its t()
        std::reverse(meta.sizes.begin(), meta.sizes.end());
        std::reverse(meta.strides.begin(), meta.strides.end());
      }
      if (options().bf16) meta.dtype = c10::ScalarType::BFloat16;
      pack->meta().set(kTensorMeta, std::move(meta));
    }
    if (m.activation) ++report().fused_activations;
    std::vector<Argument> args = {c.input, pack, argument_or_none(c.bias)};
    append_activation(post_op(m.activation), &args);
    Kwargs kwargs;
    if (m.residual != nullptr) {
      kwargs.emplace_back("other", Argument(m.residual));
      ++report().fused_sums;
    }
    replace_with_call(graph, n,
                      std::vector<Node*>(m.nodes.begin() + 1, m.nodes.end()),
                      "fx_onednn::linear", std::move(args),
                      /*channels_last=*/false, std::move(kwargs));
    ++report().linear;
  }
};

class LowerMatmul : public LoweringPass {
 public:
  explicit LowerMatmul(const InferenceOptions& options)
      : LoweringPass("lower_onednn_matmul", options) {}

 private:
  bool rewrite(GraphModuleImpl& module) override {
    static const std::vector<Fusion> fusions = {Fusion::kMatmulScale,
                                                Fusion::kMatmul};
    for (Node* n : module.graph().nodes()) {
      auto m = match_fusion(module, *n, fusions);
      if (!m) continue;
      std::vector<Argument> args = {m->matmul->self, m->matmul->other};
      if (m->fusion == Fusion::kMatmulScale) args.push_back(m->scale);
      replace_with_call(
          module.graph(), m->root(),
          std::vector<Node*>(m->nodes.begin() + 1, m->nodes.end()),
          "fx_onednn::matmul", std::move(args), /*channels_last=*/false);
      ++report().matmul;
    }
    return report().matmul > 0;
  }
};

}  // namespace

std::unique_ptr<Pass> make_lower_linear(const InferenceOptions& options) {
  return std::make_unique<LowerLinear>(options);
}

std::unique_ptr<Pass> make_lower_matmul(const InferenceOptions& options) {
  return std::make_unique<LowerMatmul>(options);
}

}  // namespace lowering
}  // namespace fx
