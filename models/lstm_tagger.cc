#include "models/lstm_tagger.h"

namespace models {

LstmTaggerImpl::LstmTaggerImpl(int64_t vocab_size, int64_t embedding_dim,
                               int64_t hidden_dim, int64_t num_tags)
    : embedding(register_module(
          "embedding", torch::nn::Embedding(vocab_size, embedding_dim))),
      lstm(register_module("lstm", torch::nn::LSTM(embedding_dim, hidden_dim))),
      hidden2tag(register_module("hidden2tag",
                                 torch::nn::Linear(hidden_dim, num_tags))) {}

std::tuple<torch::Tensor, std::tuple<torch::Tensor, torch::Tensor>>
LstmTaggerImpl::forward(torch::Tensor tokens) {
  torch::Tensor embeds = embedding(tokens);  // [S, N, E]
  auto [lstm_out, state] = lstm(embeds);
  torch::Tensor tag_scores =
      torch::log_softmax(hidden2tag(lstm_out), /*dim=*/2);
  return {tag_scores, state};
}

}  // namespace models
