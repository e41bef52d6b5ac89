// Operator schemas: between a node's args/kwargs and an operator's boxed
// stack (torch.fx's operator_schemas.py).
//
// An aten call is recorded with the arguments its caller wrote: positional
// ones up to the last that differs from its default, keyword-only ones
// (after `*` in the schema) as kwargs when they differ from their default:
//
//   aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1)
//     stack (x, y, 1)   ->  args (%x, %y)           kwargs {}
//     stack (x, y, 2)   ->  args (%x, %y)           kwargs {alpha: 2}
//
// and bound back to a full stack, with defaults filled in and each value
// converted to the type the schema wants (int lists, Tensor?[] lists, dtype
// as int, ...), when it runs.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>

#include "fx/ir/argument.h"
#include "fx/ir/node.h"
#include "fx/ir/target.h"

namespace fx {

using IValueKwargs = std::vector<std::pair<std::string, c10::IValue>>;

// `value` converted to what a schema argument of type `type` takes: None for
// an optional, typed lists (List<Tensor>, List<optional<Tensor>>,
// List<int64_t>, ...), an int for a double, ... Throws fx::GraphError
// naming both types when the value cannot be one of `type`.
c10::IValue coerce_to_type(c10::IValue value, const c10::TypePtr& type);

// The full boxed stack for `schema`: positional args, then kwargs by name,
// then defaults. Throws fx::GraphError for too many positional args, an
// unknown or repeated keyword, a missing argument without default, or a
// value of the wrong type (naming the argument and the schema).
std::vector<c10::IValue> bind_arguments(const c10::FunctionSchema& schema,
                                        std::vector<c10::IValue> args,
                                        IValueKwargs kwargs);

// Whether bind_arguments would succeed for these values' types.
bool arguments_fit(const c10::FunctionSchema& schema,
                   const std::vector<c10::IValue>& args,
                   const IValueKwargs& kwargs);

// An Argument that holds no Node as an IValue of schema type `type` (or,
// with a null type, of its natural type: int lists become IntLists, mixed
// lists GenericLists, tuples Tuples).
c10::IValue argument_to_ivalue(const Argument& arg,
                               const c10::TypePtr& type = nullptr);

// An IValue as an Argument; tensors go through `tensor_to_argument`.
// `real_type` (the schema argument's real_type, may be null) tells ints that
// are dtypes, layouts or memory formats.
Argument ivalue_to_argument(
    const c10::IValue& value, const c10::TypePtr& real_type,
    const std::function<Argument(const at::Tensor&)>& tensor_to_argument);

// bind_node_arguments (a node's args and kwargs bound to a schema's
// parameters) is in fx/ir/node.h: the IR's own is_impure uses it too.

// How `user`, a call_function of an operator, takes the value of `input`:
// through a parameter its schema gives an alias set (a view,
// Tensor(a) self -> Tensor(a), so the result may share input's memory), and
// whether that parameter is written (Tensor(a!)). nullopt when `user` calls
// no operator or its arguments do not bind to the schema: callers decide
// what an unknown user may do.
//   %v = aten::select.int(%c, 0, 1)     {aliased, not written}
//   %w = aten::copy_(%v, %x)            for %v: {aliased, written}
//   %a = aten::add.Tensor(%c, %x)       {not aliased}
struct AliasedUse {
  bool aliased = false;
  bool written = false;
};
std::optional<AliasedUse> aliased_use(const Node& user, const Node* input);

// The default of parameter `index` of `schema` as an Argument, in the form
// the tracer records values of its type. The parameter must have one.
Argument default_argument(const c10::FunctionSchema& schema, size_t index);

// One Argument per parameter: the node's, else the default. Throws
// fx::GraphError as bind_node_arguments, and for a missing argument that
// has no default.
std::vector<Argument> full_arguments(const Node& node,
                                     const c10::FunctionSchema& schema);

// A call's arguments by parameter name, bound once (full_arguments):
//   %conv2d = call_function[target=aten::conv2d](args = (%x, %w, None, [2, 2]))
//   CallArguments args(*conv2d);
//   args["stride"]       [2, 2]
//   args["padding"]      [0, 0]     (the default)
//   args.has("groups")   true;      args.has("transposed")  false
class CallArguments {
 public:
  // `call` must be a call_function of an operator (else fx::GraphError);
  // throws as full_arguments does.
  explicit CallArguments(const Node& call);
  bool has(std::string_view name) const;
  // Throws fx::GraphError naming the schema when it has no argument `name`.
  const Argument& operator[](std::string_view name) const;
  // One per schema argument, in order.
  const std::vector<Argument>& full() const { return full_; }

 private:
  const Node* call_;
  const c10::FunctionSchema* schema_;
  std::vector<Argument> full_;
};

// The value `node`, a call_function of an operator, passes as the schema
// argument `name`: from its args or kwargs, or else the default. nullopt
// when the schema has no argument `name`.
//   %d = aten::dropout(%x, 0.1, False)     operator_argument(d, "train") == False
//   %c = aten::contiguous(%x)              operator_argument(c, "memory_format")
//                                              == torch.contiguous_format
std::optional<Argument> operator_argument(const Node& node,
                                          std::string_view name);

// Splits a full list of Arguments (one per schema argument) into the args
// and kwargs a caller would have written: see the header comment.
std::pair<std::vector<Argument>, Kwargs> split_arguments(
    const c10::FunctionSchema& schema, std::vector<Argument> full);

// Sets the arguments of `call`, a call_function of an operator, from a
// full list (one per schema argument), written as split_arguments writes
// them.
void set_full_arguments(Node& call, std::vector<Argument> full);
// Sets the schema argument `name` of `call`, a call_function of an
// operator, keeping the others:
//   %d = aten::dropout(%x, 0.1, True)
//   set_operator_argument(*d, "train", false)   %d = aten::dropout(%x, 0.1, False)
// Throws fx::GraphError naming the schema when it has no argument `name`.
void set_operator_argument(Node& call, std::string_view name, Argument value);

// The overload of aten::<method_name> that call_method would call with these
// values (args[0] is the tensor), chosen as the first, in a fixed order, whose
// schema they fit. Throws fx::GraphError listing the overloads tried.
c10::OperatorHandle resolve_method(const std::string& method_name,
                                   const std::vector<c10::IValue>& args,
                                   const IValueKwargs& kwargs);

// The operator a call_method node calls: resolve_method with each node
// argument standing in as a tensor.
c10::OperatorHandle resolve_method(const Node& node);

// "aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"
std::string schema_string(const c10::FunctionSchema& schema);

}  // namespace fx
