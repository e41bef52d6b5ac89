#include "models/gpt_generator.h"

#include <cmath>

#include "fx/trace/control_flow.h"

namespace models {

namespace {
using torch::Tensor;
using Tensors = std::vector<Tensor>;
namespace F = torch::nn::functional;

// [B, T, d] -> [B, heads, T, d / heads].
Tensor split_heads(const Tensor& x, int64_t heads) {
  return x.view({x.size(0), x.size(1), heads, -1}).transpose(1, 2);
}

// softmax(q @ k^T * scale, masked) @ v, [B, heads, T, d / heads] each.
Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v,
              const Tensor& masked) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  Tensor att = torch::matmul(q, k.transpose(-2, -1)) * scale;
  att = att.masked_fill(masked, -std::numeric_limits<double>::infinity());
  return torch::matmul(att.softmax(-1), v);
}
}  // namespace

GptBlockImpl::GptBlockImpl(int64_t d, int64_t heads_)
    : heads(heads_),
      ln1(register_module("ln1", torch::nn::LayerNorm(
                                     torch::nn::LayerNormOptions({d})))),
      ln2(register_module("ln2", torch::nn::LayerNorm(
                                     torch::nn::LayerNormOptions({d})))),
      qkv(register_module("qkv", torch::nn::Linear(d, 3 * d))),
      proj(register_module("proj", torch::nn::Linear(d, d))),
      fc(register_module("fc", torch::nn::Linear(d, 4 * d))),
      out(register_module("out", torch::nn::Linear(4 * d, d))) {
  TORCH_CHECK(d % heads == 0, "GptBlock: d (", d,
              ") must be a multiple of heads (", heads, ")");
}

Tensor GptBlockImpl::attention_out(const Tensor& x, const Tensor& attended) {
  const Tensor y = attended.transpose(1, 2).reshape(x.sizes());
  const Tensor h = x + proj(y);
  return h + out(F::gelu(fc(ln2(h)), F::GELUFuncOptions().approximate("tanh")));
}

std::tuple<Tensor, Tensor, Tensor> GptBlockImpl::forward(const Tensor& x,
                                                         const Tensor& mask) {
  const Tensors qkv_ = qkv(ln1(x)).split(x.size(2), 2);
  const Tensor q = split_heads(qkv_[0], heads);
  const Tensor k = split_heads(qkv_[1], heads);
  const Tensor v = split_heads(qkv_[2], heads);
  // The cache's layout: [T, B, heads, d / heads].
  return {attention_out(x, attend(q, k, v, mask)), k.permute({2, 0, 1, 3}),
          v.permute({2, 0, 1, 3})};
}

std::tuple<Tensor, Tensor, Tensor> GptBlockImpl::step(
    const Tensor& x, const Tensor& k_cache, const Tensor& v_cache,
    const Tensor& pos, const Tensor& visible) {
  const Tensors qkv_ = qkv(ln1(x)).split(x.size(2), 2);
  const Tensor at = pos.view({1});
  // [B, 1, d] -> [1, B, heads, d / heads], written at `pos`.
  auto as_cached = [&](const Tensor& t) {
    return t.view({t.size(0), 1, heads, -1}).transpose(0, 1);
  };
  const Tensor k_next = k_cache.index_copy(0, at, as_cached(qkv_[1]));
  const Tensor v_next = v_cache.index_copy(0, at, as_cached(qkv_[2]));
  const Tensor attended =
      attend(split_heads(qkv_[0], heads), k_next.permute({1, 2, 0, 3}),
             v_next.permute({1, 2, 0, 3}), visible.logical_not());
  return {attention_out(x, attended), k_next, v_next};
}

GptGeneratorImpl::GptGeneratorImpl(GptConfig config_)
    : config(config_),
      embed(register_module("embed",
                            torch::nn::Embedding(config.vocab, config.d))),
      pos(register_parameter("pos",
                             torch::randn({1, config.length, config.d}) * 0.02)),
      blocks(register_module("blocks", torch::nn::ModuleList())),
      norm(register_module("norm", torch::nn::LayerNorm(
                                       torch::nn::LayerNormOptions({config.d})))),
      causal(register_buffer(
          "causal",
          torch::ones({config.length, config.length}, torch::kBool).triu(1))) {
  TORCH_CHECK(config.layers >= 1 && config.length >= 2 && config.vocab >= 1,
              "GptGenerator: needs at least one layer, two positions and one "
              "token; got layers=", config.layers, " length=", config.length,
              " vocab=", config.vocab);
  TORCH_CHECK(config.eos >= -1 && config.eos < config.vocab,
              "GptGenerator: eos must be a token below vocab (", config.vocab,
              ") or -1 for none, got ", config.eos);
  for (int64_t i = 0; i < config.layers; ++i) {
    blocks->push_back(GptBlock(config.d, config.heads));
  }
}

Tensor GptGeneratorImpl::logits(const Tensor& ids) {
  const int64_t t = ids.size(1);
  TORCH_CHECK(t >= 1 && t <= config.length, "GptGenerator::logits: ",
              "the sequence must hold 1 to ", config.length, " tokens, got ",
              t);
  Tensor h = embed(ids) + pos.slice(1, 0, t);
  const Tensor mask = causal.slice(0, 0, t).slice(1, 0, t);
  for (const auto& block : *blocks) {
    h = std::get<0>(block->as<GptBlock>()->forward(h, mask));
  }
  return torch::matmul(norm(h), embed->weight.t());
}

std::vector<Tensor> GptGeneratorImpl::forward(const Tensor& prompt) {
  TORCH_CHECK(prompt.dim() == 2 && prompt.scalar_type() == torch::kLong,
              "GptGenerator: the prompt must be int64 [batch, tokens], got ",
              prompt.toString(), " ", prompt.sizes());
  const int64_t batch = prompt.size(0);
  const int64_t p = prompt.size(1);
  const int64_t length = config.length;
  TORCH_CHECK(p >= 1 && p < length, "GptGenerator: the prompt must hold 1 to ",
              length - 1, " tokens (the sequence holds ", length,
              "), got ", p);
  // -1 never matches a token: no end token.
  const int64_t eos = config.eos;

  // The prompt at once: its keys and values fill the cache's first p
  // positions, and its last position gives the first new token.
  Tensor h = embed(prompt) + pos.slice(1, 0, p);
  const Tensor mask = causal.slice(0, 0, p).slice(1, 0, p);
  Tensors carried(4);
  for (const auto& block : *blocks) {
    auto [next_h, k, v] = block->as<GptBlock>()->forward(h, mask);
    h = next_h;
    for (const Tensor& kv : {k, v}) {
      carried.push_back(torch::cat(
          {kv, kv.new_zeros({length - p, batch, kv.size(2), kv.size(3)})}, 0));
    }
  }
  const Tensor last_logits =
      torch::matmul(norm(h.select(1, p - 1)), embed->weight.t());
  const Tensor first = last_logits.argmax(-1);
  carried[0] = torch::full({}, p, torch::kLong);  // the position `first` is at
  carried[1] = first;                             // the token at that position
  carried[2] = first.eq(eos);                     // sequences that ended
  carried[3] = torch::cat(
      {prompt, first.unsqueeze(1),
       torch::full({batch, length - p - 1}, eos < 0 ? 0 : eos, torch::kLong)},
      1);

  auto keep_going = [length](const Tensors& c) {
    return c[0].lt(length - 1).logical_and(c[2].logical_not().any());
  };
  auto one_step = [this, length, eos](const Tensors& c) {
    const Tensor& at = c[0];
    Tensor x = embed(c[1]).unsqueeze(1) + pos.index_select(1, at.view({1}));
    const Tensor visible = torch::arange(length, torch::kLong).le(at);
    Tensors next(4);
    for (size_t i = 0; i < blocks->size(); ++i) {
      auto [next_x, k, v] = blocks[i]->as<GptBlock>()->step(
          x, c[4 + 2 * i], c[5 + 2 * i], at, visible);
      x = next_x;
      next.push_back(k);
      next.push_back(v);
    }
    const Tensor step_logits =
        torch::matmul(norm(x.squeeze(1)), embed->weight.t());
    const Tensor token =
        torch::where(c[2], torch::full({}, eos < 0 ? 0 : eos, torch::kLong),
                     step_logits.argmax(-1));
    next[0] = at + 1;
    next[1] = token;
    next[2] = c[2].logical_or(token.eq(eos));
    next[3] = c[3].index_copy(1, (at + 1).view({1}), token.unsqueeze(1));
    return next;
  };
  const Tensors done = fx::while_loop(keep_going, one_step, carried);
  return {done[3], done[0] + 1};
}

std::vector<Tensor> greedy_without_cache(GptGeneratorImpl& model,
                                         const Tensor& prompt) {
  torch::NoGradGuard no_grad;
  const int64_t length = model.config.length;
  const int64_t eos = model.config.eos;
  const int64_t fill = eos < 0 ? 0 : eos;
  const int64_t batch = prompt.size(0);
  int64_t count = prompt.size(1);
  Tensor tokens = torch::full({batch, length}, fill, torch::kLong);
  tokens.slice(1, 0, count).copy_(prompt);
  Tensor ended = torch::zeros({batch}, torch::kBool);
  while (count < length && !ended.all().item<bool>()) {
    const Tensor step_logits =
        model.logits(tokens.slice(1, 0, count)).select(1, count - 1);
    const Tensor token =
        torch::where(ended, torch::full({}, fill, torch::kLong),
                     step_logits.argmax(-1));
    tokens.select(1, count).copy_(token);
    ended = ended.logical_or(token.eq(eos));
    ++count;
  }
  return {tokens, torch::full({}, count, torch::kLong)};
}

}  // namespace models
