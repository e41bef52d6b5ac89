// Internal to //lowering:onednn_ops: y = activation(x * scale[c] + shift[c])
// over a channels-last float32 tensor, one pass, for fx_onednn::batch_norm
// (lowering/onednn_image.cc) in eval mode.
//
// Each intra-op thread takes one contiguous range of pixels (all their
// channels), as aten's channels-last kernels and oneDNN's convolutions
// split such a tensor, so the convolution after it reads on each core what
// that core wrote. oneDNN 2.6's batch normalization splits the channels
// instead: the convolutions after it then read half of their input from
// the other core's cache, and DenseNet-121's took 5-8% longer (batch 1 and
// 8) than after aten's batch norm, more than the batch norm itself saved.
#pragma once

#include <cstdint>

namespace fx::onednn {

struct ChannelAffine {
  int64_t pixels = 0, channels = 0;  // N * H * W, C
  // The input's pixels are `input_pitch` floats apart (>= channels: the
  // first channels of a wider tensor, as concat_buffer's views are).
  int64_t input_pitch = 0;
  const float* input = nullptr;      // [pixels, input_pitch]
  const float* scale = nullptr;      // [channels]
  const float* shift = nullptr;      // [channels]
  float* output = nullptr;           // [pixels, channels]
  bool relu = false;                 // max(y, 0); NaN stays NaN
};

// Runs on the calling thread's intra-op threads.
void channel_affine(const ChannelAffine& op);

}  // namespace fx::onednn
