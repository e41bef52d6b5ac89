// oneDNN's matrix products: transposed convolutions, linear layers,
// batched matrix products (attention) and recurrent layers (LSTM, GRU).
// Registered here with the dispatcher (their schemas: onednn_ops.cc).
#include "lowering/onednn_ops.h"

#include <torch/library.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <absl/container/flat_hash_map.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <type_traits>
#include <unordered_map>
#include <oneapi/dnnl/dnnl.hpp>

#include "lowering/kernels/activation_cache.h"
#include "lowering/kernels/elementwise.h"
#include "lowering/kernels/kernel_support.h"
#include "lowering/onednn_support.h"
#include "lowering/kernels/recurrence.h"

namespace fx::onednn {
namespace {

using namespace internal;  // NOLINT: the operators' shared layer

// --- Transposed convolution (oneDNN's deconvolution) -------------------------
// The weight is aten's: [in, out / groups, kernel...].
struct DeconvGeometry {
  std::vector<int64_t> output_size;
  memory::dims strides, dilates, padding_l, padding_r;
};

DeconvGeometry deconv_geometry(const char* op, at::IntArrayRef input,
                               at::IntArrayRef weight, at::IntArrayRef stride,
                               at::IntArrayRef padding,
                               at::IntArrayRef output_padding,
                               at::IntArrayRef dilation, int64_t groups) {
  const int64_t spatial = spatial_dims_of(
      op, input, weight, {stride, padding, output_padding, dilation},
      "stride, padding, output_padding and dilation");
  TORCH_CHECK(groups >= 1 && weight[0] % groups == 0 && input[1] == weight[0],
              op, ": the input has ", input[1], " channels, but the weight ",
              weight, " (in, out / groups, ...) with ", groups, " groups takes ",
              weight[0]);
  DeconvGeometry g;
  g.output_size = {input[0], weight[1] * groups};
  for (int64_t i = 0; i < spatial; ++i) {
    TORCH_CHECK(stride[i] >= 1 && dilation[i] >= 1 && padding[i] >= 0 &&
                    output_padding[i] >= 0,
                op, ": stride and dilation must be positive, padding and "
                "output_padding not negative");
    TORCH_CHECK(output_padding[i] < stride[i] ||
                    output_padding[i] < dilation[i],
                op, ": output_padding must be smaller than the stride or the "
                "dilation, got output_padding ", output_padding, ", stride ",
                stride, ", dilation ", dilation);
    const int64_t out = (input[2 + i] - 1) * stride[i] - 2 * padding[i] +
                        dilation[i] * (weight[2 + i] - 1) +
                        output_padding[i] + 1;
    TORCH_CHECK(out >= 1, op, ": the input's spatial size ", input,
                " gives an empty output for the weight ", weight);
    g.output_size.push_back(out);
    g.strides.push_back(stride[i]);
    g.dilates.push_back(dilation[i] - 1);
    g.padding_l.push_back(padding[i]);
    // output_padding's extra rows: less padding on the right.
    g.padding_r.push_back(padding[i] - output_padding[i]);
  }
  return g;
}

dnnl::deconvolution_forward::primitive_desc deconv_descriptor(
    at::IntArrayRef input, const DeconvGeometry& g,
    const memory::desc& weight_desc, bool bias,
    const dnnl::primitive_attr& attr) {
  const ActivationDescs d = activation_descs(input, g.output_size, bias,
                                             DataType::f32, DataType::f32);
  dnnl::deconvolution_forward::desc desc(
      dnnl::prop_kind::forward_inference, dnnl::algorithm::deconvolution_direct,
      d.src, weight_desc, d.bias, d.dst, g.strides, g.dilates, g.padding_l,
      g.padding_r);
  return dnnl::deconvolution_forward::primitive_desc(desc, attr, cpu_engine());
}

at::Tensor pack_conv_transpose_weight(const at::Tensor& weight,
                                      at::IntArrayRef input_size,
                                      at::IntArrayRef stride,
                                      at::IntArrayRef padding,
                                      at::IntArrayRef output_padding,
                                      at::IntArrayRef dilation,
                                      int64_t groups) {
  const char* op = "fx_onednn::pack_conv_transpose_weight";
  TORCH_CHECK(weight.device().is_cpu() && weight.scalar_type() == at::kFloat,
              op, ": the weight must be a float32 CPU tensor, got ",
              weight.toString());
  const DeconvGeometry g =
      deconv_geometry(op, input_size, weight.sizes(), stride, padding,
                      output_padding, dilation, groups);
  const auto pd = deconv_descriptor(
      input_size, g, deconv_weight_desc(weight.sizes(), groups, Tag::any),
      /*bias=*/true, dnnl::primitive_attr());
  return pack(weight,
              plain_weight_desc(PackKind::kConvTranspose, weight.sizes(),
                                groups),
              pd.weights_desc(), weight.sizes(), PackKind::kConvTranspose);
}

struct Deconv {
  dnnl::deconvolution_forward::primitive_desc pd;
  dnnl::deconvolution_forward primitive;
  std::shared_ptr<const Reorder> weights_reorder;  // or null
};

at::Tensor conv_transpose(const at::Tensor& input, const at::Tensor& weight,
                          const c10::optional<at::Tensor>& bias,
                          at::IntArrayRef stride, at::IntArrayRef padding,
                          at::IntArrayRef output_padding,
                          at::IntArrayRef dilation, int64_t groups,
                          c10::string_view activation, double alpha,
                          double beta) {
  const char* op = "fx_onednn::conv_transpose";
  TORCH_CHECK(input.device().is_cpu() && input.scalar_type() == at::kFloat,
              op, ": the input must be a float32 CPU tensor, got ",
              input.toString());
  const Header& header =
      header_of(weight, op, "fx_onednn::pack_conv_transpose_weight");
  TORCH_CHECK(memory::desc(header.desc).data_type() == DataType::f32, op,
              ": the weight was packed in another dtype than float32");
  const DeconvGeometry g =
      deconv_geometry(op, input.sizes(), weight.sizes(), stride, padding,
                      output_padding, dilation, groups);
  const bool has_bias = bias.has_value() && bias->defined();
  std::string key;
  append_key(&key, input.sizes());
  append_key(&key, g.output_size);
  for (const memory::dims* d :
       {&g.strides, &g.dilates, &g.padding_l, &g.padding_r}) {
    append_key(&key, *d);
  }
  absl::StrAppend(&key, groups, "|", has_bias, "|", std::string(activation),
                  "|", at::get_num_threads(), "|");
  append_key(&key, alpha);
  append_key(&key, beta);
  key.append(reinterpret_cast<const char*>(&header.desc), sizeof(header.desc));
  static PrimitiveCache<std::shared_ptr<const Deconv>> cache;
  const auto made = cache.get(key, [&] {
    const dnnl::primitive_attr attr =
        post_ops(op, false, activation, alpha, beta);
    std::shared_ptr<const Reorder> reorder;
    auto pd = for_packed_weights<dnnl::deconvolution_forward::primitive_desc>(
        [&](const memory::desc& weights) {
          return deconv_descriptor(input.sizes(), g, weights, has_bias, attr);
        },
        memory::desc(header.desc),
        deconv_weight_desc(weight.sizes(), groups, Tag::any), &reorder);
    return std::make_shared<const Deconv>(
        Deconv{pd, dnnl::deconvolution_forward(pd), reorder});
  });
  const at::Tensor src = to_channels_last(input);
  at::Tensor dst = empty_channels_last(g.output_size, input.options());
  if (dst.numel() == 0) return dst;
  run_with_weights(op, made, src, weight, header, bias, g.output_size[1], dst);
  return dst;
}

at::Tensor conv_transpose_meta(const at::Tensor& input,
                               const at::Tensor& weight,
                               const c10::optional<at::Tensor>&,
                               at::IntArrayRef stride, at::IntArrayRef padding,
                               at::IntArrayRef output_padding,
                               at::IntArrayRef dilation, int64_t groups,
                               c10::string_view, double, double) {
  return empty_channels_last(
      deconv_geometry("fx_onednn::conv_transpose", input.sizes(),
                      weight.sizes(), stride, padding, output_padding,
                      dilation, groups)
          .output_size,
      input.options());
}

at::Tensor pack_conv_transpose_weight_meta(const at::Tensor& weight,
                                           at::IntArrayRef, at::IntArrayRef,
                                           at::IntArrayRef, at::IntArrayRef,
                                           at::IntArrayRef, int64_t) {
  return at::empty(weight.sizes(), weight.options());
}

// --- Linear (oneDNN's matmul) --------------------------------------------
// [rows, in] @ weight^T, the weight [in, out] in the matmul's packed layout:
// oneDNN 2.6's matmul ran transformer shapes (197 x 768 @ 768 x 2304, ...)
// 1.2-1.3x as fast as its inner product here, and others alike.
dnnl::matmul::primitive_desc linear_descriptor(
    int64_t rows, int64_t in_features, int64_t out_features,
    const memory::desc& weight_desc, bool bias,
    const dnnl::primitive_attr& attr, DataType compute = DataType::f32,
    DataType output = DataType::f32) {
  memory::desc src({rows, in_features}, compute, Tag::ab);
  memory::desc dst({rows, out_features}, output, Tag::ab);
  memory::desc bias_desc =
      bias ? memory::desc({1, out_features}, DataType::f32, Tag::ab)
           : memory::desc();
  dnnl::matmul::desc desc(src, weight_desc, bias_desc, dst);
  return dnnl::matmul::primitive_desc(desc, attr, cpu_engine());
}

at::Tensor pack_linear_weight(const at::Tensor& weight,
                              at::IntArrayRef input_size, bool bf16) {
  const char* op = "fx_onednn::pack_linear_weight";
  TORCH_CHECK(weight.dim() == 2 && weight.device().is_cpu() &&
                  weight.scalar_type() == at::kFloat,
              op, ": the weight must be a 2-d float32 CPU tensor, got ",
              weight.toString(), " ", weight.sizes());
  check_bf16(op, bf16);
  const int64_t rows = std::max<int64_t>(rows_of(op, input_size, weight.size(1)), 1);
  const memory::dims dims = linear_weight_dims(weight.sizes());
  const DataType type = bf16 ? DataType::bf16 : DataType::f32;
  const auto pd = linear_descriptor(
      rows, weight.size(1), weight.size(0), memory::desc(dims, type, Tag::any),
      /*bias=*/true, dnnl::primitive_attr(), type, type);
  return pack(weight, plain_weight_desc(PackKind::kLinear, weight.sizes(), 1),
              pd.weights_desc(), weight.sizes(), PackKind::kLinear);
}

struct Linear {
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul primitive;
  std::shared_ptr<const Reorder> weights_reorder;  // or null
};

// What a linear call runs (plan_for_site keeps it per packed weight).
struct LinearPlan {
  std::shared_ptr<const Linear> made;
  at::ScalarType compute = at::kFloat;  // the input's, converted
  bool silu_pass = false;
};

std::vector<int64_t> linear_output_size(at::IntArrayRef input,
                                        int64_t out_features) {
  std::vector<int64_t> sizes(input.begin(), input.end());
  sizes.back() = out_features;
  return sizes;
}

at::Tensor linear(const at::Tensor& input, const at::Tensor& weight,
                  const c10::optional<at::Tensor>& bias,
                  c10::string_view activation, double alpha, double beta,
                  const c10::optional<at::Tensor>& other) {
  const char* op = "fx_onednn::linear";
  const Header& header =
      header_of(weight, op, "fx_onednn::pack_linear_weight");
  check_input(op, input);
  const DataType output = data_type_of(op, input, "input");
  const int64_t in_features = weight.size(1);
  const int64_t out_features = weight.size(0);
  const int64_t rows = rows_of(op, input.sizes(), in_features);
  const bool has_bias = bias.has_value() && bias->defined();
  const bool has_other = other.has_value() && other->defined();
  at::Tensor dst = empty_activation(
      linear_output_size(input.sizes(), out_features), input.options());
  if (has_other) {
    TORCH_CHECK(other->sizes() == dst.sizes() && other->device().is_cpu(), op,
                ": the residual must be a CPU tensor of the output's sizes ",
                dst.sizes(), ", got ", other->toString(), " ", other->sizes());
    data_type_of(op, *other, "residual");
    // The sum post-op adds the product to what dst holds.
    dst.copy_(*other);
  }
  if (rows == 0) return dst;

  SiteArgs args{{rows, static_cast<int64_t>(input.scalar_type()), has_bias,
                 has_other},
                activation, alpha, beta};
  const LinearPlan& plan = plan_for_site<LinearPlan>(weight, header, args, [&] {
    const DataType compute = compute_type(op, header, input);
    std::string key;
    absl::StrAppend(&key, static_cast<int>(compute), static_cast<int>(output),
                    "|");
    const int64_t shape[] = {rows, in_features, out_features};
    append_key(&key, shape);
    absl::StrAppend(&key, has_bias, "|", has_other, "|",
                    std::string(activation), "|", at::get_num_threads(), "|");
    append_key(&key, alpha);
    append_key(&key, beta);
    key.append(reinterpret_cast<const char*>(&header.desc),
               sizeof(header.desc));
    LinearPlan made_plan;
    made_plan.compute = scalar_type_of(compute);
    made_plan.silu_pass = silu_as_pass(activation, output);
    static PrimitiveCache<std::shared_ptr<const Linear>> cache;
    made_plan.made = cache.get(key, [&] {
      const dnnl::primitive_attr attr =
          post_ops(op, has_other, made_plan.silu_pass ? "none" : activation,
                   alpha, beta);
      std::shared_ptr<const Reorder> reorder;
      auto pd = for_packed_weights<dnnl::matmul::primitive_desc>(
          [&](const memory::desc& weights) {
            return linear_descriptor(rows, in_features, out_features, weights,
                                     has_bias, attr, compute, output);
          },
          memory::desc(header.desc),
          memory::desc(linear_weight_dims(weight.sizes()), compute, Tag::any),
          &reorder);
      return std::make_shared<const Linear>(
          Linear{pd, dnnl::matmul(pd), reorder});
    });
    return made_plan;
  });

  const at::Tensor src =
      input.scalar_type() == plan.compute && input.is_contiguous()
          ? input
          : input.to(plan.compute).contiguous();
  run_with_weights(op, plan.made, src, weight, header, bias, out_features,
                   dst);
  if (plan.silu_pass) silu_in_place(dst.data_ptr<float>(), dst.numel());
  return dst;
}

at::Tensor linear_meta(const at::Tensor& input, const at::Tensor& weight,
                       const c10::optional<at::Tensor>&, c10::string_view,
                       double, double, const c10::optional<at::Tensor>&) {
  rows_of("fx_onednn::linear", input.sizes(), weight.size(1));
  return at::empty(linear_output_size(input.sizes(), weight.size(0)),
                   input.options());
}

at::Tensor pack_linear_weight_meta(const at::Tensor& weight, at::IntArrayRef,
                                   bool) {
  return at::empty(weight.sizes(), weight.options());
}

// --- Batched matrix products (attention) ------------------------------------
// self [..., M, K] @ other [..., K, N] of activations (attention's q @ k^T
// and weights @ v), batch dimensions equal or 1 (broadcast), read in place
// through their strides (the heads' views of a projection, a transposed
// key), scaled by `scale` (an eltwise post-op).
struct Matmul {
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul primitive;
  bool contiguous_inputs = false;  // strided ones had only the reference kernel
};

std::vector<int64_t> matmul_output_size(const char* op, at::IntArrayRef a,
                                        at::IntArrayRef b) {
  TORCH_CHECK(a.size() >= 2 && a.size() == b.size(), op,
              ": self and other must have the same rank, 2 or more, got sizes ",
              a, " and ", b);
  const size_t rank = a.size();
  TORCH_CHECK(a[rank - 1] == b[rank - 2], op, ": self's last size (",
              a[rank - 1], ") must be other's second last (", b[rank - 2],
              "), got sizes ", a, " and ", b);
  std::vector<int64_t> out(rank);
  for (size_t i = 0; i + 2 < rank; ++i) {
    TORCH_CHECK(a[i] == b[i] || a[i] == 1 || b[i] == 1, op,
                ": batch sizes must be equal or 1, got sizes ", a, " and ", b);
    out[i] = std::max(a[i], b[i]);
  }
  out[rank - 2] = a[rank - 2];
  out[rank - 1] = b[rank - 1];
  return out;
}

// A plain strided description of `t`, its size-1 dimensions given the
// stride a dense tensor would have (any is right; oneDNN checks them).
memory::desc strided_desc(const at::Tensor& t) {
  memory::dims strides(t.strides().begin(), t.strides().end());
  int64_t dense = 1;
  for (int64_t i = t.dim() - 1; i >= 0; --i) {
    if (t.size(i) == 1) strides[i] = dense;
    dense *= t.size(i);
  }
  return memory::desc(dims_of(t.sizes()), DataType::f32, strides);
}

at::Tensor matmul(const at::Tensor& self, const at::Tensor& other,
                  double scale) {
  const char* op = "fx_onednn::matmul";
  for (const at::Tensor* t : {&self, &other}) {
    TORCH_CHECK(t->device().is_cpu() && t->scalar_type() == at::kFloat, op,
                ": self and other must be float32 CPU tensors, got ",
                t->toString());
  }
  const std::vector<int64_t> out_size =
      matmul_output_size(op, self.sizes(), other.sizes());
  at::Tensor dst = empty_activation(out_size, self.options());
  if (dst.numel() == 0) return dst;
  if (self.size(-1) == 0) return dst.zero_();

  std::string key;
  for (const at::Tensor* t : {&self, &other}) {
    append_key(&key, t->sizes());
    append_key(&key, t->strides());
  }
  absl::StrAppend(&key, at::get_num_threads(), "|");
  append_key(&key, scale);
  static PrimitiveCache<std::shared_ptr<const Matmul>> cache;
  const auto made = cache.get(key, [&] {
    dnnl::post_ops ops;
    if (scale != 1.0) {
      ops.append_eltwise(1.f, dnnl::algorithm::eltwise_linear,
                         static_cast<float>(scale), 0.f);
    }
    dnnl::primitive_attr attr;
    attr.set_post_ops(ops);
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    auto make = [&](const memory::desc& a, const memory::desc& b) {
      return dnnl::matmul::primitive_desc(
          dnnl::matmul::desc(a, b, strided_desc(dst)), attr, cpu_engine());
    };
    dnnl::matmul::primitive_desc pd =
        make(strided_desc(self), strided_desc(other));
    bool contiguous_inputs = false;
    if (is_reference(pd)) {
      dnnl::matmul::primitive_desc dense = make(
          strided_desc(self.contiguous()), strided_desc(other.contiguous()));
      if (!is_reference(dense)) {
        pd = dense;
        contiguous_inputs = true;
      }
    }
    return std::make_shared<const Matmul>(
        Matmul{pd, dnnl::matmul(pd), contiguous_inputs});
  });
  const at::Tensor a = made->contiguous_inputs ? self.contiguous() : self;
  const at::Tensor b = made->contiguous_inputs ? other.contiguous() : other;
  dnnl::engine& engine = cpu_engine();
  std::unordered_map<int, memory> args{
      {DNNL_ARG_SRC, memory(made->pd.src_desc(), engine, a.data_ptr())},
      {DNNL_ARG_WEIGHTS, memory(made->pd.weights_desc(), engine, b.data_ptr())},
      {DNNL_ARG_DST, memory(made->pd.dst_desc(), engine, dst.data_ptr())}};
  add_thread_scratchpad(made->pd, &args);
  last_kernel_name = made->pd.impl_info_str();
  made->primitive.execute(cpu_stream(), args);
  cpu_stream().wait();
  return dst;
}

at::Tensor matmul_meta(const at::Tensor& self, const at::Tensor& other,
                       double) {
  return at::empty(
      matmul_output_size("fx_onednn::matmul", self.sizes(), other.sizes()),
      self.options());
}

// --- Recurrent layers (LSTM, GRU) --------------------------------------------
// aten::lstm of layers without projections, in eval mode, on oneDNN's LSTM
// primitive, one layer after another; a bidirectional layer's directions
// each on its own, the reverse one reading the steps from the last
// (oneDNN's right-to-left), their outputs side by side. A layer's weights
// come as aten holds them transposed ([in, 4 * hidden] and [hidden, 4 *
// hidden] contiguous: oneDNN's ldigo, gates i, f, g, o as aten orders them)
// and one bias (b_ih + b_hh), made once by init steps: three per layer and
// direction, the forward direction's first.
struct RnnSizes {
  int64_t steps = 0, batch = 0, hidden = 0, directions = 1;
};

// `gates`: 4 for an LSTM (hx = [h0, c0]), 3 for a GRU (hx = [h0]); the
// bias then holds 4 gates' values (linear before reset: oneDNN's u, r, o
// and u').
RnnSizes rnn_sizes(const char* op, const at::Tensor& input,
                   at::TensorList hx, at::TensorList weights,
                   int64_t num_layers, bool batch_first, bool bidirectional,
                   int64_t gates = 4) {
  TORCH_CHECK(input.dim() == 3, op,
              ": the input must be 3-d ([T, N, C], or [N, T, C] with "
              "batch_first), got sizes ", input.sizes());
  RnnSizes z;
  z.directions = bidirectional ? 2 : 1;
  const int64_t layers = num_layers * z.directions;
  TORCH_CHECK(num_layers >= 1 &&
                  weights.size() == 3 * static_cast<size_t>(layers),
              op, ": expected 3 weights per layer", bidirectional ? " and direction" : "",
              " (input and hidden weights transposed, the summed bias) for ",
              num_layers, " layers", bidirectional ? " in 2 directions" : "",
              ", got ", weights.size());
  const size_t states = gates == 4 ? 2 : 1;
  TORCH_CHECK(hx.size() == states, op, ": hx must be ",
              states == 2 ? "[h0, c0]" : "[h0]", ", got ", hx.size(),
              " tensors");
  z.steps = input.size(batch_first ? 1 : 0);
  z.batch = input.size(batch_first ? 0 : 1);
  TORCH_CHECK(z.steps > 0, op, ": the input's sequence has no steps (sizes ",
              input.sizes(), batch_first ? ", batch first" : "",
              "); give it one or more, as aten's LSTM and GRU require");
  z.hidden = hx[0].dim() == 3 ? hx[0].size(2) : -1;
  for (const at::Tensor& h : hx) {
    TORCH_CHECK(h.dim() == 3 && h.size(0) == layers &&
                    h.size(1) == z.batch && h.size(2) == z.hidden,
                op, ": ", states == 2 ? "h0 and c0" : "h0", " must be [",
                bidirectional ? "2 * num_layers" : "num_layers",
                ", N, hidden] = [", layers, ", ", z.batch, ", ", z.hidden,
                "], got sizes ", h.sizes());
  }
  int64_t in = input.size(2);
  for (int64_t l = 0; l < layers; ++l) {
    const at::Tensor& w_layer = weights[3 * l];
    const at::Tensor& w_iter = weights[3 * l + 1];
    const at::Tensor& bias = weights[3 * l + 2];
    const int64_t width = gates * z.hidden;
    TORCH_CHECK(w_layer.sizes() == at::IntArrayRef({in, width}) &&
                    w_iter.sizes() == at::IntArrayRef({z.hidden, width}) &&
                    bias.numel() == 4 * z.hidden,
                op, ": layer ", l / z.directions,
                bidirectional ? (l % 2 == 0 ? " (forward)" : " (reverse)") : "",
                "'s weights must be [", in, ", ", width,
                "], [", z.hidden, ", ", width, "] and a bias of ",
                4 * z.hidden, " values, got sizes ", w_layer.sizes(), ", ",
                w_iter.sizes(), " and ", bias.sizes());
    if (l % z.directions == z.directions - 1) in = z.directions * z.hidden;
  }
  return z;
}

std::vector<int64_t> rnn_output_size(const at::Tensor& input,
                                     const RnnSizes& z) {
  return {input.size(0), input.size(1), z.directions * z.hidden};
}

// One primitive and its descriptor, per layer shape: an LSTM's
// (dnnl::lstm_forward) or a GRU's (dnnl::lbr_gru_forward).
template <typename Primitive>
struct Rnn {
  typename Primitive::primitive_desc pd;
  Primitive primitive;
};

// A layer's weight (aten's transposed one: ldigo) in the layout its kernel
// wants: oneDNN 2.6's brgemm RNN kernels' blocked one (the LSTM language
// model's layers ran in 0.7x the time of its reference driver on aten's
// layout at batch 1), or run_recurrences'; kept (ReorderedWeights). A
// weight that is not contiguous is reordered from its contiguous copy, for
// the call only.
memory rnn_weights(const at::Tensor& weight, const memory::desc& wanted,
                   at::Tensor* keep) {
  const at::Tensor plain = weight.contiguous();
  const memory::desc plain_desc(wanted.dims(), DataType::f32, Tag::ldigo);
  if (wanted == plain_desc) {
    *keep = plain;
  } else if (!weight.is_contiguous()) {
    *keep = ReorderedWeights::reordered(plain, plain_desc, wanted);
  } else {
    return ReorderedWeights::instance().get(plain, plain_desc, wanted, keep);
  }
  return memory(wanted, cpu_engine(), keep->data_ptr());
}

// run_recurrences' layout of the recurrent weights (packed[j / 16][k][g]
// [j % 16] of w[k][g * hidden + j]) as oneDNN describes blocked layouts, so
// that rnn_weights reorders and keeps them as it does the primitives': the
// dims of ldigo, the unit dimension (o) in blocks of 16 outermost.
memory::desc recurrence_weight_desc(int64_t hidden, int64_t gates) {
  memory::desc desc({1, 1, hidden, gates, hidden}, DataType::f32, Tag::ldigo);
  dnnl_blocking_desc_t& blocking = desc.data.format_desc.blocking;
  const int64_t strides[] = {gates * hidden * hidden, gates * hidden * hidden,
                             16 * gates, 16, 16 * gates * hidden};
  std::copy(std::begin(strides), std::end(strides), blocking.strides);
  blocking.inner_nblks = 1;
  blocking.inner_blks[0] = 16;
  blocking.inner_idxs[0] = 4;
  return desc;
}

// The states of layer and direction `index` ([layers * directions, N,
// hidden] tensors): h0 and c0 in, h_n and c_n out (c0 and c_n null for a
// GRU).
struct RnnStates {
  const float* h0;
  const float* c0;
  float* h_n;
  float* c_n;
};

// One LSTM or GRU layer at batch 1 by run_recurrences, both directions of a
// bidirectional one at once (run_recurrences: a thread group each): every
// step's input projection at once (a oneDNN matmul of the [steps, in]
// input and aten's transposed weight), then the steps. `weights` and
// `states` are the layer's directions'.
at::Tensor layer_at_batch_1(bool lstm, const at::Tensor& x,
                            at::TensorList weights, const RnnSizes& z,
                            const std::vector<RnnStates>& states) {
  const int64_t directions = z.directions;
  at::Tensor y = empty_activation(rnn_output_size(x, z), x.options());
  std::vector<at::Tensor> input_gates, bias, keep(directions);
  std::vector<Recurrence> layers(directions);
  for (int64_t d = 0; d < directions; ++d) {
    input_gates.push_back(
        matmul(x.view({z.steps, x.size(2)}), weights[3 * d], 1.0));
    bias.push_back(weights[3 * d + 2].contiguous());
    const memory packed =
        rnn_weights(weights[3 * d + 1],
                    recurrence_weight_desc(z.hidden, lstm ? 4 : 3), &keep[d]);
    Recurrence& layer = layers[d];
    layer.lstm = lstm;
    layer.steps = z.steps;
    layer.hidden = z.hidden;
    layer.input_gates = input_gates.back().data_ptr<float>();
    layer.bias = bias.back().data_ptr<float>();
    layer.packed_weights = static_cast<const float*>(packed.get_data_handle());
    layer.h0 = states[d].h0;
    layer.c0 = states[d].c0;
    layer.output = y.data_ptr<float>() + d * z.hidden;
    layer.output_stride = directions * z.hidden;
    layer.c_n = states[d].c_n;
    layer.reverse = d == 1;
  }
  run_recurrences(layers.data(), static_cast<int>(directions));
  for (int64_t d = 0; d < directions; ++d) {
    // h_n: the last step's output (the reverse direction's is row 0).
    const int64_t last = d == 1 ? 0 : z.steps - 1;
    std::memcpy(states[d].h_n,
                layers[d].output + last * layers[d].output_stride,
                z.hidden * sizeof(float));
  }
  last_kernel_name = "fx:recurrence:avx512f";
  return y;
}

// One direction of a layer on oneDNN's primitive, made for `threads`
// threads, ready to run: its output [steps, N, hidden] (batch_first: [N,
// steps, hidden]) and arguments but the scratchpad (the running thread's).
template <typename Primitive>
struct DirectionCall {
  std::shared_ptr<const Rnn<Primitive>> made;
  at::Tensor y, bias, keep_layer, keep_iter;
  std::unordered_map<int, memory> args;

  void run() {
    add_thread_scratchpad(made->pd, &args);
    made->primitive.execute(cpu_stream(), args);
    cpu_stream().wait();
  }
};

template <typename Primitive>
DirectionCall<Primitive> direction_call(const at::Tensor& x,
                                        at::TensorList weights,
                                        const RnnSizes& z, bool batch_first,
                                        bool reverse, int threads,
                                        const RnnStates& states) {
  constexpr bool kLstm = std::is_same_v<Primitive, dnnl::lstm_forward>;
  constexpr int64_t kGates = kLstm ? 4 : 3;
  const Tag layer_tag = batch_first ? Tag::ntc : Tag::tnc;
  dnnl::engine& engine = cpu_engine();
  const int64_t in = x.size(2);
  DirectionCall<Primitive> call;
  call.y = empty_activation({x.size(0), x.size(1), z.hidden}, x.options());
  std::string key;
  const int64_t shape[] = {z.steps, z.batch, in, z.hidden, batch_first,
                           reverse, threads};
  append_key(&key, shape);
  static PrimitiveCache<std::shared_ptr<const Rnn<Primitive>>> cache;
  call.made = cache.get(key, [&] {
    const memory::desc layer({z.steps, z.batch, in}, DataType::f32,
                             layer_tag);
    const memory::desc iter({1, 1, z.batch, z.hidden}, DataType::f32,
                            Tag::ldnc);
    // Weights in the layout the primitive prefers (rnn_weights).
    const memory::desc w_layer({1, 1, in, kGates, z.hidden}, DataType::f32,
                               Tag::any);
    const memory::desc w_iter({1, 1, z.hidden, kGates, z.hidden},
                              DataType::f32, Tag::any);
    const memory::desc bias({1, 1, 4, z.hidden}, DataType::f32, Tag::ldgo);
    const memory::desc dst({z.steps, z.batch, z.hidden}, DataType::f32,
                           layer_tag);
    const auto inference = dnnl::prop_kind::forward_inference;
    const auto direction = reverse
                               ? dnnl::rnn_direction::unidirectional_right2left
                               : dnnl::rnn_direction::unidirectional_left2right;
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    // oneDNN splits a primitive's work for the threads OpenMP offers this
    // thread when it is made (the offer restored however making ends).
    struct Offer {
      const int before = omp_get_max_threads();
      explicit Offer(int threads) { omp_set_num_threads(threads); }
      ~Offer() { omp_set_num_threads(before); }
    } offer(threads);
    typename Primitive::primitive_desc pd = [&] {
      if constexpr (kLstm) {
        return typename Primitive::primitive_desc(
            typename Primitive::desc(inference, direction, layer, iter, iter,
                                     w_layer, w_iter, bias, dst, iter, iter),
            attr, engine);
      } else {
        return typename Primitive::primitive_desc(
            typename Primitive::desc(inference, direction, layer, iter,
                                     w_layer, w_iter, bias, dst, iter),
            attr, engine);
      }
    }();
    return std::make_shared<const Rnn<Primitive>>(
        Rnn<Primitive>{pd, Primitive(pd)});
  });
  const auto& pd = call.made->pd;
  call.bias = weights[2].contiguous();
  call.args = {
      {DNNL_ARG_SRC_LAYER, memory(pd.src_layer_desc(), engine, x.data_ptr())},
      {DNNL_ARG_SRC_ITER,
       memory(pd.src_iter_desc(), engine, const_cast<float*>(states.h0))},
      {DNNL_ARG_WEIGHTS_LAYER,
       rnn_weights(weights[0], pd.weights_layer_desc(), &call.keep_layer)},
      {DNNL_ARG_WEIGHTS_ITER,
       rnn_weights(weights[1], pd.weights_iter_desc(), &call.keep_iter)},
      {DNNL_ARG_BIAS, memory(pd.bias_desc(), engine, call.bias.data_ptr())},
      {DNNL_ARG_DST_LAYER,
       memory(pd.dst_layer_desc(), engine, call.y.data_ptr())},
      {DNNL_ARG_DST_ITER, memory(pd.dst_iter_desc(), engine, states.h_n)}};
  if constexpr (kLstm) {
    call.args.emplace(DNNL_ARG_SRC_ITER_C,
                      memory(pd.src_iter_c_desc(), engine,
                             const_cast<float*>(states.c0)));
    call.args.emplace(DNNL_ARG_DST_ITER_C,
                      memory(pd.dst_iter_c_desc(), engine, states.c_n));
  }
  last_kernel_name = pd.impl_info_str();
  return call;
}

// A layer's directions on oneDNN's primitives. On two threads a
// bidirectional layer's directions run at once, a one-thread primitive
// each (an LSTM layer of 256 units at batch 8: 0.70-0.79x the time of
// both threads on one direction after the other, whose steps each meet at
// a barrier); else one after another on the whole team.
template <typename Primitive>
at::Tensor layer_on_primitives(const at::Tensor& x, at::TensorList weights,
                               const RnnSizes& z, bool batch_first,
                               const std::vector<RnnStates>& states) {
  const int team = at::get_num_threads();
  const bool at_once = z.directions == 2 && team == 2;
  std::vector<DirectionCall<Primitive>> calls;
  for (int64_t d = 0; d < z.directions; ++d) {
    calls.push_back(direction_call<Primitive>(
        x, weights.slice(3 * d, 3), z, batch_first, d == 1,
        at_once ? 1 : team, states[d]));
  }
  if (at_once) {
    GOMP_parallel(
        [](void* data) {
          auto& calls = *static_cast<std::vector<DirectionCall<Primitive>>*>(data);
          // A team of one (inside another parallel region) runs both.
          if (omp_get_num_threads() < 2) {
            for (DirectionCall<Primitive>& call : calls) call.run();
          } else if (omp_get_thread_num() < 2) {
            calls[omp_get_thread_num()].run();
          }
        },
        &calls, 2, 0);
  } else {
    for (DirectionCall<Primitive>& call : calls) call.run();
  }
  if (calls.size() == 1) return calls[0].y;
  return at::cat({calls[0].y, calls[1].y}, 2);
}

// The layers of an LSTM (hx = [h0, c0]) or a GRU (hx = [h0]) one after
// another: the output, then the final states.
template <typename Primitive>
std::vector<at::Tensor> run_rnn(const char* op, const at::Tensor& input,
                                at::TensorList hx, at::TensorList weights,
                                int64_t num_layers, bool batch_first,
                                bool bidirectional) {
  constexpr bool kLstm = std::is_same_v<Primitive, dnnl::lstm_forward>;
  constexpr int64_t kGates = kLstm ? 4 : 3;
  // Every tensor is read as float32 data.
  for (at::TensorList list : {at::TensorList(input), hx, weights}) {
    for (const at::Tensor& t : list) {
      TORCH_CHECK(t.device().is_cpu() && t.scalar_type() == at::kFloat, op,
                  ": the input, states and weights must be float32 CPU "
                  "tensors, got ", t.toString());
    }
  }
  const RnnSizes z = rnn_sizes(op, input, hx, weights, num_layers,
                               batch_first, bidirectional, kGates);
  std::vector<at::Tensor> first, out = {at::Tensor()};
  for (const at::Tensor& h : hx) {
    first.push_back(h.contiguous());
    out.push_back(at::empty_like(first.back()));
  }
  at::Tensor x = input.contiguous();
  // A batch of none (rnn_sizes refuses a sequence of no steps): empty
  // outputs, the states as they came.
  if (z.batch == 0) {
    for (size_t i = 0; i < first.size(); ++i) out[i + 1].copy_(first[i]);
    out[0] = empty_activation(rnn_output_size(input, z), input.options());
    return out;
  }
  const int64_t state = z.batch * z.hidden;
  auto at_layer = [&](const at::Tensor& t, int64_t l) {
    return static_cast<float*>(t.data_ptr()) + l * state;
  };
  for (int64_t l = 0; l < num_layers; ++l) {
    std::vector<RnnStates> states;
    for (int64_t d = 0; d < z.directions; ++d) {
      const int64_t index = l * z.directions + d;
      states.push_back(
          {at_layer(first[0], index), kLstm ? at_layer(first[1], index) : nullptr,
           at_layer(out[1], index), kLstm ? at_layer(out[2], index) : nullptr});
    }
    const at::TensorList layer_weights =
        weights.slice(3 * l * z.directions, 3 * z.directions);
    if (recurrence_runs(z.batch, z.hidden)) {
      x = layer_at_batch_1(kLstm, x, layer_weights, z, states);
      continue;
    }
    x = layer_on_primitives<Primitive>(x, layer_weights, z, batch_first,
                                       states);
  }
  out[0] = x;
  return out;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm(
    const at::Tensor& input, at::TensorList hx, at::TensorList weights,
    int64_t num_layers, bool batch_first, bool bidirectional) {
  std::vector<at::Tensor> out =
      run_rnn<dnnl::lstm_forward>("fx_onednn::lstm", input, hx, weights,
                                  num_layers, batch_first, bidirectional);
  return {out[0], out[1], out[2]};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_meta(
    const at::Tensor& input, at::TensorList hx, at::TensorList weights,
    int64_t num_layers, bool batch_first, bool bidirectional) {
  const RnnSizes z = rnn_sizes("fx_onednn::lstm", input, hx, weights,
                               num_layers, batch_first, bidirectional);
  return {at::empty(rnn_output_size(input, z), input.options()),
          at::empty_like(hx[0]), at::empty_like(hx[1])};
}

// aten::gru likewise, on oneDNN's linear-before-reset GRU (PyTorch's): a
// layer's weights transposed with the gates reordered to oneDNN's (u, r, o:
// aten's z, r, n) and the bias [b_iz + b_hz, b_ir + b_hr, b_in, b_hn].
std::tuple<at::Tensor, at::Tensor> gru(const at::Tensor& input,
                                       const at::Tensor& hx,
                                       at::TensorList weights,
                                       int64_t num_layers, bool batch_first,
                                       bool bidirectional) {
  std::vector<at::Tensor> out =
      run_rnn<dnnl::lbr_gru_forward>("fx_onednn::gru", input, {hx}, weights,
                                     num_layers, batch_first, bidirectional);
  return {out[0], out[1]};
}

std::tuple<at::Tensor, at::Tensor> gru_meta(const at::Tensor& input,
                                            const at::Tensor& hx,
                                            at::TensorList weights,
                                            int64_t num_layers,
                                            bool batch_first,
                                            bool bidirectional) {
  const RnnSizes z = rnn_sizes("fx_onednn::gru", input, {hx}, weights,
                               num_layers, batch_first, bidirectional, 3);
  return {at::empty(rnn_output_size(input, z), input.options()),
          at::empty_like(hx)};
}

}  // namespace

TORCH_LIBRARY_IMPL(fx_onednn, CPU, m) {
  m.impl("pack_linear_weight", &pack_linear_weight);
  m.impl("linear", &linear);
  m.impl("pack_conv_transpose_weight", &pack_conv_transpose_weight);
  m.impl("conv_transpose", &conv_transpose);
  m.impl("matmul", &matmul);
  m.impl("lstm", &lstm);
  m.impl("gru", &gru);
}

TORCH_LIBRARY_IMPL(fx_onednn, Meta, m) {
  m.impl("pack_linear_weight", &pack_linear_weight_meta);
  m.impl("linear", &linear_meta);
  m.impl("pack_conv_transpose_weight", &pack_conv_transpose_weight_meta);
  m.impl("conv_transpose", &conv_transpose_meta);
  m.impl("matmul", &matmul_meta);
  m.impl("lstm", &lstm_meta);
  m.impl("gru", &gru_meta);
}

}  // namespace fx::onednn
