#include "fx/ir/operator_schemas.h"

#include <algorithm>
#include <mutex>
#include <sstream>

#include <ATen/core/dispatch/Dispatcher.h>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "fx/ir/errors.h"

namespace fx {
namespace {

std::string describe(const c10::IValue& v) {
  if (v.isTensor()) return "Tensor";
  if (v.isNone()) return "None";
  return v.tagKind();
}

// Converts `value` in place to `type`; on failure returns false and says why.
bool try_coerce(c10::IValue& value, const c10::TypePtr& type,
                std::string* error) {
  auto fail = [&]() {
    *error = absl::StrCat("expected ", type->str(), ", got ", describe(value));
    return false;
  };
  switch (type->kind()) {
    case c10::TypeKind::OptionalType:
      if (value.isNone()) return true;
      return try_coerce(value, type->castRaw<c10::OptionalType>()->getElementType(),
                        error);
    case c10::TypeKind::TensorType:
      if (value.isNone()) {
        value = at::Tensor();  // an undefined tensor, as the boxed API has it
        return true;
      }
      return value.isTensor() ? true : fail();
    case c10::TypeKind::IntType:
    case c10::TypeKind::SymIntType:
      return value.isInt() || value.isSymInt() ? true : fail();
    case c10::TypeKind::FloatType:
      if (value.isDouble()) return true;
      if (value.isInt()) {
        value = static_cast<double>(value.toInt());
        return true;
      }
      return fail();
    case c10::TypeKind::NumberType:
      return value.isInt() || value.isDouble() || value.isBool() ||
                     value.isComplexDouble()
                 ? true
                 : fail();
    case c10::TypeKind::BoolType:
      return value.isBool() ? true : fail();
    case c10::TypeKind::StringType:
      return value.isString() ? true : fail();
    case c10::TypeKind::DeviceObjType:
      if (value.isDevice()) return true;
      if (value.isString()) {
        value = c10::Device(value.toStringRef());
        return true;
      }
      return fail();
    case c10::TypeKind::ListType: {
      const c10::TypePtr& elem =
          type->castRaw<c10::ListType>()->getElementType();
      if (!value.isList() && !value.isTuple()) return fail();
      c10::ArrayRef<c10::IValue> items =
          value.isList() ? value.toListRef()
                         : c10::ArrayRef<c10::IValue>(
                               value.toTupleRef().elements());
      switch (elem->kind()) {
        case c10::TypeKind::TensorType: {
          if (value.isTensorList()) return true;
          c10::List<at::Tensor> list;
          list.reserve(items.size());
          for (const c10::IValue& e : items) {
            if (!e.isTensor()) return fail();
            list.push_back(e.toTensor());
          }
          value = std::move(list);
          return true;
        }
        case c10::TypeKind::IntType:
        case c10::TypeKind::SymIntType: {
          if (value.isIntList()) return true;
          c10::List<int64_t> list;
          list.reserve(items.size());
          for (const c10::IValue& e : items) {
            if (!e.isInt()) return fail();
            list.push_back(e.toInt());
          }
          value = std::move(list);
          return true;
        }
        case c10::TypeKind::FloatType: {
          if (value.isDoubleList()) return true;
          c10::List<double> list;
          for (const c10::IValue& e : items) {
            if (e.isDouble()) {
              list.push_back(e.toDouble());
            } else if (e.isInt()) {
              list.push_back(static_cast<double>(e.toInt()));
            } else {
              return fail();
            }
          }
          value = std::move(list);
          return true;
        }
        case c10::TypeKind::BoolType: {
          if (value.isBoolList()) return true;
          c10::List<bool> list;
          for (const c10::IValue& e : items) {
            if (!e.isBool()) return fail();
            list.push_back(e.toBool());
          }
          value = std::move(list);
          return true;
        }
        default: {
          const c10::OptionalType* opt = elem->castRaw<c10::OptionalType>();
          if (opt && opt->getElementType()->kind() == c10::TypeKind::TensorType) {
            c10::List<c10::optional<at::Tensor>> list;
            list.reserve(items.size());
            for (const c10::IValue& e : items) {
              if (e.isNone()) {
                list.push_back(c10::nullopt);
              } else if (e.isTensor()) {
                list.push_back(e.toTensor());
              } else {
                return fail();
              }
            }
            value = std::move(list);
            return true;
          }
          c10::impl::GenericList list(elem);
          for (c10::IValue e : items) {
            if (!try_coerce(e, elem, error)) return false;
            list.push_back(std::move(e));
          }
          value = std::move(list);
          return true;
        }
      }
    }
    case c10::TypeKind::TupleType: {
      if (!value.isTuple()) return fail();
      const auto& types = type->castRaw<c10::TupleType>()->elements();
      std::vector<c10::IValue> elems = value.toTupleRef().elements().vec();
      if (elems.size() != types.size()) return fail();
      for (size_t i = 0; i < elems.size(); ++i) {
        if (!try_coerce(elems[i], types[i], error)) return false;
      }
      value = c10::ivalue::Tuple::create(std::move(elems));
      return true;
    }
    default:
      // Any, Generator, Storage, ... are passed through as they are.
      return true;
  }
}

bool bind(const c10::FunctionSchema& schema, std::vector<c10::IValue> args,
          IValueKwargs kwargs, std::vector<c10::IValue>* out,
          std::string* error) {
  const auto& params = schema.arguments();
  size_t positional = 0;
  while (positional < params.size() && !params[positional].kwarg_only()) {
    ++positional;
  }
  if (args.size() > positional) {
    *error = absl::StrCat("takes ", positional,
                          " positional argument(s) but ", args.size(),
                          " were given");
    return false;
  }
  std::vector<c10::IValue> stack(params.size());
  std::vector<bool> filled(params.size(), false);
  for (size_t i = 0; i < args.size(); ++i) {
    stack[i] = std::move(args[i]);
    filled[i] = true;
  }
  for (auto& [name, value] : kwargs) {
    auto index = schema.argumentIndexWithName(name);
    if (!index) {
      *error = absl::StrCat("has no argument named '", name, "'");
      return false;
    }
    if (filled[*index]) {
      *error = absl::StrCat("got argument '", name, "' twice");
      return false;
    }
    stack[*index] = std::move(value);
    filled[*index] = true;
  }
  for (size_t i = 0; i < params.size(); ++i) {
    if (!filled[i]) {
      if (!params[i].default_value()) {
        *error = absl::StrCat("is missing argument '", params[i].name(), "'");
        return false;
      }
      stack[i] = *params[i].default_value();
    }
    std::string why;
    if (!try_coerce(stack[i], params[i].type(), &why)) {
      *error = absl::StrCat("argument '", params[i].name(), "': ", why);
      return false;
    }
  }
  *out = std::move(stack);
  return true;
}

c10::TypePtr unwrap_optional(const c10::TypePtr& type) {
  if (type && type->kind() == c10::TypeKind::OptionalType) {
    return type->castRaw<c10::OptionalType>()->getElementType();
  }
  return type;
}

}  // namespace

std::string schema_string(const c10::FunctionSchema& schema) {
  std::ostringstream os;
  os << schema;
  return os.str();
}

c10::IValue coerce_to_type(c10::IValue value, const c10::TypePtr& type) {
  std::string error;
  if (!try_coerce(value, type, &error)) throw GraphError(error);
  return value;
}

std::vector<c10::IValue> bind_arguments(const c10::FunctionSchema& schema,
                                        std::vector<c10::IValue> args,
                                        IValueKwargs kwargs) {
  std::vector<c10::IValue> out;
  std::string error;
  if (!bind(schema, std::move(args), std::move(kwargs), &out, &error)) {
    throw GraphError(absl::StrCat(schema.name(),
                                  schema.overload_name().empty() ? "" : ".",
                                  schema.overload_name(), " ", error,
                                  "; its schema is ", schema_string(schema)));
  }
  return out;
}

bool arguments_fit(const c10::FunctionSchema& schema,
                   const std::vector<c10::IValue>& args,
                   const IValueKwargs& kwargs) {
  std::vector<c10::IValue> out;
  std::string error;
  return bind(schema, args, kwargs, &out, &error);
}

c10::IValue argument_to_ivalue(const Argument& arg, const c10::TypePtr& type) {
  c10::IValue value;
  switch (arg.kind()) {
    case ArgumentKind::kNone: break;
    case ArgumentKind::kBool: value = arg.to_bool(); break;
    case ArgumentKind::kInt: value = arg.to_int(); break;
    case ArgumentKind::kDouble: value = arg.to_double(); break;
    case ArgumentKind::kComplex: value = arg.to_complex(); break;
    case ArgumentKind::kString: value = arg.to_string_ref(); break;
    case ArgumentKind::kDtype: value = arg.to_dtype(); break;
    case ArgumentKind::kLayout: value = arg.to_layout(); break;
    case ArgumentKind::kDevice: value = arg.to_device(); break;
    case ArgumentKind::kMemoryFormat: value = arg.to_memory_format(); break;
    case ArgumentKind::kNode:
      throw GraphError(absl::StrCat("argument_to_ivalue: ", arg.to_string(),
                                    " is a node, not a constant"));
    case ArgumentKind::kTuple: {
      std::vector<c10::IValue> elems;
      for (const Argument& e : arg.elements()) {
        elems.push_back(argument_to_ivalue(e));
      }
      value = c10::ivalue::Tuple::create(std::move(elems));
      break;
    }
    case ArgumentKind::kList: {
      const auto& elems = arg.elements();
      auto all = [&](ArgumentKind k) {
        return std::all_of(elems.begin(), elems.end(),
                           [&](const Argument& e) { return e.kind() == k; });
      };
      if (!elems.empty() && all(ArgumentKind::kInt)) {
        value = c10::List<int64_t>(arg.to_int_list());
      } else if (!elems.empty() && all(ArgumentKind::kDouble)) {
        c10::List<double> list;
        for (const Argument& e : elems) list.push_back(e.to_double());
        value = std::move(list);
      } else if (!elems.empty() && all(ArgumentKind::kBool)) {
        c10::List<bool> list;
        for (const Argument& e : elems) list.push_back(e.to_bool());
        value = std::move(list);
      } else {
        c10::impl::GenericList list(c10::AnyType::get());
        for (const Argument& e : elems) list.push_back(argument_to_ivalue(e));
        value = std::move(list);
      }
      break;
    }
  }
  return type ? coerce_to_type(std::move(value), type) : value;
}

Argument ivalue_to_argument(
    const c10::IValue& value, const c10::TypePtr& real_type,
    const std::function<Argument(const at::Tensor&)>& tensor_to_argument) {
  c10::TypePtr type = unwrap_optional(real_type);
  if (value.isNone()) return Argument();
  if (value.isTensor()) {
    const at::Tensor& t = value.toTensor();
    return t.defined() ? tensor_to_argument(t) : Argument();
  }
  if (value.isBool()) return Argument(value.toBool());
  if (value.isInt() || value.isSymInt()) {
    int64_t i = value.isInt() ? value.toInt()
                              : value.toSymInt().expect_int();
    if (type) {
      switch (type->kind()) {
        case c10::TypeKind::ScalarTypeType:
          return Argument(static_cast<c10::ScalarType>(i));
        case c10::TypeKind::LayoutType:
          return Argument(static_cast<c10::Layout>(i));
        case c10::TypeKind::MemoryFormatType:
          return Argument(static_cast<c10::MemoryFormat>(i));
        default:
          break;
      }
    }
    return Argument(i);
  }
  if (value.isDouble()) return Argument(value.toDouble());
  if (value.isComplexDouble()) {
    return Argument(c10::complex<double>(value.toComplexDouble()));
  }
  if (value.isString()) return Argument(value.toStringRef());
  if (value.isDevice()) return Argument(value.toDevice());
  if (value.isList()) {
    c10::TypePtr elem_type;
    if (type && type->kind() == c10::TypeKind::ListType) {
      elem_type = type->castRaw<c10::ListType>()->getElementType();
    }
    std::vector<Argument> elems;
    for (const c10::IValue& e : value.toListRef()) {
      elems.push_back(ivalue_to_argument(e, elem_type, tensor_to_argument));
    }
    return Argument::list(std::move(elems));
  }
  if (value.isTuple()) {
    const auto& items = value.toTupleRef().elements();
    const c10::TupleType* tuple_type =
        type && type->kind() == c10::TypeKind::TupleType
            ? type->castRaw<c10::TupleType>()
            : nullptr;
    std::vector<Argument> elems;
    for (size_t i = 0; i < items.size(); ++i) {
      c10::TypePtr elem_type =
          tuple_type && i < tuple_type->elements().size()
              ? tuple_type->elements()[i]
              : nullptr;
      elems.push_back(ivalue_to_argument(items[i], elem_type,
                                         tensor_to_argument));
    }
    return Argument::tuple(std::move(elems));
  }
  throw GraphError(absl::StrCat("a value of type ", value.tagKind(),
                                " cannot be recorded as a graph argument"));
}

std::pair<std::vector<Argument>, Kwargs> split_arguments(
    const c10::FunctionSchema& schema, std::vector<Argument> full) {
  const auto& params = schema.arguments();
  auto is_default = [&](size_t i) {
    const auto& d = params[i].default_value();
    if (!d) return false;
    Argument default_arg = ivalue_to_argument(
        *d, params[i].real_type(), [](const at::Tensor&) { return Argument(); });
    return default_arg == full[i];
  };
  size_t positional = 0;
  while (positional < params.size() && positional < full.size() &&
         !params[positional].kwarg_only()) {
    ++positional;
  }
  size_t keep = positional;
  while (keep > 0 && is_default(keep - 1)) --keep;
  std::vector<Argument> args(std::make_move_iterator(full.begin()),
                             std::make_move_iterator(full.begin() + keep));
  Kwargs kwargs;
  for (size_t i = positional; i < full.size() && i < params.size(); ++i) {
    if (!is_default(i)) kwargs.emplace_back(params[i].name(), std::move(full[i]));
  }
  return {std::move(args), std::move(kwargs)};
}

c10::OperatorHandle resolve_method(const std::string& method_name,
                                   const std::vector<c10::IValue>& args,
                                   const IValueKwargs& kwargs) {
  static std::mutex mutex;
  static auto* overloads =
      new absl::flat_hash_map<std::string, std::vector<c10::OperatorHandle>>();
  std::vector<c10::OperatorHandle> candidates;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = overloads->find(method_name);
    if (it == overloads->end()) {
      std::string qualified = "aten::" + method_name;
      std::vector<std::string> names;
      for (const c10::OperatorName& name :
           c10::Dispatcher::singleton().getAllOpNames()) {
        if (name.name == qualified) names.push_back(name.overload_name);
      }
      std::sort(names.begin(), names.end());
      std::vector<c10::OperatorHandle> handles;
      for (const std::string& overload : names) {
        auto h = c10::Dispatcher::singleton().findSchema({qualified, overload});
        if (h) handles.push_back(*h);
      }
      it = overloads->emplace(method_name, std::move(handles)).first;
    }
    candidates = it->second;
  }
  std::vector<std::string> tried;
  for (const c10::OperatorHandle& h : candidates) {
    if (arguments_fit(h.schema(), args, kwargs)) return h;
    tried.push_back(schema_string(h.schema()));
  }
  if (candidates.empty()) {
    throw GraphError(absl::StrCat("call_method: no tensor method named '",
                                  method_name, "' (no operator aten::",
                                  method_name, ")"));
  }
  std::vector<std::string> kinds;
  for (const c10::IValue& a : args) kinds.push_back(describe(a));
  throw GraphError(absl::StrCat(
      "call_method: no overload of aten::", method_name,
      " takes arguments (", absl::StrJoin(kinds, ", "), "); tried:\n  ",
      absl::StrJoin(tried, "\n  ")));
}

}  // namespace fx

namespace fx {

c10::OperatorHandle resolve_method(const Node& node) {
  auto stand_in = [](const Argument& a) -> c10::IValue {
    if (a.is_node()) return at::Tensor();
    return argument_to_ivalue(map_arg(a, [](Node*) { return Argument(); }));
  };
  std::vector<c10::IValue> args;
  for (const Argument& a : node.args()) args.push_back(stand_in(a));
  IValueKwargs kwargs;
  for (const auto& kv : node.kwargs()) {
    kwargs.emplace_back(kv.first, stand_in(kv.second));
  }
  return resolve_method(node.target().str(), args, kwargs);
}

}  // namespace fx

namespace fx {


std::optional<AliasedUse> aliased_use(const Node& user, const Node* input) {
  if (user.op() != Opcode::kCallFunction || !user.target().is_operator()) {
    return std::nullopt;
  }
  const c10::FunctionSchema& schema = user.target().op().schema();
  std::vector<std::optional<Argument>> bound;
  try {
    bound = bind_node_arguments(user, schema);
  } catch (const GraphError&) {
    return std::nullopt;
  }
  AliasedUse use;
  for (size_t i = 0; i < bound.size(); ++i) {
    const c10::AliasInfo* info = schema.arguments()[i].alias_info();
    if (!bound[i] || info == nullptr) continue;
    bool mentions = false;
    for_each_node(*bound[i], [&](Node* n) { mentions = mentions || n == input; });
    if (!mentions) continue;
    use.aliased = true;
    use.written = use.written || info->isWrite();
  }
  return use;
}

Argument default_argument(const c10::FunctionSchema& schema, size_t index) {
  const c10::Argument& param = schema.arguments().at(index);
  return ivalue_to_argument(*param.default_value(), param.real_type(),
                            [](const at::Tensor&) { return Argument(); });
}

std::vector<Argument> full_arguments(const Node& node,
                                     const c10::FunctionSchema& schema) {
  std::vector<std::optional<Argument>> bound = bind_node_arguments(node, schema);
  std::vector<Argument> full;
  full.reserve(bound.size());
  for (size_t i = 0; i < bound.size(); ++i) {
    if (bound[i]) {
      full.push_back(std::move(*bound[i]));
    } else if (schema.arguments()[i].default_value()) {
      full.push_back(default_argument(schema, i));
    } else {
      throw argument_misfit(node, schema,
                   absl::StrCat("it does not give argument '",
                                schema.arguments()[i].name(),
                                "', which has no default"));
    }
  }
  return full;
}

namespace {

void check_operator_call(const Node& node, const char* what) {
  if (node.op() != Opcode::kCallFunction || !node.target().is_operator()) {
    throw GraphError(absl::StrCat(what, ": %", node.name(), " is a ",
                                  opcode_name(node.op()), " of ",
                                  node.target().to_string(),
                                  ", not a call_function of an operator"));
  }
}

// The index of `call`'s schema argument `name`; throws naming the schema
// when it has none.
size_t argument_index(const Node& call, const c10::FunctionSchema& schema,
                      std::string_view name) {
  auto index =
      schema.argumentIndexWithName(c10::string_view(name.data(), name.size()));
  if (!index) {
    throw GraphError(absl::StrCat("%", call.name(), " calls ",
                                  schema_string(schema),
                                  ", which has no argument '", std::string(name), "'"));
  }
  return static_cast<size_t>(*index);
}

}  // namespace

CallArguments::CallArguments(const Node& call) : call_(&call) {
  check_operator_call(call, "CallArguments");
  schema_ = &call.target().op().schema();
  full_ = full_arguments(call, *schema_);
}

bool CallArguments::has(std::string_view name) const {
  return schema_->argumentIndexWithName(
             c10::string_view(name.data(), name.size()))
      .has_value();
}

const Argument& CallArguments::operator[](std::string_view name) const {
  return full_[argument_index(*call_, *schema_, name)];
}

void set_full_arguments(Node& call, std::vector<Argument> full) {
  check_operator_call(call, "set_full_arguments");
  auto [args, kwargs] =
      split_arguments(call.target().op().schema(), std::move(full));
  call.set_args(std::move(args));
  call.set_kwargs(std::move(kwargs));
}

void set_operator_argument(Node& call, std::string_view name, Argument value) {
  check_operator_call(call, "set_operator_argument");
  const c10::FunctionSchema& schema = call.target().op().schema();
  std::vector<Argument> full = full_arguments(call, schema);
  full[argument_index(call, schema, name)] = std::move(value);
  set_full_arguments(call, std::move(full));
}

std::optional<Argument> operator_argument(const Node& node,
                                          std::string_view name) {
  check_operator_call(node, "operator_argument");
  const c10::FunctionSchema& schema = node.target().op().schema();
  auto index = schema.argumentIndexWithName(
      c10::string_view(name.data(), name.size()));
  if (!index) return std::nullopt;
  return full_arguments(node, schema)[*index];
}

}  // namespace fx
