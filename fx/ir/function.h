// Registered C++ functions: calls the tracer cannot or should not see into,
// kept as one opaque call_function node (torch.fx's `wrap`).
//
// Most users register through fx::wrap (fx/trace/tracer.h), which builds
// the boxed form from a typed function. This header is the registry
// underneath, also used by the executor and by passes that create such
// nodes.
//
//   before tracing:  y = my_nms(boxes, scores)          // a C++ function
//   after wrapping:  %my_nms : [#users=1] = call_function[target=my_nms](args = (%boxes, %scores), kwargs = {})
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <ATen/core/ivalue.h>

namespace fx {

class Node;

using BoxedFunction =
    std::function<c10::IValue(const std::vector<c10::IValue>& args)>;

class Function {
 public:
  Function(std::string name, BoxedFunction call, bool is_pure)
      : name_(std::move(name)), call_(std::move(call)), is_pure_(is_pure) {}

  const std::string& name() const { return name_; }
  // Calls the function on positional arguments.
  c10::IValue operator()(const std::vector<c10::IValue>& args) const {
    return call_(args);
  }
  // Pure functions have no side effects and may be removed by dead code
  // elimination when unused, or merged by CSE.
  bool is_pure() const { return is_pure_; }

 private:
  std::string name_;
  BoxedFunction call_;
  bool is_pure_;
};

// Registers `call` under `name` and returns the registry's entry, which lives
// for the rest of the process. Names are unique: registering a name twice
// throws fx::GraphError.
const Function* register_function(std::string name, BoxedFunction call,
                                  bool is_pure);

// The function registered as `name`, or nullptr.
const Function* find_function(std::string_view name);

// Builtin: getitem(container, index) -> element of a tuple or list, as
// Python's operator.getitem. The tracer uses it for ops with several outputs.
const Function* getitem();

// Builtins for shapes that vary between runs (fx::TraceOptions::dynamic):
// a size read from a tensor, and the integer arithmetic on sizes, as
// torch.fx keeps `x.size(0) * 4` as call_function nodes.
//   %sym_size = sym_size(%x, 0)
//   %sym_mul = sym_mul(%sym_size, 4)
//   %view = aten::view(%x, [%sym_mul, -1])
// sym_size(tensor, dim) -> int: the size of a dimension (0 <= dim < rank).
const Function* sym_size();
// sym_add(a, b) -> a + b; sym_mul(a, b) -> a * b; sym_floordiv(a, b) ->
// a // b, rounded toward negative infinity as Python's //; sym_mod(a, b) ->
// a % b with the divisor's sign, as Python's % (torch.export's runtime
// assertions: Eq(Mod(s0, 2), 0)). A division by zero, or of the smallest
// int64 by -1, is an fx::ExecutionError.
const Function* sym_add();
const Function* sym_mul();
const Function* sym_floordiv();
const Function* sym_mod();
// Python's floor division (rounds toward negative infinity), as sym_floordiv
// and generated code compute it.
inline int64_t floor_divide(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
// sym_floordiv's and sym_mod's values, checked (generated code calls these):
// b == 0, or a the smallest int64 and b == -1, throws fx::ExecutionError.
int64_t checked_floor_divide(int64_t a, int64_t b);
int64_t checked_python_mod(int64_t a, int64_t b);
// Whether `function` is one of the five above, and whether `node` calls one
// (its value is an int, not a tensor).
bool is_sym_function(const Function& function);
bool is_sym_call(const Node& node);

}  // namespace fx
