#include "passes/fuse_conv_bn.h"

#include <ATen/core/dispatch/Dispatcher.h>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "fx/graph_module.h"
#include "fx/operator_schemas.h"

namespace fx {
namespace {

std::string full_name(const Node& n) {
  return n.target().to_string();
}

bool is_call_to(const Node& n, std::initializer_list<const char*> names) {
  if (n.op() != Opcode::kCallFunction || !n.target().is_operator()) {
    return false;
  }
  std::string name = full_name(n);
  for (const char* candidate : names) {
    if (name == candidate) return true;
  }
  return false;
}

bool is_convolution(const Node& n) {
  return is_call_to(n, {"aten::conv1d", "aten::conv2d", "aten::conv3d",
                        "aten::conv1d.padding", "aten::conv2d.padding",
                        "aten::conv3d.padding", "aten::convolution",
                        "aten::_convolution", "aten::conv_transpose1d",
                        "aten::conv_transpose2d.input",
                        "aten::conv_transpose3d.input"});
}

// The argument named `name` of a call, from its full argument list.
const Argument& argument(const Node& n, const std::vector<Argument>& full,
                         const std::string& name) {
  auto index = n.target().op().schema().argumentIndexWithName(name);
  return full.at(*index);
}

bool has_argument(const Node& n, const std::string& name) {
  return n.target().op().schema().argumentIndexWithName(name).has_value();
}

void store(Node* n, std::vector<Argument> full) {
  auto [args, kwargs] = split_arguments(n->target().op().schema(),
                                        std::move(full));
  n->set_args(std::move(args));
  n->set_kwargs(std::move(kwargs));
}

// A get_attr node (or None) the fold can read.
bool is_attribute_or_none(const Argument& a) {
  return a.is_none() ||
         (a.is_node() && a.to_node()->op() == Opcode::kGetAttr);
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
  explicit Fuser(GraphModuleImpl& module)
      : module_(module),
        graph_(module.graph()),
        init_(std::make_shared<Graph>()) {}

  bool run() {
    for (Node* bn : graph_.nodes().to_vector()) {
      if (!is_call_to(*bn, {"aten::batch_norm"})) continue;
      if (bn->args().empty() || !bn->args()[0].is_node()) continue;
      Node* producer = bn->args()[0].to_node();
      if (producer->users().size() != 1) continue;
      std::vector<Argument> bn_args =
          full_arguments(*bn, bn->target().op().schema());
      const Argument& training = argument(*bn, bn_args, "training");
      if (!training.is_bool() || training.to_bool()) continue;
      if (!argument(*bn, bn_args, "running_mean").is_node() ||
          !argument(*bn, bn_args, "running_var").is_node()) {
        continue;
      }
      bool attributes = true;
      for (const char* name : {"weight", "bias", "running_mean",
                               "running_var"}) {
        attributes = attributes &&
                     is_attribute_or_none(argument(*bn, bn_args, name));
      }
      if (!attributes) continue;
      bool fused = false;
      if (is_convolution(*producer)) {
        fused = fuse_convolution(producer, *bn, bn_args);
      } else if (is_call_to(*producer, {"aten::linear"})) {
        fused = fuse_linear(producer, *bn, bn_args);
      } else if (is_call_to(*producer, {"aten::addmm"})) {
        fused = fuse_addmm(producer, *bn, bn_args);
      }
      if (fused) {
        bn->replace_all_uses_with(producer);
        for (Node* input : bn->all_input_nodes()) stale_.push_back(input);
        graph_.erase_node(bn);
      }
    }
    if (outputs_.empty()) return false;
    init_->output(Argument::tuple(std::move(init_results_)));
    module_.add_init_step({std::move(init_), std::move(outputs_)});
    // The original parameters the graph no longer reads. A node may be
    // listed twice (one BatchNorm module after two convolutions): each is
    // looked at once, before any is erased (and freed).
    absl::flat_hash_set<Node*> seen;
    std::vector<Node*> unused;
    for (Node* n : stale_) {
      if (seen.insert(n).second && n->op() == Opcode::kGetAttr &&
          n->users().empty()) {
        unused.push_back(n);
      }
    }
    for (Node* n : unused) graph_.erase_node(n);
    return true;
  }

 private:
  // A call in the init graph.
  Node* call(const char* op_name, std::vector<Argument> args,
             const std::string& name = "") {
    return init_->create_node(Opcode::kCallFunction, op(op_name),
                              std::move(args), {}, name);
  }

  // The init graph's get_attr of the attribute `arg` refers to (or None).
  Argument read(const Argument& arg) {
    if (arg.is_none()) return arg;
    const std::string& path = arg.to_node()->target().str();
    auto it = reads_.find(path);
    if (it == reads_.end()) {
      it = reads_.emplace(path, init_->get_attr(path)).first;
    }
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

  TensorMeta meta_of(const Argument& attribute) const {
    const Node* node = attribute.to_node();
    if (const TensorMeta* meta = node->meta().get(kTensorMeta)) return *meta;
    return tensor_meta_of(module_.fetch_attr(node->target().str()));
  }

  struct Fused {
    Node* weight;
    Node* bias;
  };

  // W * scale (scale laid along `channel_dim` of W) and
  // (b - mean) * scale + beta, computed by the init step; returns the main
  // graph's reads of them, inserted before `user`. A transposed
  // convolution of `groups` > 1 has W of [in, out / groups, k...], its
  // output channel g * (out / groups) + j at [g * (in / groups) + i, j]: W
  // is scaled as [groups, in / groups, out / groups, k...].
  Fused fused_parameters(const std::vector<Argument>& bn_args, const Node& bn,
                         const Argument& weight, const Argument& bias,
                         int64_t channel_dim, Node* user, int64_t groups = 1) {
    Argument mean = read(argument(bn, bn_args, "running_mean"));
    Argument var = read(argument(bn, bn_args, "running_var"));
    Argument gamma = read(argument(bn, bn_args, "weight"));
    Argument beta = read(argument(bn, bn_args, "bias"));
    double eps = argument(bn, bn_args, "eps").to_double();
    Node* inv_std = call("aten::rsqrt", {call("aten::add.Scalar", {var, eps})});
    Node* scale = gamma.is_none()
                      ? inv_std
                      : call("aten::mul.Tensor", {gamma, inv_std});
    TensorMeta weight_meta = meta_of(weight);
    std::vector<int64_t> shape(weight_meta.sizes.size(), 1);
    shape.at(channel_dim) = -1;
    const std::string& weight_path = weight.to_node()->target().str();
    std::string weight_name = fused_name(weight_path);
    Node* w;
    if (groups > 1) {
      const std::vector<int64_t>& sizes = weight_meta.sizes;
      std::vector<int64_t> grouped = {groups, sizes[0] / groups, sizes[1]};
      std::vector<int64_t> scale_shape = {groups, 1, sizes[1]};
      for (size_t i = 2; i < sizes.size(); ++i) {
        grouped.push_back(sizes[i]);
        scale_shape.push_back(1);
      }
      Node* scaled = call(
          "aten::mul.Tensor",
          {call("aten::reshape", {read(weight), grouped}),
           call("aten::reshape", {scale, scale_shape})});
      w = call("aten::reshape", {scaled, sizes}, weight_name);
    } else {
      w = call("aten::mul.Tensor",
               {read(weight), call("aten::reshape", {scale, shape})},
               weight_name);
    }
    Node* shifted = bias.is_none()
                        ? call("aten::neg", {mean})
                        : call("aten::sub.Tensor", {read(bias), mean});
    std::string bias_name = fused_name(
        bias.is_none() ? bias_path(weight_path)
                       : bias.to_node()->target().str());
    Node* b = beta.is_none()
                  ? call("aten::mul.Tensor", {shifted, scale}, bias_name)
                  : call("aten::addcmul", {beta, shifted, scale}, bias_name);
    TensorMeta bias_meta = meta_of(argument(bn, bn_args, "running_var"));
    return {fused_attribute(w, weight_name, weight_meta, user),
            fused_attribute(b, bias_name, bias_meta, user)};
  }

  // Replaces arguments of `n` by name; the old ones may be left unused.
  void rewrite(Node* n, std::vector<Argument> full,
               std::initializer_list<std::pair<const char*, Argument>> changes) {
    for (const auto& [name, value] : changes) {
      Argument& slot = full[*n->target().op().schema().argumentIndexWithName(
          name)];
      for_each_node(slot, [&](Node* old) { stale_.push_back(old); });
      slot = value;
    }
    store(n, std::move(full));
  }

  bool fuse_convolution(Node* conv, const Node& bn,
                        const std::vector<Argument>& bn_args) {
    std::vector<Argument> full =
        full_arguments(*conv, conv->target().op().schema());
    const Argument& weight = argument(*conv, full, "weight");
    const Argument& bias = argument(*conv, full, "bias");
    if (!weight.is_node() || weight.to_node()->op() != Opcode::kGetAttr ||
        !is_attribute_or_none(bias)) {
      return false;
    }
    bool transposed = full_name(*conv).find("conv_transpose") !=
                      std::string::npos;
    if (has_argument(*conv, "transposed")) {
      const Argument& t = argument(*conv, full, "transposed");
      if (!t.is_bool()) return false;
      transposed = t.to_bool();
    }
    int64_t groups = 1;
    if (transposed) {
      const Argument& g = argument(*conv, full, "groups");
      if (!g.is_int() || g.to_int() < 1 ||
          meta_of(weight).sizes.at(0) % g.to_int() != 0) {
        return false;
      }
      groups = g.to_int();
    }
    Fused fused = fused_parameters(bn_args, bn, weight, bias,
                                   transposed ? 1 : 0, conv, groups);
    rewrite(conv, std::move(full),
            {{"weight", fused.weight}, {"bias", fused.bias}});
    return true;
  }

  // aten::linear(input, weight, bias)
  bool fuse_linear(Node* linear, const Node& bn,
                   const std::vector<Argument>& bn_args) {
    std::vector<Argument> full =
        full_arguments(*linear, linear->target().op().schema());
    const Argument& weight = argument(*linear, full, "weight");
    const Argument& bias = argument(*linear, full, "bias");
    if (!weight.is_node() || weight.to_node()->op() != Opcode::kGetAttr ||
        !is_attribute_or_none(bias)) {
      return false;
    }
    Fused fused = fused_parameters(bn_args, bn, weight, bias, 0, linear);
    rewrite(linear, std::move(full),
            {{"weight", fused.weight}, {"bias", fused.bias}});
    return true;
  }

  // aten::addmm(bias, input, t(weight)) with alpha = beta = 1, as C++
  // F::linear traces for 2-D inputs.
  bool fuse_addmm(Node* addmm, const Node& bn,
                  const std::vector<Argument>& bn_args) {
    std::vector<Argument> full =
        full_arguments(*addmm, addmm->target().op().schema());
    const Argument& bias = argument(*addmm, full, "self");
    const Argument& transposed = argument(*addmm, full, "mat2");
    const Argument& alpha = argument(*addmm, full, "alpha");
    const Argument& beta = argument(*addmm, full, "beta");
    if (!(alpha.is_int() && alpha.to_int() == 1) ||
        !(beta.is_int() && beta.to_int() == 1) || !transposed.is_node() ||
        !is_call_to(*transposed.to_node(), {"aten::t"}) ||
        transposed.to_node()->users().size() != 1 ||
        !is_attribute_or_none(bias)) {
      return false;
    }
    Node* t = transposed.to_node();
    const Argument& weight = t->args().at(0);
    if (!weight.is_node() || weight.to_node()->op() != Opcode::kGetAttr) {
      return false;
    }
    Fused fused = fused_parameters(bn_args, bn, weight, bias, 0, t);
    for_each_node(weight, [&](Node* old) { stale_.push_back(old); });
    t->update_arg(0, fused.weight);
    rewrite(addmm, std::move(full), {{"self", fused.bias}});
    return true;
  }

  GraphModuleImpl& module_;
  Graph& graph_;
  std::shared_ptr<Graph> init_;
  std::vector<Argument> init_results_;
  std::vector<std::string> outputs_;
  absl::flat_hash_map<std::string, Node*> reads_;
  absl::flat_hash_set<std::string> taken_;
  // Nodes whose uses the pass removed; get_attrs left unused are erased.
  std::vector<Node*> stale_;
};

}  // namespace

bool fuse_conv_bn(GraphModuleImpl& module) { return Fuser(module).run(); }

}  // namespace fx
