// Conv/BatchNorm folding for inference (torch.fx's fuse()): a convolution
// whose only user is a batch_norm in eval mode becomes one convolution with
// new weights and bias,
//
//   scale = bn.weight / sqrt(bn.running_var + eps)
//   W'    = W * scale          (per output channel)
//   b'    = (b - bn.running_mean) * scale + bn.bias
//
// and likewise a linear layer (aten::linear, or aten::addmm of t(W) as C++
// F::linear traces for 2-D inputs) followed by a batch_norm (BatchNorm1d).
//
//   before:
//       %conv2d : [#users=1] = call_function[target=aten::conv2d](args = (%x, %conv1_weight, None, [2, 2], [3, 3]), kwargs = {})
//       %batch_norm : [#users=1] = call_function[target=aten::batch_norm](args = (%conv2d, %bn1_weight, %bn1_bias, %bn1_running_mean, %bn1_running_var, False, 0.1, 1e-05, True), kwargs = {})
//   after:
//       %_folded_conv1_weight_fused : [#users=1] = get_attr[target=_folded.conv1_weight_fused]
//       %_folded_conv1_bias_fused : [#users=1] = get_attr[target=_folded.conv1_bias_fused]
//       %conv2d : [#users=1] = call_function[target=aten::conv2d](args = (%x, %_folded_conv1_weight_fused, %_folded_conv1_bias_fused, [2, 2], [3, 3]), kwargs = {})
//
// The new weights are computed once by an init step (as constant folding
// makes: see passes/fold_constants.h) from the original parameters, which
// stay untouched: one fx_fold::fuse_conv_bn_weights call per pair
// (torch.nn.utils.fusion.fuse_conv_bn_weights as one operator:
// fx/runtime/folding.h),
//
//       %fuse_conv_bn_weights = call_function[target=fx_fold::fuse_conv_bn_weights](args = (%conv1_weight, None, %bn1_running_mean, %bn1_running_var, 1e-05, %bn1_weight, %bn1_bias), kwargs = {})
//       %conv1_weight_fused = call_function[target=getitem](args = (%fuse_conv_bn_weights, 0), kwargs = {})
//       %conv1_bias_fused = call_function[target=getitem](args = (%fuse_conv_bn_weights, 1), kwargs = {})
//
// and GraphModuleImpl::run_init() recomputes them after new
// weights are loaded. Handled: aten::conv1d/2d/3d (and their padding="same"
// overloads), aten::convolution and aten::_convolution (as TorchScript
// models call it) and aten::conv_transpose1d/2d/3d (grouped too). Left
// alone: a batch_norm in training mode, a convolution whose output is used
// elsewhere too, weights or statistics that are not attributes.
#pragma once

#include "passes/pass.h"

namespace fx {

// Returns whether anything was fused. With `linear` false, linear layers
// and their batch norms are left as they are (quantization-aware training
// simulates only the convolutions' folding).
bool fuse_conv_bn(GraphModuleImpl& module, bool linear = true);

class FuseConvBn : public Pass {
 public:
  std::string name() const override { return "fuse_conv_bn"; }
  Bodies bodies() const override { return Bodies::kEachGraph; }
  bool run(GraphModuleImpl& module) override { return fuse_conv_bn(module); }
};

}  // namespace fx
