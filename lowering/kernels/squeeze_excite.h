// Internal to //lowering:onednn_ops: squeeze-and-excitation in one call,
// for fx_onednn::squeeze_excite (lowering/onednn_image.cc):
//
//   y[n, c, h, w] = x[n, c, h, w] * gate(W2 act(W1 mean_hw(x[n]) + b1) + b2)[c]
//
// MobileNetV3's and EfficientNet's blocks (torchvision's
// SqueezeExcitation: global average pooling, two 1x1 convolutions, relu or
// silu between them, hardsigmoid or sigmoid after, the product with the
// block's activation). As five lowered operators the block cost 25-60 us
// at batch 1, mostly what each call and its team of threads costs (the
// convolutions on a 1x1 image: 6-9 us each for under 0.2 us of
// arithmetic). Here: one parallel region; each intra-op thread sums its
// contiguous range of pixels (as the convolutions before and after split
// the tensor, so each core reads what it wrote), the threads meet once,
// each computes the gates of the samples it holds (a few thousand
// multiply-adds) and scales its pixels.
#pragma once

#include <cstdint>

namespace fx::onednn {

struct SqueezeExcite {
  enum class Activation { kNone, kRelu, kSilu };
  enum class Gate { kSigmoid, kHardsigmoid };
  int64_t batch = 0, pixels = 0;        // N, H * W
  int64_t channels = 0, squeezed = 0;   // C, S
  const float* input = nullptr;         // [N, H, W, C]
  const float* w1 = nullptr;            // [S, C]
  const float* b1 = nullptr;            // [S], or none
  const float* w2_t = nullptr;          // [S, C]: W2 transposed
  const float* b2 = nullptr;            // [C], or none
  float* output = nullptr;              // [N, H, W, C]
  Activation activation = Activation::kRelu;
  Gate gate = Gate::kSigmoid;
};

// Runs on the calling thread's intra-op threads.
void run_squeeze_excite(const SqueezeExcite& op);

}  // namespace fx::onednn
