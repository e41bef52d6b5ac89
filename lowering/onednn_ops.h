// Operators that run convolutions and linear layers through oneDNN (the
// library libtorch itself links), registered with the dispatcher in the
// namespace fx_onednn, so that a lowered graph runs wherever the dispatcher
// does: the GraphModule, the Interpreter, generated C++, TorchScript.
//
//   fx_onednn::pack_conv_weight(Tensor weight, int[] input_size,
//       int[] stride, int[] padding, int[] dilation, int groups,
//       bool bf16=False) -> Tensor
//   fx_onednn::conv(Tensor input, Tensor weight, Tensor? bias, int[] stride,
//       int[] padding, int[] dilation, int groups, Tensor? other=None,
//       str activation="none", float alpha=0., float beta=0.) -> Tensor
//   fx_onednn::conv_add_(Tensor(a!) self, Tensor input, Tensor weight,
//       Tensor? bias, int[] stride, int[] padding, int[] dilation,
//       int groups, str activation="none", float alpha=0., float beta=0.)
//       -> Tensor(a!)
//   fx_onednn::conv_chain(Tensor input, Tensor[] weights, Tensor[] biases,
//       int[] layers, str activations, float[] params) -> Tensor
//   fx_onednn::pack_linear_weight(Tensor weight, int[] input_size,
//       bool bf16=False) -> Tensor
//   fx_onednn::linear(Tensor input, Tensor weight, Tensor? bias,
//       str activation="none", float alpha=0., float beta=0.) -> Tensor
//   fx_onednn::pack_conv_transpose_weight(Tensor weight, int[] input_size,
//       int[] stride, int[] padding, int[] output_padding, int[] dilation,
//       int groups) -> Tensor
//   fx_onednn::conv_transpose(Tensor input, Tensor weight, Tensor? bias,
//       int[] stride, int[] padding, int[] output_padding, int[] dilation,
//       int groups, str activation="none", float alpha=0., float beta=0.)
//       -> Tensor
//   fx_onednn::matmul(Tensor self, Tensor other, float scale=1.) -> Tensor
//   fx_onednn::unpack_weight(Tensor packed, str kind, int groups=1)
//       -> Tensor
//   fx_onednn::lstm(Tensor input, Tensor[] hx, Tensor[] params,
//       int num_layers, bool batch_first, bool bidirectional=False)
//       -> (Tensor, Tensor, Tensor)
//   fx_onednn::gru(Tensor input, Tensor hx, Tensor[] params,
//       int num_layers, bool batch_first, bool bidirectional=False)
//       -> (Tensor, Tensor)
//   fx_onednn::batch_norm(Tensor input, Tensor? weight, Tensor? bias,
//       Tensor running_mean, Tensor running_var, float eps,
//       str activation="none") -> Tensor
//   fx_onednn::concat_buffer(Tensor[] tensors, int channels) -> Tensor
//   fx_onednn::concat_write_(Tensor(a!) self, Tensor[] tensors, int offset)
//       -> Tensor(a!)
//   fx_onednn::squeeze_excite(Tensor input, Tensor w1, Tensor? b1,
//       Tensor w2, Tensor? b2, str activation="relu", str gate="sigmoid")
//       -> Tensor
//   fx_onednn::max_pool2d(Tensor self, int[2] kernel_size, int[2] stride,
//       int[2] padding=0, int[2] dilation=1, bool ceil_mode=False) -> Tensor
//   fx_onednn::avg_pool2d(Tensor self, int[2] kernel_size, int[2] stride,
//       int[2] padding=0, bool ceil_mode=False, bool count_include_pad=True)
//       -> Tensor
//
// A packed weight has the logical sizes of the weight it was made from
// (so shapes are inferred as usual) but holds oneDNN's preferred blocked
// layout for the given input size, behind a header that describes it;
// it lives only in the process that packed it (fx::load packs again).
// unpack_weight gives back the float32 weight a pack call was given (kind:
// conv, conv_transpose or linear; the groups it was packed with), as
// exporting a lowered graph to ONNX needs.
// Packed with bf16=True, the weight is bfloat16 and the operator computes in
// bfloat16 with float32 accumulation (AVX-512 BF16): a bfloat16 input gives
// a bfloat16 output, a float32 input is converted and its output stays
// float32.
// Activations are plain strided tensors in channels-last order (NHWC, and
// NWC / NDHWC for 1-d / 3-d), which every aten operator accepts; conv
// converts an input in another layout itself (an NCHW image into 16
// channels it reads as it is), and its output is channels-last. Each
// thread keeps a packed weight's last conv or linear call's primitive and
// reuses it while the call's arguments stay the same. `other` is added to the result before the activation
// (a residual connection: oneDNN's sum post-op), and the activation
// (oneDNN's eltwise post-op) is one of activation_names(). conv_add_ does
// the same in the residual's own memory (self = activation(self + conv)),
// for a residual nothing reads afterwards. conv_chain runs a chain of 2-d
// convolutions, each reading the one before, as conv and conv_add_ would
// one by one: per layer its packed weight, float32 bias, four ints
// (stride, padding, groups, and the value it adds into in place: -1 for
// none, i for layer i - 1's output), an activation (comma-separated) and
// its alpha and beta; at batch 1 in one parallel region, each thread the
// same rows of every layer (lowering/conv_chain.h), at other batches layer
// by layer. conv_transpose is aten's
// transposed convolution (its weight [in, out / groups, kernel...], float32
// only) on oneDNN's deconvolution. matmul is aten::matmul of two float32
// tensors of the same rank (batch sizes equal or 1, broadcast) times
// `scale`, on oneDNN's matmul, reading both through their strides
// (attention's heads, views of one projection, and a transposed key need
// no copy); its output is contiguous. lstm and gru are aten::lstm and
// aten::gru of layers in eval mode on oneDNN's LSTM and linear-before-reset
// GRU, their params per layer (and direction, forward first, where
// bidirectional) the input and hidden weights transposed ([in, gates *
// hidden], gates in oneDNN's order: a GRU's u, r, o are aten's z, r, n) and
// one bias (an LSTM's b_ih + b_hh; a GRU's [b_iz + b_hz, b_ir + b_hr, b_in,
// b_hn]); at batch 1 (hidden a multiple of 16, AVX-512) they compute their
// input projections on oneDNN's matmul and their steps on a recurrence of
// ours (lowering/recurrence.h: the recurrent weights streamed at twice the
// speed of oneDNN 2.6's RNN primitives there; a bidirectional layer's two
// directions at once, on half the threads each). batch_norm is
// aten::batch_norm in eval mode of a 4-d float32 tensor, the relu after it
// fused (activation none or relu), in one pass with a channels-last output
// (lowering/channel_affine.h).
// concat_buffer makes a channels-last [N, channels, H, W] tensor with the
// concatenation of `tensors` (4-d float32 of its N, H, W) in its first
// channels, the rest left for concat_write_, which writes the concatenation
// of `tensors` into self's channels from `offset` on: a chain of
// concatenations that each extend the last (DenseNet's blocks) written
// into one buffer, each piece once, each concatenation a view of the
// buffer's first channels (lowering/concat.h); batch_norm reads such a view
// where it is.
// squeeze_excite is torchvision's SqueezeExcitation block (MobileNetV3,
// EfficientNet) of a 4-d float32 input: input * gate(conv(act(conv(
// global_avg_pool(input), w1, b1)), w2, b2)), w1 and w2 1x1 convolution
// weights ([S, C, 1, 1], [C, S, 1, 1]), act none, relu or silu, gate sigmoid
// or hardsigmoid, in one call with a channels-last output
// (lowering/squeeze_excite.h). max_pool2d and avg_pool2d give
// aten's results (ceil_mode and count_include_pad included) with a
// channels-last output.
//
// NaN: oneDNN's max pooling and its relu and clip post-ops return the other
// operand of a comparison with NaN (relu(NaN) = 0), where aten returns NaN;
// a NaN in an input may give a finite output (as under TorchScript's
// optimize_for_inference, which runs the same library).
//
//   before:
//       %conv2d = call_function[target=aten::conv2d](args = (%x, %w, %b, [1, 1], [1, 1]))
//       %add = call_function[target=aten::add.Tensor](args = (%conv2d, %y))
//       %relu = call_function[target=aten::relu](args = (%add,))
//   after (the pack made once, by an init step):
//       %packed = get_attr[target=_folded.pack_conv_weight]
//       %conv = call_function[target=fx_onednn::conv](args = (%x, %packed, %b, [1, 1], [1, 1], [1, 1], 1, %y, relu, 0.0, 0.0))
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fx::onednn {

// The strides of a dense channels-last tensor of 3 to 5 dimensions, the
// layout the operators compute in: c10's (get_channels_last_strides_2d,
// _3d), [N, C, W] as [N, C, 1, W].
std::vector<int64_t> channels_last_strides(const std::vector<int64_t>& sizes);

// The activations conv and linear fuse, by the name their `activation`
// argument takes: none, relu (alpha: negative slope), clip (alpha..beta:
// relu6, hardtanh, clamp), hardswish, hardsigmoid, silu, sigmoid, tanh,
// gelu (erf), gelu_tanh.
const std::vector<std::string>& activation_names();

// The oneDNN kernel (its implementation name, e.g. "brgconv:avx512_core")
// that ran this thread's last conv, conv_add_ or linear; "" before any. A
// name starting with "ref" is oneDNN's reference kernel, orders of magnitude
// slower: the operators avoid it for weights packed at another thread count
// by reordering them for the call.
std::string last_kernel();

// Whether this CPU runs bfloat16 convolutions and linear layers
// (InferenceOptions::bf16): oneDNN 2.6 has them for AVX-512 (avx512_core:
// F, BW, VL, DQ) and newer only, none for AVX2.
bool bf16_supported();

// Winograd convolutions. A float32 3x3 convolution of stride 1, dilation
// 1, one group, no activation or relu, whose output is 14x14 or larger,
// runs on oneDNN's Winograd kernels (ResNet's, DenseNet's 3x3 layers): in
// 0.45-0.8x the time of the direct ones here, within 3e-6 of them
// (relative to the output's largest magnitude; an Inf in the input spreads
// over its tile as NaN where the direct kernels give Inf). Their weights
// are made from the packed ones at the first call and kept while those
// live (dropped when another weight is reordered after they are gone, or
// by release_reordered_weights): 1.8x to 4x the weight's memory again,
// once per Winograd layout oneDNN picks (F(2x2) or F(4x4), by input size). Off, every convolution runs direct (for the
// memory, or the direct kernels' results); on unless set.
void set_winograd_convolutions(bool enabled);
bool winograd_convolutions();

// Gives back the weights the operators reordered for a kernel and keep
// (Winograd convolutions', LSTMs' and GRUs'; made again at their next
// call): after turning Winograd off, or destroying a model.
void release_reordered_weights();

// Activation memory. The operators take their outputs of 64 KiB or more
// from the blocks such tensors left when they were freed (the most recently
// freed that fits and is at most twice the size, as a rule still in
// cache), rather than from the system, as ONNX Runtime's arena does: glibc
// maps a block over 32 MiB afresh on every call and unmaps it when freed,
// so every call paid a page fault and the zeroing of each of its pages
// again (MobileNetV2 at batch 8: a third of its time). Freed blocks stay
// cached up to a limit (512 MiB unless set; 0: none), the ones freed
// longest ago given back to the system first to make room;
// release_activation_cache() gives back all.
// (Scratchpads are one buffer per thread, kept.)
struct ActivationCacheStats {
  int64_t cached_bytes = 0;  // free blocks held now
  int64_t limit_bytes = 0;
  int64_t reused = 0;        // allocations served from the cache
  int64_t allocated = 0;     // ... and from the system
};
ActivationCacheStats activation_cache_stats();
void set_activation_cache_limit(int64_t bytes);
void release_activation_cache();

// Makes sure the operators are registered (the library registers them when
// it is loaded; calling this keeps a linker from dropping it).
void register_operators();

}  // namespace fx::onednn
