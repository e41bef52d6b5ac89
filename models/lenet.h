// LeNet-5 for 32x32 grey images: two conv/relu/max-pool stages, then three
// fully connected layers. No torchvision counterpart.
#pragma once

#include <torch/torch.h>

namespace models {

class LeNetImpl : public torch::nn::Module {
 public:
  LeNetImpl();

  // x: [N, 1, 32, 32] -> logits [N, 10].
  torch::Tensor forward(torch::Tensor x);

  torch::nn::Conv2d conv1{nullptr};
  torch::nn::Conv2d conv2{nullptr};
  torch::nn::Linear fc1{nullptr};
  torch::nn::Linear fc2{nullptr};
  torch::nn::Linear fc3{nullptr};
};
TORCH_MODULE(LeNet);

}  // namespace models
