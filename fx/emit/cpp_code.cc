#include "fx/emit/cpp_code.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>

#include <ATen/core/dispatch/Dispatcher.h>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "fx/ir/control_flow.h"
#include "fx/ir/errors.h"
#include "fx/ir/function.h"
#include "fx/ir/operator_schemas.h"

namespace fx {
namespace codegen {
namespace {

std::string int_literal(int64_t v) {
  if (v == std::numeric_limits<int64_t>::min()) {
    return "std::numeric_limits<int64_t>::min()";
  }
  return std::to_string(v);
}

std::string double_literal(double v) {
  if (std::isnan(v)) return "std::numeric_limits<double>::quiet_NaN()";
  if (std::isinf(v)) {
    return v > 0 ? "std::numeric_limits<double>::infinity()"
                 : "-std::numeric_limits<double>::infinity()";
  }
  return format_double(v);
}

std::string dtype_expression(c10::ScalarType dtype) {
  return absl::StrCat("at::ScalarType::", c10::toString(dtype));
}

std::string layout_expression(c10::Layout layout) {
  switch (layout) {
    case c10::Layout::Strided: return "at::Layout::Strided";
    case c10::Layout::Sparse: return "at::Layout::Sparse";
    case c10::Layout::SparseCsr: return "at::Layout::SparseCsr";
    case c10::Layout::Mkldnn: return "at::Layout::Mkldnn";
    default:
      throw GraphError(absl::StrCat("codegen: unsupported layout ",
                                    format_layout(layout)));
  }
}

std::string memory_format_expression(c10::MemoryFormat format) {
  switch (format) {
    case c10::MemoryFormat::Contiguous: return "at::MemoryFormat::Contiguous";
    case c10::MemoryFormat::Preserve: return "at::MemoryFormat::Preserve";
    case c10::MemoryFormat::ChannelsLast:
      return "at::MemoryFormat::ChannelsLast";
    case c10::MemoryFormat::ChannelsLast3d:
      return "at::MemoryFormat::ChannelsLast3d";
    default:
      return "at::MemoryFormat::Contiguous";
  }
}

std::string device_expression(c10::Device device) {
  return absl::StrCat("at::Device(", string_literal(device.str()), ")");
}

// The C++ struct of an operator's typed entry point: at::_ops::add_Tensor.
std::string ops_struct(const c10::OperatorHandle& op) {
  const c10::OperatorName& name = op.operator_name();
  std::string base = name.name.substr(name.name.find("::") + 2);
  return name.overload_name.empty()
             ? absl::StrCat("at::_ops::", base)
             : absl::StrCat("at::_ops::", base, "_", name.overload_name);
}

// How a variable holds its value.
enum class Kind { kTensor, kTuple, kTensorVector, kBoxed, kOther, kNone };

struct Value {
  std::string name;
  Kind kind = Kind::kOther;
  // A reference to a member (get_attr): never released.
  bool member = false;
  std::string member_name;
  // For kTuple: the kinds of its elements.
  std::vector<Kind> elements;
};

Kind kind_of_type(const c10::TypePtr& type) {
  switch (type->kind()) {
    case c10::TypeKind::TensorType: return Kind::kTensor;
    case c10::TypeKind::ListType:
      return type->castRaw<c10::ListType>()->getElementType()->kind() ==
                     c10::TypeKind::TensorType
                 ? Kind::kTensorVector
                 : Kind::kOther;
    default: return Kind::kOther;
  }
}

class Emitter {
 public:
  Emitter(const Graph& graph, const CodegenOptions& options)
      : graph_(graph), options_(options) {}

  Forward emit() {
    compute_last_uses();
    std::vector<std::string> params;
    size_t index = 0;
    const size_t limit = options_.max_nodes_per_function;
    const size_t placeholders = limit ? graph_.placeholders().size() : 0;
    size_t in_part = 0;
    for (Node* n : graph_.nodes()) {
      switch (n->op()) {
        case Opcode::kPlaceholder:
          params.push_back(placeholder(*n, index++));
          break;
        case Opcode::kGetAttr:
          if (Graph::reads_subgraph(*n)) {
            // A body of control flow: a function its cond or while_loop
            // calls (call_control_flow).
            Value body;
            body.name = n->name();
            body.kind = Kind::kNone;
            values_[n] = body;
          } else {
            get_attr(*n);
          }
          break;
        case Opcode::kOutput:
          output(*n);
          break;
        default:
          call(*n);
      }
      if (limit == 0 || n->op() == Opcode::kOutput) continue;
      track_liveness(n);
      if (++in_part >= limit && index == placeholders &&
          n->next()->op() != Opcode::kOutput && can_split()) {
        split();
        in_part = 0;
      }
    }
    forward_.signature = absl::StrCat(return_type_, " ",
                                      options_.function_name, "(",
                                      absl::StrJoin(params, ", "), ")");
    if (binds_symbols_) guards_ = "  fx::SymbolBindings symbols;\n" + guards_;
    if (parts_.empty()) {
      forward_.body = guards_ + body_;
    } else {
      forward_.body = guards_ + parts_.front();
      parts_.push_back(std::move(body_));
      for (size_t k = 1; k < parts_.size(); ++k) {
        forward_.parts.push_back(
            {absl::StrCat(return_type_, " ", part_name(k),
                          "(fx::ForwardFrame& frame)"),
             std::move(parts_[k])});
      }
    }
    return std::move(forward_);
  }

 private:
  // --- Splitting into parts ------------------------------------------------
  std::string part_name(size_t k) const {
    return absl::StrCat(options_.function_name, "_part_", k);
  }

  // Keeps live_ (the values defined so far that a later node reads) up to
  // date after `n` was emitted.
  void track_liveness(Node* n) {
    for (Node* input : n->all_input_nodes()) {
      if (last_use_[input] == n) live_.erase(definition_index_[input]);
    }
    if (!n->users().empty()) {
      definition_index_[n] = next_definition_index_;
      live_.emplace(next_definition_index_++, n);
    }
  }

  bool can_split() const {
    for (const auto& entry : live_) {
      const Value& v = values_.at(entry.second);
      if (v.member) continue;
      if (v.kind != Kind::kTensor && v.kind != Kind::kTensorVector &&
          v.kind != Kind::kBoxed) {
        return false;
      }
    }
    return true;
  }

  // Ends the current function with a call of the next one, passing the live
  // values; the next one starts by taking them back.
  void split() {
    const size_t k = parts_.size() + 1;
    std::string save = k == 1 ? "  fx::ForwardFrame frame;\n" : "";
    save += "  frame.tensors.clear();\n  frame.values.clear();\n";
    std::string load;
    size_t tensors = 0, values = 0;
    for (const auto& entry : live_) {
      const Value& v = values_.at(entry.second);
      // Members are declared again where the next part first uses them.
      if (v.member) continue;
      switch (v.kind) {
        case Kind::kTensor:
          absl::StrAppend(&save, "  frame.tensors.push_back(std::move(", v.name,
                          "));\n");
          absl::StrAppend(&load, "  at::Tensor ", v.name,
                          " = std::move(frame.tensors[", tensors++, "]);\n");
          break;
        case Kind::kTensorVector:
          absl::StrAppend(&save, "  frame.values.push_back(c10::IValue(std::move(",
                          v.name, ")));\n");
          absl::StrAppend(&load, "  std::vector<at::Tensor> ", v.name,
                          " = std::move(frame.values[", values++,
                          "]).toTensorVector();\n");
          break;
        default:  // kBoxed
          absl::StrAppend(&save, "  frame.values.push_back(std::move(", v.name,
                          "));\n");
          absl::StrAppend(&load, "  c10::IValue ", v.name,
                          " = std::move(frame.values[", values++, "]);\n");
      }
    }
    absl::StrAppend(&save, "  return ", part_name(k), "(frame);\n");
    parts_.push_back(body_ + save);
    body_ = std::move(load);
    declared_members_.clear();
  }

  void compute_last_uses() {
    for (Node* n : graph_.nodes()) {
      for (Node* input : n->all_input_nodes()) last_use_[input] = n;
    }
  }

  const Value& value(Node* n) {
    auto it = values_.find(n);
    if (it == values_.end()) {
      throw GraphError(absl::StrCat("codegen: %", n->name(),
                                    " is used before it is defined"));
    }
    return it->second;
  }

  std::string tensor_reference(Node* n) {
    const Value& v = value(n);
    if (v.kind == Kind::kBoxed) return v.name + ".toTensor()";
    return v.name;
  }

  // Declares, before their first use in the current function, the
  // references to the members (get_attr values) `n` reads, so that no
  // function declares one it does not use.
  void declare_members(const Node& n) {
    for (Node* input : n.all_input_nodes()) {
      const Value& v = value(input);
      if (!v.member || !declared_members_.insert(input).second) continue;
      absl::StrAppend(&body_,
                      v.kind == Kind::kBoxed ? "  c10::IValue& " : "  at::Tensor& ",
                      v.name, " = ", v.member_name, ";\n");
    }
  }

  // A statement with the releases of values whose last use it is.
  void statement(const Node& n, const std::string& code) {
    declare_members(n);
    std::string line = "  " + code;
    for (Node* input : n.all_input_nodes()) {
      if (last_use_[input] != &n) continue;
      const Value& v = value(input);
      if (v.member) continue;
      switch (v.kind) {
        case Kind::kTensor: absl::StrAppend(&line, "  ", v.name, ".reset();"); break;
        case Kind::kTensorVector:
          absl::StrAppend(&line, "  ", v.name, ".clear();");
          break;
        case Kind::kTuple: absl::StrAppend(&line, "  ", v.name, " = {};"); break;
        case Kind::kBoxed:
          absl::StrAppend(&line, "  ", v.name, " = c10::IValue();");
          break;
        default: break;
      }
    }
    if (options_.tensor_meta_comments) {
      if (const TensorMeta* tm = n.meta().get(kTensorMeta)) {
        absl::StrAppend(&line, "  // ", tm->to_string());
      }
    }
    absl::StrAppend(&body_, line, "\n");
  }

  std::string placeholder(const Node& n, size_t index) {
    const InputGuard* guard = n.meta().get(kGuard);
    Value v;
    v.name = n.name();
    std::string type = "c10::IValue";
    std::string who = absl::StrCat(string_literal(n.target().str()), ", ",
                                   index);
    if (guard != nullptr) {
      switch (guard->kind) {
        case InputGuard::Kind::kTensor:
          type = "at::Tensor";
          v.kind = Kind::kTensor;
          if (options_.guards) {
            absl::StrAppend(&guards_, "  ", tensor_guard(*guard, v.name, who),
                            "\n");
            binds_symbols_ = binds_symbols_ || !guard->dynamic.empty();
          }
          break;
        case InputGuard::Kind::kTensorList:
          type = "std::vector<at::Tensor>";
          v.kind = Kind::kTensorVector;
          if (options_.guards) {
            absl::StrAppend(&guards_, "  fx::check_list_input(", v.name, ", ",
                            who, ", ", guard->elements.size(), ");\n");
            for (size_t i = 0; i < guard->elements.size(); ++i) {
              absl::StrAppend(
                  &guards_, "  ",
                  tensor_guard(guard->elements[i],
                               absl::StrCat(v.name, "[", i, "]"),
                               absl::StrCat(string_literal(absl::StrCat(
                                                n.target().str(), "[", i, "]")),
                                            ", ", index)),
                  "\n");
            }
          }
          break;
        case InputGuard::Kind::kValue:
          type = value_type(guard->value);
          if (options_.guards) {
            absl::StrAppend(&guards_, "  fx::check_value_input(c10::IValue(",
                            v.name, "), ", who, ", ",
                            string_literal(guard->value), ");\n");
          }
          break;
      }
    } else if (n.meta().get(kTensorMeta) != nullptr) {
      type = "at::Tensor";
      v.kind = Kind::kTensor;
    }
    if (v.kind == Kind::kOther && type == "c10::IValue") v.kind = Kind::kBoxed;
    values_[&n] = v;
    return absl::StrCat(type, " ", v.name);
  }

  static std::string value_type(const std::string& printed) {
    if (printed == "True" || printed == "False") return "bool";
    if (!printed.empty() && printed[0] == '\'') return "std::string";
    if (printed == "None") return "c10::IValue";
    if (printed.find_first_of(".en") != std::string::npos) return "double";
    return "int64_t";
  }

  static std::string tensor_guard(const InputGuard& g, const std::string& var,
                                  const std::string& who) {
    if (!g.dynamic.empty()) {
      // Dynamic dimensions: their relations, and equal sizes across the
      // inputs that share a symbol (`symbols`, declared first).
      std::vector<std::string> dims;
      for (const DynamicDim& d : g.dynamic) {
        dims.push_back(absl::StrCat(
            "{", d.input, ", ", d.dim, ", ", string_literal(d.symbol), ", ",
            int_literal(d.min), ", ", int_literal(d.max), ", ",
            int_literal(d.multiple_of), "}"));
      }
      // The dimensions are made once, not on every call.
      return absl::StrCat(
          "static const std::vector<fx::DynamicDim> ", var, "_dynamic_dims = {",
          absl::StrJoin(dims, ", "), "};\n  fx::check_dynamic_tensor_input(",
          var, ", ", who, ", ", dtype_expression(g.dtype), ", ",
          device_expression(g.device), ", ", g.dim, ", ",
          g.check_sizes ? "true" : "false", ", at::IntArrayRef({",
          absl::StrJoin(g.sizes, ", "), "}), ",
          g.check_strides ? absl::StrCat("at::IntArrayRef({",
                                         absl::StrJoin(g.strides, ", "), "})")
                          : std::string("c10::nullopt"),
          ", ", var, "_dynamic_dims, &symbols);");
    }
    std::string sizes = "c10::nullopt";
    if (g.check_sizes) {
      sizes = absl::StrCat("at::IntArrayRef({", absl::StrJoin(g.sizes, ", "),
                           "})");
    }
    std::string strides;
    if (g.check_strides) {
      strides = absl::StrCat(", at::IntArrayRef({",
                             absl::StrJoin(g.strides, ", "), "})");
    }
    return absl::StrCat("fx::check_tensor_input(", var, ", ", who, ", ",
                        dtype_expression(g.dtype), ", ",
                        device_expression(g.device), ", ", g.dim, ", ", sizes,
                        strides, ");");
  }

  std::string member_name(std::vector<Forward::Member>* members,
                          const std::string& path) {
    auto it = member_of_path_.find(path);
    if (it != member_of_path_.end()) return it->second;
    if (auto given = options_.member_names.find(path);
        given != options_.member_names.end()) {
      used_members_.insert(given->second);
      member_of_path_[path] = given->second;
      members->push_back({given->second, path});
      return given->second;
    }
    const std::string base = member_base_name(path);
    std::string name = base + "_";
    for (int i = 1; used_members_.contains(name) || given_names().contains(name);
         ++i) {
      name = absl::StrCat(base, "_", i, "_");
    }
    used_members_.insert(name);
    member_of_path_[path] = name;
    members->push_back({name, path});
    return name;
  }

  void get_attr(const Node& n) {
    const bool object = options_.objects.count(n.target().str()) > 0;
    std::string member = member_name(
        object ? &forward_.objects : &forward_.tensors, n.target().str());
    Value v;
    v.name = n.name();
    v.kind = object ? Kind::kBoxed : Kind::kTensor;
    v.member = true;
    v.member_name = member;
    values_[&n] = v;
    // Declared where first used: declare_members.
  }

  // An argument for a schema parameter of (fake) type `type` and real type
  // `real_type` (which tells SymInt from int and dtypes from ints).
  std::string expression(const Argument& arg, const c10::TypePtr& type,
                         const c10::TypePtr& real_type) {
    c10::TypePtr t = real_type ? real_type : type;
    bool optional = false;
    if (t->kind() == c10::TypeKind::OptionalType) {
      optional = true;
      t = t->castRaw<c10::OptionalType>()->getElementType();
      if (arg.is_none()) return "c10::nullopt";
    }
    if (arg.is_node()) {
      Node* n = arg.to_node();
      if (t->kind() == c10::TypeKind::TensorType) return tensor_reference(n);
      return value(n).name;
    }
    // A literal for an optional parameter must be of the exact type: C++
    // will not chain two conversions (int -> SymInt -> optional<SymInt>).
    auto exact = [optional](const std::string& type_name,
                            const std::string& literal) {
      return optional ? absl::StrCat(type_name, "(", literal, ")") : literal;
    };
    switch (t->kind()) {
      case c10::TypeKind::TensorType:
        if (arg.is_none()) return "at::Tensor()";
        break;
      case c10::TypeKind::ScalarTypeType:
        if (arg.is_dtype()) return dtype_expression(arg.to_dtype());
        if (arg.is_int()) {
          return dtype_expression(static_cast<c10::ScalarType>(arg.to_int()));
        }
        break;
      case c10::TypeKind::LayoutType:
        if (arg.is_layout()) return layout_expression(arg.to_layout());
        break;
      case c10::TypeKind::MemoryFormatType:
        if (arg.is_memory_format()) {
          return memory_format_expression(arg.to_memory_format());
        }
        break;
      case c10::TypeKind::IntType:
        if (arg.is_int()) return int_literal(arg.to_int());
        break;
      case c10::TypeKind::SymIntType:
        if (arg.is_int()) return exact("c10::SymInt", int_literal(arg.to_int()));
        break;
      case c10::TypeKind::FloatType:
        if (arg.is_double() || arg.is_int()) {
          return double_literal(arg.to_double());
        }
        break;
      case c10::TypeKind::BoolType:
        if (arg.is_bool()) return arg.to_bool() ? "true" : "false";
        break;
      case c10::TypeKind::NumberType:
        if (arg.is_int()) return exact("at::Scalar", int_literal(arg.to_int()));
        if (arg.is_double()) {
          return exact("at::Scalar", double_literal(arg.to_double()));
        }
        if (arg.is_bool()) {
          return arg.to_bool() ? "at::Scalar(true)" : "at::Scalar(false)";
        }
        if (arg.is_complex()) {
          return absl::StrCat("at::Scalar(c10::complex<double>(",
                              double_literal(arg.to_complex().real()), ", ",
                              double_literal(arg.to_complex().imag()), "))");
        }
        break;
      case c10::TypeKind::StringType:
        if (arg.is_string()) {
          return exact("c10::string_view", string_literal(arg.to_string_ref()));
        }
        break;
      case c10::TypeKind::DeviceObjType:
        if (arg.is_device()) return device_expression(arg.to_device());
        break;
      case c10::TypeKind::GeneratorType:
        if (arg.is_none()) return "c10::nullopt";
        break;
      case c10::TypeKind::ListType:
        if (arg.is_sequence()) return list_expression(arg, t, optional);
        break;
      default:
        break;
    }
    throw GraphError(absl::StrCat("codegen: cannot express ", arg.to_string(),
                                  " as a C++ ", t->str()));
  }

  // A list literal. Plain braces where the parameter is an ArrayRef (or
  // ITensorListRef), which take them directly.
  std::string list_expression(const Argument& arg, const c10::TypePtr& type,
                              bool optional) {
    const c10::TypePtr& elem = type->castRaw<c10::ListType>()->getElementType();
    std::vector<std::string> items;
    for (const Argument& e : arg.elements()) {
      items.push_back(e.is_int() ? int_literal(e.to_int())
                                 : expression(e, elem, elem));
    }
    std::string braces = absl::StrCat("{", absl::StrJoin(items, ", "), "}");
    switch (elem->kind()) {
      case c10::TypeKind::IntType:
        return optional ? "at::OptionalIntArrayRef" + braces : braces;
      case c10::TypeKind::SymIntType:
        return optional ? "at::OptionalSymIntArrayRef" + braces : braces;
      case c10::TypeKind::FloatType:
        return optional ? absl::StrCat(
                              "c10::optional<at::ArrayRef<double>>(at::"
                              "ArrayRef<double>",
                              braces, ")")
                        : braces;
      case c10::TypeKind::BoolType:
        return absl::StrCat("std::array<bool, ", items.size(), ">", braces);
      case c10::TypeKind::TensorType:
        return braces;
      case c10::TypeKind::OptionalType:
        if (elem->castRaw<c10::OptionalType>()->getElementType()->kind() ==
            c10::TypeKind::TensorType) {
          return "c10::List<c10::optional<at::Tensor>>" + braces;
        }
        break;
      default:
        break;
    }
    throw GraphError(absl::StrCat("codegen: cannot express a list of ",
                                  elem->str()));
  }

  // An argument of a boxed call (leaf module, registered function).
  std::string boxed_expression(const Argument& arg) {
    if (arg.is_node()) return value(arg.to_node()).name;
    if (arg.is_sequence()) {
      std::vector<std::string> items;
      for (const Argument& e : arg.elements()) items.push_back(boxed_expression(e));
      std::string joined = absl::StrJoin(items, ", ");
      if (arg.is_tuple()) {
        return absl::StrCat("c10::ivalue::Tuple::create({", joined, "})");
      }
      // A list of any element type, built in place.
      return absl::StrCat(
          "[&] { c10::impl::GenericList l(c10::AnyType::get()); "
          "for (c10::IValue e : std::initializer_list<c10::IValue>{",
          joined, "}) l.push_back(std::move(e)); return l; }()");
    }
    switch (arg.kind()) {
      case ArgumentKind::kNone: return "c10::IValue()";
      case ArgumentKind::kBool: return arg.to_bool() ? "true" : "false";
      case ArgumentKind::kInt:
        return absl::StrCat("int64_t{", int_literal(arg.to_int()), "}");
      case ArgumentKind::kDouble: return double_literal(arg.to_double());
      case ArgumentKind::kString:
        return absl::StrCat("std::string(", string_literal(arg.to_string_ref()),
                            ")");
      case ArgumentKind::kDtype: return dtype_expression(arg.to_dtype());
      case ArgumentKind::kDevice: return device_expression(arg.to_device());
      default:
        throw GraphError(absl::StrCat("codegen: cannot pass ", arg.to_string(),
                                      " to a boxed call"));
    }
  }

  std::string boxed_arguments(const Node& n) {
    if (!n.kwargs().empty()) {
      throw GraphError(absl::StrCat("codegen: %", n.name(),
                                    ": boxed calls take no kwargs"));
    }
    std::vector<std::string> items;
    for (const Argument& a : n.args()) items.push_back(boxed_expression(a));
    return absl::StrCat("{", absl::StrJoin(items, ", "), "}");
  }

  void call(const Node& n) {
    Value v;
    v.name = n.name();
    if ((n.op() == Opcode::kCallFunction && n.target().is_operator()) ||
        n.op() == Opcode::kCallMethod) {
      c10::OperatorHandle op = n.op() == Opcode::kCallMethod
                                   ? resolve_method(n)
                                   : n.target().op();
      call_operator(n, op, &v);
    } else if (n.op() == Opcode::kCallFunction &&
               n.target().function().name() == "getitem") {
      call_getitem(n, &v);
    } else if (is_sym_call(n)) {
      call_sym_function(n, &v);
    } else if (is_control_flow_call(n)) {
      call_control_flow(n, &v);
    } else {
      std::string callee;
      if (n.op() == Opcode::kCallModule) {
        callee = absl::StrCat(
            member_name(&forward_.leaf_modules, n.target().str()),
            ".forward");
      } else {
        callee = absl::StrCat("(*fx::find_function(",
                              string_literal(n.target().function().name()),
                              "))");
      }
      std::string call = absl::StrCat(callee, "(", boxed_arguments(n), ")");
      if (n.meta().get(kTensorMeta) != nullptr) {
        v.kind = Kind::kTensor;
        call += ".toTensor()";
      } else {
        v.kind = Kind::kBoxed;
      }
      statement(n, absl::StrCat("auto ", v.name, " = ", call, ";"));
    }
    values_[&n] = v;
  }

  // cond and while_loop, each body a function of the class
  // (forward_true_graph_0, ...) taking the operands:
  //   auto cond = fx::truth_of(c10::IValue(gt), "cond's predicate") ? forward_true_graph_0(x) : forward_false_graph_0(x);
  //   std::vector<at::Tensor> while_loop = {x};
  //   for (int64_t while_loop_iteration = 0; fx::truth_of(...(forward_while_loop_cond_graph_0(while_loop[0])[0]), ...); ++while_loop_iteration) {
  //     std::vector<at::Tensor> while_loop_next = forward_while_loop_body_graph_0(while_loop[0]);
  //     fx::check_carried_values(while_loop, while_loop_next, while_loop_iteration);
  //     while_loop = std::move(while_loop_next);
  //   }
  void call_control_flow(const Node& n, Value* v) {
    const std::vector<const Graph*> bodies = bodies_of(n);
    auto tensors = [&](const Argument& list) {
      std::vector<std::string> names;
      for (const Argument& e : list.elements()) {
        if (!e.is_node() || (value(e.to_node()).kind != Kind::kTensor &&
                             value(e.to_node()).kind != Kind::kBoxed)) {
          throw GraphError(absl::StrCat(
              "codegen: %", n.name(), ": an operand of control flow that is "
              "not a tensor (", e.to_string(), ") is not generated yet"));
        }
        names.push_back(tensor_reference(e.to_node()));
      }
      return names;
    };
    v->kind = Kind::kTensorVector;
    const std::string& name = v->name;
    if (&n.target().function() == cond_function()) {
      const std::string operands = absl::StrJoin(tensors(n.args().at(3)), ", ");
      const std::string then = body_function(n, 1, *bodies[0]);
      const std::string otherwise = body_function(n, 2, *bodies[1]);
      statement(n, absl::StrCat("auto ", name, " = fx::truth_of(",
                                boxed_expression(n.args().at(0)),
                                ", \"cond's predicate\") ? ", then, "(",
                                operands, ") : ", otherwise, "(", operands,
                                ");"));
      return;
    }
    if (&n.target().function() == scan_function() ||
        &n.target().function() == map_function()) {
      // The steps over dimension 0 of the xs, as fx's scan and map run
      // them: the carried values checked, the ys stacked.
      const bool is_scan = &n.target().function() == scan_function();
      const char* function = is_scan ? "scan" : "map";
      const std::vector<std::string> init =
          is_scan ? tensors(n.args().at(1)) : std::vector<std::string>{};
      const std::vector<std::string> xs = tensors(n.args().at(is_scan ? 2 : 1));
      const std::vector<std::string> additional =
          tensors(n.args().at(is_scan ? 3 : 2));
      const std::string body = body_function(n, 0, *bodies[0]);
      const std::string step = name + "_step";
      std::vector<std::string> args;
      for (size_t i = 0; i < init.size(); ++i) {
        args.push_back(absl::StrCat(name, "_carried[", i, "]"));
      }
      for (size_t k = 0; k < xs.size(); ++k) {
        args.push_back(absl::StrCat(name, "_xs[", k, "].select(0, ", step, ")"));
      }
      args.insert(args.end(), additional.begin(), additional.end());
      const size_t carried = init.size();
      statement(n, absl::StrCat(
          "std::vector<at::Tensor> ", name, ";\n  {\n    const std::vector<at::Tensor> ",
          name, "_xs = {", absl::StrJoin(xs, ", "), "};\n    const int64_t ", name,
          "_length = fx::scan_length(", name, "_xs, \"", function,
          "\");\n    std::vector<at::Tensor> ", name, "_carried = {",
          absl::StrJoin(init, ", "), "};\n    std::vector<std::vector<at::Tensor>> ",
          name, "_steps;\n    for (int64_t ", step, " = 0; ", step, " < ", name,
          "_length; ++", step, ") {\n      std::vector<at::Tensor> ", name,
          "_out = ", body, "(", absl::StrJoin(args, ", "), ");\n      std::vector<at::Tensor> ",
          name, "_next(", name, "_out.begin(), ", name, "_out.begin() + ", carried,
          ");\n      fx::check_carried_values(", name, "_carried, ", name, "_next, ",
          step, ", \"", function, "\");\n      ", name, "_carried = std::move(", name,
          "_next);\n      ", name, "_steps.emplace_back(", name, "_out.begin() + ",
          carried, ", ", name, "_out.end());\n    }\n    ", name, " = std::move(", name,
          "_carried);\n    for (at::Tensor& y : fx::stack_steps(", name, "_steps, \"",
          function, "\")) ", name, ".push_back(std::move(y));\n  }"));
      return;
    }
    const std::vector<std::string> carried = tensors(n.args().at(2));
    const std::vector<std::string> additional = tensors(n.args().at(3));
    const std::string test = body_function(n, 0, *bodies[0]);
    const std::string body = body_function(n, 1, *bodies[1]);
    std::vector<std::string> args;
    for (size_t i = 0; i < carried.size(); ++i) {
      args.push_back(absl::StrCat(name, "[", i, "]"));
    }
    args.insert(args.end(), additional.begin(), additional.end());
    const std::string call_args = absl::StrJoin(args, ", ");
    const std::string iteration = name + "_iteration";
    const std::string next = name + "_next";
    statement(n, absl::StrCat(
        "std::vector<at::Tensor> ", name, " = {", absl::StrJoin(carried, ", "),
        "};\n  for (int64_t ", iteration, " = 0; fx::truth_of(c10::IValue(",
        test, "(", call_args, ")[0]), \"while_loop's cond_graph output\"); ++",
        iteration, ") {\n    std::vector<at::Tensor> ", next, " = ", body, "(",
        call_args, ");\n    fx::check_carried_values(", name, ", ", next, ", ",
        iteration, ");\n    ", name, " = std::move(", next, ");\n  }"));
  }

  // The function of the class running `body` (argument `index` of `n`
  // reads it), emitted once: its members join this function's.
  std::string body_function(const Node& n, size_t index, const Graph& body) {
    auto it = body_functions_.find(&body);
    if (it != body_functions_.end()) return it->second;
    CodegenOptions options = options_;
    options.function_name = absl::StrCat(options_.function_name, "_",
                                         n.args().at(index).to_node()->target().str());
    options.guards = false;
    options.tensors_as_vector = true;
    options.max_nodes_per_function = 0;
    for (const auto& [path, member] : member_of_path_) {
      options.member_names[path] = member;
    }
    Forward f = Emitter(body, options).emit();
    if (f.signature.rfind("std::vector<at::Tensor> ", 0) != 0) {
      throw GraphError(absl::StrCat("codegen: %", n.name(), ": a body that "
                                    "does not return tensors is not "
                                    "generated yet"));
    }
    for (auto [mine, theirs] :
         {std::pair{&forward_.tensors, &f.tensors},
          std::pair{&forward_.leaf_modules, &f.leaf_modules},
          std::pair{&forward_.objects, &f.objects}}) {
      for (const Forward::Member& m : *theirs) {
        if (member_of_path_.count(m.path) > 0) continue;
        member_of_path_[m.path] = m.name;
        used_members_.insert(m.name);
        mine->push_back(m);
      }
    }
    forward_.parts.push_back({f.signature, f.body});
    for (Forward::Part& part : f.parts) forward_.parts.push_back(std::move(part));
    body_functions_[&body] = options.function_name;
    return options.function_name;
  }

  // A size or integer arithmetic on sizes, as plain C++ ints:
  //   const int64_t sym_size = x.size(0);
  //   const int64_t sym_mul = sym_size * 4;
  void call_sym_function(const Node& n, Value* v) {
    const Function& f = n.target().function();
    auto operand = [&](const Argument& a) {
      if (a.is_int()) return int_literal(a.to_int());
      if (!a.is_node()) {
        throw GraphError(absl::StrCat("codegen: %", n.name(), ": ", f.name(),
                                      " takes ints, got ", a.to_string()));
      }
      return value(a.to_node()).name;
    };
    if (n.args().size() != 2 || !n.kwargs().empty()) {
      throw GraphError(absl::StrCat("codegen: %", n.name(), ": ", f.name(),
                                    " takes two arguments"));
    }
    const std::string a = operand(n.args()[0]);
    const std::string b = operand(n.args()[1]);
    std::string expr;
    if (&f == sym_size()) {
      expr = absl::StrCat(a, ".size(", b, ")");
    } else if (&f == sym_add()) {
      expr = absl::StrCat(a, " + ", b);
    } else if (&f == sym_mul()) {
      expr = absl::StrCat(a, " * ", b);
    } else if (&f == sym_mod()) {
      expr = absl::StrCat("fx::checked_python_mod(", a, ", ", b, ")");
    } else {
      expr = absl::StrCat("fx::checked_floor_divide(", a, ", ", b, ")");
    }
    v->kind = Kind::kOther;
    statement(n, absl::StrCat("const int64_t ", v->name, " = ", expr, ";"));
  }

  void call_operator(const Node& n, const c10::OperatorHandle& op, Value* v) {
    const c10::FunctionSchema& schema = op.schema();
    const auto& params = schema.arguments();
    // Bound as the executor binds them (fx/ir/operator_schemas.h): unknown,
    // repeated or missing arguments are GraphErrors naming the node.
    const std::vector<Argument> full = full_arguments(n, schema);
    if (schema.name().compare(0, 6, "aten::") != 0 || takes_object(schema)) {
      call_custom_operator(n, op, full, v);
      return;
    }
    std::vector<std::string> exprs;
    for (size_t i = 0; i < params.size(); ++i) {
      exprs.push_back(expression(full[i], params[i].type(), params[i].real_type()));
    }
    std::string call = absl::StrCat(ops_struct(op), "::call(",
                                    absl::StrJoin(exprs, ", "), ")");
    const auto& returns = schema.returns();
    if (returns.empty()) {
      v->kind = Kind::kNone;
      statement(n, call + ";");
      return;
    }
    if (returns.size() == 1) {
      v->kind = kind_of_type(returns[0].type());
    } else {
      v->kind = Kind::kTuple;
      for (const auto& r : returns) v->elements.push_back(kind_of_type(r.type()));
    }
    statement(n, absl::StrCat("auto ", v->name, " = ", call, ";"));
  }

  // Whether an argument of `schema` is a script object or a list of them
  // (aten::quantized_lstm's cell parameters), which typed calls cannot
  // take from IValues.
  static bool takes_object(const c10::FunctionSchema& schema) {
    for (const c10::Argument& a : schema.arguments()) {
      c10::TypePtr t = a.type();
      if (t->kind() == c10::TypeKind::OptionalType) {
        t = t->castRaw<c10::OptionalType>()->getElementType();
      }
      if (t->kind() == c10::TypeKind::ListType) {
        t = t->castRaw<c10::ListType>()->getElementType();
      }
      if (t->kind() == c10::TypeKind::ClassType) return true;
    }
    return false;
  }

  // An operator of another namespace (fx_onednn::conv, a user's
  // TORCH_LIBRARY), or one that takes script objects: through the
  // dispatcher, boxed, as the GraphModule calls it; its handle is looked up
  // once. Several results make a boxed tuple.
  void call_custom_operator(const Node& n, const c10::OperatorHandle& op,
                            const std::vector<Argument>& full, Value* v) {
    const c10::FunctionSchema& schema = op.schema();
    const auto& returns = schema.returns();
    const auto& params = schema.arguments();
    std::vector<std::string> items;
    for (size_t i = 0; i < params.size(); ++i) {
      items.push_back(boxed_operator_argument(full[i], params[i]));
    }
    const std::string handle = v->name + "_operator";
    const std::string stack = v->name + "_stack";
    // One statement: the inputs are released after the call, not before.
    std::string code = absl::StrCat(
        "static const c10::OperatorHandle ", handle,
        " = c10::Dispatcher::singleton().findSchemaOrThrow(",
        string_literal(schema.name()), ", ",
        string_literal(schema.overload_name()), ");\n  ",
        "std::vector<c10::IValue> ", stack, "{", absl::StrJoin(items, ", "),
        "};\n  ", handle, ".callBoxed(&", stack, ");");
    const bool all_tensors =
        std::all_of(returns.begin(), returns.end(), [](const c10::Argument& r) {
          return r.type()->kind() == c10::TypeKind::TensorType;
        });
    if (returns.empty()) {
      v->kind = Kind::kNone;
    } else if (returns.size() > 1 && all_tensors) {
      // Tensors, typed as aten's calls return them (std::get<i> reads one).
      v->kind = Kind::kTuple;
      std::vector<std::string> elements;
      for (size_t i = 0; i < returns.size(); ++i) {
        v->elements.push_back(Kind::kTensor);
        elements.push_back(
            absl::StrCat("std::move(", stack, "[", i, "]).toTensor()"));
      }
      absl::StrAppend(&code, "\n  auto ", v->name, " = std::make_tuple(",
                      absl::StrJoin(elements, ", "), ");");
    } else if (returns.size() > 1) {
      v->kind = Kind::kBoxed;
      absl::StrAppend(&code, "\n  c10::IValue ", v->name,
                      " = c10::ivalue::Tuple::create(std::move(", stack, "));");
    } else {
      const bool tensor =
          returns[0].type()->kind() == c10::TypeKind::TensorType;
      v->kind = tensor ? Kind::kTensor : Kind::kBoxed;
      absl::StrAppend(&code, "\n  auto ", v->name, " = std::move(", stack,
                      "[0])", tensor ? ".toTensor()" : "", ";");
    }
    statement(n, code);
  }

  // An argument of a boxed operator call, as the IValue of the type its
  // parameter declares (an int[] is an IntList, not a list of IValues).
  std::string boxed_operator_argument(const Argument& arg,
                                      const c10::Argument& param) {
    c10::TypePtr t = param.real_type() ? param.real_type() : param.type();
    if (t->kind() == c10::TypeKind::OptionalType) {
      if (arg.is_none()) return "c10::IValue()";
      t = t->castRaw<c10::OptionalType>()->getElementType();
    }
    if (arg.is_node()) {
      Node* node = arg.to_node();
      return t->kind() == c10::TypeKind::TensorType ? tensor_reference(node)
                                                    : value(node).name;
    }
    if (t->kind() == c10::TypeKind::ListType && arg.is_sequence() &&
        !arg.contains_node()) {
      const c10::TypePtr& elem = t->castRaw<c10::ListType>()->getElementType();
      std::vector<std::string> items;
      for (const Argument& e : arg.elements()) {
        items.push_back(expression(e, elem, elem));
      }
      const std::string braces =
          absl::StrCat("{", absl::StrJoin(items, ", "), "}");
      switch (elem->kind()) {
        case c10::TypeKind::IntType:
        case c10::TypeKind::SymIntType:
          return absl::StrCat("c10::IValue(std::vector<int64_t>", braces, ")");
        case c10::TypeKind::FloatType:
          return absl::StrCat("c10::IValue(std::vector<double>", braces, ")");
        case c10::TypeKind::BoolType:
          return absl::StrCat("c10::IValue(c10::List<bool>(", braces, "))");
        case c10::TypeKind::TensorType:
          return absl::StrCat("c10::IValue(c10::List<at::Tensor>(", braces,
                              "))");
        default:
          break;
      }
    }
    if (t->kind() == c10::TypeKind::ListType && arg.is_sequence()) {
      const c10::TypePtr& elem = t->castRaw<c10::ListType>()->getElementType();
      if (elem->kind() == c10::TypeKind::TensorType) {
        // A Tensor[] of values (fx_onednn::concat_write_'s pieces, lstm's
        // states): a list even of one (c10::IValue({t}) would be t).
        std::vector<std::string> items;
        for (const Argument& e : arg.elements()) {
          items.push_back(e.is_node() ? tensor_reference(e.to_node())
                                      : expression(e, elem, elem));
        }
        return absl::StrCat("c10::IValue(c10::List<at::Tensor>({",
                            absl::StrJoin(items, ", "), "}))");
      }
      if (elem->kind() == c10::TypeKind::ClassType) {
        // Script objects: a list of the schema's class type.
        std::vector<std::string> items;
        for (const Argument& e : arg.elements()) {
          if (!e.is_node()) {
            throw GraphError(absl::StrCat("codegen: cannot pass ", e.to_string(),
                                          " as a script object"));
          }
          items.push_back(value(e.to_node()).name);
        }
        return absl::StrCat("fx::object_list({", absl::StrJoin(items, ", "),
                            "})");
      }
    }
    return absl::StrCat("c10::IValue(", expression(arg, t, t), ")");
  }

  void call_getitem(const Node& n, Value* v) {
    const Value& container = value(n.args().at(0).to_node());
    int64_t index = n.args().at(1).to_int();
    std::string expr;
    switch (container.kind) {
      case Kind::kTuple:
        expr = absl::StrCat("std::get<", index, ">(", container.name, ")");
        v->kind = container.elements.at(index);
        break;
      case Kind::kTensorVector:
        expr = absl::StrCat(container.name, "[", index, "]");
        v->kind = Kind::kTensor;
        break;
      default:
        expr = absl::StrCat("(*fx::getitem())({", container.name, ", int64_t{",
                            index, "}})");
        if (n.meta().get(kTensorMeta) != nullptr) {
          expr += ".toTensor()";
          v->kind = Kind::kTensor;
        } else {
          v->kind = Kind::kBoxed;
        }
    }
    statement(n, absl::StrCat("auto ", v->name, " = ", expr, ";"));
  }

  // The member names given in the options.
  const absl::flat_hash_set<std::string>& given_names() {
    if (!given_names_) {
      given_names_.emplace();
      for (const auto& entry : options_.member_names) {
        given_names_->insert(entry.second);
      }
    }
    return *given_names_;
  }

  std::string return_type(const Argument& arg) {
    if (arg.is_node()) {
      switch (value(arg.to_node()).kind) {
        case Kind::kTensor: return "at::Tensor";
        case Kind::kTensorVector: return "std::vector<at::Tensor>";
        default: return "c10::IValue";
      }
    }
    if (arg.is_tuple() && options_.tensors_as_vector && !arg.elements().empty()) {
      bool tensors = true;
      for (const Argument& e : arg.elements()) {
        tensors = tensors && return_type(e) == "at::Tensor";
      }
      return tensors ? "std::vector<at::Tensor>" : "std::vector<c10::IValue>";
    }
    if (arg.is_tuple()) {
      std::vector<std::string> types;
      for (const Argument& e : arg.elements()) types.push_back(return_type(e));
      return absl::StrCat("std::tuple<", absl::StrJoin(types, ", "), ">");
    }
    if (arg.is_list() && !arg.elements().empty()) {
      bool tensors = true;
      for (const Argument& e : arg.elements()) {
        tensors = tensors && return_type(e) == "at::Tensor";
      }
      if (tensors) return "std::vector<at::Tensor>";
    }
    return "c10::IValue";
  }

  std::string return_expression(const Argument& arg, const std::string& type) {
    if (arg.is_node()) {
      const Value& v = value(arg.to_node());
      return type == "c10::IValue" && v.kind != Kind::kBoxed
                 ? absl::StrCat("c10::IValue(", v.name, ")")
                 : v.name;
    }
    if (type == "std::vector<c10::IValue>") {
      std::vector<std::string> items;
      for (const Argument& e : arg.elements()) {
        items.push_back(return_expression(e, "c10::IValue"));
      }
      return absl::StrCat("std::vector<c10::IValue>{",
                          absl::StrJoin(items, ", "), "}");
    }
    if (arg.is_tuple() && type != "std::vector<at::Tensor>") {
      std::vector<std::string> items;
      for (const Argument& e : arg.elements()) {
        items.push_back(return_expression(e, return_type(e)));
      }
      return absl::StrCat("std::make_tuple(", absl::StrJoin(items, ", "), ")");
    }
    if (type == "std::vector<at::Tensor>") {
      std::vector<std::string> items;
      for (const Argument& e : arg.elements()) {
        items.push_back(return_expression(e, "at::Tensor"));
      }
      return absl::StrCat("std::vector<at::Tensor>{", absl::StrJoin(items, ", "),
                          "}");
    }
    return absl::StrCat("c10::IValue(", boxed_expression(arg), ")");
  }

  void output(const Node& n) {
    const Argument& result = n.args().at(0);
    return_type_ = return_type(result);
    declare_members(n);
    absl::StrAppend(&body_, "  return ", return_expression(result, return_type_),
                    ";\n");
  }

  const Graph& graph_;
  const CodegenOptions& options_;
  Forward forward_;
  std::string body_;
  std::string guards_;
  // Whether a guard checks dynamic dimensions, which bind `symbols`.
  bool binds_symbols_ = false;
  std::string return_type_ = "c10::IValue";
  // For max_nodes_per_function: the bodies of the finished functions, the
  // live values by definition order.
  std::vector<std::string> parts_;
  std::map<size_t, Node*> live_;
  absl::flat_hash_map<const Node*, size_t> definition_index_;
  size_t next_definition_index_ = 0;
  absl::flat_hash_map<const Node*, Value> values_;
  // The members referenced so far in the current function.
  absl::flat_hash_set<const Node*> declared_members_;
  absl::flat_hash_map<const Node*, const Node*> last_use_;
  absl::flat_hash_map<std::string, std::string> member_of_path_;
  absl::flat_hash_set<std::string> used_members_;
  // The function each body of control flow was emitted as.
  absl::flat_hash_map<const Graph*, std::string> body_functions_;
  std::optional<absl::flat_hash_set<std::string>> given_names_;
};

}  // namespace

std::string string_literal(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default: out += c;
    }
  }
  return out + "\"";
}

std::string Forward::text() const {
  std::string out = absl::StrCat(signature, " {\n", body, "}\n");
  for (const Part& part : parts) {
    absl::StrAppend(&out, "\n", part.signature, " {\n", part.body, "}\n");
  }
  return out;
}

std::string member_base_name(const std::string& path) {
  std::string base;
  for (char c : path) {
    base += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  }
  if (base.empty() || std::isdigit(static_cast<unsigned char>(base[0]))) {
    base = "_" + base;
  }
  return base;
}

Forward emit_forward(const Graph& graph, const CodegenOptions& options) {
  return Emitter(graph, options).emit();
}

}  // namespace codegen
}  // namespace fx
