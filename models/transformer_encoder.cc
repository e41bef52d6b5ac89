#include "models/transformer_encoder.h"

namespace models {

TransformerClassifierImpl::TransformerClassifierImpl(
    int64_t vocab_size, int64_t d_model, int64_t nhead, int64_t dim_feedforward,
    int64_t num_layers, int64_t num_classes, double dropout)
    : embedding(register_module("embedding",
                                torch::nn::Embedding(vocab_size, d_model))),
      encoder(register_module(
          "encoder",
          torch::nn::TransformerEncoder(
              torch::nn::TransformerEncoderLayer(
                  torch::nn::TransformerEncoderLayerOptions(d_model, nhead)
                      .dim_feedforward(dim_feedforward)
                      .dropout(dropout)),
              num_layers))),
      classifier(register_module("classifier",
                                 torch::nn::Linear(d_model, num_classes))) {}

torch::Tensor TransformerClassifierImpl::forward(torch::Tensor tokens) {
  torch::Tensor x = embedding(tokens);  // [S, N, E]
  x = encoder(x);
  x = x.mean(/*dim=*/0);  // [N, E]
  return classifier(x);
}

}  // namespace models
