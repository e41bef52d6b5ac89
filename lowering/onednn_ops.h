// Operators that run convolutions and linear layers through oneDNN (the
// library libtorch itself links), registered with the dispatcher in the
// namespace fx_onednn, so that a lowered graph runs wherever the dispatcher
// does: the GraphModule, the Interpreter, generated C++, TorchScript.
//
// Each operator (its schema, its price, what it does) is declared once, in
// lowering/operators.def; lowering/operators.h gives the table and typed
// readers of the calls.
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
// reuses it while the call's arguments stay the same.
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

#include <ATen/core/ivalue.h>

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

// Whether this CPU has oneDNN's int8 kernels with VNNI (avx512_core_vnni,
// avx2_vnni and newer), which fx_onednn::qconv needs: without VNNI their
// u8 x s8 products saturate in 16 bits, so int8 graphs stay on LibTorch's
// quantized engine there.
bool int8_supported();

// The activations fx_onednn::qconv fuses: activation_names() but clip.
// none and relu apply to the sums scaled to the output's quantization;
// the others to the real values (sums times input and weight scales, plus
// the residual), their result then quantized.
const std::vector<std::string>& qconv_activations();

// LibTorch's packed int8 2-d convolution weights (quantized::conv2d_prepack's
// script object), unpacked.
struct Int8ConvWeights {
  at::Tensor weight;  // qint8 [out, in / groups, kh, kw]
  c10::optional<at::Tensor> bias;
  std::vector<int64_t> stride, padding, dilation;
  int64_t groups = 1;
  std::vector<float> scales;  // the weight's, per output channel
};
// `packed` unpacked, where fx_onednn::qconv computes what it does: 2-d, not
// transposed, qint8 weights symmetric per tensor or per output channel with
// positive scales. Otherwise throws c10::Error saying why, `op` first.
// (fx_onednn::pack_qconv_weight reads its weights so; lower_onednn_int8
// lowers only the convolutions whose weights it accepts.)
Int8ConvWeights unpack_int8_conv(const char* op, const c10::IValue& packed);

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
