// The options of the inference lowering (fx::optimize_for_inference,
// lowering/optimize_for_inference.h) and what it reports. Which passes its
// pipeline holds follows from the options (lowering/lower_onednn.h lists
// the lowering's); the passes read the rest.
#pragma once

#include <cstdint>
#include <string>

namespace fx {

struct InferenceOptions {
  // Fold batch norms, drop dropouts and fold constants first.
  bool fold = true;
  // Split PyTorch's fused transformer ops (aten::_transformer_encoder_layer_fwd,
  // aten::_native_multi_head_attention: what nn.TransformerEncoderLayer and
  // nn.MultiheadAttention run in eval mode) into their parts first
  // (passes/decompose.h), so that their linear layers are lowered.
  bool split_attention = true;
  // Lower convolutions and linear layers to oneDNN.
  bool lower_convolutions = true;
  bool lower_linear = true;
  // Products of two activations of rank 3 or more (attention's q @ k^T
  // and weights @ v, matmul or bmm) on oneDNN's matmul, read through their
  // strides, a scale after them fused (in float32, with bf16 too).
  bool lower_matmul = true;
  // aten::lstm and aten::gru (nn.LSTM, nn.GRU, torch::nn::LSTM / GRU:
  // unidirectional, with biases, no projections, float32, eval mode) on
  // oneDNN's LSTM and linear-before-reset GRU primitives.
  bool lower_recurrent = true;
  // Int8 graphs (fx::convert_fx's): their 2-d convolutions on oneDNN's
  // int8 kernels (fx_onednn::qconv), a quantized add after one fused as
  // its residual, where the CPU has VNNI (onednn::int8_supported()).
  bool lower_int8 = true;
  // Run max and average pooling between lowered convolutions on oneDNN.
  bool lower_pooling = true;
  // Run the batch norms there that no convolution before them absorbs
  // (DenseNet's), the relu after one fused, on oneDNN (float32).
  bool lower_batch_norm = true;
  // Run squeeze-and-excitation blocks (global average pooling, two 1x1
  // convolutions, relu or silu between, sigmoid or hardsigmoid after, the
  // product with the input: MobileNetV3's, EfficientNet's) as one call
  // (fx_onednn::squeeze_excite, float32).
  bool lower_squeeze_excite = true;
  // Write chains of concatenations along the channels that each extend
  // the last (DenseNet's blocks) into one buffer, each piece once
  // (fx_onednn::concat_buffer / concat_write_), each concatenation a view
  // of its first channels, rather than copying every piece again into each.
  bool concat_buffers = true;
  // Add a residual into its own memory where nothing reads it afterwards
  // (fx_onednn::conv_add_) rather than into a copy.
  bool in_place = true;
  // Traced at a batch above 1 (not a dynamic one), run the leading
  // per-sample layers whose activations outgrow the caches one micro-batch
  // at a time (lowering/micro_batch.h).
  bool micro_batch = true;
  // At batch 1, run each chain of three or more lowered convolutions, each
  // reading the one before, as one call whose threads each take the same
  // rows of every layer (fx_onednn::conv_chain, lowering/conv_chain.h).
  bool chain_convolutions = true;
  // Whether lowering a convolution pays (linear layers always do: oneDNN's
  // matmul against the system BLAS):
  //   kCostModel  by the bytes it moves: lowering saves aten's per-call
  //               weight reorder and a pass over the output per fused
  //               operator, and costs a pass per layout conversion, which
  //               only a convolution with no lowered neighbour needs;
  //   kMeasure    by timing both on random inputs of its traced sizes, as
  //               torch.fx's autotuner does (opt-in: its choices depend on
  //               the machine and its load, so the graph may differ from
  //               run to run);
  //   kAll        every convolution that can be.
  enum class Decision { kCostModel, kMeasure, kAll };
  Decision decision = Decision::kCostModel;
  int measure_rounds = 5;  // kMeasure: timed runs per way, medians compared
  // Opt-in: weights and 4-d activations in bfloat16 between lowered
  // convolutions (oneDNN accumulates in float32; AVX-512 BF16), converted
  // back to float32 where a chain ends; linear layers' weights in bfloat16,
  // their float32 inputs converted for the call and outputs float32
  // (transformers: attention's matmuls, layer norms and softmax stay
  // float32). Faster on compute-bound models, and
  // not held to float32's accuracy (see tools/benchmark_inference).
  bool bf16 = false;
};

// What optimize_for_inference did.
struct InferenceReport {
  int attention = 0;          // fused transformer ops split into their parts
  int convolutions = 0;       // lowered to fx_onednn::conv
  int linear = 0;             // lowered to fx_onednn::linear
  int matmul = 0;             // lowered to fx_onednn::matmul
  int recurrent = 0;          // lowered to fx_onednn::lstm / gru
  int int8_convolutions = 0;  // int8 ones lowered to fx_onednn::qconv
  int int8_elementwise = 0;   // int8 activations, per-channel products
  int int8_linear = 0;        // dynamic int8 linear layers on oneDNN
  int fused_activations = 0;  // activations absorbed as post-ops
  int fused_sums = 0;         // residual adds absorbed as sum post-ops
  int in_place_sums = 0;      // ... of them, added into the residual's memory
  int layout_conversions = 0; // aten::contiguous nodes added
  int pooling = 0;            // lowered to fx_onednn::max_pool2d / avg_pool2d
  int batch_norms = 0;        // lowered to fx_onednn::batch_norm
  int squeeze_excites = 0;    // lowered to fx_onednn::squeeze_excite
  int concatenations = 0;     // aten::cat made views of a concat buffer
  int concat_buffers = 0;     // ... of this many buffers
  int declined = 0;           // convolutions left to aten: lowering did not pay
  int micro_batched = 0;      // nodes run per micro-batch
  int64_t micro_batches = 0;  // ... in this many micro-batches
  int conv_chains = 0;        // fx_onednn::conv_chain calls made
  int chained = 0;            // ... of this many convolutions
  std::string to_string() const;
};

// InferenceReport's counts, each with its name (the statistic of that name,
// Pass::statistics) and the pass of the pipeline that counts it (others
// may add to it: lower_onednn_linear fuses activations too, and
// lower_onednn_squeeze_excite takes back the convolutions, activations and
// pooling a block absorbs).
#define FX_INFERENCE_COUNTS(X)                         \
  X(attention, "decompose_attention")                  \
  X(convolutions, "lower_onednn_convolutions")         \
  X(linear, "lower_onednn_linear")                     \
  X(matmul, "lower_onednn_matmul")                     \
  X(recurrent, "lower_onednn_recurrent")               \
  X(int8_convolutions, "lower_onednn_int8")            \
  X(int8_elementwise, "lower_onednn_int8")             \
  X(int8_linear, "lower_onednn_int8")                  \
  X(fused_activations, "lower_onednn_convolutions")    \
  X(fused_sums, "lower_onednn_convolutions")           \
  X(in_place_sums, "lower_onednn_convolutions")        \
  X(layout_conversions, "onednn_channels_last")        \
  X(pooling, "lower_onednn_pooling")                   \
  X(batch_norms, "lower_onednn_batch_norm")            \
  X(squeeze_excites, "lower_onednn_squeeze_excite")    \
  X(concatenations, "onednn_concat_buffers")           \
  X(concat_buffers, "onednn_concat_buffers")           \
  X(declined, "lower_onednn_convolutions")             \
  X(micro_batched, "micro_batch")                      \
  X(micro_batches, "micro_batch")                      \
  X(conv_chains, "chain_convolutions")                 \
  X(chained, "chain_convolutions")

}  // namespace fx
