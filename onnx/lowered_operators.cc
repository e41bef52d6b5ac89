// Graphs lowered to oneDNN in ONNX: each fx_onednn:: operator as the
// standard operators it replaced.
#include <string>
#include <vector>

#include <onnx/onnx_pb.h>
#include <torch/torch.h>

#include "absl/strings/str_cat.h"
#include "fx/ir/node.h"
#include "fx/ir/operator_schemas.h"
#include "lowering/operators.h"
#include "onnx/internal/mappings.h"

namespace fx::internal::onnx_ops {
namespace {

// --- Graphs lowered to oneDNN ---------------------------------------------------
// Each fx_onednn operator as the standard operators it replaced: its packed
// weight unpacked (fx_onednn::unpack_weight) into an initializer, the
// residual add and the activation it fused after it.

// The initializer of a lowered operator's packed weight, in aten's layout.
std::string unpacked_weight(OnnxBuilder& b, const Argument& weight,
                            const char* kind, int64_t groups) {
  const std::optional<at::Tensor> packed = b.constant(weight);
  if (!packed) {
    refuse(b, "its weight is not a packed weight attribute (a get_attr of "
              "what fx_onednn's pack operators made)");
  }
  const at::Tensor w =
      call_operator("fx_onednn::unpack_weight",
                    {*packed, std::string(kind), groups})[0].toTensor();
  return b.tensor(weight.to_node()->name() + "_unpacked", w);
}


// `value` + `other` (none: "") and then `activation` (alpha, beta as
// fx_onednn's operators take them) into `out` (b.output() by default), the
// values between named after `name` (the node's).
void post_ops(OnnxBuilder& b, std::string value, const std::string& other,
              const std::string& activation, double alpha, double beta,
              const std::string& out, const std::string& name) {
  if (!other.empty()) {
    const std::string sum =
        activation == "none" ? out : b.fresh(name + "_sum");
    b.add("Add", {value, other}, sum);
    value = sum;
  }
  if (activation == "none") return;
  activation_into(b, value, activation, alpha, beta, out);
}
void post_ops(OnnxBuilder& b, const std::string& value,
              const std::string& other, const std::string& activation,
              double alpha, double beta) {
  post_ops(b, value, other, activation, alpha, beta, b.output(),
           b.node().name());
}

// The value a lowered operator writes before its post-ops: `out`
// (b.output() by default) when it has none, else one named after `name`.
std::string before_post_ops(OnnxBuilder& b, bool sum,
                            const std::string& activation,
                            const std::string& out, const std::string& name) {
  return !sum && activation == "none" ? out : b.fresh(name + "_op");
}
std::string before_post_ops(OnnxBuilder& b, bool sum,
                            const std::string& activation) {
  return before_post_ops(b, sum, activation, b.output(), b.node().name());
}

// conv, its residual `other` (None: none), or conv_add_, whose residual is
// `self` (self = activation(self + conv(input)), as a value: to_onnx checks
// that nothing reads the old self afterwards).
void lowered_conv(OnnxBuilder& b) {
  const auto c = onednn::conv_call(b.node());
  if (!c) refuse(b, "its activation is not a constant name");
  const bool sum = !c->residual.is_none();
  const std::string conv = before_post_ops(b, sum, c->activation);
  convolution(b,
              unpacked_weight(b, c->weight, "conv", c->groups.to_int()),
              conv);
  post_ops(b, conv, sum ? b.value(c->residual) : "", c->activation,
           number(b, c->alpha), number(b, c->beta));
}

// fx_onednn::conv_chain: each layer as the convolution it replaced (Conv,
// its residual's Add, its activation), the residual the value it was
// added into.
void lowered_conv_chain(OnnxBuilder& b) {
  const std::string& name = b.node().name();
  const auto layers = onednn::conv_chain_layers(b.node());
  if (!layers) {
    refuse(b, "its lists do not hold one layer each (weights, biases, 4 "
              "ints, an activation and 2 parameters per layer)");
  }
  const size_t n = layers->size();
  std::vector<std::string> values = {b.value(CallArguments(b.node())["input"])};
  for (size_t i = 0; i < n; ++i) {
    const onednn::ConvChainLayer& l = (*layers)[i];
    if (l.adds_into >= static_cast<int64_t>(i) || l.adds_into == 0) {
      refuse(b, "a layer's residual is not an earlier layer's output");
    }
    const bool sum = l.adds_into > 0;
    const std::string layer = absl::StrCat(name, "_", i);
    const std::string out = i + 1 == n ? b.output() : b.fresh(layer);
    const std::string conv = before_post_ops(b, sum, l.activation, out, layer);
    onnx::NodeProto& c = b.add(
        "Conv",
        {values[i], unpacked_weight(b, l.weight, "conv", l.groups),
         b.value(l.bias)},
        conv);
    set_ints(c, "strides", {l.stride, l.stride});
    set_ints(c, "pads", {l.padding, l.padding, l.padding, l.padding});
    set_ints(c, "dilations", {1, 1});
    set_int(c, "group", l.groups);
    post_ops(b, conv, sum ? values[l.adds_into] : "", l.activation,
             number(b, l.alpha), number(b, l.beta), out, layer);
    values.push_back(out);
  }
}

// fx_onednn::batch_norm: BatchNormalization, then its relu.
void lowered_batch_norm(OnnxBuilder& b) {
  const std::string activation =
      CallArguments(b.node())["activation"].to_string_ref();
  const std::string norm = before_post_ops(b, false, activation);
  batch_norm_into(b, norm);
  post_ops(b, norm, "", activation, 0.0, 0.0);
}

// fx_onednn::concat_buffer and concat_write_: the buffer as the
// concatenation of what has been written into it so far (Concat of the
// pieces; concat_write_'s with the buffer before it first), which is what
// each aten::slice of its first channels reads (a Slice of the whole).
void lowered_concat(OnnxBuilder& b, bool write) {
  CallArguments args(b.node());
  std::vector<std::string> inputs;
  if (write) inputs.push_back(b.value(args["self"]));
  for (const Argument& t : args["tensors"].elements()) {
    inputs.push_back(b.value(t));
  }
  if (inputs.size() == 1) {
    b.add("Identity", inputs, b.output());
    return;
  }
  set_int(b.add("Concat", inputs, b.output()), "axis", 1);
}

// fx_onednn::squeeze_excite: GlobalAveragePool, Conv, its activation,
// Conv, the gate, Mul: the block it replaced.
void lowered_squeeze_excite(OnnxBuilder& b) {
  CallArguments args(b.node());
  const std::string& name = b.node().name();
  const std::string x = b.value(args["input"]);
  auto conv = [&](const std::string& in, const char* w, const char* bias,
                  const std::string& out) {
    if (rank_of(b, args[w]) != 4) {
      refuse(b, std::string(w) + " is not a 4-d 1x1 convolution weight");
    }
    std::vector<std::string> inputs = {in, b.value(args[w])};
    if (!args[bias].is_none()) inputs.push_back(b.value(args[bias]));
    b.add("Conv", inputs, out);
  };
  const std::string activation = args["activation"].to_string_ref();
  const std::string gate_kind = args["gate"].to_string_ref();
  if (activation != "none" && activation != "relu" && activation != "silu") {
    refuse(b, "its activation '" + activation + "' is not none, relu or silu");
  }
  if (gate_kind != "sigmoid" && gate_kind != "hardsigmoid") {
    refuse(b, "its gate '" + gate_kind + "' is not sigmoid or hardsigmoid");
  }
  const std::string pooled = b.fresh(name + "_pool");
  b.add("GlobalAveragePool", {x}, pooled);
  const std::string squeezed = b.fresh(name + "_squeeze");
  conv(pooled, "w1", "b1", squeezed);
  std::string hidden = squeezed;
  if (activation != "none") {
    hidden = b.fresh(name + "_" + activation);
    activation_into(b, squeezed, activation, 0.0, 0.0, hidden);
  }
  const std::string excited = b.fresh(name + "_excite");
  conv(hidden, "w2", "b2", excited);
  const std::string gate = b.fresh(name + "_gate");
  activation_into(b, excited, gate_kind, 0.0, 0.0, gate);
  b.add("Mul", {gate, x}, b.output());
}

void lowered_conv_transpose(OnnxBuilder& b) {
  CallArguments args(b.node());
  const std::string activation = args["activation"].to_string_ref();
  const std::string deconv = before_post_ops(b, false, activation);
  conv_transpose(b,
                 unpacked_weight(b, args["weight"], "conv_transpose",
                                 args["groups"].to_int()),
                 deconv);
  post_ops(b, deconv, "", activation, number(b, args["alpha"]),
           number(b, args["beta"]));
}

void lowered_linear(OnnxBuilder& b) {
  CallArguments args(b.node());
  const std::string activation = args["activation"].to_string_ref();
  const Argument other = args["other"];
  const bool sum = other.is_node();
  const std::string product = before_post_ops(b, sum, activation);
  linear(b, unpacked_weight(b, args["weight"], "linear", 1), product);
  post_ops(b, product, sum ? b.value(other) : "", activation,
           number(b, args["alpha"]), number(b, args["beta"]));
}

void lowered_matmul(OnnxBuilder& b) {
  CallArguments args(b.node());
  const double scale = number(b, args["scale"]);
  const std::string product =
      scale == 1 ? b.output() : b.fresh(b.node().name() + "_product");
  b.add("MatMul", {b.value(args["self"]), b.value(args["other"])}, product);
  if (scale != 1) {
    b.add("Mul", {product, b.floats({static_cast<float>(scale)}, true)},
          b.output());
  }
}

}  // namespace

// `activation` (not none; alpha, beta as fx_onednn's operators take them)
// of `value` into `out`.
void activation_into(OnnxBuilder& b, const std::string& value,
                     const std::string& activation, double alpha, double beta,
                     const std::string& out) {
  if (activation == "relu" && alpha == 0) {
    b.add("Relu", {value}, out);
  } else if (activation == "relu") {
    set_float(b.add("LeakyRelu", {value}, out), "alpha", alpha);
  } else if (activation == "clip") {
    b.add("Clip",
          {value, b.floats({static_cast<float>(alpha)}, true),
           b.floats({static_cast<float>(beta)}, true)},
          out);
  } else if (activation == "hardswish") {
    b.add("HardSwish", {value}, out);
  } else if (activation == "hardsigmoid") {
    // ONNX's default alpha (0.2) is not PyTorch's 1/6.
    onnx::NodeProto& n = b.add("HardSigmoid", {value}, out);
    set_float(n, "alpha", 1.0 / 6.0);
    set_float(n, "beta", 0.5);
  } else if (activation == "sigmoid") {
    b.add("Sigmoid", {value}, out);
  } else if (activation == "tanh") {
    b.add("Tanh", {value}, out);
  } else if (activation == "silu") {
    silu_into(b, value, out);
  } else if (activation == "gelu" || activation == "gelu_tanh") {
    gelu_into(b, value, activation == "gelu_tanh", out);
  } else {
    refuse(b, "its fused activation '" + activation + "' does not map");
  }
}

void add_lowered_mappings(Mappings* m) {
  (*m)["fx_onednn::conv"] = lowered_conv;
  (*m)["fx_onednn::conv_add_"] = lowered_conv;
  (*m)["fx_onednn::conv_chain"] = lowered_conv_chain;
  (*m)["fx_onednn::conv_transpose"] = lowered_conv_transpose;
  (*m)["fx_onednn::linear"] = lowered_linear;
  (*m)["fx_onednn::matmul"] = lowered_matmul;
  (*m)["fx_onednn::lstm"] = [](OnnxBuilder& b) { recurrent(b, true, true); };
  (*m)["fx_onednn::gru"] = [](OnnxBuilder& b) { recurrent(b, false, true); };
  (*m)["fx_onednn::batch_norm"] = lowered_batch_norm;
  (*m)["fx_onednn::squeeze_excite"] = lowered_squeeze_excite;
  (*m)["fx_onednn::concat_buffer"] = [](OnnxBuilder& b) {
    lowered_concat(b, false);
  };
  (*m)["fx_onednn::concat_write_"] = [](OnnxBuilder& b) {
    lowered_concat(b, true);
  };
  (*m)["fx_onednn::max_pool2d"] = max_pool;
  (*m)["fx_onednn::avg_pool2d"] = avg_pool;
}

}  // namespace fx::internal::onnx_ops
