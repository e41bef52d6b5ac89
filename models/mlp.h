// A three-layer perceptron for flattened 28x28 images:
// Linear(784, 256) -> ReLU -> Linear(256, 128) -> ReLU -> Linear(128, 10).
// No torchvision counterpart.
#pragma once

#include <torch/torch.h>

namespace models {

class MlpImpl : public torch::nn::Module {
 public:
  MlpImpl();

  // x: [N, 784] -> logits [N, 10].
  torch::Tensor forward(torch::Tensor x);

  torch::nn::Linear fc1{nullptr};
  torch::nn::Linear fc2{nullptr};
  torch::nn::Linear fc3{nullptr};
};
TORCH_MODULE(Mlp);

}  // namespace models
