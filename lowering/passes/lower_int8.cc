// The pass lower_onednn_int8: convert_fx's 2-d int8 convolutions
// (quantized::conv2d.new and conv2d_relu.new on LibTorch's packed weights,
// their weights symmetric) become fx_onednn::qconv on a weight packed by
// fx_onednn::pack_qconv_weight, absorbing the quantized::add or add_relu
// that is a convolution's only user (the other operand added as the
// residual, rounded once; written over in place, fx_onednn::qconv_add_,
// when nothing reads it afterwards, InferenceOptions::in_place), and the
// activation after it: quantized::hardswish, a quantized hardsigmoid or
// sigmoid (oneDNN post-ops on the real values). Only where oneDNN has
// VNNI int8 kernels (onednn::int8_supported()); elsewhere the graph stays
// on LibTorch's quantized engine. Around them, in int8 too: max pooling
// of quint8 values on oneDNN's u8 pooling (fx_onednn::max_pool2d); the
// silu convert_fx leaves in float32 (dequantize -> silu -> quantize) as a
// table lookup (fx_onednn::qactivation); squeeze-and-excitation's mean
// (dequantize -> adaptive_avg_pool2d to 1x1 -> quantize,
// fx_onednn::qmean_channels) and its gate's product (quantized::mul by a
// [N, C, 1, 1] operand, fx_onednn::qmul_channels); dynamic quantization's
// linear layers (quantized::linear_dynamic) on oneDNN's u8 x s8 matmul,
// the gelu or relu after fused, or the residual add after it
// (fx_onednn::qlinear_dynamic). The rest
// (cat, static int8 linear layers) stays LibTorch's and reads these operators' quint8
// channels-last outputs as it reads quantized::conv2d's.
//
//   before:
//       %_packed_conv = get_attr[target=_packed.conv]
//       %conv = call_function[target=quantized::conv2d.new](args = (%q, %_packed_conv, 0.028, 103))
//       %add = call_function[target=quantized::add_relu](args = (%conv, %r, 0.018, 0))
//   after (the pack made once, by an init step):
//       %packed = get_attr[target=_folded.pack_qconv_weight]
//       %add = call_function[target=fx_onednn::qconv](args = (%q, %packed, None, [1, 1], [1, 1], [1, 1], 1, 0.018, 0, %r, relu))
#include <ATen/ATen.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "fx/ir/operator_schemas.h"
#include "fx/runtime/graph_module.h"
#include "lowering/onednn_ops.h"
#include "lowering/passes/passes.h"
#include "lowering/passes/rewrite_support.h"

namespace fx {
namespace lowering {
namespace {

// LibTorch's packed weights unpacked, when qconv computes what they do
// (onednn::unpack_int8_conv); nullopt for others (another engine's, a
// transposed convolution's, asymmetric weights).
std::optional<onednn::Int8ConvWeights> packed_conv(const c10::IValue& packed) {
  try {
    return onednn::unpack_int8_conv("lower_onednn_int8", packed);
  } catch (const c10::Error&) {
    return std::nullopt;
  }
}

// The zero point of a quint8 value as the graph states it: the quantize or
// quantized operator that made it, through operators that keep their
// input's quantization; nullopt where the graph does not say.
std::optional<int64_t> zero_point_of(const Node* v) {
  for (int depth = 0; depth < 64 && v != nullptr; ++depth) {
    if (v->op() != Opcode::kCallFunction || !v->target().is_operator()) {
      return std::nullopt;
    }
    const std::vector<Argument>& args = v->args();
    if (v->is_call_to({"aten::quantize_per_tensor"})) {
      const Argument zp = CallArguments(*v)["zero_point"];
      return zp.is_int() ? std::optional<int64_t>(zp.to_int()) : std::nullopt;
    }
    // LibTorch's quantized sigmoid and tanh give fixed quantizations.
    if (v->is_call_to({"aten::sigmoid", "aten::sigmoid_", "aten::hardsigmoid",
                       "aten::hardsigmoid_"})) {
      return 0;
    }
    if (v->is_call_to({"aten::tanh", "aten::tanh_"})) return 128;
    if (v->is_call_to({"fx_onednn::qconv", "fx_onednn::qconv_add_",
                       "fx_onednn::qactivation", "fx_onednn::qmul_channels",
                       "fx_onednn::qmean_channels"})) {
      const Argument zp = CallArguments(*v)["output_zero_point"];
      return zp.is_int() ? std::optional<int64_t>(zp.to_int()) : std::nullopt;
    }
    const std::string name = v->target().to_string();
    // The quantized operators convert_fx makes, whose last argument is
    // their output's zero point (zero_point, output_zero_point,
    // Y_zero_point_i); others (add_scalar, threshold) end otherwise.
    const bool states_zero_point =
        name.rfind("quantized::conv", 0) == 0 ||
        name.rfind("quantized::linear", 0) == 0 ||
        name.rfind("quantized::batch_norm", 0) == 0 ||
        v->is_call_to({"quantized::add", "quantized::add_relu",
                       "quantized::mul", "quantized::mul_relu",
                       "quantized::cat", "quantized::hardswish"});
    if (states_zero_point) {
      if (!args.empty() && args.back().is_int()) return args.back().to_int();
      return std::nullopt;
    }
    if (name.rfind("quantized::", 0) == 0) return std::nullopt;
    if (v->is_call_to({"aten::max_pool2d", "fx_onednn::max_pool2d",
                       "aten::relu", "aten::relu_",
                       "aten::hardtanh", "aten::hardtanh_", "aten::relu6",
                       "aten::relu6_", "aten::clamp", "aten::clamp_",
                       "aten::flatten.using_ints", "aten::reshape",
                       "aten::view", "aten::contiguous", "aten::dropout",
                       "aten::adaptive_avg_pool2d", "aten::avg_pool2d"}) &&
        !args.empty() && args[0].is_node()) {
      v = args[0].to_node();
      continue;
    }
    return std::nullopt;
  }
  return std::nullopt;
}

// Whether qconv_add_ may write its result over `residual` at `at`: a
// value the lowered int8 operators made (fresh, channels-last quint8:
// qconv's, qconv_add_'s, max_pool2d's) that every other user reads before
// `at` and none returns a view of (asked once every call is in place).
bool can_overwrite(const Graph& graph, const Node* residual, const Node* at) {
  auto channels_last_int8 = [](const Node& n) {
    return n.is_call_to({"fx_onednn::qconv", "fx_onednn::qconv_add_",
                         "fx_onednn::max_pool2d", "fx_onednn::qmul_channels"});
  };
  if (!channels_last_int8(*residual)) return false;
  absl::flat_hash_map<const Node*, int64_t> position;
  int64_t i = 0;
  for (const Node* n : graph.nodes()) position[n] = i++;
  for (const Node* user : residual->users()) {
    if (user == at) continue;
    if (position.at(user) >= position.at(at)) return false;
    if (user->op() != Opcode::kCallFunction || !user->target().is_operator()) {
      return false;
    }
    for (const c10::Argument& r : user->target().op().schema().returns()) {
      if (r.alias_info() != nullptr) return false;
    }
  }
  return true;
}

// An activation a convolution's output goes through alone, which qconv
// computes in its rounding: its name (qconv_activations()) and the
// quantization of its output.
struct FusedActivation {
  std::string name;
  Argument scale, zero_point;
  Node* absorbed = nullptr;  // the quantized activation, qconv takes its place
};

// LibTorch's quantized sigmoid and hardsigmoid of a quint8 value give
// scale 1/256, zero point 0 (zero_point_of above).
constexpr double kFixedSigmoidScale = 1.0 / 256;

// The activation `tail` (a quantized convolution's output, or its add's)
// goes through alone, if qconv fuses it as a post-op: quantized::hardswish,
// a quantized hardsigmoid or sigmoid. (A silu, which convert_fx leaves in
// float32 between a dequantize and a quantize, becomes
// fx_onednn::qactivation instead: oneDNN's swish post-op is slow.)
std::optional<FusedActivation> activation_after(Node* tail) {
  Node* user = tail->only_user();
  if (user == nullptr) return std::nullopt;
  const std::vector<Argument>& a = user->args();
  if (user->is_call_to({"quantized::hardswish"}) && a.size() == 3 &&
      a[0].is_node() && a[0].to_node() == tail && a[1].is_double() &&
      a[2].is_int()) {
    return FusedActivation{"hardswish", a[1], a[2], user};
  }
  const bool hardsigmoid =
      user->is_call_to({"aten::hardsigmoid", "aten::hardsigmoid_"});
  if ((hardsigmoid || user->is_call_to({"aten::sigmoid", "aten::sigmoid_"})) &&
      a.size() == 1 && a[0].is_node() && a[0].to_node() == tail) {
    return FusedActivation{hardsigmoid ? "hardsigmoid" : "sigmoid",
                           Argument(kFixedSigmoidScale), Argument(int64_t{0}),
                           user};
  }
  return std::nullopt;
}

// dequantize(x) -> silu -> quantize_per_tensor(scale, zero_point) of a
// quint8 x, as convert_fx leaves it (LibTorch has no quantized silu): the
// pieces of the pattern.
struct FloatActivation {
  Node* dequantize = nullptr;
  Node* activation = nullptr;
  Node* quantize = nullptr;  // its first quantize_per_tensor to quint8
};

std::optional<FloatActivation> float_activation(Node* dequantize) {
  if (!dequantize->is_call_to({"aten::dequantize.self"})) return std::nullopt;
  const std::vector<Argument>& args = dequantize->args();
  const TensorMeta* in = args.size() == 1 && args[0].is_node()
                             ? args[0].to_node()->tensor_meta()
                             : nullptr;
  if (in == nullptr || in->dtype != c10::ScalarType::QUInt8) {
    return std::nullopt;
  }
  Node* silu = dequantize->only_user();
  if (silu == nullptr || !silu->is_call_to({"aten::silu", "aten::silu_"}) ||
      silu->args().size() != 1) {
    return std::nullopt;
  }
  for (Node* q : silu->users()) {
    if (!q->is_call_to({"aten::quantize_per_tensor"})) continue;
    const CallArguments qa(*q);
    const Argument& self = qa["self"];
    const Argument& dtype = qa["dtype"];
    if (self.is_node() && self.to_node() == silu && qa["scale"].is_double() &&
        qa["zero_point"].is_int() && dtype.is_dtype() &&
        dtype.to_dtype() == c10::ScalarType::QUInt8) {
      return FloatActivation{dequantize, silu, q};
    }
  }
  return std::nullopt;
}

// The quint8 input of quantized::mul that is a per-channel gate of the
// other ([N or 1, C, 1, 1] against [N, C, H, W]): {input, gate}.
std::optional<std::pair<Argument, Argument>> channel_product(const Node& mul) {
  const std::vector<Argument>& a = mul.args();
  if (a.size() != 4 || !a[0].is_node() || !a[1].is_node() ||
      !a[2].is_double() || !a[3].is_int()) {
    return std::nullopt;
  }
  auto quint8_4d = [](const Argument& v) -> const TensorMeta* {
    const TensorMeta* m = v.to_node()->tensor_meta();
    return m != nullptr && m->dtype == c10::ScalarType::QUInt8 &&
                   m->sizes.size() == 4
               ? m
               : nullptr;
  };
  const TensorMeta* m0 = quint8_4d(a[0]);
  const TensorMeta* m1 = quint8_4d(a[1]);
  if (m0 == nullptr || m1 == nullptr) return std::nullopt;
  auto gates = [](const TensorMeta& x, const TensorMeta& g) {
    const auto& xs = x.sizes;
    const auto& gs = g.sizes;
    return xs[1] == gs[1] && gs[2] == 1 && gs[3] == 1 &&
           (gs[0] == xs[0] || gs[0] == 1) && (xs[2] != 1 || xs[3] != 1);
  };
  if (gates(*m1, *m0)) return std::make_pair(a[1], a[0]);
  if (gates(*m0, *m1)) return std::make_pair(a[0], a[1]);
  return std::nullopt;
}

// The packing of an int8 weight by `pack_op` (an init step once constants
// are folded), placed before `n`; its metadata a float32 tensor of the
// weight's logical sizes, as every packed weight's (what the cost model
// reads).
Node* insert_pack(Graph& graph, Node* n, const char* pack_op,
                  std::vector<Argument> args, std::vector<int64_t> sizes) {
  Node* pack;
  {
    auto guard = graph.inserting_before(n);
    pack = graph.call_function(fx::op(pack_op), std::move(args));
  }
  TensorMeta w;
  const auto strides = c10::contiguous_strides(sizes);
  w.sizes = std::move(sizes);
  w.strides.assign(strides.begin(), strides.end());
  w.dtype = c10::ScalarType::Float;
  pack->meta().set(kTensorMeta, std::move(w));
  return pack;
}

class LowerInt8 : public LoweringPass {
 public:
  explicit LowerInt8(const InferenceOptions& options)
      : LoweringPass("lower_onednn_int8", options) {}

 private:
  bool rewrite(GraphModuleImpl& module) override {
    if (!onednn::int8_supported()) return false;
    Graph& graph = module.graph();
    // Erasing while iterating is safe: an absorbed add comes after its
    // convolution, and an erased node stays allocated while the walk goes
    // on.
    for (Node* n : graph.nodes()) {
      if (n->is_call_to({"aten::max_pool2d"})) {
        lower_max_pool(graph, n);
        continue;
      }
      if (std::optional<FloatActivation> f = float_activation(n)) {
        lower_float_activation(graph, *f);
        continue;
      }
      if (lower_channel_mean(graph, n)) continue;
      if (n->is_call_to({"quantized::linear_dynamic",
                         "quantized::linear_relu_dynamic"})) {
        lower_linear_dynamic(module, graph, n);
        continue;
      }
      if (n->is_call_to({"quantized::mul"})) {
        lower_channel_product(graph, n);
        continue;
      }
      const bool relu = n->is_call_to({"quantized::conv2d_relu.new"});
      if (!relu && !n->is_call_to({"quantized::conv2d.new"})) continue;
      const std::vector<Argument>& args = n->args();
      if (args.size() != 4 || !args[0].is_node() || !args[1].is_node() ||
          args[1].to_node()->op() != Opcode::kGetAttr ||
          !args[2].is_double() || !args[3].is_int()) {
        continue;
      }
      Node* input = args[0].to_node();
      Node* weights = args[1].to_node();
      const std::string path = weights->target().str();
      if (!module.has_object_attribute(path)) continue;
      const std::optional<onednn::Int8ConvWeights> conv =
          packed_conv(module.fetch_attribute(path));
      const TensorMeta* in = input->tensor_meta();
      const std::optional<int64_t> zero_point = zero_point_of(input);
      if (!conv || in == nullptr || in->sizes.size() != 4 || !zero_point) {
        continue;
      }
      Argument scale = args[2], out_zero_point = args[3];
      Argument residual;
      std::vector<Node*> absorbed;
      if (!relu) {
        Node* add = n->only_user();
        if (add != nullptr &&
            add->is_call_to({"quantized::add", "quantized::add_relu"}) &&
            add->args().size() == 4 && add->args()[0].is_node() &&
            add->args()[1].is_node() && add->args()[0] != add->args()[1] &&
            add->args()[2].is_double() && add->args()[3].is_int()) {
          const Argument& other =
              add->args()[0].to_node() == n ? add->args()[1] : add->args()[0];
          const TensorMeta* other_meta = other.to_node()->tensor_meta();
          const TensorMeta* add_meta = add->tensor_meta();
          const TensorMeta* conv_meta = n->tensor_meta();
          // No broadcast: the residual has the convolution's sizes.
          if (other_meta != nullptr && add_meta != nullptr &&
              conv_meta != nullptr && other_meta->sizes == add_meta->sizes &&
              conv_meta->sizes == add_meta->sizes) {
            absorbed.push_back(add);
            residual = other;
            scale = add->args()[2];
            out_zero_point = add->args()[3];
          }
        }
      }
      const bool fused_relu =
          relu || (!absorbed.empty() &&
                   absorbed[0]->is_call_to({"quantized::add_relu"}));
      std::string activation = fused_relu ? "relu" : "none";
      if (!fused_relu) {
        Node* tail = absorbed.empty() ? n : absorbed.back();
        if (std::optional<FusedActivation> a = activation_after(tail)) {
          activation = a->name;
          scale = a->scale;
          out_zero_point = a->zero_point;
          absorbed.push_back(a->absorbed);
        }
      }
      Node* pack = insert_pack(graph, n, "fx_onednn::pack_qconv_weight",
                               {weights, in->sizes, *zero_point},
                               conv->weight.sizes().vec());
      std::vector<Argument> call_args = {
          input,         pack,           Argument(),   conv->stride,
          conv->padding, conv->dilation, conv->groups, scale,
          out_zero_point};
      if (!residual.is_none() || activation != "none") {
        call_args.push_back(residual);
        call_args.push_back(activation);
      }
      const bool summed = !residual.is_none();
      replace_with_call(graph, n, absorbed, "fx_onednn::qconv",
                        std::move(call_args), /*channels_last=*/true);
      ++report().int8_convolutions;
      if (summed) ++report().fused_sums;
      if (activation != "none") ++report().fused_activations;
    }
    // In place, decided once every call stands where it will run (a
    // fused call takes the place of its add, after reads of the residual
    // that were before it in the original order).
    if (options().in_place) {
      for (Node* n : graph.nodes()) {
        if (n->is_call_to({"fx_onednn::qconv"})) write_in_place(graph, n);
      }
    }
    return report().int8_convolutions > 0 || report().pooling > 0 ||
           report().int8_elementwise > 0 || report().int8_linear > 0;
  }

  // A qconv whose residual dies at it becomes qconv_add_, written over the
  // residual (never over its own input, which it reads).
  void write_in_place(Graph& graph, Node* n) {
    const CallArguments a(*n);
    const Argument residual = a["other"];
    const Argument input = a["input"];
    if (!residual.is_node() || residual == input ||
        !can_overwrite(graph, residual.to_node(), n)) {
      return;
    }
    replace_with_call(graph, n, {}, "fx_onednn::qconv_add_",
                      {residual, input, a["weight"], a["bias"], a["stride"],
                       a["padding"], a["dilation"], a["groups"],
                       a["output_scale"], a["output_zero_point"],
                       a["activation"]},
                      /*channels_last=*/true);
    ++report().in_place_sums;
  }

  // dequantize -> silu -> quantize as fx_onednn::qactivation of the
  // quint8 value (the silu's other, float, users read its result
  // dequantized).
  void lower_float_activation(Graph& graph, const FloatActivation& f) {
    const CallArguments q(*f.quantize);
    Node* lowered;
    Node* dequantized = nullptr;
    {
      auto guard = graph.inserting_before(f.activation);
      lowered = graph.call_function(
          fx::op("fx_onednn::qactivation"),
          {f.dequantize->args()[0], "silu", q["scale"], q["zero_point"]});
      if (f.activation->users().size() > 1) {
        dequantized = graph.call_function(fx::op("aten::dequantize.self"),
                                          {Argument(lowered)});
      }
    }
    const TensorMeta* in = f.dequantize->args()[0].to_node()->tensor_meta();
    if (const TensorMeta* m = f.quantize->tensor_meta()) {
      TensorMeta meta = *m;
      meta.requires_grad = false;
      meta.strides = in->strides;  // qactivation keeps its input's layout
      lowered->meta().set(kTensorMeta, meta);
    }
    if (dequantized != nullptr) {
      if (const TensorMeta* m = f.activation->tensor_meta()) {
        TensorMeta meta = *m;
        meta.strides = in->strides;
        dequantized->meta().set(kTensorMeta, meta);
      }
    }
    f.quantize->replace_all_uses_with(lowered);
    graph.erase_node(f.quantize);
    if (dequantized != nullptr) f.activation->replace_all_uses_with(dequantized);
    graph.erase_node(f.activation);
    graph.erase_node(f.dequantize);
    ++report().int8_elementwise;
  }

  // quantized::linear_dynamic (and linear_relu_dynamic) of a float32 input
  // as fx_onednn::qlinear_dynamic on a weight packed by an init step, the
  // relu, or a gelu or other activation that is its only user, fused; or,
  // with no activation, the residual add that is its only user.
  void lower_linear_dynamic(GraphModuleImpl& module, Graph& graph, Node* n) {
    const std::vector<Argument>& args = n->args();
    if (args.size() < 2 || !args[0].is_node() || !args[1].is_node() ||
        args[1].to_node()->op() != Opcode::kGetAttr) {
      return;
    }
    // reduce_range (7-bit activations, for CPUs without VNNI): not ours.
    if (args.size() > 2 && !(args[2].is_bool() && !args[2].to_bool())) return;
    const std::string path = args[1].to_node()->target().str();
    const TensorMeta* in = args[0].to_node()->tensor_meta();
    const TensorMeta* out = n->tensor_meta();  // the packed weight's sizes
    if (!module.has_object_attribute(path) || in == nullptr ||
        in->dtype != c10::ScalarType::Float || in->sizes.empty() ||
        in->sizes.back() == 0 || out == nullptr || out->sizes.empty()) {
      return;
    }
    std::string activation =
        n->is_call_to({"quantized::linear_relu_dynamic"}) ? "relu" : "none";
    std::vector<Node*> absorbed;
    Node* user = n->only_user();
    if (activation == "none" && user != nullptr) {
      if (user->is_call_to({"aten::gelu"})) {
        // approximate: "none" (erf, the default when absent) or "tanh".
        const Argument approximate = CallArguments(*user)["approximate"];
        const bool tanh = approximate.is_string() &&
                          approximate.to_string_ref() == "tanh";
        if (approximate.is_none() || approximate.is_string()) {
          activation = tanh ? "gelu_tanh" : "gelu";
          absorbed.push_back(user);
        }
      } else if (user->is_call_to({"aten::relu", "aten::relu_"})) {
        activation = "relu";
        absorbed.push_back(user);
      }
    }
    // A residual added to the layer's output alone (a transformer's
    // x + attention(x), x + feed_forward(x)): added as a post-op.
    Node* residual = nullptr;
    if (activation == "none" && user != nullptr) {
      residual = match_residual_add(*user, n);
      if (residual != nullptr) absorbed.push_back(user);
    }
    Node* pack = insert_pack(graph, n, "fx_onednn::pack_qlinear_weight",
                             {args[1], in->sizes},
                             {out->sizes.back(), in->sizes.back()});
    std::vector<Argument> call_args = {args[0], pack, Argument(), activation};
    if (residual != nullptr) call_args.push_back(residual);
    replace_with_call(graph, n, absorbed, "fx_onednn::qlinear_dynamic",
                      call_args, /*channels_last=*/false);
    ++report().int8_linear;
    if (activation != "none") ++report().fused_activations;
    if (residual != nullptr) ++report().fused_sums;
  }

  // dequantize -> adaptive_avg_pool2d to 1x1 -> quantize_per_tensor of a
  // quint8 image as fx_onednn::qmean_channels.
  bool lower_channel_mean(Graph& graph, Node* dequantize) {
    if (!dequantize->is_call_to({"aten::dequantize.self"})) return false;
    const Argument input = dequantize->args().at(0);
    const TensorMeta* in = input.is_node() ? input.to_node()->tensor_meta()
                                           : nullptr;
    Node* pool = dequantize->only_user();
    if (in == nullptr || in->dtype != c10::ScalarType::QUInt8 ||
        in->sizes.size() != 4 || pool == nullptr ||
        !pool->is_call_to({"aten::adaptive_avg_pool2d"})) {
      return false;
    }
    const Argument size = CallArguments(*pool)["output_size"];
    Node* q = pool->only_user();
    if (!size.is_list() || size.to_int_list() != std::vector<int64_t>{1, 1} ||
        q == nullptr || !q->is_call_to({"aten::quantize_per_tensor"})) {
      return false;
    }
    const CallArguments qa(*q);
    const Argument& dtype = qa["dtype"];
    if (!qa["scale"].is_double() || !qa["zero_point"].is_int() ||
        !dtype.is_dtype() || dtype.to_dtype() != c10::ScalarType::QUInt8) {
      return false;
    }
    replace_with_call(graph, dequantize, {pool, q}, "fx_onednn::qmean_channels",
                      {input, qa["scale"], qa["zero_point"]},
                      /*channels_last=*/true);
    ++report().int8_elementwise;
    return true;
  }

  // quantized::mul of an image by a per-channel gate
  // (squeeze-and-excitation) as fx_onednn::qmul_channels.
  void lower_channel_product(Graph& graph, Node* mul) {
    const std::optional<std::pair<Argument, Argument>> operands =
        channel_product(*mul);
    if (!operands) return;
    replace_with_call(graph, mul, {}, "fx_onednn::qmul_channels",
                      {operands->first, operands->second, mul->args()[2],
                       mul->args()[3]},
                      /*channels_last=*/true);
    ++report().int8_elementwise;
  }

  // Max pooling of a quint8 value: on oneDNN's u8 pooling, which reads the
  // channels-last activations in place (LibTorch's quantized max pooling
  // took 9% of GoogLeNet's int8 time at batch 1).
  void lower_max_pool(Graph& graph, Node* n) {
    const CallArguments a(*n);
    const Argument input = a["self"];
    const TensorMeta* in = input.is_node() ? input.to_node()->tensor_meta()
                                           : nullptr;
    if (in == nullptr || in->dtype != c10::ScalarType::QUInt8 ||
        in->sizes.size() != 4) {
      return;
    }
    replace_with_call(graph, n, {}, "fx_onednn::max_pool2d",
                      {input, a["kernel_size"], a["stride"], a["padding"],
                       a["dilation"], a["ceil_mode"]},
                      /*channels_last=*/true);
    ++report().pooling;
  }
};

}  // namespace

std::unique_ptr<Pass> make_lower_int8(const InferenceOptions& options) {
  return std::make_unique<LowerInt8>(options);
}

}  // namespace lowering
}  // namespace fx
