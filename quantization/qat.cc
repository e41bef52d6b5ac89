#include "quantization/qat.h"

#include <ATen/ATen.h>
#include <torch/optim/adam.h>

#include <chrono>

#include <map>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "fx/ir/function.h"
#include "fx/ir/meta.h"
#include "fx/ir/operator_schemas.h"
#include "passes/operator_families.h"
#include "passes/patterns.h"
#include "passes/remove_dropout.h"
#include "quantization/internal/plan.h"
#include "quantization/observer.h"
#include "quantization/ops.h"

namespace fx {

using quantization_internal::PlannedObserver;

namespace {

bool is_fake_quantize(const Node& n) {
  return n.is_call_to({"fx_quant::fake_quantize"});
}

// The state buffers, in the operator's argument order after `self`.
constexpr const char* kStateNames[] = {"observer_enabled", "fake_quant_enabled",
                                       "min_val", "max_val", "scale",
                                       "zero_point"};

bool literal_true(const std::optional<Argument>& a) {
  return a && a->is_bool() && a->to_bool();
}

// A graph traced in training mode, switched to inference: batch norms use
// their running statistics, dropouts pass values on, and the batch norms'
// counters (num_batches_tracked += 1) are gone.
void set_inference_mode(Graph& graph) {
  std::vector<Node*> counters;
  for (Node* n : graph.nodes()) {
    if (n->is_call_to({"aten::batch_norm"}) &&
        literal_true(operator_argument(*n, "training"))) {
      // Without running statistics (track_running_stats false), a batch
      // norm normalizes by the batch in inference too.
      const auto mean = operator_argument(*n, "running_mean");
      const auto var = operator_argument(*n, "running_var");
      if (!mean || !var || !mean->is_node() || !var->is_node()) continue;
      set_operator_argument(*n, "training", false);
    } else if (is_dropout(*n) && literal_true(operator_argument(*n, "train"))) {
      set_operator_argument(*n, "train", false);
    } else if (n->is_call_to({"aten::add_.Scalar", "aten::add_.Tensor"}) &&
               n->users().empty() && n->args()[0].is_node() &&
               n->args()[0].to_node()->op() == Opcode::kGetAttr &&
               absl::EndsWith(n->args()[0].to_node()->target().str(),
                              "num_batches_tracked")) {
      counters.push_back(n);
    }
  }
  for (Node* n : counters) graph.erase_node(n);
}

// Whether `n` is `scope` or inside it: its name, or its module path or one
// of its parents (an empty scope holds everything).
bool in_scope(const Node& n, const std::string& scope) {
  if (scope.empty() || n.name() == scope) return true;
  const std::string* path = n.meta().get(kModulePath);
  return path != nullptr &&
         (*path == scope || absl::StartsWith(*path, absl::StrCat(scope, ".")));
}

// The fixed_qparams state of a fake quantizer: the scale and zero point it
// computes from its range (those it fake-quantized with, while it did).
// aten's fused fake quantizer makes a symmetric scheme's channel whose range
// does not straddle zero affine (a zero point off 0), which int8 kernels of
// symmetric weights refuse: such channels take torch.ao's observer qparams
// (what its convert uses everywhere).
at::Tensor simulated_qparams(const ObserverSpec& fixed, const at::Tensor& min_val,
                             const at::Tensor& max_val) {
  // The fake quantizer computes its scale and zero point from the range
  // only while it fake-quantizes: run it once, fake quantization on and
  // the observer off, on copies of its state, as its next call would.
  const int64_t channels = fixed.per_channel() ? min_val.numel() : 1;
  at::Tensor scale = at::ones({channels});
  at::Tensor zero_point = at::zeros({channels}, at::kInt);
  at::Tensor low = min_val.clone(), high = max_val.clone();
  {
    at::NoGradGuard no_grad;
    const auto [quant_min, quant_max] = fixed.range();
    at::fused_moving_avg_obs_fake_quant(
        at::zeros({channels, 1}), at::zeros({1}, at::kLong), at::ones({1}, at::kLong),
        low, high, scale, zero_point, fixed.averaging_constant,
        quant_min, quant_max, /*ch_axis=*/0, fixed.per_channel(), fixed.symmetric());
  }
  at::Tensor s = scale.to(at::kDouble).reshape({-1});
  at::Tensor z = zero_point.to(at::kLong).reshape({-1});
  if (fixed.symmetric()) {
    ObserverSpec observer = fixed;
    observer.kind = fixed.per_channel() ? ObserverKind::kMovingAveragePerChannelMinMax
                                        : ObserverKind::kMovingAverageMinMax;
    const QParams q = calculate_qparams(
        observer, at::stack({min_val.reshape({-1}), max_val.reshape({-1})})
                      .reshape(fixed.per_channel() ? std::vector<int64_t>{2, -1}
                                                   : std::vector<int64_t>{2})
                      .contiguous());
    const at::Tensor symmetric_zero = q.zero_point.reshape({-1});
    const at::Tensor affine = z != symmetric_zero;
    s = at::where(affine, q.scale.reshape({-1}), s);
    z = at::where(affine, symmetric_zero, z);
  }
  return fixed_qparams_state(s, z, fixed.per_channel());
}

// --- The conv/batch-norm block -------------------------------------------------
// What prepare_qat_fx makes of conv -> batch_norm (training): see qat.h.
struct Block {
  Node* conv = nullptr;
  Node* weight_fake_quant = nullptr;  // fake_quantize(%scaled)
  Node* scaled = nullptr;             // mul(%weight, reshape(%factor))
  Node* weight = nullptr;             // the get_attr
  Node* unscaled = nullptr;           // div(%conv, reshape(%factor))
  Node* bias = nullptr;               // the conv's bias get_attr, or nullptr
  Node* batch_norm = nullptr;
  Node* bn_input = nullptr;           // unscaled, or the add of the bias
};

std::optional<Block> match_block(Node& conv) {
  if (!in_family(conv, OperatorFamily::kConvolution) ||
      conv.args().size() < 2 || !conv.args()[1].is_node()) {
    return std::nullopt;
  }
  Block b;
  b.conv = &conv;
  Node* fq = conv.args()[1].to_node();
  if (!is_fake_quantize(*fq) || !fq->args()[0].is_node()) return std::nullopt;
  b.weight_fake_quant = fq;
  b.scaled = fq->args()[0].to_node();
  if (!b.scaled->is_call_to({"aten::mul.Tensor"}) || !b.scaled->args()[0].is_node() ||
      b.scaled->args()[0].to_node()->op() != Opcode::kGetAttr) {
    return std::nullopt;
  }
  b.weight = b.scaled->args()[0].to_node();
  Node* div = conv.only_user();
  if (div == nullptr || !div->is_call_to({"aten::div.Tensor"}) ||
      !div->args()[0].is_node() || div->args()[0].to_node() != &conv) {
    return std::nullopt;
  }
  b.unscaled = b.bn_input = div;
  Node* next = div->only_user();
  if (next != nullptr && next->is_call_to({"aten::add.Tensor"}) &&
      next->args()[0].is_node() && next->args()[0].to_node() == div) {
    Node* reshape = next->args()[1].is_node() ? next->args()[1].to_node() : nullptr;
    if (reshape == nullptr || !reshape->is_call_to({"aten::reshape"}) ||
        !reshape->args()[0].is_node()) {
      return std::nullopt;
    }
    b.bias = reshape->args()[0].to_node();
    b.bn_input = next;
    next = next->only_user();
  }
  if (next == nullptr || !next->is_call_to({"aten::batch_norm"})) return std::nullopt;
  b.batch_norm = next;
  return b;
}

// The weight `root`, a convolution or linear layer, reads.
std::optional<Weight> weight_of(const GraphModuleImpl& module, Node& root) {
  PatternOptions untyped;
  untyped.typed = false;
  if (auto c = match_convolution(module, root, untyped)) return c->weight;
  if (auto l = match_linear(module, root, untyped)) return l->weight;
  return std::nullopt;
}

std::vector<Block> blocks(Graph& graph) {
  std::vector<Block> found;
  for (Node* n : graph.nodes()) {
    if (auto b = match_block(*n)) found.push_back(*b);
  }
  return found;
}

// --- prepare_qat_fx ----------------------------------------------------------------
class QatPreparer {
 public:
  explicit QatPreparer(GraphModuleImpl& module)
      : module_(module), graph_(module.graph()) {
    for (Node* n : graph_.nodes()) by_name_[n->name()] = n;
  }

  Node* node(const std::string& name) const {
    auto it = by_name_.find(name);
    if (it == by_name_.end()) {
      throw QuantizationError(absl::StrCat(
          "prepare_qat_fx: %", name, " of the inference graph is not in the "
          "training graph (report this with the model)"));
    }
    return it->second;
  }

  // A fake quantizer of `value` for `spec`, inserted after `value`; its
  // state registered under `base`.
  Node* add_fake_quantize(Node* value, const ObserverSpec& spec,
                          const std::string& base, const std::string& role,
                          at::IntArrayRef sizes, const Node* path_from) {
    const int64_t channels = spec.per_channel() ? sizes.at(spec.ch_axis) : 0;
    const auto [quant_min, quant_max] = spec.range();
    auto ranged = [&](float v, at::ScalarType dtype) {
      return spec.per_channel() ? at::full({channels}, v, at::dtype(dtype))
                                : at::full({}, v, at::dtype(dtype));
    };
    const at::Tensor state[] = {
        at::ones({1}, at::kLong),
        at::ones({1}, at::kLong),
        ranged(std::numeric_limits<float>::infinity(), at::kFloat),
        ranged(-std::numeric_limits<float>::infinity(), at::kFloat),
        spec.per_channel() ? at::ones({channels}) : at::ones({1}),
        spec.per_channel() ? at::zeros({channels}, at::kInt)
                           : at::zeros({1}, at::kInt)};
    std::vector<Argument> args = {value};
    for (int i = 0; i < 6; ++i) {
      module_.register_tensor_attribute(absl::StrCat(base, ".", kStateNames[i]),
                                        state[i], /*is_parameter=*/false);
    }
    Node* last = value;
    for (int i = 0; i < 6; ++i) {
      auto guard = graph_.inserting_after(last);
      last = graph_.get_attr(absl::StrCat(base, ".", kStateNames[i]));
      args.emplace_back(last);
    }
    args.insert(args.end(), {Argument(spec.dtype), Argument(spec.qscheme_name()),
                             Argument(quant_min), Argument(quant_max),
                             Argument(spec.averaging_constant),
                             Argument(spec.ch_axis)});
    Kwargs kwargs;
    if (role != "output") kwargs.emplace_back("role", role);
    Node* fq;
    {
      auto guard = graph_.inserting_after(last);
      fq = graph_.call_function(fx::op("fx_quant::fake_quantize"), std::move(args),
                                std::move(kwargs));
    }
    if (const TensorMeta* m = value->tensor_meta()) fq->meta().set(kTensorMeta, *m);
    if (const std::string* path = path_from->meta().get(kModulePath)) {
      fq->meta().set(kModulePath, *path);
    }
    return fq;
  }

  // The conv/batch-norm block for `conv` -> `bn` (see qat.h), its scaled
  // weight fake-quantized by `spec`.
  void make_block(Node* conv, Node* bn, const ObserverSpec& spec) {
    const CallArguments conv_args(*conv);
    const CallArguments bn_args(*bn);
    Node* weight = conv_args["weight"].to_node();
    const Argument bias = conv_args["bias"];
    const at::Tensor w = module_.fetch_attr(weight->target().str());
    const int64_t rank = w.dim();
    std::vector<int64_t> weight_shape(rank, 1), bias_shape(rank, 1);
    weight_shape[0] = -1;
    bias_shape[1] = -1;
    const std::string* path = conv->meta().get(kModulePath);
    auto tag = [&](Node* n) {
      if (path != nullptr) n->meta().set(kModulePath, *path);
      return n;
    };
    Node* scaled;
    Node* factor;
    {
      auto guard = graph_.inserting_before(conv);
      // The batch norm's attributes, read again before the convolution.
      Node* running_var =
          graph_.get_attr(bn_args["running_var"].to_node()->target().str());
      Node* var_eps = tag(graph_.call_function(fx::op("aten::add.Scalar"),
                                               {running_var, bn_args["eps"]}));
      Node* deviation = tag(graph_.call_function(fx::op("aten::sqrt"), {var_eps}));
      const Argument& gamma = bn_args["weight"];
      factor = tag(gamma.is_node()
                       ? graph_.call_function(
                             fx::op("aten::div.Tensor"),
                             {graph_.get_attr(gamma.to_node()->target().str()),
                              deviation})
                       : graph_.call_function(fx::op("aten::reciprocal"),
                                              {deviation}));
      Node* factor_w = tag(graph_.call_function(
          fx::op("aten::reshape"), {factor, Argument(weight_shape)}));
      scaled = tag(graph_.call_function(fx::op("aten::mul.Tensor"),
                                        {weight, factor_w}));
    }
    Node* fq = add_fake_quantize(scaled, spec, absl::StrCat("weight_fake_quant_", count_++),
                                 "weight", w.sizes(), conv);
    conv->replace_input_with(weight, fq);
    set_operator_argument(*conv, "bias", Argument());
    Node* input = nullptr;
    {
      auto guard = graph_.inserting_before(bn);
      Node* factor_b = tag(graph_.call_function(
          fx::op("aten::reshape"), {factor, Argument(bias_shape)}));
      input = tag(graph_.call_function(fx::op("aten::div.Tensor"), {conv, factor_b}));
      if (bias.is_node()) {
        Node* bias_b = tag(graph_.call_function(fx::op("aten::reshape"),
                                                {bias, Argument(bias_shape)}));
        input = tag(graph_.call_function(fx::op("aten::add.Tensor"), {input, bias_b}));
      }
    }
    if (const TensorMeta* m = conv->tensor_meta()) input->meta().set(kTensorMeta, *m);
    bn->replace_input_with(conv, input);
  }

  // `bn_of_conv`: the convolutions the inference graph folded, with their
  // batch norms, whose values they stand for there.
  void run(const std::vector<PlannedObserver>& planned,
           const absl::flat_hash_map<std::string, std::string>& bn_of_conv) {
    absl::flat_hash_map<const Node*, Node*> fake_quantized;
    auto name_in_training = [&](const Node* n) {
      auto it = bn_of_conv.find(n->name());
      return it == bn_of_conv.end() ? n->name() : it->second;
    };
    for (const PlannedObserver& p : planned) {
      check_spec(p);
      if (p.role == "weight") {
        Node* root = node(p.root->name());
        if (auto bn = bn_of_conv.find(root->name()); bn != bn_of_conv.end()) {
          make_block(root, node(bn->second), p.spec);
          continue;
        }
        // The weight as the training graph's operator reads it.
        const std::optional<Weight> weight = weight_of(module_, *root);
        if (!weight) {
          throw QuantizationError(absl::StrCat(
              "prepare_qat_fx: ", root->format_node(),
              " reads its weight differently in training (report this with the "
              "model)"));
        }
        const at::Tensor w = module_.fetch_attr(weight->attr->target().str());
        Node* fq = add_fake_quantize(weight->attr, p.spec,
                                     absl::StrCat("weight_fake_quant_", count_++),
                                     "weight", w.sizes(), root);
        quantization_internal::weight_reader(*weight, root)->replace_input_with(
            weight->attr, fq);
        continue;
      }
      Node* value = node(name_in_training(p.value));
      if (fake_quantized.contains(value)) continue;
      const TensorMeta* m = p.value->tensor_meta();
      Node* fq = add_fake_quantize(
          value, p.spec, absl::StrCat("activation_post_process_", count_++),
          p.role, m->sizes, value);
      value->replace_all_uses_with(fq, [fq](Node* user) { return user != fq; });
      fake_quantized[value] = fq;
    }
  }

 private:
  static void check_spec(const PlannedObserver& p) {
    const bool moving = p.spec.kind == ObserverKind::kMovingAverageMinMax ||
                        p.spec.kind == ObserverKind::kMovingAveragePerChannelMinMax;
    if (!moving) {
      throw QuantizationError(absl::StrCat(
          "prepare_qat_fx: the ", p.role, " of %",
          (p.role == "weight" ? p.root : p.value)->name(), " has a ",
          p.spec.kind_name(), " observer in its QConfig; quantization-aware "
          "training fake-quantizes with moving averages (torch.ao's "
          "FusedMovingAvgObsFakeQuantize): use get_default_qat_qconfig_mapping, "
          "or moving_average_min_max_observer / "
          "moving_average_per_channel_min_max_observer"));
    }
  }

  GraphModuleImpl& module_;
  Graph& graph_;
  absl::flat_hash_map<std::string, Node*> by_name_;
  int count_ = 0;
};

// conv -> batch_norm (training) pairs of a graph traced in training mode,
// by name: the convolution's only user is the batch norm.
absl::flat_hash_map<std::string, std::string> conv_bn_pairs(
    const GraphModuleImpl& module) {
  absl::flat_hash_map<std::string, std::string> pairs;
  for (const bool training : {true, false}) {
    PatternOptions options;
    options.typed = false;
    options.batch_norm_training = training;
    for (Node* n : module.graph().nodes()) {
      auto m = match_fusion(module, *n, {Fusion::kConvBatchNorm}, options);
      if (!m || m->convolution->transposed) continue;
      if (m->convolution->bias != nullptr &&
          m->convolution->bias->op() != Opcode::kGetAttr) {
        continue;
      }
      pairs[n->name()] = m->output()->name();
    }
  }
  return pairs;
}

// A module running `graph` on `module`'s tensors (copies of them with
// `own`: training changes them), leaf modules and init steps, traced in
// `traced_training`.
GraphModule rebuilt(const GraphModuleImpl& module, const Graph& graph,
                    std::optional<bool> traced_training, bool own) {
  absl::flat_hash_set<std::string> made;  // what the init steps make again
  for (const auto& step : module.init_steps()) {
    made.insert(step.outputs.begin(), step.outputs.end());
  }
  Attributes attributes;
  attributes.traced_training = traced_training;
  attributes.modules = module.leaf_modules();
  for (const auto& [path, tensor] : module.tensor_attributes()) {
    if (made.contains(path)) continue;
    at::Tensor kept = tensor;
    if (own) {
      kept = tensor.detach().clone();
      kept.set_requires_grad(tensor.requires_grad());
    }
    (module.is_parameter(path) ? attributes.parameters : attributes.buffers)
        .emplace(path, kept);
  }
  return GraphModule(std::make_shared<GraphModuleImpl>(
      graph.clone(), std::move(attributes), module.init_steps()));
}

// --- The controls ---------------------------------------------------------------
int set_flag(GraphModule& module, const std::string& scope, int index, bool on,
             const char* what) {
  int count = 0;
  for (Node* n : module->graph().nodes()) {
    if (!is_fake_quantize(*n)) continue;
    const Node* value = n->args()[0].to_node();
    if (!in_scope(*n, scope) && !in_scope(*value, scope)) continue;
    const std::string& path = n->args()[index].to_node()->target().str();
    module->fetch_attr(path).fill_(on ? 1 : 0);
    ++count;
  }
  if (count == 0) {
    throw QuantizationError(
        scope.empty()
            ? absl::StrCat(what, ": the module has no fake quantizers: give it "
                                 "what prepare_qat_fx made")
            : absl::StrCat(what, ": no fake quantizer in '", scope,
                           "' (a module path, or the name of a node or of "
                           "the value it fake-quantizes)"));
  }
  return count;
}

int set_bn_training(GraphModule& module, const std::string& scope, bool training,
                    const char* what) {
  int count = 0;
  for (const Block& b : blocks(module->graph())) {
    if (!in_scope(*b.batch_norm, scope) && !in_scope(*b.conv, scope)) continue;
    set_operator_argument(*b.batch_norm, "training", training);
    ++count;
  }
  if (count == 0) {
    throw QuantizationError(
        scope.empty()
            ? absl::StrCat(what, ": the module has no convolution/batch-norm "
                                 "blocks (prepare_qat_fx makes them of a "
                                 "convolution followed by a batch norm)")
            : absl::StrCat(what, ": no convolution/batch-norm block in '",
                           scope, "'"));
  }
  module->recompile();
  return count;
}

}  // namespace

GraphModule prepare_qat_fx(const GraphModule& module,
                           const QConfigMapping& mapping,
                           const std::vector<c10::IValue>& example_inputs) {
  if (quantization_internal::is_prepared(*module)) {
    throw QuantizationError(
        "prepare_qat_fx: the module has observers or fake quantizers already "
        "(it was prepared): train or calibrate it and give it to convert_fx");
  }
  quantization::register_operators();
  // The places: prepare_fx's, on the model in inference mode.
  const absl::flat_hash_map<std::string, std::string> pairs = conv_bn_pairs(*module);
  GraphModule inference(module->copy());
  set_inference_mode(inference->graph());
  inference->graph().eliminate_dead_code();
  inference->recompile();
  // A linear layer's batch norm stays its own operation: training
  // simulates only the convolutions' folding.
  GraphModule folded = quantization_internal::inference_copy(
      inference, example_inputs, "prepare_qat_fx", /*fold_linear=*/false);
  const std::vector<PlannedObserver> planned =
      quantization_internal::plan_observers(*folded, mapping);
  // The pairs the inference graph folded: a folded convolution's value is
  // its batch norm's in training, and the block simulates the folding.
  absl::flat_hash_set<std::string> names;
  for (const Node* n : folded->graph().nodes()) names.insert(n->name());
  absl::flat_hash_map<std::string, std::string> bn_of_conv;
  for (const auto& [conv, bn] : pairs) {
    if (!names.contains(bn)) bn_of_conv[conv] = bn;
  }

  GraphModule qat =
      rebuilt(*module, module->graph(), module->traced_training(), /*own=*/true);
  // Metadata the trace lacked (a parsed graph, a list output) that the
  // inference graph got from the example inputs.
  absl::flat_hash_map<std::string, const Node*> inferred;
  for (const Node* n : folded->graph().nodes()) inferred[n->name()] = n;
  for (Node* n : qat->graph().nodes()) {
    auto it = inferred.find(n->name());
    if (it == inferred.end()) continue;
    if (n->tensor_meta() == nullptr) {
      if (const TensorMeta* m = it->second->tensor_meta()) n->meta().set(kTensorMeta, *m);
    }
    if (n->meta().get(kTensorMetaList) == nullptr) {
      if (const auto* list = it->second->meta().get(kTensorMetaList)) {
        n->meta().set(kTensorMetaList, *list);
      }
    }
  }
  QatPreparer(*qat).run(planned, bn_of_conv);
  qat->graph().lint();
  qat->recompile();
  // Traced in eval mode, it trains in eval mode: batch norms frozen, no
  // dropout.
  qat->train(module->traced_training() != std::optional<bool>(false));
  return qat;
}

int enable_observer(GraphModule& module, const std::string& scope) {
  return set_flag(module, scope, 1, true, "enable_observer");
}
int disable_observer(GraphModule& module, const std::string& scope) {
  return set_flag(module, scope, 1, false, "disable_observer");
}
int enable_fake_quant(GraphModule& module, const std::string& scope) {
  return set_flag(module, scope, 2, true, "enable_fake_quant");
}
int disable_fake_quant(GraphModule& module, const std::string& scope) {
  return set_flag(module, scope, 2, false, "disable_fake_quant");
}
int freeze_bn_stats(GraphModule& module, const std::string& scope) {
  return set_bn_training(module, scope, false, "freeze_bn_stats");
}
int update_bn_stats(GraphModule& module, const std::string& scope) {
  if (module->traced_training() == std::optional<bool>(false)) {
    throw QuantizationError(
        "update_bn_stats: the module was traced in eval mode, so its batch "
        "norms have no training behaviour to return to: trace the model in "
        "train() and prepare that to update their statistics");
  }
  return set_bn_training(module, scope, true, "update_bn_stats");
}

namespace {

at::Tensor output_tensor(const c10::IValue& v, const char* whose) {
  if (!v.isTensor()) {
    throw QuantizationError(absl::StrCat(
        "distill_qat: the ", whose, " returns ", v.tagKind(),
        "; distillation compares one output tensor"));
  }
  return v.toTensor();
}

}  // namespace

DistillationReport distill_qat(GraphModule& qat, GraphModule& teacher,
                               const std::vector<std::vector<c10::IValue>>& batches,
                               const DistillationOptions& options) {
  if (batches.empty() || options.steps < 1) {
    throw QuantizationError(
        "distill_qat: give at least one batch of inputs and one step");
  }
  torch::AutoGradMode grad_mode(true);
  std::vector<at::Tensor> targets;
  {
    torch::NoGradGuard no_grad;
    for (const auto& batch : batches) {
      targets.push_back(output_tensor(teacher->forward(batch), "float model"));
    }
  }
  // The teacher's own parameters (a leaf module's, shared) stay as they are.
  absl::flat_hash_set<const void*> teacher_parameters;
  for (const at::Tensor& p : teacher->parameters()) {
    teacher_parameters.insert(p.unsafeGetTensorImpl());
  }
  std::vector<at::Tensor> trained;
  for (const at::Tensor& p : qat->parameters()) {
    if (!teacher_parameters.contains(p.unsafeGetTensorImpl())) trained.push_back(p);
  }
  torch::optim::Adam adam(trained, torch::optim::AdamOptions(options.lr));
  DistillationReport report;
  for (int64_t step = 0; step < options.steps; ++step) {
    if (step == options.steps / 2 && step > 0) disable_observer(qat);
    const auto start = std::chrono::steady_clock::now();
    const size_t i = static_cast<size_t>(step) % batches.size();
    adam.zero_grad();
    const at::Tensor out = output_tensor(qat->forward(batches[i]), "QAT module");
    at::Tensor loss = (out - targets[i]).pow(2).sum() /
                      targets[i].pow(2).sum().clamp_min(1e-12);
    loss.backward();
    adam.step();
    report.step_ms.push_back(std::chrono::duration<double, std::milli>(
                                 std::chrono::steady_clock::now() - start)
                                 .count());
    (step == 0 ? report.first_loss : report.last_loss) = loss.item<double>();
  }
  if (options.steps == 1) report.last_loss = report.first_loss;
  return report;
}

namespace quantization_internal {

bool is_qat_module(const GraphModuleImpl& module) {
  for (const Node* n : module.graph().nodes()) {
    if (is_fake_quantize(*n)) return true;
  }
  return false;
}

bool is_prepared(const GraphModuleImpl& module) {
  for (const Node* n : module.graph().nodes()) {
    if (is_fake_quantize(*n) || n->is_call_to({"fx_quant::observe"})) return true;
  }
  return false;
}

Node* weight_reader(const Weight& weight, Node* root) {
  return weight.use == weight.attr ? root : weight.use;
}

GraphModule qat_as_prepared(const GraphModuleImpl& module) {
  struct Record {
    ObserverSpec spec;
    std::string role;
    at::Tensor min_val, max_val;
    at::Tensor state;  // the fixed_qparams observer's
  };
  std::shared_ptr<GraphModuleImpl> copy = module.copy();
  Graph& graph = copy->graph();
  const std::vector<Block> found = blocks(graph);
  // A batch norm's value is its convolution's once folded: the blocks', and
  // those of convolutions left float.
  absl::flat_hash_map<std::string, std::string> conv_of_bn;
  for (const Block& b : found) conv_of_bn[b.batch_norm->name()] = b.conv->name();
  for (const auto& [conv, bn] : conv_bn_pairs(*copy)) conv_of_bn.emplace(bn, conv);
  // The fake quantizers' places and ranges.
  std::map<std::string, Record> activations;    // by the value's name
  std::map<std::string, Record> weights;        // by the reading operator's
  std::vector<Node*> fake_quantizers;
  for (Node* n : graph.nodes()) {
    if (!is_fake_quantize(*n)) continue;
    fake_quantizers.push_back(n);
    const CallArguments args(*n);
    const std::string qscheme = args["qscheme"].to_string_ref();
    // The qparams training simulated, held by a fixed_qparams observer
    // (simulated_qparams). torch.ao's convert recomputes them from the range
    // by its observers' formula, which for symmetric schemes differs from
    // the fused fake quantizer's by up to a step.
    Record r;
    r.spec = spec_from_arguments(
        "fixed_qparams", args["dtype"].to_dtype(), qscheme,
        args["quant_min"].to_int(), args["quant_max"].to_int(), ObserverSpec().eps,
        args["averaging_constant"].to_double(), args["ch_axis"].to_int());
    r.role = args["role"].to_string_ref();
    Node* value = n->args()[0].to_node();
    auto buffer = [&](const char* name) {
      return copy->fetch_attr(args[name].to_node()->target().str());
    };
    r.min_val = buffer("min_val");
    r.max_val = buffer("max_val");
    if (!(r.min_val <= r.max_val).all().item<bool>()) {
      throw QuantizationError(absl::StrCat(
          "convert_fx: the fake quantizer %", n->name(), " of %", value->name(),
          " never observed a value: train the module (with its observers "
          "enabled) on inputs that reach it before converting"));
    }
    r.state = simulated_qparams(r.spec, r.min_val, r.max_val);
    if (r.role == "weight") {
      Node* reader = n->only_user();
      if (reader != nullptr && reader->is_call_to({"aten::t"})) reader = reader->only_user();
      if (reader == nullptr) {
        throw QuantizationError(absl::StrCat(
            "convert_fx: the weight fake quantizer %", n->name(),
            " has no one operator reading it"));
      }
      weights[reader->name()] = r;
      continue;
    }
    std::string name = value->name();
    if (auto it = conv_of_bn.find(name); it != conv_of_bn.end()) name = it->second;
    activations[name] = r;
  }
  // The blocks back to convolution -> batch norm, the fake quantizers out.
  for (const Block& b : found) {
    b.conv->replace_input_with(b.weight_fake_quant, b.weight);
    set_operator_argument(*b.conv, "bias", b.bias == nullptr ? Argument() : Argument(b.bias));
    b.batch_norm->replace_input_with(b.bn_input, b.conv);
  }
  for (Node* n : fake_quantizers) {
    n->replace_all_uses_with(n->args()[0].to_node());
    graph.erase_node(n);
  }
  set_inference_mode(graph);
  graph.eliminate_dead_code();

  // In inference mode: a module like the one traced in eval mode.
  GraphModule inference = rebuilt(*copy, graph, /*traced_training=*/false, /*own=*/false);
  inference->eval();
  GraphModule prepared =
      inference_copy(inference, {}, "convert_fx", /*fold_linear=*/false);

  // Observers where the fake quantizers were.
  Graph& g = prepared->graph();
  absl::flat_hash_map<std::string, Node*> by_name;
  for (Node* n : g.nodes()) by_name[n->name()] = n;
  int count = 0;
  for (const auto& [name, r] : activations) {
    auto it = by_name.find(name);
    if (it == by_name.end()) continue;  // a value the folding removed
    Node* value = it->second;
    Node* obs = insert_observer(*prepared, value, r.spec, r.state,
                                absl::StrCat("activation_post_process_", count++),
                                r.role);
    value->replace_all_uses_with(obs, [obs](Node* user) { return user != obs; });
  }
  for (const auto& [name, r] : weights) {
    auto it = by_name.find(name);
    if (it == by_name.end()) continue;
    Node* root = it->second;
    const std::optional<Weight> weight = weight_of(*prepared, *root);
    if (!weight) continue;
    // convert_fx quantizes the weight by the fake quantizer's qparams.
    Node* obs = insert_observer(*prepared, weight->attr, r.spec, r.state,
                                absl::StrCat("weight_post_process_", count++),
                                "weight");
    weight_reader(*weight, root)->replace_input_with(weight->attr, obs);
  }
  g.lint();
  prepared->recompile();
  return prepared;
}

}  // namespace quantization_internal
}  // namespace fx
