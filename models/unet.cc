#include "models/unet.h"

#include <vector>

namespace models {
namespace {

torch::nn::Conv2d conv3x3(int64_t in_channels, int64_t out_channels) {
  return torch::nn::Conv2d(
      torch::nn::Conv2dOptions(in_channels, out_channels, 3)
          .padding(1)
          .bias(false));
}

}  // namespace

DoubleConvImpl::DoubleConvImpl(int64_t in_channels, int64_t out_channels)
    : conv1(register_module("conv1", conv3x3(in_channels, out_channels))),
      bn1(register_module("bn1", torch::nn::BatchNorm2d(out_channels))),
      conv2(register_module("conv2", conv3x3(out_channels, out_channels))),
      bn2(register_module("bn2", torch::nn::BatchNorm2d(out_channels))) {}

torch::Tensor DoubleConvImpl::forward(torch::Tensor x) {
  x = torch::relu(bn1(conv1(x)));
  return torch::relu(bn2(conv2(x)));
}

UpBlockImpl::UpBlockImpl(int64_t in_channels, int64_t out_channels)
    : conv(register_module("conv", DoubleConv(in_channels, out_channels))) {}

torch::Tensor UpBlockImpl::forward(torch::Tensor x, torch::Tensor skip) {
  x = torch::nn::functional::interpolate(
      x, torch::nn::functional::InterpolateFuncOptions()
             .scale_factor(std::vector<double>{2, 2})
             .mode(torch::kNearest));
  x = torch::cat({x, skip}, /*dim=*/1);
  return conv(x);
}

UNetImpl::UNetImpl(int64_t in_channels, int64_t num_classes)
    : down1(register_module("down1", DoubleConv(in_channels, 16))),
      down2(register_module("down2", DoubleConv(16, 32))),
      pool(register_module("pool", torch::nn::MaxPool2d(2))),
      bottleneck(register_module("bottleneck", DoubleConv(32, 64))),
      up1(register_module("up1", UpBlock(64 + 32, 32))),
      up2(register_module("up2", UpBlock(32 + 16, 16))),
      head(register_module("head", torch::nn::Conv2d(16, num_classes, 1))) {}

torch::Tensor UNetImpl::forward(torch::Tensor x) {
  torch::Tensor skip1 = down1(x);             // [N, 16, H, W]
  torch::Tensor skip2 = down2(pool(skip1));   // [N, 32, H/2, W/2]
  torch::Tensor y = bottleneck(pool(skip2));  // [N, 64, H/4, W/4]
  y = up1(y, skip2);                          // [N, 32, H/2, W/2]
  y = up2(y, skip1);                          // [N, 16, H, W]
  return head(y);
}

}  // namespace models
