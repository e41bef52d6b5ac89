// The aten operators to_onnx maps, each as torch.onnx's symbolic function
// for opset 17 maps it (torch/onnx/symbolic_opset*.py in Python torch 1.13).
// Shapes the graph holds as literals (reshapes, expands, resizes) are the
// node's own output shape, from its tensor metadata; with dynamic
// dimensions, the sizes the graph computes (reshapes, expands, slices) or
// read from the input (a resize's batch), and a mapping that needs a size
// that varies as a constant refuses (fixed_size).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <onnx/onnx_pb.h>
#include <torch/torch.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "fx/ir/errors.h"
#include "fx/ir/function.h"
#include "fx/ir/node.h"
#include "fx/ir/operator_schemas.h"
#include "onnx/internal/mappings.h"
#include "onnx/internal/operators.h"
#include "passes/operator_families.h"
#include "passes/patterns.h"

namespace fx::internal {
namespace onnx_ops {

// --- Attributes -----------------------------------------------------------------

void set_int(onnx::NodeProto& n, const char* name, int64_t value) {
  onnx::AttributeProto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(value);
}

void set_ints(onnx::NodeProto& n, const char* name,
              const std::vector<int64_t>& values) {
  onnx::AttributeProto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t v : values) a->add_ints(v);
}

void set_float(onnx::NodeProto& n, const char* name, double value) {
  onnx::AttributeProto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(static_cast<float>(value));
}

void set_string(onnx::NodeProto& n, const char* name, const std::string& value) {
  onnx::AttributeProto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(value);
}

// --- Reading the call -------------------------------------------------------------

[[noreturn]] void refuse(OnnxBuilder& b, const std::string& why) {
  throw GraphError(absl::StrCat("to_onnx: node %", b.node().name(), " (",
                                b.node().format_node(), "): ", why));
}

const TensorMeta& meta_of(OnnxBuilder& b, const Node* n) {
  const TensorMeta* meta = n == nullptr ? nullptr : n->tensor_meta();
  if (meta == nullptr) {
    refuse(b, absl::StrCat("%", n ? n->name() : "?",
                           " has no tensor metadata (run ShapeProp first)"));
  }
  return *meta;
}

const TensorMeta& own_meta(OnnxBuilder& b) { return meta_of(b, &b.node()); }

// The size of dimension `d` of `n`'s value, which the mapping needs as a
// constant: refused when it varies (a dynamic dimension).
int64_t fixed_size(OnnxBuilder& b, const Node* n, int64_t d) {
  const TensorMeta& meta = meta_of(b, n);
  if (b.varies(*n, d)) {
    refuse(b, absl::StrCat("needs the size of dimension ", d, " of %", n->name(),
                           ", which is dynamic: this operator exports with "
                           "fixed sizes only (trace without that dynamic "
                           "dimension, or run specialize_sizes)"));
  }
  return meta.sizes.at(d);
}

std::vector<int64_t> fixed_sizes(OnnxBuilder& b, const Node* n) {
  std::vector<int64_t> sizes;
  for (size_t d = 0; d < meta_of(b, n).sizes.size(); ++d) {
    sizes.push_back(fixed_size(b, n, static_cast<int64_t>(d)));
  }
  return sizes;
}

bool any_varies(OnnxBuilder& b, const Node* n) {
  for (size_t d = 0; d < meta_of(b, n).sizes.size(); ++d) {
    if (b.varies(*n, static_cast<int64_t>(d))) return true;
  }
  return false;
}

int64_t rank_of(OnnxBuilder& b, const Argument& a) {
  if (!a.is_node()) refuse(b, "expected a tensor argument");
  return static_cast<int64_t>(meta_of(b, a.to_node()).sizes.size());
}

// An axis in [0, rank).
int64_t axis(int64_t dim, int64_t rank) { return dim < 0 ? dim + rank : dim; }

int32_t onnx_type(OnnxBuilder& b, c10::ScalarType dtype) {
  std::optional<int32_t> type = onnx_element_type(dtype);
  if (!type) refuse(b, absl::StrCat("tensors of dtype ", c10::toString(dtype), " do not map"));
  return *type;
}

// The ONNX element type of a tensor argument (for constants beside it); a
// quantized tensor's mappings run on its float32 value.
int32_t element_type_of(OnnxBuilder& b, const Argument& a) {
  const c10::ScalarType dtype = meta_of(b, a.to_node()).dtype;
  return c10::isQIntType(dtype) ? onnx::TensorProto::FLOAT : onnx_type(b, dtype);
}

// `n` ints from an int or an int list (patterns.h's reading of geometry).
std::vector<int64_t> ints(OnnxBuilder& b, const Argument& a, size_t n) {
  std::optional<std::vector<int64_t>> v = constant_ints(a, n);
  if (!v) refuse(b, absl::StrCat("expected ", n, " constant ints, got ", a.to_string()));
  return *v;
}

// ONNX pads: all begins, then all ends.
std::vector<int64_t> symmetric_pads(const std::vector<int64_t>& padding) {
  std::vector<int64_t> pads = padding;
  pads.insert(pads.end(), padding.begin(), padding.end());
  return pads;
}

double number(OnnxBuilder& b, const Argument& a) {
  std::optional<double> v = constant_number(a);
  if (!v) refuse(b, absl::StrCat("expected a constant number, got ", a.to_string()));
  return *v;
}

bool is_one(const Argument& a) { return constant_number(a) == 1.0; }

// --- Mappings -----------------------------------------------------------------------

// op(x) for the first argument.
OnnxMapping unary(std::string op_type) {
  return [op_type](OnnxBuilder& b) {
    b.add(op_type, {b.value(b.node().args()[0])}, b.output());
  };
}

// op(a, b), a scalar b made a constant of a's element type.
// A tensor or scalar argument as an ONNX value of element type `type`: a
// constant made so, a tensor of another type cast (torch promotes types
// where ONNX does not: int64 + 0.5, int / int).
std::string value_as(OnnxBuilder& b, const Argument& a, int32_t type) {
  if (!a.is_node()) return b.value(a, type);
  // A size the graph computes (x * (B - 1)): an int64 scalar.
  const bool size = is_sym_call(*a.to_node());
  if (size ? type == onnx::TensorProto::INT64 : element_type_of(b, a) == type) {
    return b.value(a, type);
  }
  const std::string cast = b.fresh(a.to_node()->name() + "_cast");
  set_int(b.add("Cast", {b.value(a)}, cast), "to", type);
  return cast;
}

// arange(end), arange.start(start, end), arange.start_step(start, end,
// step) as Range, its bounds constants or sizes the graph computes
// (positions 0 .. T-1 of a dynamic length).
void arange(OnnxBuilder& b) {
  CallArguments args(b.node());
  const int32_t type = onnx_type(b, own_meta(b).dtype);
  auto bound = [&](const char* name, int64_t fallback) -> std::string {
    const Argument a = args.has(name) ? args[name] : Argument(fallback);
    if (!a.is_node()) return b.value(a, type);
    // A computed size: an int64 scalar.
    if (type == onnx::TensorProto::INT64) return b.value(a);
    const std::string cast = b.fresh(a.to_node()->name() + "_cast");
    set_int(b.add("Cast", {b.value(a)}, cast), "to", type);
    return cast;
  };
  b.add("Range", {bound("start", 0), bound("end", 0), bound("step", 1)}, b.output());
}

// Factories whose size the graph computes (a causal mask at a dynamic
// length, an LSTM's zero state at a dynamic batch): the fill value,
// expanded to the size as the model runs. Factories of fixed sizes fold
// into initializers before export. `fill`: ones and zeros; else the call's
// fill_value. With `like`, the size is the `self` argument's.
OnnxMapping filled(std::optional<double> fill, bool like) {
  return [fill, like](OnnxBuilder& b) {
    CallArguments args(b.node());
    const int32_t type = onnx_type(b, own_meta(b).dtype);
    const Argument value = fill ? Argument(*fill) : args["fill_value"];
    std::string shape;
    if (like) {
      shape = b.fresh(b.node().name() + "_shape");
      b.add("Shape", {b.value(args["self"])}, shape);
    } else {
      shape = b.value(args["size"]);
    }
    b.add("Expand", {b.value(value, type), shape}, b.output());
  };
}

// triu / tril: ONNX's Trilu, the diagonal as its k.
OnnxMapping triangle(bool upper) {
  return [upper](OnnxBuilder& b) {
    CallArguments args(b.node());
    const Argument diagonal = args.has("diagonal") ? args["diagonal"] : Argument(0);
    set_int(b.add("Trilu",
                  {b.value(args["self"]),
                   b.value(diagonal, onnx::TensorProto::INT64)},
                  b.output()),
            "upper", upper ? 1 : 0);
  };
}

OnnxMapping binary(std::string op_type) {
  return [op_type](OnnxBuilder& b) {
    CallArguments args(b.node());
    const Argument& self = args["self"];
    const Argument& other = args["other"];
    if (args.has("alpha") && !is_one(args["alpha"])) {
      refuse(b, "alpha other than 1 does not map yet");
    }
    if (args.has("rounding_mode") && !args["rounding_mode"].is_none()) {
      refuse(b, "division with a rounding mode does not map yet");
    }
    // Computed in the result's type, as torch computes it.
    const int32_t type = element_type_of(b, Argument(const_cast<Node*>(&b.node())));
    b.add(op_type, {value_as(b, self, type), value_as(b, other, type)}, b.output());
  };
}

void identity(OnnxBuilder& b) {
  b.add("Identity", {b.value(b.node().args()[0])}, b.output());
}

void dropout(OnnxBuilder& b) {
  CallArguments args(b.node());
  if (args["train"].to_bool() && number(b, args["p"]) != 0.0) {
    refuse(b, "dropout in training mode: trace the model in eval mode to export it");
  }
  identity(b);
}

// Reshapes to the node's own (example) output shape.
// x reshaped to [Shape(x)[:first], middle, Shape(x)[last + 1:]], read at
// run time: flatten's and unflatten's middle dimensions replaced.
void reshape_middle(OnnxBuilder& b, const Argument& x, int64_t first, int64_t last,
                    const std::string& middle) {
  const std::string& name = b.node().name();
  const int64_t rank = rank_of(b, x);
  std::vector<std::string> pieces;
  if (first > 0) {
    const std::string before = b.fresh(name + "_before");
    set_int(b.add("Shape", {b.value(x)}, before), "end", first);
    pieces.push_back(before);
  }
  pieces.push_back(middle);
  if (last + 1 < rank) {
    const std::string after = b.fresh(name + "_after");
    set_int(b.add("Shape", {b.value(x)}, after), "start", last + 1);
    pieces.push_back(after);
  }
  const std::string shape = b.fresh(name + "_shape");
  set_int(b.add("Concat", pieces, shape), "axis", 0);
  b.add("Reshape", {b.value(x), shape}, b.output());
}

// A shape computed at run time (dynamic dimensions): what the node asks
// for, its sizes read from the graph's own size values.
void reshape_dynamic(OnnxBuilder& b) {
  const Node& n = b.node();
  const Argument& x = n.args()[0];
  const int64_t rank = rank_of(b, x);
  if (n.is_call_to({"aten::view", "aten::reshape", "aten::_reshape_alias"})) {
    b.add("Reshape", {b.value(x), b.value(n.args().at(1))}, b.output());
    return;
  }
  if (n.is_call_to({"aten::unsqueeze"})) {
    CallArguments args(n);
    b.add("Unsqueeze", {b.value(x), b.int64s({axis(args["dim"].to_int(), rank + 1)})},
          b.output());
    return;
  }
  if (n.is_call_to({"aten::flatten.using_ints"})) {
    // The dimensions before start_dim and after end_dim kept, those between
    // multiplied.
    CallArguments args(n);
    reshape_middle(b, x, axis(args["start_dim"].to_int(), rank),
                   axis(args["end_dim"].to_int(), rank), b.int64s({-1}));
    return;
  }
  if (n.is_call_to({"aten::unflatten.int"})) {
    CallArguments args(n);
    const int64_t dim = axis(args["dim"].to_int(), rank);
    reshape_middle(b, x, dim, dim, b.value(args["sizes"]));
    return;
  }
  if (!n.is_call_to({"aten::squeeze", "aten::squeeze.dim"})) {
    refuse(b, "reshapes with dynamic dimensions this way do not map yet");
  }
  // squeeze, squeeze.dim: the dimensions of size 1, which must not vary.
  std::vector<int64_t> axes;
  const Node* input = x.to_node();
  CallArguments args(n);
  if (args.has("dim")) {
    const int64_t d = axis(args["dim"].to_int(), rank);
    if (fixed_size(b, input, d) == 1) axes.push_back(d);
  } else {
    for (int64_t d = 0; d < rank; ++d) {
      if (fixed_size(b, input, d) == 1) axes.push_back(d);
    }
  }
  if (axes.empty()) {
    b.add("Identity", {b.value(x)}, b.output());
  } else {
    b.add("Squeeze", {b.value(x), b.int64s(axes)}, b.output());
  }
}

void reshape_to_output(OnnxBuilder& b) {
  if (any_varies(b, &b.node())) {
    reshape_dynamic(b);
    return;
  }
  b.add("Reshape",
        {b.value(b.node().args()[0]), b.int64s(own_meta(b).sizes)},
        b.output());
}

void clip(OnnxBuilder& b, const std::optional<double>& low,
          const std::optional<double>& high) {
  const Argument& x = b.node().args()[0];
  const int32_t type = element_type_of(b, x);
  b.add("Clip",
        {b.value(x), low ? b.value(Argument(*low), type) : std::string(),
         high ? b.value(Argument(*high), type) : std::string()},
        b.output());
}

// aten's convolutions; a lowered one passes its unpacked weight's value and
// the value to write (its fused post-ops follow).
void convolution(OnnxBuilder& b, const std::string& weight_value,
                 const std::string& output) {
  CallArguments args(b.node());
  const Argument& input = args["input"];
  const Argument& weight = args["weight"];
  const int64_t spatial = rank_of(b, weight) - 2;
  const bool transposed = args.has("transposed") && args["transposed"].to_bool();
  std::vector<int64_t> stride = ints(b, args["stride"], spatial);
  std::vector<int64_t> dilation = ints(b, args["dilation"], spatial);
  std::vector<int64_t> padding;
  if (args["padding"].is_string()) {
    // padding="valid": none; "same" (stride 1): the total split as torch
    // splits it, the extra one at the end.
    const std::vector<int64_t>& w = meta_of(b, weight.to_node()).sizes;
    std::vector<int64_t> begin, end;
    for (int64_t i = 0; i < spatial; ++i) {
      const int64_t total = args["padding"].to_string_ref() == "same"
                                ? dilation[i] * (w[2 + i] - 1)
                                : 0;
      begin.push_back(total / 2);
      end.push_back(total - total / 2);
    }
    padding = begin;
    padding.insert(padding.end(), end.begin(), end.end());
  } else {
    padding = symmetric_pads(ints(b, args["padding"], spatial));
  }
  const Argument& bias = args["bias"];
  std::vector<std::string> inputs = {
      b.value(input), weight_value.empty() ? b.value(weight) : weight_value};
  if (!bias.is_none()) inputs.push_back(b.value(bias));
  onnx::NodeProto& n = b.add(transposed ? "ConvTranspose" : "Conv", inputs,
                             output.empty() ? b.output() : output);
  set_ints(n, "strides", stride);
  set_ints(n, "pads", padding);
  set_ints(n, "dilations", dilation);
  set_int(n, "group", args["groups"].to_int());
  if (transposed) {
    set_ints(n, "output_padding", ints(b, args["output_padding"], spatial));
  }
}

void conv_transpose(OnnxBuilder& b, const std::string& weight_value,
                    const std::string& output) {
  CallArguments args(b.node());
  const Argument& weight = args["weight"];
  const int64_t spatial = rank_of(b, weight) - 2;
  std::vector<std::string> inputs = {
      b.value(args["input"]),
      weight_value.empty() ? b.value(weight) : weight_value};
  if (!args["bias"].is_none()) inputs.push_back(b.value(args["bias"]));
  onnx::NodeProto& n = b.add("ConvTranspose", inputs,
                             output.empty() ? b.output() : output);
  set_ints(n, "strides", ints(b, args["stride"], spatial));
  set_ints(n, "pads", symmetric_pads(ints(b, args["padding"], spatial)));
  set_ints(n, "dilations", ints(b, args["dilation"], spatial));
  set_ints(n, "output_padding", ints(b, args["output_padding"], spatial));
  set_int(n, "group", args["groups"].to_int());
}

// unbind: a Split into pieces of 1, each squeezed.
void unbind(OnnxBuilder& b) {
  CallArguments args(b.node());
  const int64_t rank = rank_of(b, args["self"]);
  const int64_t dim = axis(args["dim"].to_int(), rank);
  const int64_t n = fixed_size(b, args["self"].to_node(), dim);
  std::vector<std::string> pieces, outputs;
  for (int64_t i = 0; i < n; ++i) {
    pieces.push_back(b.fresh(absl::StrCat(b.node().name(), "_piece_", i)));
    outputs.push_back(b.fresh(absl::StrCat(b.node().name(), "_", i)));
  }
  set_int(b.add("Split", {b.value(args["self"]), b.int64s(std::vector<int64_t>(n, 1))},
                pieces),
          "axis", dim);
  for (int64_t i = 0; i < n; ++i) {
    b.add("Squeeze", {pieces[i], b.int64s({dim})}, outputs[i]);
  }
  b.set_outputs(outputs);
}

// aten::batch_norm (eval mode), and fx_onednn::batch_norm (no `training`;
// BatchNormalization into `out`).
void batch_norm_into(OnnxBuilder& b, const std::string& out) {
  CallArguments args(b.node());
  if (args.has("training") && args["training"].to_bool()) {
    refuse(b, "batch_norm in training mode: trace the model in eval mode to export it");
  }
  const Argument& input = args["input"];
  const int64_t channels = fixed_size(b, input.to_node(), 1);
  auto or_constant = [&](const Argument& a, float fill) {
    return a.is_none() ? b.floats(std::vector<float>(channels, fill)) : b.value(a);
  };
  if (args["running_mean"].is_none() || args["running_var"].is_none()) {
    refuse(b, "batch_norm without running statistics does not map");
  }
  onnx::NodeProto& n = b.add(
      "BatchNormalization",
      {b.value(input), or_constant(args["weight"], 1.0f),
       or_constant(args["bias"], 0.0f), b.value(args["running_mean"]),
       b.value(args["running_var"])},
      out);
  set_float(n, "epsilon", number(b, args["eps"]));
}

void batch_norm(OnnxBuilder& b) { batch_norm_into(b, b.output()); }

void layer_norm(OnnxBuilder& b) {
  CallArguments args(b.node());
  const Argument& input = args["input"];
  const std::vector<int64_t> shape = args["normalized_shape"].to_int_list();
  int64_t elements = 1;
  for (int64_t s : shape) elements *= s;
  auto or_constant = [&](const Argument& a, float fill) {
    return a.is_none() ? b.floats(std::vector<float>(elements, fill)) : b.value(a);
  };
  onnx::NodeProto& n = b.add(
      "LayerNormalization",
      {b.value(input), or_constant(args["weight"], 1.0f),
       or_constant(args["bias"], 0.0f)},
      b.output());
  set_int(n, "axis", -static_cast<int64_t>(shape.size()));
  set_float(n, "epsilon", number(b, args["eps"]));
}

void max_pool(OnnxBuilder& b) {
  CallArguments args(b.node());
  const int64_t spatial = rank_of(b, args["self"]) - 2;
  std::vector<int64_t> kernel = ints(b, args["kernel_size"], spatial);
  std::vector<int64_t> stride = args["stride"].is_list() && args["stride"].elements().empty()
                                    ? kernel
                                    : ints(b, args["stride"], spatial);
  onnx::NodeProto& n = b.add("MaxPool", {b.value(args["self"])}, b.output());
  set_ints(n, "kernel_shape", kernel);
  set_ints(n, "strides", stride);
  set_ints(n, "pads", symmetric_pads(ints(b, args["padding"], spatial)));
  set_ints(n, "dilations", ints(b, args["dilation"], spatial));
  set_int(n, "ceil_mode", args["ceil_mode"].to_bool() ? 1 : 0);
}

void avg_pool(OnnxBuilder& b) {
  CallArguments args(b.node());
  const int64_t spatial = rank_of(b, args["self"]) - 2;
  if (args.has("divisor_override") && !args["divisor_override"].is_none()) {
    refuse(b, "avg_pool with divisor_override does not map");
  }
  std::vector<int64_t> kernel = ints(b, args["kernel_size"], spatial);
  std::vector<int64_t> stride = args["stride"].is_list() && args["stride"].elements().empty()
                                    ? kernel
                                    : ints(b, args["stride"], spatial);
  onnx::NodeProto& n = b.add("AveragePool", {b.value(args["self"])}, b.output());
  set_ints(n, "kernel_shape", kernel);
  set_ints(n, "strides", stride);
  set_ints(n, "pads", symmetric_pads(ints(b, args["padding"], spatial)));
  set_int(n, "ceil_mode", args["ceil_mode"].to_bool() ? 1 : 0);
  set_int(n, "count_include_pad", args["count_include_pad"].to_bool() ? 1 : 0);
}

// To a global pool when the output is 1 everywhere, else an average pool
// whose windows tile the input exactly.
void adaptive_avg_pool(OnnxBuilder& b) {
  CallArguments args(b.node());
  const Argument& x = args["self"];
  const std::vector<int64_t>& in = meta_of(b, x.to_node()).sizes;
  const std::vector<int64_t>& out = own_meta(b).sizes;
  const size_t rank = in.size();
  const size_t spatial = args["output_size"].to_int_list().size();
  if (rank != spatial + 2) {
    refuse(b, "adaptive pooling of an unbatched input does not map yet");
  }
  bool global = true;
  std::vector<int64_t> kernel;
  for (size_t i = rank - spatial; i < rank; ++i) {
    global = global && fixed_size(b, &b.node(), static_cast<int64_t>(i)) == 1;
  }
  for (size_t i = rank - spatial; i < rank && !global; ++i) {
    fixed_size(b, x.to_node(), static_cast<int64_t>(i));
  }
  for (size_t i = rank - spatial; i < rank; ++i) {
    if (out[i] == 0 || in[i] % out[i] != 0) {
      refuse(b, "adaptive pooling to a size that does not divide the input's does not map");
    }
    kernel.push_back(in[i] / out[i]);
  }
  if (global) {
    b.add("GlobalAveragePool", {b.value(x)}, b.output());
    return;
  }
  onnx::NodeProto& n = b.add("AveragePool", {b.value(x)}, b.output());
  set_ints(n, "kernel_shape", kernel);
  set_ints(n, "strides", kernel);
}

void linear(OnnxBuilder& b, const std::string& weight_value,
            const std::string& output) {
  CallArguments args(b.node());
  const Argument& input = args["input"];
  const std::string weight =
      weight_value.empty() ? b.value(args["weight"]) : weight_value;
  const Argument& bias = args["bias"];
  const std::string& out = output.empty() ? b.output() : output;
  if (rank_of(b, input) == 2) {
    std::vector<std::string> inputs = {b.value(input), weight};
    if (!bias.is_none()) inputs.push_back(b.value(bias));
    onnx::NodeProto& n = b.add("Gemm", inputs, out);
    set_int(n, "transB", 1);
    return;
  }
  const std::string t = b.fresh(b.node().name() + "_weight_t");
  set_ints(b.add("Transpose", {weight}, t), "perm", {1, 0});
  if (bias.is_none()) {
    b.add("MatMul", {b.value(input), t}, out);
    return;
  }
  const std::string product = b.fresh(b.node().name() + "_matmul");
  b.add("MatMul", {b.value(input), t}, product);
  b.add("Add", {product, b.value(bias)}, out);
}

void addmm(OnnxBuilder& b) {
  CallArguments args(b.node());
  onnx::NodeProto& n = b.add(
      "Gemm", {b.value(args["mat1"]), b.value(args["mat2"]), b.value(args["self"])},
      b.output());
  set_float(n, "alpha", number(b, args["alpha"]));
  set_float(n, "beta", number(b, args["beta"]));
}

void transpose_2d(OnnxBuilder& b) {
  const Argument& x = b.node().args()[0];
  if (rank_of(b, x) < 2) {
    identity(b);
    return;
  }
  set_ints(b.add("Transpose", {b.value(x)}, b.output()), "perm", {1, 0});
}

void transpose(OnnxBuilder& b) {
  CallArguments args(b.node());
  const int64_t rank = rank_of(b, args["self"]);
  std::vector<int64_t> perm(rank);
  for (int64_t i = 0; i < rank; ++i) perm[i] = i;
  std::swap(perm[axis(args["dim0"].to_int(), rank)],
            perm[axis(args["dim1"].to_int(), rank)]);
  set_ints(b.add("Transpose", {b.value(args["self"])}, b.output()), "perm", perm);
}

void permute(OnnxBuilder& b) {
  CallArguments args(b.node());
  const int64_t rank = rank_of(b, args["self"]);
  std::vector<int64_t> perm = args["dims"].to_int_list();
  for (int64_t& p : perm) p = axis(p, rank);
  set_ints(b.add("Transpose", {b.value(args["self"])}, b.output()), "perm", perm);
}

// The axes a reduction's `dim` names (every axis when it names none) and
// its keepdim (false without a dim).
std::vector<int64_t> reduced_axes(const CallArguments& args, int64_t rank,
                                  bool* keepdim) {
  std::vector<int64_t> axes;
  *keepdim = false;
  if (args.has("dim") && !args["dim"].is_none()) {
    for (int64_t d : args["dim"].to_int_list()) axes.push_back(axis(d, rank));
    *keepdim = args["keepdim"].to_bool();
  } else {
    for (int64_t d = 0; d < rank; ++d) axes.push_back(d);
  }
  return axes;
}

void reduce_mean(OnnxBuilder& b) {
  CallArguments args(b.node());
  const int64_t rank = rank_of(b, args["self"]);
  if (args.has("dtype") && !args["dtype"].is_none()) {
    refuse(b, "mean with a dtype does not map yet");
  }
  bool keepdim = false;
  const std::vector<int64_t> axes = reduced_axes(args, rank, &keepdim);
  onnx::NodeProto& n = b.add("ReduceMean", {b.value(args["self"])}, b.output());
  set_ints(n, "axes", axes);
  set_int(n, "keepdims", keepdim ? 1 : 0);
}

void cat(OnnxBuilder& b) {
  CallArguments args(b.node());
  const int64_t rank = static_cast<int64_t>(own_meta(b).sizes.size());
  std::vector<std::string> inputs;
  for (const Argument& t : args["tensors"].elements()) inputs.push_back(b.value(t));
  set_int(b.add("Concat", inputs, b.output()), "axis", axis(args["dim"].to_int(), rank));
}

void softmax(const char* op_type, OnnxBuilder& b) {
  CallArguments args(b.node());
  if (args.has("dtype") && !args["dtype"].is_none()) {
    refuse(b, "softmax with a dtype does not map yet");
  }
  const int64_t rank = rank_of(b, args["self"]);
  set_int(b.add(op_type, {b.value(args["self"])}, b.output()), "axis",
          axis(args["dim"].to_int(), rank));
}

// gelu of value `in` into `out`: erf's, or with `tanh` the tanh
// approximation.
void gelu_into(OnnxBuilder& b, const std::string& in, bool tanh,
               const std::string& out) {
  const std::string& name = b.node().name();
  if (tanh) {
    // 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))
    const std::string cube = b.fresh(name + "_cube");
    b.add("Pow", {in, b.floats({3.0f}, true)}, cube);
    const std::string scaled = b.fresh(name + "_scaled");
    b.add("Mul", {cube, b.floats({0.044715f}, true)}, scaled);
    const std::string inner = b.fresh(name + "_inner");
    b.add("Add", {in, scaled}, inner);
    const std::string arg = b.fresh(name + "_arg");
    b.add("Mul", {inner, b.floats({static_cast<float>(std::sqrt(2.0 / M_PI))}, true)}, arg);
    const std::string t = b.fresh(name + "_tanh");
    b.add("Tanh", {arg}, t);
    const std::string one_plus = b.fresh(name + "_one_plus");
    b.add("Add", {t, b.floats({1.0f}, true)}, one_plus);
    const std::string half_x = b.fresh(name + "_half_x");
    b.add("Mul", {in, b.floats({0.5f}, true)}, half_x);
    b.add("Mul", {half_x, one_plus}, out);
    return;
  }
  // 0.5 x (1 + erf(x / sqrt(2)))
  const std::string scaled = b.fresh(name + "_scaled");
  b.add("Mul", {in, b.floats({static_cast<float>(M_SQRT1_2)}, true)}, scaled);
  const std::string e = b.fresh(name + "_erf");
  b.add("Erf", {scaled}, e);
  const std::string one_plus = b.fresh(name + "_one_plus");
  b.add("Add", {e, b.floats({1.0f}, true)}, one_plus);
  const std::string half_x = b.fresh(name + "_half_x");
  b.add("Mul", {in, b.floats({0.5f}, true)}, half_x);
  b.add("Mul", {half_x, one_plus}, out);
}

void gelu(OnnxBuilder& b) {
  CallArguments args(b.node());
  gelu_into(b, b.value(args["self"]),
            args["approximate"].to_string_ref() == "tanh", b.output());
}

// silu of value `in` into `out`: x * sigmoid(x).
void silu_into(OnnxBuilder& b, const std::string& in, const std::string& out) {
  const std::string s = b.fresh(b.node().name() + "_sigmoid");
  b.add("Sigmoid", {in}, s);
  b.add("Mul", {in, s}, out);
}

void silu(OnnxBuilder& b) {
  silu_into(b, b.value(b.node().args()[0]), b.output());
}

void embedding(OnnxBuilder& b) {
  CallArguments args(b.node());
  set_int(b.add("Gather", {b.value(args["weight"]), b.value(args["indices"])},
                b.output()),
          "axis", 0);
}

void select(OnnxBuilder& b) {
  CallArguments args(b.node());
  const int64_t rank = rank_of(b, args["self"]);
  set_int(b.add("Gather",
                {b.value(args["self"]), b.int64s({args["index"].to_int()}, true)},
                b.output()),
          "axis", axis(args["dim"].to_int(), rank));
}

void slice(OnnxBuilder& b) {
  CallArguments args(b.node());
  const int64_t rank = rank_of(b, args["self"]);
  // A bound: a constant, or a size the graph computes (x[:, :T]).
  auto bound = [&](const Argument& a, int64_t none) {
    if (a.is_node()) return b.value(Argument::list({a}));
    return b.int64s({a.is_none() ? none : a.to_int()});
  };
  b.add("Slice",
        {b.value(args["self"]), bound(args["start"], 0),
         bound(args["end"], std::numeric_limits<int64_t>::max()),
         b.int64s({axis(args["dim"].to_int(), rank)}),
         b.int64s({args["step"].to_int()})},
        b.output());
}

void narrow(OnnxBuilder& b) {
  CallArguments args(b.node());
  const int64_t rank = rank_of(b, args["self"]);
  if (!args["start"].is_int()) refuse(b, "narrow at a start given as a tensor does not map");
  const int64_t start = args["start"].to_int();
  b.add("Slice",
        {b.value(args["self"]), b.int64s({start}),
         b.int64s({start + args["length"].to_int()}),
         b.int64s({axis(args["dim"].to_int(), rank)})},
        b.output());
}

void expand(OnnxBuilder& b) {
  if (any_varies(b, &b.node())) {
    // The sizes asked for, -1 (keep) as 1 (Expand broadcasts).
    std::vector<Argument> sizes;
    for (const Argument& e : b.node().args().at(1).elements()) {
      sizes.push_back(e.is_int() && e.to_int() == -1 ? Argument(int64_t{1}) : e);
    }
    b.add("Expand", {b.value(b.node().args()[0]), b.value(Argument::list(sizes))},
          b.output());
    return;
  }
  b.add("Expand", {b.value(b.node().args()[0]), b.int64s(own_meta(b).sizes)},
        b.output());
}

// Resize's sizes: the node's own, its batch and channels read from the
// input when they vary (a dynamic batch); the spatial ones must not.
std::string resize_sizes(OnnxBuilder& b, const Argument& input) {
  const Node* n = &b.node();
  const int64_t rank = static_cast<int64_t>(own_meta(b).sizes.size());
  if (!b.varies(*n, 0) && !b.varies(*n, 1)) return b.int64s(fixed_sizes(b, n));
  std::vector<int64_t> spatial;
  for (int64_t d = 2; d < rank; ++d) spatial.push_back(fixed_size(b, n, d));
  const std::string leading = b.fresh(n->name() + "_leading");
  set_int(b.add("Shape", {b.value(input)}, leading), "end", 2);
  const std::string sizes = b.fresh(n->name() + "_sizes");
  set_int(b.add("Concat", {leading, b.int64s(spatial)}, sizes), "axis", 0);
  return sizes;
}

void upsample_nearest(OnnxBuilder& b) {
  const Argument& input = b.node().args()[0];
  onnx::NodeProto& n = b.add(
      "Resize", {b.value(input), "", "", resize_sizes(b, input)}, b.output());
  set_string(n, "mode", "nearest");
  set_string(n, "coordinate_transformation_mode", "asymmetric");
  set_string(n, "nearest_mode", "floor");
}

// upsample_bilinear2d / linear / trilinear: Resize to the node's own
// shape, pixel centres as torch places them. The input is the first
// argument: `input` in the .vec overloads, `self` in the others (which a
// file Python 1.13 traced calls once LibTorch 2.13 loads it).
void upsample_linear(OnnxBuilder& b) {
  CallArguments args(b.node());
  const Argument& input = b.node().args()[0];
  onnx::NodeProto& n = b.add(
      "Resize", {b.value(input), "", "", resize_sizes(b, input)}, b.output());
  set_string(n, "mode", "linear");
  set_string(n, "coordinate_transformation_mode",
             args["align_corners"].to_bool() ? "align_corners" : "pytorch_half_pixel");
}

// roll: per dimension, the last `shift` elements moved to the front (two
// Slices and a Concat), as torch.onnx's roll.
void roll(OnnxBuilder& b) {
  CallArguments args(b.node());
  const std::vector<int64_t>& sizes = meta_of(b, args["self"].to_node()).sizes;
  const int64_t rank = static_cast<int64_t>(sizes.size());
  const std::vector<int64_t> shifts = args["shifts"].to_int_list();
  const std::vector<int64_t> dims = args["dims"].to_int_list();
  if (dims.empty() || dims.size() != shifts.size()) {
    refuse(b, "roll of the flattened tensor does not map yet");
  }
  std::string x = b.value(args["self"]);
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = axis(dims[i], rank);
    const int64_t n = fixed_size(b, args["self"].to_node(), d);
    const int64_t s = ((shifts[i] % n) + n) % n;
    if (s == 0) continue;
    const std::string& name = b.node().name();
    const std::string tail = b.fresh(name + "_tail"), head = b.fresh(name + "_head");
    b.add("Slice", {x, b.int64s({n - s}), b.int64s({n}), b.int64s({d})}, tail);
    b.add("Slice", {x, b.int64s({0}), b.int64s({n - s}), b.int64s({d})}, head);
    const std::string rolled = b.fresh(name + "_rolled");
    set_int(b.add("Concat", {tail, head}, rolled), "axis", d);
    x = rolled;
  }
  b.add("Identity", {x}, b.output());
}

// aten::pad (F.pad: constant, reflect or replicate) and
// aten::constant_pad_nd as Pad; torch's pad list is (last begin, last end,
// second-to-last begin, ...).
void pad(OnnxBuilder& b, const std::string& mode) {
  CallArguments args(b.node());
  const int64_t rank = rank_of(b, args["self"]);
  const std::vector<int64_t> pad = args["pad"].to_int_list();
  std::vector<int64_t> begins(rank, 0), ends(rank, 0);
  for (size_t i = 0; i + 1 < pad.size(); i += 2) {
    const int64_t d = rank - 1 - static_cast<int64_t>(i / 2);
    begins[d] = pad[i];
    ends[d] = pad[i + 1];
  }
  std::vector<int64_t> pads = begins;
  pads.insert(pads.end(), ends.begin(), ends.end());
  for (int64_t p : pads) {
    if (p < 0) refuse(b, "negative padding (cropping) does not map yet");
  }
  std::vector<std::string> inputs = {b.value(args["self"]), b.int64s(pads)};
  if (mode == "constant") {
    const Argument& value = args["value"];
    inputs.push_back(b.value(value.is_none() ? Argument(0.0) : value,
                             element_type_of(b, args["self"])));
  } else if (mode != "reflect" && mode != "replicate") {
    refuse(b, absl::StrCat("padding mode '", mode, "' does not map"));
  }
  set_string(b.add("Pad", inputs, b.output()), "mode",
             mode == "replicate" ? "edge" : mode);
}

// chunk / split: one Split, the pieces as torch cuts them.
void split(OnnxBuilder& b) {
  CallArguments args(b.node());
  const std::vector<int64_t>& in = meta_of(b, args["self"].to_node()).sizes;
  const int64_t rank = static_cast<int64_t>(in.size());
  const int64_t dim = axis(args["dim"].to_int(), rank);
  const int64_t n = fixed_size(b, args["self"].to_node(), dim);
  // chunk(chunks): pieces of ceil(n / chunks); split(split_size): of split_size.
  const int64_t piece = args.has("chunks")
                            ? (n + args["chunks"].to_int() - 1) / args["chunks"].to_int()
                            : args["split_size"].to_int();
  if (piece <= 0) refuse(b, "pieces of size 0 do not map");
  std::vector<int64_t> sizes;
  std::vector<std::string> outputs;
  for (int64_t start = 0; start < n || (n == 0 && sizes.empty()); start += piece) {
    sizes.push_back(std::min(piece, n - start));
    outputs.push_back(b.fresh(absl::StrCat(b.node().name(), "_", sizes.size() - 1)));
    if (n == 0) break;
  }
  set_int(b.add("Split", {b.value(args["self"]), b.int64s(sizes)}, outputs),
          "axis", dim);
  b.set_outputs(outputs);
}

// sum.dim_IntList over its dims; sum (no dim) over every dim.
void reduce_sum(OnnxBuilder& b) {
  CallArguments args(b.node());
  if (args.has("dtype") && !args["dtype"].is_none()) {
    refuse(b, "sum with a dtype does not map yet");
  }
  const int64_t rank = rank_of(b, args["self"]);
  bool keepdim = false;
  const std::vector<int64_t> axes = reduced_axes(args, rank, &keepdim);
  set_int(b.add("ReduceSum", {b.value(args["self"]), b.int64s(axes)}, b.output()),
          "keepdims", keepdim ? 1 : 0);
}

// max() / min() of every element (a 0-dimensional result).
void reduce_all(const char* op_type, OnnxBuilder& b) {
  CallArguments args(b.node());
  bool keepdim = false;
  const std::vector<int64_t> axes =
      reduced_axes(args, rank_of(b, args["self"]), &keepdim);
  onnx::NodeProto& n = b.add(op_type, {b.value(args["self"])}, b.output());
  if (!axes.empty()) set_ints(n, "axes", axes);
  set_int(n, "keepdims", keepdim ? 1 : 0);
}

// aten::lstm.input and aten::gru.input as ONNX LSTM / GRU, one per layer
// (torch.onnx's _lstm / _gru): the gates reordered (torch's i, f, g, o to
// ONNX's i, o, f, c; r, z, n to z, r, h), each layer's output [seq, dirs,
// batch, hidden] made [seq, batch, dirs * hidden] for the next. `lowered`:
// fx_onednn::lstm / gru, whose parameters are aten's rearranged.
void recurrent(OnnxBuilder& b, bool lstm, bool lowered) {
  // The layer: aten's through the pattern library (weights as aten has
  // them), fx_onednn's by its arguments' names (rearranged weights and one
  // bias per layer and direction).
  std::vector<Argument> params;
  Argument hx, input;
  int64_t layers = 1;
  bool bidirectional = false, batch_first = false, has_biases = true;
  if (lowered) {
    CallArguments args(b.node());
    for (const Argument& p : args["params"].elements()) params.push_back(p);
    hx = args["hx"];
    input = args["input"];
    layers = args["num_layers"].to_int();
    bidirectional = args["bidirectional"].to_bool();
    batch_first = args["batch_first"].to_bool();
  } else {
    PatternOptions untyped;
    untyped.typed = false;
    const std::optional<Recurrent> r =
        match_recurrent(b.module(), b.node(), untyped);
    if (!r) {
      refuse(b, "an LSTM or GRU maps with constant layer counts and switches, "
                "its parameters attributes (get_attr), without projections "
                "(proj_size)");
    }
    if (r->train && number(b, r->dropout) != 0.0) {
      refuse(b, "a recurrent layer with dropout in training mode: trace in eval mode");
    }
    for (Node* p : r->params) params.emplace_back(p);
    hx = r->hx;
    input = Argument(r->input);
    layers = r->layers;
    bidirectional = r->bidirectional;
    batch_first = r->batch_first;
    has_biases = r->has_biases;
  }
  const int64_t dirs = bidirectional ? 2 : 1;
  const size_t per = lowered ? 3 : has_biases ? 4 : 2;
  if (params.size() != per * layers * dirs) {
    refuse(b, "the parameter list does not match the layers");
  }
  auto weight = [&](size_t i) {
    std::optional<at::Tensor> t = b.constant(params[i]);
    if (!t) refuse(b, "recurrent weights must be attributes (get_attr) to map");
    return t->detach();
  };
  // Layer l's weights and biases of direction d in aten's layout and gate
  // order: w_ih, w_hh, b_ih, b_hh.
  auto aten_params = [&](int64_t l, int64_t d) -> std::vector<at::Tensor> {
    const size_t base = (l * dirs + d) * per;
    if (!lowered) {
      const at::Tensor w = weight(base), r = weight(base + 1);
      if (has_biases) return {w, r, weight(base + 2), weight(base + 3)};
      const at::Tensor zero = at::zeros({w.size(0)}, w.options());
      return {w, r, zero, zero};
    }
    // fx_onednn's: the weights transposed and an LSTM's two biases summed;
    // a GRU's gates z, r, n, its bias [b_iz + b_hz, b_ir + b_hr, b_in,
    // b_hn].
    const at::Tensor w = weight(base).t(), r = weight(base + 1).t();
    const at::Tensor bias = weight(base + 2);
    if (lstm) return {w.contiguous(), r.contiguous(), bias, at::zeros_like(bias)};
    auto rzn = [](const at::Tensor& t) {
      const std::vector<at::Tensor> g = t.chunk(3, 0);
      return at::cat({g[1], g[0], g[2]}, 0);
    };
    const std::vector<at::Tensor> g = bias.chunk(4, 0);
    const at::Tensor zero = at::zeros_like(g[0]);
    return {rzn(w), rzn(r), at::cat({g[1], g[0], g[2]}), at::cat({zero, zero, g[3]})};
  };
  auto reorder = [&](const at::Tensor& w) {
    if (lstm) {
      std::vector<at::Tensor> g = w.chunk(4, 0);
      return at::cat({g[0], g[3], g[1], g[2]}, 0);
    }
    std::vector<at::Tensor> g = w.chunk(3, 0);
    return at::cat({g[1], g[0], g[2]}, 0);
  };
  const std::string& name = b.node().name();
  std::vector<std::string> states;  // h0 (and c0)
  if (lstm) {
    if (!hx.is_sequence() || hx.elements().size() != 2) {
      refuse(b, "expected (h0, c0)");
    }
    states = {b.value(hx.elements()[0]), b.value(hx.elements()[1])};
  } else {
    states = {b.value(hx)};
  }
  std::string x = b.value(input);
  if (batch_first) {
    const std::string t = b.fresh(name + "_seq_first");
    set_ints(b.add("Transpose", {x}, t), "perm", {1, 0, 2});
    x = t;
  }
  const int64_t hidden = aten_params(0, 0)[1].size(1);
  std::vector<std::string> last_h, last_c;
  for (int64_t l = 0; l < layers; ++l) {
    std::vector<at::Tensor> w, r, bias;
    for (int64_t d = 0; d < dirs; ++d) {
      const std::vector<at::Tensor> p = aten_params(l, d);
      w.push_back(reorder(p[0]));
      r.push_back(reorder(p[1]));
      bias.push_back(at::cat({reorder(p[2]), reorder(p[3])}));
    }
    const std::string layer = absl::StrCat(name, "_l", l);
    std::vector<std::string> inputs = {
        x, b.tensor(layer + "_W", at::stack(w)), b.tensor(layer + "_R", at::stack(r)),
        b.tensor(layer + "_B", at::stack(bias)), ""};
    for (const std::string& state : states) {
      const std::string s = b.fresh(layer + "_initial");
      b.add("Slice", {state, b.int64s({l * dirs}), b.int64s({(l + 1) * dirs}), b.int64s({0})}, s);
      inputs.push_back(s);
    }
    std::vector<std::string> outputs = {b.fresh(layer + "_Y"), b.fresh(layer + "_Y_h")};
    if (lstm) outputs.push_back(b.fresh(layer + "_Y_c"));
    onnx::NodeProto& n = b.add(lstm ? "LSTM" : "GRU", inputs, outputs);
    set_int(n, "hidden_size", hidden);
    set_string(n, "direction", bidirectional ? "bidirectional" : "forward");
    if (!lstm) set_int(n, "linear_before_reset", 1);
    last_h.push_back(outputs[1]);
    if (lstm) last_c.push_back(outputs[2]);
    const std::string swapped = b.fresh(layer + "_Y_batch");
    set_ints(b.add("Transpose", {outputs[0]}, swapped), "perm", {0, 2, 1, 3});
    x = b.fresh(layer + "_out");
    b.add("Reshape", {swapped, b.int64s({0, 0, -1})}, x);
  }
  if (batch_first) {
    const std::string t = b.fresh(name + "_batch_first");
    set_ints(b.add("Transpose", {x}, t), "perm", {1, 0, 2});
    x = t;
  }
  auto joined = [&](const std::vector<std::string>& parts, const char* what) {
    if (parts.size() == 1) return parts[0];
    const std::string out = b.fresh(absl::StrCat(name, "_", what));
    set_int(b.add("Concat", parts, out), "axis", 0);
    return out;
  };
  std::vector<std::string> elements = {x, joined(last_h, "h_n")};
  if (lstm) elements.push_back(joined(last_c, "c_n"));
  b.set_outputs(elements);
}

// Where(mask, value, self): masked_fill.
void masked_fill(OnnxBuilder& b) {
  CallArguments args(b.node());
  const Argument& self = args["self"];
  b.add("Where",
        {b.value(args["mask"]), b.value(args["value"], element_type_of(b, self)),
         b.value(self)},
        b.output());
}

void where(OnnxBuilder& b) {
  CallArguments args(b.node());
  const Argument& self = args["self"];
  const Argument& other = args["other"];
  // A scalar side takes the tensor side's element type.
  const int32_t type = self.is_node()    ? element_type_of(b, self)
                       : other.is_node() ? element_type_of(b, other)
                                         : 0;
  b.add("Where",
        {b.value(args["condition"]), b.value(self, type), b.value(other, type)},
        b.output());
}

// a OP b for a comparison (ONNX's, or Not of one for ne).
OnnxMapping comparison(std::string op_type, bool negate = false) {
  return [op_type, negate](OnnxBuilder& b) {
    CallArguments args(b.node());
    const Argument& self = args["self"];
    const Argument& other = args["other"];
    // Compared in the promoted type: an int tensor against 0.5 in float.
    int32_t type = element_type_of(b, self);
    if (other.is_double() && type != onnx::TensorProto::DOUBLE) {
      type = onnx::TensorProto::FLOAT;
    } else if (other.is_node() && element_type_of(b, other) != type) {
      refuse(b, "comparing tensors of two dtypes does not map yet");
    }
    const std::vector<std::string> inputs = {value_as(b, self, type), value_as(b, other, type)};
    if (!negate) {
      b.add(op_type, inputs, b.output());
      return;
    }
    const std::string equal = b.fresh(b.node().name() + "_equal");
    b.add(op_type, inputs, equal);
    b.add("Not", {equal}, b.output());
  };
}

// aten::to / _to_copy to a dtype: Cast (a device or layout change is none
// in ONNX; a copy is Identity).
void cast(OnnxBuilder& b) {
  const c10::ScalarType to = own_meta(b).dtype;
  const c10::ScalarType from = meta_of(b, b.node().args()[0].to_node()).dtype;
  if (to == from) {
    identity(b);
    return;
  }
  set_int(b.add("Cast", {b.value(b.node().args()[0])}, b.output()), "to",
          onnx_type(b, to));
}

void index_select(OnnxBuilder& b) {
  CallArguments args(b.node());
  const int64_t rank = rank_of(b, args["self"]);
  set_int(b.add("Gather", {b.value(args["self"]), b.value(args["index"])}, b.output()),
          "axis", axis(args["dim"].to_int(), rank));
}

// stack: each tensor unsqueezed at dim, then Concat.
void stack(OnnxBuilder& b) {
  CallArguments args(b.node());
  const int64_t rank = static_cast<int64_t>(own_meta(b).sizes.size());
  const int64_t dim = axis(args["dim"].to_int(), rank);
  std::vector<std::string> parts;
  for (const Argument& t : args["tensors"].elements()) {
    const std::string u = b.fresh(b.node().name() + "_unsqueezed");
    b.add("Unsqueeze", {b.value(t), b.int64s({dim})}, u);
    parts.push_back(u);
  }
  set_int(b.add("Concat", parts, b.output()), "axis", dim);
}

// beta * self + alpha * (batch1 @ batch2).
void baddbmm(OnnxBuilder& b) {
  CallArguments args(b.node());
  const std::string& name = b.node().name();
  const int32_t type = element_type_of(b, args["self"]);
  std::string product = b.fresh(name + "_bmm");
  b.add("MatMul", {b.value(args["batch1"]), b.value(args["batch2"])}, product);
  if (!is_one(args["alpha"])) {
    const std::string scaled = b.fresh(name + "_alpha");
    b.add("Mul", {product, b.value(args["alpha"], type)}, scaled);
    product = scaled;
  }
  std::string self = b.value(args["self"]);
  if (!is_one(args["beta"])) {
    const std::string scaled = b.fresh(name + "_beta");
    b.add("Mul", {self, b.value(args["beta"], type)}, scaled);
    self = scaled;
  }
  b.add("Add", {self, product}, b.output());
}

std::vector<c10::IValue> call_operator(const char* name,
                                       std::vector<c10::IValue> args) {
  const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow(name, "");
  torch::jit::Stack stack = std::move(args);
  op.callBoxed(&stack);
  return stack;
}

}  // namespace onnx_ops

std::optional<int32_t> onnx_element_type(c10::ScalarType dtype) {
  using onnx::TensorProto;
  switch (dtype) {
    case c10::ScalarType::Float: return TensorProto::FLOAT;
    case c10::ScalarType::Double: return TensorProto::DOUBLE;
    case c10::ScalarType::Half: return TensorProto::FLOAT16;
    case c10::ScalarType::BFloat16: return TensorProto::BFLOAT16;
    case c10::ScalarType::Long: return TensorProto::INT64;
    case c10::ScalarType::Int: return TensorProto::INT32;
    case c10::ScalarType::Short: return TensorProto::INT16;
    case c10::ScalarType::Char: return TensorProto::INT8;
    case c10::ScalarType::Byte: return TensorProto::UINT8;
    case c10::ScalarType::Bool: return TensorProto::BOOL;
    default: return std::nullopt;
  }
}

void add_operator_mappings(onnx_ops::Mappings* m) {
  using namespace onnx_ops;  // NOLINT: this file's mappings
  add_int8_mappings(m);
  add_lowered_mappings(m);
  add_selection_mappings(m);
  for (const char* name : {"aten::masked_fill.Scalar", "aten::masked_fill.Tensor"}) {
    (*m)[name] = masked_fill;
  }
  for (const char* name : {"aten::where.self", "aten::where.ScalarSelf",
                           "aten::where.ScalarOther", "aten::where.Scalar"}) {
    (*m)[name] = where;
  }
  for (const char* overload : {".Tensor", ".Scalar"}) {
    const std::string o = overload;
    (*m)["aten::eq" + o] = comparison("Equal");
    (*m)["aten::ne" + o] = comparison("Equal", /*negate=*/true);
    (*m)["aten::lt" + o] = comparison("Less");
    (*m)["aten::le" + o] = comparison("LessOrEqual");
    (*m)["aten::gt" + o] = comparison("Greater");
    (*m)["aten::ge" + o] = comparison("GreaterOrEqual");
  }
  (*m)["aten::logical_not"] = unary("Not");
  // ~x: Not of bools; of integers -x - 1 (two's complement), opset 17
  // having no BitwiseNot.
  (*m)["aten::bitwise_not"] = [](OnnxBuilder& b) {
    const c10::ScalarType dtype = own_meta(b).dtype;
    const std::string x = b.value(b.node().args()[0]);
    if (dtype == c10::ScalarType::Bool) {
      b.add("Not", {x}, b.output());
      return;
    }
    if (!c10::isIntegralType(dtype, /*includeBool=*/false) ||
        dtype == c10::ScalarType::Byte) {
      refuse(b, "bitwise_not of " + std::string(c10::toString(dtype)) +
                    " (bool and signed integers map)");
    }
    const std::string negated = b.fresh(b.node().name() + "_neg");
    b.add("Neg", {x}, negated);
    b.add("Sub", {negated, b.value(Argument(int64_t{1}), onnx_type(b, dtype))},
          b.output());
  };
  for (const char* name : {"aten::to.dtype", "aten::to.dtype_layout", "aten::to.device",
                           "aten::to.other", "aten::_to_copy", "aten::type_as"}) {
    (*m)[name] = cast;
  }
  (*m)["aten::index_select"] = index_select;
  (*m)["aten::stack"] = stack;
  (*m)["aten::baddbmm"] = baddbmm;
  (*m)["aten::einsum"] = [](OnnxBuilder& b) {
    CallArguments args(b.node());
    if (args.has("path") && !args["path"].is_none()) {
      refuse(b, "einsum with a contraction path does not map yet");
    }
    // Without spaces; torch's implicit output (no "->": the subscripts
    // that appear once, in alphabetical order, after any ellipsis) written
    // out; each letter renamed to a lowercase one in order of appearance:
    // ONNX 1.12's shape inference reads lowercase letters only.
    std::string given;
    for (char c : args["equation"].to_string_ref()) {
      if (c != ' ') given.push_back(c);
    }
    if (given.find("->") == std::string::npos) {
      std::map<char, int> count;
      for (char c : given) {
        if (std::isalpha(static_cast<unsigned char>(c))) ++count[c];
      }
      given += "->";
      if (given.find("...") != std::string::npos) given += "...";
      for (const auto& [c, n] : count) {  // std::map: ASCII order, as torch
        if (n == 1) given.push_back(c);
      }
    }
    std::string equation;
    std::map<char, char> renamed;
    for (char c : given) {
      if (c == ' ') continue;
      if (std::isalpha(static_cast<unsigned char>(c))) {
        auto it = renamed.find(c);
        if (it == renamed.end()) {
          if (renamed.size() == 26) refuse(b, "einsum of more than 26 subscripts");
          it = renamed.emplace(c, static_cast<char>('a' + renamed.size())).first;
        }
        c = it->second;
      }
      equation.push_back(c);
    }
    std::vector<std::string> inputs;
    for (const Argument& t : args["tensors"].elements()) inputs.push_back(b.value(t));
    // ONNX 1.12's shape inference gives an Einsum its rank only: a reshape
    // to its fixed sizes (none with dynamic ones) restores them.
    const bool fixed = !any_varies(b, &b.node());
    const std::string product =
        fixed ? b.fresh(b.node().name() + "_einsum") : b.output();
    set_string(b.add("Einsum", inputs, product), "equation", equation);
    if (fixed) {
      b.add("Reshape", {product, b.int64s(own_meta(b).sizes)}, b.output());
    }
  };
  (*m)["aten::unflatten.int"] = reshape_to_output;
  (*m)["aten::lstm.input"] = [](OnnxBuilder& b) { recurrent(b, /*lstm=*/true); };
  (*m)["aten::gru.input"] = [](OnnxBuilder& b) { recurrent(b, /*lstm=*/false); };
  for (const char* name : {"aten::chunk", "aten::split.Tensor", "aten::unsafe_chunk"}) {
    (*m)[name] = split;
  }
  (*m)["aten::sum.dim_IntList"] = reduce_sum;
  (*m)["aten::sum"] = reduce_sum;
  (*m)["aten::max"] = [](OnnxBuilder& b) { reduce_all("ReduceMax", b); };
  (*m)["aten::min"] = [](OnnxBuilder& b) { reduce_all("ReduceMin", b); };
  (*m)["aten::relu"] = unary("Relu");
  (*m)["aten::sigmoid"] = unary("Sigmoid");
  (*m)["aten::tanh"] = unary("Tanh");
  (*m)["aten::hardswish"] = unary("HardSwish");
  (*m)["aten::exp"] = unary("Exp");
  (*m)["aten::log"] = unary("Log");
  (*m)["aten::sqrt"] = unary("Sqrt");
  (*m)["aten::rsqrt"] = [](OnnxBuilder& b) {
    const std::string s = b.fresh(b.node().name() + "_sqrt");
    b.add("Sqrt", {b.value(b.node().args()[0])}, s);
    b.add("Reciprocal", {s}, b.output());
  };
  (*m)["aten::neg"] = unary("Neg");
  (*m)["aten::abs"] = unary("Abs");
  (*m)["aten::erf"] = unary("Erf");
  (*m)["aten::reciprocal"] = unary("Reciprocal");
  (*m)["aten::hardsigmoid"] = [](OnnxBuilder& b) {
    onnx::NodeProto& n =
        b.add("HardSigmoid", {b.value(b.node().args()[0])}, b.output());
    set_float(n, "alpha", 1.0 / 6.0);
    set_float(n, "beta", 0.5);
  };
  (*m)["aten::silu"] = silu;
  (*m)["aten::gelu"] = gelu;
  (*m)["aten::leaky_relu"] = [](OnnxBuilder& b) {
    CallArguments args(b.node());
    set_float(b.add("LeakyRelu", {b.value(args["self"])}, b.output()), "alpha",
              number(b, args["negative_slope"]));
  };
  (*m)["aten::hardtanh"] = [](OnnxBuilder& b) {
    CallArguments args(b.node());
    clip(b, number(b, args["min_val"]), number(b, args["max_val"]));
  };
  (*m)["aten::relu6"] = [](OnnxBuilder& b) { clip(b, 0.0, 6.0); };
  (*m)["aten::clamp"] = [](OnnxBuilder& b) {
    CallArguments args(b.node());
    auto bound = [&](const char* which) -> std::optional<double> {
      const Argument& a = args[which];
      if (a.is_none()) return std::nullopt;
      if (a.is_node()) refuse(b, "clamp by tensors does not map yet");
      return number(b, a);
    };
    clip(b, bound("min"), bound("max"));
  };
  (*m)["aten::softmax"] = [](OnnxBuilder& b) { softmax("Softmax", b); };
  (*m)["aten::log_softmax"] = [](OnnxBuilder& b) { softmax("LogSoftmax", b); };

  for (const char* name : {"aten::add.Tensor", "aten::add.Scalar"}) {
    (*m)[name] = binary("Add");
  }
  for (const char* name : {"aten::sub.Tensor", "aten::sub.Scalar"}) (*m)[name] = binary("Sub");
  for (const char* name : {"aten::mul.Tensor", "aten::mul.Scalar"}) {
    (*m)[name] = binary("Mul");
  }
  for (const char* name : {"aten::div.Tensor", "aten::div.Scalar", "aten::div.Tensor_mode"}) {
    (*m)[name] = binary("Div");
  }
  (*m)["aten::pow.Tensor_Scalar"] = [](OnnxBuilder& b) {
    CallArguments args(b.node());
    const int32_t type = element_type_of(b, args["self"]);
    b.add("Pow", {b.value(args["self"]), b.value(args["exponent"], type)}, b.output());
  };

  for (const char* name : {"aten::dropout", "aten::feature_dropout",
                           "aten::alpha_dropout"}) {
    (*m)[name] = dropout;
  }
  for (const char* name : {"aten::contiguous", "aten::clone", "aten::detach",
                           "aten::alias", "aten::lift_fresh"}) {
    (*m)[name] = identity;
  }
  for (const char* name : {"aten::view", "aten::reshape", "aten::_reshape_alias",
                           "aten::flatten.using_ints", "aten::squeeze",
                           "aten::squeeze.dim", "aten::unsqueeze"}) {
    (*m)[name] = reshape_to_output;
  }
  (*m)["aten::expand"] = expand;
  (*m)["aten::unbind.int"] = unbind;
  for (const char* name : {"aten::arange", "aten::arange.start", "aten::arange.start_step"}) {
    (*m)[name] = arange;
  }
  (*m)["aten::ones"] = filled(1.0, false);
  (*m)["aten::new_ones"] = filled(1.0, false);
  (*m)["aten::zeros"] = filled(0.0, false);
  (*m)["aten::new_zeros"] = filled(0.0, false);
  (*m)["aten::full"] = filled(std::nullopt, false);
  (*m)["aten::new_full"] = filled(std::nullopt, false);
  (*m)["aten::ones_like"] = filled(1.0, true);
  (*m)["aten::zeros_like"] = filled(0.0, true);
  (*m)["aten::full_like"] = filled(std::nullopt, true);
  (*m)["aten::triu"] = triangle(true);
  (*m)["aten::tril"] = triangle(false);

  // The convolution families as passes/operator_families.def declares them.
  for (const auto& [name, info] : operator_families()) {
    if (info.family == OperatorFamily::kConvolution) {
      (*m)[name] = [](OnnxBuilder& b) { convolution(b); };
    } else if (info.family == OperatorFamily::kConvTranspose) {
      (*m)[name] = [](OnnxBuilder& b) { conv_transpose(b); };
    }
  }
  (*m)["aten::batch_norm"] = batch_norm;
  (*m)["aten::layer_norm"] = layer_norm;
  for (const char* name : {"aten::max_pool1d", "aten::max_pool2d", "aten::max_pool3d"}) {
    (*m)[name] = max_pool;
  }
  for (const char* name : {"aten::avg_pool1d", "aten::avg_pool2d", "aten::avg_pool3d"}) {
    (*m)[name] = avg_pool;
  }
  for (const char* name : {"aten::adaptive_avg_pool1d", "aten::adaptive_avg_pool2d",
                           "aten::adaptive_avg_pool3d"}) {
    (*m)[name] = adaptive_avg_pool;
  }
  (*m)["aten::linear"] = [](OnnxBuilder& b) { linear(b); };
  (*m)["aten::addmm"] = addmm;
  for (const char* name : {"aten::matmul", "aten::mm", "aten::bmm"}) {
    (*m)[name] = [](OnnxBuilder& b) {
      b.add("MatMul", {b.value(b.node().args()[0]), b.value(b.node().args()[1])},
            b.output());
    };
  }
  (*m)["aten::t"] = transpose_2d;
  (*m)["aten::transpose.int"] = transpose;
  (*m)["aten::permute"] = permute;
  for (const char* name : {"aten::mean", "aten::mean.dim"}) (*m)[name] = reduce_mean;
  (*m)["aten::cat"] = cat;
  (*m)["aten::embedding"] = embedding;
  (*m)["aten::select.int"] = select;
  (*m)["aten::slice.Tensor"] = slice;
  (*m)["aten::narrow"] = narrow;
  for (const char* name : {"aten::upsample_nearest1d", "aten::upsample_nearest2d",
                           "aten::upsample_nearest3d", "aten::upsample_nearest2d.vec"}) {
    (*m)[name] = upsample_nearest;
  }
  (*m)["aten::constant_pad_nd"] = [](OnnxBuilder& b) { pad(b, "constant"); };
  (*m)["aten::pad"] = [](OnnxBuilder& b) {
    pad(b, CallArguments(b.node())["mode"].to_string_ref());
  };
  (*m)["aten::roll"] = roll;
  for (const char* name : {"aten::upsample_linear1d", "aten::upsample_bilinear2d",
                           "aten::upsample_trilinear3d", "aten::upsample_linear1d.vec",
                           "aten::upsample_bilinear2d.vec",
                           "aten::upsample_trilinear3d.vec"}) {
    (*m)[name] = upsample_linear;
  }
}


}  // namespace fx::internal
