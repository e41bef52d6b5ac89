#include "testdata/bert_base.h"

namespace testdata {

BertBaseImpl::BertBaseImpl(const BertSizes& sizes)
    : embed(register_module("embed",
                            torch::nn::Embedding(sizes.vocab, sizes.d))),
      pos(register_parameter(
          "pos", torch::randn({sizes.length, 1, sizes.d}) * 0.02)),
      norm(register_module(
          "norm", torch::nn::LayerNorm(
                      torch::nn::LayerNormOptions({sizes.d})))),
      encoder(register_module(
          "encoder",
          torch::nn::TransformerEncoder(
              torch::nn::TransformerEncoderLayer(
                  torch::nn::TransformerEncoderLayerOptions(sizes.d,
                                                            sizes.heads)
                      .dim_feedforward(sizes.ff)
                      .dropout(0.1)
                      .activation(torch::kGELU)),
              sizes.layers))) {}

torch::Tensor BertBaseImpl::forward(torch::Tensor ids) {
  const torch::Tensor h =
      norm(embed(ids) + pos.slice(/*dim=*/0, 0, ids.size(0)));
  return encoder(h).select(/*dim=*/0, 0);
}

}  // namespace testdata
