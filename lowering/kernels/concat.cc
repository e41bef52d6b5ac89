#include "lowering/kernels/concat.h"

#include <ATen/Parallel.h>

#include <algorithm>

#include "lowering/kernels/kernel_support.h"

namespace fx::onednn {
namespace {

using Piece = ChannelCopies::Piece;

void copy_pixels(const ChannelCopies& op, const Piece& piece, int64_t first,
                 int64_t last) {
  for (int64_t p = first; p < last; ++p) {
    const float* in = piece.input + p * piece.channels;
    std::copy(in, in + piece.channels,
              op.output + p * op.output_pitch + piece.offset);
  }
}

// 16 channels at a time, the last ones masked.
FX_AVX512 void copy_pixels_avx512(const ChannelCopies& op, const Piece& piece,
                                  int64_t first, int64_t last) {
  const int64_t channels = piece.channels;
  for (int64_t p = first; p < last; ++p) {
    const float* in = piece.input + p * channels;
    float* out = op.output + p * op.output_pitch + piece.offset;
    int64_t c = 0;
    for (; c + 16 <= channels; c += 16) {
      _mm512_storeu_ps(out + c, _mm512_loadu_ps(in + c));
    }
    if (c < channels) {
      const __mmask16 m = tail_mask(channels - c);
      _mm512_mask_storeu_ps(out + c, m, _mm512_maskz_loadu_ps(m, in + c));
    }
  }
}

// Thread `thread` of `threads`' pixels, piece after piece.
void run_slice(const ChannelCopies& op, int thread, int threads) {
  const auto [first, last] = thread_share(op.pixels, thread, threads);
  for (const Piece& piece : op.pieces) {
    (has_avx512() ? copy_pixels_avx512 : copy_pixels)(op, piece, first, last);
  }
}

}  // namespace

void copy_channels(const ChannelCopies& op) {
  int64_t values = 0;
  for (const Piece& piece : op.pieces) values += piece.channels * op.pixels;
  // Small copies on the calling thread alone: waking the team costs more.
  run_on_threads(values < (1 << 14) ? 1 : at::get_num_threads(),
                 [&](int thread, int threads) {
                   run_slice(op, thread, threads);
                 });
}

}  // namespace fx::onednn
