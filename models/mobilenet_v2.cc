#include "models/mobilenet_v2.h"

#include <array>

namespace models {

Conv2dNormActivationImpl::Conv2dNormActivationImpl(int64_t in_planes,
                                                   int64_t out_planes,
                                                   int64_t kernel_size,
                                                   int64_t stride,
                                                   int64_t groups) {
  push_back(torch::nn::Conv2d(
      torch::nn::Conv2dOptions(in_planes, out_planes, kernel_size)
          .stride(stride)
          .padding((kernel_size - 1) / 2)
          .groups(groups)
          .bias(false)));
  push_back(torch::nn::BatchNorm2d(out_planes));
  push_back(torch::nn::ReLU6(torch::nn::ReLU6Options(/*inplace=*/true)));
}

torch::Tensor Conv2dNormActivationImpl::forward(torch::Tensor x) {
  return SequentialImpl::forward(x);
}

InvertedResidualImpl::InvertedResidualImpl(int64_t inp, int64_t oup,
                                           int64_t stride, int64_t expand_ratio)
    : use_res_connect_(stride == 1 && inp == oup) {
  const int64_t hidden_dim = inp * expand_ratio;
  torch::nn::Sequential layers;
  if (expand_ratio != 1) {
    layers->push_back(Conv2dNormActivation(inp, hidden_dim, 1));
  }
  layers->push_back(
      Conv2dNormActivation(hidden_dim, hidden_dim, 3, stride, hidden_dim));
  layers->push_back(torch::nn::Conv2d(
      torch::nn::Conv2dOptions(hidden_dim, oup, 1).bias(false)));
  layers->push_back(torch::nn::BatchNorm2d(oup));
  conv = register_module("conv", layers);
}

torch::Tensor InvertedResidualImpl::forward(torch::Tensor x) {
  if (use_res_connect_) {
    return x + conv->forward(x);
  }
  return conv->forward(x);
}

MobileNetV2Impl::MobileNetV2Impl(int64_t num_classes) {
  struct Setting {
    int64_t t;  // expansion factor
    int64_t c;  // output channels
    int64_t n;  // number of blocks
    int64_t s;  // stride of the first block
  };
  const std::array<Setting, 7> settings = {{{1, 16, 1, 1},
                                            {6, 24, 2, 2},
                                            {6, 32, 3, 2},
                                            {6, 64, 4, 2},
                                            {6, 96, 3, 1},
                                            {6, 160, 3, 2},
                                            {6, 320, 1, 1}}};
  int64_t input_channel = 32;
  const int64_t last_channel = 1280;

  torch::nn::Sequential layers;
  layers->push_back(Conv2dNormActivation(3, input_channel, 3, /*stride=*/2));
  for (const Setting& setting : settings) {
    for (int64_t i = 0; i < setting.n; ++i) {
      const int64_t stride = i == 0 ? setting.s : 1;
      layers->push_back(
          InvertedResidual(input_channel, setting.c, stride, setting.t));
      input_channel = setting.c;
    }
  }
  layers->push_back(Conv2dNormActivation(input_channel, last_channel, 1));
  features = register_module("features", layers);
  classifier = register_module(
      "classifier",
      torch::nn::Sequential(torch::nn::Dropout(0.2),
                            torch::nn::Linear(last_channel, num_classes)));

  // torchvision's initialization.
  for (const auto& module : modules(/*include_self=*/false)) {
    if (auto* conv = module->as<torch::nn::Conv2d>()) {
      torch::nn::init::kaiming_normal_(conv->weight, /*a=*/0, torch::kFanOut);
    } else if (auto* bn = module->as<torch::nn::BatchNorm2d>()) {
      torch::nn::init::ones_(bn->weight);
      torch::nn::init::zeros_(bn->bias);
    } else if (auto* linear = module->as<torch::nn::Linear>()) {
      torch::nn::init::normal_(linear->weight, 0, 0.01);
      torch::nn::init::zeros_(linear->bias);
    }
  }
}

torch::Tensor MobileNetV2Impl::forward(torch::Tensor x) {
  x = features->forward(x);
  x = torch::nn::functional::adaptive_avg_pool2d(
      x, torch::nn::functional::AdaptiveAvgPool2dFuncOptions({1, 1}));
  x = torch::flatten(x, 1);
  return classifier->forward(x);
}

}  // namespace models
