#include "passes/cost_model.h"

#include "fx/runtime/guards.h"
#include "interpreter/shape_prop.h"

#include <algorithm>
#include <cmath>
#include <mutex>
#include <numeric>
#include <optional>
#include <set>
#include <string_view>
#include <tuple>

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/enum_tag.h>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "fx/ir/control_flow.h"
#include "fx/ir/errors.h"
#include "fx/ir/function.h"
#include "fx/ir/operator_schemas.h"

namespace fx {
namespace {

// How the cost model treats an operator (see the table in the header).
enum class Kind {
  kConv,
  kLinear,
  kMatmul,     // matmul, mm, bmm, mv, dot
  kAddMatmul,  // addmm, addmv, baddbmm: self + product
  kAddbmm,     // self + sum of batched products
  kAttention,  // scaled_dot_product_attention
  kLstm,
  kGru,
  kPool,
  kAdaptivePool,
  kElementwise,
  kReduction,
  kBatchNorm,
  kInstanceNorm,
  kNormWithStats,  // layer_norm, group_norm: always compute statistics
  kSoftmax,
  kEmbedding,
  kDropout,
  kMaybeCopy,  // reshape, flatten, contiguous, to: a view unless it copies
  kCopy,
  kFill,
  kUpsampleBilinear,
};

// By aten base name (no namespace, no in-place underscore), or by
// "name.overload" where overloads differ in kind.
const absl::flat_hash_map<std::string, Kind>& kinds() {
  static const auto* table = [] {
    auto* t = new absl::flat_hash_map<std::string, Kind>;
    auto add = [&](Kind kind, std::initializer_list<const char*> names) {
      for (const char* n : names) (*t)[n] = kind;
    };
    add(Kind::kConv,
        {"conv1d", "conv2d", "conv3d", "convolution", "_convolution",
         "conv_transpose1d", "conv_transpose2d", "conv_transpose3d"});
    add(Kind::kLinear, {"linear"});
    add(Kind::kMatmul, {"matmul", "mm", "bmm", "mv", "dot"});
    add(Kind::kAddMatmul, {"addmm", "addmv", "baddbmm"});
    add(Kind::kAddbmm, {"addbmm"});
    add(Kind::kAttention, {"scaled_dot_product_attention"});
    add(Kind::kLstm, {"lstm.input"});
    add(Kind::kGru, {"gru.input"});
    add(Kind::kPool,
        {"max_pool1d", "max_pool2d", "max_pool3d", "max_pool1d_with_indices",
         "max_pool2d_with_indices", "max_pool3d_with_indices", "avg_pool1d",
         "avg_pool2d", "avg_pool3d"});
    add(Kind::kAdaptivePool,
        {"adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d",
         "_adaptive_avg_pool2d", "_adaptive_avg_pool3d", "adaptive_max_pool1d",
         "adaptive_max_pool2d", "adaptive_max_pool3d"});
    add(Kind::kElementwise,
        {// Binary and ternary.
         "add", "sub", "rsub", "mul", "div", "true_divide", "floor_divide",
         "remainder", "fmod", "pow", "maximum", "minimum", "fmax", "fmin",
         "max.other", "min.other", "atan2", "eq", "ne", "lt", "le", "gt", "ge",
         "logical_and", "logical_or", "logical_xor", "bitwise_and",
         "bitwise_or", "bitwise_xor", "where", "masked_fill", "lerp", "addcmul",
         "addcdiv", "hypot",
         // Unary.
         "relu", "relu6", "hardtanh", "leaky_relu", "elu", "selu", "celu",
         "gelu", "silu", "mish", "sigmoid", "hardsigmoid", "hardswish", "tanh",
         "softplus", "threshold", "prelu", "exp", "exp2", "expm1", "log",
         "log2", "log10", "log1p", "sqrt", "rsqrt", "abs", "neg", "reciprocal",
         "sin", "cos", "tan", "erf", "clamp", "clamp_min", "clamp_max", "sign",
         "floor", "ceil", "round", "trunc", "square", "logical_not",
         "bitwise_not"});
    add(Kind::kReduction,
        {"sum", "mean", "amax", "amin", "max", "max.dim", "min", "min.dim",
         "argmax", "argmin", "prod", "all", "any"});
    add(Kind::kBatchNorm, {"batch_norm", "native_batch_norm"});
    add(Kind::kInstanceNorm, {"instance_norm"});
    add(Kind::kNormWithStats,
        {"layer_norm", "native_layer_norm", "group_norm", "native_group_norm"});
    add(Kind::kSoftmax, {"softmax", "log_softmax", "_softmax", "_log_softmax"});
    add(Kind::kEmbedding, {"embedding"});
    add(Kind::kDropout, {"dropout", "feature_dropout", "alpha_dropout",
                         "feature_alpha_dropout"});
    add(Kind::kMaybeCopy,
        {"reshape", "reshape_as", "flatten", "contiguous", "to", "type_as"});
    add(Kind::kCopy, {"cat",
                      "concat",
                      "stack",
                      "hstack",
                      "vstack",
                      "clone",
                      "copy",
                      "_to_copy",
                      "constant_pad_nd",
                      "pad",
                      "reflection_pad1d",
                      "reflection_pad2d",
                      "replication_pad1d",
                      "replication_pad2d",
                      "repeat",
                      "upsample_nearest1d",
                      "upsample_nearest2d",
                      "upsample_nearest3d",
                      "index_select",
                      "gather",
                      "flip",
                      "roll"});
    add(Kind::kFill,
        {"zeros", "ones", "full", "empty", "zeros_like", "ones_like",
         "full_like", "empty_like", "fill", "zero", "new_zeros", "new_ones",
         "new_full", "new_empty", "arange", "scalar_tensor"});
    add(Kind::kUpsampleBilinear, {"upsample_bilinear2d"});
    return t;
  }();
  return *table;
}

// Operators of other libraries the model prices: as an aten operator
// (price_as: that operator's base name, by which they are priced), or by a
// function of their own (price_by_macs).
struct PricedAs {
  std::mutex mutex;
  absl::flat_hash_map<std::string, std::string> names;
  absl::flat_hash_map<std::string,
                      std::function<std::optional<double>(const Node&)>>
      macs;
};
PricedAs& priced_as() {
  static auto* table = new PricedAs;
  return *table;
}

// The aten name without namespace and in-place underscore: "relu" for
// aten::relu_ (in-place variants cost what their functional form does); for
// an operator priced as an aten one, that one's (fx_onednn::conv_transpose
// priced as aten::conv_transpose2d: conv_transpose2d).
std::string base_name(const c10::FunctionSchema& schema) {
  std::string name = schema.name();
  constexpr std::string_view kAten = "aten::";
  if (name.compare(0, kAten.size(), kAten) == 0) {
    name.erase(0, kAten.size());
  } else {
    PricedAs& other = priced_as();
    std::lock_guard<std::mutex> lock(other.mutex);
    auto it = other.names.find(name);
    if (it != other.names.end()) return it->second;
  }
  if (name.size() > 1 && name.back() == '_' && name[name.size() - 2] != '_') {
    name.pop_back();
  }
  return name;
}

std::optional<Kind> kind_of(const c10::FunctionSchema& schema) {
  if (!absl::StartsWith(schema.name(), "aten::")) {
    PricedAs& other = priced_as();
    std::lock_guard<std::mutex> lock(other.mutex);
    auto it = other.names.find(schema.name());
    if (it == other.names.end()) return std::nullopt;
    return kinds().at(it->second);  // price_as checked it is there
  }
  const std::string name = base_name(schema);
  const auto& table = kinds();
  if (!schema.overload_name().empty()) {
    auto it = table.find(absl::StrCat(name, ".", schema.overload_name()));
    if (it != table.end()) return it->second;
  }
  auto it = table.find(name);
  if (it == table.end()) return std::nullopt;
  return it->second;
}

}  // namespace

void price_as(const std::string& op, const std::string& aten_op) {
  std::string name = aten_op;
  constexpr std::string_view kAten = "aten::";
  if (name.compare(0, kAten.size(), kAten) == 0) name.erase(0, kAten.size());
  if (kinds().count(name) == 0) {
    throw GraphError(absl::StrCat(
        "price_as: the cost model does not price '", aten_op, "', so '", op,
        "' cannot be priced as it; name an aten operator it knows, such as "
        "aten::conv2d or aten::linear"));
  }
  PricedAs& other = priced_as();
  std::lock_guard<std::mutex> lock(other.mutex);
  other.names[op] = name;
}

void price_by_macs(const std::string& op,
                   std::function<std::optional<double>(const Node&)> macs) {
  if (!macs) {
    throw GraphError(absl::StrCat("price_by_macs: no function given for '",
                                  op, "'"));
  }
  PricedAs& other = priced_as();
  std::lock_guard<std::mutex> lock(other.mutex);
  other.macs[op] = std::move(macs);
}

bool is_priced(const std::string& op) {
  constexpr std::string_view kAten = "aten::";
  if (op.compare(0, kAten.size(), kAten) == 0) {
    return kinds().count(op.substr(kAten.size())) > 0;
  }
  PricedAs& other = priced_as();
  std::lock_guard<std::mutex> lock(other.mutex);
  return other.names.count(op) > 0 || other.macs.count(op) > 0;
}

namespace {

// Operators that only relabel memory: every return aliases an input without
// writing it (view, t, transpose, chunk, ...) or changes an input's shape in
// place (transpose_, squeeze_).
bool is_view(const c10::OperatorHandle& op) {
  if (op.hasTag(at::Tag::inplace_view)) return true;
  const auto& returns = op.schema().returns();
  if (returns.empty()) return false;
  for (const c10::Argument& r : returns) {
    if (r.alias_info() == nullptr || r.alias_info()->isWrite()) return false;
  }
  return true;
}

// Operators returning no tensor and writing none: sizes, dims, ...
bool is_metadata_query(const c10::FunctionSchema& schema) {
  for (const c10::Argument& a : schema.arguments()) {
    if (a.alias_info() && a.alias_info()->isWrite()) return false;
  }
  for (const c10::Argument& r : schema.returns()) {
    if (r.type()->kind() == c10::TypeKind::TensorType) return false;
    if (auto list = r.type()->cast<c10::ListType>()) {
      if (list->getElementType()->kind() == c10::TypeKind::TensorType) {
        return false;
      }
    }
  }
  return true;
}

// A call of an aten operator: its node and the schema its arguments follow.
struct Call {
  const Node& node;
  const c10::FunctionSchema& schema;

  // The argument at schema position `index`: from args, else from kwargs by
  // its name; nullptr when the node leaves it to its default.
  const Argument* arg(size_t index) const {
    if (index < node.args().size()) return &node.args()[index];
    if (index >= schema.arguments().size()) return nullptr;
    return find_kwarg(node.kwargs(), schema.arguments()[index].name());
  }
  // The argument called `name`; nullptr also when the schema has none.
  const Argument* named(const char* name) const {
    c10::optional<int> index = schema.argumentIndexWithName(name);
    return index ? arg(static_cast<size_t>(*index)) : nullptr;
  }
};

// The tensor metadata of an argument that may be absent.
const TensorMeta* meta_of(const Argument* arg) {
  return arg != nullptr && arg->is_node() ? arg->to_node()->tensor_meta()
                                          : nullptr;
}

bool flag(const Argument* arg, bool default_value) {
  return arg != nullptr && arg->is_bool() ? arg->to_bool() : default_value;
}

// Bytes of memory a tensor spans: its elements, or less when strides
// overlap (an expanded tensor reads its source once).
double tensor_bytes(const TensorMeta& m) {
  double numel = static_cast<double>(m.numel());
  if (numel > 0 && m.strides.size() == m.sizes.size()) {
    double extent = 1;
    for (size_t d = 0; d < m.sizes.size(); ++d) {
      extent += static_cast<double>(m.sizes[d] - 1) *
                static_cast<double>(std::abs(m.strides[d]));
    }
    numel = std::min(numel, extent);
  }
  return numel * static_cast<double>(c10::elementSize(m.dtype));
}

// The bytes of a node's value(s), or nullopt without metadata.
std::optional<double> value_bytes(const Node& node) {
  if (const TensorMeta* m = node.meta().get(kTensorMeta)) {
    return tensor_bytes(*m);
  }
  if (const auto* list = node.meta().get(kTensorMetaList)) {
    double bytes = 0;
    for (const TensorMeta& m : *list) bytes += tensor_bytes(m);
    return bytes;
  }
  return std::nullopt;
}

// The node's (first) output.
const TensorMeta* output_meta(const Node& node) {
  if (const TensorMeta* m = node.meta().get(kTensorMeta)) return m;
  const auto* list = node.meta().get(kTensorMetaList);
  return list == nullptr || list->empty() ? nullptr : &list->front();
}

double product(const std::vector<int64_t>& v) {
  return std::accumulate(v.begin(), v.end(), 1.0,
                         [](double a, int64_t b) { return a * b; });
}

// A value that is a weight (get_attr) or a view of one (the t() of a
// linear's weight).
bool is_weight(const Node* node) {
  while (node->op() == Opcode::kCallFunction && node->target().is_operator() &&
         is_view(node->target().op()) && !node->args().empty() &&
         node->args()[0].is_node()) {
    node = node->args()[0].to_node();
  }
  return node->op() == Opcode::kGetAttr;
}

// Reads inputs, writes outputs, no FLOPs: the cost of anything unknown.
NodeCost data_movement(const Node& node) {
  NodeCost c;
  for (const Node* input : node.all_input_nodes()) {
    const double bytes = value_bytes(*input).value_or(0);
    c.bytes_read += bytes;
    if (is_weight(input)) c.weight_bytes += bytes;
  }
  c.bytes_written = value_bytes(node).value_or(0);
  return c;
}

NodeCost unmodelled(const Node& node) {
  NodeCost c = data_movement(node);
  c.modelled = false;
  return c;
}

// The number of spatial dimensions a pooling operator works on: 2 for
// max_pool2d.
size_t spatial_dims(const std::string& name) {
  for (char d : {'1', '2', '3'}) {
    if (absl::StrContains(name, std::string{d, 'd'})) return d - '0';
  }
  return 0;
}

// Input elements each output of a pooling node looks at.
std::optional<double> pool_window(const Call& call, Kind kind,
                                  const TensorMeta& in, const TensorMeta& out) {
  const size_t dims = spatial_dims(base_name(call.schema));
  if (dims == 0 || in.sizes.size() < dims || out.sizes.size() < dims) {
    return std::nullopt;
  }
  double window = 1;
  if (kind == Kind::kAdaptivePool) {
    // Adaptive windows vary by a row at most; ceil(in / out) is exact when
    // out divides in (global pooling: the whole plane).
    for (size_t d = 0; d < dims; ++d) {
      int64_t i = in.sizes[in.sizes.size() - dims + d];
      int64_t o = out.sizes[out.sizes.size() - dims + d];
      if (o <= 0) return std::nullopt;
      window *= static_cast<double>((i + o - 1) / o);
    }
    return window;
  }
  const Argument* kernel = call.named("kernel_size");
  if (kernel == nullptr || !kernel->is_sequence()) return std::nullopt;
  std::vector<int64_t> k = kernel->to_int_list();
  if (k.size() == 1) k.assign(dims, k[0]);
  if (k.size() != dims) return std::nullopt;
  return product(k);
}

// Costs an aten operator by its kind; nullopt when a figure it needs is
// missing from the metadata.
std::optional<NodeCost> operator_cost(const Call& call, Kind kind) {
  const TensorMeta* out = output_meta(call.node);
  if (out == nullptr) return std::nullopt;
  const double n = static_cast<double>(out->numel());
  const TensorMeta* in = meta_of(call.arg(0));
  NodeCost c = data_movement(call.node);
  switch (kind) {
    case Kind::kConv: {
      const TensorMeta* weight = meta_of(call.named("weight"));
      if (in == nullptr || weight == nullptr || weight->sizes.empty() ||
          weight->sizes[0] == 0) {
        return std::nullopt;
      }
      const bool transposed =
          absl::StartsWith(base_name(call.schema), "conv_transpose") ||
          flag(call.named("transposed"), false);
      // Weights per output (per input when transposed).
      const double per_element =
          static_cast<double>(weight->numel()) / weight->sizes[0];
      c.macs = per_element * (transposed ? in->numel() : n);
      c.flops = 2 * c.macs;
      if (meta_of(call.named("bias")) != nullptr) c.flops += n;
      return c;
    }
    case Kind::kLinear:
    case Kind::kMatmul:
      if (in == nullptr || in->sizes.empty()) return std::nullopt;
      c.macs = n * in->sizes.back();
      c.flops = 2 * c.macs;
      if (kind == Kind::kLinear && meta_of(call.named("bias")) != nullptr) {
        c.flops += n;
      }
      return c;
    case Kind::kAddMatmul:
    case Kind::kAddbmm: {
      const TensorMeta* m1 = meta_of(call.arg(1));
      const TensorMeta* m2 = meta_of(call.arg(2));
      if (m1 == nullptr || m2 == nullptr || m1->sizes.empty() ||
          m2->sizes.empty()) {
        return std::nullopt;
      }
      c.macs = kind == Kind::kAddbmm
                   ? static_cast<double>(m1->numel()) * m2->sizes.back()
                   : n * m1->sizes.back();
      c.flops = 2 * c.macs + n;
      return c;
    }
    case Kind::kAttention: {
      // q [..., L, E], k [..., S, E], v [..., S, Ev]: q @ k^T and the
      // weights @ v, each score scaled, masked and softmaxed.
      const TensorMeta* key = meta_of(call.named("key"));
      const TensorMeta* value = meta_of(call.named("value"));
      if (in == nullptr || key == nullptr || value == nullptr ||
          in->sizes.size() < 2 || key->sizes.size() < 2 ||
          value->sizes.empty() || in->sizes.back() == 0) {
        return std::nullopt;
      }
      const double rows = static_cast<double>(in->numel()) / in->sizes.back();
      const double scores = rows * static_cast<double>(key->sizes.end()[-2]);
      c.macs = scores * static_cast<double>(in->sizes.back() + value->sizes.back());
      c.flops = 2 * c.macs + scores * (kSoftmaxFlops + 2 * kElementwiseFlops);
      return c;
    }
    case Kind::kLstm:
    case Kind::kGru: {
      // lstm.input(input, hx, params, has_biases, num_layers, dropout,
      //            train, bidirectional, batch_first); gru.input the same
      //            with hx one tensor, not the pair (h, c).
      const bool lstm = kind == Kind::kLstm;
      const Argument* hx = call.named("hx");
      const Argument* params = call.named("params");
      if (in == nullptr || in->sizes.empty() || hx == nullptr ||
          params == nullptr || !params->is_sequence()) {
        return std::nullopt;
      }
      if (lstm && (!hx->is_sequence() || hx->elements().size() != 2)) {
        return std::nullopt;
      }
      // The state: [layers * directions, batch, hidden].
      const TensorMeta* state = meta_of(lstm ? &hx->elements()[1] : hx);
      if (state == nullptr || state->sizes.size() != 3) return std::nullopt;
      // Every layer and direction runs each of the steps * batch positions.
      const double positions =
          static_cast<double>(in->numel()) / in->sizes.back();
      double weights = 0;
      for (const Argument& p : params->elements()) {
        const TensorMeta* m = meta_of(&p);
        if (m == nullptr) return std::nullopt;
        if (m->sizes.size() == 2) weights += m->numel();
      }
      c.macs = positions * weights;
      const double units = static_cast<double>(state->sizes[0]) *
                           static_cast<double>(state->sizes[2]);
      const bool biases = flag(call.named("has_biases"), true);
      c.flops = 2 * c.macs +
                positions * units *
                    (lstm ? kLstmPointwiseFlops +
                                (biases ? kLstmBiasFlops : 0)
                          : kGruPointwiseFlops +
                                (biases ? kGruBiasFlops : 0));
      return c;
    }
    case Kind::kPool:
    case Kind::kAdaptivePool: {
      if (in == nullptr) return std::nullopt;
      std::optional<double> window = pool_window(call, kind, *in, *out);
      if (!window) return std::nullopt;
      c.flops = n * *window;
      return c;
    }
    case Kind::kElementwise: c.flops = n * kElementwiseFlops; return c;
    case Kind::kReduction:
      if (in == nullptr) return std::nullopt;
      c.flops = static_cast<double>(in->numel());
      return c;
    case Kind::kBatchNorm:
    case Kind::kInstanceNorm: {
      // Whether it computes the statistics or uses running ones.
      const bool stats = flag(
          call.named(kind == Kind::kBatchNorm ? "training" : "use_input_stats"),
          false);
      c.flops = n * (kNormApplyFlops + (stats ? kNormStatsFlops : 0));
      return c;
    }
    case Kind::kNormWithStats:
      if (in == nullptr) return std::nullopt;
      c.flops = static_cast<double>(in->numel()) *
                (kNormApplyFlops + kNormStatsFlops);
      return c;
    case Kind::kSoftmax: c.flops = n * kSoftmaxFlops; return c;
    case Kind::kEmbedding: {
      // Reads the indices and the rows it gathers, not the whole table.
      const TensorMeta* indices = meta_of(call.named("indices"));
      if (indices == nullptr) return std::nullopt;
      c.bytes_read = tensor_bytes(*indices) + tensor_bytes(*out);
      c.weight_bytes = std::min(c.weight_bytes, tensor_bytes(*out));
      return c;
    }
    case Kind::kDropout:
      // dropout(input, p, train): the input itself when not training.
      if (!flag(call.named("train"), true)) return NodeCost{};
      c.flops = n * kElementwiseFlops;
      return c;
    case Kind::kMaybeCopy:
      if (in == nullptr) return std::nullopt;
      if (in->dtype == out->dtype && in->device == out->device &&
          in->memory_format == out->memory_format) {
        return NodeCost{};
      }
      return c;
    case Kind::kCopy: return c;
    case Kind::kFill:
      c.bytes_read = 0;
      c.weight_bytes = 0;
      return c;
    case Kind::kUpsampleBilinear: c.flops = n * kBilinearFlops; return c;
  }
  return std::nullopt;
}

std::string operator_name(const c10::FunctionSchema& schema) {
  return schema.overload_name().empty()
             ? schema.name()
             : absl::StrCat(schema.name(), ".", schema.overload_name());
}

// The cost of `node`; when it is not modelled, what to call it in
// CostReport::unmodelled_ops goes to *unmodelled_name.
// A cond costs what its costlier branch costs (by multiply-accumulates,
// then flops, then bytes); a scan or a map its body's cost once per step
// (the xs' length); a while_loop, whose trip count only the run knows, is
// not modelled.
template <typename GiveUp>
NodeCost control_flow_cost(const Node& node, const GiveUp& give_up) {
  if (&node.target().function() == while_loop_function()) {
    return give_up("while_loop (its trip count is known only at run time)");
  }
  const Function* f = &node.target().function();
  if (f == scan_function() || f == map_function()) {
    // Its body once per slice of the xs: the length is their dimension 0.
    const char* name = f == scan_function() ? "scan" : "map";
    const Argument& xs = node.args().at(f == scan_function() ? 2 : 1);
    const TensorMeta* first =
        xs.is_list() && !xs.elements().empty() && xs.elements()[0].is_node()
            ? xs.elements()[0].to_node()->meta().get(kTensorMeta)
            : nullptr;
    if (first == nullptr || first->sizes.empty()) {
      return give_up(absl::StrCat(name, " (the length of its xs is unknown)"));
    }
    const CostReport body = estimate_cost(*bodies_of(node)[0]);
    if (!body.total.modelled) {
      return give_up(absl::StrCat(
          name, " (its body runs ",
          body.unmodelled_ops.empty() ? "what is not modelled"
                                      : body.unmodelled_ops.front(),
          ")"));
    }
    const double steps = static_cast<double>(first->sizes[0]);
    NodeCost c = body.total;
    c.flops *= steps;
    c.macs *= steps;
    c.bytes_read *= steps;
    c.bytes_written *= steps;
    c.weight_bytes *= steps;
    return c;
  }
  std::optional<NodeCost> costlier;
  for (const Graph* body : bodies_of(node)) {
    const CostReport branch = estimate_cost(*body);
    if (!branch.total.modelled) {
      return give_up(absl::StrCat(
          "cond (a branch runs ",
          branch.unmodelled_ops.empty() ? "what is not modelled"
                                        : branch.unmodelled_ops.front(),
          ")"));
    }
    const NodeCost& c = branch.total;
    if (!costlier ||
        std::make_tuple(c.macs, c.flops, c.bytes()) >
            std::make_tuple(costlier->macs, costlier->flops, costlier->bytes())) {
      costlier = c;
    }
  }
  return costlier.value_or(NodeCost{});
}

NodeCost estimate(const Node& node, std::string* unmodelled_name) {
  auto give_up = [&](std::string what) {
    if (unmodelled_name != nullptr) *unmodelled_name = std::move(what);
    return unmodelled(node);
  };
  std::optional<c10::OperatorHandle> op;
  switch (node.op()) {
    case Opcode::kPlaceholder:
    case Opcode::kGetAttr:
    case Opcode::kOutput: return NodeCost{};
    case Opcode::kCallModule:
      return give_up(absl::StrCat("call_module ", node.target().str()));
    case Opcode::kCallFunction:
      if (node.target().is_function()) {
        // getitem picks an element of a tuple: no data moves; sizes of
        // dynamic dimensions (sym_*) are integer arithmetic.
        if (&node.target().function() == getitem() || is_sym_call(node)) {
          return NodeCost{};
        }
        if (is_control_flow_call(node)) return control_flow_cost(node, give_up);
        return give_up(node.target().function().name());
      }
      op = node.target().op();
      break;
    case Opcode::kCallMethod: try { op = resolve_method(node);
      } catch (const GraphError&) {
        return give_up(absl::StrCat("call_method ", node.target().str()));
      }
      break;
  }
  const c10::FunctionSchema& schema = op->schema();
  std::function<std::optional<double>(const Node&)> macs_of;
  if (!absl::StartsWith(schema.name(), "aten::")) {
    PricedAs& other = priced_as();
    std::lock_guard<std::mutex> lock(other.mutex);
    auto it = other.macs.find(schema.name());
    if (it != other.macs.end()) macs_of = it->second;
  }
  if (macs_of) {
    const std::optional<double> macs = macs_of(node);
    if (!macs || output_meta(node) == nullptr) {
      return give_up(
          absl::StrCat(operator_name(schema), " (no tensor metadata)"));
    }
    NodeCost cost = data_movement(node);
    cost.macs = *macs;
    cost.flops = 2 * *macs;
    return cost;
  }
  std::optional<Kind> kind = kind_of(schema);
  if (!kind) {
    if (is_view(*op) || is_metadata_query(schema)) return NodeCost{};
    return give_up(operator_name(schema));
  }
  std::optional<NodeCost> cost = operator_cost(Call{node, schema}, *kind);
  if (!cost) {
    return give_up(
        absl::StrCat(operator_name(schema), " (no tensor metadata)"));
  }
  return *cost;
}

std::string module_path_of(const Node& node) {
  const std::string* path = node.meta().get(kModulePath);
  return path == nullptr ? "" : *path;
}

// "layer1.0.conv1" -> "", "layer1", "layer1.0", "layer1.0.conv1".
std::vector<std::string> enclosing_paths(const std::string& path) {
  std::vector<std::string> out = {""};
  if (path.empty()) return out;
  for (size_t dot = path.find('.'); dot != std::string::npos;
       dot = path.find('.', dot + 1)) {
    out.push_back(path.substr(0, dot));
  }
  out.push_back(path);
  return out;
}

void check_machine(const Machine& machine) {
  if (!(machine.peak_flops_per_second > 0) ||
      !(machine.memory_bytes_per_second > 0)) {
    throw GraphError(absl::StrCat(
        "cost model: a Machine needs positive peak_flops_per_second and "
        "memory_bytes_per_second (got ",
        machine.peak_flops_per_second, " and ", machine.memory_bytes_per_second,
        ")"));
  }
  if (!(machine.cache_bytes >= 0)) {
    throw GraphError(absl::StrCat(
        "cost model: a Machine's cache_bytes must be at least 0 (infinite: "
        "weights always in cache), not ",
        machine.cache_bytes));
  }
}

}  // namespace

NodeCost& NodeCost::operator+=(const NodeCost& other) {
  flops += other.flops;
  macs += other.macs;
  bytes_read += other.bytes_read;
  bytes_written += other.bytes_written;
  weight_bytes += other.weight_bytes;
  modelled = modelled && other.modelled;
  return *this;
}

NodeCost estimate_node_cost(const Node& node) {
  return estimate(node, nullptr);
}

CostReport estimate_cost(const Graph& graph) {
  CostReport report;
  std::set<std::string> unmodelled_ops;
  for (const Node* n : graph.nodes()) {
    if (n->op() == Opcode::kPlaceholder || n->op() == Opcode::kGetAttr ||
        n->op() == Opcode::kOutput) {
      continue;
    }
    std::string unmodelled_name;
    NodeCost cost = estimate(*n, &unmodelled_name);
    if (!cost.modelled) unmodelled_ops.insert(unmodelled_name);
    report.nodes.emplace_back(n, cost);
    report.total += cost;
    const std::string path = module_path_of(*n);
    report.by_module_path[path] += cost;
    for (const std::string& p : enclosing_paths(path)) {
      report.by_module_tree[p] += cost;
    }
  }
  report.unmodelled_ops.assign(unmodelled_ops.begin(), unmodelled_ops.end());
  return report;
}

const char* bound_name(Bound bound) {
  switch (bound) {
    case Bound::kNone: return "-";
    case Bound::kCompute: return "compute";
    case Bound::kMemory: return "memory";
  }
  return "-";
}

WeightsIn weights_in(double weight_bytes, const Machine& machine) {
  check_machine(machine);
  return weight_bytes > machine.cache_bytes ? WeightsIn::kMemory
                                            : WeightsIn::kCache;
}

double estimated_seconds(const NodeCost& cost, const Machine& machine,
                         WeightsIn weights) {
  check_machine(machine);
  const double compute = cost.flops / machine.peak_flops_per_second;
  const double bandwidth = machine.memory_bytes_per_second;
  if (weights == WeightsIn::kCache) {
    return std::max(compute, cost.bytes() / bandwidth);
  }
  const double fetched = std::min(cost.weight_bytes, cost.bytes());
  return std::max(compute, (cost.bytes() - fetched) / bandwidth) +
         fetched / bandwidth;
}

Bound bound_of(const NodeCost& cost, const Machine& machine) {
  check_machine(machine);
  if (cost.flops == 0 && cost.bytes() == 0) return Bound::kNone;
  return cost.flops / machine.peak_flops_per_second >=
                 cost.bytes() / machine.memory_bytes_per_second
             ? Bound::kCompute
             : Bound::kMemory;
}

double estimated_seconds(const CostReport& report, const Machine& machine) {
  const WeightsIn weights = weights_in(report.total.weight_bytes, machine);
  double seconds = 0;
  for (const auto& [node, cost] : report.nodes) {
    seconds += estimated_seconds(cost, machine, weights);
  }
  return seconds;
}

namespace {

// `value` scaled to [1, 1000) by one of `prefixes` (each 1000 times the
// last), with 3 significant digits.
std::string with_prefix(double value, const std::string& unit,
                        const std::vector<const char*>& prefixes) {
  if (value == 0) return absl::StrCat("0 ", prefixes[0], unit);
  size_t i = 0;
  double scaled = value;
  while (i + 1 < prefixes.size() && std::abs(scaled) >= 999.5) {
    scaled /= 1000;
    ++i;
  }
  const double magnitude = std::abs(scaled);
  // Counts below 1000 print as they are: "8 FLOPs", not "8.00 FLOPs".
  const bool whole = i == 0 && scaled == std::floor(scaled);
  std::string digits = whole || magnitude >= 99.95
                           ? absl::StrFormat("%.0f", scaled)
                       : magnitude >= 9.995 ? absl::StrFormat("%.1f", scaled)
                                            : absl::StrFormat("%.2f", scaled);
  return absl::StrCat(digits, " ", prefixes[i], unit);
}

}  // namespace

std::string format_quantity(double value, const std::string& unit) {
  return with_prefix(value, unit, {"", "K", "M", "G", "T", "P", "E"});
}

std::string format_seconds(double seconds) {
  return with_prefix(seconds * 1e9, "s", {"n", "u", "m", ""});
}

namespace {

// One row of the cost table: a node or a module path.
struct Row {
  std::vector<std::string> labels;
  NodeCost cost;
  // With a machine: the sum of its nodes' times, and how much of it their
  // compute-bound nodes take.
  double seconds = 0;
  double compute_seconds = 0;

  void add(const NodeCost& node_cost, const Machine* machine,
           WeightsIn weights) {
    cost += node_cost;
    if (machine == nullptr) return;
    const double t = estimated_seconds(node_cost, *machine, weights);
    seconds += t;
    if (bound_of(node_cost, *machine) == Bound::kCompute) compute_seconds += t;
  }
  // A group is bound by what most of its time is spent on.
  Bound bound() const {
    if (seconds == 0) return Bound::kNone;
    return compute_seconds * 2 >= seconds ? Bound::kCompute : Bound::kMemory;
  }
};

}  // namespace

std::string format_cost_table(const CostReport& report,
                              const CostTableOptions& options) {
  using GroupBy = CostTableOptions::GroupBy;
  const Machine* machine = options.machine;
  const WeightsIn weights =
      machine != nullptr ? weights_in(report.total.weight_bytes, *machine)
                         : WeightsIn::kCache;
  std::vector<std::string> headers;
  std::vector<Row> rows;
  Row total{{absl::StrCat("total (", report.nodes.size(), " nodes)")}, {}};
  for (const auto& [node, cost] : report.nodes) {
    total.add(cost, machine, weights);
  }
  if (options.group_by == GroupBy::kNode) {
    headers = {"node", "target", "module"};
    for (const auto& [node, cost] : report.nodes) {
      std::string target = node->target().to_string();
      if (!cost.modelled) absl::StrAppend(&target, " (unmodelled)");
      rows.push_back(Row{{node->name(), target, module_path_of(*node)}, {}});
      rows.back().add(cost, machine, weights);
    }
  } else {
    headers = {"module"};
    std::map<std::string, Row> groups;
    for (const auto& [node, cost] : report.nodes) {
      const std::string path = module_path_of(*node);
      if (options.group_by == GroupBy::kModulePath) {
        groups[path].add(cost, machine, weights);
        continue;
      }
      // The whole graph is the total row; nodes outside every submodule
      // get a row of their own, so that the top level adds up.
      if (path.empty()) groups[""].add(cost, machine, weights);
      for (const std::string& p : enclosing_paths(path)) {
        if (!p.empty()) groups[p].add(cost, machine, weights);
      }
    }
    for (auto& [path, row] : groups) {
      row.labels = {path.empty() ? (options.group_by == GroupBy::kModulePath
                                        ? "(root)"
                                        : "(outside submodules)")
                                 : path};
      rows.push_back(std::move(row));
    }
  }
  // Largest first; stable, so ties keep program (or path) order.
  std::stable_sort(rows.begin(), rows.end(), [&](const Row& a, const Row& b) {
    if (machine != nullptr) return a.seconds > b.seconds;
    return a.cost.flops > b.cost.flops;
  });

  const size_t label_columns = headers.size();
  for (const char* h : {"FLOPs", "MACs", "read", "written"}) {
    headers.push_back(h);
  }
  if (machine != nullptr) {
    headers.push_back("time");
    headers.push_back("bound");
  }
  headers.push_back(machine != nullptr ? "%time" : "%FLOPs");
  auto cells = [&](const Row& row) {
    std::vector<std::string> out = row.labels;
    out.resize(label_columns);
    out.push_back(format_quantity(row.cost.flops, "FLOPs"));
    out.push_back(format_quantity(row.cost.macs, "MACs"));
    out.push_back(format_quantity(row.cost.bytes_read, "B"));
    out.push_back(format_quantity(row.cost.bytes_written, "B"));
    double share = 0;
    if (machine != nullptr) {
      out.push_back(format_seconds(row.seconds));
      out.push_back(bound_name(row.bound()));
      share = total.seconds > 0 ? row.seconds / total.seconds : 0;
    } else {
      share = total.cost.flops > 0 ? row.cost.flops / total.cost.flops : 0;
    }
    out.push_back(absl::StrFormat("%.1f", 100 * share));
    return out;
  };

  std::vector<std::vector<std::string>> table = {headers};
  const size_t shown =
      options.top_n == 0 ? rows.size() : std::min(options.top_n, rows.size());
  for (size_t i = 0; i < shown; ++i) table.push_back(cells(rows[i]));
  const size_t total_row = table.size();
  table.push_back(cells(total));

  // The total's label spans the label columns.
  std::vector<size_t> width(headers.size(), 0);
  for (size_t r = 0; r < table.size(); ++r) {
    for (size_t c = 0; c < table[r].size(); ++c) {
      if (r == total_row && c < label_columns) continue;
      width[c] = std::max(width[c], table[r][c].size());
    }
  }
  size_t label_span = 2 * (label_columns - 1);
  for (size_t c = 0; c < label_columns; ++c) label_span += width[c];
  const std::string& total_label = table[total_row][0];
  if (total_label.size() > label_span) {
    width[label_columns - 1] += total_label.size() - label_span;
    label_span = total_label.size();
  }

  std::string out;
  for (size_t r = 0; r < table.size(); ++r) {
    std::string line;
    for (size_t c = 0; c < table[r].size(); ++c) {
      const std::string& cell = table[r][c];
      size_t w = width[c];
      if (r == total_row && c < label_columns) {
        if (c > 0) continue;
        w = label_span;
      } else if (c > 0) {
        line += "  ";
      }
      const std::string pad(w - cell.size(), ' ');
      // Labels (and the bound) left-aligned, figures right-aligned.
      const bool left = c < label_columns || headers[c] == "bound";
      absl::StrAppend(&line, left ? cell : pad, left ? pad : cell);
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    absl::StrAppend(&out, line, "\n");
    if (r + 1 == total_row && shown < rows.size()) {
      absl::StrAppend(&out, "... ", rows.size() - shown, " more rows\n");
    }
  }
  if (!report.unmodelled_ops.empty()) {
    absl::StrAppend(
        &out, "unmodelled: ", absl::StrJoin(report.unmodelled_ops, ", "), "\n");
  }
  return out;
}

}  // namespace fx

namespace fx {

CostReport estimate_cost_at(const GraphModuleImpl& module,
                            const std::vector<c10::IValue>& inputs) {
  // The guards first: the Interpreter does not check them.
  SymbolBindings symbols;
  const std::vector<Node*> placeholders = module.graph().placeholders();
  if (inputs.size() != placeholders.size()) {
    throw GraphError(absl::StrCat("estimate_cost_at: the graph takes ",
                                  placeholders.size(), " inputs, ", inputs.size(),
                                  " given"));
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (const InputGuard* guard = placeholders[i]->meta().get(kGuard)) {
      check_input(*guard, inputs[i], placeholders[i]->name(), i, &symbols);
    }
  }
  std::shared_ptr<GraphModuleImpl> copy = module.copy();
  ShapeProp(GraphModule(copy), ShapePropOptions{.symbolic = false})
      .propagate_keeping_buffers(inputs);
  CostReport report = estimate_cost(copy->graph());
  report.priced = copy;
  return report;
}

}  // namespace fx
