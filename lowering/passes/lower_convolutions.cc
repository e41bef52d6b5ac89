// The pass lower_onednn_convolutions: convolutions (1-, 2-, 3-d, grouped,
// depthwise) become fx_onednn::conv on a weight packed by
// fx_onednn::pack_conv_weight, absorbing the residual add and activation
// after them (passes/patterns.h's convolution fusions), where lowering
// pays (InferenceOptions::decision); a residual that dies at the add is
// added into in place (fx_onednn::conv_add_). Transposed convolutions
// become fx_onednn::conv_transpose, always (not in bfloat16).
// Options: decision, measure_rounds, in_place, bf16.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "fx/runtime/graph_module.h"
#include "lowering/lower_onednn.h"
#include "lowering/onednn_ops.h"
#include "lowering/passes/passes.h"
#include "lowering/passes/rewrite_support.h"
#include "passes/timing.h"

namespace fx {
namespace lowering {
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

// A residual and a post-op as trailing arguments (none when neither).
std::vector<Argument> post_op_arguments(Node* residual, const PostOp& act) {
  std::vector<Argument> out;
  if (residual != nullptr || act.name != "none") {
    out.push_back(residual != nullptr ? Argument(residual) : Argument());
  }
  append_activation(act, &out);
  return out;
}

// The post-op applied to `y` by aten (what the lowered call fuses).
void apply_activation(at::Tensor& y, const PostOp& act) {
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

void count_fusions(const FusionMatch& m, InferenceReport& report) {
  if (m.residual != nullptr) ++report.fused_sums;
  if (m.activation) ++report.fused_activations;
}

class ConvolutionLowering {
 public:
  ConvolutionLowering(GraphModuleImpl& module, const InferenceOptions& options,
                      InferenceReport& report)
      : module_(module), graph_(module.graph()), options_(options),
        report_(report) {}

  void run() {
    absl::flat_hash_set<const Node*> chosen = choose();
    // Erasing while iterating is safe: the activations and adds a lowered
    // node absorbs are erased after it, and skipped; erased nodes stay
    // allocated while the walk goes on, so no table below names a node
    // that another takes the place of.
    for (Node* n : graph_.nodes()) {
      if (chosen.erase(n) > 0) {
        // Matched again: an input may be a node lowered since.
        lower_conv(*match_fusion(module_, *n, conv_fusions()));
        continue;
      }
      if (!options_.bf16) {
        if (auto m = match_fusion(module_, *n, conv_transpose_fusions())) {
          lower_conv_transpose(*m);
        }
      }
    }
  }

 private:
  // --- Whether lowering pays, per convolution -------------------------------
  // The convolutions to lower, decided on the graph as it is before any is
  // (InferenceOptions::decision).
  absl::flat_hash_set<const Node*> choose() {
    absl::flat_hash_set<const Node*> candidates, chosen;
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
      if (in_chain(*n, options_.bf16)) {
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
        if (in_chain(*user, options_.bf16)) work.push_back(user);
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

  // --- The rewrites ----------------------------------------------------------
  // `original` and what it absorbs replaced by a call (channels-last), its
  // place in program order the last absorbed node's.
  Node* replace(Node* original, const std::vector<Node*>& absorbed,
                const char* op, std::vector<Argument> args) {
    const Node* tail = absorbed.empty() ? original : absorbed.back();
    const int64_t place = positions_.empty() ? -1 : position(tail);
    Node* lowered =
        replace_with_call(graph_, original, absorbed, op, std::move(args),
                          /*channels_last=*/true);
    if (place >= 0) positions_[lowered] = place;
    return lowered;
  }

  // The packing of `weight` by `pack_op` (an init step once constants are
  // folded), placed before `n`; the packed weight's metadata keeps the
  // logical sizes ([out, in, ...]) with the dtype it is packed in: what the
  // cost model reads.
  Node* pack_weight(Node* n, const char* pack_op, std::vector<Argument> args,
                    const Node* weight, Kwargs kwargs = {}) {
    Node* pack;
    {
      auto guard = graph_.inserting_before(n);
      pack = graph_.call_function(fx::op(pack_op), std::move(args),
                                  std::move(kwargs));
    }
    if (const TensorMeta* w = weight->tensor_meta()) {
      TensorMeta meta = *w;
      if (options_.bf16) meta.dtype = c10::ScalarType::BFloat16;
      pack->meta().set(kTensorMeta, std::move(meta));
    }
    return pack;
  }

  void lower_conv(const FusionMatch& m) {
    const Convolution& c = *m.convolution;
    Node* n = m.root();
    const std::vector<Node*> absorbed(m.nodes.begin() + 1, m.nodes.end());
    const PostOp act = post_op(m.activation);
    Node* residual = m.residual;
    const TensorMeta* in = c.input->tensor_meta();
    Node* pack = pack_weight(
        n, "fx_onednn::pack_conv_weight",
        {c.weight.attr, in->sizes, c.stride, c.padding, c.dilation, c.groups},
        c.weight.attr,
        options_.bf16 ? Kwargs{{"bf16", true}} : Kwargs{});
    count_fusions(m, report_);
    // The add is the first node absorbed.
    // With bf16 the residual must be a lowered convolution's (bfloat16, as
    // the input is).
    if (options_.in_place && residual != nullptr && residual != c.input &&
        (!options_.bf16 || is_lowered_convolution(*residual)) &&
        can_overwrite(residual, absorbed.front())) {
      // The residual dies here: add into its memory.
      std::vector<Argument> args = {residual, c.input, pack,
                                    argument_or_none(c.bias), c.stride,
                                    c.padding, c.dilation, c.groups};
      append_activation(act, &args);
      replace(n, absorbed, "fx_onednn::conv_add_", std::move(args));
      ++report_.in_place_sums;
    } else {
      std::vector<Argument> args = {c.input,   pack,      argument_or_none(c.bias),
                                    c.stride,  c.padding, c.dilation,
                                    c.groups};
      for (Argument& a : post_op_arguments(residual, act)) args.push_back(a);
      replace(n, absorbed, "fx_onednn::conv", std::move(args));
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
    count_fusions(m, report_);
    std::vector<Argument> args = {c.input,          pack,
                                  argument_or_none(c.bias),
                                  c.stride,         c.padding,
                                  c.output_padding, c.dilation,
                                  c.groups};
    append_activation(post_op(m.activation), &args);
    replace(n, std::vector<Node*>(m.nodes.begin() + 1, m.nodes.end()),
            "fx_onednn::conv_transpose", std::move(args));
    ++report_.convolutions;
  }

  // Whether `residual` may be overwritten at `at`: a fresh tensor (the
  // result of an operator that returns no alias of its inputs) that
  // nothing reads after `at`, and that no view of survives.
  bool can_overwrite(const Node* residual, const Node* at) {
    // A lowered convolution's result is fresh too: conv_add_ returns its
    // residual's memory, which nothing else reads any more.
    if (!fresh(*residual) && !is_lowered_convolution(*residual)) return false;
    const int64_t when = position(at);
    for (const Node* user : residual->users()) {
      if (user == at) continue;
      if (position(user) >= when) return false;
      if (!fresh(*user) && !is_lowered_convolution(*user)) return false;
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

  // The node's place in program order, counted at the first question (a
  // lowered node takes the place of the node it replaced).
  int64_t position(const Node* n) {
    if (positions_.empty()) {
      int64_t i = 0;
      for (const Node* node : graph_.nodes()) positions_[node] = i++;
    }
    auto it = positions_.find(n);
    return it == positions_.end() ? -1 : it->second;
  }

  GraphModuleImpl& module_;
  Graph& graph_;
  const InferenceOptions& options_;
  InferenceReport& report_;
  absl::flat_hash_map<const Node*, int64_t> positions_;
};

class LowerConvolutions : public LoweringPass {
 public:
  explicit LowerConvolutions(const InferenceOptions& options)
      : LoweringPass("lower_onednn_convolutions", options) {}

 private:
  bool rewrite(GraphModuleImpl& module) override {
    check_bf16_supported(options());
    ConvolutionLowering(module, options(), report()).run();
    return report().convolutions > 0;
  }
};

}  // namespace

std::unique_ptr<Pass> make_lower_convolutions(const InferenceOptions& options) {
  return std::make_unique<LowerConvolutions>(options);
}

}  // namespace lowering
}  // namespace fx
