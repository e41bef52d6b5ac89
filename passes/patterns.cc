#include "passes/patterns.h"

#include <ATen/core/Tensor.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "fx/ir/operator_schemas.h"
#include "passes/operator_families.h"

namespace fx {
namespace {

// The table of fusions, in Fusion's order.
using Op = PatternOp;
const std::vector<FusionPattern>& table() {
  static const std::vector<FusionPattern> patterns = {
      {Fusion::kConv, "conv", {Op::kConvolution}},
      {Fusion::kConvRelu, "conv_relu", {Op::kConvolution, Op::kRelu}},
      {Fusion::kConvActivation, "conv_activation",
       {Op::kConvolution, Op::kActivation}},
      {Fusion::kConvAdd, "conv_add", {Op::kConvolution, Op::kResidualAdd}},
      {Fusion::kConvAddActivation, "conv_add_activation",
       {Op::kConvolution, Op::kResidualAdd, Op::kActivation}},
      {Fusion::kConvBatchNorm, "conv_batch_norm",
       {Op::kConvolution, Op::kBatchNorm}},
      {Fusion::kConvTranspose, "conv_transpose",
       {Op::kTransposedConvolution}},
      {Fusion::kConvTransposeActivation, "conv_transpose_activation",
       {Op::kTransposedConvolution, Op::kActivation}},
      {Fusion::kConvTransposeBatchNorm, "conv_transpose_batch_norm",
       {Op::kTransposedConvolution, Op::kBatchNorm}},
      {Fusion::kLinear, "linear", {Op::kLinear}},
      {Fusion::kLinearRelu, "linear_relu", {Op::kLinear, Op::kRelu}},
      {Fusion::kLinearActivation, "linear_activation",
       {Op::kLinear, Op::kActivation}},
      {Fusion::kLinearAdd, "linear_add", {Op::kLinear, Op::kResidualAdd}},
      {Fusion::kLinearBatchNorm, "linear_batch_norm",
       {Op::kLinear, Op::kBatchNorm}},
      {Fusion::kMatmul, "matmul", {Op::kMatmul}},
      {Fusion::kMatmulScale, "matmul_scale", {Op::kMatmul, Op::kScale}},
      {Fusion::kBatchNorm, "batch_norm", {Op::kBatchNorm}},
      {Fusion::kBatchNormRelu, "batch_norm_relu", {Op::kBatchNorm, Op::kRelu}},
      {Fusion::kAdd, "add", {Op::kAdd}},
      {Fusion::kAddRelu, "add_relu", {Op::kAdd, Op::kRelu}},
      {Fusion::kMul, "mul", {Op::kMul}},
      {Fusion::kMulRelu, "mul_relu", {Op::kMul, Op::kRelu}},
      {Fusion::kCat, "cat", {Op::kCat}},
      {Fusion::kHardswish, "hardswish", {Op::kHardswish}},
      {Fusion::kRecurrent, "recurrent", {Op::kRecurrent}},
  };
  return patterns;
}

bool float32_cpu_tensor(const at::Tensor& t) {
  return t.defined() && t.scalar_type() == at::kFloat && t.device().is_cpu();
}

// `n` with the options' look_through operators looked through.
Node* through(Node* n, const PatternOptions& options) {
  for (bool again = true; again && n != nullptr;) {
    again = false;
    for (std::string_view name : options.look_through) {
      if (n->is_call_to({name}) && !n->args().empty() &&
          n->args()[0].is_node()) {
        n = n->args()[0].to_node();
        again = true;
        break;
      }
    }
  }
  return n;
}

// A get_attr of a tensor attribute of `module`, or nullptr.
Node* attribute_node(const GraphModuleImpl& module, Node* n) {
  return n != nullptr && n->op() == Opcode::kGetAttr &&
                 module.has_tensor_attribute(n->target().str())
             ? n
             : nullptr;
}

// An attribute argument, or nullptr for None; false when it is neither.
bool attribute_or_none(const GraphModuleImpl& module, const Argument& a,
                       Node** out) {
  *out = nullptr;
  if (a.is_none()) return true;
  *out = a.is_node() ? attribute_node(module, a.to_node()) : nullptr;
  return *out != nullptr;
}

// A node argument, or nullptr for None; false when it is neither.
bool node_or_none(const Argument& a, Node** out) {
  *out = a.is_node() ? a.to_node() : nullptr;
  return a.is_none() || a.is_node();
}

at::Tensor tensor_of(const GraphModuleImpl& module, const Node* attr) {
  return module.fetch_attr(attr->target().str());
}

// A value's facts: a constant's from its tensor, any other's from its
// tensor metadata.
struct Facts {
  bool float_cpu = false;
  std::vector<int64_t> sizes;
};
std::optional<Facts> facts_of(const GraphModuleImpl& module, const Node* n) {
  if (n->op() == Opcode::kGetAttr &&
      module.has_tensor_attribute(n->target().str())) {
    const at::Tensor t = tensor_of(module, n);
    return Facts{float32_cpu_tensor(t), t.sizes().vec()};
  }
  const TensorMeta* m = n->tensor_meta();
  if (m == nullptr) return std::nullopt;
  return Facts{float32_cpu(m), m->sizes};
}

// A bias of `channels` values: None, or a float32 CPU [channels].
bool bias_fits(const GraphModuleImpl& module, const Node* bias,
               int64_t channels) {
  if (bias == nullptr) return true;
  const auto facts = facts_of(module, bias);
  return facts && facts->float_cpu && facts->sizes.size() == 1 &&
         facts->sizes[0] == channels;
}

bool float_cpu_input(const Node* n) { return float32_cpu(n->tensor_meta()); }

std::optional<Weight> match_weight(const GraphModuleImpl& module,
                                   const Argument& a, bool through_t,
                                   const PatternOptions& options) {
  if (!a.is_node()) return std::nullopt;
  Weight w;
  w.use = a.to_node();
  Node* n = through(w.use, options);
  if (through_t && n->is_call_to({"aten::t"}) && !n->args().empty() &&
      n->args()[0].is_node()) {
    w.t = n;
    n = through(n->args()[0].to_node(), options);
  }
  w.attr = attribute_node(module, n);
  if (w.attr == nullptr) return std::nullopt;
  return w;
}

// The roots quantization takes on their own: a + b, a * b, cat, hardswish.
bool match_quantizable_root(Node& n, PatternOp op,
                            const PatternOptions& options, FusionMatch* m) {
  auto typed_ok = [&](const Argument& a) {
    return a.is_node() && (!options.typed || float_cpu_input(a.to_node()));
  };
  switch (op) {
    case PatternOp::kAdd:
    case PatternOp::kMul: {
      const bool add = op == PatternOp::kAdd;
      if (add ? !n.is_call_to({"aten::add.Tensor", "aten::add_.Tensor"})
              : !n.is_call_to({"aten::mul.Tensor", "aten::mul_.Tensor"})) {
        return false;
      }
      CallArguments args(n);
      // Broadcasting is fine (a squeeze-excitation's x * scale).
      if (!typed_ok(args["self"]) || !typed_ok(args["other"])) return false;
      if (add && constant_number(args["alpha"]) != 1.0) return false;
      m->inputs = {args["self"].to_node(), args["other"].to_node()};
      return true;
    }
    case PatternOp::kCat: {
      if (!n.is_call_to({"aten::cat"})) return false;
      CallArguments args(n);
      const Argument& tensors = args["tensors"];
      const Argument& dim = args["dim"];
      if (!tensors.is_sequence() || tensors.elements().empty() ||
          !dim.is_int()) {
        return false;
      }
      for (const Argument& t : tensors.elements()) {
        if (!typed_ok(t)) return false;
        m->inputs.push_back(t.to_node());
      }
      m->cat_dim = dim.to_int();
      return true;
    }
    case PatternOp::kHardswish: {
      if (!n.is_call_to({"aten::hardswish", "aten::hardswish_"})) return false;
      CallArguments args(n);
      if (!typed_ok(args["self"])) return false;
      m->inputs = {args["self"].to_node()};
      return true;
    }
    default:
      return false;
  }
}

// The root of a pattern: `n` as `op`.
bool match_root(const GraphModuleImpl& module, Node& n, PatternOp op,
                const PatternOptions& options, FusionMatch* m) {
  switch (op) {
    case PatternOp::kConvolution:
    case PatternOp::kTransposedConvolution:
      m->convolution = match_convolution(module, n, options);
      return m->convolution && m->convolution->transposed ==
                                   (op == PatternOp::kTransposedConvolution);
    case PatternOp::kLinear:
      m->linear = match_linear(module, n, options);
      return m->linear.has_value();
    case PatternOp::kMatmul:
      m->matmul = match_matmul(module, n, options);
      return m->matmul.has_value();
    case PatternOp::kBatchNorm:
      m->batch_norm = match_batch_norm(module, n, options);
      return m->batch_norm.has_value();
    case PatternOp::kRecurrent:
      m->recurrent = match_recurrent(module, n, options);
      return m->recurrent.has_value();
    default:
      return match_quantizable_root(n, op, options, m);
  }
}

// `n` as `op` after `previous`.
bool match_next(const GraphModuleImpl& module, Node& n, const Node* previous,
                PatternOp op, const PatternOptions& options, FusionMatch* m) {
  switch (op) {
    case PatternOp::kResidualAdd:
      m->residual = match_residual_add(n, previous);
      return m->residual != nullptr;
    case PatternOp::kRelu:
      if (!n.is_call_to({"aten::relu", "aten::relu_"})) return false;
      m->activation = match_activation(n, previous);
      return m->activation.has_value();
    case PatternOp::kActivation:
      m->activation = match_activation(n, previous);
      return m->activation.has_value();
    case PatternOp::kBatchNorm:
      m->batch_norm = match_batch_norm(module, n, options);
      return m->batch_norm && m->batch_norm->input == previous;
    case PatternOp::kScale: {
      const std::optional<double> scale = match_scale(module, n, previous);
      if (scale) m->scale = *scale;
      return scale.has_value();
    }
    default:
      return false;
  }
}

std::string name_of(const Node* n) {
  return n == nullptr ? "None" : absl::StrCat("%", n->name());
}

std::string ints(const std::vector<int64_t>& v) {
  return absl::StrCat("[", absl::StrJoin(v, ", "), "]");
}

std::string weight_string(const Weight& w) {
  std::string s = name_of(w.attr);
  if (w.t != nullptr) absl::StrAppend(&s, " through ", name_of(w.t));
  if (w.use != w.attr && w.use != w.t) absl::StrAppend(&s, " as ", name_of(w.use));
  return s;
}

}  // namespace

std::optional<std::vector<int64_t>> constant_ints(const Argument& a,
                                                  size_t n) {
  if (a.contains_node()) return std::nullopt;
  std::vector<int64_t> v;
  if (a.is_int()) {
    v.assign(n, a.to_int());
  } else if (a.is_sequence()) {
    for (const Argument& e : a.elements()) {
      if (!e.is_int()) return std::nullopt;
      v.push_back(e.to_int());
    }
    if (v.size() == 1) v.assign(n, v[0]);
  } else {
    return std::nullopt;
  }
  if (v.size() != n) return std::nullopt;
  return v;
}

bool float32_cpu(const TensorMeta* m) {
  return m != nullptr && m->dtype == c10::ScalarType::Float &&
         m->device.is_cpu();
}

std::optional<double> constant_number(const std::optional<Argument>& a) {
  if (!a || !(a->is_int() || a->is_double())) return std::nullopt;
  return a->to_double();
}

std::optional<Convolution> match_convolution(const GraphModuleImpl& module,
                                             Node& node,
                                             const PatternOptions& options) {
  const bool transposed = in_family(node, OperatorFamily::kConvTranspose);
  if (!transposed && !in_family(node, OperatorFamily::kConvolution)) {
    return std::nullopt;
  }
  const CallArguments args(node);
  Convolution c;
  c.node = &node;
  if (args.has("transposed")) {
    const Argument& transposed = args["transposed"];
    if (!transposed.is_bool()) return std::nullopt;
    c.transposed = transposed.to_bool();
  } else {
    c.transposed = transposed;
  }
  const auto weight = match_weight(module, args["weight"], false, options);
  if (!args["input"].is_node() || !weight ||
      !node_or_none(args["bias"], &c.bias)) {
    return std::nullopt;
  }
  c.input = args["input"].to_node();
  c.weight = *weight;
  const at::Tensor w = tensor_of(module, c.weight.attr);
  if (w.dim() < 3 || w.dim() > 5) return std::nullopt;
  c.spatial = w.dim() - 2;
  const size_t spatial = static_cast<size_t>(c.spatial);
  auto stride = constant_ints(args["stride"], spatial);
  auto padding = constant_ints(args["padding"], spatial);
  auto dilation = constant_ints(args["dilation"], spatial);
  auto output_padding =
      args.has("output_padding")
          ? constant_ints(args["output_padding"], spatial)
          : std::optional<std::vector<int64_t>>(
                std::vector<int64_t>(spatial, 0));
  const Argument& groups = args["groups"];
  // padding="same" or "valid" (conv2d.padding): only untyped.
  const bool padding_ok =
      padding || (!options.typed && args["padding"].is_string());
  if (!stride || !padding_ok || !dilation || !output_padding ||
      !groups.is_int() || groups.to_int() < 1) {
    return std::nullopt;
  }
  if (!c.transposed) {
    for (int64_t p : *output_padding) {
      if (p != 0) return std::nullopt;
    }
  }
  c.stride = std::move(*stride);
  if (padding) c.padding = std::move(*padding);
  c.dilation = std::move(*dilation);
  c.output_padding = std::move(*output_padding);
  c.groups = groups.to_int();
  if (options.typed) {
    const TensorMeta* in = c.input->tensor_meta();
    const int64_t out_channels =
        c.transposed ? w.size(1) * c.groups : w.size(0);
    if (!float32_cpu(in) || static_cast<int64_t>(in->sizes.size()) != w.dim() ||
        !float32_cpu_tensor(w) || !bias_fits(module, c.bias, out_channels)) {
      return std::nullopt;
    }
  }
  return c;
}

std::optional<Linear> match_linear(const GraphModuleImpl& module, Node& node,
                                   const PatternOptions& options) {
  Linear l;
  l.node = &node;
  if (node.is_call_to({"aten::linear"})) {
    l.kind = Linear::Kind::kLinear;
  } else if (node.is_call_to({"aten::addmm"})) {
    l.kind = Linear::Kind::kAddmm;
  } else if (node.is_call_to({"aten::matmul"})) {
    l.kind = Linear::Kind::kMatmul;
  } else {
    return std::nullopt;
  }
  const CallArguments args(node);
  const bool linear = l.kind == Linear::Kind::kLinear;
  const bool addmm = l.kind == Linear::Kind::kAddmm;
  const Argument& input = args[linear ? "input" : addmm ? "mat1" : "self"];
  const auto weight =
      match_weight(module, args[linear ? "weight" : addmm ? "mat2" : "other"],
                   true, options);
  if (!input.is_node() || !weight) return std::nullopt;
  if ((linear || addmm) &&
      !node_or_none(args[linear ? "bias" : "self"], &l.bias)) {
    return std::nullopt;
  }
  if (addmm && (constant_number(args["beta"]) != 1.0 ||
                constant_number(args["alpha"]) != 1.0)) {
    return std::nullopt;
  }
  l.input = input.to_node();
  l.weight = *weight;
  // linear takes [out, in], addmm and matmul [in, out].
  l.weight.transposed = linear == (l.weight.t != nullptr);
  const at::Tensor w = tensor_of(module, l.weight.attr);
  if (w.dim() != 2) return std::nullopt;
  if (options.typed) {
    const TensorMeta* in = l.input->tensor_meta();
    const int64_t out_features = l.weight.transposed ? w.size(1) : w.size(0);
    if (!float32_cpu(in) || in->sizes.empty() ||
        (addmm && in->sizes.size() != 2) || !float32_cpu_tensor(w) ||
        !bias_fits(module, l.bias, out_features)) {
      return std::nullopt;
    }
  }
  return l;
}

std::optional<Matmul> match_matmul(const GraphModuleImpl& module, Node& node,
                                   const PatternOptions& options) {
  if (!node.is_call_to({"aten::matmul", "aten::bmm"})) return std::nullopt;
  if (match_linear(module, node, options)) return std::nullopt;
  const CallArguments args(node);
  const Argument& self = args["self"];
  const Argument& other = args[node.is_call_to({"aten::bmm"}) ? "mat2" : "other"];
  if (!self.is_node() || !other.is_node()) return std::nullopt;
  Matmul m{&node, self.to_node(), other.to_node()};
  if (options.typed) {
    const TensorMeta* a = m.self->tensor_meta();
    const TensorMeta* b = m.other->tensor_meta();
    if (!float32_cpu(a) || !float32_cpu(b) || a->sizes.size() < 3 ||
        a->sizes.size() != b->sizes.size()) {
      return std::nullopt;
    }
    const size_t rank = a->sizes.size();
    if (a->sizes[rank - 1] != b->sizes[rank - 2]) return std::nullopt;
    for (size_t i = 0; i + 2 < rank; ++i) {
      if (a->sizes[i] != b->sizes[i] && a->sizes[i] != 1 && b->sizes[i] != 1) {
        return std::nullopt;
      }
    }
  }
  return m;
}

std::optional<double> match_scale(const GraphModuleImpl& module, Node& node,
                                  const Node* value) {
  const bool mul = node.is_call_to({"aten::mul.Scalar", "aten::mul.Tensor"});
  if (!mul && !node.is_call_to({"aten::div.Scalar", "aten::div.Tensor"})) {
    return std::nullopt;
  }
  const CallArguments args(node);
  const Argument& self = args["self"];
  if (!self.is_node() || self.to_node() != value) return std::nullopt;
  const Argument& other = args["other"];
  std::optional<double> c = constant_number(other);
  // A 0-d floating-point tensor constant (a number TorchScript traced as
  // a tensor: `scores * (1.0 / math.sqrt(d))`).
  if (!c && other.is_node() && other.to_node()->op() == Opcode::kGetAttr) {
    const std::string& path = other.to_node()->target().str();
    if (module.has_tensor_attribute(path)) {
      const at::Tensor t = module.fetch_attr(path);
      if (t.dim() == 0 && t.is_floating_point() && t.device().is_cpu()) {
        c = t.item<double>();
      }
    }
  }
  if (!c || (!mul && *c == 0)) return std::nullopt;
  return mul ? *c : 1.0 / *c;
}

std::optional<BatchNorm> match_batch_norm(const GraphModuleImpl& module,
                                          Node& node,
                                          const PatternOptions& options) {
  if (!node.is_call_to({"aten::batch_norm"})) return std::nullopt;
  const CallArguments args(node);
  BatchNorm b;
  b.node = &node;
  const Argument& training = args["training"];
  const auto eps = constant_number(args["eps"]);
  if (!args["input"].is_node() || !training.is_bool() ||
      training.to_bool() != options.batch_norm_training ||
      !eps || !attribute_or_none(module, args["weight"], &b.weight) ||
      !attribute_or_none(module, args["bias"], &b.bias) ||
      !attribute_or_none(module, args["running_mean"], &b.running_mean) ||
      !attribute_or_none(module, args["running_var"], &b.running_var) ||
      b.running_mean == nullptr || b.running_var == nullptr) {
    return std::nullopt;
  }
  b.input = args["input"].to_node();
  b.eps = *eps;
  if (options.typed) {
    const TensorMeta* in = b.input->tensor_meta();
    if (!float32_cpu(in) || in->sizes.size() < 2) return std::nullopt;
  }
  return b;
}

std::optional<Recurrent> match_recurrent(const GraphModuleImpl& module,
                                         const Node& node,
                                         const PatternOptions& options) {
  const bool gru = node.is_call_to({"aten::gru.input"});
  if (!gru && !node.is_call_to({"aten::lstm.input"})) return std::nullopt;
  const CallArguments args(node);
  Recurrent r;
  r.node = &node;
  r.kind = gru ? Recurrent::Kind::kGru : Recurrent::Kind::kLstm;
  r.hx = args["hx"];
  r.dropout = args["dropout"];
  const Argument& input = args["input"];
  const Argument& params = args["params"];
  const Argument& has_biases = args["has_biases"];
  const Argument& layers = args["num_layers"];
  const Argument& train = args["train"];
  const Argument& bidirectional = args["bidirectional"];
  const Argument& batch_first = args["batch_first"];
  if (!input.is_node() || !params.is_sequence() || !has_biases.is_bool() ||
      !layers.is_int() || layers.to_int() < 1 || !train.is_bool() ||
      !bidirectional.is_bool() || !batch_first.is_bool()) {
    return std::nullopt;
  }
  r.input = input.to_node();
  r.layers = layers.to_int();
  r.has_biases = has_biases.to_bool();
  r.train = train.to_bool();
  r.bidirectional = bidirectional.to_bool();
  r.batch_first = batch_first.to_bool();
  if (gru ? !r.hx.is_node()
          : !r.hx.is_sequence() || r.hx.elements().size() != 2) {
    return std::nullopt;
  }
  for (const Argument& h : gru ? std::vector<Argument>{r.hx} : r.hx.elements()) {
    if (!h.is_node()) return std::nullopt;
    r.states.push_back(h.to_node());
  }
  if (params.elements().size() !=
      r.params_per_layer() * static_cast<size_t>(r.layers * r.directions())) {
    return std::nullopt;
  }
  for (const Argument& p : params.elements()) {
    Node* attr = p.is_node() ? attribute_node(module, p.to_node()) : nullptr;
    if (attr == nullptr) return std::nullopt;
    r.params.push_back(attr);
  }
  if (options.typed) {
    const TensorMeta* in = r.input->tensor_meta();
    if (!float32_cpu(in) || in->sizes.size() != 3) return std::nullopt;
    for (const Node* h : r.states) {
      if (!float32_cpu(h->tensor_meta())) return std::nullopt;
    }
    for (const Node* p : r.params) {
      if (!float32_cpu_tensor(tensor_of(module, p))) return std::nullopt;
    }
  }
  return r;
}

std::optional<Activation> match_activation(Node& n, const Node* input) {
  if (n.op() != Opcode::kCallFunction || !n.target().is_operator() ||
      n.args().empty() || !n.args()[0].is_node() ||
      n.args()[0].to_node() != input) {
    return std::nullopt;
  }
  using Kind = Activation::Kind;
  auto make = [&](Kind kind, double alpha = 0,
                  double beta = 0) -> std::optional<Activation> {
    return Activation{&n, kind, alpha, beta};
  };
  auto value = [&](const char* name) { return operator_argument(n, name); };
  if (n.is_call_to({"aten::relu", "aten::relu_"})) return make(Kind::kRelu);
  if (n.is_call_to({"aten::leaky_relu", "aten::leaky_relu_"})) {
    if (auto slope = constant_number(value("negative_slope"))) {
      return make(Kind::kLeakyRelu, *slope);
    }
  }
  if (n.is_call_to({"aten::hardtanh", "aten::hardtanh_"})) {
    auto lo = constant_number(value("min_val"));
    auto hi = constant_number(value("max_val"));
    if (lo && hi) return make(Kind::kClamp, *lo, *hi);
  }
  if (n.is_call_to({"aten::relu6", "aten::relu6_"})) {
    return make(Kind::kClamp, 0, 6);
  }
  if (n.is_call_to({"aten::clamp", "aten::clamp_"})) {
    auto lo = constant_number(value("min"));
    auto hi = constant_number(value("max"));
    if (lo && hi) return make(Kind::kClamp, *lo, *hi);
  }
  if (n.is_call_to({"aten::hardswish", "aten::hardswish_"})) {
    return make(Kind::kHardswish);
  }
  if (n.is_call_to({"aten::hardsigmoid", "aten::hardsigmoid_"})) {
    return make(Kind::kHardsigmoid);
  }
  if (n.is_call_to({"aten::silu", "aten::silu_"})) return make(Kind::kSilu);
  if (n.is_call_to({"aten::sigmoid", "aten::sigmoid_"})) {
    return make(Kind::kSigmoid);
  }
  if (n.is_call_to({"aten::tanh", "aten::tanh_"})) return make(Kind::kTanh);
  if (n.is_call_to({"aten::gelu", "aten::gelu_"})) {
    auto approximate = value("approximate");
    if (approximate && approximate->is_string()) {
      if (approximate->to_string_ref() == "none") return make(Kind::kGelu);
      if (approximate->to_string_ref() == "tanh") return make(Kind::kGeluTanh);
    }
  }
  return std::nullopt;
}

const char* activation_name(Activation::Kind kind) {
  switch (kind) {
    case Activation::Kind::kRelu: return "relu";
    case Activation::Kind::kLeakyRelu: return "leaky_relu";
    case Activation::Kind::kClamp: return "clamp";
    case Activation::Kind::kHardswish: return "hardswish";
    case Activation::Kind::kSilu: return "silu";
    case Activation::Kind::kSigmoid: return "sigmoid";
    case Activation::Kind::kTanh: return "tanh";
    case Activation::Kind::kGelu: return "gelu";
    case Activation::Kind::kGeluTanh: return "gelu_tanh";
    case Activation::Kind::kHardsigmoid: return "hardsigmoid";
  }
  return "";
}

Node* match_residual_add(Node& n, const Node* value) {
  const bool inplace = n.is_call_to({"aten::add_.Tensor"});
  if (!inplace && !n.is_call_to({"aten::add.Tensor"})) return nullptr;
  const CallArguments args(n);
  if (constant_number(args["alpha"]) != 1.0) return nullptr;
  const Argument& self = args["self"];
  const Argument& other = args["other"];
  if (!self.is_node() || !other.is_node()) return nullptr;
  Node* residual = nullptr;
  if (self.to_node() == value) {
    residual = other.to_node();
  } else if (other.to_node() == value && !inplace) {
    residual = self.to_node();
  }
  if (residual == nullptr || residual == value) return nullptr;
  const TensorMeta* r = residual->tensor_meta();
  const TensorMeta* v = value->tensor_meta();
  const TensorMeta* out = n.tensor_meta();
  if (!float32_cpu(r) || v == nullptr || out == nullptr ||
      r->sizes != v->sizes || out->sizes != v->sizes) {
    return nullptr;
  }
  return residual;
}

const FusionPattern& fusion_pattern(Fusion fusion) {
  return table().at(static_cast<size_t>(fusion));
}

std::optional<Fusion> fusion_named(std::string_view name) {
  for (const FusionPattern& p : table()) {
    if (p.name == name) return p.fusion;
  }
  return std::nullopt;
}

std::optional<FusionMatch> match_fusion(const GraphModuleImpl& module,
                                        Node& root,
                                        const std::vector<Fusion>& fusions,
                                        const PatternOptions& options) {
  // Every pattern's root is a call: placeholders, attributes (most nodes of
  // a model's graph) and the output start none.
  if (root.op() == Opcode::kPlaceholder || root.op() == Opcode::kGetAttr ||
      root.op() == Opcode::kOutput) {
    return std::nullopt;
  }
  // The root matched once per op, however many fusions start with it.
  std::vector<std::pair<PatternOp, std::optional<FusionMatch>>> roots;
  for (Fusion fusion : fusions) {
    const FusionPattern& pattern = fusion_pattern(fusion);
    const PatternOp root_op = pattern.ops.front();
    auto it = std::find_if(roots.begin(), roots.end(),
                           [&](const auto& r) { return r.first == root_op; });
    if (it == roots.end()) {
      FusionMatch m;
      m.nodes = {&root};
      roots.emplace_back(root_op, std::nullopt);
      it = roots.end() - 1;
      if (match_root(module, root, root_op, options, &m)) it->second = m;
    }
    if (!it->second) continue;
    FusionMatch m = *it->second;
    m.fusion = fusion;
    bool matched = true;
    for (size_t i = 1; i < pattern.ops.size() && matched; ++i) {
      Node* next = m.output()->only_user();
      matched = next != nullptr && match_next(module, *next, m.output(),
                                              pattern.ops[i], options, &m);
      if (matched) m.nodes.push_back(next);
    }
    if (matched) return m;
  }
  return std::nullopt;
}

std::string to_string(const FusionMatch& m) {
  std::vector<std::string> nodes;
  for (const Node* n : m.nodes) nodes.push_back(name_of(n));
  std::string s = absl::StrCat(name_of(m.root()), ": ",
                               std::string(fusion_pattern(m.fusion).name), " [",
                               absl::StrJoin(nodes, ", "), "]\n");
  if (const auto& c = m.convolution) {
    absl::StrAppend(&s, c->transposed ? "  transposed convolution: "
                                      : "  convolution: ",
                    "input ", name_of(c->input), ", weight ",
                    weight_string(c->weight), ", bias ", name_of(c->bias),
                    ", stride ", ints(c->stride), ", padding ",
                    ints(c->padding), ", dilation ", ints(c->dilation));
    if (c->transposed) {
      absl::StrAppend(&s, ", output_padding ", ints(c->output_padding));
    }
    absl::StrAppend(&s, ", groups ", c->groups, "\n");
  }
  if (const auto& l = m.linear) {
    const char* kind = l->kind == Linear::Kind::kLinear  ? "linear"
                       : l->kind == Linear::Kind::kAddmm ? "addmm"
                                                         : "matmul";
    absl::StrAppend(&s, "  linear (", kind, "): input ", name_of(l->input),
                    ", weight ", weight_string(l->weight),
                    l->weight.transposed ? " [in, out]" : " [out, in]",
                    ", bias ", name_of(l->bias), "\n");
  }
  if (const auto& mm = m.matmul) {
    absl::StrAppend(&s, "  matmul: self ", name_of(mm->self), ", other ",
                    name_of(mm->other), "\n");
  }
  if (const auto& b = m.batch_norm) {
    absl::StrAppend(&s, "  batch_norm: input ", name_of(b->input), ", weight ",
                    name_of(b->weight), ", bias ", name_of(b->bias),
                    ", running_mean ", name_of(b->running_mean),
                    ", running_var ", name_of(b->running_var), ", eps ",
                    b->eps, "\n");
  }
  if (const auto& r = m.recurrent) {
    std::vector<std::string> states, params;
    for (const Node* n : r->states) states.push_back(name_of(n));
    for (const Node* n : r->params) params.push_back(name_of(n));
    absl::StrAppend(
        &s, r->kind == Recurrent::Kind::kLstm ? "  lstm: " : "  gru: ",
        "input ", name_of(r->input), ", states [", absl::StrJoin(states, ", "),
        "], layers ", r->layers, ", directions ", r->directions(),
        r->has_biases ? ", biases" : ", no biases",
        r->train ? ", train" : "", r->batch_first ? ", batch_first" : "",
        "\n    parameters [", absl::StrJoin(params, ", "), "]\n");
  }
  if (!m.inputs.empty()) {
    std::vector<std::string> inputs;
    for (const Node* n : m.inputs) inputs.push_back(name_of(n));
    absl::StrAppend(&s, "  inputs: ", absl::StrJoin(inputs, ", "));
    if (m.fusion == Fusion::kCat) absl::StrAppend(&s, "; dim ", m.cat_dim);
    absl::StrAppend(&s, "\n");
  }
  if (m.residual != nullptr) {
    absl::StrAppend(&s, "  residual: ", name_of(m.residual), "\n");
  }
  if (const auto& a = m.activation) {
    absl::StrAppend(&s, "  activation: ", activation_name(a->kind));
    if (a->kind == Activation::Kind::kLeakyRelu) {
      absl::StrAppend(&s, " ", a->alpha);
    } else if (a->kind == Activation::Kind::kClamp) {
      absl::StrAppend(&s, " ", a->alpha, " ", a->beta);
    }
    absl::StrAppend(&s, "\n");
  }
  if (m.fusion == Fusion::kMatmulScale) {
    absl::StrAppend(&s, "  scale: ", m.scale, "\n");
  }
  return s;
}

}  // namespace fx
