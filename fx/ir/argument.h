// Argument: the value type of a Node's args and kwargs.
//
// An Argument holds what an aten schema can take, with tensors replaced by
// references to the Nodes that produce them:
//
//   None, bool, int, double, complex, string, dtype, layout, device,
//   memory format, Node*, and lists or tuples of Arguments (int lists,
//   tensor lists, lists of optional tensors, nested tuples for outputs).
//
// Arguments are immutable values: copying one is cheap (lists share their
// elements) and a Node's args change only through the Node's setters, which
// keep `users` right.
//
// Printing follows torch.fx's print(graph): %name for nodes, None, True,
// False, Python float repr (1e-05, 0.1, 1.0), 'strings', torch.float32,
// torch.strided, device(type='cpu'), torch.contiguous_format, [lists],
// (tuples,).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include <c10/core/Device.h>
#include <c10/core/Layout.h>
#include <c10/core/MemoryFormat.h>
#include <c10/core/Scalar.h>
#include <c10/core/ScalarType.h>
#include <c10/util/Optional.h>
#include <c10/util/complex.h>

namespace fx {

class Node;

enum class ArgumentKind : uint8_t {
  kNone,
  kBool,
  kInt,
  kDouble,
  kComplex,
  kString,
  kDtype,
  kLayout,
  kDevice,
  kMemoryFormat,
  kNode,
  kList,
  kTuple,
};

class Argument {
 public:
  // None.
  Argument() = default;
  Argument(std::nullptr_t) {}
  Argument(c10::nullopt_t) {}

  Argument(bool value) : value_(value) {}
  template <typename T,
            std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>,
                             int> = 0>
  Argument(T value) : value_(static_cast<int64_t>(value)) {}
  template <typename T,
            std::enable_if_t<std::is_floating_point_v<T>, int> = 0>
  Argument(T value) : value_(static_cast<double>(value)) {}
  Argument(c10::complex<double> value) : value_(value) {}
  Argument(std::string value) : value_(std::move(value)) {}
  Argument(const char* value) : value_(std::string(value)) {}
  Argument(std::string_view value) : value_(std::string(value)) {}
  Argument(c10::ScalarType dtype) : value_(dtype) {}
  Argument(c10::Layout layout) : value_(layout) {}
  Argument(c10::Device device) : value_(device) {}
  Argument(c10::MemoryFormat memory_format) : value_(memory_format) {}
  Argument(Node* node) : value_(node) {}
  // An int, double, bool or complex Scalar.
  Argument(const c10::Scalar& scalar);
  // A list of ints, e.g. a size or stride.
  Argument(const std::vector<int64_t>& ints);
  // A list of node references, e.g. the tensors given to aten::cat.
  Argument(const std::vector<Node*>& nodes);

  static Argument list(std::vector<Argument> elements);
  static Argument tuple(std::vector<Argument> elements);

  ArgumentKind kind() const;
  bool is_none() const { return kind() == ArgumentKind::kNone; }
  bool is_bool() const { return kind() == ArgumentKind::kBool; }
  bool is_int() const { return kind() == ArgumentKind::kInt; }
  bool is_double() const { return kind() == ArgumentKind::kDouble; }
  bool is_complex() const { return kind() == ArgumentKind::kComplex; }
  bool is_string() const { return kind() == ArgumentKind::kString; }
  bool is_dtype() const { return kind() == ArgumentKind::kDtype; }
  bool is_layout() const { return kind() == ArgumentKind::kLayout; }
  bool is_device() const { return kind() == ArgumentKind::kDevice; }
  bool is_memory_format() const {
    return kind() == ArgumentKind::kMemoryFormat;
  }
  bool is_node() const { return kind() == ArgumentKind::kNode; }
  bool is_list() const { return kind() == ArgumentKind::kList; }
  bool is_tuple() const { return kind() == ArgumentKind::kTuple; }
  // A list or a tuple.
  bool is_sequence() const { return is_list() || is_tuple(); }

  // Accessors; each throws fx::GraphError when the kind does not match.
  bool to_bool() const;
  int64_t to_int() const;
  // Also accepts an int, as Python does.
  double to_double() const;
  c10::complex<double> to_complex() const;
  const std::string& to_string_ref() const;
  c10::ScalarType to_dtype() const;
  c10::Layout to_layout() const;
  c10::Device to_device() const;
  c10::MemoryFormat to_memory_format() const;
  Node* to_node() const;
  const std::vector<Argument>& elements() const;
  // A list or tuple whose elements are all ints.
  std::vector<int64_t> to_int_list() const;

  // Whether a Node is referenced anywhere inside this argument.
  bool contains_node() const;

  // torch.fx's formatting: `%name` for nodes (without `%` when node_prefix
  // is false, as in the `return` line).
  std::string to_string(bool node_prefix = true) const;

  friend bool operator==(const Argument& a, const Argument& b);
  friend bool operator!=(const Argument& a, const Argument& b) {
    return !(a == b);
  }

 private:
  using Sequence = std::vector<Argument>;
  struct SequenceBox {
    Sequence elements;
    bool is_tuple;
  };
  std::variant<std::monostate, bool, int64_t, double, c10::complex<double>,
               std::string, c10::ScalarType, c10::Layout, c10::Device,
               c10::MemoryFormat, Node*, std::shared_ptr<const SequenceBox>>
      value_;
};

// Keyword arguments in insertion order, as torch.fx's kwargs dict.
using Kwargs = std::vector<std::pair<std::string, Argument>>;

// The keyword argument `name`, or nullptr.
const Argument* find_kwarg(const Kwargs& kwargs, std::string_view name);

// torch.fx's map_arg: a copy of `arg` with every Node replaced by fn(node).
Argument map_arg(const Argument& arg, const std::function<Argument(Node*)>& fn);

// Calls fn on every Node inside `arg`, in order (a node used twice is
// visited twice).
void for_each_node(const Argument& arg, const std::function<void(Node*)>& fn);

// Formats args as torch.fx does: `(%x, 1)`, `(%x,)`, `()`.
std::string format_args(const std::vector<Argument>& args);
// Formats kwargs as torch.fx does: `{alpha: 2}`, `{}`.
std::string format_kwargs(const Kwargs& kwargs);

// Python's repr of a float: the shortest string that reads back as the same
// double (0.1, 1.0, 1e-05, 1e+20, inf, nan).
std::string format_double(double value);

// Python spellings of enum values: torch.float32, torch.strided,
// torch.contiguous_format.
std::string format_dtype(c10::ScalarType dtype);
std::string format_layout(c10::Layout layout);
std::string format_memory_format(c10::MemoryFormat memory_format);

// The reverse of the three above: the dtype, layout or memory format a
// Python spelling names ("torch.float32" -> c10::ScalarType::Float), or
// nullopt.
std::optional<Argument> parse_torch_name(std::string_view name);

}  // namespace fx
