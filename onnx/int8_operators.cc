// Int8 graphs in ONNX: quantize and dequantize as QuantizeLinear and
// DequantizeLinear, and each quantized:: operator as QDQ around the float
// operator it computes (torch.onnx's mapping of quantized models).
#include <string>
#include <vector>

#include <onnx/onnx_pb.h>
#include <torch/torch.h>

#include "absl/strings/str_cat.h"
#include "fx/ir/node.h"
#include "fx/ir/operator_schemas.h"
#include "onnx/internal/mappings.h"

namespace fx::internal::onnx_ops {
namespace {

// --- Int8 (QDQ) ------------------------------------------------------------------


OnnxBuilder::QParams output_qparams(OnnxBuilder& b, const Argument& scale,
                                    const Argument& zero_point, bool is_signed) {
  return {number(b, scale), zero_point.to_int(), is_signed};
}

void quantize_per_tensor(OnnxBuilder& b) {
  CallArguments args(b.node());
  const c10::ScalarType dtype = args["dtype"].to_dtype();
  if (dtype != c10::ScalarType::QUInt8 && dtype != c10::ScalarType::QInt8) {
    refuse(b, "quantization to other than quint8 or qint8 does not map");
  }
  b.quantize_output(b.value(args["self"]),
                    output_qparams(b, args["scale"], args["zero_point"],
                                   dtype == c10::ScalarType::QInt8));
}

void dequantize(OnnxBuilder& b) {
  b.add("Identity", {b.dequantized(b.node().args()[0])}, b.output());
}

// A quantized weight (per tensor or per channel) as an int8 initializer and
// its DequantizeLinear.
std::string dequantized_weight(OnnxBuilder& b, const at::Tensor& w) {
  const std::string& name = b.node().name();
  const at::Tensor values = w.int_repr();
  const bool is_signed = w.scalar_type() == c10::ScalarType::QInt8;
  std::vector<std::string> inputs = {b.tensor(name + "_weight_quantized", values)};
  int64_t axis_of_channels = -1;
  if (w.qscheme() == at::kPerTensorAffine || w.qscheme() == at::kPerTensorSymmetric) {
    inputs.push_back(b.scales({w.q_scale()}));
    inputs.push_back(b.zero_points({w.q_zero_point()}, is_signed));
  } else {
    const at::Tensor s = w.q_per_channel_scales().to(at::kDouble).contiguous();
    const at::Tensor z = w.q_per_channel_zero_points().to(at::kLong).contiguous();
    inputs.push_back(b.scales(std::vector<double>(s.data_ptr<double>(),
                                                  s.data_ptr<double>() + s.numel())));
    inputs.push_back(b.zero_points(std::vector<int64_t>(z.data_ptr<int64_t>(),
                                                        z.data_ptr<int64_t>() + z.numel()),
                                   is_signed));
    axis_of_channels = w.q_per_channel_axis();
  }
  const std::string out = b.fresh(name + "_weight");
  onnx::NodeProto& n = b.add("DequantizeLinear", inputs, out);
  if (axis_of_channels >= 0) set_int(n, "axis", axis_of_channels);
  return out;
}

// The bias as int32 at the input's scale times each channel's weight scale
// (what the int8 kernels add), dequantized: ONNX Runtime fuses it in.
std::string dequantized_bias(OnnxBuilder& b, const at::Tensor& bias,
                             const at::Tensor& w, double input_scale) {
  const int64_t channels = bias.numel();
  at::Tensor weight_scales =
      (w.qscheme() == at::kPerTensorAffine || w.qscheme() == at::kPerTensorSymmetric)
          ? at::full({channels}, w.q_scale(), at::kDouble)
          : w.q_per_channel_scales().to(at::kDouble);
  const at::Tensor s = (weight_scales * input_scale).contiguous();
  const at::Tensor q = (bias.to(at::kDouble) / s).round().to(at::kInt);
  const std::string& name = b.node().name();
  std::vector<double> scale_values(s.data_ptr<double>(), s.data_ptr<double>() + channels);
  const std::string out = b.fresh(name + "_bias");
  set_int(b.add("DequantizeLinear",
                {b.tensor(name + "_bias_quantized", q), b.scales(scale_values),
                 b.tensor(name + "_bias_zero_point", at::zeros({channels}, at::kInt))},
                out),
          "axis", 0);
  return out;
}

void quantized_conv(OnnxBuilder& b, const char* kind, bool relu) {
  const std::vector<Argument>& a = b.node().args();
  std::optional<c10::IValue> packed = b.object(a.at(1));
  if (!packed) refuse(b, "the packed weights are not an attribute");
  const std::optional<OnnxBuilder::QParams> in = b.qparams(a.at(0));
  if (!in) refuse(b, "the input is not quantized");
  auto op = [&](const char* what) {
    return call_operator(absl::StrCat("quantized::", kind, "_", what).c_str(), {*packed});
  };
  std::vector<c10::IValue> unpacked = op("unpack");
  const at::Tensor w = unpacked.at(0).toTensor();
  if (op("transpose").at(0).toInt() != 0) refuse(b, "quantized transposed convolutions do not map yet");
  std::vector<std::string> inputs = {b.dequantized(a.at(0)), dequantized_weight(b, w)};
  if (!unpacked.at(1).isNone()) {
    inputs.push_back(dequantized_bias(b, unpacked.at(1).toTensor(), w, in->scale));
  }
  const std::string conv = b.fresh(b.node().name() + "_conv");
  onnx::NodeProto& n = b.add("Conv", inputs, conv);
  set_ints(n, "strides", op("stride").at(0).toIntVector());
  set_ints(n, "pads", symmetric_pads(op("padding").at(0).toIntVector()));
  set_ints(n, "dilations", op("dilation").at(0).toIntVector());
  set_int(n, "group", op("groups").at(0).toInt());
  std::string out = conv;
  if (relu) {
    out = b.fresh(b.node().name() + "_relu");
    b.add("Relu", {conv}, out);
  }
  b.quantize_output(out, output_qparams(b, a.at(2), a.at(3), false));
}

// fx_onednn::qconv and qconv_add_ (an int8 graph lowered by
// lower_onednn_int8): its
// weight and bias unpacked from the packed weight, QDQ around Conv, the
// residual `other` added and the activation after it, as quantized::conv2d.new
// then quantized::add_relu (or hardswish, a dequantized silu) write them (the residual not requantized
// between: qconv rounds once).
void lowered_qconv(OnnxBuilder& b, bool in_place) {
  CallArguments args(b.node());
  const std::optional<at::Tensor> packed = b.constant(args["weight"]);
  if (!packed) {
    refuse(b, "its weight is not a packed weight attribute (a get_attr of "
              "what fx_onednn::pack_qconv_weight made)");
  }
  const std::optional<OnnxBuilder::QParams> in = b.qparams(args["input"]);
  if (!in) refuse(b, "the input is not quantized");
  const int64_t groups = args["groups"].to_int();
  const at::Tensor w = call_operator("fx_onednn::unpack_qconv_weight",
                                     {*packed, groups})[0].toTensor();
  const at::Tensor bias =
      call_operator("fx_onednn::packed_qconv_bias", {*packed})[0].toTensor();
  const std::string& name = b.node().name();
  const std::string conv = b.fresh(name + "_conv");
  onnx::NodeProto& n = b.add("Conv",
                             {b.dequantized(args["input"]),
                              dequantized_weight(b, w),
                              dequantized_bias(b, bias, w, in->scale)},
                             conv);
  set_ints(n, "strides", args["stride"].to_int_list());
  set_ints(n, "pads", symmetric_pads(args["padding"].to_int_list()));
  set_ints(n, "dilations", args["dilation"].to_int_list());
  set_int(n, "group", groups);
  std::string out = conv;
  // qconv's residual `other`, or qconv_add_'s `self`.
  const Argument residual = in_place ? args["self"] : args["other"];
  if (!residual.is_none()) {
    const std::string sum = b.fresh(name + "_add");
    b.add("Add", {out, b.dequantized(residual)}, sum);
    out = sum;
  }
  const Argument activation = args["activation"];
  if (activation.is_string() && activation.to_string_ref() != "none") {
    const std::string& kind = activation.to_string_ref();
    const std::string r = b.fresh(name + "_" + kind);
    activation_into(b, out, kind, 0.0, 0.0, r);
    out = r;
  }
  b.quantize_output(out, output_qparams(b, args["output_scale"],
                                        args["output_zero_point"], false));
}

void quantized_linear(OnnxBuilder& b, bool relu) {
  const std::vector<Argument>& a = b.node().args();
  std::optional<c10::IValue> packed = b.object(a.at(1));
  if (!packed) refuse(b, "the packed weights are not an attribute");
  const std::optional<OnnxBuilder::QParams> in = b.qparams(a.at(0));
  if (!in) refuse(b, "the input is not quantized");
  std::vector<c10::IValue> unpacked = call_operator("quantized::linear_unpack", {*packed});
  const at::Tensor w = unpacked.at(0).toTensor();
  const std::string& name = b.node().name();
  const std::string x = b.dequantized(a.at(0));
  const std::string weight = dequantized_weight(b, w);
  const std::string t = b.fresh(name + "_weight_t");
  set_ints(b.add("Transpose", {weight}, t), "perm", {1, 0});
  std::string out = b.fresh(name + "_matmul");
  b.add("MatMul", {x, t}, out);
  if (!unpacked.at(1).isNone()) {
    const std::string sum = b.fresh(name + "_add");
    b.add("Add", {out, dequantized_bias(b, unpacked.at(1).toTensor(), w, in->scale)}, sum);
    out = sum;
  }
  if (relu) {
    const std::string r = b.fresh(name + "_relu");
    b.add("Relu", {out}, r);
    out = r;
  }
  b.quantize_output(out, output_qparams(b, a.at(2), a.at(3), false));
}

// quantized::add / mul (qa, qb, scale, zero_point), with relu after or not.
OnnxMapping quantized_binary(std::string op_type, bool relu) {
  return [op_type, relu](OnnxBuilder& b) {
    const std::vector<Argument>& a = b.node().args();
    std::string out = b.fresh(b.node().name() + "_" + op_type);
    b.add(op_type, {b.dequantized(a.at(0)), b.dequantized(a.at(1))}, out);
    if (relu) {
      const std::string r = b.fresh(b.node().name() + "_relu");
      b.add("Relu", {out}, r);
      out = r;
    }
    b.quantize_output(out, output_qparams(b, a.at(2), a.at(3), false));
  };
}

void quantized_cat(OnnxBuilder& b) {
  CallArguments args(b.node());
  const int64_t rank = static_cast<int64_t>(own_meta(b).sizes.size());
  std::vector<std::string> inputs;
  for (const Argument& t : args["qx"].elements()) inputs.push_back(b.dequantized(t));
  const std::string out = b.fresh(b.node().name() + "_concat");
  set_int(b.add("Concat", inputs, out), "axis", axis(args["dim"].to_int(), rank));
  b.quantize_output(out, output_qparams(b, args["scale"], args["zero_point"], false));
}

void quantized_hardswish(OnnxBuilder& b) {
  const std::vector<Argument>& a = b.node().args();
  const std::string out = b.fresh(b.node().name() + "_hardswish");
  b.add("HardSwish", {b.dequantized(a.at(0))}, out);
  b.quantize_output(out, output_qparams(b, a.at(1), a.at(2), false));
}

// fx_onednn::qactivation: DequantizeLinear, the activation,
// QuantizeLinear (what its table holds).
void lowered_qactivation(OnnxBuilder& b) {
  CallArguments args(b.node());
  const std::string kind = args["activation"].to_string_ref();
  std::string out = b.dequantized(args["input"]);
  if (kind != "none") {
    const std::string a = b.fresh(b.node().name() + "_" + kind);
    activation_into(b, out, kind, 0.0, 0.0, a);
    out = a;
  }
  b.quantize_output(out, output_qparams(b, args["output_scale"],
                                        args["output_zero_point"], false));
}

// fx_onednn::qmul_channels: Mul of the dequantized input and gate
// (broadcast), quantized.
void lowered_qmul_channels(OnnxBuilder& b) {
  CallArguments args(b.node());
  const std::string out = b.fresh(b.node().name() + "_mul");
  b.add("Mul", {b.dequantized(args["input"]), b.dequantized(args["gate"])},
        out);
  b.quantize_output(out, output_qparams(b, args["output_scale"],
                                        args["output_zero_point"], false));
}

// fx_onednn::qmean_channels: GlobalAveragePool of the dequantized input,
// quantized.
void lowered_qmean_channels(OnnxBuilder& b) {
  CallArguments args(b.node());
  const std::string out = b.fresh(b.node().name() + "_mean");
  b.add("GlobalAveragePool", {b.dequantized(args["input"])}, out);
  b.quantize_output(out, output_qparams(b, args["output_scale"],
                                        args["output_zero_point"], false));
}

// fx_onednn::qlinear_dynamic as ONNX Runtime's quantize_dynamic writes a
// linear layer: DynamicQuantizeLinear of the input (u8, its scale and
// zero point), MatMulInteger with the int8 weight [in, out] and that zero
// point, the int32 sums cast to float32 and scaled by input and weight
// scales, the bias added, the residual added, the activation.
void lowered_qlinear_dynamic(OnnxBuilder& b) {
  CallArguments args(b.node());
  const std::optional<at::Tensor> packed = b.constant(args["weight"]);
  if (!packed) {
    refuse(b, "its weight is not a packed weight attribute (a get_attr of "
              "what fx_onednn::pack_qlinear_weight made)");
  }
  const std::vector<c10::IValue> unpacked =
      call_operator("fx_onednn::unpack_qlinear_weight", {*packed});
  const at::Tensor w = unpacked.at(0).toTensor();  // qint8 [out, in]
  const at::Tensor bias = unpacked.at(1).toTensor();
  const std::string& name = b.node().name();
  const std::string q = b.fresh(name + "_q"), scale = b.fresh(name + "_scale"),
                    zero_point = b.fresh(name + "_zero_point");
  b.add("DynamicQuantizeLinear", {b.value(args["input"])},
        {q, scale, zero_point});
  const std::string weight =
      b.tensor(name + "_weight_int8", w.int_repr().t().contiguous());
  const std::string sums = b.fresh(name + "_sums");
  b.add("MatMulInteger", {q, weight, zero_point}, sums);
  const std::string real = b.fresh(name + "_sums_float");
  set_int(b.add("Cast", {sums}, real), "to", onnx::TensorProto::FLOAT);
  const at::Tensor w_scales =
      w.qscheme() == at::kPerTensorAffine || w.qscheme() == at::kPerTensorSymmetric
          ? at::full({w.size(0)}, w.q_scale(), at::kFloat)
          : w.q_per_channel_scales().to(at::kFloat);
  const std::string scales = b.fresh(name + "_scales");
  b.add("Mul", {scale, b.tensor(name + "_weight_scales", w_scales)}, scales);
  const std::string scaled = b.fresh(name + "_scaled");
  b.add("Mul", {real, scales}, scaled);
  const std::string kind = args["activation"].to_string_ref();
  const Argument other = args["other"];
  const bool residual = other.is_node();
  const bool last = kind == "none" && !residual;
  const std::string summed = last ? b.output() : b.fresh(name + "_add");
  b.add("Add", {scaled, b.tensor(name + "_bias", bias)}, summed);
  std::string result = summed;
  if (residual) {
    result = kind == "none" ? b.output() : b.fresh(name + "_residual");
    b.add("Add", {summed, b.value(other)}, result);
  }
  if (kind != "none") activation_into(b, result, kind, 0.0, 0.0, b.output());
}

}  // namespace

void add_int8_mappings(Mappings* m) {
  (*m)["aten::quantize_per_tensor"] = quantize_per_tensor;
  (*m)["aten::dequantize.self"] = dequantize;
  (*m)["quantized::conv2d.new"] = [](OnnxBuilder& b) { quantized_conv(b, "conv2d", false); };
  (*m)["quantized::conv2d_relu.new"] = [](OnnxBuilder& b) { quantized_conv(b, "conv2d", true); };
  (*m)["quantized::conv3d.new"] = [](OnnxBuilder& b) { quantized_conv(b, "conv3d", false); };
  (*m)["quantized::conv3d_relu.new"] = [](OnnxBuilder& b) { quantized_conv(b, "conv3d", true); };
  (*m)["quantized::linear"] = [](OnnxBuilder& b) { quantized_linear(b, false); };
  (*m)["quantized::linear_relu"] = [](OnnxBuilder& b) { quantized_linear(b, true); };
  (*m)["quantized::add"] = quantized_binary("Add", false);
  (*m)["quantized::add_relu"] = quantized_binary("Add", true);
  (*m)["quantized::mul"] = quantized_binary("Mul", false);
  (*m)["quantized::mul_relu"] = quantized_binary("Mul", true);
  (*m)["quantized::cat"] = quantized_cat;
  (*m)["quantized::hardswish"] = quantized_hardswish;
  (*m)["fx_onednn::qconv"] = [](OnnxBuilder& b) { lowered_qconv(b, false); };
  (*m)["fx_onednn::qconv_add_"] = [](OnnxBuilder& b) { lowered_qconv(b, true); };
  (*m)["fx_onednn::qactivation"] = lowered_qactivation;
  (*m)["fx_onednn::qmul_channels"] = lowered_qmul_channels;
  (*m)["fx_onednn::qmean_channels"] = lowered_qmean_channels;
  (*m)["fx_onednn::qlinear_dynamic"] = lowered_qlinear_dynamic;
}

}  // namespace fx::internal::onnx_ops
