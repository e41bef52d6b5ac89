#include "tiny_net.h"

namespace consumer {

namespace F = torch::nn::functional;

TinyNetImpl::TinyNetImpl() {
  conv1 = register_module(
      "conv1", torch::nn::Conv2d(
                   torch::nn::Conv2dOptions(3, 16, 3).padding(1).bias(false)));
  bn1 = register_module("bn1", torch::nn::BatchNorm2d(16));
  conv2 = register_module(
      "conv2",
      torch::nn::Conv2d(torch::nn::Conv2dOptions(16, 32, 3).stride(2).padding(1)));
  bn2 = register_module("bn2", torch::nn::BatchNorm2d(32));
  fc = register_module("fc", torch::nn::Linear(32, 10));
}

torch::Tensor TinyNetImpl::forward(torch::Tensor x) {
  x = torch::relu(bn1(conv1(x)));
  x = torch::relu(bn2(conv2(x)));
  x = F::adaptive_avg_pool2d(x, F::AdaptiveAvgPool2dFuncOptions(1));
  return fc(x.flatten(1));
}

TinyNet make_tiny_net() {
  torch::manual_seed(7);
  TinyNet net;
  torch::NoGradGuard no_grad;
  for (auto* bn : {net->bn1.get(), net->bn2.get()}) {
    bn->weight.uniform_(0.5, 1.5);
    bn->bias.uniform_(-0.5, 0.5);
    bn->running_mean.uniform_(-0.5, 0.5);
    bn->running_var.uniform_(0.5, 2.0);
  }
  net->eval();
  return net;
}

fx::codegen::Model tiny_net_model() {
  return fx::codegen::model_of(make_tiny_net());
}

}  // namespace consumer
