// A GPT-2-style decoder and its greedy generation with a key/value cache,
// the loop kept in the graph. The decoder is the C++ twin of
// testdata/onnx_runtime_models.py's GptDecoder (pre-norm blocks, causal
// attention on linear layers, a tanh-GELU MLP, the output projection tied
// to the token embedding). forward() generates: the prompt runs through the
// decoder at once (filling the cache), then an fx::while_loop feeds one
// token per step, each step's keys and values written into the cache at
// their position (index_copy), until every sequence has given the end token
// or the sequence is full. Traced, the loop is one while_loop node: a
// GraphModule that generates, lowered, exported to ONNX as a Loop.
#pragma once

#include <cstdint>
#include <tuple>
#include <vector>

#include <torch/torch.h>

namespace models {

struct GptConfig {
  int64_t layers = 4;
  int64_t d = 256;
  int64_t heads = 4;
  int64_t vocab = 1000;
  int64_t length = 64;  // positions: the longest sequence, prompt included
  int64_t eos = 0;      // the end token; -1: none, stop when full
};

class GptBlockImpl : public torch::nn::Module {
 public:
  GptBlockImpl(int64_t d, int64_t heads);

  // x [B, T, d], mask [T, T] (true: masked) -> (x after the block, its
  // keys, its values), the keys and values [T, B, heads, d / heads] as the
  // cache holds them.
  std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> forward(
      const torch::Tensor& x, const torch::Tensor& mask);

  // One position: x [B, 1, d] at position `pos` (a 0-d int64 tensor);
  // k_cache, v_cache [length, B, heads, d / heads], valid before `pos`.
  // Returns (x after the block, the caches with this position written).
  // `visible` [length] bool: the positions up to `pos`.
  std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> step(
      const torch::Tensor& x, const torch::Tensor& k_cache,
      const torch::Tensor& v_cache, const torch::Tensor& pos,
      const torch::Tensor& visible);

  int64_t heads;
  torch::nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  torch::nn::Linear qkv{nullptr}, proj{nullptr}, fc{nullptr}, out{nullptr};

 private:
  torch::Tensor attention_out(const torch::Tensor& x,
                              const torch::Tensor& attended);
};
TORCH_MODULE(GptBlock);

class GptGeneratorImpl : public torch::nn::Module {
 public:
  explicit GptGeneratorImpl(GptConfig config = {});

  // The decoder: ids [B, T] int64 (1 <= T <= length) -> logits
  // [B, T, vocab], each position seeing those before it.
  torch::Tensor logits(const torch::Tensor& ids);

  // Greedy generation from prompt [B, P] int64 (1 <= P < length):
  // {tokens [B, length] int64, count [] int64}. tokens holds the prompt,
  // then each sequence's greedy tokens; a sequence that gave the end token
  // gives it from then on, and positions from `count` on hold it too.
  // Generation stops when every sequence has given the end token or the
  // sequence is full (count == length).
  std::vector<torch::Tensor> forward(const torch::Tensor& prompt);

  GptConfig config;
  torch::nn::Embedding embed{nullptr};
  torch::Tensor pos;  // [1, length, d]
  torch::nn::ModuleList blocks{nullptr};
  torch::nn::LayerNorm norm{nullptr};
  torch::Tensor causal;  // [length, length] bool, true above the diagonal
};
TORCH_MODULE(GptGenerator);

// Greedy decoding without a cache, for checking forward(): at each step the
// decoder runs on the whole sequence so far (logits()) and the last
// position's largest logit is the next token; the same stopping rule and
// outputs as forward().
std::vector<torch::Tensor> greedy_without_cache(GptGeneratorImpl& model,
                                                const torch::Tensor& prompt);

}  // namespace models
