// Internal to //lowering:onednn_ops: channels-last tensors copied into the
// channels of a wider one, for fx_onednn::concat_buffer and concat_write_
// (lowering/onednn_image.cc), on which a chain of concatenations that each
// extend the last (DenseNet's blocks: every layer reads the concatenation
// of all the block's outputs so far) writes each output once into one
// buffer, rather than copying every output again into every later
// concatenation (DenseNet-121: 62 concatenations, 10% of its time).
#pragma once

#include <cstdint>
#include <vector>

namespace fx::onednn {

struct ChannelCopies {
  struct Piece {
    const float* input = nullptr;  // [pixels, channels], dense
    int64_t channels = 0;
    int64_t offset = 0;  // its first channel in the output
  };
  int64_t pixels = 0;             // N * H * W
  float* output = nullptr;        // [pixels, output_pitch]
  int64_t output_pitch = 0;       // the output's channels
  std::vector<Piece> pieces;
};

// Runs on the calling thread's intra-op threads, each a contiguous range
// of pixels (as the convolutions around split them).
void copy_channels(const ChannelCopies& op);

}  // namespace fx::onednn
