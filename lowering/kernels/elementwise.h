// Internal to //lowering:onednn_ops: activations applied in place after a
// oneDNN primitive, where a pass of our own is faster than oneDNN 2.6's
// post-op.
//
// SiLU: oneDNN's swish post-op (its eltwise injector, applied to the
// accumulators before they are stored) cost more than the convolution
// itself on EfficientNet-B0's layers (a 16 -> 96 1x1 convolution at
// 112x112, 2 threads: 85 us with no post-op, 224 us with swish); the same
// convolution with no post-op and then this pass over its output: 170 us
// (a 3x3 depthwise one at 56x56x144: 97 -> 73 us).
//
//   %y = fx_onednn::conv(%x, %w, %b, ..., activation="silu")
// runs as the primitive with no activation, then silu_in_place(y).
#pragma once

#include <cstdint>

namespace fx::onednn {

// Whether silu_in_place runs vectorized on this CPU (AVX-512F); elsewhere
// oneDNN's post-op is kept.
bool silu_pass_runs();

// data[i] = data[i] * sigmoid(data[i]) for i < count, on the intra-op
// threads, each a contiguous range. NaN stays NaN.
void silu_in_place(float* data, int64_t count);

}  // namespace fx::onednn
