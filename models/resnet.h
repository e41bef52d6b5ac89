// ResNet-18 and ResNet-50, module for module torchvision.models.resnet18 and
// torchvision.models.resnet50 (torchvision 0.14): same submodule names, hence
// the same state_dict keys, same initialization scheme and same forward.
#pragma once

#include <array>
#include <cstdint>

#include <torch/torch.h>

namespace models {

// The two-conv residual block of ResNet-18/34.
class BasicBlockImpl : public torch::nn::Module {
 public:
  static constexpr int64_t kExpansion = 1;

  // `downsample` maps the input to the output's shape when they differ, or is
  // empty (nullptr).
  BasicBlockImpl(int64_t inplanes, int64_t planes, int64_t stride,
                 torch::nn::Sequential downsample);

  torch::Tensor forward(torch::Tensor x);

  torch::nn::Conv2d conv1{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr};
  torch::nn::ReLU relu{nullptr};
  torch::nn::Conv2d conv2{nullptr};
  torch::nn::BatchNorm2d bn2{nullptr};
  torch::nn::Sequential downsample{nullptr};
};
TORCH_MODULE(BasicBlock);

// The 1x1 -> 3x3 -> 1x1 residual block of ResNet-50/101/152 (ResNet V1.5:
// the stride is on the 3x3 convolution).
class BottleneckImpl : public torch::nn::Module {
 public:
  static constexpr int64_t kExpansion = 4;

  BottleneckImpl(int64_t inplanes, int64_t planes, int64_t stride,
                 torch::nn::Sequential downsample);

  torch::Tensor forward(torch::Tensor x);

  torch::nn::Conv2d conv1{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr};
  torch::nn::Conv2d conv2{nullptr};
  torch::nn::BatchNorm2d bn2{nullptr};
  torch::nn::Conv2d conv3{nullptr};
  torch::nn::BatchNorm2d bn3{nullptr};
  torch::nn::ReLU relu{nullptr};
  torch::nn::Sequential downsample{nullptr};
};
TORCH_MODULE(Bottleneck);

enum class ResNetBlock { kBasic, kBottleneck };

class ResNetImpl : public torch::nn::Module {
 public:
  // `layers` holds the number of blocks of layer1..layer4.
  ResNetImpl(ResNetBlock block, std::array<int64_t, 4> layers,
             int64_t num_classes = 1000);

  // x: [N, 3, H, W] -> logits [N, num_classes].
  torch::Tensor forward(torch::Tensor x);

  torch::nn::Conv2d conv1{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr};
  torch::nn::ReLU relu{nullptr};
  torch::nn::MaxPool2d maxpool{nullptr};
  torch::nn::Sequential layer1{nullptr};
  torch::nn::Sequential layer2{nullptr};
  torch::nn::Sequential layer3{nullptr};
  torch::nn::Sequential layer4{nullptr};
  torch::nn::AdaptiveAvgPool2d avgpool{nullptr};
  torch::nn::Linear fc{nullptr};

 private:
  template <typename Block>
  torch::nn::Sequential make_layer(int64_t planes, int64_t blocks,
                                   int64_t stride);

  int64_t inplanes_ = 64;
};
TORCH_MODULE(ResNet);

ResNet resnet18(int64_t num_classes = 1000);
ResNet resnet50(int64_t num_classes = 1000);

}  // namespace models
