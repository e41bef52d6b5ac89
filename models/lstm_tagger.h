// A sequence tagger: Embedding -> torch::nn::LSTM -> Linear -> log_softmax.
// Its forward returns a nested tuple (tag scores, (h_n, c_n)). No torchvision
// counterpart (the PyTorch tutorial's LSTMTagger, sequence-first).
#pragma once

#include <cstdint>
#include <tuple>

#include <torch/torch.h>

namespace models {

class LstmTaggerImpl : public torch::nn::Module {
 public:
  explicit LstmTaggerImpl(int64_t vocab_size = 500, int64_t embedding_dim = 32,
                          int64_t hidden_dim = 64, int64_t num_tags = 8);

  // tokens: int64 [S, N] -> (log-probabilities [S, N, num_tags],
  // (h_n [1, N, hidden_dim], c_n [1, N, hidden_dim])).
  std::tuple<torch::Tensor, std::tuple<torch::Tensor, torch::Tensor>> forward(
      torch::Tensor tokens);

  torch::nn::Embedding embedding{nullptr};
  torch::nn::LSTM lstm{nullptr};
  torch::nn::Linear hidden2tag{nullptr};
};
TORCH_MODULE(LstmTagger);

}  // namespace models
