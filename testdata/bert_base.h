// BERT-base's sizes as a LibTorch C++ module: the twin of BertBase in
// testdata/onnx_runtime_models.py (which the inference benchmark times
// beside ONNX Runtime), written as a C++ deployment writes its model.
// Token and position embeddings, a layer norm, 12 post-norm
// torch::nn::TransformerEncoderLayer (d=768, 12 heads, 3072 wide, GELU),
// the first token's state. Sequence first, as LibTorch's C++ encoder is:
// ids int64 [T, N] (T <= length) -> [N, d].
//
//   testdata::BertBase bert;               // BERT-base's sizes
//   bert->eval();
//   fx::GraphModule gm = fx::symbolic_trace(bert, ids);
//   fx::optimize_for_inference(*gm);
#pragma once

#include <cstdint>

#include <torch/torch.h>

namespace testdata {

struct BertSizes {
  int64_t layers = 12, d = 768, heads = 12, ff = 3072, vocab = 30522,
          length = 128;
};

class BertBaseImpl : public torch::nn::Module {
 public:
  explicit BertBaseImpl(const BertSizes& sizes = {});

  torch::Tensor forward(torch::Tensor ids);

  torch::nn::Embedding embed{nullptr};
  torch::Tensor pos;  // [length, 1, d]
  torch::nn::LayerNorm norm{nullptr};
  torch::nn::TransformerEncoder encoder{nullptr};
};
TORCH_MODULE(BertBase);

}  // namespace testdata
