// A small U-Net for 2-class segmentation: two down blocks, a bottleneck, two
// up blocks (nearest upsampling, concatenation with the skip connection) and
// a 1x1 classifier; channels 3 -> 16 -> 32 -> 64. No torchvision counterpart.
#pragma once

#include <cstdint>

#include <torch/torch.h>

namespace models {

// (Conv2d 3x3 -> BatchNorm2d -> ReLU) twice, keeping the spatial size.
class DoubleConvImpl : public torch::nn::Module {
 public:
  DoubleConvImpl(int64_t in_channels, int64_t out_channels);

  torch::Tensor forward(torch::Tensor x);

  torch::nn::Conv2d conv1{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr};
  torch::nn::Conv2d conv2{nullptr};
  torch::nn::BatchNorm2d bn2{nullptr};
};
TORCH_MODULE(DoubleConv);

// Upsamples x by 2 (nearest), concatenates the skip connection on the channel
// dimension and applies a DoubleConv.
class UpBlockImpl : public torch::nn::Module {
 public:
  // in_channels counts the channels of x and of skip together.
  UpBlockImpl(int64_t in_channels, int64_t out_channels);

  torch::Tensor forward(torch::Tensor x, torch::Tensor skip);

  DoubleConv conv{nullptr};
};
TORCH_MODULE(UpBlock);

class UNetImpl : public torch::nn::Module {
 public:
  explicit UNetImpl(int64_t in_channels = 3, int64_t num_classes = 2);

  // x: [N, in_channels, H, W], H and W divisible by 4 ->
  // logits [N, num_classes, H, W].
  torch::Tensor forward(torch::Tensor x);

  DoubleConv down1{nullptr};
  DoubleConv down2{nullptr};
  torch::nn::MaxPool2d pool{nullptr};
  DoubleConv bottleneck{nullptr};
  UpBlock up1{nullptr};
  UpBlock up2{nullptr};
  torch::nn::Conv2d head{nullptr};
};
TORCH_MODULE(UNet);

}  // namespace models
