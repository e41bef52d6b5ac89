#include "lowering/passes/rewrite_support.h"

#include <ATen/ATen.h>

#include "fx/ir/operator_schemas.h"
#include "fx/runtime/graph_module.h"
#include "lowering/onednn_ops.h"
#include "lowering/operators.h"
#include "passes/operator_families.h"

namespace fx {
namespace lowering {

PostOp post_op(const std::optional<Activation>& activation) {
  if (!activation) return {};
  using Kind = Activation::Kind;
  switch (activation->kind) {
    case Kind::kRelu: return {"relu"};
    case Kind::kLeakyRelu: return {"relu", activation->alpha, 0};
    case Kind::kClamp: return {"clip", activation->alpha, activation->beta};
    case Kind::kHardswish: return {"hardswish"};
    case Kind::kSilu: return {"silu"};
    case Kind::kSigmoid: return {"sigmoid"};
    case Kind::kTanh: return {"tanh"};
    case Kind::kGelu: return {"gelu"};
    case Kind::kGeluTanh: return {"gelu_tanh"};
    case Kind::kHardsigmoid: return {"hardsigmoid"};
  }
  return {};
}

void append_activation(const PostOp& act, std::vector<Argument>* args) {
  if (act.name == "none") return;
  args->push_back(act.name);
  args->push_back(act.alpha);
  args->push_back(act.beta);
}

TensorMeta channels_last_meta(TensorMeta m) {
  m.strides = onednn::channels_last_strides(m.sizes);
  m.memory_format = memory_format_of(m.sizes, m.strides);
  m.requires_grad = false;
  return m;
}

Node* replace_with_call(Graph& graph, Node* original,
                        const std::vector<Node*>& absorbed, const char* op,
                        std::vector<Argument> args, bool channels_last,
                        Kwargs kwargs) {
  Node* tail = absorbed.empty() ? original : absorbed.back();
  Node* lowered;
  {
    auto guard = graph.inserting_before(tail);
    lowered = graph.call_function(fx::op(op), std::move(args), std::move(kwargs));
  }
  if (const std::string* path = original->meta().get(kModulePath)) {
    lowered->meta().set(kModulePath, *path);
  }
  if (const std::string* trace = original->meta().get(kStackTrace)) {
    lowered->meta().set(kStackTrace, *trace);
  }
  if (const TensorMeta* m = tail->tensor_meta()) {
    TensorMeta meta = *m;
    meta.requires_grad = false;
    lowered->meta().set(kTensorMeta,
                        channels_last ? channels_last_meta(meta) : meta);
  }
  if (const auto* metas = tail->meta().get(kTensorMetaList)) {
    lowered->meta().set(kTensorMetaList, *metas);  // a tuple's (an RNN's)
  }
  tail->replace_all_uses_with(lowered);
  for (auto it = absorbed.rbegin(); it != absorbed.rend(); ++it) {
    graph.erase_node(*it);
  }
  graph.erase_node(original);
  return lowered;
}

bool is_lowered_convolution(const Node& n) {
  return n.is_call_to({"fx_onednn::conv", "fx_onednn::conv_add_",
                       "fx_onednn::conv_transpose"});
}

bool keeps_layout(const Node& n) { return has_trait(n, kKeepsLayout); }

bool in_chain(const Node& n, bool bf16) {
  return keeps_layout(n) &&
         !(bf16 &&
           n.is_call_to({"aten::batch_norm", "aten::upsample_bilinear2d"}));
}

Chains Chains::of(const Graph& graph) {
  Chains chains;
  for (const Node* n : graph.nodes()) {
    // A convolution's packed weight says its dtype: the pack call's bf16
    // argument, or once folded, the packed weight's metadata.
    const auto conv = onednn::conv_call(*n);
    const Node* weight = conv && conv->weight.is_node()
                             ? conv->weight.to_node()
                             : nullptr;
    if (weight == nullptr) continue;
    if (weight->is_call_to({"fx_onednn::pack_conv_weight"})) {
      const Argument bf16 = CallArguments(*weight)["bf16"];
      chains.bf16 = bf16.is_bool() && bf16.to_bool();
    } else {
      const TensorMeta* m = weight->tensor_meta();
      chains.bf16 = m != nullptr && m->dtype == c10::ScalarType::BFloat16;
    }
    if (chains.bf16) break;
  }
  for (const Node* n : graph.nodes()) {
    if (is_lowered_convolution(*n)) {
      chains.values.insert(n);
      continue;
    }
    if (!in_chain(*n, chains.bf16)) continue;
    for (const Node* input : n->all_input_nodes()) {
      if (chains.values.count(input) > 0) {
        chains.values.insert(n);
        break;
      }
    }
  }
  return chains;
}

EraseListener Chains::follow_erasures(Graph& graph) {
  return graph.on_erase([this](const Node* n) { values.erase(n); });
}

const TensorMeta* Chains::value(const Argument& value) const {
  const TensorMeta* m =
      value.is_node() ? value.to_node()->tensor_meta() : nullptr;
  // In bfloat16, onednn_channels_last marks the chains' values bfloat16
  // (they may not be yet).
  const bool in_a_chain =
      m != nullptr && m->sizes.size() == 4 && m->device.is_cpu() &&
      (bf16 || m->dtype == c10::ScalarType::Float) &&
      contains(value.to_node());
  return in_a_chain ? m : nullptr;
}

bool LoweringPass::run(GraphModuleImpl& module) {
  report_ = {};
  if (module.traced_training().value_or(false)) return false;
  onednn::register_operators();
  return rewrite(module);
}

std::vector<std::pair<std::string, int64_t>> LoweringPass::statistics()
    const {
  std::vector<std::pair<std::string, int64_t>> out;
#define FX_COUNT(field, owner)                                   \
  if (name_ == owner || report_.field != 0) {                    \
    out.emplace_back(#field, static_cast<int64_t>(report_.field)); \
  }
  FX_INFERENCE_COUNTS(FX_COUNT)
#undef FX_COUNT
  return out;
}

}  // namespace lowering
}  // namespace fx
