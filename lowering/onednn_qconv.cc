// Int8 convolutions on oneDNN: quint8 activations (per tensor), qint8
// weights (symmetric, per output channel or per tensor) packed once, int32
// accumulation, requantized to the output's scale and zero point with the
// residual add (a quint8 tensor at its own scale) and the activation fused
// as post-ops. Registered here with the dispatcher (their schemas:
// operators.def).
#include <torch/library.h>

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <vector>
#include <algorithm>
#include <oneapi/dnnl/dnnl.hpp>

#include "absl/strings/str_join.h"

#include <ATen/quantized/Quantizer.h>

#include "lowering/onednn_ops.h"
#include "lowering/onednn_support.h"

namespace fx::onednn {

bool int8_supported() {
  static const bool supported = [] {
    const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
    auto has = [isa](dnnl::cpu_isa wanted) {
      const auto bits = static_cast<unsigned>(wanted);
      return (isa & bits) == bits;
    };
    return has(dnnl::cpu_isa::avx512_core_vnni) ||
           has(dnnl::cpu_isa::avx2_vnni);
  }();
  return supported;
}

const std::vector<std::string>& qconv_activations() {
  // activation_names() but clip, whose bounds qconv has no arguments for.
  static const auto* names = [] {
    auto* v = new std::vector<std::string>;
    for (const std::string& a : activation_names()) {
      if (a != "clip") v->push_back(a);
    }
    return v;
  }();
  return *names;
}

namespace {

using namespace internal;  // NOLINT: the operators' shared layer

constexpr const char* kPacker = "fx_onednn::pack_qconv_weight";

std::vector<c10::IValue> call_quantized(const char* name,
                                        const c10::IValue& packed) {
  const c10::OperatorHandle op =
      c10::Dispatcher::singleton().findSchemaOrThrow(name, "");
  std::vector<c10::IValue> stack{packed};
  op.callBoxed(&stack);
  return stack;
}

// The packed weight's extra bytes: a float32 scale per output channel,
// then the float32 bias (zeros when none).
struct QConvExtra {
  const float* scales;
  const float* bias;
};
QConvExtra extra_of(const at::Tensor& packed, const Header& header) {
  const auto* base = static_cast<const float*>(packed_extra(packed, header));
  return {base, base + packed.size(0)};
}

struct QConvCall {
  ConvGeometry g;
  Tag src_layout;
  QParams in, out;
  c10::optional<QParams> residual;
  std::string activation = "none";
  int64_t groups = 1;
};

// Whether the call's activation commutes with a positive scale (none,
// relu): then oneDNN scales the sums to the output's quantization at once;
// others run on the real values (the sums times input and weight scales,
// the residual at its own scale) and the activation's result is divided
// by the output scale.
bool scales_first(const QConvCall& c) {
  return c.activation == "none" || c.activation == "relu";
}

dnnl::primitive_attr qconv_attr(const QConvCall& c,
                                const std::vector<float>& output_scales) {
  dnnl::primitive_attr attr;
  // Each call brings its thread's scratchpad (a primitive's own would be
  // shared by the threads that call it).
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  attr.set_output_scales(output_scales.size() == 1 ? 0 : 1 << 1,
                         output_scales);
  if (c.in.zero_point != 0) {
    attr.set_zero_points(DNNL_ARG_SRC, 0,
                         {static_cast<int32_t>(c.in.zero_point)});
  }
  if (c.out.zero_point != 0) {
    attr.set_zero_points(DNNL_ARG_DST, 0,
                         {static_cast<int32_t>(c.out.zero_point)});
  }
  dnnl::post_ops ops;
  const double to_output = scales_first(c) ? 1.0 / c.out.scale : 1.0;
  if (c.residual) {
    ops.append_sum(static_cast<float>(c.residual->scale * to_output),
                   static_cast<int32_t>(c.residual->zero_point));
  }
  if (c.activation == "relu") {
    ops.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
  } else if (!scales_first(c)) {
    append_activation(ops, "fx_onednn::qconv", c.activation, 0.0, 0.0,
                      static_cast<float>(1.0 / c.out.scale));
  }
  attr.set_post_ops(ops);
  return attr;
}

// Whether oneDNN chose one of its AMX kernels.
bool is_amx(const dnnl::primitive_desc_base& pd) {
  return std::string(pd.impl_info_str()).find("amx") != std::string::npos;
}

// A 1x1 convolution of fewer multiply-accumulates than this runs on
// oneDNN's VNNI kernels rather than its AMX ones (below).
constexpr int64_t kAmx1x1Macs = int64_t{1} << 25;

// oneDNN's first kernel for the call, but for a small 1x1 convolution the
// first that is not an AMX one: oneDNN 2.6's AMX int8 1x1 kernels (jit_1x1,
// jit) took 1.5-7.6x the time of its VNNI ones (brgconv_1x1) on 53 of the
// 60 1x1 layers of MobileNetV3-Small, EfficientNet-B0 and ResNet-18 at
// batch 1 on a Sapphire Rapids host (a tile configuration each call
// outweighs small layers; 0.76-0.99x on the largest, 10-20M
// multiply-accumulates), where its AMX brgconv kernels for larger windows
// took 0.3-0.6x; ResNet-50's 1x1 layers (51M and up) ran 1.5x slower
// without AMX at batch 8.
dnnl::convolution_forward::primitive_desc qconv_descriptor(
    at::IntArrayRef input, const QConvCall& c, const memory::desc& weights,
    const dnnl::primitive_attr& attr) {
  const ActivationDescs d =
      activation_descs(input, c.g.output_size, /*bias=*/true, DataType::u8,
                       DataType::u8, c.src_layout);
  dnnl::convolution_forward::desc desc(
      dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
      d.src, weights, d.bias, d.dst, c.g.strides, c.g.dilates, c.g.padding,
      c.g.padding);
  dnnl::convolution_forward::primitive_desc pd(desc, attr, cpu_engine());
  const memory::dims kernel = weights.dims();
  const bool one_by_one = kernel[kernel.size() - 1] == 1 &&
                          kernel[kernel.size() - 2] == 1;
  // Per output value, the input channels of its group.
  const int64_t macs = c10::multiply_integers(c.g.output_size) *
                       (input.size() > 1 ? input[1] / c.groups : 1);
  if (!one_by_one || macs >= kAmx1x1Macs || !is_amx(pd)) return pd;
  dnnl::convolution_forward::primitive_desc other(desc, attr, cpu_engine());
  while (other.next_impl()) {
    if (!is_amx(other) && !is_reference(other)) return other;
  }
  return pd;
}

at::Tensor pack_qconv_weight(const c10::IValue& packed_params,
                             at::IntArrayRef input_size,
                             int64_t input_zero_point) {
  const char* op = kPacker;
  const Int8ConvWeights u = unpack_int8_conv(op, packed_params);
  TORCH_CHECK(input_zero_point >= 0 && input_zero_point <= 255, op,
              ": input_zero_point must be within 0 to 255 (quint8), got ",
              input_zero_point);
  const std::vector<float>& scales = u.scales;
  const int64_t channels = u.weight.size(0);
  QConvCall c{conv_geometry(op, input_size, u.weight.sizes(), u.stride,
                            u.padding, u.dilation, u.groups),
              channels_last_tag(static_cast<int64_t>(input_size.size())),
              {1.0, input_zero_point},
              {1.0, 0},
              c10::nullopt,
              "none",
              u.groups};
  const auto pd = qconv_descriptor(
      input_size, c,
      conv_weight_desc(u.weight.sizes(), u.groups, Tag::any, DataType::s8),
      qconv_attr(c, std::vector<float>(scales.size(), 1.f)));
  const at::Tensor plain = u.weight.int_repr().contiguous();
  const memory::desc plain_desc =
      plain_weight_desc(PackKind::kQConv, u.weight.sizes(), u.groups);
  at::Tensor packed =
      pack(plain, plain_desc, pd.weights_desc(), u.weight.sizes(),
           PackKind::kQConv, 2 * channels * static_cast<int64_t>(sizeof(float)));
  const Header& header = header_of(packed, op, kPacker);
  auto* extra = const_cast<float*>(extra_of(packed, header).scales);
  std::memcpy(extra, scales.data(), sizeof(float) * channels);
  if (u.bias) {
    const at::Tensor b = u.bias->to(at::kFloat).contiguous();
    TORCH_CHECK(b.numel() == channels, op, ": the bias has ", b.numel(),
                " values for ", channels, " output channels");
    std::memcpy(extra + channels, b.data_ptr<float>(),
                sizeof(float) * channels);
  } else {
    std::fill(extra + channels, extra + 2 * channels, 0.f);
  }
  return packed;
}

// A primitive for one call's sizes and quantization parameters, with the
// bias it adds (the float bias over input scale times weight scale: oneDNN
// adds it to the int32 sums before scaling them) and the weight it was made
// for (a weight freed and another packed at its address gets its own).
struct QConv {
  dnnl::convolution_forward::primitive_desc pd;
  dnnl::convolution_forward primitive;
  std::shared_ptr<const Reorder> weights_reorder;  // or null
  at::Tensor bias;
  c10::weak_intrusive_ptr<c10::StorageImpl> weight_storage;
};

std::shared_ptr<const QConv> make_qconv(const char* op,
                                        const at::Tensor& input,
                                        const at::Tensor& weight,
                                        const Header& header,
                                        const QConvCall& c) {
  const int64_t channels = weight.size(0);
  const QConvExtra extra = extra_of(weight, header);
  std::vector<float> output_scales(channels);
  at::Tensor bias = at::empty({channels}, at::kFloat);
  float* b = bias.data_ptr<float>();
  for (int64_t i = 0; i < channels; ++i) {
    const double sum_scale = c.in.scale * extra.scales[i];
    output_scales[i] = static_cast<float>(
        scales_first(c) ? sum_scale / c.out.scale : sum_scale);
    b[i] = static_cast<float>(extra.bias[i] / sum_scale);
  }
  const dnnl::primitive_attr attr = qconv_attr(c, output_scales);
  std::shared_ptr<const Reorder> reorder;
  const auto pd = for_packed_weights<dnnl::convolution_forward::primitive_desc>(
      [&](const memory::desc& w) {
        return qconv_descriptor(input.sizes(), c, w, attr);
      },
      memory::desc(header.desc),
      conv_weight_desc(weight.sizes(), c.groups, Tag::any, DataType::s8),
      &reorder);
  if (reorder == nullptr && memory::desc(header.desc) != pd.weights_desc()) {
    reorder = make_reorder(memory::desc(header.desc), pd.weights_desc());
  }
  TORCH_CHECK(!is_reference(pd), op,
              ": oneDNN has only its reference kernel for this int8 "
              "convolution (", pd.impl_info_str(), ")");
  return std::make_shared<QConv>(QConv{
      pd, dnnl::convolution_forward(pd), reorder, bias,
      weight.storage().getWeakStorageImpl()});
}

// The checked call: its geometry and quantization, the input
// channels-last.
struct CheckedQConv {
  QConvCall c;
  at::Tensor src;
};

// `residual` (named `residual_name`), when given: quint8 of the output's
// sizes.
CheckedQConv check_qconv(const char* op, const at::Tensor& input,
                         const at::Tensor& weight,
                         const c10::optional<at::Tensor>& bias,
                         at::IntArrayRef stride, at::IntArrayRef padding,
                         at::IntArrayRef dilation, int64_t groups,
                         double output_scale, int64_t output_zero_point,
                         c10::string_view activation,
                         const at::Tensor* residual = nullptr,
                         const char* residual_name = nullptr) {
  CheckedQConv checked;
  QConvCall& c = checked.c;
  c.in = quint8_params(op, input, "the input");
  check_output_params(op, output_scale, output_zero_point);
  c.out = {output_scale, output_zero_point};
  TORCH_CHECK(!bias.has_value() || !bias->defined(), op,
              ": the bias is packed with the weight; pass None");
  const std::vector<std::string>& known = qconv_activations();
  TORCH_CHECK(std::find(known.begin(), known.end(), activation) != known.end(),
              op, ": activation must be one of ", absl::StrJoin(known, ", "),
              ", got '", std::string(activation), "'");
  c.activation = std::string(activation);
  const Header& header = header_of(weight, op, kPacker);
  TORCH_CHECK(header.kind == PackKind::kQConv, op, ": the weight was not made "
              "by ", kPacker);
  c.g = conv_geometry(op, input.sizes(), weight.sizes(), stride, padding,
                      dilation, groups);
  TORCH_CHECK(input.dim() == 4, op, ": the input must be 4-d (N, C, H, W), "
              "got ", input.sizes());
  // Channels-last, as the packed weight's layout was chosen for (an NCHW
  // image is converted: a pass over the int8 input).
  checked.src = input.contiguous(at::MemoryFormat::ChannelsLast);
  c.src_layout = Tag::nhwc;
  c.groups = groups;
  if (residual != nullptr) {
    c.residual = quint8_params(op, *residual, residual_name);
    const at::IntArrayRef out_size(c.g.output_size);
    TORCH_CHECK(residual->sizes() == out_size, op, ": ", residual_name,
                " has sizes ", residual->sizes(), ", the convolution's "
                "output ", out_size);
  }
  return checked;
}

// Runs the checked call into `dst` (which holds the residual on entry when
// c.residual is set).
void run_qconv(const char* op, const CheckedQConv& checked,
               const at::Tensor& weight, void* dst) {
  const QConvCall& c = checked.c;
  const Header& header = header_of(weight, op, kPacker);
  std::string key;
  key.reserve(256);
  append_key(&key, checked.src.sizes());
  append_key(&key, weight.sizes());
  append_key(&key, c.g.strides);
  append_key(&key, c.g.dilates);
  append_key(&key, c.g.padding);
  append_key(&key, at::IntArrayRef{c.groups});
  append_key(&key, c.in.scale);
  append_key(&key, at::IntArrayRef{c.in.zero_point, c.out.zero_point});
  append_key(&key, c.out.scale);
  if (c.residual) {
    append_key(&key, c.residual->scale);
    append_key(&key, at::IntArrayRef{c.residual->zero_point});
  }
  key += c.activation;
  key += '|';
  key += std::to_string(reinterpret_cast<uintptr_t>(packed_data(weight)));
  static std::mutex mutex;
  static std::unordered_map<std::string, std::shared_ptr<const QConv>> made;
  std::shared_ptr<const QConv> conv;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = made.find(key);
    if (it != made.end() && it->second->weight_storage.lock().get() ==
                                weight.storage().unsafeGetStorageImpl()) {
      conv = it->second;
    }
  }
  if (conv == nullptr) {
    conv = make_qconv(op, checked.src, weight, header, c);
    std::lock_guard<std::mutex> lock(mutex);
    if (made.size() >= 4096) {
      ++cache_generation;
      made.clear();
    }
    made[key] = conv;
  }
  run_made(conv, checked.src.data_ptr(), weight, header,
           conv->bias.data_ptr(), dst);
}

at::Tensor qconv(const at::Tensor& input, const at::Tensor& weight,
                 const c10::optional<at::Tensor>& bias, at::IntArrayRef stride,
                 at::IntArrayRef padding, at::IntArrayRef dilation,
                 int64_t groups, double output_scale,
                 int64_t output_zero_point,
                 const c10::optional<at::Tensor>& other,
                 c10::string_view activation) {
  const char* op = "fx_onednn::qconv";
  const bool has_other = other.has_value() && other->defined();
  const CheckedQConv checked = check_qconv(
      op, input, weight, bias, stride, padding, dilation, groups, output_scale,
      output_zero_point, activation, has_other ? &*other : nullptr,
      "other (the residual)");
  const std::vector<int64_t>& out_size = checked.c.g.output_size;
  const at::Tensor residual =
      has_other ? other->contiguous(at::MemoryFormat::ChannelsLast)
                : at::Tensor();
  at::Tensor out =
      empty_quint8_channels_last(out_size, output_scale, output_zero_point);
  if (out.numel() == 0) return out;
  if (residual.defined()) {
    std::memcpy(out.data_ptr(), residual.data_ptr(), out.numel());
  }
  run_qconv(op, checked, weight, out.data_ptr());
  return out;
}

// qconv with `self` its residual, the result written over it: self then
// holds act(conv(input) + self) at output_scale / output_zero_point.
at::Tensor& qconv_add_(at::Tensor& self, const at::Tensor& input,
                       const at::Tensor& weight,
                       const c10::optional<at::Tensor>& bias,
                       at::IntArrayRef stride, at::IntArrayRef padding,
                       at::IntArrayRef dilation, int64_t groups,
                       double output_scale, int64_t output_zero_point,
                       c10::string_view activation) {
  const char* op = "fx_onednn::qconv_add_";
  const CheckedQConv checked = check_qconv(
      op, input, weight, bias, stride, padding, dilation, groups, output_scale,
      output_zero_point, activation, &self, "self (the residual)");
  TORCH_CHECK(!self.is_alias_of(input), op,
              ": self (the residual) shares memory with the input, which "
              "the convolution reads while it writes self");
  TORCH_CHECK(self.is_contiguous(at::MemoryFormat::ChannelsLast), op,
              ": self (the residual) must be channels-last, as qconv leaves "
              "its outputs; got strides ", self.strides());
  if (self.numel() > 0) run_qconv(op, checked, weight, self.data_ptr());
  at::set_quantizer_(self, at::make_per_tensor_affine_quantizer(
                               output_scale, output_zero_point, at::kQUInt8));
  return self;
}

at::Tensor qconv_meta(const at::Tensor& input, const at::Tensor& weight,
                      const c10::optional<at::Tensor>& /*bias*/,
                      at::IntArrayRef stride, at::IntArrayRef padding,
                      at::IntArrayRef dilation, int64_t groups,
                      double output_scale, int64_t output_zero_point,
                      const c10::optional<at::Tensor>& /*other*/,
                      c10::string_view /*activation*/) {
  const char* op = "fx_onednn::qconv";
  check_output_params(op, output_scale, output_zero_point);
  const ConvGeometry g = conv_geometry(op, input.sizes(), weight.sizes(),
                                       stride, padding, dilation, groups);
  return at::empty(g.output_size, input.options());
}

// The qint8 weight a pack call was given, per output channel (ONNX export).
at::Tensor unpack_qconv_weight(const at::Tensor& packed, int64_t groups) {
  const char* op = "fx_onednn::unpack_qconv_weight";
  const Header& header = header_of(packed, op, kPacker);
  TORCH_CHECK(header.kind == PackKind::kQConv, op, ": the weight was not made "
              "by ", kPacker);
  const int64_t channels = packed.size(0);
  at::Tensor plain = at::empty(packed.sizes(), at::kChar);
  const memory::desc plain_desc =
      plain_weight_desc(PackKind::kQConv, packed.sizes(), groups);
  const memory::desc from(header.desc);
  TORCH_CHECK(from.dims() == plain_desc.dims(), op, ": the weight was "
              "packed with other groups than ", groups);
  auto reorder = make_reorder(from, plain_desc);
  run_reorder(*reorder, const_cast<void*>(packed_data(packed)),
              plain.data_ptr());
  const QConvExtra extra = extra_of(packed, header);
  const at::Tensor scales =
      at::from_blob(const_cast<float*>(extra.scales), {channels}, at::kFloat)
          .to(at::kDouble);
  return at::_make_per_channel_quantized_tensor(
      plain, scales, at::zeros({channels}, at::kLong), 0);
}

at::Tensor packed_qconv_bias(const at::Tensor& packed) {
  const char* op = "fx_onednn::packed_qconv_bias";
  const Header& header = header_of(packed, op, kPacker);
  TORCH_CHECK(header.kind == PackKind::kQConv, op, ": the weight was not made "
              "by ", kPacker);
  const QConvExtra extra = extra_of(packed, header);
  return at::from_blob(const_cast<float*>(extra.bias), {packed.size(0)},
                       at::kFloat)
      .clone();
}

// Boxed: its first argument is a torchbind class whose C++ type is
// LibTorch's internal.
void pack_qconv_weight_boxed(const c10::OperatorHandle& /*op*/,
                             torch::jit::Stack* stack) {
  const int64_t input_zero_point = stack->back().toInt();
  const std::vector<int64_t> input_size =
      (*stack)[stack->size() - 2].toIntVector();
  const c10::IValue packed = (*stack)[stack->size() - 3];
  at::Tensor out = pack_qconv_weight(packed, input_size, input_zero_point);
  torch::jit::drop(*stack, 3);
  torch::jit::push(*stack, std::move(out));
}

}  // namespace

Int8ConvWeights unpack_int8_conv(const char* op, const c10::IValue& packed) {
  TORCH_CHECK(packed.isObject() || packed.isCustomClass(), op,
              ": expected LibTorch's packed int8 convolution weights (what "
              "quantized::conv2d_prepack makes), got ",
              packed.tagKind());
  TORCH_CHECK(call_quantized("quantized::conv2d_transpose", packed)
                      .at(0)
                      .toInt() == 0,
              op, ": transposed int8 convolutions are not lowered");
  Int8ConvWeights u;
  std::vector<c10::IValue> parts =
      call_quantized("quantized::conv2d_unpack", packed);
  u.weight = parts.at(0).toTensor();
  if (!parts.at(1).isNone()) u.bias = parts.at(1).toTensor();
  TORCH_CHECK(u.weight.dim() == 4, op, ": a 2-d convolution's weight is "
              "4-d, got ", u.weight.sizes());
  u.scales = weight_scales(op, u.weight);
  u.stride = call_quantized("quantized::conv2d_stride", packed).at(0).toIntVector();
  u.padding =
      call_quantized("quantized::conv2d_padding", packed).at(0).toIntVector();
  u.dilation =
      call_quantized("quantized::conv2d_dilation", packed).at(0).toIntVector();
  u.groups = call_quantized("quantized::conv2d_groups", packed).at(0).toInt();
  return u;
}

// No tensor argument: the dispatcher takes the kernel registered for
// every backend.
TORCH_LIBRARY_IMPL(fx_onednn, CompositeExplicitAutograd, m) {
  m.impl("pack_qconv_weight",
         torch::CppFunction::makeFromBoxedFunction<&pack_qconv_weight_boxed>());
}

TORCH_LIBRARY_IMPL(fx_onednn, QuantizedCPU, m) {
  m.impl("qconv", &qconv);
  m.impl("qconv_add_", &qconv_add_);
}

// On CPU too, so that a float input is refused by name.
TORCH_LIBRARY_IMPL(fx_onednn, CPU, m) {
  m.impl("qconv", &qconv);
  m.impl("qconv_add_", &qconv_add_);
  m.impl("unpack_qconv_weight", &unpack_qconv_weight);
  m.impl("packed_qconv_bias", &packed_qconv_bias);
}

TORCH_LIBRARY_IMPL(fx_onednn, Meta, m) {
  m.impl("qconv", &qconv_meta);
}

}  // namespace fx::onednn
