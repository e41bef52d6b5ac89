#include "onnx/to_onnx.h"

#include <fstream>
#include <map>
#include <mutex>
#include <ostream>
#include <sstream>
#include <utility>

#include <onnx/checker.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/hash/hash.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "fx/io/internal/files.h"
#include "fx/ir/control_flow.h"
#include "fx/ir/data_dependent.h"
#include "fx/ir/errors.h"
#include "fx/ir/function.h"
#include "fx/runtime/guards.h"
#include "interpreter/shape_prop.h"
#include "onnx/internal/operators.h"
#include "passes/aliasing.h"
#include "passes/decompose.h"
#include "passes/pass_manager.h"

namespace fx {
namespace {

constexpr int64_t kIrVersion = 8;  // ONNX 1.12's newest, as opset 17

struct Registry {
  std::mutex mutex;
  std::map<std::string, OnnxMapping, std::less<>> mappings;
};

Registry& registry() {
  static Registry* r = [] {
    auto* r = new Registry;
    internal::add_operator_mappings(&r->mappings);
    return r;
  }();
  return *r;
}

// "aten::mul_.Scalar" -> "aten::mul.Scalar": an in-place operator's
// functional form; "" for an operator whose name does not end in '_'.
std::string functional_form(const std::string& target) {
  const size_t dot = target.find('.');
  const std::string name = target.substr(0, dot);
  if (name.size() < 2 || name.back() != '_' || name[name.size() - 2] == '_') return "";
  return name.substr(0, name.size() - 1) +
         (dot == std::string::npos ? "" : target.substr(dot));
}

// The registered mapping of `target` ("aten::add.Tensor", else "aten::add"),
// else its functional form's (an in-place operator maps as its functional
// form; to_onnx checks that nothing reads the written input afterwards),
// or nullptr.
OnnxMapping find_mapping(const std::string& target) {
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    auto it = r.mappings.find(target);
    if (it == r.mappings.end()) {
      const size_t dot = target.find('.');
      if (dot != std::string::npos) it = r.mappings.find(target.substr(0, dot));
    }
    if (it != r.mappings.end()) return it->second;
  }
  const std::string functional = functional_form(target);
  return functional.empty() ? nullptr : find_mapping(functional);
}

int32_t element_type(c10::ScalarType dtype) {
  std::optional<int32_t> type = internal::onnx_element_type(dtype);
  if (!type) {
    throw GraphError(absl::StrCat("to_onnx: tensors of dtype ", c10::toString(dtype),
                                  " have no ONNX element type"));
  }
  return *type;
}

// Where a node came from, for errors: its module path, if known.
std::string origin(const Node& node) {
  const std::string* path = node.meta().get(kModulePath);
  return path ? absl::StrCat(" (from module '", *path, "')") : std::string();
}

std::string describe(const Node& node) {
  return absl::StrCat("node %", node.name(), " (", node.format_node(), ")",
                      origin(node));
}

void set_value_info(onnx::ValueInfoProto* info, const std::string& name,
                    const TensorMeta& meta, bool with_shape = true) {
  info->set_name(name);
  auto* tensor = info->mutable_type()->mutable_tensor_type();
  tensor->set_elem_type(element_type(meta.dtype));
  if (!with_shape) return;  // (an empty shape would say rank 0)
  auto* shape = tensor->mutable_shape();
  for (int64_t size : meta.sizes) shape->add_dim()->set_dim_value(size);
}

void set_tensor_data(onnx::TensorProto* proto, const std::string& name,
                     const at::Tensor& tensor) {
  at::Tensor t = tensor.detach().contiguous().cpu();
  proto->set_name(name);
  proto->set_data_type(element_type(t.scalar_type()));
  for (int64_t size : t.sizes()) proto->add_dims(size);
  proto->set_raw_data(t.data_ptr(), t.numel() * t.element_size());
}

class Exporter : public OnnxBuilder {
 public:
  Exporter(const GraphModuleImpl& module, const OnnxOptions& options)
      : module_(module), options_(options) {}

  onnx::ModelProto run() {
    if (options_.opset != 17) {
      throw GraphError(absl::StrCat("to_onnx: opset ", options_.opset,
                                    " is not supported: use 17"));
    }
    if (module_.traced_training().value_or(false)) {
      throw GraphError(
          "to_onnx: the GraphModule was traced in training mode (dropout and "
          "batch-norm statistics as in training): call eval() on the model "
          "before tracing it to export it (an ONNX model is for inference, "
          "as torch.onnx exports in eval mode)");
    }
    // Sizes that vary: the dynamic dimensions', and those an operator takes
    // from data (nonzero's rows, ...).
    bool data_dependent = false;
    for (const Graph* g : module_.graph().all_graphs()) {
      for (const Node* n : g->nodes()) {
        data_dependent = data_dependent || returns_data_dependent_size(*n);
      }
    }
    if (data_dependent || !dynamic_symbols(module_.graph()).empty()) {
      find_varying_dimensions();
    }
    onnx::ModelProto model;
    model.set_ir_version(kIrVersion);
    model.set_producer_name("fx for LibTorch");
    model.set_producer_version("0.1.0");
    auto* opset = model.add_opset_import();
    opset->set_domain("");
    opset->set_version(options_.opset);
    graph_ = model.mutable_graph();
    main_ = graph_;
    graph_->set_name("fx_graph");
    for (const Node* n : module_.graph().nodes()) {
      taken_.insert(n->name());
    }
    for (const Node* n : module_.graph().nodes()) export_node(*n);
    if (!size_checks_.empty()) {
      // ONNX has no assertion: the relations the graph checks are stated
      // beside the model, for a runtime or its caller to hold.
      onnx::StringStringEntryProto* entry = model.add_metadata_props();
      entry->set_key("fx_guard.check_size");
      entry->set_value(absl::StrJoin(size_checks_, "\n"));
    }
    check(model);
    return model;
  }

  // --- OnnxBuilder ----------------------------------------------------------

  bool varies(const Node& node, int64_t dim) const override {
    auto it = varying_.find(node.name());
    return it != varying_.end() && dim >= 0 &&
           dim < static_cast<int64_t>(it->second.size()) && it->second[dim];
  }

  std::string value(const Argument& argument, int32_t type) override {
    if (argument.is_node()) {
      auto it = names_.find(argument.to_node());
      if (float_context_ && quantized_.contains(argument.to_node())) {
        return dequantized(argument);
      }
      if (it == names_.end() && argument.to_node()->op() == Opcode::kGetAttr &&
          !module_.has_tensor_attribute(argument.to_node()->target().str())) {
        throw GraphError(absl::StrCat(
            "to_onnx: ", describe(*node_), " reads script object '",
            argument.to_node()->target().str(),
            "' as a value: only tensors become initializers"));
      }
      if (it == names_.end() && argument.to_node()->op() == Opcode::kGetAttr) {
        // An attribute becomes an initializer when something reads it as
        // it is (a mapping may read a rearranged copy instead).
        const Node* attribute = argument.to_node();
        it = names_.emplace(attribute, exported_attribute(attribute->target().str()))
                 .first;
      }
      if (it == names_.end()) {
        throw GraphError(absl::StrCat("to_onnx: ", describe(*node_),
                                      " reads %", argument.to_node()->name(),
                                      ", which has no ONNX value"));
      }
      return it->second;
    }
    using onnx::TensorProto;
    if (argument.is_int() || argument.is_bool() || argument.is_double()) {
      if (type == 0) {
        type = argument.is_double() ? TensorProto::FLOAT
               : argument.is_bool() ? TensorProto::BOOL
                                    : TensorProto::INT64;
      }
      // Ints stay int64 until cast (a double would round large ones).
      at::Tensor t = argument.is_double()
                         ? at::scalar_tensor(argument.to_double(), at::kDouble)
                     : argument.is_bool()
                         ? at::scalar_tensor(int64_t{argument.to_bool()}, at::kLong)
                         : at::scalar_tensor(argument.to_int(), at::kLong);
      switch (type) {
        case TensorProto::FLOAT: t = t.to(at::kFloat); break;
        case TensorProto::DOUBLE: t = t.to(at::kDouble); break;
        case TensorProto::INT64: t = t.to(at::kLong); break;
        case TensorProto::INT32: t = t.to(at::kInt); break;
        case TensorProto::BOOL: t = t.to(at::kBool); break;
        default:
          throw GraphError(absl::StrCat("to_onnx: ", describe(*node_),
                                        ": no constant of ONNX element type ",
                                        type));
      }
      return initializer(absl::StrCat(node_->name(), "_constant"), t);
    }
    if (argument.is_list() && argument.contains_node()) {
      // Sizes the graph computes (view(x, [%B, -1])): one int64 each,
      // concatenated.
      std::vector<std::string> pieces;
      for (const Argument& e : argument.elements()) {
        if (e.is_int()) {
          pieces.push_back(int64s({e.to_int()}, /*scalar=*/false));
          continue;
        }
        if (!e.is_node() || !is_sym_call(*e.to_node())) {
          throw GraphError(absl::StrCat("to_onnx: ", describe(*node_),
                                        ": a list of sizes holds ", e.to_string(),
                                        ", not a size the graph computes"));
        }
        const std::string one = fresh(e.to_node()->name() + "_1d");
        add("Unsqueeze", std::vector<std::string>{value(e, 0), int64s({0}, false)}, one);
        pieces.push_back(one);
      }
      const std::string list = fresh(node_->name() + "_sizes");
      onnx::NodeProto& concat = add("Concat", pieces, list);
      auto* a = concat.add_attribute();
      a->set_name("axis");
      a->set_type(onnx::AttributeProto::INT);
      a->set_i(0);
      return list;
    }
    if (argument.is_list()) {
      std::vector<int64_t> ints;
      for (const Argument& e : argument.elements()) {
        if (!e.is_int()) {
          throw GraphError(absl::StrCat("to_onnx: ", describe(*node_),
                                        ": a list argument that is not of "
                                        "ints has no ONNX constant"));
        }
        ints.push_back(e.to_int());
      }
      return int64s(ints, /*scalar=*/false);
    }
    throw GraphError(absl::StrCat("to_onnx: ", describe(*node_), ": argument ",
                                  argument.to_string(),
                                  " has no ONNX value"));
  }

  std::string int64s(const std::vector<int64_t>& values, bool scalar) override {
    at::Tensor t = at::tensor(values, at::kLong);
    if (scalar) t = t.reshape({});
    return initializer(absl::StrCat(node_->name(), "_ints"), t);
  }

  std::string tensor(const std::string& base, const at::Tensor& t) override {
    return initializer(base, t);
  }

  std::optional<at::Tensor> constant(const Argument& argument) override {
    const std::string* path = attribute_path(argument);
    if (path == nullptr || !module_.has_tensor_attribute(*path)) {
      return std::nullopt;
    }
    return module_.fetch_attr(*path);
  }

  std::optional<c10::IValue> object(const Argument& argument) override {
    const std::string* path = attribute_path(argument);
    if (path == nullptr || !module_.has_object_attribute(*path)) {
      return std::nullopt;
    }
    return module_.fetch_attribute(*path);
  }

  // The module attribute `argument` reads (a get_attr node), or nullptr.
  static const std::string* attribute_path(const Argument& argument) {
    if (!argument.is_node()) return nullptr;
    const Node* n = argument.to_node();
    return n->op() == Opcode::kGetAttr ? &n->target().str() : nullptr;
  }

  std::optional<QParams> qparams(const Argument& argument) override {
    if (!argument.is_node()) return std::nullopt;
    auto it = quantized_.find(argument.to_node());
    if (it == quantized_.end()) return std::nullopt;
    return it->second;
  }

  std::string dequantized(const Argument& argument) override {
    std::optional<QParams> q = qparams(argument);
    if (!q) {
      throw GraphError(absl::StrCat("to_onnx: ", describe(*node_), " reads %",
                                    argument.is_node() ? argument.to_node()->name() : "?",
                                    " as a quantized tensor, which it is not"));
    }
    const Node* n = argument.to_node();
    auto it = dequantized_.find(n);
    if (it != dequantized_.end()) return it->second;
    const std::string name = fresh(n->name() + "_dequantized");
    const bool saved = float_context_;
    float_context_ = false;
    add("DequantizeLinear",
        std::vector<std::string>{value(argument, 0), scales({q->scale}),
                                 zero_points({q->zero_point}, q->is_signed)},
        name);
    float_context_ = saved;
    dequantized_.emplace(n, name);
    return name;
  }

  void quantize_output(const std::string& value, const QParams& q) override {
    add("QuantizeLinear",
        std::vector<std::string>{value, scales({q.scale}),
                                 zero_points({q.zero_point}, q.is_signed)},
        output_);
    output_qparams_ = q;
  }

  std::string scales(const std::vector<double>& values) override {
    at::Tensor t = at::tensor(values, at::kDouble).to(at::kFloat);
    if (values.size() == 1) t = t.reshape({});
    return initializer(node_->name() + "_scale", t);
  }

  std::string zero_points(const std::vector<int64_t>& values, bool is_signed) override {
    at::Tensor t = at::tensor(values, at::kLong).to(is_signed ? at::kChar : at::kByte);
    if (values.size() == 1) t = t.reshape({});
    return initializer(node_->name() + "_zero_point", t);
  }

  std::string floats(const std::vector<float>& values, bool scalar) override {
    at::Tensor t = at::tensor(values, at::kFloat);
    if (scalar) t = t.reshape({});
    return initializer(absl::StrCat(node_->name(), "_floats"), t);
  }

  onnx::NodeProto& add(const std::string& op_type,
                       const std::vector<std::string>& inputs,
                       const std::string& output) override {
    onnx::NodeProto* n = graph_->add_node();
    n->set_op_type(op_type);
    n->set_name(fresh(node_->name() + "_" + op_type));
    for (const std::string& input : inputs) n->add_input(input);
    n->add_output(output);
    return *n;
  }

  onnx::NodeProto& add(const std::string& op_type,
                       const std::vector<std::string>& inputs,
                       const std::vector<std::string>& outputs) override {
    onnx::NodeProto& n = add(op_type, inputs, outputs.at(0));
    for (size_t i = 1; i < outputs.size(); ++i) n.add_output(outputs[i]);
    return n;
  }

  void set_outputs(std::vector<std::string> elements) override {
    elements_ = std::move(elements);
  }

  std::string fresh(std::string_view base) override {
    std::string name(base);
    for (int i = 1; taken_.contains(name); ++i) {
      name = absl::StrCat(std::string(base), "_", i);
    }
    taken_.insert(name);
    return name;
  }

  const GraphModuleImpl& module() const override { return module_; }
  const Node& node() const override { return *node_; }
  const std::string& output() const override { return output_; }

 private:
  void export_node(const Node& n) {
    node_ = &n;
    visited_.insert(&n);
    switch (n.op()) {
      case Opcode::kPlaceholder: {
        const TensorMeta* meta = n.tensor_meta();
        if (meta == nullptr) {
          throw GraphError(absl::StrCat(
              "to_onnx: input ", describe(n),
              " is not a tensor (or has no tensor metadata): ONNX inputs are "
              "tensors; trace with tensor inputs"));
        }
        onnx::ValueInfoProto* input = graph_->add_input();
        set_value_info(input, n.name(), *meta);
        if (const InputGuard* guard = n.meta().get(kGuard)) {
          auto* shape = input->mutable_type()->mutable_tensor_type()->mutable_shape();
          for (const DynamicDim& d : guard->dynamic) {
            shape->mutable_dim(static_cast<int>(d.dim))->set_dim_param(d.symbol);
          }
        }
        names_[&n] = n.name();
        return;
      }
      case Opcode::kGetAttr: {
        return;  // exported where it is read (value(), object())
      }
      case Opcode::kCallFunction:
        export_call(n);
        return;
      case Opcode::kCallModule:
        throw GraphError(absl::StrCat(
            "to_onnx: ", describe(n), " calls leaf module '",
            n.target().str(),
            "', which is C++ code ONNX cannot hold: trace through it, or "
            "register a mapping for it with fx::register_onnx_mapping"));
      case Opcode::kCallMethod:
        throw GraphError(absl::StrCat(
            "to_onnx: ", describe(n),
            " is a call_method: run fx::normalize_args first, which turns "
            "method calls into operator calls"));
      case Opcode::kOutput:
        export_output(n.args()[0]);
        return;
    }
  }

  // The initializer of a tensor attribute, added once.
  std::string exported_attribute(const std::string& path) {
    auto it = attributes_.find(path);
    if (it != attributes_.end()) return it->second;
    std::string name = initializer(path, module_.fetch_attr(path));
    attributes_.emplace(path, name);
    return name;
  }

  // An initializer holding `tensor`, named `base` (made unique), or the
  // one already holding the same values (type, shape and bytes): as
  // torch.onnx does, a model stores each distinct tensor once.
  std::string initializer(const std::string& base, const at::Tensor& tensor) {
    onnx::TensorProto proto;
    set_tensor_data(&proto, "", tensor);
    const size_t key = absl::HashOf(proto.data_type(), proto.raw_data(),
                                    std::vector<int64_t>(proto.dims().begin(),
                                                         proto.dims().end()));
    // In the main graph, which every body of control flow sees.
    onnx::GraphProto* graph = main_;
    for (int index : by_contents_[key]) {
      const onnx::TensorProto& other = graph->initializer(index);
      if (other.data_type() == proto.data_type() &&
          std::equal(other.dims().begin(), other.dims().end(),
                     proto.dims().begin(), proto.dims().end()) &&
          other.raw_data() == proto.raw_data()) {
        return other.name();
      }
    }
    proto.set_name(taken_.contains(base) ? fresh(base) : base);
    taken_.insert(proto.name());
    by_contents_[key].push_back(graph->initializer_size());
    *graph->add_initializer() = std::move(proto);
    return graph->initializer(graph->initializer_size() - 1).name();
  }

  void export_call(const Node& n) {
    const std::string target = n.target().to_string();
    if (n.target().is_function() && n.target().function().name() == "dict" &&
        n.args().size() == 2 && n.args()[0].is_list() && n.args()[1].is_list()) {
      // A dict of outputs (segmentation models' {"out": ...}): its values
      // become outputs named after their keys.
      std::vector<std::pair<std::string, Argument>> items;
      const auto& keys = n.args()[0].elements();
      const auto& values = n.args()[1].elements();
      for (size_t i = 0; i < keys.size() && i < values.size(); ++i) {
        if (!keys[i].is_string()) break;
        items.emplace_back(keys[i].to_string_ref(), values[i]);
      }
      if (items.size() == keys.size() && keys.size() == values.size()) {
        dicts_[&n] = std::move(items);
        return;
      }
    }
    if (n.target().is_function() && n.target().function().name() == "getitem") {
      // An element of a mapped node's tuple: its ONNX value, no node.
      const Argument& of = n.args().at(0);
      auto it = of.is_node() ? sequences_.find(of.to_node()) : sequences_.end();
      const Argument& index = n.args().at(1);
      if (it == sequences_.end() || !index.is_int() || index.to_int() < 0 ||
          index.to_int() >= static_cast<int64_t>(it->second.size())) {
        throw GraphError(absl::StrCat("to_onnx: ", describe(n),
                                      " reads an element of a value that is "
                                      "not a mapped tuple of tensors"));
      }
      names_[&n] = it->second[index.to_int()];
      return;
    }
    if (is_sym_call(n)) {
      export_size(n);
      return;
    }
    if (is_control_flow_call(n)) {
      export_control_flow(n);
      return;
    }
    if (target == "fx_guard::check_length") {
      // The number of tensors a split returns: fixed in an ONNX model,
      // whose shapes are the example's.
      return;
    }
    if (target == "aten::_assert_tensor_metadata") {
      // torch.export's check of a value's dtype, device and layout: an
      // ONNX value's type is fixed, so the file holds it if the graph's
      // metadata does (ShapeProp's, from a run).
      const TensorMeta* meta = n.args().empty() || !n.args()[0].is_node()
                                   ? nullptr
                                   : n.args()[0].to_node()->tensor_meta();
      for (const auto& [name, value] : n.kwargs()) {
        if (name != "dtype" || value.is_none()) continue;
        if (meta == nullptr || !value.is_dtype() ||
            value.to_dtype() != meta->dtype) {
          throw GraphError(absl::StrCat("to_onnx: ", describe(n), " asserts a "
                                        "dtype its input's metadata does not have"));
        }
      }
      return;
    }
    if (target == "fx_guard::check_size") {
      // A relation of sizes that held while tracing (a TorchScript assert
      // or branch on a size): no ONNX operator asserts, so the file states
      // it in its metadata (fx_guard.check_size) instead.
      const Argument& what = n.args().at(3);
      size_checks_.push_back(what.is_string() ? what.to_string_ref()
                                              : n.format_node());
      return;
    }
    OnnxMapping mapping = find_mapping(target);
    check_in_place(n);
    if (!mapping) {
      throw GraphError(absl::StrCat(
          "to_onnx: ", describe(n), " calls ", target,
          ", which has no ONNX mapping",
          n.target().is_function()
              ? " (a wrapped function is C++ code ONNX cannot hold)"
              : "",
          ": register one with fx::register_onnx_mapping"));
    }
    // A body's node gets a name no other graph of the model has.
    output_ = &n.graph() == &module_.graph() ? n.name() : fresh(n.name());
    elements_.clear();
    output_qparams_.reset();
    // An operator that runs on quantized tensors as they come (pooling,
    // reshapes, relu, ...): its float mapping between DequantizeLinear and
    // QuantizeLinear, the output keeping its input's quantization (or the
    // fixed one libtorch's kernels give sigmoid and tanh).
    std::optional<QParams> passes_through;
    // (Not the int8 operators, which set their output's quantization.)
    if (!n.is_call_to({"aten::dequantize.self", "aten::dequantize.tensors",
                       "fx_onednn::qconv", "fx_onednn::qconv_add_",
                       "fx_onednn::qactivation", "fx_onednn::qmul_channels",
                       "fx_onednn::qmean_channels"}) &&
        !absl::StartsWith(target, "quantized::")) {
      for (const Node* input : n.all_input_nodes()) {
        auto q = quantized_.find(input);
        if (q != quantized_.end()) {
          passes_through = q->second;
          break;
        }
      }
    }
    if (passes_through) {
      if (n.is_call_to({"aten::sigmoid", "aten::sigmoid_", "aten::hardsigmoid",
                        "aten::hardsigmoid_"})) {
        passes_through = QParams{1.0 / 256, 0, false};
      } else if (n.is_call_to({"aten::tanh", "aten::tanh_"})) {
        passes_through = QParams{2.0 / 256, 128, false};
      }
      output_ = fresh(n.name() + "_float");
      float_context_ = true;
    }
    const int before = graph_->node_size();
    try {
      mapping(*this);
      float_context_ = false;
      if (passes_through && elements_.empty()) {
        const std::string float_value = output_;
        output_ = n.name();
        quantize_output(float_value, *passes_through);
      }
    } catch (const GraphError&) {
      float_context_ = false;
      throw;
    } catch (const std::exception& e) {
      float_context_ = false;
      throw GraphError(absl::StrCat("to_onnx: ", describe(n), ": ", e.what()));
    }
    if (output_qparams_) quantized_[&n] = *output_qparams_;
    if (!elements_.empty()) {
      sequences_[&n] = elements_;
      return;
    }
    const bool produced =
        graph_->node_size() > before &&
        graph_->node(graph_->node_size() - 1).output_size() > 0 &&
        graph_->node(graph_->node_size() - 1).output(0) == output_;
    if (!produced) {
      throw GraphError(absl::StrCat("to_onnx: the mapping of ", target,
                                    " did not produce the value of ",
                                    describe(n)));
    }
    names_[&n] = output_;
  }

  // --- Control flow ---------------------------------------------------------

  // The nodes of `body` into the graph being written, its placeholders
  // standing for `inputs` (names of values the body sees: ONNX's outer
  // scope, or the Loop body's own inputs); returns its outputs' names.
  std::vector<std::string> export_body(const Graph& body,
                                       const std::vector<std::string>& inputs) {
    const std::vector<Node*> placeholders = body.placeholders();
    if (placeholders.size() != inputs.size()) {
      throw GraphError(absl::StrCat("to_onnx: ", describe(*node_),
                                    ": a body takes ", placeholders.size(),
                                    " inputs and is given ", inputs.size()));
    }
    for (size_t i = 0; i < inputs.size(); ++i) names_[placeholders[i]] = inputs[i];
    const Node& caller = *node_;
    std::vector<std::string> outputs;
    for (const Node* b : body.nodes()) {
      if (b->op() == Opcode::kPlaceholder) continue;
      if (b->op() == Opcode::kOutput) {
        node_ = b;
        const Argument& out = b->args().at(0);
        for (const Argument& e :
             out.is_sequence() ? out.elements() : std::vector<Argument>{out}) {
          outputs.push_back(value(e, 0));
        }
        continue;
      }
      export_node(*b);
    }
    node_ = &caller;
    return outputs;
  }

  // Ends a body's GraphProto: each output an Identity of `values` (ORT
  // wants a subgraph's outputs made in it), typed by `like`'s metadata (its
  // shape too, where no dimension of the graph varies: a loop's carried
  // values keep theirs, a cond's branches agree).
  void end_body(onnx::GraphProto* body, const std::vector<std::string>& values,
                const std::vector<TensorMeta>& like) {
    for (size_t i = 0; i < values.size(); ++i) {
      const std::string name = fresh(absl::StrCat(body->name(), "_out", i));
      add("Identity", std::vector<std::string>{values[i]}, name);
      set_value_info(body->add_output(), name, like.at(i), varying_.empty());
    }
  }

  // A one-element tensor's truth as ONNX's bool condition.
  std::string condition(const std::string& value) {
    const std::string out = fresh(node_->name() + "_condition");
    add("Cast", std::vector<std::string>{value}, out)
        .add_attribute()
        ->CopyFrom(int_attribute("to", onnx::TensorProto::BOOL));
    return out;
  }

  static onnx::AttributeProto int_attribute(const std::string& name, int64_t v) {
    onnx::AttributeProto a;
    a.set_name(name);
    a.set_type(onnx::AttributeProto::INT);
    a.set_i(v);
    return a;
  }

  static TensorMeta scalar_meta(c10::ScalarType dtype) {
    TensorMeta meta;
    meta.dtype = dtype;
    return meta;
  }

  // The node's outputs' metadata: its own, or its getitems' (a .pt2
  // program's).
  static std::vector<TensorMeta> metas_of(const Node& n) {
    if (const auto* list = n.meta().get(kTensorMetaList)) return *list;
    std::vector<std::optional<TensorMeta>> found;
    for (const Node* user : n.users()) {
      if (!user->target().is_function() || &user->target().function() != getitem() ||
          user->args().size() != 2 || !user->args()[1].is_int() ||
          user->tensor_meta() == nullptr) {
        continue;
      }
      const int64_t i = user->args()[1].to_int();
      if (i < 0 || i > 4096) continue;
      if (found.size() <= static_cast<size_t>(i)) found.resize(i + 1);
      found[i] = *user->tensor_meta();
    }
    std::vector<TensorMeta> out;
    for (const auto& m : found) {
      if (!m) {
        throw GraphError(absl::StrCat(
            "to_onnx: ", describe(n), " has no tensor metadata for its "
            "outputs (run fx::ShapeProp first)"));
      }
      out.push_back(*m);
    }
    return out;
  }

  // cond as If (a subgraph per branch, reading the operands from the outer
  // scope); scan and map as Scan (export_scan); while_loop as Loop, its condition computed before the loop and
  // again at the end of each iteration. ONNX asserts nothing: that a loop
  // keeps its carried values' sizes is the graph's check, not the file's.
  void export_control_flow(const Node& n) {
    const std::vector<const Graph*> bodies = bodies_of(n);
    const std::vector<TensorMeta> metas = metas_of(n);
    auto values_of = [&](const Argument& list) {
      std::vector<std::string> out;
      for (const Argument& e : list.elements()) out.push_back(value(e, 0));
      return out;
    };
    onnx::GraphProto* outer = graph_;
    std::vector<std::string> outputs;
    for (size_t i = 0; i < metas.size(); ++i) {
      outputs.push_back(fresh(absl::StrCat(n.name(), "_", i)));
    }
    if (&n.target().function() == cond_function()) {
      const std::string pred = condition(value(n.args().at(0), 0));
      const std::vector<std::string> operands = values_of(n.args().at(3));
      onnx::GraphProto branches[2];
      for (int b = 0; b < 2; ++b) {
        branches[b].set_name(fresh(absl::StrCat(n.name(), b == 0 ? "_then" : "_else")));
        graph_ = &branches[b];
        end_body(graph_, export_body(*bodies[b], operands), metas);
        graph_ = outer;
      }
      onnx::NodeProto& node = add("If", std::vector<std::string>{pred}, outputs);
      for (int b = 0; b < 2; ++b) {
        onnx::AttributeProto* a = node.add_attribute();
        a->set_name(b == 0 ? "then_branch" : "else_branch");
        a->set_type(onnx::AttributeProto::GRAPH);
        *a->mutable_g() = std::move(branches[b]);
      }
    } else if (&n.target().function() == scan_function() ||
               &n.target().function() == map_function()) {
      export_scan(n, *bodies[0], metas, outputs);
    } else {
      const std::vector<std::string> carried = values_of(n.args().at(2));
      const std::vector<std::string> additional = values_of(n.args().at(3));
      auto with_additional = [&](std::vector<std::string> values) {
        values.insert(values.end(), additional.begin(), additional.end());
        return values;
      };
      const std::string first =
          condition(export_body(*bodies[0], with_additional(carried)).at(0));
      onnx::GraphProto body;
      body.set_name(fresh(n.name() + "_body"));
      graph_ = &body;
      const std::string iteration = fresh(n.name() + "_iteration");
      set_value_info(body.add_input(), iteration, scalar_meta(c10::ScalarType::Long));
      const std::string keep_going = fresh(n.name() + "_keep_going");
      set_value_info(body.add_input(), keep_going, scalar_meta(c10::ScalarType::Bool));
      std::vector<std::string> current;
      for (size_t i = 0; i < carried.size(); ++i) {
        current.push_back(fresh(absl::StrCat(n.name(), "_carried", i)));
        set_value_info(body.add_input(), current.back(), metas.at(i),
                       varying_.empty());
      }
      const std::vector<std::string> next =
          export_body(*bodies[1], with_additional(current));
      const std::string again =
          condition(export_body(*bodies[0], with_additional(next)).at(0));
      std::vector<std::string> body_outputs = {again};
      body_outputs.insert(body_outputs.end(), next.begin(), next.end());
      std::vector<TensorMeta> body_metas = {scalar_meta(c10::ScalarType::Bool)};
      body_metas.insert(body_metas.end(), metas.begin(), metas.end());
      end_body(graph_, body_outputs, body_metas);
      graph_ = outer;
      std::vector<std::string> inputs = {"", first};
      inputs.insert(inputs.end(), carried.begin(), carried.end());
      onnx::NodeProto& node = add("Loop", inputs, outputs);
      onnx::AttributeProto* a = node.add_attribute();
      a->set_name("body");
      a->set_type(onnx::AttributeProto::GRAPH);
      *a->mutable_g() = std::move(body);
    }
    sequences_[&n] = outputs;
  }

  // scan and map as Scan over dimension 0 of the xs: the carried values
  // are its state variables, the ys its scan outputs; the body reads the
  // additional values from the outer scope.
  void export_scan(const Node& n, const Graph& body_graph,
                   const std::vector<TensorMeta>& metas,
                   const std::vector<std::string>& outputs) {
    const bool is_scan = &n.target().function() == scan_function();
    auto list = [&](size_t i) {
      std::vector<std::string> names;
      std::vector<TensorMeta> element_metas;
      for (const Argument& e : n.args().at(i).elements()) {
        names.push_back(value(e, 0));
        const TensorMeta* m = e.is_node() ? e.to_node()->tensor_meta() : nullptr;
        if (m == nullptr) {
          throw GraphError(absl::StrCat("to_onnx: ", describe(n), " reads a "
                                        "value without tensor metadata (run "
                                        "fx::ShapeProp first)"));
        }
        element_metas.push_back(*m);
      }
      return std::pair{names, element_metas};
    };
    auto [init, init_metas] = is_scan ? list(1)
                                      : std::pair<std::vector<std::string>,
                                                  std::vector<TensorMeta>>{};
    auto [xs, xs_metas] = list(is_scan ? 2 : 1);
    const std::vector<std::string> additional = list(is_scan ? 3 : 2).first;
    // A slice: the metadata without dimension 0.
    auto slice = [](TensorMeta m) {
      if (!m.sizes.empty()) m.sizes.erase(m.sizes.begin());
      if (!m.strides.empty()) m.strides.erase(m.strides.begin());
      m.symbolic_sizes.clear();
      m.symbolic_strides.clear();
      return m;
    };
    onnx::GraphProto* outer = graph_;
    onnx::GraphProto body;
    body.set_name(fresh(n.name() + "_body"));
    graph_ = &body;
    std::vector<std::string> inputs;
    for (size_t i = 0; i < init.size(); ++i) {
      inputs.push_back(fresh(absl::StrCat(n.name(), "_carried", i)));
      set_value_info(body.add_input(), inputs.back(), metas.at(i),
                     varying_.empty());
    }
    for (size_t i = 0; i < xs.size(); ++i) {
      inputs.push_back(fresh(absl::StrCat(n.name(), "_x", i)));
      set_value_info(body.add_input(), inputs.back(), slice(xs_metas[i]),
                     varying_.empty());
    }
    inputs.insert(inputs.end(), additional.begin(), additional.end());
    const std::vector<std::string> out = export_body(body_graph, inputs);
    std::vector<TensorMeta> body_metas;
    for (size_t i = 0; i < metas.size(); ++i) {
      body_metas.push_back(i < init.size() ? metas[i] : slice(metas[i]));
    }
    end_body(graph_, out, body_metas);
    graph_ = outer;
    std::vector<std::string> node_inputs = init;
    node_inputs.insert(node_inputs.end(), xs.begin(), xs.end());
    onnx::NodeProto& node = add("Scan", node_inputs, outputs);
    onnx::AttributeProto* g = node.add_attribute();
    g->set_name("body");
    g->set_type(onnx::AttributeProto::GRAPH);
    *g->mutable_g() = std::move(body);
    onnx::AttributeProto* count = node.add_attribute();
    count->set_name("num_scan_inputs");
    count->set_type(onnx::AttributeProto::INT);
    count->set_i(static_cast<int64_t>(xs.size()));
  }

  // A size the graph computes (dynamic dimensions), as an int64 scalar:
  // sym_size as Shape and Gather, sym_add / sym_mul as Add and Mul, and
  // sym_floordiv(a, b) as Div(a - Mod(a, b), b): ONNX's Div truncates, and
  // a fitted offset can make the numerator negative ((T - 5)//2 at T = 2
  // is -2, Div -1); Mod takes the divisor's sign, as Python's %.
  void export_size(const Node& n) {
    const std::string name = fresh(n.name());
    const std::string& function = n.target().function().name();
    if (function == "sym_size") {
      const std::string shape = fresh(n.name() + "_shape");
      add("Shape", std::vector<std::string>{value(n.args().at(0), 0)}, shape);
      add("Gather",
          std::vector<std::string>{shape, int64s({n.args().at(1).to_int()}, true)},
          name);
    } else if (function == "sym_floordiv") {
      const std::string a = value(n.args().at(0), onnx::TensorProto::INT64);
      const std::string b = value(n.args().at(1), onnx::TensorProto::INT64);
      const std::string remainder = fresh(n.name() + "_mod");
      const std::string multiple = fresh(n.name() + "_multiple");
      add("Mod", std::vector<std::string>{a, b}, remainder);
      add("Sub", std::vector<std::string>{a, remainder}, multiple);
      add("Div", std::vector<std::string>{multiple, b}, name);
    } else {
      // sym_mod as Mod (fmod 0: the divisor's sign, as Python's %).
      const char* op = function == "sym_add"   ? "Add"
                       : function == "sym_mul" ? "Mul"
                       : function == "sym_mod" ? "Mod" : nullptr;
      if (op == nullptr) {
        throw GraphError(absl::StrCat("to_onnx: ", describe(n), " computes a size by ",
                                      function, ", which has no ONNX mapping"));
      }
      add(op,
          std::vector<std::string>{value(n.args().at(0), onnx::TensorProto::INT64),
                                   value(n.args().at(1), onnx::TensorProto::INT64)},
          name);
    }
    names_[&n] = name;
  }

  // Which dimensions of each value vary with the dynamic ones: ShapeProp's
  // symbolic sizes on a copy run on zeros of the example's shapes (its
  // buffers restored after); a size no function of the symbols explains
  // ("?") varies too.
  void find_varying_dimensions() {
    for (const Node* ph : module_.graph().placeholders()) {
      if (ph->tensor_meta() == nullptr) {
        throw GraphError(absl::StrCat("to_onnx: input ", describe(*ph),
                                      " is not a tensor: ONNX inputs are tensors"));
      }
    }
    std::shared_ptr<GraphModuleImpl> copy = module_.copy();
    copy->eval();
    propagate_symbolic_shapes(GraphModule(copy), "to_onnx");
    for (const Node* n : copy->graph().nodes()) {
      const TensorMeta* meta = n->tensor_meta();
      if (meta == nullptr) continue;
      std::vector<bool>& varies = varying_[n->name()];
      varies.assign(meta->sizes.size(), false);
      for (size_t d = 0; d < meta->symbolic_sizes.size() && d < varies.size(); ++d) {
        varies[d] = !meta->symbolic_sizes[d].is_constant();
      }
    }
  }

  // An operator that writes its input in place maps to its functional form,
  // whose result is a new ONNX value: sound only when nothing reads that
  // storage afterwards but through the write's result (traces read the
  // in-place node, not its input; a write into a view of a tensor that is
  // read again is refused).
  void check_in_place(const Node& n) {
    for (Node* written : written_in_place(n)) {
      Node* root = roots_(written);
      // (Each graph's own: a body's nodes share storage among themselves.)
      auto& sharing = sharing_[&written->graph()];
      if (sharing.empty()) {
        for (Node* m : written->graph().nodes()) sharing[roots_(m)].push_back(m);
      }
      if (&written->graph() != &module_.graph() &&
          root->op() == Opcode::kPlaceholder) {
        // What the enclosing graph reads afterwards would see the write.
        throw GraphError(absl::StrCat(
            "to_onnx: ", describe(n), " writes %", written->name(),
            ", an input of its body of control flow, in place: ONNX values "
            "cannot change (and torch.cond's branches may not mutate their "
            "inputs); write the body out of place"));
      }
      for (const Node* alias : sharing[root]) {
        if (descends_from(alias, &n)) continue;
        for (const Node* user : alias->users()) {
          if (user != &n && !visited_.contains(user)) {
            throw GraphError(absl::StrCat(
                "to_onnx: ", describe(n), " writes %", written->name(),
                " in place, and %", user->name(), " reads ",
                alias == written ? "it" : absl::StrCat("%", alias->name(), ", which shares its storage,"),
                " afterwards: ONNX values cannot change; write the model out of place"));
          }
        }
      }
    }
  }

  // Whether `node`'s value is `write`'s, or a view of it.
  static bool descends_from(const Node* node, const Node* write) {
    for (const Node* n = node; n != nullptr; n = aliased_input(*n)) {
      if (n == write) return true;
    }
    return false;
  }

  // Graph outputs: one name per tensor of the output structure.
  void export_output(const Argument& result) {
    std::vector<std::pair<std::string, const Node*>> leaves;
    collect_outputs(result, "output", &leaves);
    for (const auto& [name, value] : leaves) {
      const TensorMeta* meta = value->tensor_meta();
      if (meta == nullptr) {
        throw GraphError(absl::StrCat(
            "to_onnx: output '", name, "' (%", value->name(),
            ") has no tensor metadata: ONNX outputs are tensors"));
      }
      const std::string source = this->value(Argument(const_cast<Node*>(value)), 0);
      add("Identity", std::vector<std::string>{source}, std::string(name));
      onnx::ValueInfoProto* output = graph_->add_output();
      set_value_info(output, name, *meta);
      std::vector<int64_t> expected = meta->sizes;
      auto* shape = output->mutable_type()->mutable_tensor_type()->mutable_shape();
      for (size_t d = 0; d < expected.size(); ++d) {
        if (!varies(*value, static_cast<int64_t>(d))) continue;
        shape->mutable_dim(static_cast<int>(d))->clear_dim_value();
        expected[d] = -1;  // any: checked against shape inference as unknown
      }
      outputs_.emplace_back(name, expected);
    }
  }

  void collect_outputs(const Argument& a, const std::string& name,
                       std::vector<std::pair<std::string, const Node*>>* out) {
    auto dict = a.is_node() ? dicts_.find(a.to_node()) : dicts_.end();
    if (dict != dicts_.end()) {
      for (const auto& [key, value] : dict->second) {
        collect_outputs(value, absl::StrCat(name, "_", key), out);
      }
    } else if (a.is_node()) {
      out->emplace_back(name, a.to_node());
    } else if (a.is_sequence()) {
      const auto& items = a.elements();
      for (size_t i = 0; i < items.size(); ++i) {
        collect_outputs(items[i], absl::StrCat(name, "_", i), out);
      }
    } else {
      throw GraphError(absl::StrCat(
          "to_onnx: output '", name, "' is ", a.to_string(),
          ", not a tensor: ONNX outputs are tensors (return tensors, tuples "
          "or lists of them)"));
    }
    // A single tensor is "output"; a tuple's are "output_0", ...
  }

  // ONNX's checker with full shape inference, and our shapes against its.
  void check(onnx::ModelProto& model) {
    try {
      onnx::checker::check_model(model);
      onnx::ModelProto inferred = model;
      for (auto& output : *inferred.mutable_graph()->mutable_output()) {
        output.mutable_type()->mutable_tensor_type()->clear_shape();
      }
      onnx::shape_inference::InferShapes(
          inferred, onnx::OpSchemaRegistry::Instance(),
          onnx::ShapeInferenceOptions(/*check_type=*/true, /*error_mode=*/1,
                                      /*data_prop=*/!varying_.empty()));
      for (int i = 0; i < inferred.graph().output_size(); ++i) {
        const auto& type = inferred.graph().output(i).type().tensor_type();
        const auto& [name, expected] = outputs_[i];
        // With dynamic dimensions, ONNX 1.12's inference loses a shape past
        // a Slice to a computed bound, and past a Loop (whose carried
        // values may change shape in ONNX): the output keeps the one
        // written.
        const bool loses_shapes =
            !varying_.empty() || module_.graph().has_subgraphs();
        if (loses_shapes && !type.has_shape()) continue;
        std::vector<int64_t> dims;
        bool known = type.has_shape() &&
                     type.shape().dim_size() == static_cast<int>(expected.size());
        for (int k = 0; known && k < type.shape().dim_size(); ++k) {
          const auto& d = type.shape().dim(k);
          if (expected[k] == -1) {
            // A dimension that varies must not come out as a constant.
            known = !d.has_dim_value();
            dims.push_back(-1);
          } else if (loses_shapes && !d.has_dim_value()) {
            // A fixed size inference could not follow through a shape the
            // model computes (a reshape to [B, -1]): unknown, not wrong.
            dims.push_back(expected[k]);
          } else {
            known = d.has_dim_value();
            dims.push_back(d.dim_value());
          }
        }
        if (!known || dims != expected) {
          std::vector<std::string> inferred_dims, expected_dims;
          for (const auto& d : type.shape().dim()) {
            inferred_dims.push_back(d.has_dim_value() ? std::to_string(d.dim_value())
                                    : d.has_dim_param() ? d.dim_param() : "?");
          }
          for (int64_t e : expected) {
            expected_dims.push_back(e == -1 ? "dynamic" : std::to_string(e));
          }
          throw GraphError(absl::StrCat(
              "to_onnx: ONNX's shape inference gives output '", name,
              "' the shape ",
              type.has_shape() ? absl::StrCat("[", absl::StrJoin(inferred_dims, ", "), "]")
                               : "unknown",
              ", the GraphModule [", absl::StrJoin(expected_dims, ", "),
              "]: a mapping is wrong (please report it)"));
        }
      }
    } catch (const GraphError&) {
      throw;
    } catch (const std::exception& e) {
      throw GraphError(absl::StrCat("to_onnx: ONNX's checker refused the model: ",
                                    e.what()));
    }
  }

  const GraphModuleImpl& module_;
  const OnnxOptions& options_;
  onnx::GraphProto* graph_ = nullptr;  // where nodes go: main_ or a body's
  onnx::GraphProto* main_ = nullptr;
  const Node* node_ = nullptr;
  std::string output_;
  absl::flat_hash_map<const Node*, std::string> names_;
  // Nodes whose value is a tuple of tensors: their elements' values.
  absl::flat_hash_map<const Node*, std::vector<std::string>> sequences_;
  std::vector<std::string> elements_;
  // Quantized values (QDQ): their quantization, and their float32 values.
  absl::flat_hash_map<const Node*, QParams> quantized_;
  absl::flat_hash_map<const Node*, std::string> dequantized_;
  std::optional<QParams> output_qparams_;
  bool float_context_ = false;
  // dict nodes (of string keys): their items, for the outputs' names.
  absl::flat_hash_map<const Node*, std::vector<std::pair<std::string, Argument>>> dicts_;
  absl::flat_hash_map<std::string, std::string> attributes_;
  absl::flat_hash_set<std::string> taken_;
  std::vector<std::string> size_checks_;  // fx_guard::check_size, in order
  absl::flat_hash_set<const Node*> visited_;  // exported so far, in order
  StorageRoots roots_;
  // By graph, then by storage root.
  absl::flat_hash_map<const Graph*,
                      absl::flat_hash_map<Node*, std::vector<const Node*>>>
      sharing_;
  absl::flat_hash_map<size_t, std::vector<int>> by_contents_;
  std::vector<std::pair<std::string, std::vector<int64_t>>> outputs_;
  // With dynamic dimensions: which dimensions of each value vary, by name.
  absl::flat_hash_map<std::string, std::vector<bool>> varying_;
};

}  // namespace

namespace {

// The passes run before writing, each where the graph needs it
// (onnx_export_pipeline says when).
std::vector<PassStep> export_steps(bool attention, bool fixed_sizes,
                                   bool fold) {
  std::vector<PassStep> steps;
  // PyTorch's fused transformer ops (nn.TransformerEncoderLayer and
  // nn.MultiheadAttention in eval mode without autograd, as a traced
  // TorchScript file holds them) as their parts, which map.
  if (attention) steps.push_back({"decompose_attention", {}});
  // Sizes computed from the inputs (a TorchScript file's size arithmetic)
  // are written as the example's, as torch.onnx writes fixed shapes unless
  // asked otherwise; dynamic dimensions asked for are refused (Exporter).
  // First, so that folding sees the sizes as literals.
  if (fixed_sizes) steps.push_back({"specialize_sizes", {}});
  if (fold) {
    steps.push_back({"fuse_conv_bn", {}});
    // Masks built by writes into zeros (Swin's) become constants too.
    steps.push_back({"fold_constants", {{"writes", "true"}}});
    steps.push_back({"eliminate_dead_code", {}});
  }
  return steps;
}

}  // namespace

PassPipeline onnx_export_pipeline(const GraphModuleImpl& module,
                                  const OnnxOptions& options) {
  const DecompositionTable& fused = fused_attention_decompositions();
  bool attention = false;
  bool sizes = false;
  for (const Graph* g : module.graph().all_graphs()) {
    for (const Node* n : g->nodes()) {
      attention = attention || (n->op() == Opcode::kCallFunction &&
                                fused.find(n->target()) != nullptr);
      sizes = sizes || is_sym_call(*n);
    }
  }
  return {"to_onnx", "what fx::to_onnx runs before writing",
          export_steps(attention,
                       sizes && dynamic_symbols(module.graph()).empty(),
                       options.fold &&
                           !module.traced_training().value_or(false))};
}

std::string to_onnx_string(const GraphModuleImpl& module,
                           const OnnxOptions& options) {
  const PassPipeline pipeline = onnx_export_pipeline(module, options);
  std::shared_ptr<GraphModuleImpl> folded;
  if (!pipeline.steps.empty()) {
    folded = module.copy();
    PassManager().add(pipeline.steps).run_in_place(*folded);
  }
  onnx::ModelProto model = Exporter(folded ? *folded : module, options).run();
  std::string bytes;
  if (!model.SerializeToString(&bytes)) {
    throw GraphError("to_onnx: the model could not be serialized (over 2 GB?)");
  }
  return bytes;
}

void to_onnx(const GraphModuleImpl& module, std::ostream& out,
             const OnnxOptions& options) {
  const std::string bytes = to_onnx_string(module, options);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw GraphError("to_onnx: the stream refused the model");
}

void to_onnx(const GraphModuleImpl& module, const std::string& path,
             const OnnxOptions& options) {
  // Built and checked before the file is touched.
  write_file_atomically(path, to_onnx_string(module, options));
}

namespace {
// The export's pipeline as `fx passes` lists it: the one of an eval-mode
// graph that holds fused transformer ops and computes sizes of fixed
// shapes (onnx_export_pipeline leaves out the steps a graph does not need).
[[maybe_unused]] const bool registered = [] {
  register_pass_pipeline(
      {"to_onnx",
       "fx::to_onnx's passes on a copy before writing (decompose_attention "
       "for fused transformer ops, specialize_sizes for computed sizes of "
       "fixed shapes, the folding with OnnxOptions::fold on eval graphs)",
       export_steps(true, true, true)});
  return true;
}();
}  // namespace

void register_onnx_mapping(const std::string& target, OnnxMapping mapping) {
  if (!mapping) {
    throw GraphError(absl::StrCat("register_onnx_mapping: no mapping given for ",
                                  target));
  }
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.mappings[target] = std::move(mapping);
}

bool has_onnx_mapping(const std::string& target) {
  return find_mapping(target) != nullptr;
}

}  // namespace fx
