// The passes lower_onednn_pooling and lower_onednn_batch_norm, on the
// values of the channels-last chains between lowered convolutions
// (lowering/passes/rewrite_support.h's Chains).
//
// lower_onednn_pooling: max, average and global average pooling
// (adaptive_avg_pool2d to 1x1 of a fixed image size) become
// fx_onednn::max_pool2d / avg_pool2d (aten's results, 2-3x faster on
// channels-last tensors); a divisor_override stays with aten.
//
// lower_onednn_batch_norm: batch norms in eval mode that no convolution
// before them absorbed (DenseNet's, on the block's concatenation before
// each layer) become fx_onednn::batch_norm, the relu after one fused when
// it is the batch norm's only reader (float32: in bfloat16 chains, batch
// norms are not chain operators).
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fx/ir/operator_schemas.h"
#include "fx/runtime/graph_module.h"
#include "lowering/passes/passes.h"
#include "lowering/passes/rewrite_support.h"

namespace fx {
namespace lowering {
namespace {

// max_pool2d's or avg_pool2d's arguments as fx_onednn's operator takes
// them (the input's first), when each is constant.
std::optional<std::vector<Argument>> pool_arguments(
    const CallArguments& arg, bool max) {
  const auto kernel = constant_ints(arg["kernel_size"], 2);
  const Argument stride_arg = arg["stride"];
  // An empty stride is the kernel's size.
  const auto stride =
      stride_arg.is_sequence() && stride_arg.elements().empty()
          ? kernel
          : constant_ints(stride_arg, 2);
  const auto padding = constant_ints(arg["padding"], 2);
  const Argument ceil_mode = arg["ceil_mode"];
  if (!kernel || !stride || !padding || !ceil_mode.is_bool()) {
    return std::nullopt;
  }
  std::vector<Argument> args = {arg["self"], *kernel, *stride, *padding};
  if (max) {
    const auto dilation = constant_ints(arg["dilation"], 2);
    if (!dilation) return std::nullopt;
    args.push_back(*dilation);
    args.push_back(ceil_mode);
  } else {
    const Argument include_pad = arg["count_include_pad"];
    if (!include_pad.is_bool() || !arg["divisor_override"].is_none()) {
      return std::nullopt;
    }
    args.push_back(ceil_mode);
    args.push_back(include_pad);
  }
  return args;
}

// Global average pooling (adaptive_avg_pool2d to 1x1: squeeze-
// excitation's, a classifier's) as avg_pool2d's arguments: one window over
// the whole image, when its size is fixed.
std::optional<std::vector<Argument>> global_pool_arguments(
    const CallArguments& arg, const TensorMeta& in) {
  const auto output_size = constant_ints(arg["output_size"], 2);
  const bool fixed = in.symbolic_sizes.empty() ||
                     (in.symbolic_sizes[2].is_constant() &&
                      in.symbolic_sizes[3].is_constant());
  if (!output_size || *output_size != std::vector<int64_t>{1, 1} ||
      !fixed) {
    return std::nullopt;
  }
  const std::vector<int64_t> window = {in.sizes[2], in.sizes[3]};
  return std::vector<Argument>{arg["self"], window, window,
                               std::vector<int64_t>{0, 0}, false, false};
}

class LowerPooling : public LoweringPass {
 public:
  explicit LowerPooling(const InferenceOptions& options)
      : LoweringPass("lower_onednn_pooling", options) {}

 private:
  bool rewrite(GraphModuleImpl& module) override {
    Chains chains = Chains::of(module.graph());
    const EraseListener following = chains.follow_erasures(module.graph());
    for (Node* n : module.graph().nodes()) {
      if (!chains.contains(n)) continue;
      const bool max = n->is_call_to({"aten::max_pool2d"});
      const bool global = n->is_call_to({"aten::adaptive_avg_pool2d"});
      if (!max && !global && !n->is_call_to({"aten::avg_pool2d"})) continue;
      const CallArguments arg(*n);
      const TensorMeta* in = chains.value(arg["self"]);
      if (in == nullptr) continue;
      const std::optional<std::vector<Argument>> args =
          global ? global_pool_arguments(arg, *in)
                 : pool_arguments(arg, max);
      if (!args) continue;
      chains.values.insert(replace_with_call(
          module.graph(), n, {},
          max ? "fx_onednn::max_pool2d" : "fx_onednn::avg_pool2d", *args,
          /*channels_last=*/true));
      ++report().pooling;
    }
    return report().pooling > 0;
  }
};

class LowerBatchNorm : public LoweringPass {
 public:
  explicit LowerBatchNorm(const InferenceOptions& options)
      : LoweringPass("lower_onednn_batch_norm", options) {}

 private:
  bool rewrite(GraphModuleImpl& module) override {
    Chains chains = Chains::of(module.graph());
    const EraseListener following = chains.follow_erasures(module.graph());
    for (Node* n : module.graph().nodes()) {
      if (!chains.contains(n) || !n->is_call_to({"aten::batch_norm"})) {
        continue;
      }
      const CallArguments arg(*n);
      const Argument input = arg["input"];
      const Argument training = arg["training"], eps = arg["eps"];
      if (chains.value(input) == nullptr || !training.is_bool() ||
          training.to_bool() || !eps.is_double() ||
          !arg["running_mean"].is_node() || !arg["running_var"].is_node()) {
        continue;
      }
      std::vector<Node*> absorbed;
      const std::vector<Node*> users = n->users().to_vector();
      if (users.size() == 1 &&
          users[0]->is_call_to({"aten::relu", "aten::relu_"})) {
        absorbed.push_back(users[0]);
      }
      chains.values.insert(replace_with_call(
          module.graph(), n, absorbed, "fx_onednn::batch_norm",
          {input, arg["weight"], arg["bias"], arg["running_mean"],
           arg["running_var"], eps,
           std::string(absorbed.empty() ? "none" : "relu")},
          /*channels_last=*/true));
      if (!absorbed.empty()) ++report().fused_activations;
      ++report().batch_norms;
    }
    return report().batch_norms > 0;
  }
};

}  // namespace

std::unique_ptr<Pass> make_lower_pooling(const InferenceOptions& options) {
  return std::make_unique<LowerPooling>(options);
}

std::unique_ptr<Pass> make_lower_batch_norm(const InferenceOptions& options) {
  return std::make_unique<LowerBatchNorm>(options);
}

}  // namespace lowering
}  // namespace fx
