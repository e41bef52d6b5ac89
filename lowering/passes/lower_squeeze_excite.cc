// The pass lower_onednn_squeeze_excite: squeeze-and-excitation blocks
// (torchvision's SqueezeExcitation: MobileNetV3, EfficientNet) of a
// channels-last chain's value, as lower_onednn_convolutions and
// lower_onednn_pooling leave them, become one call
// (fx_onednn::squeeze_excite, float32), the convolutions' weights
// unpacked.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fx/ir/operator_schemas.h"
#include "fx/runtime/graph_module.h"
#include "lowering/operators.h"
#include "lowering/passes/passes.h"
#include "lowering/passes/rewrite_support.h"

namespace fx {
namespace lowering {
namespace {

class LowerSqueezeExcite : public LoweringPass {
 public:
  explicit LowerSqueezeExcite(const InferenceOptions& options)
      : LoweringPass("lower_onednn_squeeze_excite", options) {}

 private:
  // Squeeze-and-excitation blocks (torchvision's SqueezeExcitation:
  // MobileNetV3, EfficientNet) of a chain's value, as lowered so far:
  //   %p = fx_onednn::avg_pool2d(%x, [H, W], [H, W], [0, 0], False, False)
  //   %s = fx_onednn::conv(%p, %pack1, %b1, [1, 1], [0, 0], [1, 1], 1, None, relu, 0.0, 0.0)
  //   %g = fx_onednn::conv(%s, %pack2, %b2, [1, 1], [0, 0], [1, 1], 1, None, sigmoid, 0.0, 0.0)
  //   %y = aten::mul.Tensor(%g, %x)
  // become one call, the convolutions' weights unpacked:
  //   %y = fx_onednn::squeeze_excite(%x, %w1, %b1, %w2, %b2, relu, sigmoid)
  bool rewrite(GraphModuleImpl& module) override {
    Chains chains = Chains::of(module.graph());
    const EraseListener following = chains.follow_erasures(module.graph());
    for (Node* n : module.graph().nodes()) {
      if (!chains.contains(n) ||
          !n->is_call_to({"aten::mul.Tensor"}) || n->args().size() != 2) {
        continue;
      }
      for (int gate_at : {0, 1}) {
        const Argument x = n->args()[1 - gate_at];
        const TensorMeta* in = chains.value(x);
        const auto gate = pointwise_conv(n->args()[gate_at], n);
        if (in == nullptr || chains.bf16 || !gate ||
            (gate->activation != "sigmoid" &&
             gate->activation != "hardsigmoid")) {
          continue;
        }
        const Node* g = gate->node;
        const auto squeeze = pointwise_conv(gate->input, g);
        if (!squeeze || (squeeze->activation != "none" &&
                         squeeze->activation != "relu" &&
                         squeeze->activation != "silu")) {
          continue;
        }
        Node* pool =
            squeeze->input.is_node() ? squeeze->input.to_node() : nullptr;
        const std::vector<int64_t> window = {in->sizes[2], in->sizes[3]};
        if (pool == nullptr || !pool->is_call_to({"fx_onednn::avg_pool2d"}) ||
            pool->users().size() != 1) {
          continue;
        }
        const CallArguments pooling(*pool);
        const Argument ceil_mode = pooling["ceil_mode"];
        if (!(pooling["self"] == x) ||
            constant_ints(pooling["kernel_size"], 2) != window ||
            constant_ints(pooling["padding"], 2) !=
                std::vector<int64_t>{0, 0} ||
            !ceil_mode.is_bool() || ceil_mode.to_bool()) {
          continue;
        }
        std::vector<Node*> gone = {gate->node, squeeze->node, pool};
        Node* lowered = replace_with_call(
            module.graph(), n, {}, "fx_onednn::squeeze_excite",
            {x, CallArguments(*squeeze->pack)["weight"], squeeze->bias,
             CallArguments(*gate->pack)["weight"], gate->bias,
             squeeze->activation, gate->activation},
            /*channels_last=*/true);
        chains.values.insert(lowered);
        for (Node* dead : gone) module.graph().erase_node(dead);
        // The packs die with the convolutions (dead code, erased later).
        // The block's convolutions, activations and pooling are counted
        // as its (InferenceReport's counts are of the calls left).
        report().convolutions -= 2;
        report().fused_activations -= squeeze->activation == "none" ? 1 : 2;
        --report().pooling;
        ++report().squeeze_excites;
        break;
      }
    }
    return report().squeeze_excites > 0;
  }

  // A lowered 1x1 convolution (stride 1, no padding, one group, no
  // residual) whose only reader is `reader`, with its activation; else
  // null.
  struct PointwiseConv {
    Node* node;
    Node* pack;
    Argument input, bias;
    std::string activation;
  };
  static std::optional<PointwiseConv> pointwise_conv(const Argument& value,
                                                     const Node* reader) {
    Node* n = value.is_node() ? value.to_node() : nullptr;
    const auto conv = n == nullptr ? std::nullopt : onednn::conv_call(*n);
    if (!conv || conv->in_place || n->users().size() != 1 ||
        *n->users().begin() != reader) {
      return std::nullopt;
    }
    const std::vector<int64_t> one = {1, 1}, zero = {0, 0};
    Node* pack = conv->weight.is_node() ? conv->weight.to_node() : nullptr;
    if (pack == nullptr ||
        !pack->is_call_to({"fx_onednn::pack_conv_weight"}) ||
        constant_ints(conv->stride, 2) != one ||
        constant_ints(conv->padding, 2) != zero ||
        constant_ints(conv->dilation, 2) != one || !conv->groups.is_int() ||
        conv->groups.to_int() != 1 || !conv->residual.is_none() ||
        !conv->alpha.is_double() || conv->alpha.to_double() != 0) {
      return std::nullopt;
    }
    const TensorMeta* w = pack->tensor_meta();
    if (w == nullptr || w->sizes.size() != 4 || w->sizes[2] != 1 ||
        w->sizes[3] != 1 || w->dtype != c10::ScalarType::Float) {
      return std::nullopt;
    }
    return PointwiseConv{n, pack, conv->input, conv->bias, conv->activation};
  }
};

}  // namespace

std::unique_ptr<Pass> make_lower_squeeze_excite(
    const InferenceOptions& options) {
  return std::make_unique<LowerSqueezeExcite>(options);
}

}  // namespace lowering
}  // namespace fx
