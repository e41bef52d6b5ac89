#include "passes/fuse_conv_bn.h"

#include <ATen/core/dispatch/Dispatcher.h>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "fx/ir/function.h"
#include "fx/ir/operator_schemas.h"
#include "fx/runtime/folding.h"
#include "fx/runtime/graph_module.h"
#include "passes/patterns.h"

namespace fx {
namespace {

// The fusions folded: a convolution (transposed or not) or a linear layer,
// and the batch norm that is its only user.
const std::vector<Fusion>& folded_fusions() {
  static const std::vector<Fusion> fusions = {
      Fusion::kConvBatchNorm, Fusion::kConvTransposeBatchNorm,
      Fusion::kLinearBatchNorm};
  return fusions;
}

// A get_attr node (or None) the fold can read.
bool is_attribute_or_none(const Node* n) {
  return n == nullptr || n->op() == Opcode::kGetAttr;
}

// "conv1.weight" -> "conv1_weight_fused": the name of the node computing a
// fused parameter (and so of its folded attribute).
std::string fused_name(const std::string& path) {
  std::string name = path;
  for (char& c : name) {
    if (c == '.') c = '_';
  }
  return name + "_fused";
}

// The path of the bias that goes with `weight_path` ("conv1.weight" ->
// "conv1.bias").
std::string bias_path(const std::string& weight_path) {
  const std::string suffix = "weight";
  if (weight_path.size() >= suffix.size() &&
      weight_path.compare(weight_path.size() - suffix.size(), suffix.size(),
                          suffix) == 0) {
    return weight_path.substr(0, weight_path.size() - suffix.size()) + "bias";
  }
  return weight_path + "_bias";
}

// Rewrites each conv (or linear) + batch_norm pair to read fused
// parameters, and builds the one init step that computes them all from the
// original ones (see passes/fold_constants.h).
class Fuser {
 public:
  Fuser(GraphModuleImpl& module, bool linear)
      : module_(module),
        graph_(module.graph()),
        linear_(linear),
        init_(std::make_shared<Graph>()) {}

  bool run() {
    // The graph's own metadata is not needed: the fold only reads which
    // attributes a call uses.
    PatternOptions untyped;
    untyped.typed = false;
    for (Node* root : graph_.nodes()) {
      const auto match = match_fusion(module_, *root, folded_fusions(), untyped);
      if (!match || (match->linear && !linear_)) continue;
      const BatchNorm& bn = *match->batch_norm;
      const bool fused = match->convolution
                             ? fuse_convolution(*match->convolution, bn)
                             : fuse_linear(*match->linear, bn);
      if (fused) {
        bn.node->replace_all_uses_with(root);
        for (Node* input : bn.node->all_input_nodes()) stale_.insert(input);
        graph_.erase_node(bn.node);
      }
    }
    if (outputs_.empty()) return false;
    init_->output(Argument::tuple(std::move(init_results_)));
    module_.add_init_step({std::move(init_), std::move(outputs_)});
    // The original parameters the graph no longer reads.
    for (Node* n : graph_.nodes()) {
      if (stale_.contains(n) && n->op() == Opcode::kGetAttr &&
          n->users().empty()) {
        graph_.erase_node(n);
      }
    }
    return true;
  }

 private:
  // A call in the init graph.
  Node* call(const char* op_name, std::vector<Argument> args,
             const std::string& name = "") {
    return init_->create_node(Opcode::kCallFunction, op(op_name),
                              std::move(args), {}, name);
  }

  // The init graph's get_attr of the attribute the main graph's get_attr
  // `arg` reads (or None), one per main graph node (a graph reads an
  // attribute through one get_attr, as the tracer makes them; two would
  // give two reads, which computes the same).
  Argument read(const Argument& arg) {
    if (arg.is_none()) return arg;
    const Node* node = arg.to_node();
    auto [it, added] = reads_.try_emplace(node, nullptr);
    if (added) it->second = init_->get_attr(node->target().str());
    return it->second;
  }

  // Registers an init output under _folded.<name> (made unique) and returns
  // a get_attr of it in the main graph, before `before`.
  Node* fused_attribute(Node* result, const std::string& name,
                        const TensorMeta& meta, Node* before) {
    std::string path = absl::StrCat("_folded.", name);
    for (int i = 1; module_.has_tensor_attribute(path) || taken_.count(path);
         ++i) {
      path = absl::StrCat("_folded.", name, "_", i);
    }
    taken_.insert(path);
    init_results_.emplace_back(result);
    outputs_.push_back(path);
    auto guard = graph_.inserting_before(before);
    Node* attribute = graph_.get_attr(path);
    attribute->meta().set(kTensorMeta, meta);
    return attribute;
  }

  // An attribute's metadata: its node's, or else its tensor's.
  TensorMeta attribute_meta(const Node* node) const {
    if (const TensorMeta* meta = node->tensor_meta()) return *meta;
    return tensor_meta_of(module_.fetch_attr(node->target().str()));
  }

  struct Fused {
    Node* weight;
    Node* bias;
  };

  // The init step's fx_fold::fuse_conv_bn_weights of the layer's weight
  // (output channels along dimension 0, or 1 `transpose`d) and bias with
  // the batch norm's statistics (see fx/runtime/folding.h); returns the
  // main graph's reads of the folded pair, inserted before `user`.
  Fused fused_parameters(const BatchNorm& bn, Node* weight, Node* bias,
                         Node* user, bool transpose = false,
                         int64_t groups = 1) {
    const std::string& weight_path = weight->target().str();
    std::string weight_name = fused_name(weight_path);
    std::string bias_name = fused_name(
        bias == nullptr ? bias_path(weight_path) : bias->target().str());
    std::vector<Argument> args = {
        read(weight),        read(argument_or_none(bias)),
        read(bn.running_mean), read(bn.running_var),
        bn.eps,              read(argument_or_none(bn.weight)),
        read(argument_or_none(bn.bias))};
    if (transpose) {
      args.emplace_back(true);
      args.emplace_back(groups);
    }
    Node* fold = call(kFuseConvBnWeights, std::move(args));
    Node* w = init_->create_node(Opcode::kCallFunction, getitem(),
                                 {fold, int64_t{0}}, {}, weight_name);
    Node* b = init_->create_node(Opcode::kCallFunction, getitem(),
                                 {fold, int64_t{1}}, {}, bias_name);
    return {fused_attribute(w, weight_name, attribute_meta(weight), user),
            fused_attribute(b, bias_name, attribute_meta(bn.running_var),
                            user)};
  }

  // Whether fx_fold::fuse_conv_bn_weights takes the pair's attributes, as
  // their sizes say (fuse_conv_bn_refusal). Others (an addmm's bias of
  // [1, out], which broadcasts) are left as they are.
  bool foldable(const BatchNorm& bn, const Node* weight, const Node* bias,
                bool transpose = false, int64_t groups = 1) const {
    auto sizes = [this](const Node* n) -> std::optional<std::vector<int64_t>> {
      if (n == nullptr) return std::nullopt;
      return attribute_meta(n).sizes;
    };
    auto ref = [](const std::optional<std::vector<int64_t>>& s)
        -> c10::optional<at::IntArrayRef> {
      if (!s) return c10::nullopt;
      return at::IntArrayRef(*s);
    };
    const auto w = sizes(weight), b = sizes(bias), mean = sizes(bn.running_mean),
               var = sizes(bn.running_var), gamma = sizes(bn.weight),
               beta = sizes(bn.bias);
    return fuse_conv_bn_refusal(*w, ref(b), *mean, *var, ref(gamma),
                                ref(beta), transpose, groups)
        .empty();
  }

  // Replaces arguments of `n` by name; the old ones may be left unused.
  void rewrite(Node* n,
               std::initializer_list<std::pair<const char*, Argument>> changes) {
    std::vector<Argument> full = CallArguments(*n).full();
    for (const auto& [name, value] : changes) {
      Argument& slot = full[*n->target().op().schema().argumentIndexWithName(
          name)];
      for_each_node(slot, [&](Node* old) { stale_.insert(old); });
      slot = value;
    }
    set_full_arguments(*n, std::move(full));
  }

  bool fuse_convolution(const Convolution& conv, const BatchNorm& bn) {
    if (!is_attribute_or_none(conv.bias)) return false;
    Node* weight = conv.weight.attr;
    if (weight == nullptr ||
        !foldable(bn, weight, conv.bias, conv.transposed, conv.groups)) {
      return false;
    }
    Fused fused = fused_parameters(bn, weight, conv.bias, conv.node,
                                   conv.transposed, conv.groups);
    rewrite(conv.node, {{"weight", fused.weight}, {"bias", fused.bias}});
    return true;
  }

  // aten::linear(input, weight, bias), and aten::addmm(bias, input,
  // t(weight)) as C++ F::linear traces for 2-D inputs.
  bool fuse_linear(const Linear& linear, const BatchNorm& bn) {
    const Weight& w = linear.weight;
    if (!is_attribute_or_none(linear.bias) || w.attr == nullptr ||
        !foldable(bn, w.attr, linear.bias)) {
      return false;
    }
    if (linear.kind == Linear::Kind::kLinear && w.t == nullptr) {
      Fused fused = fused_parameters(bn, w.attr, linear.bias, linear.node);
      rewrite(linear.node, {{"weight", fused.weight}, {"bias", fused.bias}});
      return true;
    }
    if (linear.kind == Linear::Kind::kAddmm && w.t != nullptr &&
        w.t->users().size() == 1) {
      Fused fused = fused_parameters(bn, w.attr, linear.bias, w.t);
      stale_.insert(w.attr);
      w.t->update_arg(0, fused.weight);
      rewrite(linear.node, {{"self", fused.bias}});
      return true;
    }
    return false;
  }

  GraphModuleImpl& module_;
  Graph& graph_;
  const bool linear_;
  std::shared_ptr<Graph> init_;
  std::vector<Argument> init_results_;
  std::vector<std::string> outputs_;
  absl::flat_hash_map<const Node*, Node*> reads_;
  absl::flat_hash_set<std::string> taken_;
  // Nodes whose uses the pass removed; get_attrs left unused are erased.
  absl::flat_hash_set<const Node*> stale_;
};

}  // namespace

bool fuse_conv_bn(GraphModuleImpl& module, bool linear) {
  return Fuser(module, linear).run();
}

}  // namespace fx
