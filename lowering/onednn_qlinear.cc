// Dynamic int8 linear layers on oneDNN: the float32 input quantized per
// call (u8, its own scale and zero point from its range, as
// quantized::linear_dynamic does), qint8 weights (symmetric, per tensor
// or per output channel) packed once, oneDNN's u8 x s8 matmul summing in
// int32, then, as post-ops, the sums times input and weight scales and
// the bias less the input zero point's share (zero point x the weight's
// column sum x the scales), both per output feature for this call, a
// residual (`other`, the output's sizes) and the activation. (With the
// scales and zero point as oneDNN's run-time attributes, oneDNN 2.6 runs
// its generic gemm kernel, not brgemm.) Registered here with the
// dispatcher (their schemas: operators.def).
#include <torch/library.h>

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <vector>
#include <oneapi/dnnl/dnnl.hpp>

#include "absl/strings/str_cat.h"
#include "lowering/kernels/activation_cache.h"
#include "lowering/kernels/int8_elementwise.h"
#include "lowering/onednn_ops.h"
#include "lowering/onednn_support.h"

namespace fx::onednn {
namespace {

using namespace internal;  // NOLINT: the operators' shared layer

constexpr const char* kPacker = "fx_onednn::pack_qlinear_weight";

// The packed weight's extra bytes, per output feature: the float32 scale,
// the float32 bias (zeros when none), and the sum of the weight's int8
// values (as float32).
struct Extra {
  const float* scales;
  const float* bias;
  const float* sums;
};
Extra extra_of(const at::Tensor& packed, const Header& header) {
  const auto* base = static_cast<const float*>(packed_extra(packed, header));
  const int64_t n = packed.size(0);
  return {base, base + n, base + 2 * n};
}

// The post-ops every call's primitive has: the sums times this call's
// scales, plus this call's bias (post-op inputs 0 and 1, one value per
// output feature), plus the residual where there is one (post-op input 2,
// [rows, out_features]), then the activation.
constexpr int kResidualPostOp = 2;

dnnl::primitive_attr qlinear_attr(const char* op, int64_t out_features,
                                  c10::string_view activation,
                                  int64_t residual_rows = 0) {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  dnnl::post_ops ops;
  const memory::desc per_feature({1, out_features}, DataType::f32, Tag::ab);
  ops.append_binary(dnnl::algorithm::binary_mul, per_feature);
  ops.append_binary(dnnl::algorithm::binary_add, per_feature);
  if (residual_rows > 0) {
    ops.append_binary(
        dnnl::algorithm::binary_add,
        memory::desc({residual_rows, out_features}, DataType::f32, Tag::ab));
  }
  append_activation(ops, op, activation, 0.0, 0.0, 1.f);
  attr.set_post_ops(ops);
  return attr;
}

dnnl::matmul::primitive_desc qlinear_descriptor(
    int64_t rows, int64_t in_features, int64_t out_features,
    const memory::desc& weights, const dnnl::primitive_attr& attr) {
  const memory::desc src({rows, in_features}, DataType::u8, Tag::ab);
  const memory::desc dst({rows, out_features}, DataType::f32, Tag::ab);
  dnnl::matmul::desc desc(src, weights, memory::desc(), dst);
  return dnnl::matmul::primitive_desc(desc, attr, cpu_engine());
}

at::Tensor pack_qlinear_weight(const c10::IValue& packed_params,
                               at::IntArrayRef input_size) {
  const char* op = kPacker;
  TORCH_CHECK(packed_params.isObject() || packed_params.isCustomClass(), op,
              ": expected LibTorch's packed int8 linear weights (what "
              "quantized::linear_prepack makes), got ",
              packed_params.tagKind());
  const c10::OperatorHandle unpack =
      c10::Dispatcher::singleton().findSchemaOrThrow("quantized::linear_unpack",
                                                     "");
  std::vector<c10::IValue> stack{packed_params};
  unpack.callBoxed(&stack);
  // (weight, bias): two returns.
  const std::vector<c10::IValue>& parts = stack;
  const at::Tensor w = parts.at(0).toTensor();
  TORCH_CHECK(w.dim() == 2, op, ": a linear weight is 2-d, got ", w.sizes());
  const std::vector<float> scales = weight_scales(op, w);
  const int64_t out_features = w.size(0), in_features = w.size(1);
  const int64_t rows =
      std::max<int64_t>(rows_of(op, input_size, in_features), 1);
  const auto pd = qlinear_descriptor(
      rows, in_features, out_features,
      memory::desc(linear_weight_dims(w.sizes()), DataType::s8, Tag::any),
      qlinear_attr(op, out_features, "none"));
  const at::Tensor plain = w.int_repr().contiguous();
  at::Tensor packed = pack(
      plain, plain_weight_desc(PackKind::kQLinear, w.sizes(), 1),
      pd.weights_desc(), w.sizes(), PackKind::kQLinear,
      3 * out_features * static_cast<int64_t>(sizeof(float)));
  const Header& header = header_of(packed, op, kPacker);
  auto* extra = const_cast<float*>(extra_of(packed, header).scales);
  std::memcpy(extra, scales.data(), sizeof(float) * out_features);
  std::fill(extra + out_features, extra + 2 * out_features, 0.f);
  const at::Tensor sums = plain.to(at::kLong).sum(1).to(at::kFloat).contiguous();
  std::memcpy(extra + 2 * out_features, sums.data_ptr<float>(),
              sizeof(float) * out_features);
  if (!parts.at(1).isNone()) {
    const at::Tensor b = parts.at(1).toTensor().to(at::kFloat).contiguous();
    TORCH_CHECK(b.numel() == out_features, op, ": the bias has ", b.numel(),
                " values for ", out_features, " output features");
    std::memcpy(extra + out_features, b.data_ptr<float>(),
                sizeof(float) * out_features);
  }
  return packed;
}

struct QLinear {
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul primitive;
  std::shared_ptr<const Reorder> weights_reorder;  // or null
};

std::shared_ptr<const QLinear> make_qlinear(const char* op, int64_t rows,
                                            int64_t in_features,
                                            int64_t out_features,
                                            const Header& header,
                                            c10::string_view activation,
                                            bool residual) {
  const dnnl::primitive_attr attr =
      qlinear_attr(op, out_features, activation, residual ? rows : 0);
  const memory::desc packed(header.desc);
  auto make = [&](const memory::desc& weights) {
    return qlinear_descriptor(rows, in_features, out_features, weights, attr);
  };
  std::shared_ptr<const Reorder> reorder;
  dnnl::matmul::primitive_desc pd;
  try {
    pd = make(packed);
  } catch (const dnnl::error&) {
    pd = nullptr;
  }
  if (!pd || is_reference(pd)) {
    // Packed for other rows: the layout this call's kernel prefers, the
    // weights reordered into it for each call.
    const dnnl::matmul::primitive_desc preferred = make(memory::desc(
        packed.dims(), DataType::s8, Tag::any));
    if (!pd || preferred.weights_desc() != packed) {
      reorder = make_reorder(packed, preferred.weights_desc());
      pd = preferred;
    }
  }
  TORCH_CHECK(!is_reference(pd), op,
              ": oneDNN has only its reference kernel for this int8 matmul (",
              pd.impl_info_str(), ")");
  return std::make_shared<QLinear>(QLinear{pd, dnnl::matmul(pd), reorder});
}

at::Tensor qlinear_dynamic(const at::Tensor& input, const at::Tensor& weight,
                           const c10::optional<at::Tensor>& bias,
                           c10::string_view activation,
                           const c10::optional<at::Tensor>& other) {
  const char* op = "fx_onednn::qlinear_dynamic";
  const Header& header = header_of(weight, op, kPacker);
  TORCH_CHECK(header.kind == PackKind::kQLinear, op, ": the weight was not "
              "made by ", kPacker);
  TORCH_CHECK(!bias.has_value() || !bias->defined(), op,
              ": the bias is packed with the weight; pass None");
  TORCH_CHECK(input.device().is_cpu() && input.scalar_type() == at::kFloat,
              op, ": the input must be a float32 CPU tensor, got ",
              input.toString());
  const int64_t in_features = weight.size(1), out_features = weight.size(0);
  const int64_t rows = rows_of(op, input.sizes(), in_features);
  TORCH_CHECK(in_features > 0, op, ": a weight of no input features (sizes ",
              weight.sizes(), ") has no products to quantize");
  std::vector<int64_t> out_size(input.sizes().begin(), input.sizes().end());
  out_size.back() = out_features;
  const bool residual = other.has_value() && other->defined();
  at::Tensor residual_values;
  if (residual) {
    TORCH_CHECK(other->device().is_cpu() &&
                    other->scalar_type() == at::kFloat &&
                    other->sizes() == at::IntArrayRef(out_size),
                op, ": the residual `other` must be a float32 CPU tensor of "
                "the output's sizes ", at::IntArrayRef(out_size), ", got ",
                other->toString(), " of sizes ", other->sizes());
    residual_values = other->contiguous();
  }
  at::Tensor dst = empty_activation(out_size, input.options());
  if (rows == 0) return dst;
  const at::Tensor src = input.contiguous();
  const int64_t count = src.numel();
  // The input's quantization from its range (0 included), as
  // quantized::linear_dynamic chooses it for quint8.
  const auto [lo, hi] = min_max(src.data_ptr<float>(), count);
  TORCH_CHECK(std::isfinite(lo) && std::isfinite(hi), op,
              ": the input holds a NaN or an infinity, which dynamic "
              "quantization cannot represent");
  const double low = std::min<double>(lo, 0.0), high = std::max<double>(hi, 0.0);
  double scale = (high - low) / 255.0;
  if (scale < 1.1920928955078125e-07) scale = 0.1;  // all zeros
  const int32_t zero_point = static_cast<int32_t>(
      std::clamp<double>(std::nearbyint(-low / scale), 0.0, 255.0));
  at::Tensor quantized = at::empty({count}, at::kByte);
  quantize_u8(src.data_ptr<float>(), quantized.data_ptr<uint8_t>(), count,
              static_cast<float>(1.0 / scale), zero_point);

  std::string key;
  const int64_t shape[] = {rows, in_features, out_features};
  append_key(&key, shape);
  absl::StrAppend(&key, std::string(activation), residual ? "|residual|" : "|",
                  at::get_num_threads(), "|");
  key.append(reinterpret_cast<const char*>(&header.desc), sizeof(header.desc));
  static PrimitiveCache<std::shared_ptr<const QLinear>> cache;
  const std::shared_ptr<const QLinear> made = cache.get(key, [&] {
    return make_qlinear(op, rows, in_features, out_features, header,
                        activation, residual);
  });

  // This call's scales, and its bias less the zero point's share:
  // s * (sum q_x w - zp sum w) + b.
  const Extra extra = extra_of(weight, header);
  std::vector<float> scales(out_features), bias_now(out_features);
  for (int64_t i = 0; i < out_features; ++i) {
    const double s = scale * extra.scales[i];
    scales[i] = static_cast<float>(s);
    bias_now[i] = static_cast<float>(extra.bias[i] -
                                     s * zero_point * extra.sums[i]);
  }
  // The post-ops' inputs, in this thread's memories for the primitive
  // (kept across calls: making them costs microseconds a call), then the
  // call as the float operators run theirs.
  CallMemories& m = call_memories(made, made->pd, /*has_bias=*/false);
  auto set_post_op_input = [&](int index, int64_t rows_of_input,
                               const float* values) {
    const int key = DNNL_ARG_ATTR_MULTIPLE_POST_OP(index) | DNNL_ARG_SRC_1;
    auto it = m.args.find(key);
    if (it == m.args.end()) {
      it = m.args
               .emplace(key, memory(memory::desc({rows_of_input, out_features},
                                                 DataType::f32, Tag::ab),
                                    cpu_engine(), nullptr))
               .first;
    }
    it->second.set_data_handle(const_cast<float*>(values));
  };
  set_post_op_input(0, 1, scales.data());
  set_post_op_input(1, 1, bias_now.data());
  if (residual) {
    set_post_op_input(kResidualPostOp, rows,
                      residual_values.data_ptr<float>());
  }
  run_made(made, quantized.data_ptr(), weight, header, nullptr,
           dst.data_ptr());
  return dst;
}

at::Tensor qlinear_dynamic_meta(const at::Tensor& input,
                                const at::Tensor& weight,
                                const c10::optional<at::Tensor>&,
                                c10::string_view,
                                const c10::optional<at::Tensor>&) {
  rows_of("fx_onednn::qlinear_dynamic", input.sizes(), weight.size(1));
  std::vector<int64_t> out_size(input.sizes().begin(), input.sizes().end());
  out_size.back() = weight.size(0);
  return at::empty(out_size, input.options());
}

// The qint8 weight (per output feature) and float32 bias a
// pack_qlinear_weight call packed, as exporting to ONNX needs.
std::tuple<at::Tensor, at::Tensor> unpack_qlinear_weight(
    const at::Tensor& packed) {
  const char* op = "fx_onednn::unpack_qlinear_weight";
  const Header& header = header_of(packed, op, kPacker);
  TORCH_CHECK(header.kind == PackKind::kQLinear, op, ": the weight was not "
              "made by ", kPacker);
  const int64_t out_features = packed.size(0);
  at::Tensor plain = at::empty(packed.sizes(), at::kChar);
  auto reorder = make_reorder(
      memory::desc(header.desc),
      plain_weight_desc(PackKind::kQLinear, packed.sizes(), 1));
  run_reorder(*reorder, const_cast<void*>(packed_data(packed)),
              plain.data_ptr());
  const Extra extra = extra_of(packed, header);
  const at::Tensor scales =
      at::from_blob(const_cast<float*>(extra.scales), {out_features},
                    at::kFloat)
          .to(at::kDouble);
  return {at::_make_per_channel_quantized_tensor(
              plain, scales, at::zeros({out_features}, at::kLong), 0),
          at::from_blob(const_cast<float*>(extra.bias), {out_features},
                        at::kFloat)
              .clone()};
}

// Boxed: its first argument is a torchbind class whose C++ type is
// LibTorch's internal.
void pack_qlinear_weight_boxed(const c10::OperatorHandle& /*op*/,
                               torch::jit::Stack* stack) {
  const std::vector<int64_t> input_size = stack->back().toIntVector();
  const c10::IValue packed = (*stack)[stack->size() - 2];
  at::Tensor out = pack_qlinear_weight(packed, input_size);
  torch::jit::drop(*stack, 2);
  torch::jit::push(*stack, std::move(out));
}

}  // namespace

TORCH_LIBRARY_IMPL(fx_onednn, CompositeExplicitAutograd, m) {
  m.impl("pack_qlinear_weight",
         torch::CppFunction::makeFromBoxedFunction<&pack_qlinear_weight_boxed>());
}

TORCH_LIBRARY_IMPL(fx_onednn, CPU, m) {
  m.impl("qlinear_dynamic", &qlinear_dynamic);
  m.impl("unpack_qlinear_weight", &unpack_qlinear_weight);
}

TORCH_LIBRARY_IMPL(fx_onednn, Meta, m) {
  m.impl("qlinear_dynamic", &qlinear_dynamic_meta);
}

}  // namespace fx::onednn
