#include "quantization/quantize_fx.h"

#include <algorithm>
#include <cmath>

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "fx/ir/control_flow.h"
#include "fx/ir/function.h"
#include "fx/ir/meta.h"
#include "fx/ir/operator_schemas.h"
#include "interpreter/shape_prop.h"
#include "passes/decompose.h"
#include "passes/fuse_conv_bn.h"
#include "passes/operator_families.h"
#include "passes/patterns.h"
#include "passes/remove_dropout.h"
#include "quantization/internal/plan.h"
#include "quantization/observer.h"
#include "quantization/ops.h"

namespace fx {

using quantization_internal::PlannedObserver;

namespace {

// --- Matching ----------------------------------------------------------------
bool is_observer(const Node& n) { return n.is_call_to({"fx_quant::observe"}); }

// `n` with observers looked through.
Node* through_observers(Node* n) {
  while (n != nullptr && is_observer(*n) && n->args()[0].is_node()) {
    n = n->args()[0].to_node();
  }
  return n;
}

bool is_float(const Node* n) { return float32_cpu(n->tensor_meta()); }

// The fusions quantized (passes/patterns.h), each with the relu after it
// where the quantized operator fuses one; longer ones first.
const std::vector<Fusion>& quantized_fusions() {
  static const std::vector<Fusion> fusions = {
      Fusion::kConvRelu,  Fusion::kConv,      Fusion::kLinearRelu,
      Fusion::kLinear,    Fusion::kAddRelu,   Fusion::kAdd,
      Fusion::kMulRelu,   Fusion::kMul,       Fusion::kCat,
      Fusion::kHardswish, Fusion::kBatchNormRelu, Fusion::kBatchNorm};
  return fusions;
}
// quantize_dynamic_fx's.
const std::vector<Fusion>& dynamic_fusions() {
  static const std::vector<Fusion> fusions = {Fusion::kLinearRelu,
                                              Fusion::kLinear};
  return fusions;
}

// Matching sees weights through their observers (convert_fx matches the
// prepared graph).
const PatternOptions& through_observer_options() {
  static const PatternOptions options = {true, {"fx_quant::observe"}};
  return options;
}

enum class Family {
  kConv,
  kLinear,
  kAdd,
  kMul,
  kCat,
  kHardswish,
  kBatchNorm,
};

const char* family_name(Family f) {
  switch (f) {
    case Family::kConv: return "conv";
    case Family::kLinear: return "linear";
    case Family::kAdd: return "add";
    case Family::kMul: return "mul";
    case Family::kCat: return "cat";
    case Family::kHardswish: return "hardswish";
    case Family::kBatchNorm: return "batch_norm";
  }
  return "";
}

// One quantizable operation: a match of one of the fusions above (its root
// operator and the relu fused after it), and the tensors it reads.
struct Unit {
  Family family;
  FusionMatch match;
  std::vector<Node*> activations;  // tensor inputs, as the root takes them

  Node* root() const { return match.root(); }
  Node* relu() const {
    return match.activation ? match.activation->node : nullptr;
  }
  Node* output() const { return match.output(); }
  // Conv and linear: the weight (a get_attr, seen through observers and
  // an aten::t) and the bias (None or a get_attr).
  const Weight* weight() const {
    if (match.convolution) return &match.convolution->weight;
    if (match.linear) return &match.linear->weight;
    return nullptr;
  }
  Node* bias() const {
    if (match.convolution) return match.convolution->bias;
    if (match.linear) return match.linear->bias;
    return nullptr;
  }
};

std::optional<Unit> match_unit(const GraphModuleImpl& module, Node* n,
                               const std::vector<Fusion>& fusions) {
  auto match = match_fusion(module, *n, fusions, through_observer_options());
  if (!match || !is_float(n)) return std::nullopt;
  Unit u{Family::kConv, std::move(*match), {}};
  switch (fusion_pattern(u.match.fusion).ops.front()) {
    case PatternOp::kConvolution:
      u.family = Family::kConv;
      u.activations = {u.match.convolution->input};
      break;
    case PatternOp::kLinear:
      u.family = Family::kLinear;
      u.activations = {u.match.linear->input};
      break;
    case PatternOp::kBatchNorm: {
      const BatchNorm& bn = *u.match.batch_norm;
      // quantized::batch_norm1d/2d/3d take a weight and a bias.
      const size_t rank = bn.input->tensor_meta()->sizes.size();
      if (rank < 3 || rank > 5 || bn.weight == nullptr || bn.bias == nullptr) {
        return std::nullopt;
      }
      u.family = Family::kBatchNorm;
      u.activations = {bn.input};
      break;
    }
    case PatternOp::kAdd: u.family = Family::kAdd; break;
    case PatternOp::kMul: u.family = Family::kMul; break;
    case PatternOp::kCat: u.family = Family::kCat; break;
    case PatternOp::kHardswish: u.family = Family::kHardswish; break;
    default: return std::nullopt;
  }
  if (u.activations.empty()) u.activations = u.match.inputs;
  // The bias is packed with the weight, by an init step: an attribute.
  if (u.bias() != nullptr && u.bias()->op() != Opcode::kGetAttr) {
    return std::nullopt;
  }
  return u;
}

// Operators that run on quantized tensors as they come, keeping their
// input's scale (or choosing a fixed one): the first argument is the only
// tensor they read.
bool is_pass_through(const Node& n) {
  if (!has_trait(n, kQuantPassThrough)) return false;
  if (n.all_input_nodes().empty() || !n.args()[0].is_node()) return false;
  const Node* input = n.args()[0].to_node();
  for (const Node* in : n.all_input_nodes()) {
    // Sizes of dynamic dimensions (`view(x, [%B, -1])`) are ints, not
    // tensors read.
    if (in != input && !is_sym_call(*in)) return false;
  }
  // adaptive_max_pool2d returns indices too; a list of outputs is left alone.
  if (n.is_call_to({"aten::adaptive_max_pool2d"})) return false;
  return is_float(through_observers(const_cast<Node*>(input))) && is_float(&n);
}

// hardtanh, relu6 or clamp.
bool is_clamp(const Node& n) { return has_trait(n, kClampLike); }

// The qconfig family of a pass-through operator: a fixed-qparams one's
// name (sigmoid, hardsigmoid, tanh), else "general".
std::string pass_through_family(const Node& n) {
  if (!has_trait(n, kFixedQParams)) return "general";
  const std::string& name = n.target().op().operator_name().name;
  return name.substr(name.find("::") + 2);
}

void check_not_training(const GraphModuleImpl& module, const char* what) {
  if (module.traced_training().value_or(false) || module.is_training()) {
    throw QuantizationError(absl::StrCat(
        what,
        ": the module is in training mode (or was traced in it); post-training "
        "quantization needs inference behaviour: call eval() on the model, "
        "trace it again, and prepare that"));
  }
}

// --- prepare_fx ------------------------------------------------------------------
class Preparer {
 public:
  Preparer(GraphModuleImpl& module, const QConfigMapping& mapping)
      : module_(module), graph_(module.graph()), mapping_(mapping) {}

  // Where observers go, decided before any is inserted (prepare_qat_fx puts
  // fake quantizers in the same places).
  std::vector<PlannedObserver> plan() {
    std::vector<std::pair<Unit, QConfig>> units;
    for (Node* n : graph_.nodes()) {
      if (auto u = match_unit(module_, n, quantized_fusions())) {
        auto qconfig = mapping_.qconfig_for(*n, family_name(u->family));
        if (!qconfig) continue;
        units.push_back({*u, *qconfig});
        quantized_outputs_.insert(u->output());
      }
    }
    for (Node* n : graph_.nodes()) {
      if (is_pass_through(*n) && mapping_.qconfig_for(*n, pass_through_family(*n))) {
        pass_through_.insert(n);
      }
    }
    std::vector<PlannedObserver> planned;
    absl::flat_hash_set<const Node*> observed;
    auto observe = [&](Node* value, const ObserverSpec& spec, const char* role) {
      if (is_observer(*value) || !observed.insert(value).second) return;
      planned.push_back({value, spec, role, nullptr, {}});
    };
    for (auto& [u, qconfig] : units) {
      for (Node* a : u.activations) {
        if (!quantized_source(a)) observe(a, qconfig.activation, "input");
      }
      observe(u.output(), qconfig.activation, "output");
      if (u.weight() != nullptr) {
        ObserverSpec s = qconfig.weight;
        // The output channel: axis 0 of [out, in, ...], 1 of a transposed
        // linear weight [in, out].
        if (s.per_channel()) s.ch_axis = u.weight()->transposed ? 1 : 0;
        planned.push_back({u.weight()->attr, s, "weight", u.root(), *u.weight()});
      }
    }
    return planned;
  }

  void run() {
    for (const PlannedObserver& p : plan()) {
      if (p.role == "weight") {
        Node* obs = add_observer(p.value, p.spec, "weight_post_process_", "weight");
        quantization_internal::weight_reader(p.weight, p.root)
            ->replace_input_with(p.value, obs);
      } else {
        Node* obs = add_observer(p.value, p.spec, "activation_post_process_",
                                 p.role.c_str());
        p.value->replace_all_uses_with(
            obs, [obs](Node* user) { return user != obs; });
      }
    }
  }

 private:
  // Whether `v` will be a quantized tensor after convert_fx without a
  // quantize of its own: a quantized unit's output, or a pass-through
  // operator on one.
  bool quantized_source(const Node* v) {
    for (int depth = 0; depth < 1000; ++depth) {
      if (quantized_outputs_.contains(v)) return true;
      if (!pass_through_.contains(v)) return false;
      v = v->args()[0].to_node();
    }
    return false;
  }

  Node* add_observer(Node* value, const ObserverSpec& spec,
                     const std::string& prefix, const char* role) {
    return quantization_internal::insert_observer(
        module_, value, spec, make_observer_state(spec, value->tensor_meta()->sizes),
        absl::StrCat(prefix, count_++), role);
  }

  GraphModuleImpl& module_;
  Graph& graph_;
  const QConfigMapping& mapping_;
  absl::flat_hash_set<const Node*> quantized_outputs_, pass_through_;
  int count_ = 0;
};

// The first node without tensor metadata, or nullptr.
const Node* without_tensor_meta(const Graph& graph) {
  for (const Node* n : graph.nodes()) {
    if (n->op() == Opcode::kOutput || n->op() == Opcode::kGetAttr) continue;
    // Sizes (dynamic dimensions) are ints.
    if (is_sym_call(*n)) continue;
    if (n->meta().get(kTensorMeta) == nullptr &&
        n->meta().get(kTensorMetaList) == nullptr) {
      return n;
    }
  }
  return nullptr;
}

// --- convert_fx --------------------------------------------------------------------
struct ObserverInfo {
  ObserverSpec spec;
  at::Tensor state;
};

ObserverInfo observer_info(const GraphModuleImpl& module, const Node& obs) {
  auto value = [&](const char* name) {
    auto a = operator_argument(obs, name);
    if (!a) throw QuantizationError(absl::StrCat(obs.format_node(), ": no ", name));
    return *a;
  };
  const Argument state = obs.args().at(1);
  if (!state.is_node() || state.to_node()->op() != Opcode::kGetAttr) {
    throw QuantizationError(absl::StrCat(
        "observer ", obs.format_node(),
        ": its state must be a get_attr of the prepared module"));
  }
  ObserverInfo info;
  info.spec = spec_from_arguments(
      value("observer").to_string_ref(), value("dtype").to_dtype(),
      value("qscheme").to_string_ref(), value("quant_min").to_int(),
      value("quant_max").to_int(), value("eps").to_double(),
      value("averaging_constant").to_double(), value("ch_axis").to_int());
  info.state = module.fetch_attr(state.to_node()->target().str());
  return info;
}

std::string describe_value(const Node* v) {
  std::string s = absl::StrCat("%", v->name());
  if (const std::string* path = v->meta().get(kModulePath)) {
    absl::StrAppend(&s, " (module ", *path, ")");
  }
  return s;
}

void check_calibrated(const GraphModuleImpl& prepared, const char* what) {
  bool any = false;
  for (const Node* n : prepared.graph().nodes()) {
    if (!is_observer(*n)) continue;
    any = true;
    const ObserverInfo info = observer_info(prepared, *n);
    if (!observed(info.spec, info.state)) {
      const Node* value = n->args()[0].to_node();
      throw QuantizationError(absl::StrCat(
          what, ": observer %", n->name(), " of ", describe_value(value),
          " saw no data: run the prepared GraphModule on calibration inputs "
          "(that reach this node) before converting"));
    }
  }
  if (!any) {
    throw QuantizationError(absl::StrCat(
        what, ": the module has no observers: give it the result of "
        "prepare_fx (after calibrating it)"));
  }
}

// The quantized operators' names.
std::string quantized_op(const Unit& u) {
  const bool relu = u.relu() != nullptr;
  switch (u.family) {
    case Family::kConv:
      if (u.match.convolution->spatial == 1) return relu ? "quantized::conv1d_relu" : "quantized::conv1d";
      if (u.match.convolution->spatial == 2) {
        return relu ? "quantized::conv2d_relu.new" : "quantized::conv2d.new";
      }
      return relu ? "quantized::conv3d_relu.new" : "quantized::conv3d.new";
    case Family::kLinear:
      return relu ? "quantized::linear_relu" : "quantized::linear";
    case Family::kAdd: return relu ? "quantized::add_relu" : "quantized::add";
    case Family::kMul: return relu ? "quantized::mul_relu" : "quantized::mul";
    case Family::kCat: return "quantized::cat";
    case Family::kHardswish: return "quantized::hardswish";
    case Family::kBatchNorm: {
      return "quantized::batch_norm";
    }
  }
  return "";
}

class Converter {
 public:
  // `weight_states`: quantize weights by their observers' states (a QAT
  // module's: the qparams training simulated) instead of their own range.
  Converter(const GraphModuleImpl& prepared, bool reference,
            std::string engine, bool weight_states = false)
      : prepared_(prepared), reference_(reference), engine_(std::move(engine)),
        weight_states_(weight_states), graph_(std::make_unique<Graph>()) {}

  GraphModule run() {
    const Graph& old = prepared_.graph();
    for (Node* n : old.nodes()) {
      if (auto u = match_unit(prepared_, n, quantized_fusions())) {
        if (is_observer_of_output(*u)) units_[n] = *u;
      }
    }
    for (Node* n : old.nodes()) visit(n);

    // The module: the prepared one's init steps (folded batch norms) and the
    // packing step, the tensors they and the new graph read (not the
    // observers' states), then the graph, which reads the packed weights.
    std::vector<GraphModuleImpl::InitStep> steps = prepared_.init_steps();
    if (!pack_outputs_.empty()) {
      std::vector<Argument> outs(pack_outputs_.begin(), pack_outputs_.end());
      init_graph_->output(Argument::tuple(std::move(outs)));
      steps.push_back({std::shared_ptr<const Graph>(std::move(init_graph_)),
                       pack_paths_});
    }
    graph_->eliminate_dead_code();
    absl::flat_hash_set<std::string> made;
    for (const auto& step : steps) made.insert(step.outputs.begin(), step.outputs.end());
    Attributes attributes;
    attributes.traced_training = prepared_.traced_training();
    auto take = [&](const Graph& g) {
      for (Node* n : g.find_nodes(Opcode::kGetAttr)) {
        const std::string& path = n->target().str();
        if (made.contains(path) || !prepared_.has_tensor_attribute(path)) continue;
        (prepared_.is_parameter(path) ? attributes.parameters : attributes.buffers)
            .emplace(path, prepared_.fetch_attr(path));
      }
    };
    take(*graph_);
    for (const auto& step : steps) take(*step.graph);
    for (Node* n : graph_->find_nodes(Opcode::kCallModule)) {
      const std::string& path = n->target().str();
      if (const LeafModule* leaf = prepared_.leaf_module(path)) {
        attributes.modules.emplace(path, *leaf);
      }
    }
    auto module = std::make_shared<GraphModuleImpl>(
        std::move(graph_), std::move(attributes), std::move(steps));
    module->eval();
    return GraphModule(module);
  }

 private:
  // Whether prepare_fx chose to quantize `u`: its output has an observer
  // of role "output".
  bool is_observer_of_output(const Unit& u) {
    Node* user = u.output()->only_user();
    return user != nullptr && is_observer(*user) && role(*user) == "output";
  }

  static std::string role(const Node& obs) {
    auto r = operator_argument(obs, "role");
    return r && r->is_string() ? r->to_string_ref() : "output";
  }

  Graph& init_graph() {
    if (!init_graph_) init_graph_ = std::make_unique<Graph>();
    return *init_graph_;
  }

  // The float value of old node `v` in the new graph.
  Node* fp(Node* v) {
    if (auto it = fp_.find(v); it != fp_.end()) return it->second;
    auto q = q_.find(v);
    if (q == q_.end()) {
      throw QuantizationError(absl::StrCat("convert_fx: %", v->name(),
                                           " is used before it is defined"));
    }
    Node* d = graph_->call_function(fx::op("aten::dequantize.self"),
                                    {q->second});
    if (const TensorMeta* m = v->tensor_meta()) {
      TensorMeta meta = *m;
      meta.dtype = c10::ScalarType::Float;
      d->meta().set(kTensorMeta, meta);
    }
    fp_[v] = d;
    return d;
  }

  // The quantized value of old node `v`, quantizing it if it is observed;
  // nullptr if it cannot be.
  Node* quantized(Node* v) {
    if (auto it = q_.find(v); it != q_.end()) return it->second;
    auto p = qparams_.find(v);
    if (p == qparams_.end()) return nullptr;
    const auto& [spec, q] = p->second;
    Node* node = graph_->call_function(
        fx::op("aten::quantize_per_tensor"),
        {fp(v), q.scale_value(), q.zero_point_value(), spec.dtype});
    set_quantized_meta(node, through_observers(v), spec.dtype);
    q_[v] = node;
    return node;
  }

  static void set_quantized_meta(Node* node, const Node* like,
                                 c10::ScalarType dtype) {
    if (const TensorMeta* m = like->tensor_meta()) {
      TensorMeta meta = *m;
      meta.dtype = dtype;
      meta.requires_grad = false;
      node->meta().set(kTensorMeta, meta);
    }
    node->meta().set(kQuantizedFrom, like->name());
  }

  Argument map_fp(const Argument& a) {
    return map_arg(a, [this](Node* n) { return Argument(fp(n)); });
  }

  Node* copy_float(Node* n) {
    Node* c = graph_->node_copy(*n, [&](Node* in) -> Argument { return fp(in); });
    fp_[n] = c;
    return c;
  }

  void visit(Node* n) {
    switch (n->op()) {
      case Opcode::kPlaceholder:
      case Opcode::kGetAttr:
        fp_[n] = graph_->node_copy(*n, [](Node* in) -> Argument { return in; });
        return;
      case Opcode::kOutput:
        graph_->output(map_fp(n->args()[0]));
        return;
      default:
        break;
    }
    if (fp_.contains(n) || q_.contains(n)) return;  // made with its unit
    if (is_observer(*n)) {
      visit_observer(n);
      return;
    }
    if (auto it = units_.find(n); it != units_.end()) {
      if (reference_ ? lower_reference(it->second) : lower_unit(it->second)) {
        return;
      }
    }
    if (!reference_ && is_pass_through(*n)) {
      Node* input = n->args()[0].to_node();
      if (auto it = q_.find(input); it != q_.end()) {
        Node* source = it->second;
        if (engine_ == "qnnpack" && is_clamp(*n)) {
          // libtorch's qnnpack hardtanh (relu6, clamp; in place or not)
          // reads a channels-last input, which its convolutions output, as
          // if it were contiguous: a scrambled result (MobileNetV2 at 1 dB
          // of SQNR, in Python's quantize_fx too). Contiguous first.
          source = graph_->call_function(op("aten::contiguous"), {source});
          set_quantized_meta(source, input, it->second->tensor_meta()->dtype);
          if (TensorMeta* m = source->meta().get_mutable(kTensorMeta)) {
            m->memory_format = c10::MemoryFormat::Contiguous;
            m->strides = strides_for(m->sizes, m->memory_format);
          }
          // An in-place clamp now writes the copy: later readers of the
          // input read that.
          it->second = source;
        }
        Node* c = graph_->node_copy(*n, [&](Node* in) -> Argument {
          return in == input ? source : fp(in);
        });
        if (c->is_call_to({"aten::view"})) {
          // A quantized convolution's output is channels-last, which a view
          // cannot always flatten (x.view({x.size(0), -1}) at batch 1):
          // reshape copies only then.
          Node* r = graph_->call_function(op("aten::reshape"), c->args(),
                                          c->kwargs());
          graph_->erase_node(c);
          c = r;
        }
        expand_pool_arguments(c);
        set_quantized_meta(c, n, it->second->tensor_meta()->dtype);
        q_[n] = c;
        return;
      }
    }
    copy_float(n);
  }

  // Pooling on quantized tensors takes its int lists in full: [2] becomes
  // [2, 2] and an empty stride the kernel size (as aten's float kernels
  // read them).
  static void expand_pool_arguments(Node* n) {
    int64_t dims = 0;
    if (n->is_call_to({"aten::max_pool1d"})) dims = 1;
    if (n->is_call_to({"aten::max_pool2d", "aten::avg_pool2d"})) dims = 2;
    if (n->is_call_to({"aten::max_pool3d"})) dims = 3;
    if (dims == 0) return;
    const c10::FunctionSchema& schema = n->target().op().schema();
    std::vector<Argument> full = full_arguments(*n, schema);
    auto expand = [&](const char* name, const std::vector<int64_t>& fallback) {
      auto index = schema.argumentIndexWithName(name);
      if (!index || full[*index].contains_node() || !full[*index].is_sequence()) {
        return std::vector<int64_t>{};
      }
      std::vector<int64_t> v = full[*index].to_int_list();
      if (v.empty()) v = fallback;
      if (v.size() == 1) v.assign(static_cast<size_t>(dims), v[0]);
      full[*index] = Argument(v);
      return v;
    };
    const std::vector<int64_t> kernel = expand("kernel_size", {});
    expand("stride", kernel);
    expand("padding", {});
    expand("dilation", {});
    set_full_arguments(*n, std::move(full));
  }

  void visit_observer(Node* obs) {
    Node* value = obs->args()[0].to_node();
    const ObserverInfo info = observer_info(prepared_, *obs);
    if (info.spec.per_channel() || weight_observer(obs)) {
      // A weight's: its unit reads the weight itself.
      fp_[obs] = fp(value);
      return;
    }
    const QParams q = calculate_qparams(info.spec, info.state);
    if (reference_) {
      Node* quant = graph_->call_function(
          fx::op("aten::quantize_per_tensor"),
          {fp(value), q.scale_value(), q.zero_point_value(), info.spec.dtype});
      set_quantized_meta(quant, value, info.spec.dtype);
      Node* deq = graph_->call_function(fx::op("aten::dequantize.self"), {quant});
      if (const TensorMeta* m = value->tensor_meta()) deq->meta().set(kTensorMeta, *m);
      fp_[obs] = deq;
      return;
    }
    qparams_[obs] = {info.spec, q};
    qparams_[value] = {info.spec, q};
    if (auto it = q_.find(value); it != q_.end()) q_[obs] = it->second;
    if (auto it = fp_.find(value); it != fp_.end()) fp_[obs] = it->second;
  }

  static bool weight_observer(const Node* obs) { return role(*obs) == "weight"; }

  // The output observer's qparams.
  const std::pair<ObserverSpec, QParams>& output_qparams(const Unit& u) {
    Node* obs = u.output()->only_user();
    auto it = output_qparams_.find(obs);
    if (it == output_qparams_.end()) {
      const ObserverInfo info = observer_info(prepared_, *obs);
      it = output_qparams_
               .emplace(obs, std::make_pair(info.spec,
                                            calculate_qparams(info.spec, info.state)))
               .first;
    }
    return it->second;
  }

  // The weight observer (the weight is quantized by the init step).
  Node* observer_of_weight(const Unit& u) {
    Node* n = u.weight()->use;
    while (n != nullptr) {
      if (is_observer(*n)) return n;
      if (n->is_call_to({"aten::t"}) && n->args()[0].is_node()) {
        n = n->args()[0].to_node();
        continue;
      }
      break;
    }
    throw QuantizationError(absl::StrCat(
        "convert_fx: the weight of ", u.root()->format_node(),
        " has no observer: give convert_fx what prepare_fx made"));
  }

  ObserverSpec weight_spec(const Unit& u) {
    return observer_info(prepared_, *observer_of_weight(u)).spec;
  }

  // fx_quant::quantize_weight of `w` (in the init graph) for unit `u`.
  Node* quantize_weight(const Unit& u, Node* w, int64_t ch_axis) {
    Node* obs = observer_of_weight(u);
    const ObserverSpec spec = observer_info(prepared_, *obs).spec;
    Kwargs kwargs;
    for (auto& [key, value] : observer_kwargs(spec)) {
      if (key == "averaging_constant") continue;
      kwargs.emplace_back(key, key == "ch_axis" ? Argument(ch_axis) : value);
    }
    if (weight_states_) {
      kwargs.emplace_back("state", init_graph().get_attr(
                                       obs->args().at(1).to_node()->target().str()));
    }
    return init_graph().call_function(fx::op("fx_quant::quantize_weight"), {w},
                                      std::move(kwargs));
  }

  // The packed weight of a conv or linear unit: get_attr _packed.<name>,
  // made by the init step.
  Node* packed_weight(const Unit& u) {
    Graph& g = init_graph();
    Node* w = g.get_attr(u.weight()->attr->target().str());
    if (u.weight()->transposed) w = g.call_function(fx::op("aten::t"), {w});
    // After the t() above, output channels are on axis 0.
    Node* wq = quantize_weight(u, w, /*ch_axis=*/0);
    Argument bias;
    if (u.bias() != nullptr) bias = g.get_attr(u.bias()->target().str());
    Node* pack;
    if (u.family == Family::kConv) {
      const Convolution& c = *u.match.convolution;
      const char* op = c.spatial == 1   ? "fx_quant::conv1d_prepack"
                       : c.spatial == 2 ? "fx_quant::conv2d_prepack"
                                        : "fx_quant::conv3d_prepack";
      pack = g.call_function(fx::op(op),
                             {wq, bias, c.stride, c.padding, c.dilation,
                              c.groups, engine_});
    } else {
      pack = g.call_function(fx::op("fx_quant::linear_prepack"),
                             {wq, bias, engine_});
    }
    const std::string path = absl::StrCat("_packed.", u.root()->name());
    pack_outputs_.push_back(pack);
    pack_paths_.push_back(path);
    return graph_->get_attr(path);
  }

  // QNNPACK's add takes each input's scale over the output's in
  // [2^-14, 2^8) and refuses others with an internal assert when it runs:
  // an input whose activations are near zero (outputs ~1e-9) beside one
  // that is not. Said at convert time, with the node.
  void check_qnnpack_add(const Unit& u, double output_scale) {
    for (Node* a : u.activations) {
      auto p = qparams_.find(a);
      if (p == qparams_.end()) continue;
      const double input_scale = p->second.second.scale_value();
      const double ratio = input_scale / output_scale;
      if (std::isnormal(input_scale) && std::isnormal(output_scale) &&
          ratio >= std::ldexp(1.0, -14) && ratio < 256.0) {
        continue;
      }
      throw QuantizationError(absl::StrCat(
          "convert_fx: ", u.root()->format_node(), " becomes ",
          quantized_op(u), " on the qnnpack engine, whose add needs each "
          "input's scale within 2^-14 to 2^8 times the output's; input %",
          a->name(), " has scale ", input_scale, " and the output ",
          output_scale, " (ratio ", ratio, "): its calibrated activations "
          "are near zero beside the other input's. Calibrate with "
          "representative data, or quantize for the onednn engine, whose "
          "add has no such limit"));
    }
  }

  bool lower_unit(const Unit& u) {
    std::vector<Node*> inputs;
    for (Node* a : u.activations) {
      Node* q = quantized(a);
      if (q == nullptr) return false;
      inputs.push_back(q);
    }
    const auto& [spec, q] = output_qparams(u);
    const double scale = q.scale_value();
    const int64_t zero_point = q.zero_point_value();
    if (engine_ == "qnnpack" && u.family == Family::kAdd) {
      check_qnnpack_add(u, scale);
    }
    std::vector<Argument> args;
    switch (u.family) {
      case Family::kConv:
      case Family::kLinear:
        args = {inputs[0], packed_weight(u), scale, zero_point};
        break;
      case Family::kAdd:
      case Family::kMul:
        args = {inputs[0], inputs[1], scale, zero_point};
        break;
      case Family::kCat:
        args = {Argument(inputs), u.match.cat_dim, scale, zero_point};
        break;
      case Family::kHardswish:
        args = {inputs[0], scale, zero_point};
        break;
      case Family::kBatchNorm: {
        const BatchNorm& bn = *u.match.batch_norm;
        args = {inputs[0],          fp(bn.weight),
                fp(bn.bias),        fp(bn.running_mean),
                fp(bn.running_var), CallArguments(*bn.node)["eps"],
                scale,              zero_point};
        break;
      }
    }
    std::string op = quantized_op(u);
    if (u.family == Family::kBatchNorm) {
      const size_t rank = u.activations[0]->tensor_meta()->sizes.size();
      op = absl::StrCat("quantized::batch_norm", rank - 2, "d",
                        u.relu() != nullptr ? "_relu" : "");
    }
    Node* node = graph_->create_node(Opcode::kCallFunction, fx::op(op),
                                     std::move(args), {}, u.root()->name());
    set_quantized_meta(node, u.output(), spec.dtype);
    if (const std::string* path = u.root()->meta().get(kModulePath)) {
      node->meta().set(kModulePath, *path);
    }
    q_[u.root()] = node;
    if (u.relu() != nullptr) q_[u.relu()] = node;
    Node* obs = u.output()->only_user();
    q_[obs] = node;
    qparams_[obs] = {spec, q};
    return true;
  }

  // Reference: the float operator on fake-quantized weights.
  bool lower_reference(const Unit& u) {
    if (u.weight() == nullptr) return false;
    const Weight& weight = *u.weight();
    Graph& g = init_graph();
    const ObserverSpec spec = weight_spec(u);
    Node* w = g.get_attr(weight.attr->target().str());
    Node* wq = quantize_weight(u, w, spec.ch_axis);
    Node* dq = g.call_function(fx::op("aten::dequantize.self"), {wq});
    const std::string path =
        absl::StrCat("_reference.", u.root()->name(), "_weight");
    pack_outputs_.push_back(dq);
    pack_paths_.push_back(path);
    Node* fake = graph_->get_attr(path);
    if (const TensorMeta* m = weight.attr->tensor_meta()) {
      fake->meta().set(kTensorMeta, *m);
    }
    // The root, reading the fake-quantized weight where it read the
    // observed one (through aten::t for addmm's t(W)).
    Node* replacement = fake;
    if (weight.t != nullptr) {
      replacement = graph_->call_function(fx::op("aten::t"), {fake});
    }
    Node* c = graph_->node_copy(*u.root(), [&](Node* in) -> Argument {
      return in == weight.use ? replacement : fp(in);
    });
    fp_[u.root()] = c;
    return true;
  }

  const GraphModuleImpl& prepared_;
  const bool reference_;
  const std::string engine_;
  const bool weight_states_;
  std::unique_ptr<Graph> graph_;
  std::unique_ptr<Graph> init_graph_;
  std::vector<Node*> pack_outputs_;
  std::vector<std::string> pack_paths_;
  absl::flat_hash_map<const Node*, Unit> units_;
  absl::flat_hash_map<const Node*, Node*> fp_, q_;
  absl::flat_hash_map<const Node*, std::pair<ObserverSpec, QParams>> qparams_,
      output_qparams_;
};

std::string current_engine() {
  switch (at::globalContext().qEngine()) {
    case at::QEngine::QNNPACK: return "qnnpack";
    case at::QEngine::ONEDNN: return "onednn";
    default: return "onednn";
  }
}

}  // namespace

namespace quantization_internal {

GraphModule inference_copy(const GraphModule& module,
                           const std::vector<c10::IValue>& example_inputs,
                           const char* what, bool fold_linear) {
  GraphModule copy(module->copy());
  fuse_conv_bn(*copy, fold_linear);
  remove_dropout(*copy);
  copy->graph().eliminate_dead_code();
  copy->recompile();
  if (const Node* n = without_tensor_meta(copy->graph())) {
    if (example_inputs.empty()) {
      throw QuantizationError(absl::StrCat(
          what, ": the graph has no tensor metadata (it was not traced; %",
          n->name(), " has none): give example inputs, or run fx::ShapeProp "
          "first"));
    }
    ShapeProp(copy).propagate(example_inputs);
  }
  return copy;
}

Node* insert_observer(GraphModuleImpl& module, Node* value,
                      const ObserverSpec& spec, const at::Tensor& state,
                      const std::string& path, const std::string& role) {
  Graph& graph = module.graph();
  module.register_tensor_attribute(path, state, /*is_parameter=*/false);
  auto guard = graph.inserting_after(value);
  Node* state_node = graph.get_attr(path);
  Node* obs;
  {
    auto after_state = graph.inserting_after(state_node);
    Kwargs kwargs = observer_kwargs(spec);
    if (role != "output") kwargs.emplace_back("role", role);
    obs = graph.call_function(fx::op("fx_quant::observe"), {value, state_node},
                              std::move(kwargs));
  }
  if (const TensorMeta* m = value->tensor_meta()) obs->meta().set(kTensorMeta, *m);
  if (const std::string* path_meta = value->meta().get(kModulePath)) {
    obs->meta().set(kModulePath, *path_meta);
  }
  return obs;
}

std::vector<PlannedObserver> plan_observers(GraphModuleImpl& module,
                                            const QConfigMapping& mapping) {
  return Preparer(module, mapping).plan();
}

}  // namespace quantization_internal

GraphModule prepare_fx(const GraphModule& module, const QConfigMapping& mapping,
                       const std::vector<c10::IValue>& example_inputs) {
  refuse_control_flow(module->graph(), "prepare_fx");
  if (quantization_internal::is_prepared(*module)) {
    throw QuantizationError(
        "prepare_fx: the module has observers or fake quantizers already (it "
        "was prepared): calibrate or train it and give it to convert_fx");
  }
  check_not_training(*module, "prepare_fx");
  GraphModule prepared =
      quantization_internal::inference_copy(module, example_inputs, "prepare_fx");
  Preparer(*prepared, mapping).run();
  prepared->graph().lint();
  prepared->recompile();
  return prepared;
}

namespace {

// convert_fx (reference false) and convert_to_reference_fx; `what` names
// the caller in errors.
GraphModule convert(const GraphModule& prepared, bool reference, const char* what) {
  quantization::register_operators();
  // A QAT module converts as the prepared module it stands for, with the
  // weights quantized by the qparams training simulated.
  const bool qat = quantization_internal::is_qat_module(*prepared);
  const GraphModule module =
      qat ? quantization_internal::qat_as_prepared(*prepared) : prepared;
  if (!qat) check_not_training(*module, what);
  check_calibrated(*module, what);
  return Converter(*module, reference, current_engine(), /*weight_states=*/qat).run();
}

}  // namespace

GraphModule convert_fx(const GraphModule& prepared) {
  return convert(prepared, /*reference=*/false, "convert_fx");
}

GraphModule convert_to_reference_fx(const GraphModule& prepared) {
  return convert(prepared, /*reference=*/true, "convert_to_reference_fx");
}

std::string QuantizedSummary::to_string() const {
  return absl::StrCat(quantized_ops, " quantized operators, ", quantize,
                      " quantize, ", dequantize, " dequantize, ", float_ops,
                      " float operators");
}

QuantizedSummary summarize_quantized(const GraphModule& module) {
  QuantizedSummary s;
  for (const Node* n : module->graph().nodes()) {
    if (n->op() != Opcode::kCallFunction || !n->target().is_operator()) continue;
    const std::string name = n->target().to_string();
    if (name.rfind("quantized::", 0) == 0 || name.rfind("aten::quantized_", 0) == 0) {
      ++s.quantized_ops;
    } else if (name == "aten::quantize_per_tensor") {
      ++s.quantize;
    } else if (name == "aten::dequantize.self") {
      ++s.dequantize;
    } else if (const TensorMeta* m = n->tensor_meta();
               m != nullptr && !c10::isQIntType(m->dtype)) {
      ++s.float_ops;
    }
  }
  return s;
}

}  // namespace fx

namespace fx {
namespace {

// --- quantize_dynamic_fx -------------------------------------------------------
class DynamicQuantizer {
 public:
  DynamicQuantizer(GraphModuleImpl& module, const DynamicOptions& options)
      : module_(module), graph_(module.graph()), options_(options) {}

  void run() {
    for (Node* n : graph_.nodes()) {
      if (options_.linear) {
        if (auto u = match_unit(module_, n, dynamic_fusions())) {
          lower_linear(*u);
          continue;
        }
      }
      if (options_.lstm && n->is_call_to({"aten::lstm.input"})) lower_lstm(n);
    }
    if (!outputs_.empty()) {
      std::vector<Argument> outs(outputs_.begin(), outputs_.end());
      init_.output(Argument::tuple(std::move(outs)));
      module_.add_init_step({std::shared_ptr<const Graph>(std::move(init_owner_)),
                             paths_});
    }
    graph_.eliminate_dead_code();
    module_.recompile();
  }

 private:
  Node* quantized_weight(Node* w) {
    ObserverSpec spec = default_weight_observer();
    return init_.call_function(fx::op("fx_quant::quantize_weight"), {w},
                               observer_kwargs(spec));
  }

  Node* add_output(Node* value, const std::string& name) {
    // Unique in the module: a body of control flow may hold a node of the
    // same name as the graph around it.
    std::string path = absl::StrCat("_packed.", name);
    for (int i = 1; module_.has_object_attribute(path) ||
                    module_.has_tensor_attribute(path) ||
                    std::find(paths_.begin(), paths_.end(), path) != paths_.end();
         ++i) {
      path = absl::StrCat("_packed.", name, "_", i);
    }
    outputs_.push_back(value);
    paths_.push_back(path);
    return graph_.get_attr(path);
  }

  void lower_linear(const Unit& u) {
    Node* w = init_.get_attr(u.weight()->attr->target().str());
    if (u.weight()->transposed) w = init_.call_function(fx::op("aten::t"), {w});
    Argument bias;
    if (u.bias() != nullptr) bias = init_.get_attr(u.bias()->target().str());
    Node* pack = init_.call_function(fx::op("fx_quant::linear_prepack"),
                                     {quantized_weight(w), bias, options_.engine});
    Node* out = u.output();
    auto guard = graph_.inserting_before(out);
    Node* packed = add_output(pack, u.root()->name());
    std::vector<Argument> args = {u.activations[0], packed};
    // On a CPU without VNNI, onednn's int8 kernels saturate 16-bit sums at
    // full-range activations: quantize them to 7 bits (reduce_range), as
    // torch.ao's x86 and fbgemm dynamic qconfigs do.
    if (options_.engine == "onednn" && !cpu_has_vnni()) args.push_back(true);
    Node* q = graph_.create_node(
        Opcode::kCallFunction,
        fx::op(u.relu() != nullptr ? "quantized::linear_relu_dynamic"
                                 : "quantized::linear_dynamic"),
        std::move(args), {}, u.root()->name() + "_dynamic");
    if (const TensorMeta* m = out->tensor_meta()) q->meta().set(kTensorMeta, *m);
    q->meta().set(kQuantizedFrom, out->name());
    out->replace_all_uses_with(q);
  }

  void lower_lstm(Node* n) {
    PatternOptions untyped;
    untyped.typed = false;
    const std::optional<Recurrent> r = match_recurrent(module_, *n, untyped);
    if (!r || r->kind != Recurrent::Kind::kLstm || !r->has_biases || r->train) {
      return;
    }
    const std::vector<Node*>& p = r->params;
    for (const Node* a : p) {
      if (module_.fetch_attr(a->target().str()).scalar_type() != at::kFloat) {
        return;
      }
    }
    auto attr = [&](size_t i) {
      return init_.get_attr(p[i]->target().str());
    };
    std::vector<Node*> cells;
    auto guard = graph_.inserting_before(n);
    for (size_t i = 0; i < p.size(); i += 4) {
      Node* b_ih = attr(i + 2);
      Node* b_hh = attr(i + 3);
      Node* pack_ih = init_.call_function(
          fx::op("fx_quant::linear_prepack"),
          {quantized_weight(attr(i)), b_ih, options_.engine});
      Node* pack_hh = init_.call_function(
          fx::op("fx_quant::linear_prepack"),
          {quantized_weight(attr(i + 1)), b_hh, options_.engine});
      Node* cell = init_.call_function(
          fx::op("quantized::make_quantized_cell_params_dynamic"),
          {pack_ih, pack_hh, b_ih, b_hh});
      cells.push_back(add_output(cell, absl::StrCat(n->name(), "_cell", i / 4)));
    }
    std::vector<Argument> args = {r->input,      r->hx,
                                  Argument(cells), r->has_biases,
                                  r->layers,     r->dropout,
                                  r->train,      r->bidirectional,
                                  r->batch_first};
    Node* q = graph_.create_node(
        Opcode::kCallFunction, fx::op("aten::quantized_lstm.input"),
        std::move(args),
        {{"dtype", c10::ScalarType::QInt8}, {"use_dynamic", true}},
        n->name() + "_dynamic");
    if (const auto* list = n->meta().get(kTensorMetaList)) {
      q->meta().set(kTensorMetaList, *list);
    }
    q->meta().set(kQuantizedFrom, n->name());
    n->replace_all_uses_with(q);
  }

  GraphModuleImpl& module_;
  Graph& graph_;
  const DynamicOptions& options_;
  std::unique_ptr<Graph> init_owner_ = std::make_unique<Graph>();
  Graph& init_ = *init_owner_;
  std::vector<Node*> outputs_;
  std::vector<std::string> paths_;
};

}  // namespace

GraphModule quantize_dynamic_fx(const GraphModule& module,
                                const DynamicOptions& options) {
  check_not_training(*module, "quantize_dynamic_fx");
  check_quantized_engine(options.engine);
  quantization::register_operators();
  GraphModule result(module->copy());
  auto quantize = [&] {
    if (options.decompose_fused_attention) {
      decompose(*result, fused_attention_decompositions());
    }
    DynamicQuantizer(*result, options).run();
  };
  quantize();
  // The same in each body of control flow: its weights are packed by init
  // steps of the module, as the graph's are.
  result->for_each_body(quantize);
  return result;
}

}  // namespace fx
