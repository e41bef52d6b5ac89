// Internal to //lowering:onednn_ops: a 3-channel image (RGB: the input of
// every vision model's first convolution) copied from NCHW to channels-last
// order on AVX-512, for fx_onednn::conv's own layout conversion.
//
// aten's copy into a channels-last tensor reads such an image at a stride
// of 3 floats: 25 us for one 224x224 image alone, 56-73 us as the first
// node of MobileNetV2 / EfficientNet-B0 (2-3% of their time at batch 1).
// Here each thread interleaves 16 pixels of the three planes into three
// vectors at a time, a contiguous range of pixels each.
#pragma once

#include <cstdint>

namespace fx::onednn {

// Whether rgb_to_channels_last runs on this CPU (AVX-512F).
bool rgb_to_channels_last_runs();

// out[n, p, c] = in[n, c, p] for c < 3, p < pixels, on the intra-op
// threads.
void rgb_to_channels_last(const float* in, float* out, int64_t batch,
                          int64_t pixels);

}  // namespace fx::onednn
