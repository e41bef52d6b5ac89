// oneDNN's convolutions: direct, Winograd, a planar first layer, residual
// sums in place, and chains of convolutions in one parallel region.
// Registered here with the dispatcher (their schemas: onednn_ops.cc).
#include "lowering/onednn_ops.h"

#include <torch/library.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <absl/container/flat_hash_map.h>
#include <absl/strings/str_split.h>

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

namespace fx::onednn {
namespace {

using namespace internal;  // NOLINT: the operators' shared layer

// src in `compute` (the weights' type), dst in `output`, bias in float32.
dnnl::convolution_forward::primitive_desc conv_descriptor(
    at::IntArrayRef input, const ConvGeometry& g,
    const memory::desc& weight_desc, bool bias,
    const dnnl::primitive_attr& attr, DataType compute = DataType::f32,
    DataType output = DataType::f32, Tag src_layout = Tag::undef,
    Tag dst_layout = Tag::undef) {
  const ActivationDescs d = activation_descs(
      input, g.output_size, bias, compute, output, src_layout, dst_layout);
  dnnl::convolution_forward::desc desc(
      dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
      d.src, weight_desc, d.bias, d.dst, g.strides, g.dilates, g.padding,
      g.padding);
  return dnnl::convolution_forward::primitive_desc(desc, attr, cpu_engine());
}

at::Tensor pack_conv_weight(const at::Tensor& weight,
                            at::IntArrayRef input_size, at::IntArrayRef stride,
                            at::IntArrayRef padding, at::IntArrayRef dilation,
                            int64_t groups, bool bf16) {
  const char* op = "fx_onednn::pack_conv_weight";
  TORCH_CHECK(weight.device().is_cpu() && weight.scalar_type() == at::kFloat,
              op, ": the weight must be a float32 CPU tensor, got ",
              weight.toString());
  check_bf16(op, bf16);
  const ConvGeometry g = conv_geometry(op, input_size, weight.sizes(), stride,
                                       padding, dilation, groups);
  const DataType type = bf16 ? DataType::bf16 : DataType::f32;
  const auto pd = conv_descriptor(
      input_size, g, conv_weight_desc(weight.sizes(), groups, Tag::any, type),
      /*bias=*/true, dnnl::primitive_attr(), type, type);
  return pack(weight, plain_weight_desc(PackKind::kConv, weight.sizes(), groups),
              pd.weights_desc(), weight.sizes(), PackKind::kConv);
}

struct Conv {
  dnnl::convolution_forward::primitive_desc pd;
  dnnl::convolution_forward primitive;
  std::shared_ptr<const Reorder> weights_reorder;  // or null
  // A Winograd convolution reads and writes oneDNN's blocked layout: the
  // reorders of the channels-last src into it, of dst out of it, and (with
  // a residual) of dst into it.
  bool winograd = false;
  std::shared_ptr<const Reorder> src_in = nullptr, dst_in = nullptr,
                                 dst_out = nullptr;
};

// --- Winograd convolutions ----------------------------------------------------
// 3x3 convolutions of stride 1 on oneDNN's Winograd kernels (F(2x2, 3x3)
// and F(4x4, 3x3), float32): at 14x14 and larger outputs, in 0.45-0.8x the
// time of its direct ones, the reorders into their blocked layout and back
// included (64-256 channels, batch 1 and 8); at 7x7, slower (1.3-1.4x at
// batch 8), so not there. Their weights are reordered from the packed ones
// at the first call and kept (ReorderedWeights: 1.8x the weight's size for
// F(2x2), 4x for F(4x4)). They take relu (and the residual sum) as their
// only post-ops; a convolution fusing another activation stays direct.
std::atomic<bool> winograd_enabled{true};

bool winograd_candidate(at::IntArrayRef input, at::IntArrayRef weight,
                        const ConvGeometry& g, int64_t groups,
                        DataType compute, DataType output,
                        c10::string_view activation) {
  return winograd_enabled.load() && input.size() == 4 && groups == 1 &&
         weight[2] == 3 && weight[3] == 3 && g.strides == memory::dims{1, 1} &&
         g.dilates == memory::dims{0, 0} && compute == DataType::f32 &&
         output == DataType::f32 &&
         (activation == "none" || activation == "relu") &&
         g.output_size[2] >= 14 && g.output_size[3] >= 14;
}

// The Winograd convolution for a call, or null when oneDNN has none for it
// (an unsupported post-op, channel count or ISA).
std::shared_ptr<const Conv> make_winograd(at::IntArrayRef input,
                                          at::IntArrayRef weight,
                                          const ConvGeometry& g, bool bias,
                                          bool sum,
                                          const dnnl::primitive_attr& attr) {
  const ActivationDescs d = activation_descs(input, g.output_size, bias,
                                             DataType::f32, DataType::f32);
  try {
    dnnl::convolution_forward::desc desc(
        dnnl::prop_kind::forward_inference,
        dnnl::algorithm::convolution_winograd,
        memory::desc(d.src.dims(), DataType::f32, Tag::any),
        conv_weight_desc(weight, 1, Tag::any), d.bias,
        memory::desc(d.dst.dims(), DataType::f32, Tag::any), g.strides,
        g.dilates, g.padding, g.padding);
    dnnl::convolution_forward::primitive_desc pd(desc, attr, cpu_engine());
    if (is_reference(pd)) return nullptr;
    auto conv = std::make_shared<Conv>(
        Conv{pd, dnnl::convolution_forward(pd), nullptr});
    conv->winograd = true;
    conv->src_in = make_reorder(d.src, pd.src_desc());
    conv->dst_out = make_reorder(pd.dst_desc(), d.dst);
    if (sum) conv->dst_in = make_reorder(d.dst, pd.dst_desc());
    return conv;
  } catch (const dnnl::error&) {
    return nullptr;
  }
}

// A Winograd convolution from the channels-last `src` into `dst` (which
// holds the residual on entry with a sum post-op), through blocked copies.
void run_winograd(const char* op, const Conv& made, const at::Tensor& src,
                  const at::Tensor& weight, const Header& header,
                  const c10::optional<at::Tensor>& bias, int64_t channels,
                  const at::Tensor& dst, bool sum) {
  const at::Tensor bias_values = float_bias(op, bias, channels);
  const bool has_bias = bias_values.defined();
  at::Tensor keep;
  const memory weights = ReorderedWeights::instance().get(
      weight, memory::desc(header.desc), made.pd.weights_desc(), &keep);
  dnnl::engine& engine = cpu_engine();
  auto blocked = [&](const memory::desc& desc) {
    return empty_activation({static_cast<int64_t>(desc.get_size())},
                            at::TensorOptions(at::kByte));
  };
  const at::Tensor src_blocked = blocked(made.pd.src_desc());
  const at::Tensor dst_blocked = blocked(made.pd.dst_desc());
  const memory src_memory(made.pd.src_desc(), engine, src_blocked.data_ptr());
  const memory dst_memory(made.pd.dst_desc(), engine, dst_blocked.data_ptr());
  run_reorder(*made.src_in, src.data_ptr(), src_blocked.data_ptr());
  if (sum) run_reorder(*made.dst_in, dst.data_ptr(), dst_blocked.data_ptr());
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src_memory},
                                       {DNNL_ARG_WEIGHTS, weights},
                                       {DNNL_ARG_DST, dst_memory}};
  if (has_bias) {
    args.emplace(DNNL_ARG_BIAS, memory(made.pd.bias_desc(), engine,
                                       bias_values.data_ptr()));
  }
  add_thread_scratchpad(made.pd, &args);
  last_kernel_name = made.pd.impl_info_str();
  made.primitive.execute(cpu_stream(), args);
  run_reorder(*made.dst_out, dst_blocked.data_ptr(), dst.data_ptr());
  cpu_stream().wait();
}

// What a convolution call runs: its primitive (and Winograd's reorders),
// the output's sizes, and whether SiLU runs as a pass after it.
struct ConvPlan {
  std::shared_ptr<const Conv> made;
  std::vector<int64_t> output_size, output_strides;  // channels-last
  at::ScalarType compute = at::kFloat;  // the input's, converted
  bool silu_pass = false;
  bool planar_src = false;  // reads the input as it is (planar_first_conv)
};

// --- A first convolution of 16 channels on a planar image ------------------
// The first convolution of a vision model reads an NCHW image of 3
// channels, which the others' channels-last layout would copy first
// (rgb_to_channels_last: 26 us at batch 1, 190 us at batch 8). With 16
// output channels (MobileNetV3's), oneDNN's first-layer kernel reads the
// planes themselves and writes nChw16c, which for 16 channels is the
// channels-last layout byte for byte: the copy goes (MobileNetV3-Small's
// first layer at batch 8 480 -> 320 us). With more channels its blocked
// output would need a copy of its own, larger than the image's.
bool planar_first_conv(const at::Tensor& input, at::IntArrayRef weight,
                       int64_t groups, DataType compute, DataType output) {
  return input.dim() == 4 && input.size(1) < 16 && weight[0] == 16 &&
         groups == 1 && compute == DataType::f32 &&
         output == DataType::f32 && input.is_contiguous() &&
         !is_channels_last_dense(input);
}

ConvPlan make_conv_plan(const char* op, const at::Tensor& input,
                        const at::Tensor& weight, const Header& header,
                        bool has_bias, at::IntArrayRef stride,
                        at::IntArrayRef padding, at::IntArrayRef dilation,
                        int64_t groups, bool sum, c10::string_view activation,
                        double alpha, double beta, DataType output) {
  const ConvGeometry g = conv_geometry(op, input.sizes(), weight.sizes(),
                                       stride, padding, dilation, groups);
  const DataType compute = compute_type(op, header, input);
  std::string key;
  absl::StrAppend(&key, static_cast<int>(compute), static_cast<int>(output),
                  "|");
  append_key(&key, input.sizes());
  append_key(&key, g.output_size);
  append_key(&key, stride);
  append_key(&key, padding);
  append_key(&key, dilation);
  absl::StrAppend(&key, groups, "|", has_bias, sum, "|",
                  std::string(activation), "|", at::get_num_threads(), "|");
  append_key(&key, alpha);
  append_key(&key, beta);
  key.append(reinterpret_cast<const char*>(&header.desc), sizeof(header.desc));
  const bool winograd =
      winograd_candidate(input.sizes(), weight.sizes(), g, groups, compute,
                         output, activation);
  key.push_back(winograd ? 'w' : 'd');
  const bool planar =
      planar_first_conv(input, weight.sizes(), groups, compute, output);

  ConvPlan plan;
  plan.compute = scalar_type_of(compute);
  plan.silu_pass = silu_as_pass(activation, output);
  plan.output_size = g.output_size;
  plan.output_strides = channels_last_strides(g.output_size);
  const dnnl::primitive_attr attr =
      post_ops(op, sum, plan.silu_pass ? "none" : activation, alpha, beta);
  // The direct convolution from src_layout into dst_layout (Tag::undef:
  // channels-last).
  auto direct = [&](Tag src_layout, Tag dst_layout) {
    std::shared_ptr<const Reorder> reorder;
    auto pd = for_packed_weights<dnnl::convolution_forward::primitive_desc>(
        [&](const memory::desc& weights) {
          return conv_descriptor(input.sizes(), g, weights, has_bias, attr,
                                 compute, output, src_layout, dst_layout);
        },
        memory::desc(header.desc),
        conv_weight_desc(weight.sizes(), groups, Tag::any, compute),
        &reorder);
    return std::make_shared<const Conv>(
        Conv{pd, dnnl::convolution_forward(pd), reorder});
  };
  static PrimitiveCache<std::shared_ptr<const Conv>> cache;
  if (planar) {
    plan.made = cache.get(key + "p", [&]() -> std::shared_ptr<const Conv> {
      auto conv = direct(Tag::nchw, Tag::nChw16c);
      return is_reference(conv->pd) ? nullptr : conv;
    });
    if (plan.made) {
      plan.planar_src = true;
      return plan;
    }
  }
  plan.made = cache.get(key, [&]() -> std::shared_ptr<const Conv> {
    if (winograd) {
      if (auto conv = make_winograd(input.sizes(), weight.sizes(), g,
                                    has_bias, sum, attr)) {
        return conv;
      }
    }
    return direct(Tag::undef, Tag::undef);
  });
  return plan;
}

const ConvPlan& conv_plan(const char* op, const at::Tensor& input,
                          const at::Tensor& weight, const Header& header,
                          bool has_bias, at::IntArrayRef stride,
                          at::IntArrayRef padding, at::IntArrayRef dilation,
                          int64_t groups, bool sum,
                          c10::string_view activation, double alpha,
                          double beta, DataType output) {
  SiteArgs args{{}, activation, alpha, beta};
  for (at::IntArrayRef list : {input.sizes(), stride, padding, dilation}) {
    args.ints.push_back(static_cast<int64_t>(list.size()));
    args.ints.insert(args.ints.end(), list.begin(), list.end());
  }
  args.ints.insert(args.ints.end(),
                   {static_cast<int64_t>(input.scalar_type()),
                    static_cast<int64_t>(output), groups, has_bias, sum,
                    winograd_enabled.load(), is_channels_last_dense(input),
                    input.is_contiguous()});
  return plan_for_site<ConvPlan>(weight, header, std::move(args), [&] {
    return make_conv_plan(op, input, weight, header, has_bias, stride,
                          padding, dilation, groups, sum, activation, alpha,
                          beta, output);
  });
}

// Runs the convolution planned for this call into `dst` (channels-last
// dense, of the output's sizes); with `sum`, dst holds the residual on
// entry.
void conv_into(const char* op, const at::Tensor& dst, const at::Tensor& input,
               const at::Tensor& weight, const Header& header,
               const c10::optional<at::Tensor>& bias, const ConvPlan& plan,
               bool sum) {
  at::Tensor src =
      input.scalar_type() == plan.compute ? input : input.to(plan.compute);
  if (!plan.planar_src) src = to_channels_last(src);
  const int64_t channels = plan.output_size[1];
  const Conv& made = *plan.made;
  if (made.winograd) {
    run_winograd(op, made, src, weight, header, bias, channels, dst, sum);
  } else {
    run_with_weights(op, plan.made, src, weight, header, bias, channels, dst);
  }
  if (plan.silu_pass) silu_in_place(dst.data_ptr<float>(), dst.numel());
}

void check_residual(const char* op, const at::Tensor& other,
                    at::IntArrayRef output_size) {
  TORCH_CHECK(other.sizes() == output_size, op, ": the residual has sizes ",
              other.sizes(), " but the convolution's output has ",
              output_size, "; the residual must match it exactly");
  TORCH_CHECK(other.device().is_cpu(), op,
              ": the residual must be a CPU tensor, got ", other.toString());
  data_type_of(op, other, "residual");
}

at::Tensor conv(const at::Tensor& input, const at::Tensor& weight,
                const c10::optional<at::Tensor>& bias, at::IntArrayRef stride,
                at::IntArrayRef padding, at::IntArrayRef dilation,
                int64_t groups, const c10::optional<at::Tensor>& other,
                c10::string_view activation, double alpha, double beta) {
  const char* op = "fx_onednn::conv";
  check_input(op, input);
  const Header& header =
      header_of(weight, op, "fx_onednn::pack_conv_weight");
  const bool has_other = other.has_value() && other->defined();
  const ConvPlan& plan = conv_plan(
      op, input, weight, header, bias.has_value() && bias->defined(), stride,
      padding, dilation, groups, has_other, activation, alpha, beta,
      data_type_of(op, input, "input"));
  at::Tensor dst = empty_activation(plan.output_size, plan.output_strides,
                                    input.options());
  if (has_other) {
    check_residual(op, *other, dst.sizes());
    dst.copy_(*other);
  }
  conv_into(op, dst, input, weight, header, bias, plan, has_other);
  return dst;
}

// self = activation(self + conv(input)), in self's memory.
at::Tensor& conv_add_(at::Tensor& self, const at::Tensor& input,
                      const at::Tensor& weight,
                      const c10::optional<at::Tensor>& bias,
                      at::IntArrayRef stride, at::IntArrayRef padding,
                      at::IntArrayRef dilation, int64_t groups,
                      c10::string_view activation, double alpha,
                      double beta) {
  const char* op = "fx_onednn::conv_add_";
  check_input(op, input);
  const Header& header =
      header_of(weight, op, "fx_onednn::pack_conv_weight");
  TORCH_CHECK(self.scalar_type() == input.scalar_type(), op,
              ": the residual (", self.toString(), ") and the input (",
              input.toString(), ") must have one dtype");
  const ConvPlan& plan = conv_plan(
      op, input, weight, header, bias.has_value() && bias->defined(), stride,
      padding, dilation, groups, true, activation, alpha, beta,
      data_type_of(op, self, "residual"));
  check_residual(op, self, plan.output_size);
  if (is_channels_last_dense(self) && self.numel() > 0) {
    conv_into(op, self, input, weight, header, bias, plan, true);
  } else {
    at::Tensor dst = to_channels_last(self).clone();
    conv_into(op, dst, input, weight, header, bias, plan, true);
    self.copy_(dst);
  }
  return self;
}

at::Tensor conv_meta(const at::Tensor& input, const at::Tensor& weight,
                     const c10::optional<at::Tensor>&, at::IntArrayRef stride,
                     at::IntArrayRef padding, at::IntArrayRef dilation,
                     int64_t groups, const c10::optional<at::Tensor>&,
                     c10::string_view, double, double) {
  const ConvGeometry g =
      conv_geometry("fx_onednn::conv", input.sizes(), weight.sizes(), stride,
                    padding, dilation, groups);
  return empty_channels_last(g.output_size, input.options());
}

at::Tensor& conv_add_meta(at::Tensor& self, const at::Tensor& input,
                          const at::Tensor& weight,
                          const c10::optional<at::Tensor>&,
                          at::IntArrayRef stride, at::IntArrayRef padding,
                          at::IntArrayRef dilation, int64_t groups,
                          c10::string_view, double, double) {
  const ConvGeometry g =
      conv_geometry("fx_onednn::conv_add_", input.sizes(), weight.sizes(),
                    stride, padding, dilation, groups);
  check_residual("fx_onednn::conv_add_", self, g.output_size);
  return self;
}

at::Tensor pack_conv_weight_meta(const at::Tensor& weight, at::IntArrayRef,
                                 at::IntArrayRef, at::IntArrayRef,
                                 at::IntArrayRef, int64_t, bool) {
  return at::empty(weight.sizes(), weight.options());
}

// --- Convolution chains ------------------------------------------------------
// A run of convolutions each reading the one before (MobileNetV2's 51 after
// its first) as one call: each thread of one parallel region takes the same
// rows of every layer's output and runs a one-thread primitive on them,
// waiting for the others only before a layer that reads rows another
// thread wrote (a k x k convolution's neighbouring rows) or that writes
// memory another thread may still read. Called one by one, every layer
// forks and joins the team: at batch 1 on two threads, a small layer's
// waits cost as much as its work (MobileNetV2's 51 layers: 0.94-0.96x the
// time as one region). The values between the layers live in a few
// buffers, reused once every thread is past their last reader.
constexpr int64_t kChainInts = 4;  // per layer: stride, padding, groups, residual

struct ChainLayer {
  int64_t stride, padding, groups, residual;  // residual: a value, or -1
  std::vector<int64_t> input_size, output_size;
  c10::string_view activation;
  double alpha, beta;
};

// One thread's part of one layer: its rows' primitive (null when it has
// none), where they read and write, and whether all threads wait first.
struct ChainStep {
  std::shared_ptr<const Conv> made;
  bool silu_pass = false;
  int64_t src_value = 0, dst_value = 0;
  int64_t src_offset = 0, dst_offset = 0, dst_floats = 0;  // floats
  bool barrier = false;
};

struct ChainPlan {
  int threads = 1;
  std::vector<std::vector<ChainStep>> steps;  // [thread][layer]
  std::vector<int64_t> value_slot;            // -1: the chain's input
  std::vector<int64_t> slot_floats;
};

// The layers of a chain, checked: one weight, bias, activation and two
// parameters per layer, kChainInts ints, and each residual an earlier
// layer's output of the same sizes.
std::vector<ChainLayer> chain_layers(const char* op, const at::Tensor& input,
                                     at::TensorList weights,
                                     at::TensorList biases,
                                     at::IntArrayRef layers,
                                     c10::string_view activation_list,
                                     at::ArrayRef<double> params) {
  const int64_t n = static_cast<int64_t>(weights.size());
  // The activations, one per layer, separated by commas.
  const std::vector<absl::string_view> activations = absl::StrSplit(
      absl::string_view(activation_list.data(), activation_list.size()), ',');
  TORCH_CHECK(n >= 1 && static_cast<int64_t>(biases.size()) == n &&
                  static_cast<int64_t>(layers.size()) == kChainInts * n &&
                  static_cast<int64_t>(activations.size()) == n &&
                  static_cast<int64_t>(params.size()) == 2 * n,
              op, ": a chain of n layers takes n weights, n biases, ",
              kChainInts, "n ints (stride, padding, groups, residual), n "
              "activations (separated by commas) and 2n parameters; got ", weights.size(), ", ",
              biases.size(), ", ", layers.size(), ", ", activations.size(),
              " and ", params.size());
  TORCH_CHECK(input.dim() == 4, op, ": the input must be 4-d, got ",
              input.sizes());
  std::vector<ChainLayer> out;
  std::vector<bool> overwritten(n + 1, false);
  std::vector<int64_t> size = input.sizes().vec();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t* l = layers.data() + kChainInts * i;
    ChainLayer layer{l[0], l[1], l[2], l[3], size, {},
                     c10::string_view(activations[i].data(),
                                      activations[i].size()),
                     params[2 * i], params[2 * i + 1]};
    const ConvGeometry g = conv_geometry(
        op, size, weights[i].sizes(), {layer.stride, layer.stride},
        {layer.padding, layer.padding}, {1, 1}, layer.groups);
    layer.output_size = g.output_size;
    // A value another layer added into since holds that sum now.
    TORCH_CHECK(layer.residual == -1 ||
                    (layer.residual >= 1 && layer.residual < i &&
                     out[layer.residual - 1].output_size == g.output_size &&
                     !overwritten[layer.residual]),
                op, ": layer ", i, "'s residual must be -1 or the output of "
                "a layer before its input's (1 to ", i - 1, "), of its "
                "output's sizes ", g.output_size, " and not added into by "
                "another layer since, got ", layer.residual);
    if (layer.residual >= 0) overwritten[layer.residual] = true;
    out.push_back(std::move(layer));
    size = g.output_size;
  }
  return out;
}

// Thread t's part of layer `l`'s output and the part of its input that
// part reads, in pixels: a 1x1 convolution of stride 1 takes an equal
// share of the pixels (at 7x7, rows would split 3:4), any other whole rows
// (`rows`; their input rows clamped to the input, the rest padding). A
// primitive needs at least one input row: where some thread's rows would
// read padding only (a padding larger than the kernel reaches, on a tiny
// image), thread 0 takes all the layer's rows.
struct ChainPart {
  int64_t first, last, in_first, in_last;
  bool pointwise;
  int64_t rows, in_rows, row;  // row: the first output row
};
ChainPart chain_rows(const ChainLayer& l, int64_t kernel, int64_t first,
                     int64_t last) {
  const int64_t width = l.input_size[3], out_width = l.output_size[3];
  const int64_t in_first =
      std::max<int64_t>(first * l.stride - l.padding, 0);
  const int64_t in_last = std::min<int64_t>(
      (last - 1) * l.stride - l.padding + kernel, l.input_size[2]);
  return {first * out_width, last * out_width, in_first * width,
          in_last * width, false, last - first, in_last - in_first, first};
}
ChainPart chain_part(const ChainLayer& l, int64_t kernel, int t, int threads) {
  const int64_t out_width = l.output_size[3];
  if (kernel == 1 && l.stride == 1 && l.padding == 0) {
    auto [first, last] =
        thread_share(l.output_size[2] * out_width, t, threads);
    return {first, last, first, last, true, 0, 0, 0};
  }
  for (int other = 0; other < threads; ++other) {
    auto [first, last] = thread_share(l.output_size[2], other, threads);
    if (first < last && chain_rows(l, kernel, first, last).in_rows <= 0) {
      return t == 0 ? chain_rows(l, kernel, 0, l.output_size[2])
                    : ChainPart{0, 0, 0, 0, false, 0, 0, 0};
    }
  }
  auto [first, last] = thread_share(l.output_size[2], t, threads);
  return chain_rows(l, kernel, first, last);
}

std::shared_ptr<const ChainPlan> make_chain_plan(
    const char* op, const std::vector<ChainLayer>& layers,
    at::TensorList weights, int threads) {
  const int64_t n = static_cast<int64_t>(layers.size());
  auto plan = std::make_shared<ChainPlan>();
  plan->threads = threads;
  // Which rows of each value each thread wrote (the input: all, before).
  auto kernel = [&](int64_t i) { return weights[i].size(2); };
  auto own = [&](int64_t value, int t, int64_t first, int64_t last) {
    if (value == 0) return true;
    const ChainPart r = chain_part(layers[value - 1], kernel(value - 1), t,
                                   threads);
    return first >= r.first && last <= r.last;
  };
  // The value whose memory each value is (a residual layer writes into
  // its residual's), and when each memory is last read or written.
  std::vector<int64_t> root(n + 1), last_use(n + 1, 0);
  for (int64_t v = 0; v <= n; ++v) {
    root[v] = v == 0 || layers[v - 1].residual < 0
                  ? v
                  : root[layers[v - 1].residual];
  }
  std::vector<bool> barrier(n, false);
  // Whether the threads wait before any layer in (after, upto].
  auto waited_between = [&](int64_t after, int64_t upto) {
    for (int64_t k = after + 1; k <= upto; ++k) {
      if (barrier[k]) return true;
    }
    return false;
  };
  // Per memory, the last layer that read rows of it another thread wrote.
  std::vector<int64_t> crossed_at(n + 1, -1);
  for (int64_t i = 0; i < n; ++i) {
    const ChainLayer& l = layers[i];
    bool crosses = false, residual_crosses = false;
    for (int t = 0; t < threads; ++t) {
      const ChainPart r = chain_part(l, kernel(i), t, threads);
      if (r.first == r.last) continue;
      crosses |= !own(i, t, r.in_first, r.in_last);
      if (l.residual >= 0) {
        residual_crosses |= !own(l.residual, t, r.first, r.last);
      }
    }
    // Writing in place where another thread still reads waits for it.
    const int64_t crossed = l.residual >= 0 ? crossed_at[root[l.residual]] : -1;
    barrier[i] = crosses || residual_crosses ||
                 (crossed >= 0 && !waited_between(crossed, i - 1));
    if (crosses) crossed_at[root[i]] = i;
    last_use[root[i]] = i;
    if (l.residual >= 0) last_use[root[l.residual]] = i;
  }
  last_use[root[n]] = n;  // the output outlives the chain
  // A memory per value that is not a residual's: a buffer another memory
  // left, once every thread is past its last use, or a new one.
  std::vector<int64_t> holder;  // per slot, the memory in it
  plan->value_slot.assign(n + 1, -1);
  for (int64_t v = 1; v <= n; ++v) {
    if (root[v] != v) {
      plan->value_slot[v] = plan->value_slot[root[v]];
      continue;
    }
    const int64_t floats = c10::multiply_integers(layers[v - 1].output_size);
    int64_t best = -1;
    if (root[n] != v) {
      for (size_t s = 0; s < holder.size(); ++s) {
        const int64_t held = holder[s];
        if (root[n] == held || last_use[held] >= v - 1 ||
            !waited_between(last_use[held], v - 1)) {
          continue;
        }
        if (best < 0 || std::abs(plan->slot_floats[s] - floats) <
                            std::abs(plan->slot_floats[best] - floats)) {
          best = static_cast<int64_t>(s);
        }
      }
    }
    if (best < 0) {
      best = static_cast<int64_t>(holder.size());
      holder.push_back(v);
      plan->slot_floats.push_back(floats);
    }
    holder[best] = v;
    plan->slot_floats[best] = std::max(plan->slot_floats[best], floats);
    plan->value_slot[v] = best;
  }
  // Each thread's one-thread primitives on its rows.
  plan->steps.assign(threads, std::vector<ChainStep>(n));
  {
    ThreadsOfThisThread one(1);  // oneDNN plans its kernels for this many
    for (int64_t i = 0; i < n; ++i) {
      const ChainLayer& l = layers[i];
      const Header& header =
          header_of(weights[i], op, "fx_onednn::pack_conv_weight");
      const int64_t width = l.input_size[3], out_width = l.output_size[3];
      const int64_t in_channels = l.input_size[1],
                    out_channels = l.output_size[1];
      const bool silu = silu_as_pass(l.activation, DataType::f32);
      const dnnl::primitive_attr attr =
          post_ops(op, l.residual >= 0, silu ? "none" : l.activation, l.alpha,
                   l.beta);
      for (int t = 0; t < threads; ++t) {
        const ChainPart r = chain_part(l, kernel(i), t, threads);
        ChainStep& step = plan->steps[t][i];
        step.barrier = barrier[i];
        step.src_value = i;
        step.dst_value = i + 1;
        if (r.first == r.last) continue;
        std::vector<int64_t> in_size;
        ConvGeometry g;
        g.strides = {l.stride, l.stride};
        g.dilates = {0, 0};
        memory::dims padding_after;
        if (r.pointwise) {
          // The pixels as one row.
          in_size = {1, in_channels, 1, r.last - r.first};
          g.output_size = {1, out_channels, 1, r.last - r.first};
          g.padding = {0, 0};
          padding_after = {0, 0};
        } else {
          const int64_t top =
              std::max<int64_t>(l.padding - r.row * l.stride, 0);
          const int64_t bottom = std::max<int64_t>(
              (r.row + r.rows - 1) * l.stride - l.padding + kernel(i) -
                  l.input_size[2],
              0);
          in_size = {1, in_channels, r.in_rows, width};
          g.output_size = {1, out_channels, r.rows, out_width};
          g.padding = {top, l.padding};
          padding_after = {bottom, l.padding};
        }
        std::shared_ptr<const Reorder> reorder;
        auto make = [&](const memory::desc& weights_desc) {
          const ActivationDescs d = activation_descs(
              in_size, g.output_size, true, DataType::f32, DataType::f32);
          dnnl::convolution_forward::desc desc(
              dnnl::prop_kind::forward_inference,
              dnnl::algorithm::convolution_direct, d.src, weights_desc,
              d.bias, d.dst, g.strides, g.dilates, g.padding, padding_after);
          return dnnl::convolution_forward::primitive_desc(desc, attr,
                                                           cpu_engine());
        };
        auto pd = for_packed_weights<dnnl::convolution_forward::primitive_desc>(
            make, memory::desc(header.desc),
            conv_weight_desc(weights[i].sizes(), l.groups, Tag::any),
            &reorder);
        step.made = std::make_shared<const Conv>(
            Conv{pd, dnnl::convolution_forward(pd), reorder});
        step.silu_pass = silu;
        step.src_offset = r.in_first * in_channels;
        step.dst_offset = r.first * out_channels;
        step.dst_floats = (r.last - r.first) * out_channels;
      }
    }
  }
  return plan;
}

// This thread's plan for a chain's call, kept as a convolution's plan is
// (plan_for_site, on the first weight) with the arguments it was made for:
// the sizes, layers, parameters, thread count, and each other weight's
// address and packed layout.
std::shared_ptr<const ChainPlan> chain_plan(
    const char* op, const at::Tensor& input, at::TensorList weights,
    const std::vector<const Header*>& headers, at::IntArrayRef layers,
    c10::string_view activations, at::ArrayRef<double> params,
    const std::vector<ChainLayer>& checked) {
  SiteArgs args{{}, activations, 0, 0};
  for (at::IntArrayRef list : {input.sizes(), layers}) {
    args.ints.push_back(static_cast<int64_t>(list.size()));
    args.ints.insert(args.ints.end(), list.begin(), list.end());
  }
  for (double p : params) {
    int64_t bits;
    std::memcpy(&bits, &p, sizeof(bits));
    args.ints.push_back(bits);
  }
  constexpr size_t kDescWords =
      (sizeof(dnnl_memory_desc_t) + sizeof(int64_t) - 1) / sizeof(int64_t);
  for (size_t i = 1; i < weights.size(); ++i) {
    args.ints.push_back(reinterpret_cast<intptr_t>(packed_data(weights[i])));
    int64_t desc[kDescWords] = {};
    std::memcpy(desc, &headers[i]->desc, sizeof(dnnl_memory_desc_t));
    args.ints.insert(args.ints.end(), desc, desc + kDescWords);
  }
  return plan_for_site<std::shared_ptr<const ChainPlan>>(
      weights[0], *headers[0], std::move(args), [&] {
        return make_chain_plan(op, checked, weights,
                               std::max(1, at::get_num_threads()));
      });
}

// Runs thread t's steps of the chain; with `alone`, the calling thread
// runs every thread's steps, layer by layer, and nobody waits.
void run_chain_steps(const ChainPlan& plan, const std::vector<float*>& slots,
                     const float* input, at::TensorList weights,
                     const std::vector<const Header*>& headers,
                     const std::vector<at::Tensor>& biases, int t,
                     bool alone) {
  const size_t n = plan.steps[0].size();
  auto data = [&](int64_t value) -> float* {
    const int64_t slot = plan.value_slot[value];
    return slot < 0 ? const_cast<float*>(input) : slots[slot];
  };
  auto run = [&](const ChainStep& step, size_t i) {
    if (!step.made) return;
    float* dst = data(step.dst_value) + step.dst_offset;
    run_made(step.made, data(step.src_value) + step.src_offset, weights[i],
             *headers[i], biases[i].data_ptr(), dst);
    if (step.silu_pass) silu_in_place(dst, step.dst_floats);
  };
  for (size_t i = 0; i < n; ++i) {
    if (alone) {
      for (int u = 0; u < plan.threads; ++u) run(plan.steps[u][i], i);
      continue;
    }
    if (plan.steps[t][i].barrier) GOMP_barrier();
    run(plan.steps[t][i], i);
  }
}

at::Tensor conv_chain(const at::Tensor& input, at::TensorList weights,
                      at::TensorList biases, at::IntArrayRef layers,
                      c10::string_view activations,
                      at::ArrayRef<double> params) {
  const char* op = "fx_onednn::conv_chain";
  check_input(op, input);
  const std::vector<ChainLayer> checked =
      chain_layers(op, input, weights, biases, layers, activations, params);
  const int64_t n = static_cast<int64_t>(checked.size());
  std::vector<const Header*> headers;
  std::vector<at::Tensor> bias_values;
  bool f32 = input.scalar_type() == at::kFloat;
  for (int64_t i = 0; i < n; ++i) {
    headers.push_back(
        &header_of(weights[i], op, "fx_onednn::pack_conv_weight"));
    f32 &= memory::desc(headers.back()->desc).data_type() == DataType::f32;
    bias_values.push_back(
        float_bias(op, biases[i], checked[i].output_size[1]));
  }
  if (input.size(0) != 1 || !f32) {
    // Another batch or type: the layers one by one.
    std::vector<at::Tensor> values{input};
    for (int64_t i = 0; i < n; ++i) {
      const ChainLayer& l = checked[i];
      const std::vector<int64_t> s{l.stride, l.stride}, p{l.padding, l.padding};
      if (l.residual >= 0) {
        at::Tensor& self = values[l.residual];
        values.push_back(conv_add_(self, values[i], weights[i], biases[i], s,
                                   p, {1, 1}, l.groups, l.activation, l.alpha,
                                   l.beta));
      } else {
        values.push_back(conv(values[i], weights[i], biases[i], s, p, {1, 1},
                              l.groups, c10::nullopt, l.activation, l.alpha,
                              l.beta));
      }
    }
    return values.back();
  }
  const std::shared_ptr<const ChainPlan> plan = chain_plan(
      op, input, weights, headers, layers, activations, params, checked);
  const at::Tensor src = to_channels_last(input);
  std::vector<at::Tensor> buffers;
  std::vector<float*> slots;
  for (size_t s = 0; s < plan->slot_floats.size(); ++s) {
    buffers.push_back(
        empty_activation({plan->slot_floats[s]}, input.options()));
    slots.push_back(buffers.back().data_ptr<float>());
  }
  const float* in = src.data_ptr<float>();
  run_on_threads(plan->threads, [&](int t, int team) {
    if (team == plan->threads) {
      run_chain_steps(*plan, slots, in, weights, headers, bias_values, t,
                      false);
    } else if (t == 0) {
      run_chain_steps(*plan, slots, in, weights, headers, bias_values, 0,
                      true);
    }
  });
  const std::vector<int64_t>& size = checked.back().output_size;
  const at::Tensor& out = buffers[plan->value_slot[n]];
  return out.as_strided(size, channels_last_strides(size));
}

at::Tensor conv_chain_meta(const at::Tensor& input, at::TensorList weights,
                           at::TensorList biases, at::IntArrayRef layers,
                           c10::string_view activations,
                           at::ArrayRef<double> params) {
  const std::vector<ChainLayer> checked =
      chain_layers("fx_onednn::conv_chain", input, weights, biases, layers,
                   activations, params);
  return empty_channels_last(checked.back().output_size, input.options());
}

}  // namespace

void set_winograd_convolutions(bool enabled) { winograd_enabled = enabled; }
bool winograd_convolutions() { return winograd_enabled; }

TORCH_LIBRARY_IMPL(fx_onednn, CPU, m) {
  m.impl("pack_conv_weight", &pack_conv_weight);
  m.impl("conv", &conv);
  m.impl("conv_add_", &conv_add_);
  m.impl("conv_chain", &conv_chain);
}

TORCH_LIBRARY_IMPL(fx_onednn, Meta, m) {
  m.impl("pack_conv_weight", &pack_conv_weight_meta);
  m.impl("conv", &conv_meta);
  m.impl("conv_add_", &conv_add_meta);
  m.impl("conv_chain", &conv_chain_meta);
}

}  // namespace fx::onednn
