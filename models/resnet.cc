#include "models/resnet.h"

#include <string>

namespace models {
namespace {

// A convolution without bias, as every convolution of torchvision's ResNet.
torch::nn::Conv2d conv(int64_t in_planes, int64_t out_planes,
                       int64_t kernel_size, int64_t stride, int64_t padding) {
  return torch::nn::Conv2d(
      torch::nn::Conv2dOptions(in_planes, out_planes, kernel_size)
          .stride(stride)
          .padding(padding)
          .bias(false));
}

torch::nn::Conv2d conv3x3(int64_t in_planes, int64_t out_planes,
                          int64_t stride) {
  return conv(in_planes, out_planes, 3, stride, 1);
}

torch::nn::Conv2d conv1x1(int64_t in_planes, int64_t out_planes,
                          int64_t stride) {
  return conv(in_planes, out_planes, 1, stride, 0);
}

torch::nn::ReLU inplace_relu() {
  return torch::nn::ReLU(torch::nn::ReLUOptions(/*inplace=*/true));
}

}  // namespace

BasicBlockImpl::BasicBlockImpl(int64_t inplanes, int64_t planes, int64_t stride,
                               torch::nn::Sequential downsample)
    : conv1(register_module("conv1", conv3x3(inplanes, planes, stride))),
      bn1(register_module("bn1", torch::nn::BatchNorm2d(planes))),
      relu(register_module("relu", inplace_relu())),
      conv2(register_module("conv2", conv3x3(planes, planes, 1))),
      bn2(register_module("bn2", torch::nn::BatchNorm2d(planes))) {
  if (downsample) {
    this->downsample = register_module("downsample", downsample);
  }
}

torch::Tensor BasicBlockImpl::forward(torch::Tensor x) {
  torch::Tensor identity = x;
  torch::Tensor out = relu(bn1(conv1(x)));
  out = bn2(conv2(out));
  if (downsample) {
    identity = downsample->forward(x);
  }
  out += identity;
  return relu(out);
}

BottleneckImpl::BottleneckImpl(int64_t inplanes, int64_t planes, int64_t stride,
                               torch::nn::Sequential downsample)
    : conv1(register_module("conv1", conv1x1(inplanes, planes, 1))),
      bn1(register_module("bn1", torch::nn::BatchNorm2d(planes))),
      conv2(register_module("conv2", conv3x3(planes, planes, stride))),
      bn2(register_module("bn2", torch::nn::BatchNorm2d(planes))),
      conv3(register_module("conv3", conv1x1(planes, planes * kExpansion, 1))),
      bn3(register_module("bn3", torch::nn::BatchNorm2d(planes * kExpansion))),
      relu(register_module("relu", inplace_relu())) {
  if (downsample) {
    this->downsample = register_module("downsample", downsample);
  }
}

torch::Tensor BottleneckImpl::forward(torch::Tensor x) {
  torch::Tensor identity = x;
  torch::Tensor out = relu(bn1(conv1(x)));
  out = relu(bn2(conv2(out)));
  out = bn3(conv3(out));
  if (downsample) {
    identity = downsample->forward(x);
  }
  out += identity;
  return relu(out);
}

ResNetImpl::ResNetImpl(ResNetBlock block, std::array<int64_t, 4> layers,
                       int64_t num_classes)
    : conv1(register_module("conv1", conv(3, 64, /*kernel_size=*/7, 2, 3))),
      bn1(register_module("bn1", torch::nn::BatchNorm2d(64))),
      relu(register_module("relu", inplace_relu())),
      maxpool(register_module(
          "maxpool",
          torch::nn::MaxPool2d(
              torch::nn::MaxPool2dOptions(3).stride(2).padding(1)))) {
  const bool basic = block == ResNetBlock::kBasic;
  const std::array<int64_t, 4> planes = {64, 128, 256, 512};
  const std::array<int64_t, 4> strides = {1, 2, 2, 2};
  std::array<torch::nn::Sequential*, 4> targets = {&layer1, &layer2, &layer3,
                                                   &layer4};
  for (size_t i = 0; i < targets.size(); ++i) {
    torch::nn::Sequential layer =
        basic ? make_layer<BasicBlock>(planes[i], layers[i], strides[i])
              : make_layer<Bottleneck>(planes[i], layers[i], strides[i]);
    *targets[i] = register_module("layer" + std::to_string(i + 1), layer);
  }
  avgpool = register_module("avgpool",
                            torch::nn::AdaptiveAvgPool2d(
                                torch::nn::AdaptiveAvgPool2dOptions({1, 1})));
  const int64_t expansion =
      basic ? BasicBlockImpl::kExpansion : BottleneckImpl::kExpansion;
  fc = register_module("fc", torch::nn::Linear(512 * expansion, num_classes));

  // torchvision's initialization; Linear keeps its default one.
  for (const auto& module : modules(/*include_self=*/false)) {
    if (auto* conv = module->as<torch::nn::Conv2d>()) {
      torch::nn::init::kaiming_normal_(conv->weight, /*a=*/0, torch::kFanOut,
                                       torch::kReLU);
    } else if (auto* bn = module->as<torch::nn::BatchNorm2d>()) {
      torch::nn::init::constant_(bn->weight, 1);
      torch::nn::init::constant_(bn->bias, 0);
    }
  }
}

template <typename Block>
torch::nn::Sequential ResNetImpl::make_layer(int64_t planes, int64_t blocks,
                                             int64_t stride) {
  using BlockImpl = typename Block::Impl;
  torch::nn::Sequential downsample{nullptr};
  if (stride != 1 || inplanes_ != planes * BlockImpl::kExpansion) {
    downsample = torch::nn::Sequential(
        conv1x1(inplanes_, planes * BlockImpl::kExpansion, stride),
        torch::nn::BatchNorm2d(planes * BlockImpl::kExpansion));
  }
  torch::nn::Sequential layer;
  layer->push_back(Block(inplanes_, planes, stride, downsample));
  inplanes_ = planes * BlockImpl::kExpansion;
  for (int64_t i = 1; i < blocks; ++i) {
    layer->push_back(Block(inplanes_, planes, 1, nullptr));
  }
  return layer;
}

torch::Tensor ResNetImpl::forward(torch::Tensor x) {
  x = maxpool(relu(bn1(conv1(x))));
  x = layer1->forward(x);
  x = layer2->forward(x);
  x = layer3->forward(x);
  x = layer4->forward(x);
  x = avgpool(x);
  x = torch::flatten(x, 1);
  return fc(x);
}

ResNet resnet18(int64_t num_classes) {
  return ResNet(ResNetBlock::kBasic, std::array<int64_t, 4>{2, 2, 2, 2},
                num_classes);
}

ResNet resnet50(int64_t num_classes) {
  return ResNet(ResNetBlock::kBottleneck, std::array<int64_t, 4>{3, 4, 6, 3},
                num_classes);
}

}  // namespace models
