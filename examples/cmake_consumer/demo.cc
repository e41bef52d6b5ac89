// A model written the usual way, traced, folded (conv/bn) and run through
// fx for LibTorch's CMake package; compared with eager.
#include <iostream>

#include <torch/torch.h>

#include "fx/fx.h"
#include "passes/pass_manager.h"

struct NetImpl : torch::nn::Module {
  NetImpl()
      : conv(register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 8, 3).padding(1)))),
        bn(register_module("bn", torch::nn::BatchNorm2d(8))),
        fc(register_module("fc", torch::nn::Linear(8, 4))) {}
  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(bn(conv(x)));
    x = torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1);
    return fc(x);
  }
  torch::nn::Conv2d conv;
  torch::nn::BatchNorm2d bn;
  torch::nn::Linear fc;
};
TORCH_MODULE(Net);

int main() {
  torch::manual_seed(0);
  Net net;
  {
    // Statistics worth folding: a few training-mode batches.
    torch::NoGradGuard no_grad;
    for (int i = 0; i < 3; ++i) net(torch::randn({4, 3, 16, 16}) * 2 + 1);
  }
  net->eval();
  torch::Tensor x = torch::randn({1, 3, 16, 16});

  fx::GraphModule gm = fx::symbolic_trace(net, x);
  fx::GraphModule folded =
      fx::PassManager().add("fuse_conv_bn").add("eliminate_dead_code").run(gm).module;
  std::cout << folded->graph() << "\n";

  torch::NoGradGuard no_grad;
  const torch::Tensor eager = net(x);
  const double diff = (folded(x).toTensor() - eager).abs().max().item<double>();
  const bool batch_norm_left =
      !folded->graph().find_nodes(fx::Opcode::kCallFunction,
                                  fx::op("aten::batch_norm")).empty();
  std::cout << "max |folded - eager| = " << diff << "\n";
  const bool ok = diff < 1e-5 && !batch_norm_left;
  std::cout << (ok ? "OK" : "MISMATCH") << "\n";
  return ok ? 0 : 1;
}
