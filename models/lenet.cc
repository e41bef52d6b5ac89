#include "models/lenet.h"

namespace models {

LeNetImpl::LeNetImpl()
    : conv1(register_module("conv1", torch::nn::Conv2d(1, 6, 5))),
      conv2(register_module("conv2", torch::nn::Conv2d(6, 16, 5))),
      fc1(register_module("fc1", torch::nn::Linear(16 * 5 * 5, 120))),
      fc2(register_module("fc2", torch::nn::Linear(120, 84))),
      fc3(register_module("fc3", torch::nn::Linear(84, 10))) {}

torch::Tensor LeNetImpl::forward(torch::Tensor x) {
  x = torch::max_pool2d(torch::relu(conv1(x)), 2);
  x = torch::max_pool2d(torch::relu(conv2(x)), 2);
  x = torch::flatten(x, 1);
  x = torch::relu(fc1(x));
  x = torch::relu(fc2(x));
  return fc3(x);
}

}  // namespace models
