// A small convolutional network, written as a LibTorch user writes one.
#pragma once

#include <torch/torch.h>

#include "codegen/generator.h"

namespace consumer {

struct TinyNetImpl : torch::nn::Module {
  TinyNetImpl();
  torch::Tensor forward(torch::Tensor x);

  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr}, bn2{nullptr};
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(TinyNet);

// Seeded weights and non-trivial batch-norm statistics, in eval mode.
TinyNet make_tiny_net();

// For fx_cc_library: the model the build-time generator traces.
fx::codegen::Model tiny_net_model();

}  // namespace consumer
