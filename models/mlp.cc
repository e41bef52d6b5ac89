#include "models/mlp.h"

namespace models {

MlpImpl::MlpImpl()
    : fc1(register_module("fc1", torch::nn::Linear(784, 256))),
      fc2(register_module("fc2", torch::nn::Linear(256, 128))),
      fc3(register_module("fc3", torch::nn::Linear(128, 10))) {}

torch::Tensor MlpImpl::forward(torch::Tensor x) {
  x = torch::relu(fc1(x));
  x = torch::relu(fc2(x));
  return fc3(x);
}

}  // namespace models
