// A recurrent model on fx::scan and fx::map: the scan tests and the ONNX
// export's Scan test trace it.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "fx/fx.h"

namespace testdata {

// An Elman cell scanned over time from h0 (x: [B, T, 4], steps along T;
// h0: [B, 8], as nn.RNN takes it), then a per-step head mapped over the
// steps.
struct RecurrentImpl : torch::nn::Module {
  RecurrentImpl() {
    cell = register_module("cell", torch::nn::Linear(4 + 8, 8));
    head = register_module("head", torch::nn::Linear(8, 3));
  }
  torch::Tensor forward(torch::Tensor x, torch::Tensor h0) {
    using Tensors = std::vector<at::Tensor>;
    fx::ScanResult r = fx::scan(
        [&](const Tensors& h, const Tensors& step) {
          at::Tensor next = torch::tanh(cell(torch::cat({step[0], h[0]}, 1)));
          return std::pair{Tensors{next}, Tensors{next, next.sum(1)}};
        },
        {h0}, {x.transpose(0, 1)});
    // r.ys[0]: [T, B, 8]; r.ys[1]: [T, B]
    Tensors logits = fx::map(
        [&](const Tensors& s) { return Tensors{head(s[0]).softmax(-1)}; },
        {r.ys[0]});
    return logits[0].sum(0) + r.carried[0].sum() + r.ys[1].mean();
  }
  torch::nn::Linear cell{nullptr}, head{nullptr};
};
TORCH_MODULE(Recurrent);

}  // namespace testdata
