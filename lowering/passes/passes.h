// The oneDNN lowering's passes, one per rewrite, each made from the
// InferenceOptions it reads. lowering/lower_onednn.cc registers them, in
// the order they run, with their names, options and the switch of
// InferenceOptions that holds each in the pipeline; the comment at the top
// of each file says what it rewrites. Internal to //lowering.
#pragma once

#include <memory>

#include "lowering/inference_options.h"
#include "passes/pass.h"

namespace fx {
namespace lowering {

// lower_int8.cc: int8 convolutions.
std::unique_ptr<Pass> make_lower_int8(const InferenceOptions& options);
// lower_convolutions.cc: convolutions and transposed ones.
std::unique_ptr<Pass> make_lower_convolutions(const InferenceOptions& options);
// lower_linear.cc: linear layers, and products of two activations.
std::unique_ptr<Pass> make_lower_linear(const InferenceOptions& options);
std::unique_ptr<Pass> make_lower_matmul(const InferenceOptions& options);
// lower_recurrent.cc: LSTM and GRU layers.
std::unique_ptr<Pass> make_lower_recurrent(const InferenceOptions& options);
// lower_pooling.cc: pooling and batch norms of the channels-last chains.
std::unique_ptr<Pass> make_lower_pooling(const InferenceOptions& options);
std::unique_ptr<Pass> make_lower_batch_norm(const InferenceOptions& options);
// lower_squeeze_excite.cc: squeeze-and-excitation blocks as one call.
std::unique_ptr<Pass> make_lower_squeeze_excite(
    const InferenceOptions& options);
// channels_last.cc: layout conversions where chains start and end.
std::unique_ptr<Pass> make_channels_last(const InferenceOptions& options);
// concat_buffers.cc: channel concatenation chains into one buffer.
std::unique_ptr<Pass> make_concat_buffers(const InferenceOptions& options);
// fold_weights.cc: the weights' packing folded into an init step.
std::unique_ptr<Pass> make_fold_weights(const InferenceOptions& options);

}  // namespace lowering
}  // namespace fx
