#include "passes/fuse_conv_bn.h"

#include <ATen/core/dispatch/Dispatcher.h>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "fx/operator_schemas.h"
#include "passes/constant_folding.h"

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

void set_argument(Node* n, std::vector<Argument>* full,
                  const std::string& name, Argument value) {
  auto index = n->target().op().schema().argumentIndexWithName(name);
  (*full)[*index] = std::move(value);
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

class Fuser {
 public:
  explicit Fuser(GraphModuleImpl& module)
      : module_(module), graph_(module.graph()) {}

  bool run() {
    for (Node* bn : graph_.nodes().to_vector()) {
      if (!is_call_to(*bn, {"aten::batch_norm"})) continue;
      if (bn->args().empty() || !bn->args()[0].is_node()) continue;
      Node* producer = bn->args()[0].to_node();
      if (producer == nullptr || producer->users().size() != 1) continue;
      std::vector<Argument> bn_args =
          full_arguments(*bn, bn->target().op().schema());
      const Argument& training = argument(*bn, bn_args, "training");
      if (!training.is_bool() || training.to_bool()) continue;
      if (!argument(*bn, bn_args, "running_mean").is_node() ||
          !argument(*bn, bn_args, "running_var").is_node()) {
        continue;
      }
      for (const char* name : {"weight", "bias", "running_mean",
                               "running_var"}) {
        if (!is_attribute_or_none(argument(*bn, bn_args, name))) {
          producer = nullptr;
        }
      }
      if (producer == nullptr) continue;
      bool fused = false;
      if (is_convolution(*producer)) {
        fused = fuse_convolution(producer, bn, bn_args);
      } else if (is_call_to(*producer, {"aten::linear"})) {
        fused = fuse_linear(producer, bn, bn_args);
      } else if (is_call_to(*producer, {"aten::addmm"})) {
        fused = fuse_addmm(producer, bn, bn_args);
      }
      if (fused) {
        // The new parameters were computed just before the batch_norm (its
        // statistics are defined only there); the producer, whose only user
        // was the batch_norm, moves after them.
        bn->prepend(producer);
        bn->replace_all_uses_with(producer);
        graph_.erase_node(bn);
      }
    }
    if (created_.empty()) return false;
    FoldOptions options;
    options.only = created_;
    fold_constants(module_, options);
    return true;
  }

 private:
  Node* call(const char* op_name, std::vector<Argument> args,
             const TensorMeta& meta, const std::string& name = "") {
    Node* n = graph_.create_node(Opcode::kCallFunction, op(op_name),
                                 std::move(args), {}, name);
    n->meta().set(kTensorMeta, meta);
    return n;
  }

  TensorMeta meta_of(const Argument& attribute) const {
    return tensor_meta_of(
        module_.get_attr(attribute.to_node()->target().str()));
  }

  struct Fused {
    Node* weight;
    Node* bias;
  };

  // W * scale (scale laid along `channel_dim` of W) and
  // (b - mean) * scale + beta, inserted before the batch_norm.
  Fused fused_parameters(const std::vector<Argument>& bn_args, Node* bn,
                         const Argument& weight, const Argument& bias,
                         int64_t channel_dim) {
    auto guard = graph_.inserting_before(bn);
    const Argument& mean = argument(*bn, bn_args, "running_mean");
    const Argument& var = argument(*bn, bn_args, "running_var");
    const Argument& gamma = argument(*bn, bn_args, "weight");
    const Argument& beta = argument(*bn, bn_args, "bias");
    double eps = argument(*bn, bn_args, "eps").to_double();
    TensorMeta weight_meta = meta_of(weight);
    TensorMeta stat_meta = meta_of(var);
    Node* inv_std = call("aten::rsqrt",
                         {call("aten::add.Scalar", {var, eps}, stat_meta)},
                         stat_meta);
    Node* scale = gamma.is_none()
                      ? inv_std
                      : call("aten::mul.Tensor", {gamma, inv_std}, stat_meta);
    std::vector<int64_t> shape(weight_meta.sizes.size(), 1);
    shape.at(channel_dim) = -1;
    const std::string& weight_path = weight.to_node()->target().str();
    Node* w = call("aten::mul.Tensor",
                   {weight, call("aten::reshape", {scale, shape},
                                 stat_meta)},
                   weight_meta, fused_name(weight_path));
    Node* shifted = bias.is_none()
                        ? call("aten::neg", {mean}, stat_meta)
                        : call("aten::sub.Tensor", {bias, mean}, stat_meta);
    std::string bias_name = fused_name(
        bias.is_none() ? bias_path(weight_path)
                       : bias.to_node()->target().str());
    Node* b = call("aten::mul.Tensor", {shifted, scale}, stat_meta,
                   beta.is_none() ? bias_name : "");
    if (!beta.is_none()) {
      b = call("aten::add.Tensor", {b, beta}, stat_meta, bias_name);
    }
    created_.push_back(w);
    created_.push_back(b);
    return {w, b};
  }

  bool fuse_convolution(Node* conv, Node* bn,
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
    if (transposed) {
      const Argument& groups = argument(*conv, full, "groups");
      if (!groups.is_int() || groups.to_int() != 1) return false;
    }
    Fused fused =
        fused_parameters(bn_args, bn, weight, bias, transposed ? 1 : 0);
    set_argument(conv, &full, "weight", fused.weight);
    set_argument(conv, &full, "bias", fused.bias);
    store(conv, std::move(full));
    return true;
  }

  // aten::linear(input, weight, bias)
  bool fuse_linear(Node* linear, Node* bn,
                   const std::vector<Argument>& bn_args) {
    std::vector<Argument> full =
        full_arguments(*linear, linear->target().op().schema());
    const Argument& weight = argument(*linear, full, "weight");
    const Argument& bias = argument(*linear, full, "bias");
    if (!weight.is_node() || weight.to_node()->op() != Opcode::kGetAttr ||
        !is_attribute_or_none(bias)) {
      return false;
    }
    Fused fused = fused_parameters(bn_args, bn, weight, bias, 0);
    set_argument(linear, &full, "weight", fused.weight);
    set_argument(linear, &full, "bias", fused.bias);
    store(linear, std::move(full));
    return true;
  }

  // aten::addmm(bias, input, t(weight)) with alpha = beta = 1, as C++
  // F::linear traces for 2-D inputs.
  bool fuse_addmm(Node* addmm, Node* bn,
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
        !is_attribute_or_none(bias)) {
      return false;
    }
    const Argument& weight = transposed.to_node()->args().at(0);
    if (!weight.is_node() || weight.to_node()->op() != Opcode::kGetAttr) {
      return false;
    }
    Fused fused = fused_parameters(bn_args, bn, weight, bias, 0);
    Node* t;
    {
      auto guard = graph_.inserting_before(bn);
      TensorMeta t_meta = meta_of(weight);
      std::swap(t_meta.sizes[0], t_meta.sizes[1]);
      std::swap(t_meta.strides[0], t_meta.strides[1]);
      t_meta.memory_format = memory_format_of(t_meta.sizes, t_meta.strides);
      t = call("aten::t", {fused.weight}, t_meta);
    }
    created_.push_back(t);
    set_argument(addmm, &full, "self", fused.bias);
    set_argument(addmm, &full, "mat2", t);
    store(addmm, std::move(full));
    return true;
  }

  GraphModuleImpl& module_;
  Graph& graph_;
  std::vector<const Node*> created_;
};

}  // namespace

bool fuse_conv_bn(GraphModuleImpl& module) { return Fuser(module).run(); }

}  // namespace fx
