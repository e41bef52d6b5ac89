// Image operators beside the convolutions: batch normalization,
// concatenation into one buffer, squeeze-and-excitation, pooling.
// Registered here with the dispatcher (their schemas: onednn_ops.cc).
#include "lowering/onednn_ops.h"

#include <torch/library.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <absl/container/flat_hash_map.h>

#include <atomic>
#include <cmath>
#include <functional>
#include <memory>
#include <mutex>
#include <type_traits>
#include <unordered_map>
#include <oneapi/dnnl/dnnl.hpp>

#include "lowering/kernels/channel_affine.h"
#include "lowering/kernels/concat.h"
#include "lowering/onednn_support.h"
#include "lowering/kernels/squeeze_excite.h"

namespace fx::onednn {
namespace {

using namespace internal;  // NOLINT: the operators' shared layer

// --- Batch normalization (inference) ------------------------------------------
// aten::batch_norm in eval mode (the running statistics) of a channels-last
// 4-d activation, the relu after it fused, in one pass (channel_affine):
// the batch norms no convolution before them absorbs (DenseNet's, before
// each layer's convolutions, on the concatenation of the block so far).
// Its output comes from the activation cache: aten's, from the system, took
// twice the time at batch 8 for mapping fresh pages.

// A statistic or affine parameter: `channels` float32 values.
at::Tensor channel_values(const char* op, const at::Tensor& t,
                          const char* what, int64_t channels) {
  TORCH_CHECK(t.device().is_cpu() && t.scalar_type() == at::kFloat &&
                  t.numel() == channels,
              op, ": ", what, " must be a float32 CPU tensor of ", channels,
              " values (one per channel), got ", t.toString(), " of sizes ",
              t.sizes());
  return t.contiguous();
}

// ... or undefined for none.
at::Tensor optional_channel_values(const char* op,
                                   const c10::optional<at::Tensor>& t,
                                   const char* what, int64_t channels) {
  if (!t.has_value() || !t->defined()) return at::Tensor();
  return channel_values(op, *t, what, channels);
}

// Checks that `input` is what batch_norm and squeeze_excite take: a 4-d
// float32 CPU tensor.
void check_image(const char* op, const at::Tensor& input) {
  TORCH_CHECK(input.device().is_cpu() && input.scalar_type() == at::kFloat &&
                  input.dim() == 4,
              op, ": the input must be a 4-d float32 CPU tensor, got ",
              input.toString(), " of sizes ", input.sizes());
}

// Their output's shape: the input's, channels-last.
at::Tensor image_meta(const char* op, const at::Tensor& input) {
  TORCH_CHECK(input.dim() == 4, op, ": the input must be 4-d, got sizes ",
              input.sizes());
  return at::empty(input.sizes(), input.options())
      .contiguous(at::MemoryFormat::ChannelsLast);
}

at::Tensor batch_norm(const at::Tensor& input,
                      const c10::optional<at::Tensor>& weight,
                      const c10::optional<at::Tensor>& bias,
                      const at::Tensor& running_mean,
                      const at::Tensor& running_var, double eps,
                      c10::string_view activation) {
  const char* op = "fx_onednn::batch_norm";
  check_image(op, input);
  TORCH_CHECK(activation == "none" || activation == "relu", op,
              ": the activation must be none or relu, got '",
              std::string(activation), "'");
  TORCH_CHECK(eps >= 0, op, ": eps must not be negative, got ", eps);
  const int64_t channels = input.size(1);
  const at::Tensor mean =
      channel_values(op, running_mean, "running_mean", channels);
  const at::Tensor var = channel_values(op, running_var, "running_var", channels);
  const at::Tensor w = optional_channel_values(op, weight, "weight", channels);
  const at::Tensor b = optional_channel_values(op, bias, "bias", channels);
  const bool has_weight = w.defined(), has_bias = b.defined();
  // y = x * scale + shift: scale = weight / sqrt(var + eps), shift =
  // bias - mean * scale, aten's formula (the scale computed in double), in
  // one loop over the channels (a dozen aten calls on these small tensors
  // cost more than the pass over a small activation).
  const float* m = mean.data_ptr<float>();
  const float* v = var.data_ptr<float>();
  std::vector<float> scale(channels), shift(channels);
  for (int64_t c = 0; c < channels; ++c) {
    double s = 1.0 / std::sqrt(static_cast<double>(v[c]) + eps);
    if (has_weight) s *= w.data_ptr<float>()[c];
    scale[c] = static_cast<float>(s);
    shift[c] = static_cast<float>(
        (has_bias ? b.data_ptr<float>()[c] : 0.0) - m[c] * s);
  }
  at::Tensor dst = empty_channels_last(input.sizes(), input.options());
  if (dst.numel() == 0) return dst;
  // The first channels of a wider tensor (a concat_buffer's view) are read
  // where they are.
  const int64_t pitch = channels_last_pitch(input);
  const at::Tensor src = pitch > 0 ? input : to_channels_last(input);
  ChannelAffine affine;
  affine.pixels = src.numel() / channels;
  affine.channels = channels;
  affine.input_pitch = pitch > 0 ? pitch : channels;
  affine.input = src.data_ptr<float>();
  affine.scale = scale.data();
  affine.shift = shift.data();
  affine.output = dst.data_ptr<float>();
  affine.relu = activation == "relu";
  channel_affine(affine);
  return dst;
}

at::Tensor batch_norm_meta(const at::Tensor& input,
                           const c10::optional<at::Tensor>&,
                           const c10::optional<at::Tensor>&, const at::Tensor&,
                           const at::Tensor&, double, c10::string_view) {
  return image_meta("fx_onednn::batch_norm", input);
}

// --- Concatenation into one buffer -----------------------------------------
// A chain of concatenations along the channels, each extending the last
// (DenseNet's blocks), on one channels-last buffer (lowering/kernels/concat.h):
// concat_buffer makes it with the first pieces in its first channels,
// concat_write_ writes each later piece once, and each concatenation is a
// view of the buffer's first channels (aten::slice), which later writes
// leave as they are.

// The pieces of a concatenation into `buffer` from channel `offset` on,
// checked to fit.
ChannelCopies channel_copies(const char* op, const at::Tensor& buffer,
                             at::TensorList tensors, int64_t offset,
                             std::vector<at::Tensor>* keep) {
  TORCH_CHECK(!tensors.empty(), op, ": no tensors to concatenate");
  ChannelCopies copies;
  copies.pixels = buffer.size(0) * buffer.size(2) * buffer.size(3);
  copies.output = buffer.data_ptr<float>();
  copies.output_pitch = buffer.size(1);
  int64_t channel = offset;
  for (const at::Tensor& t : tensors) {
    TORCH_CHECK(t.device().is_cpu() && t.scalar_type() == at::kFloat &&
                    t.dim() == 4 && t.size(0) == buffer.size(0) &&
                    t.size(2) == buffer.size(2) && t.size(3) == buffer.size(3),
                op, ": every tensor must be a 4-d float32 CPU tensor of ",
                buffer.size(0), " x C x ", buffer.size(2), " x ",
                buffer.size(3), ", got ", t.toString(), " of sizes ",
                t.sizes());
    keep->push_back(to_channels_last(t));
    copies.pieces.push_back({keep->back().data_ptr<float>(), t.size(1),
                             channel});
    channel += t.size(1);
  }
  TORCH_CHECK(offset >= 0 && channel <= buffer.size(1), op,
              ": channels ", offset, " to ", channel,
              " do not fit in a buffer of ", buffer.size(1), " channels");
  return copies;
}

at::Tensor concat_buffer(at::TensorList tensors, int64_t channels) {
  const char* op = "fx_onednn::concat_buffer";
  TORCH_CHECK(!tensors.empty() && tensors[0].dim() == 4, op,
              ": the first tensor must be 4-d");
  const at::Tensor& first = tensors[0];
  TORCH_CHECK(channels >= 0, op, ": channels must not be negative, got ",
              channels);
  at::Tensor buffer = empty_channels_last(
      {first.size(0), channels, first.size(2), first.size(3)},
      first.options());
  std::vector<at::Tensor> keep;
  const ChannelCopies copies = channel_copies(op, buffer, tensors, 0, &keep);
  if (buffer.numel() > 0) copy_channels(copies);
  return buffer;
}

at::Tensor& concat_write_(at::Tensor& self, at::TensorList tensors,
                          int64_t offset) {
  const char* op = "fx_onednn::concat_write_";
  TORCH_CHECK(self.device().is_cpu() && self.scalar_type() == at::kFloat &&
                  self.dim() == 4 && is_channels_last_dense(self),
              op, ": self must be a 4-d float32 channels-last CPU tensor "
              "(a concat_buffer), got ", self.toString(), " of sizes ",
              self.sizes(), " and strides ", self.strides());
  std::vector<at::Tensor> keep;
  const ChannelCopies copies =
      channel_copies(op, self, tensors, offset, &keep);
  if (self.numel() > 0) copy_channels(copies);
  return self;
}

at::Tensor concat_buffer_meta(at::TensorList tensors, int64_t channels) {
  TORCH_CHECK(!tensors.empty() && tensors[0].dim() == 4,
              "fx_onednn::concat_buffer: the first tensor must be 4-d");
  const at::Tensor& first = tensors[0];
  return at::empty({first.size(0), channels, first.size(2), first.size(3)},
                   first.options())
      .contiguous(at::MemoryFormat::ChannelsLast);
}

at::Tensor& concat_write_meta(at::Tensor& self, at::TensorList, int64_t) {
  return self;
}

// --- Squeeze-and-excitation ----------------------------------------------------
// torchvision's SqueezeExcitation block (MobileNetV3, EfficientNet) in one
// call (lowering/kernels/squeeze_excite.h): input * gate(conv(act(conv(
// global_avg_pool(input), w1, b1)), w2, b2)), the convolutions 1x1 on the
// pooled 1x1 image. W2 is read transposed, made once per weight
// (ReorderedWeights).

// A 1x1 convolution's weight [out, in, 1, 1] (or [out, in]) as a float32
// CPU matrix of `out` x `in`.
at::Tensor squeeze_weight(const char* op, const at::Tensor& w, const char* what,
                          int64_t out, int64_t in) {
  bool one_by_one = w.dim() == 2 || w.dim() == 4;
  for (int64_t d = 2; d < w.dim(); ++d) one_by_one &= w.size(d) == 1;
  TORCH_CHECK(w.device().is_cpu() && w.scalar_type() == at::kFloat &&
                  one_by_one && w.size(0) == out && w.size(1) == in,
              op, ": ", what, " must be a float32 CPU 1x1 convolution weight of ",
              out, " x ", in, " (sizes [", out, ", ", in, ", 1, 1]), got ",
              w.toString(), " of sizes ", w.sizes());
  return w.reshape({out, in}).contiguous();
}

at::Tensor squeeze_excite(const at::Tensor& input, const at::Tensor& w1,
                          const c10::optional<at::Tensor>& b1,
                          const at::Tensor& w2,
                          const c10::optional<at::Tensor>& b2,
                          c10::string_view activation,
                          c10::string_view gate) {
  const char* op = "fx_onednn::squeeze_excite";
  check_image(op, input);
  using Kernel = SqueezeExcite;
  Kernel kernel;
  if (activation == "none") {
    kernel.activation = Kernel::Activation::kNone;
  } else if (activation == "relu") {
    kernel.activation = Kernel::Activation::kRelu;
  } else if (activation == "silu") {
    kernel.activation = Kernel::Activation::kSilu;
  } else {
    TORCH_CHECK(false, op, ": the activation must be none, relu or silu, got '",
                std::string(activation), "'");
  }
  if (gate == "sigmoid") {
    kernel.gate = Kernel::Gate::kSigmoid;
  } else if (gate == "hardsigmoid") {
    kernel.gate = Kernel::Gate::kHardsigmoid;
  } else {
    TORCH_CHECK(false, op, ": the gate must be sigmoid or hardsigmoid, got '",
                std::string(gate), "'");
  }
  const int64_t channels = input.size(1);
  TORCH_CHECK(w1.dim() >= 2, op, ": w1 must be a 1x1 convolution weight, got "
              "sizes ", w1.sizes());
  const int64_t squeezed = w1.size(0);
  const at::Tensor first = squeeze_weight(op, w1, "w1", squeezed, channels);
  const at::Tensor second = squeeze_weight(op, w2, "w2", channels, squeezed);
  const at::Tensor bias1 = optional_channel_values(op, b1, "b1", squeezed);
  const at::Tensor bias2 = optional_channel_values(op, b2, "b2", channels);
  at::Tensor dst = empty_channels_last(input.sizes(), input.options());
  if (dst.numel() == 0) return dst;
  const at::Tensor src = to_channels_last(input);
  at::Tensor second_t;
  const memory transposed = ReorderedWeights::instance().get(
      second, memory::desc({channels, squeezed}, DataType::f32, Tag::ab),
      memory::desc({channels, squeezed}, DataType::f32, Tag::ba), &second_t);
  kernel.batch = input.size(0);
  kernel.pixels = input.size(2) * input.size(3);
  kernel.channels = channels;
  kernel.squeezed = squeezed;
  kernel.input = src.data_ptr<float>();
  kernel.w1 = first.data_ptr<float>();
  kernel.b1 = bias1.defined() ? bias1.data_ptr<float>() : nullptr;
  kernel.w2_t = static_cast<const float*>(transposed.get_data_handle());
  kernel.b2 = bias2.defined() ? bias2.data_ptr<float>() : nullptr;
  kernel.output = dst.data_ptr<float>();
  run_squeeze_excite(kernel);
  return dst;
}

at::Tensor squeeze_excite_meta(const at::Tensor& input, const at::Tensor&,
                               const c10::optional<at::Tensor>&,
                               const at::Tensor&,
                               const c10::optional<at::Tensor>&,
                               c10::string_view, c10::string_view) {
  return image_meta("fx_onednn::squeeze_excite", input);
}

// --- Pooling (2-d, max and average) -----------------------------------------
// aten's max_pool2d and avg_pool2d, to the element, on channels-last
// activations: oneDNN's pooling reads them in place where aten's
// channels-last kernels take 2-3x as long.
struct PoolGeometry {
  std::vector<int64_t> output_size;
  memory::dims kernel, strides, dilates, padding_l, padding_r;
  // ceil_mode padded the right or bottom edge beyond `padding`.
  bool ceil_padded = false;
  // A window has no element inside the input (dilation skips over it):
  // aten's max is -inf there, oneDNN's the lowest finite float.
  bool empty_window = false;
};

// An int[2] argument as aten reads it: one value stands for both, and an
// empty stride is the kernel's size.
std::vector<int64_t> pair_of(const char* op, const char* name,
                             at::IntArrayRef values,
                             at::IntArrayRef if_empty = {}) {
  if (values.empty() && !if_empty.empty()) return if_empty.vec();
  TORCH_CHECK(values.size() == 1 || values.size() == 2, op, ": ", name,
              " needs 1 or 2 values, got ", values);
  return {values.front(), values.back()};
}

// PyTorch's pooling_output_shape.
int64_t pool_output_size(int64_t in, int64_t kernel, int64_t pad,
                         int64_t stride, int64_t dilation, bool ceil_mode) {
  const int64_t numerator = in + 2 * pad - dilation * (kernel - 1) - 1 +
                            (ceil_mode ? stride - 1 : 0);
  // Division rounding toward negative infinity.
  int64_t out = numerator / stride - (numerator % stride != 0 && numerator < 0);
  out += 1;
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

PoolGeometry pool_geometry(const char* op, at::IntArrayRef input,
                           at::IntArrayRef kernel_size,
                           at::IntArrayRef stride_size,
                           at::IntArrayRef padding_size,
                           at::IntArrayRef dilation_size, bool ceil_mode) {
  TORCH_CHECK(input.size() == 4 && input[1] > 0 && input[2] > 0 &&
                  input[3] > 0,
              op, ": the input must be 4-dimensional (N, C, H, W) with C, H "
              "and W not 0, got sizes ", input);
  const std::vector<int64_t> kernel = pair_of(op, "kernel_size", kernel_size);
  const std::vector<int64_t> stride =
      pair_of(op, "stride", stride_size, kernel);
  const std::vector<int64_t> padding = pair_of(op, "padding", padding_size);
  const std::vector<int64_t> dilation =
      pair_of(op, "dilation", dilation_size);
  PoolGeometry g;
  g.output_size = {input[0], input[1]};
  for (size_t i = 0; i < 2; ++i) {
    TORCH_CHECK(kernel[i] >= 1 && stride[i] >= 1 && dilation[i] >= 1, op,
                ": kernel_size, stride and dilation must be positive, got ",
                kernel, ", ", stride, ", ", dilation);
    TORCH_CHECK(padding[i] >= 0 && padding[i] <= kernel[i] / 2, op,
                ": padding must be at most half the kernel size, got padding ",
                padding, " for kernel_size ", kernel);
    const int64_t out = pool_output_size(input[2 + i], kernel[i], padding[i],
                                         stride[i], dilation[i], ceil_mode);
    TORCH_CHECK(out >= 1, op, ": the input's sizes ", input,
                " give an empty output for kernel_size ", kernel,
                ", stride ", stride, ", padding ", padding, " and dilation ",
                dilation);
    g.output_size.push_back(out);
    g.kernel.push_back(kernel[i]);
    g.strides.push_back(stride[i]);
    g.dilates.push_back(dilation[i] - 1);
    g.padding_l.push_back(padding[i]);
    // oneDNN counts outputs rounding down: ceil_mode's extra output is
    // padding on the right, up to the end of its last window.
    const int64_t extent = dilation[i] * (kernel[i] - 1) + 1;
    const int64_t right =
        std::max(padding[i], (out - 1) * stride[i] + extent - input[2 + i] -
                                 padding[i]);
    g.padding_r.push_back(right);
    g.ceil_padded = g.ceil_padded || right > padding[i];
    for (int64_t o = 0; o < out && dilation[i] > 1; ++o) {
      bool inside = false;
      for (int64_t k = 0; k < kernel[i] && !inside; ++k) {
        const int64_t at = o * stride[i] - padding[i] + k * dilation[i];
        inside = at >= 0 && at < input[2 + i];
      }
      g.empty_window = g.empty_window || !inside;
    }
  }
  return g;
}

struct Pool {
  dnnl::pooling_v2_forward::primitive_desc pd;
  dnnl::pooling_v2_forward primitive;
};

at::Tensor pool(const char* op, const at::Tensor& input, dnnl::algorithm kind,
                const PoolGeometry& g) {
  // A quint8 input (max pooling of an int8 graph's activations): u8, the
  // output at the input's scale and zero point.
  const bool quantized = input.is_quantized();
  DataType type = DataType::u8;
  at::Tensor dst;
  if (quantized) {
    TORCH_CHECK(kind == dnnl::algorithm::pooling_max &&
                    input.scalar_type() == at::kQUInt8 &&
                    input.qscheme() == at::kPerTensorAffine,
                op, ": a quantized input must be quint8 per tensor, and "
                "max pooled; got ", input.toString());
    dst = empty_quint8_channels_last(g.output_size, input.q_scale(),
                                     input.q_zero_point());
  } else {
    check_input(op, input);
    type = data_type_of(op, input, "input");
    dst = empty_channels_last(g.output_size, input.options());
  }
  if (dst.numel() == 0) return dst;
  std::string key;
  absl::StrAppend(&key, static_cast<int>(kind), "|", static_cast<int>(type),
                  "|");
  append_key(&key, input.sizes());
  append_key(&key, g.output_size);
  for (const memory::dims* d :
       {&g.kernel, &g.strides, &g.dilates, &g.padding_l, &g.padding_r}) {
    append_key(&key, *d);
  }
  absl::StrAppend(&key, at::get_num_threads());
  static PrimitiveCache<std::shared_ptr<const Pool>> cache;
  const auto made = cache.get(key, [&] {
    const Tag layout = Tag::nhwc;
    dnnl::pooling_v2_forward::desc desc(
        dnnl::prop_kind::forward_inference, kind,
        memory::desc(dims_of(input.sizes()), type, layout),
        memory::desc(dims_of(g.output_size), type, layout), g.strides,
        g.kernel, g.dilates, g.padding_l, g.padding_r);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    dnnl::pooling_v2_forward::primitive_desc pd(desc, attr, cpu_engine());
    return std::make_shared<const Pool>(
        Pool{pd, dnnl::pooling_v2_forward(pd)});
  });
  const at::Tensor src = quantized
                             ? input.contiguous(at::MemoryFormat::ChannelsLast)
                             : to_channels_last(input);
  dnnl::engine& engine = cpu_engine();
  std::unordered_map<int, memory> args{
      {DNNL_ARG_SRC, memory(made->pd.src_desc(), engine, src.data_ptr())},
      {DNNL_ARG_DST, memory(made->pd.dst_desc(), engine, dst.data_ptr())}};
  add_thread_scratchpad(made->pd, &args);
  made->primitive.execute(cpu_stream(), args);
  cpu_stream().wait();
  return dst;
}

at::Tensor max_pool2d(const at::Tensor& input, at::IntArrayRef kernel_size,
                      at::IntArrayRef stride, at::IntArrayRef padding,
                      at::IntArrayRef dilation, bool ceil_mode) {
  const char* op = "fx_onednn::max_pool2d";
  const PoolGeometry g = pool_geometry(op, input.sizes(), kernel_size, stride,
                                       padding, dilation, ceil_mode);
  if (g.empty_window) {
    if (input.is_quantized()) {
      return at::max_pool2d(input, kernel_size, stride, padding, dilation,
                            ceil_mode)
          .contiguous(at::MemoryFormat::ChannelsLast);
    }
    check_input(op, input);
    return to_channels_last(at::max_pool2d(input, kernel_size, stride, padding,
                                           dilation, ceil_mode));
  }
  return pool(op, input, dnnl::algorithm::pooling_max, g);
}

at::Tensor avg_pool2d(const at::Tensor& input, at::IntArrayRef kernel_size,
                      at::IntArrayRef stride, at::IntArrayRef padding,
                      bool ceil_mode, bool count_include_pad) {
  const char* op = "fx_onednn::avg_pool2d";
  const std::vector<int64_t> no_dilation = {1, 1};
  const PoolGeometry g = pool_geometry(op, input.sizes(), kernel_size, stride,
                                       padding, no_dilation, ceil_mode);
  if (count_include_pad && g.ceil_padded) {
    // aten divides a window reaching past the padding by its part inside
    // input and padding; oneDNN would divide by the whole kernel.
    check_input(op, input);
    return to_channels_last(at::avg_pool2d(input, kernel_size, stride, padding,
                                           ceil_mode, count_include_pad));
  }
  return pool(op, input,
              count_include_pad ? dnnl::algorithm::pooling_avg_include_padding
                                : dnnl::algorithm::pooling_avg_exclude_padding,
              g);
}

at::Tensor max_pool2d_meta(const at::Tensor& input, at::IntArrayRef kernel_size,
                           at::IntArrayRef stride, at::IntArrayRef padding,
                           at::IntArrayRef dilation, bool ceil_mode) {
  return empty_channels_last(
      pool_geometry("fx_onednn::max_pool2d", input.sizes(), kernel_size,
                    stride, padding, dilation, ceil_mode)
          .output_size,
      input.options());
}

at::Tensor avg_pool2d_meta(const at::Tensor& input, at::IntArrayRef kernel_size,
                           at::IntArrayRef stride, at::IntArrayRef padding,
                           bool ceil_mode, bool) {
  return empty_channels_last(
      pool_geometry("fx_onednn::avg_pool2d", input.sizes(), kernel_size,
                    stride, padding, {1, 1}, ceil_mode)
          .output_size,
      input.options());
}

}  // namespace

TORCH_LIBRARY_IMPL(fx_onednn, CPU, m) {
  m.impl("batch_norm", &batch_norm);
  m.impl("concat_buffer", &concat_buffer);
  m.impl("concat_write_", &concat_write_);
  m.impl("squeeze_excite", &squeeze_excite);
  m.impl("max_pool2d", &max_pool2d);
  m.impl("avg_pool2d", &avg_pool2d);
}

// Int8 graphs' max pooling (lower_onednn_int8).
// (avg_pool2d refuses a quantized input by name.)
TORCH_LIBRARY_IMPL(fx_onednn, QuantizedCPU, m) {
  m.impl("max_pool2d", &max_pool2d);
  m.impl("avg_pool2d", &avg_pool2d);
}

TORCH_LIBRARY_IMPL(fx_onednn, Meta, m) {
  m.impl("batch_norm", &batch_norm_meta);
  m.impl("concat_buffer", &concat_buffer_meta);
  m.impl("concat_write_", &concat_write_meta);
  m.impl("squeeze_excite", &squeeze_excite_meta);
  m.impl("max_pool2d", &max_pool2d_meta);
  m.impl("avg_pool2d", &avg_pool2d_meta);
}

}  // namespace fx::onednn
