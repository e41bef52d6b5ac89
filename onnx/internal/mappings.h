// Internal to fx::to_onnx: what the mappings of onnx/operators.cc (aten's
// operators), onnx/int8_operators.cc (quantized::, as QDQ) and
// onnx/lowered_operators.cc (fx_onednn::) share.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <ATen/core/ivalue.h>
#include <onnx/onnx_pb.h>

#include "onnx/to_onnx.h"

namespace fx::internal::onnx_ops {

using Mappings = std::map<std::string, OnnxMapping, std::less<>>;

// Attributes.
void set_int(onnx::NodeProto& n, const char* name, int64_t value);
void set_ints(onnx::NodeProto& n, const char* name,
              const std::vector<int64_t>& values);
void set_float(onnx::NodeProto& n, const char* name, double value);

// Refuses the node being mapped: to_onnx's error naming it and `why`.
[[noreturn]] void refuse(OnnxBuilder& b, const std::string& why);

// The tensor metadata of the node being mapped, or of `n` (refused
// without any).
const TensorMeta& own_meta(OnnxBuilder& b);
const TensorMeta& meta_of(OnnxBuilder& b, const Node* n);

// Reading the call: a dimension index made non-negative, an argument's
// rank, a number argument, PyTorch's symmetric padding as ONNX's pads.
int64_t axis(int64_t dim, int64_t rank);
int64_t rank_of(OnnxBuilder& b, const Argument& a);
double number(OnnxBuilder& b, const Argument& a);
// A tensor or scalar argument as an ONNX value of element type `type`
// (onnx::TensorProto's): a constant made so, a value of another type cast.
std::string value_as(OnnxBuilder& b, const Argument& a, int32_t type);
std::vector<int64_t> symmetric_pads(const std::vector<int64_t>& padding);

// Mappings the int8 and lowered operators reuse: the node's operator as
// the standard one (its weight the initializer `weight_value` when given,
// written into `output` when given).
void convolution(OnnxBuilder& b, const std::string& weight_value = "",
                 const std::string& output = "");
void conv_transpose(OnnxBuilder& b, const std::string& weight_value = "",
                    const std::string& output = "");
void linear(OnnxBuilder& b, const std::string& weight_value = "",
            const std::string& output = "");
void batch_norm_into(OnnxBuilder& b, const std::string& out);
void gelu_into(OnnxBuilder& b, const std::string& in, bool tanh,
               const std::string& out);
void silu_into(OnnxBuilder& b, const std::string& in, const std::string& out);
// `activation` (one of fx_onednn's names, not none; alpha and beta as
// fx_onednn's operators take them) of `value` into `out`.
void activation_into(OnnxBuilder& b, const std::string& value,
                     const std::string& activation, double alpha, double beta,
                     const std::string& out);
void recurrent(OnnxBuilder& b, bool lstm, bool lowered = false);
void max_pool(OnnxBuilder& b);
void avg_pool(OnnxBuilder& b);

// Calls a registered operator (by qualified name, the default overload)
// on `args`; its outputs.
std::vector<c10::IValue> call_operator(const char* name,
                                       std::vector<c10::IValue> args);

// The mappings of the int8 operators (quantize, dequantize, quantized::*)
// and of the operators lowered to oneDNN (fx_onednn::*).
void add_int8_mappings(Mappings* m);
void add_lowered_mappings(Mappings* m);
// argmax / argmin, any / all, the logical operators, index_copy
// (onnx/selection_operators.cc).
void add_selection_mappings(Mappings* m);

}  // namespace fx::internal::onnx_ops
