// Internal to //lowering:onednn_ops: elementwise passes over quint8
// activations (channels-last), for the int8 operators oneDNN 2.6 has no
// fast primitive for.
//
// A table lookup applies any activation between two quantizations at the
// cost of a copy: out[i] = table[in[i]], 64 bytes per two byte
// permutations where the CPU has AVX-512 VBMI. (oneDNN's swish post-op on
// its int8 convolutions took more than the convolutions themselves on
// EfficientNet-B0: 6.0 against 3.8 ms over its 72 layers, batch 1.)
//
// A per-channel product (squeeze-and-excitation's gate times its input):
// out = zo + round((x - zx) * (g[c] - zg) * multiplier), clamped to 0..255,
// on AVX-512 where the CPU has it; and the per-channel sums of an image
// (global average pooling).
#pragma once

#include <cstdint>
#include <utility>

namespace fx::onednn {

// out[i] = table[in[i]] for i < count (in and out may be the same), on the
// intra-op threads when large.
void lookup_u8(const uint8_t* in, uint8_t* out, int64_t count,
               const uint8_t table[256]);

// For each of `rows` rows of `channels` bytes (a channels-last image's
// pixels; row r's gate is gate[(r / rows_per_gate) * channels + c]):
// out = clamp(zero_point + nearbyint(float((x - x_zero_point) * gate) *
// multiplier), 0, 255), the gate already less its zero point.
struct ChannelProduct {
  const uint8_t* in;
  uint8_t* out;
  const int32_t* gate;  // [rows / rows_per_gate, channels]
  int64_t rows, rows_per_gate, channels;
  int32_t x_zero_point, zero_point;
  float multiplier;
};
void multiply_channels_u8(const ChannelProduct& p);

// sums[i * channels + c] = the sum over image i's `pixels` rows of channel
// c (channels-last bytes; at most 2^23 pixels, so that the sums fit).
struct ChannelSum {
  const uint8_t* in;
  int32_t* sums;  // [images, channels]
  int64_t images, pixels, channels;
};
void sum_channels_u8(const ChannelSum& p);

// The least and greatest of x[0 .. count) (count > 0); NaN if any is NaN.
std::pair<float, float> min_max(const float* x, int64_t count);

// out[i] = clamp(nearbyint(x[i] * inverse_scale) + zero_point, 0, 255):
// an activation quantized per call (dynamic quantization).
void quantize_u8(const float* x, uint8_t* out, int64_t count,
                 float inverse_scale, int32_t zero_point);

}  // namespace fx::onednn
