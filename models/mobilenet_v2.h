// MobileNetV2, module for module torchvision.models.mobilenet_v2 (torchvision
// 0.14, width_mult 1.0): same submodule names, hence the same state_dict keys,
// same initialization scheme and same forward.
#pragma once

#include <cstdint>

#include <torch/torch.h>

namespace models {

// torchvision.ops.Conv2dNormActivation with ReLU6: Sequential(Conv2d without
// bias, BatchNorm2d, ReLU6). A Sequential subclass with a typed forward, so it
// can itself be an element of a Sequential (a plain Sequential cannot: its
// templated forward does not fit AnyModule).
class Conv2dNormActivationImpl : public torch::nn::SequentialImpl {
 public:
  Conv2dNormActivationImpl(int64_t in_planes, int64_t out_planes,
                           int64_t kernel_size = 3, int64_t stride = 1,
                           int64_t groups = 1);

  torch::Tensor forward(torch::Tensor x);
};
TORCH_MODULE(Conv2dNormActivation);

// Expand (1x1) -> depthwise (3x3) -> project (1x1, linear) block, with a
// residual connection when the stride is 1 and the widths agree.
class InvertedResidualImpl : public torch::nn::Module {
 public:
  InvertedResidualImpl(int64_t inp, int64_t oup, int64_t stride,
                       int64_t expand_ratio);

  torch::Tensor forward(torch::Tensor x);

  torch::nn::Sequential conv{nullptr};

 private:
  bool use_res_connect_;
};
TORCH_MODULE(InvertedResidual);

class MobileNetV2Impl : public torch::nn::Module {
 public:
  explicit MobileNetV2Impl(int64_t num_classes = 1000);

  // x: [N, 3, H, W] -> logits [N, num_classes].
  torch::Tensor forward(torch::Tensor x);

  torch::nn::Sequential features{nullptr};
  torch::nn::Sequential classifier{nullptr};
};
TORCH_MODULE(MobileNetV2);

}  // namespace models
