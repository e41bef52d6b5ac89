#include "lowering/lower_onednn.h"

#include <ATen/core/dispatch/Dispatcher.h>

#include <algorithm>
#include <functional>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "fx/ir/errors.h"
#include "fx/ir/operator_schemas.h"
#include "fx/runtime/graph_module.h"
#include "lowering/onednn_ops.h"
#include "passes/aliasing.h"
#include "passes/cost_model.h"
#include "passes/eliminate_dead_code.h"
#include "passes/fold_constants.h"
#include "passes/patterns.h"
#include "passes/timing.h"

namespace fx {
namespace {


// The fusions lowered, longer ones first (match_fusion takes the first
// that matches).
const std::vector<Fusion>& conv_fusions() {
  static const std::vector<Fusion> fusions = {
      Fusion::kConvAddActivation, Fusion::kConvAdd, Fusion::kConvActivation,
      Fusion::kConv};
  return fusions;
}
const std::vector<Fusion>& conv_transpose_fusions() {
  static const std::vector<Fusion> fusions = {
      Fusion::kConvTransposeActivation, Fusion::kConvTranspose};
  return fusions;
}
const std::vector<Fusion>& matmul_fusions() {
  static const std::vector<Fusion> fusions = {Fusion::kMatmulScale,
                                              Fusion::kMatmul};
  return fusions;
}
const std::vector<Fusion>& linear_fusions() {
  static const std::vector<Fusion> fusions = {Fusion::kLinearActivation,
                                              Fusion::kLinear};
  return fusions;
}

// An activation as a oneDNN post-op: the `activation` argument of the
// lowered operators (onednn::activation_names()) and its parameters.
struct PostOp {
  std::string name = "none";
  double alpha = 0, beta = 0;
};

PostOp post_op(const std::optional<Activation>& activation) {
  if (!activation) return {};
  using Kind = Activation::Kind;
  switch (activation->kind) {
    case Kind::kRelu: return {"relu"};
    case Kind::kLeakyRelu: return {"relu", activation->alpha, 0};
    case Kind::kClamp: return {"clip", activation->alpha, activation->beta};
    case Kind::kHardswish: return {"hardswish"};
    case Kind::kSilu: return {"silu"};
    case Kind::kSigmoid: return {"sigmoid"};
    case Kind::kTanh: return {"tanh"};
    case Kind::kGelu: return {"gelu"};
    case Kind::kGeluTanh: return {"gelu_tanh"};
    case Kind::kHardsigmoid: return {"hardsigmoid"};
  }
  return {};
}

// The post-op's arguments of a lowered call (none for "none").
void append_activation(const PostOp& act, std::vector<Argument>* args) {
  if (act.name == "none") return;
  args->push_back(act.name);
  args->push_back(act.alpha);
  args->push_back(act.beta);
}

TensorMeta channels_last_meta(TensorMeta m) {
  m.strides = onednn::channels_last_strides(m.sizes);
  m.memory_format = memory_format_of(m.sizes, m.strides);
  m.requires_grad = false;
  return m;
}

class Lowering {
 public:
  Lowering(GraphModuleImpl& module, const InferenceOptions& options,
           InferenceReport& report)
      : module_(module), graph_(module.graph()), options_(options),
        report_(report) {}

  void run() {
    onednn::register_operators();
    absl::flat_hash_set<const Node*> chosen = choose_convolutions();
    // Erasing while iterating is safe: the activations and adds a lowered
    // node absorbs are erased after it, and skipped.
    for (Node* n : graph_.nodes()) {
      if (chosen.erase(n) > 0) {
        // Matched again: an input may be a node lowered since.
        lower_conv(*match_fusion(module_, *n, conv_fusions()));
        continue;
      }
      if (options_.lower_convolutions && !options_.bf16) {
        if (auto m = match_fusion(module_, *n, conv_transpose_fusions())) {
          lower_conv_transpose(*m);
          continue;
        }
      }
      if (options_.lower_linear) {
        if (auto m = match_fusion(module_, *n, linear_fusions())) {
          lower_linear(*m);
          continue;
        }
      }
      if (options_.lower_matmul) {
        if (auto m = match_fusion(module_, *n, matmul_fusions())) {
          lower_matmul(*m);
          continue;
        }
      }
      if (options_.lower_recurrent) lower_recurrent(n);
    }
    if (!lowered_convs_.empty()) keep_channels_last();
  }

 private:
  // A packed weight keeps the logical sizes ([out, in, ...]) with the dtype
  // it is packed in: what the cost model reads.
  void set_packed_meta(Node* pack, TensorMeta meta) const {
    if (options_.bf16) meta.dtype = c10::ScalarType::BFloat16;
    pack->meta().set(kTensorMeta, std::move(meta));
  }

  Kwargs bf16_kwargs() const {
    return options_.bf16 ? Kwargs{{"bf16", true}} : Kwargs{};
  }

  void count_fusions(const FusionMatch& m) {
    if (m.residual != nullptr) ++report_.fused_sums;
    if (m.activation) ++report_.fused_activations;
  }

  // --- Whether lowering pays, per convolution -------------------------------
  // The convolutions to lower, decided on the graph as it is before any is
  // (InferenceOptions::decision).
  absl::flat_hash_set<const Node*> choose_convolutions() {
    absl::flat_hash_set<const Node*> candidates, chosen;
    if (!options_.lower_convolutions) return chosen;
    std::vector<FusionMatch> convs;
    for (Node* n : graph_.nodes()) {
      if (auto m = match_fusion(module_, *n, conv_fusions())) {
        candidates.insert(n);
        convs.push_back(std::move(*m));
      } else if (!options_.bf16 &&
                 match_fusion(module_, *n, conv_transpose_fusions())) {
        // Always lowered: a lowered neighbour.
        candidates.insert(n);
      }
    }
    for (const FusionMatch& m : convs) {
      const Convolution& c = *m.convolution;
      const Node* tail = m.output();
      // The layout conversions lowering this one alone would add.
      const bool convert_in =
          !chained_before(c.input, candidates) &&
          c.input->tensor_meta()->memory_format !=
              c10::MemoryFormat::ChannelsLast;
      const bool convert_out = !chained_after(tail, candidates);
      bool lower = true;
      switch (options_.decision) {
        case InferenceOptions::Decision::kAll:
          break;
        case InferenceOptions::Decision::kCostModel:
          lower = pays_by_cost_model(c, tail, m.nodes.size() - 1, convert_in,
                                     convert_out);
          break;
        case InferenceOptions::Decision::kMeasure:
          lower = pays_by_measure(c, tail, m.residual, post_op(m.activation),
                                  convert_in, convert_out);
          break;
      }
      if (lower) {
        chosen.insert(m.root());
      } else {
        ++report_.declined;
      }
    }
    return chosen;
  }

  // Whether `value` comes from a candidate through operators that keep the
  // channels-last layout (so it is channels-last already when lowered).
  bool chained_before(const Node* value,
                      const absl::flat_hash_set<const Node*>& candidates) {
    std::vector<const Node*> work = {value};
    absl::flat_hash_set<const Node*> seen;
    while (!work.empty() && seen.size() < 64) {
      const Node* n = work.back();
      work.pop_back();
      if (!seen.insert(n).second) continue;
      if (candidates.count(n) > 0) return true;
      // A candidate's absorbed add or activation counts as the candidate.
      if (in_chain(*n)) {
        for (const Node* input : n->all_input_nodes()) work.push_back(input);
      }
    }
    return false;
  }

  // Whether `value` reaches a candidate's input through operators that keep
  // the channels-last layout (so it stays channels-last).
  bool chained_after(const Node* value,
                     const absl::flat_hash_set<const Node*>& candidates) {
    std::vector<const Node*> work = {value};
    absl::flat_hash_set<const Node*> seen;
    while (!work.empty() && seen.size() < 64) {
      const Node* n = work.back();
      work.pop_back();
      if (!seen.insert(n).second) continue;
      for (const Node* user : n->users()) {
        if (candidates.count(user) > 0) return true;
        if (in_chain(*user)) work.push_back(user);
      }
    }
    return false;
  }

  // The cost model's bytes, for a convolution with no lowered neighbour:
  // lowering saves a pass over the output (read and written) per fused
  // operator and aten's per-call reorder of the weight (read and written),
  // and costs a pass over the input and one over the output to convert
  // their layouts; all at the same bandwidth, so bytes decide.
  bool pays_by_cost_model(const Convolution& c, const Node* tail, size_t fused,
                          bool convert_in, bool convert_out) {
    auto bytes = [](const Node* n) {
      const TensorMeta* m = n->tensor_meta();
      return m == nullptr ? 0.0 : 4.0 * static_cast<double>(m->numel());
    };
    // With a lowered neighbour, the layout is converted between the two
    // whether this one is lowered or not.
    if (!convert_in || !convert_out) return true;
    const double output = bytes(tail);
    const double saved = 2 * bytes(c.weight.attr) + 2 * output * fused;
    return saved >= 2 * bytes(c.input) + 2 * output;
  }

  // Times the convolution both ways on random inputs of its traced sizes
  // (torch.fx's gen_mkl_autotuner, per layer): aten's convolution with the
  // adds and activations after it, against the lowered operator with the
  // layout conversions it needs; lowers when that is not slower.
  bool pays_by_measure(const Convolution& c, const Node* tail,
                       const Node* residual, const PostOp& act,
                       bool convert_in, bool convert_out) {
    at::NoGradGuard no_grad;
    const TensorMeta* in = c.input->tensor_meta();
    const TensorMeta* out = tail->tensor_meta();
    if (in == nullptr || out == nullptr) return true;
    const at::Tensor x = at::randn(in->sizes);
    const at::Tensor x_channels_last =
        convert_in ? x
                   : at::empty_strided(in->sizes,
                                       onednn::channels_last_strides(in->sizes))
                         .copy_(x);
    const at::Tensor w = module_.fetch_attr(c.weight.attr->target().str());
    at::Tensor b;
    if (const TensorMeta* bm = c.bias ? c.bias->tensor_meta() : nullptr) {
      b = at::randn(bm->sizes);
    }
    at::Tensor r;
    if (residual != nullptr) r = at::randn(out->sizes);
    const std::vector<int64_t> zeros(c.stride.size(), 0);

    auto aten = [&] {
      at::Tensor y = at::convolution(convert_in ? x : x_channels_last, w, b,
                                     c.stride, c.padding, c.dilation, false,
                                     zeros, c.groups);
      if (r.defined()) y.add_(r);
      apply_activation(y, act);
    };
    static const c10::OperatorHandle pack = c10::Dispatcher::singleton()
        .findSchemaOrThrow("fx_onednn::pack_conv_weight", "");
    static const c10::OperatorHandle conv = c10::Dispatcher::singleton()
        .findSchemaOrThrow("fx_onednn::conv", "");
    std::vector<c10::IValue> stack = {w,         in->sizes,  c.stride,
                                      c.padding, c.dilation, c.groups,
                                      options_.bf16};
    pack.callBoxed(&stack);
    const at::Tensor packed = stack[0].toTensor();
    auto ours = [&] {
      std::vector<c10::IValue> s = {
          x_channels_last, packed, b.defined() ? c10::IValue(b) : c10::IValue(),
          c.stride, c.padding, c.dilation, c.groups,
          r.defined() ? c10::IValue(r) : c10::IValue(), act.name, act.alpha,
          act.beta};
      conv.callBoxed(&s);
      if (convert_out) s[0].toTensor().contiguous();
    };
    std::vector<double> aten_ms, ours_ms;
    aten();
    ours();
    for (int i = 0; i < options_.measure_rounds; ++i) {
      aten_ms.push_back(time_ms(aten));
      ours_ms.push_back(time_ms(ours));
    }
    return median(ours_ms) <= median(aten_ms);
  }

  static void apply_activation(at::Tensor& y, const PostOp& act) {
    if (act.name == "relu") {
      if (act.alpha == 0) {
        y.relu_();
      } else {
        at::leaky_relu_(y, act.alpha);
      }
    } else if (act.name == "clip") {
      y.clamp_(act.alpha, act.beta);
    } else if (act.name == "hardswish") {
      at::hardswish_(y);
    } else if (act.name == "hardsigmoid") {
      at::hardsigmoid_(y);
    } else if (act.name == "silu") {
      at::silu_(y);
    } else if (act.name == "sigmoid") {
      y.sigmoid_();
    } else if (act.name == "tanh") {
      y.tanh_();
    } else if (act.name == "gelu") {
      y = at::gelu(y);
    } else if (act.name == "gelu_tanh") {
      y = at::gelu(y, "tanh");
    }
  }

  // Replaces `original` and the nodes absorbed after it by `call_args` on
  // `op`, placed where the last absorbed node was.
  Node* replace(Node* original, const std::vector<Node*>& absorbed,
                const char* op, std::vector<Argument> call_args,
                bool channels_last) {
    Node* tail = absorbed.empty() ? original : absorbed.back();
    Node* lowered;
    {
      auto guard = graph_.inserting_before(tail);
      lowered = graph_.call_function(fx::op(op), std::move(call_args));
    }
    if (const std::string* path = original->meta().get(kModulePath)) {
      lowered->meta().set(kModulePath, *path);
    }
    if (const std::string* trace = original->meta().get(kStackTrace)) {
      lowered->meta().set(kStackTrace, *trace);
    }
    if (const TensorMeta* m = tail->tensor_meta()) {
      TensorMeta meta = *m;
      meta.requires_grad = false;
      lowered->meta().set(kTensorMeta,
                          channels_last ? channels_last_meta(meta) : meta);
    }
    if (const auto* metas = tail->meta().get(kTensorMetaList)) {
      lowered->meta().set(kTensorMetaList, *metas);  // a tuple's (an RNN's)
    }
    if (!positions_.empty()) positions_[lowered] = position(tail);
    tail->replace_all_uses_with(lowered);
    for (auto it = absorbed.rbegin(); it != absorbed.rend(); ++it) {
      positions_.erase(*it);
      graph_.erase_node(*it);
    }
    positions_.erase(original);
    graph_.erase_node(original);
    return lowered;
  }

  std::vector<Argument> post_op_arguments(Node* residual,
                                          const PostOp& act) {
    std::vector<Argument> out;
    if (residual != nullptr || act.name != "none") {
      out.push_back(residual != nullptr ? Argument(residual) : Argument());
    }
    append_activation(act, &out);
    return out;
  }

  // The packing of `weight` by `pack_op` (an init step once constants are
  // folded), placed before `n`.
  Node* pack_weight(Node* n, const char* pack_op, std::vector<Argument> args,
                    const Node* weight, Kwargs kwargs = {}) {
    Node* pack;
    {
      auto guard = graph_.inserting_before(n);
      pack = graph_.call_function(fx::op(pack_op), std::move(args),
                                  std::move(kwargs));
    }
    if (const TensorMeta* w = weight->tensor_meta()) set_packed_meta(pack, *w);
    return pack;
  }

  void lower_conv(const FusionMatch& m) {
    const Convolution& c = *m.convolution;
    Node* n = m.root();
    const std::vector<Node*> absorbed(m.nodes.begin() + 1, m.nodes.end());
    const PostOp act = post_op(m.activation);
    Node* residual = m.residual;
    const TensorMeta* in = c.input->tensor_meta();
    Node* pack = pack_weight(n, "fx_onednn::pack_conv_weight",
                             {c.weight.attr, in->sizes, c.stride, c.padding,
                              c.dilation, c.groups},
                             c.weight.attr, bf16_kwargs());
    count_fusions(m);
    // The add is the first node absorbed.
    // With bf16 the residual must be a lowered convolution's (bfloat16, as
    // the input is).
    if (options_.in_place && residual != nullptr && residual != c.input &&
        (!options_.bf16 || lowered_convs_.count(residual) > 0) &&
        can_overwrite(residual, absorbed.front())) {
      // The residual dies here: add into its memory.
      std::vector<Argument> args = {residual, c.input, pack,
                                    argument_or_none(c.bias), c.stride,
                                    c.padding, c.dilation, c.groups};
      append_activation(act, &args);
      lowered_convs_.insert(replace(n, absorbed, "fx_onednn::conv_add_",
                                    std::move(args), true));
      ++report_.in_place_sums;
    } else {
      std::vector<Argument> args = {c.input,   pack,       argument_or_none(c.bias),
                                    c.stride,  c.padding,  c.dilation,
                                    c.groups};
      for (Argument& a : post_op_arguments(residual, act)) args.push_back(a);
      lowered_convs_.insert(
          replace(n, absorbed, "fx_onednn::conv", std::move(args), true));
    }
    ++report_.convolutions;
  }

  // aten's transposed convolution on CPU (col2im over the system BLAS) takes
  // 10-40x oneDNN's time here: lowered wherever it can be, no decision.
  void lower_conv_transpose(const FusionMatch& m) {
    const Convolution& c = *m.convolution;
    Node* n = m.root();
    const TensorMeta* in = c.input->tensor_meta();
    Node* pack = pack_weight(n, "fx_onednn::pack_conv_transpose_weight",
                             {c.weight.attr, in->sizes, c.stride, c.padding,
                              c.output_padding, c.dilation, c.groups},
                             c.weight.attr);
    count_fusions(m);
    std::vector<Argument> args = {c.input,          pack,
                                  argument_or_none(c.bias),
                                  c.stride,         c.padding,
                                  c.output_padding, c.dilation,
                                  c.groups};
    append_activation(post_op(m.activation), &args);
    lowered_convs_.insert(replace(
        n, std::vector<Node*>(m.nodes.begin() + 1, m.nodes.end()),
        "fx_onednn::conv_transpose", std::move(args), true));
    ++report_.convolutions;
  }

  // Whether `residual` may be overwritten at `at`: a fresh tensor (the
  // result of an operator that returns no alias of its inputs) that
  // nothing reads after `at`, and that no view of survives.
  bool can_overwrite(const Node* residual, const Node* at) {
    // A lowered convolution's result is fresh too: conv_add_ returns its
    // residual's memory, which nothing else reads any more.
    if (!fresh(*residual) && lowered_convs_.count(residual) == 0) return false;
    const int64_t when = position(at);
    for (const Node* user : residual->users()) {
      if (user == at) continue;
      if (position(user) >= when) return false;
      if (!fresh(*user) && lowered_convs_.count(user) == 0) return false;
    }
    return true;
  }

  // A call of an operator whose result aliases none of its inputs.
  static bool fresh(const Node& n) {
    if (n.op() != Opcode::kCallFunction || !n.target().is_operator()) {
      return false;
    }
    const auto& returns = n.target().op().schema().returns();
    return returns.size() == 1 && returns[0].alias_info() == nullptr &&
           returns[0].type()->kind() == c10::TypeKind::TensorType;
  }

  // The node's place in program order, counted when the lowering started
  // (a lowered node takes the place of the node it replaced).
  int64_t position(const Node* n) {
    if (positions_.empty()) {
      int64_t i = 0;
      for (const Node* node : graph_.nodes()) positions_[node] = i++;
    }
    auto it = positions_.find(n);
    return it == positions_.end() ? -1 : it->second;
  }

  void lower_linear(const FusionMatch& m) {
    const Linear& c = *m.linear;
    Node* n = m.root();
    const TensorMeta* in = c.input->tensor_meta();
    Node* pack;
    {
      auto guard = graph_.inserting_before(n);
      Node* weight = !c.weight.transposed
                         ? c.weight.attr
                         : graph_.call_function(fx::op("aten::t"),
                                                {c.weight.attr});
      pack = graph_.call_function(fx::op("fx_onednn::pack_linear_weight"),
                                  {weight, in->sizes}, bf16_kwargs());
    }
    if (const TensorMeta* w = c.weight.attr->tensor_meta()) {
      TensorMeta meta = *w;
      if (c.weight.transposed) {
        // [in, out]: the weight is its t()
        std::reverse(meta.sizes.begin(), meta.sizes.end());
        std::reverse(meta.strides.begin(), meta.strides.end());
      }
      set_packed_meta(pack, std::move(meta));
    }
    count_fusions(m);
    std::vector<Argument> args = {c.input, pack, argument_or_none(c.bias)};
    append_activation(post_op(m.activation), &args);
    replace(n, std::vector<Node*>(m.nodes.begin() + 1, m.nodes.end()),
            "fx_onednn::linear", std::move(args), false);
    ++report_.linear;
  }

  // Attention's products of activations, their scale fused.
  void lower_matmul(const FusionMatch& m) {
    std::vector<Argument> args = {m.matmul->self, m.matmul->other};
    if (m.fusion == Fusion::kMatmulScale) args.push_back(m.scale);
    replace(m.root(), std::vector<Node*>(m.nodes.begin() + 1, m.nodes.end()),
            "fx_onednn::matmul", std::move(args), false);
    ++report_.matmul;
  }

  // aten::lstm and aten::gru of constant float32 weights with biases,
  // without projections, in eval mode (one or two directions):
  // fx_onednn::lstm and gru on the weights transposed (a GRU's gates
  // reordered) and the biases summed, by init steps.
  void lower_recurrent(Node* n) {
    const bool gru = n->is_call_to({"aten::gru.input"});
    if (!gru && !n->is_call_to({"aten::lstm.input"})) return;
    const CallArguments arg(*n);
    const Argument input = arg["input"];
    const Argument hx = arg["hx"];
    const Argument params = arg["params"];
    const Argument has_biases = arg["has_biases"];
    const Argument num_layers = arg["num_layers"];
    const Argument train = arg["train"];
    const Argument bidirectional = arg["bidirectional"];
    const Argument batch_first = arg["batch_first"];
    const bool hx_fits = gru ? hx.is_node()
                             : hx.is_sequence() && hx.elements().size() == 2;
    if (!input.is_node() || !hx_fits || !params.is_sequence() ||
        !has_biases.is_bool() ||
        !has_biases.to_bool() || !num_layers.is_int() || !train.is_bool() ||
        train.to_bool() || !bidirectional.is_bool() ||
        !batch_first.is_bool()) {
      return;
    }
    const TensorMeta* in = input.to_node()->tensor_meta();
    if (!float32_cpu(in) || in->sizes.size() != 3) return;
    for (const Argument& h :
         gru ? std::vector<Argument>{hx} : hx.elements()) {
      if (!h.is_node() || !float32_cpu(h.to_node()->tensor_meta())) return;
    }
    const int64_t layers = num_layers.to_int();
    const int64_t directions = bidirectional.to_bool() ? 2 : 1;
    if (layers < 1 || params.elements().size() !=
                          static_cast<size_t>(4 * layers * directions)) {
      return;  // projections (proj_size) have a fifth weight per layer
    }
    for (const Argument& p : params.elements()) {
      if (!p.is_node() || p.to_node()->op() != Opcode::kGetAttr) return;
      const at::Tensor t =
          module_.fetch_attr(p.to_node()->target().str());
      if (t.scalar_type() != at::kFloat || !t.device().is_cpu()) return;
    }
    std::vector<Argument> weights;
    {
      auto guard = graph_.inserting_before(n);
      const std::vector<Argument>& p = params.elements();
      // Rows [start, start + hidden) of a gate-stacked GRU weight or bias.
      auto gate = [&](const Argument& w, int64_t g, int64_t hidden) {
        return Argument(graph_.call_function(
            fx::op("aten::slice.Tensor"),
            {w, 0, g * hidden, (g + 1) * hidden, 1}));
      };
      auto cat = [&](std::vector<Argument> parts) {
        return Argument(graph_.call_function(
            fx::op("aten::cat"), {Argument::list(std::move(parts)), 0}));
      };
      // Per layer and direction (aten's order: the forward one first).
      for (int64_t l = 0; l < layers * directions; ++l) {
        const int64_t hidden =
            module_.fetch_attr(p[4 * l + 1].to_node()->target().str()).size(1);
        for (int i = 0; i < 2; ++i) {
          // aten's GRU gates are r, z, n; oneDNN's u (= z), r, o (= n).
          const Argument w =
              gru ? cat({gate(p[4 * l + i], 1, hidden),
                         gate(p[4 * l + i], 0, hidden),
                         gate(p[4 * l + i], 2, hidden)})
                  : p[4 * l + i];
          weights.push_back(graph_.call_function(
              fx::op("aten::contiguous"),
              {graph_.call_function(fx::op("aten::t"), {w})}));
        }
        if (!gru) {
          weights.push_back(graph_.call_function(
              fx::op("aten::add.Tensor"), {p[4 * l + 2], p[4 * l + 3]}));
          continue;
        }
        const Argument b_ih = p[4 * l + 2], b_hh = p[4 * l + 3];
        auto sum = [&](int64_t g) {
          return Argument(graph_.call_function(
              fx::op("aten::add.Tensor"),
              {gate(b_ih, g, hidden), gate(b_hh, g, hidden)}));
        };
        weights.push_back(cat({sum(1), sum(0), gate(b_ih, 2, hidden),
                               gate(b_hh, 2, hidden)}));
      }
    }
    std::vector<Argument> args = {input, hx, Argument::list(std::move(weights)),
                                  layers, batch_first};
    if (directions == 2) args.push_back(true);
    replace(n, {}, gru ? "fx_onednn::gru" : "fx_onednn::lstm", std::move(args),
            false);
    ++report_.recurrent;
  }

  // Operators whose output keeps a channels-last input's layout.
  static bool keeps_layout(const Node& n) {
    return n.is_call_to(
        {"aten::relu", "aten::relu_", "aten::hardtanh", "aten::hardtanh_",
            "aten::relu6", "aten::relu6_", "aten::leaky_relu",
            "aten::leaky_relu_", "aten::elu", "aten::elu_", "aten::gelu_",
            "aten::clamp", "aten::clamp_", "aten::hardswish",
            "aten::hardswish_", "aten::hardsigmoid", "aten::hardsigmoid_",
            "aten::silu", "aten::silu_", "aten::sigmoid", "aten::sigmoid_",
            "aten::tanh", "aten::tanh_", "aten::gelu", "aten::add.Tensor",
            "aten::add_.Tensor", "aten::mul.Tensor", "aten::mul_.Tensor",
            "aten::sub.Tensor", "aten::div.Tensor", "aten::max_pool2d",
            "aten::avg_pool2d", "aten::adaptive_avg_pool2d", "aten::cat",
            "aten::batch_norm", "aten::dropout", "aten::dropout_",
            "aten::feature_dropout", "aten::upsample_nearest2d",
            "aten::upsample_bilinear2d", "fx_onednn::max_pool2d",
            "fx_onednn::avg_pool2d", "fx_onednn::batch_norm",
            "fx_onednn::squeeze_excite"});
  }
  // Operators that read any layout right and keep nothing of it.
  static bool reads_any_layout(const Node& n) {
    return n.is_call_to({"aten::flatten.using_ints", "aten::reshape",
                         "aten::mean.dim", "aten::size.int", "aten::dim",
                         "aten::sum.dim_IntList", "aten::contiguous"});
  }

  // Operators a chain runs through: those that keep the layout and, with
  // bf16, those aten runs in bfloat16 (batch norms and bilinear upsampling
  // take float32).
  bool in_chain(const Node& n) const {
    return keeps_layout(n) &&
           !(options_.bf16 &&
             n.is_call_to({"aten::batch_norm", "aten::upsample_bilinear2d"}));
  }

  // Whether `user` reads a chain's value right as it is: another lowered
  // convolution, an operator of the chain, or one that reads its layout
  // (with bf16, only its sizes: the value's dtype must not escape).
  bool reads_chain_value(const Node& user) const {
    if (lowered_convs_.count(&user) > 0 || in_chain(user)) return true;
    if (options_.bf16) return user.is_call_to({"aten::size.int", "aten::dim"});
    return reads_any_layout(user);
  }

  // How many lowered convolutions read `value`.
  int64_t lowered_readers(const Node* value) const {
    int64_t readers = 0;
    for (const Node* user : value->users()) {
      readers += lowered_convs_.count(user) > 0;
    }
    return readers;
  }

  // Activations stay channels-last between lowered convolutions; they are
  // converted where a chain starts (once per value) and where anything
  // else reads them.
  void keep_channels_last() {
    absl::flat_hash_set<const Node*> channels_last;
    for (Node* n : graph_.nodes()) {
      if (lowered_convs_.count(n) > 0) {
        channels_last.insert(n);
        continue;
      }
      if (!in_chain(*n)) continue;
      for (const Node* input : n->all_input_nodes()) {
        if (channels_last.count(input) > 0) {
          channels_last.insert(n);
          break;
        }
      }
    }
    if (options_.bf16) {
      // 4-d chains run in bfloat16 (other convolutions convert inside).
      for (const Node* n : channels_last) {
        TensorMeta* m = const_cast<Node*>(n)->meta().get_mutable(kTensorMeta);
        if (m != nullptr && m->sizes.size() == 4) {
          m->dtype = c10::ScalarType::BFloat16;
        }
      }
    }
    if (options_.lower_pooling) lower_pooling(&channels_last);
    if (options_.lower_batch_norm) lower_batch_norms(&channels_last);
    if (options_.lower_squeeze_excite) lower_squeeze_excites(&channels_last);
    absl::flat_hash_map<Node*, Node*> converted;
    for (Node* n : graph_.nodes()) {
      // A chain's start: a lowered convolution reading another layout.
      // One convolution converts its input itself (an image of 3 channels
      // on a kernel of ours: the first convolution of a vision model in
      // half of aten's time); a value several read is converted once.
      if (lowered_convs_.count(n) > 0) {
        const bool in_place = n->is_call_to({"fx_onednn::conv_add_"});
        Node* input = n->args()[in_place ? 1 : 0].to_node();
        const TensorMeta* m = input->tensor_meta();
        if (channels_last.count(input) == 0 && m != nullptr &&
            m->sizes.size() == 4 &&
            (options_.bf16 || lowered_readers(input) > 1) &&
            (options_.bf16 ||
             m->memory_format != c10::MemoryFormat::ChannelsLast)) {
          auto [it, fresh] = converted.emplace(input, nullptr);
          if (fresh) {
            auto guard = graph_.inserting_before(n);
            TensorMeta meta = channels_last_meta(*m);
            if (options_.bf16) {
              it->second = graph_.call_function(
                  fx::op("aten::to.dtype"), {input, c10::ScalarType::BFloat16},
                  {{"memory_format", c10::MemoryFormat::ChannelsLast}});
              meta.dtype = c10::ScalarType::BFloat16;
            } else {
              it->second = graph_.call_function(
                  fx::op("aten::contiguous"), {input},
                  {{"memory_format", c10::MemoryFormat::ChannelsLast}});
            }
            it->second->meta().set(kTensorMeta, meta);
            ++report_.layout_conversions;
          }
          n->replace_input_with(input, it->second);
        }
      }
    }
    // A chain's ends: whatever reads a channels-last value but is not known
    // to read it right gets it contiguous.
    for (Node* value : graph_.nodes()) {
      if (channels_last.count(value) == 0) continue;
      Node* contiguous = nullptr;
      // A snapshot: replacing the input of a user edits value's users.
      for (Node* user : value->users().to_vector()) {
        if (reads_chain_value(*user)) continue;
        if (contiguous == nullptr) {
          auto guard = graph_.inserting_before(value->next());
          contiguous =
              options_.bf16
                  ? graph_.call_function(
                        fx::op("aten::to.dtype"),
                        {value, c10::ScalarType::Float},
                        {{"memory_format", c10::MemoryFormat::Contiguous}})
                  : graph_.call_function(fx::op("aten::contiguous"), {value});
          if (const TensorMeta* m = value->tensor_meta()) {
            TensorMeta meta = *m;
            meta.strides = strides_for(meta.sizes, c10::MemoryFormat::Contiguous);
            meta.memory_format = c10::MemoryFormat::Contiguous;
            meta.dtype = c10::ScalarType::Float;
            contiguous->meta().set(kTensorMeta, meta);
          }
          ++report_.layout_conversions;
        }
        user->replace_input_with(value, contiguous);
      }
    }
    if (options_.concat_buffers) lower_concatenations(channels_last);
  }

  // A concatenation along the channels of 4-d float32 channels-last values
  // of one fixed size but the channels, that nothing writes in place
  // (directly or through a view): its pieces; else nothing.
  std::optional<std::vector<Node*>> concat_pieces(
      const Node& n,
      const absl::flat_hash_set<const Node*>& channels_last) const {
    if (!n.is_call_to({"aten::cat"}) || channels_last.count(&n) == 0) {
      return std::nullopt;
    }
    const CallArguments arg(n);
    const Argument dim = arg["dim"];
    const TensorMeta* out = n.tensor_meta();
    if (!dim.is_int() || (dim.to_int() != 1 && dim.to_int() != -3) ||
        out == nullptr || !fixed_4d_float(*out) || !arg["tensors"].is_list()) {
      return std::nullopt;
    }
    std::vector<Node*> pieces;
    for (const Argument& a : arg["tensors"].elements()) {
      const TensorMeta* m = a.is_node() ? a.to_node()->tensor_meta() : nullptr;
      if (m == nullptr || !fixed_4d_float(*m) || m->sizes[0] != out->sizes[0] ||
          m->sizes[2] != out->sizes[2] || m->sizes[3] != out->sizes[3]) {
        return std::nullopt;
      }
      pieces.push_back(a.to_node());
    }
    if (written_through(&n)) return std::nullopt;
    return pieces;
  }

  // Whether a user writes `value` in place, or a view of it (a user that
  // may share its storage, followed).
  static bool written_through(const Node* value) {
    std::vector<const Node*> work = {value};
    for (size_t seen = 0; !work.empty(); ++seen) {
      const Node* v = work.back();
      work.pop_back();
      if (seen > 64) return true;  // too many views to follow: assume so
      for (const Node* user : v->users()) {
        const std::vector<Node*> written = written_in_place(*user);
        if (std::find(written.begin(), written.end(), v) != written.end()) {
          return true;
        }
        if (aliased_input(*user) == v) work.push_back(user);
      }
    }
    return false;
  }

  static bool fixed_4d_float(const TensorMeta& m) {
    if (m.sizes.size() != 4 || m.dtype != c10::ScalarType::Float ||
        !m.device.is_cpu()) {
      return false;
    }
    for (const SizeExpr& e : m.symbolic_sizes) {
      if (!e.is_constant()) return false;
    }
    return true;
  }

  // Chains of concatenations along the channels, each extending the one
  // before it by the pieces it appends (DenseNet's blocks: each layer
  // reads the concatenation of the block's outputs so far), write each
  // piece once into one buffer; each concatenation becomes a view of the
  // buffer's first channels, which later writes leave as they are:
  //   %cat = aten::cat([%a], 1)                    %a: 32 channels, %b, %c: 16
  //   %cat_1 = aten::cat([%a, %b], 1)
  //   %cat_2 = aten::cat([%a, %b, %c], 1)
  // become
  //   %concat_buffer = fx_onednn::concat_buffer([%a], 64)
  //   %slice = aten::slice.Tensor(%concat_buffer, 1, 0, 32)
  //   %concat_write_ = fx_onednn::concat_write_(%concat_buffer, [%b], 32)
  //   %slice_1 = aten::slice.Tensor(%concat_write_, 1, 0, 48)
  //   %concat_write__1 = fx_onednn::concat_write_(%concat_write_, [%c], 48)
  // (the last the whole buffer).
  void lower_concatenations(
      const absl::flat_hash_set<const Node*>& channels_last) {
    // Each concatenation's pieces, a piece that is a concatenation itself
    // (cat([cat([a, b]), c]), as C++ code grows a tensor) replaced by its
    // own.
    std::vector<Node*> cats;  // in program order
    absl::flat_hash_map<Node*, std::vector<Node*>> flat;
    absl::flat_hash_map<std::vector<Node*>, Node*> by_pieces;
    for (Node* n : graph_.nodes()) {
      auto pieces = concat_pieces(*n, channels_last);
      if (!pieces) continue;
      std::vector<Node*> all;
      for (Node* piece : *pieces) {
        auto it = flat.find(piece);
        if (it == flat.end()) {
          all.push_back(piece);
        } else {
          all.insert(all.end(), it->second.begin(), it->second.end());
        }
      }
      by_pieces.emplace(all, n);
      flat[n] = std::move(all);
      cats.push_back(n);
    }
    // Each concatenation's longest predecessor (the one whose pieces begin
    // its own), and how many extend each.
    absl::flat_hash_map<Node*, Node*> before;
    absl::flat_hash_map<Node*, int> extended;
    for (Node* n : cats) {
      const std::vector<Node*>& pieces = flat[n];
      for (size_t k = pieces.size() - 1; k > 0; --k) {
        auto it = by_pieces.find(
            std::vector<Node*>(pieces.begin(), pieces.begin() + k));
        if (it != by_pieces.end() && position(it->second) < position(n)) {
          before[n] = it->second;
          ++extended[it->second];
          break;
        }
      }
    }
    // The chains, from the heads (concatenations extending none), each link
    // the only extension of the one before.
    absl::flat_hash_map<Node*, Node*> after;
    for (const auto& [n, b] : before) {
      if (extended[b] == 1) after[b] = n;
    }
    for (Node* head : cats) {
      if (before.count(head) > 0 && extended[before[head]] == 1) continue;
      std::vector<Node*> chain = {head};
      while (after.count(chain.back()) > 0) chain.push_back(after[chain.back()]);
      if (chain.size() < 2) continue;
      const int64_t capacity = chain.back()->tensor_meta()->sizes[1];
      Node* buffer = nullptr;
      int64_t filled = 0;    // channels written so far
      size_t written = 0;    // pieces written so far
      for (Node* cat : chain) {
        const std::vector<Node*>& pieces = flat[cat];
        const int64_t channels = cat->tensor_meta()->sizes[1];
        auto guard = graph_.inserting_before(cat);
        const TensorMeta whole = channels_last_meta([&] {
          TensorMeta m = *cat->tensor_meta();
          m.sizes[1] = capacity;
          return m;
        }());
        if (buffer == nullptr) {
          buffer = graph_.call_function(
              fx::op("fx_onednn::concat_buffer"),
              {Argument(pieces), capacity});
        } else {
          const std::vector<Node*> appended(pieces.begin() + written,
                                            pieces.end());
          buffer = graph_.call_function(fx::op("fx_onednn::concat_write_"),
                                        {buffer, Argument(appended), filled});
        }
        buffer->meta().set(kTensorMeta, whole);
        written = pieces.size();
        filled = channels;
        Node* view = buffer;
        if (channels < capacity) {
          view = graph_.call_function(fx::op("aten::slice.Tensor"),
                                      {buffer, int64_t{1}, int64_t{0}, channels});
          TensorMeta m = *cat->tensor_meta();
          m.strides = whole.strides;
          m.memory_format = c10::MemoryFormat::Preserve;
          view->meta().set(kTensorMeta, m);
        }
        cat->replace_all_uses_with(view);
        positions_.erase(cat);
        graph_.erase_node(cat);
        ++report_.concatenations;
      }
      ++report_.concat_buffers;
    }
  }

  // `value`'s metadata when it is a chain's 4-d CPU value in the chain's
  // dtype (float32, bfloat16 with bf16), as a lowered convolution leaves it
  // (an elementwise operator may have promoted it); else null.
  const TensorMeta* chain_value(
      const Argument& value,
      const absl::flat_hash_set<const Node*>& channels_last) const {
    const TensorMeta* m =
        value.is_node() ? value.to_node()->tensor_meta() : nullptr;
    const bool in_chain =
        m != nullptr && m->sizes.size() == 4 && m->device.is_cpu() &&
        m->dtype == (options_.bf16 ? c10::ScalarType::BFloat16
                                   : c10::ScalarType::Float) &&
        channels_last.count(value.to_node()) > 0;
    return in_chain ? m : nullptr;
  }

  // Max, average and global average pooling of a chain's values run on
  // oneDNN (fx_onednn::max_pool2d / avg_pool2d: aten's results, 2-3x faster
  // on channels-last tensors); a divisor_override stays with aten.
  void lower_pooling(absl::flat_hash_set<const Node*>* channels_last) {
    for (Node* n : graph_.nodes()) {
      if (channels_last->count(n) == 0) continue;
      const bool max = n->is_call_to({"aten::max_pool2d"});
      const bool global = n->is_call_to({"aten::adaptive_avg_pool2d"});
      if (!max && !global && !n->is_call_to({"aten::avg_pool2d"})) continue;
      const CallArguments arg(*n);
      const TensorMeta* in = chain_value(arg["self"], *channels_last);
      if (in == nullptr) continue;
      const std::optional<std::vector<Argument>> args =
          global ? global_pool_arguments(arg, *in)
                 : pool_arguments(arg, max);
      if (!args) continue;
      channels_last->erase(n);
      channels_last->insert(replace(
          n, {}, max ? "fx_onednn::max_pool2d" : "fx_onednn::avg_pool2d",
          *args, true));
      ++report_.pooling;
    }
  }

  // Batch norms of a chain's values in eval mode that no convolution before
  // them absorbed (DenseNet's, on the block's concatenation before each
  // layer) become fx_onednn::batch_norm, the relu after one fused when it
  // is the batch norm's only reader.
  void lower_batch_norms(absl::flat_hash_set<const Node*>* channels_last) {
    for (Node* n : graph_.nodes()) {
      if (channels_last->count(n) == 0 ||
          !n->is_call_to({"aten::batch_norm"})) {
        continue;
      }
      const CallArguments arg(*n);
      const Argument input = arg["input"];
      const Argument training = arg["training"], eps = arg["eps"];
      // (With bf16, batch norms are not in a chain: in_chain.)
      if (chain_value(input, *channels_last) == nullptr ||
          !training.is_bool() || training.to_bool() || !eps.is_double() ||
          !arg["running_mean"].is_node() || !arg["running_var"].is_node()) {
        continue;
      }
      std::vector<Node*> absorbed;
      const std::vector<Node*> users = n->users().to_vector();
      if (users.size() == 1 &&
          users[0]->is_call_to({"aten::relu", "aten::relu_"})) {
        absorbed.push_back(users[0]);
      }
      channels_last->erase(n);
      for (const Node* a : absorbed) channels_last->erase(a);
      channels_last->insert(replace(
          n, absorbed, "fx_onednn::batch_norm",
          {input, arg["weight"], arg["bias"], arg["running_mean"],
           arg["running_var"], eps,
           std::string(absorbed.empty() ? "none" : "relu")},
          true));
      if (!absorbed.empty()) ++report_.fused_activations;
      ++report_.batch_norms;
    }
  }

  // A lowered 1x1 convolution (stride 1, no padding, one group, no
  // residual) whose only reader is `reader`, with its activation; else
  // null.
  struct PointwiseConv {
    Node* node;
    Node* pack;
    std::string activation;
  };
  std::optional<PointwiseConv> pointwise_conv(const Argument& value,
                                              const Node* reader) const {
    Node* n = value.is_node() ? value.to_node() : nullptr;
    if (n == nullptr || lowered_convs_.count(n) == 0 ||
        !n->is_call_to({"fx_onednn::conv"}) || n->users().size() != 1 ||
        *n->users().begin() != reader) {
      return std::nullopt;
    }
    const std::vector<Argument>& a = n->args();
    const std::vector<int64_t> one = {1, 1}, zero = {0, 0};
    Node* pack = a[1].is_node() ? a[1].to_node() : nullptr;
    if (pack == nullptr ||
        !pack->is_call_to({"fx_onednn::pack_conv_weight"}) ||
        constant_ints(a[3], 2) != one || constant_ints(a[4], 2) != zero ||
        constant_ints(a[5], 2) != one || !a[6].is_int() ||
        a[6].to_int() != 1 || !n->kwargs().empty()) {
      return std::nullopt;
    }
    const TensorMeta* w = pack->tensor_meta();
    if (w == nullptr || w->sizes.size() != 4 || w->sizes[2] != 1 ||
        w->sizes[3] != 1 || w->dtype != c10::ScalarType::Float) {
      return std::nullopt;
    }
    if (a.size() == 7) return PointwiseConv{n, pack, "none"};
    // other, activation, alpha, beta
    if (a.size() != 11 || !a[7].is_none() || !a[8].is_string() ||
        !a[9].is_double() || a[9].to_double() != 0) {
      return std::nullopt;
    }
    return PointwiseConv{n, pack, a[8].to_string_ref()};
  }

  // Squeeze-and-excitation blocks (torchvision's SqueezeExcitation:
  // MobileNetV3, EfficientNet) of a chain's value, as lowered so far:
  //   %p = fx_onednn::avg_pool2d(%x, [H, W], [H, W], [0, 0], False, False)
  //   %s = fx_onednn::conv(%p, %pack1, %b1, [1, 1], [0, 0], [1, 1], 1, None, relu, 0.0, 0.0)
  //   %g = fx_onednn::conv(%s, %pack2, %b2, [1, 1], [0, 0], [1, 1], 1, None, sigmoid, 0.0, 0.0)
  //   %y = aten::mul.Tensor(%g, %x)
  // become one call, the convolutions' weights unpacked:
  //   %y = fx_onednn::squeeze_excite(%x, %w1, %b1, %w2, %b2, relu, sigmoid)
  void lower_squeeze_excites(absl::flat_hash_set<const Node*>* channels_last) {
    for (Node* n : graph_.nodes()) {
      if (channels_last->count(n) == 0 ||
          !n->is_call_to({"aten::mul.Tensor"}) || n->args().size() != 2) {
        continue;
      }
      for (int gate_at : {0, 1}) {
        const Argument x = n->args()[1 - gate_at];
        const TensorMeta* in = chain_value(x, *channels_last);
        const auto gate = pointwise_conv(n->args()[gate_at], n);
        if (in == nullptr || options_.bf16 || !gate ||
            (gate->activation != "sigmoid" &&
             gate->activation != "hardsigmoid")) {
          continue;
        }
        const Node* g = gate->node;
        const auto squeeze = pointwise_conv(g->args()[0], g);
        if (!squeeze || (squeeze->activation != "none" &&
                         squeeze->activation != "relu" &&
                         squeeze->activation != "silu")) {
          continue;
        }
        Node* pool = squeeze->node->args()[0].is_node()
                         ? squeeze->node->args()[0].to_node()
                         : nullptr;
        const std::vector<int64_t> window = {in->sizes[2], in->sizes[3]};
        if (pool == nullptr || !pool->is_call_to({"fx_onednn::avg_pool2d"}) ||
            pool->users().size() != 1 || pool->args().size() != 6 ||
            !(pool->args()[0] == x) ||
            constant_ints(pool->args()[1], 2) != window ||
            constant_ints(pool->args()[3], 2) !=
                std::vector<int64_t>{0, 0} ||
            !pool->args()[4].is_bool() || pool->args()[4].to_bool()) {
          continue;
        }
        const std::vector<Argument>& s = squeeze->node->args();
        const std::vector<Argument>& e = gate->node->args();
        std::vector<Node*> gone = {gate->node, squeeze->node, pool};
        Node* lowered = replace(
            n, {}, "fx_onednn::squeeze_excite",
            {x, squeeze->pack->args()[0], s[2], gate->pack->args()[0], e[2],
             squeeze->activation, gate->activation},
            true);
        channels_last->erase(n);
        channels_last->insert(lowered);
        for (Node* dead : gone) {
          channels_last->erase(dead);
          lowered_convs_.erase(dead);
          positions_.erase(dead);
          graph_.erase_node(dead);
        }
        // The packs die with the convolutions (dead code, erased later).
        report_.convolutions -= 2;
        report_.fused_activations -= squeeze->activation == "none" ? 1 : 2;
        --report_.pooling;
        ++report_.squeeze_excites;
        break;
      }
    }
  }

  // max_pool2d's or avg_pool2d's arguments as fx_onednn's operator takes
  // them (the input's first), when each is constant.
  static std::optional<std::vector<Argument>> pool_arguments(
      const CallArguments& arg, bool max) {
    const auto kernel = constant_ints(arg["kernel_size"], 2);
    const Argument stride_arg = arg["stride"];
    // An empty stride is the kernel's size.
    const auto stride =
        stride_arg.is_sequence() && stride_arg.elements().empty()
            ? kernel
            : constant_ints(stride_arg, 2);
    const auto padding = constant_ints(arg["padding"], 2);
    const Argument ceil_mode = arg["ceil_mode"];
    if (!kernel || !stride || !padding || !ceil_mode.is_bool()) {
      return std::nullopt;
    }
    std::vector<Argument> args = {arg["self"], *kernel, *stride, *padding};
    if (max) {
      const auto dilation = constant_ints(arg["dilation"], 2);
      if (!dilation) return std::nullopt;
      args.push_back(*dilation);
      args.push_back(ceil_mode);
    } else {
      const Argument include_pad = arg["count_include_pad"];
      if (!include_pad.is_bool() || !arg["divisor_override"].is_none()) {
        return std::nullopt;
      }
      args.push_back(ceil_mode);
      args.push_back(include_pad);
    }
    return args;
  }

  // Global average pooling (adaptive_avg_pool2d to 1x1: squeeze-
  // excitation's, a classifier's) as avg_pool2d's arguments: one window over
  // the whole image, when its size is fixed.
  static std::optional<std::vector<Argument>> global_pool_arguments(
      const CallArguments& arg, const TensorMeta& in) {
    const auto output_size = constant_ints(arg["output_size"], 2);
    const bool fixed = in.symbolic_sizes.empty() ||
                       (in.symbolic_sizes[2].is_constant() &&
                        in.symbolic_sizes[3].is_constant());
    if (!output_size || *output_size != std::vector<int64_t>{1, 1} ||
        !fixed) {
      return std::nullopt;
    }
    const std::vector<int64_t> window = {in.sizes[2], in.sizes[3]};
    return std::vector<Argument>{arg["self"], window, window,
                                 std::vector<int64_t>{0, 0}, false, false};
  }

  GraphModuleImpl& module_;
  Graph& graph_;
  const InferenceOptions& options_;
  InferenceReport& report_;
  absl::flat_hash_set<const Node*> lowered_convs_;
  // Program order when the lowering started, of the nodes not erased since.
  absl::flat_hash_map<const Node*, int64_t> positions_;
};


}  // namespace

// Each option: its name, what it does, and how it reads and writes
// InferenceOptions.
namespace {

struct BoolOption {
  const char* name;
  const char* doc;
  bool InferenceOptions::*field;
};

const std::vector<BoolOption>& bool_options() {
  static const auto* options = new std::vector<BoolOption>{
      {"lower_convolutions", "convolutions and transposed ones",
       &InferenceOptions::lower_convolutions},
      {"lower_linear", "linear layers", &InferenceOptions::lower_linear},
      {"lower_matmul", "products of two activations (attention's)",
       &InferenceOptions::lower_matmul},
      {"lower_recurrent", "LSTM and GRU layers",
       &InferenceOptions::lower_recurrent},
      {"lower_pooling", "max and average pooling between convolutions",
       &InferenceOptions::lower_pooling},
      {"lower_batch_norm", "batch norms no convolution absorbed",
       &InferenceOptions::lower_batch_norm},
      {"lower_squeeze_excite", "squeeze-and-excitation blocks as one call",
       &InferenceOptions::lower_squeeze_excite},
      {"concat_buffers", "channel concatenation chains into one buffer",
       &InferenceOptions::concat_buffers},
      {"in_place", "residual adds into the residual's memory",
       &InferenceOptions::in_place},
      {"bf16", "bfloat16 weights and activations (AVX-512 BF16)",
       &InferenceOptions::bf16},
  };
  return *options;
}

const std::vector<std::pair<const char*, InferenceOptions::Decision>>&
decisions() {
  static const auto* names =
      new std::vector<std::pair<const char*, InferenceOptions::Decision>>{
          {"cost_model", InferenceOptions::Decision::kCostModel},
          {"measure", InferenceOptions::Decision::kMeasure},
          {"all", InferenceOptions::Decision::kAll},
      };
  return *names;
}

// "cost_model, measure or all".
std::string decision_names() {
  std::vector<std::string> names;
  for (const auto& [text, decision] : decisions()) names.push_back(text);
  return absl::StrCat(absl::StrJoin(names.begin(), names.end() - 1, ", "),
                      " or ", names.back());
}

}  // namespace

std::vector<std::pair<std::string, std::string>> LowerOnednn::option_docs() {
  std::vector<std::pair<std::string, std::string>> out;
  for (const BoolOption& option : bool_options()) {
    out.emplace_back(option.name, absl::StrCat(option.doc, " (true/false)"));
  }
  out.emplace_back("decision", absl::StrCat("whether a convolution is "
                                            "lowered: ", decision_names()));
  out.emplace_back("measure_rounds", "with decision=measure: timed runs");
  return out;
}

InferenceOptions LowerOnednn::parse_options(const PassOptions& options,
                                            InferenceOptions base) {
  for (const auto& option : options) {
    // Named, not structured bindings: lambdas capture them (C++17).
    const std::string& name = option.first;
    const std::string& value = option.second;
    const auto bool_option_named =
        std::find_if(bool_options().begin(), bool_options().end(),
                     [&](const BoolOption& o) { return name == o.name; });
    if (bool_option_named != bool_options().end()) {
      base.*bool_option_named->field = bool_option("lower_onednn", name, value);
    } else if (name == "decision") {
      const auto decision =
          std::find_if(decisions().begin(), decisions().end(),
                       [&](const auto& d) { return value == d.first; });
      if (decision == decisions().end()) {
        throw GraphError(absl::StrCat("pass lower_onednn: option decision "
                                      "takes ", decision_names(), ", not '",
                                      value, "'"));
      }
      base.decision = decision->second;
    } else if (name == "measure_rounds") {
      const int64_t rounds = int_option("lower_onednn", name, value);
      if (rounds < 1 || rounds > 1000) {
        throw GraphError(absl::StrCat("pass lower_onednn: option "
                                      "measure_rounds takes 1 to 1000, not ",
                                      value));
      }
      base.measure_rounds = static_cast<int>(rounds);
    } else {
      throw GraphError(absl::StrCat("pass lower_onednn takes no option '",
                                    name, "'"));
    }
  }
  return base;
}

PassOptions LowerOnednn::to_pass_options(const InferenceOptions& options) {
  const InferenceOptions defaults;
  PassOptions out;
  for (const BoolOption& option : bool_options()) {
    if (options.*option.field != defaults.*option.field) {
      out.emplace_back(option.name, options.*option.field ? "true" : "false");
    }
  }
  if (options.decision != defaults.decision) {
    for (const auto& [text, decision] : decisions()) {
      if (decision == options.decision) out.emplace_back("decision", text);
    }
  }
  if (options.measure_rounds != defaults.measure_rounds) {
    out.emplace_back("measure_rounds", std::to_string(options.measure_rounds));
  }
  return out;
}

void check_bf16_supported(const InferenceOptions& options) {
  if (options.bf16 && !onednn::bf16_supported()) {
    throw Error(
        "optimize_for_inference: InferenceOptions::bf16 needs a CPU with "
        "AVX-512 (avx512_core), where oneDNN has bfloat16 kernels; this one "
        "has none: lower in float32 (bf16 = false)");
  }
}

bool LowerOnednn::run(GraphModuleImpl& module) {
  report_ = {};
  if (module.traced_training().value_or(false)) return false;
  check_bf16_supported(options_);
  Lowering(module, options_, report_).run();
  if (report_.convolutions + report_.linear + report_.recurrent > 0) {
    // The packing moves into an init step, run once now and on load.
    fold_constants(module);
    eliminate_dead_code(module);
  }
  return report_.convolutions + report_.linear + report_.matmul +
             report_.recurrent >
         0;
}

std::vector<std::pair<std::string, int64_t>> LowerOnednn::statistics() const {
  std::vector<std::pair<std::string, int64_t>> out;
#define FX_COUNT(field, owner) \
  if (std::string(owner) == "lower_onednn") out.emplace_back(#field, report_.field);
  FX_INFERENCE_COUNTS(FX_COUNT)
#undef FX_COUNT
  return out;
}

}  // namespace fx
