#include "models/data_dependent.h"

#include "fx/trace/tracer.h"

namespace models {

torch::Tensor GateImpl::forward(torch::Tensor x) {
  if (x.sum().item<double>() > 0) {
    return x * 2;
  }
  return -x;
}

DataDependentNetImpl::DataDependentNetImpl(int64_t image_size,
                                           int64_t num_classes)
    : conv(register_module(
          "conv",
          torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 4, 3).padding(1)))),
      gate(register_module("gate", Gate())),
      fc(register_module(
          "fc", torch::nn::Linear(4 * image_size * image_size, num_classes))) {}

torch::Tensor DataDependentNetImpl::forward(torch::Tensor x) {
  x = conv(x);
  x = gate->forward(x);
  x = torch::flatten(x, 1);
  return fc(x);
}

torch::Tensor LeafGateNetImpl::forward(torch::Tensor x) {
  x = conv(x);
  x = fx::call(gate, x);
  x = torch::flatten(x, 1);
  return fc(x);
}

}  // namespace models
