// Blocks: a chain of n blocks of 1x1 convolution, batch norm and relu on 2
// channels (8 nodes a block once traced), for the benchmarks of graphs of
// 10k and 100k nodes. Every pass and the code generator have work on it.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/torch.h>

namespace models {

class BlocksImpl : public torch::nn::Module {
 public:
  explicit BlocksImpl(int64_t n);
  at::Tensor forward(at::Tensor x);

 private:
  std::vector<torch::nn::Conv2d> convs_;
  std::vector<torch::nn::BatchNorm2d> norms_;
};
TORCH_MODULE(Blocks);

}  // namespace models
