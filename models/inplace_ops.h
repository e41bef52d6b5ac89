// A small CNN written with in-place ops (torch::relu_, add_, mul_), views
// (view, transpose, narrow, slice, index with Slice, select, unsqueeze,
// reshape, t), an in-place op on a view, and static control flow: a loop over
// a member block count and a branch on a member flag, both fixed at
// construction. No torchvision counterpart.
#pragma once

#include <cstdint>

#include <torch/torch.h>

namespace models {

class InplaceNetImpl : public torch::nn::Module {
 public:
  explicit InplaceNetImpl(int64_t num_blocks = 2, bool use_residual = true,
                          int64_t num_classes = 10);

  // x: [N, 3, H, W], H even -> logits [N, num_classes].
  torch::Tensor forward(torch::Tensor x);

  torch::nn::Conv2d stem{nullptr};
  torch::nn::ModuleList blocks{nullptr};
  torch::Tensor head_weight;  // [num_classes, 8]
  torch::Tensor head_bias;    // [num_classes]

 private:
  int64_t num_blocks_;
  bool use_residual_;
};
TORCH_MODULE(InplaceNet);

}  // namespace models
