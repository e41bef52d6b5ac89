#include "models/blocks.h"

#include <string>

namespace models {

BlocksImpl::BlocksImpl(int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    convs_.push_back(register_module(
        "conv" + std::to_string(i),
        torch::nn::Conv2d(torch::nn::Conv2dOptions(2, 2, 1).bias(false))));
    norms_.push_back(register_module("bn" + std::to_string(i),
                                     torch::nn::BatchNorm2d(2)));
  }
}

at::Tensor BlocksImpl::forward(at::Tensor x) {
  for (size_t i = 0; i < convs_.size(); ++i) {
    x = torch::relu(norms_[i](convs_[i](x)));
  }
  return x;
}

}  // namespace models
