#include "models/inplace_ops.h"

namespace models {

using torch::indexing::None;
using torch::indexing::Slice;

namespace {

constexpr int64_t kChannels = 8;

}  // namespace

InplaceNetImpl::InplaceNetImpl(int64_t num_blocks, bool use_residual,
                               int64_t num_classes)
    : stem(register_module(
          "stem", torch::nn::Conv2d(
                      torch::nn::Conv2dOptions(3, kChannels, 3).padding(1)))),
      blocks(register_module("blocks", torch::nn::ModuleList())),
      head_weight(register_parameter(
          "head_weight", torch::randn({num_classes, kChannels}) * 0.1)),
      head_bias(register_parameter("head_bias", torch::zeros({num_classes}))),
      num_blocks_(num_blocks),
      use_residual_(use_residual) {
  for (int64_t i = 0; i < num_blocks_; ++i) {
    blocks->push_back(torch::nn::Conv2d(
        torch::nn::Conv2dOptions(kChannels, kChannels, 3).padding(1)));
  }
}

torch::Tensor InplaceNetImpl::forward(torch::Tensor x) {
  x = stem(x);
  torch::relu_(x);
  for (int64_t i = 0; i < num_blocks_; ++i) {
    torch::Tensor y = blocks[i]->as<torch::nn::Conv2d>()->forward(x);
    if (use_residual_) {
      y.add_(x);
    }
    x = torch::relu_(y);
  }
  x.mul_(0.5);
  // An in-place op on a view: shifts the first four channels of x.
  x.narrow(/*dim=*/1, /*start=*/0, /*length=*/4).add_(1.0);

  const int64_t half = x.size(2) / 2;
  torch::Tensor top = x.slice(/*dim=*/2, /*start=*/0, /*end=*/half);
  torch::Tensor bottom = x.index({Slice(), Slice(), Slice(half, None)});
  torch::Tensor z = top + bottom;  // [N, C, H/2, W]

  // Mean over positions through views: [N, C, P] -> [N, P, C] -> [N, C].
  torch::Tensor flat = z.view({z.size(0), z.size(1), -1});
  torch::Tensor feats = flat.transpose(1, 2).mean(/*dim=*/1);

  // Scale every sample by a gate computed from its first channel.
  torch::Tensor gate = torch::sigmoid(feats.select(/*dim=*/1, /*index=*/0));
  feats.mul_(gate.unsqueeze(1));

  torch::Tensor logits = feats.mm(head_weight.t()) + head_bias;
  return logits.reshape({-1, head_bias.size(0)});
}

}  // namespace models
