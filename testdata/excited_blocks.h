// Squeeze-and-excitation blocks as MobileNetV3 and EfficientNet-B0 hold
// them, in C++: the lowering's tests (float and int8) trace them.
#pragma once

#include <torch/torch.h>

#include <memory>

namespace testdata {

// torchvision's SqueezeExcitation in C++: global average pooling, two 1x1
// convolutions, the product of the gate with the input.
struct SqueezeExcitation : torch::nn::Module {
  SqueezeExcitation(int64_t channels, int64_t squeezed, bool silu)
      : silu(silu) {
    fc1 = register_module("fc1", torch::nn::Conv2d(
        torch::nn::Conv2dOptions(channels, squeezed, 1)));
    fc2 = register_module("fc2", torch::nn::Conv2d(
        torch::nn::Conv2dOptions(squeezed, channels, 1)));
  }
  at::Tensor forward(at::Tensor x) {
    at::Tensor s = fc1(torch::adaptive_avg_pool2d(x, {1, 1}));
    s = silu ? torch::silu(s) : torch::relu(s);
    const at::Tensor e = fc2(s);
    return (silu ? torch::sigmoid(e) : torch::hardsigmoid(e)) * x;
  }
  bool silu;
  torch::nn::Conv2d fc1{nullptr}, fc2{nullptr};
};

// MobileNetV3's block (hardswish, relu and hardsigmoid) then
// EfficientNet's (silu, silu and sigmoid).
struct ExcitedBlocks : torch::nn::Module {
  ExcitedBlocks() {
    stem = register_module("stem", torch::nn::Conv2d(
        torch::nn::Conv2dOptions(3, 24, 3).padding(1)));
    se1 = register_module("se1", std::make_shared<SqueezeExcitation>(24, 8, false));
    mid = register_module("mid", torch::nn::Conv2d(
        torch::nn::Conv2dOptions(24, 40, 1)));
    se2 = register_module("se2", std::make_shared<SqueezeExcitation>(40, 10, true));
    last = register_module("last", torch::nn::Conv2d(
        torch::nn::Conv2dOptions(40, 16, 1)));
  }
  at::Tensor forward(at::Tensor x) {
    at::Tensor y = se1->forward(torch::hardswish(stem(x)));
    y = se2->forward(torch::silu(mid(y)));
    return last(y);
  }
  torch::nn::Conv2d stem{nullptr}, mid{nullptr}, last{nullptr};
  std::shared_ptr<SqueezeExcitation> se1, se2;
};

}  // namespace testdata
