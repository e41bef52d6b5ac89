// A network with data-dependent control flow: Gate's forward branches on the
// sign of the sum of its input, so a symbolic tracer cannot follow it unless
// Gate is treated as a leaf module (LeafGateNet). No torchvision counterpart.
#pragma once

#include <cstdint>

#include <torch/torch.h>

namespace models {

// Returns x * 2 if x.sum() > 0, else -x.
class GateImpl : public torch::nn::Module {
 public:
  torch::Tensor forward(torch::Tensor x);
};
TORCH_MODULE(Gate);

// Conv2d(3 -> 4, 3x3, same padding) -> Gate -> flatten -> Linear.
class DataDependentNetImpl : public torch::nn::Module {
 public:
  // Inputs are [N, 3, image_size, image_size].
  explicit DataDependentNetImpl(int64_t image_size = 8,
                                int64_t num_classes = 3);

  torch::Tensor forward(torch::Tensor x);

  torch::nn::Conv2d conv{nullptr};
  Gate gate{nullptr};
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(DataDependentNet);

// The same network with the gate called through fx::call, so that a tracer
// that keeps "gate" as a leaf module can trace it: the gate becomes one
// call_module node and runs for real in the GraphModule.
class LeafGateNetImpl : public DataDependentNetImpl {
 public:
  using DataDependentNetImpl::DataDependentNetImpl;
  torch::Tensor forward(torch::Tensor x);
};
TORCH_MODULE(LeafGateNet);

}  // namespace models
