// A text classifier: Embedding -> torch::nn::TransformerEncoder -> mean over
// the sequence -> Linear. No torchvision counterpart; the encoder is the C++
// twin of torch.nn.TransformerEncoder (sequence-first, post-norm, ReLU).
#pragma once

#include <cstdint>

#include <torch/torch.h>

namespace models {

class TransformerClassifierImpl : public torch::nn::Module {
 public:
  explicit TransformerClassifierImpl(int64_t vocab_size = 1000,
                                     int64_t d_model = 64, int64_t nhead = 4,
                                     int64_t dim_feedforward = 128,
                                     int64_t num_layers = 2,
                                     int64_t num_classes = 5,
                                     double dropout = 0.1);

  // tokens: int64 [S, N] -> logits [N, num_classes].
  torch::Tensor forward(torch::Tensor tokens);

  torch::nn::Embedding embedding{nullptr};
  torch::nn::TransformerEncoder encoder{nullptr};
  torch::nn::Linear classifier{nullptr};
};
TORCH_MODULE(TransformerClassifier);

}  // namespace models
