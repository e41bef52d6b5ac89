#include "fx/ir/function.h"

#include <limits>
#include <memory>
#include <mutex>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "fx/ir/control_flow.h"
#include "fx/ir/errors.h"
#include "fx/ir/node.h"

namespace fx {
namespace {

struct Registry {
  std::mutex mutex;
  absl::flat_hash_map<std::string, std::unique_ptr<Function>> functions;
};

Registry& registry() {
  static Registry* r = new Registry();
  return *r;
}

c10::IValue getitem_impl(const std::vector<c10::IValue>& args) {
  if (args.size() != 2 || !args[1].isInt()) {
    throw ExecutionError("getitem takes (a tuple or list, an int index)");
  }
  int64_t index = args[1].toInt();
  const c10::IValue& container = args[0];
  auto pick = [&](auto size, auto get) -> c10::IValue {
    int64_t n = static_cast<int64_t>(size);
    int64_t i = index < 0 ? index + n : index;
    if (i < 0 || i >= n) {
      throw ExecutionError(absl::StrCat("getitem: index ", index,
                                        " is out of range for a sequence of ",
                                        n, " elements"));
    }
    return get(i);
  };
  if (container.isTuple()) {
    const auto& elems = container.toTupleRef().elements();
    return pick(elems.size(), [&](int64_t i) { return elems[i]; });
  }
  if (container.isList()) {
    auto list = container.toListRef();
    return pick(list.size(), [&](int64_t i) { return list[i]; });
  }
  throw ExecutionError(absl::StrCat("getitem: expected a tuple or list, got ",
                                    container.tagKind()));
}

// Builtin dict(keys, values): a dict with string keys, as forward returns
// (torchvision's segmentation models: {'out': ..., 'aux': ...}).
//   %dict = dict(['out', 'aux'], [%relu, %add])
c10::IValue dict_impl(const std::vector<c10::IValue>& args) {
  if (args.size() != 2 || !args[0].isList() || !args[1].isList() ||
      args[0].toListRef().size() != args[1].toListRef().size()) {
    throw ExecutionError(
        "dict takes (a list of string keys, a list of as many values)");
  }
  const auto keys = args[0].toListRef();
  const auto values = args[1].toListRef();
  c10::TypePtr value_type = c10::TensorType::get();
  for (const c10::IValue& v : values) {
    if (!v.isTensor()) value_type = c10::AnyType::get();
  }
  c10::impl::GenericDict out(c10::StringType::get(), value_type);
  out.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!keys[i].isString()) {
      throw ExecutionError(absl::StrCat("dict: key ", i, " is a ",
                                        keys[i].tagKind(), ", not a string"));
    }
    out.insert_or_assign(keys[i], values[i]);
  }
  return out;
}

const Function* dict() {
  static const Function* f =
      register_function("dict", &dict_impl, /*is_pure=*/true);
  return f;
}

int64_t int_argument(const std::vector<c10::IValue>& args, size_t i,
                     const char* function) {
  if (i >= args.size() || !args[i].isInt()) {
    throw ExecutionError(absl::StrCat(function, " takes two ints; argument ",
                                      i, " is ",
                                      i < args.size() ? args[i].tagKind()
                                                      : "missing"));
  }
  return args[i].toInt();
}

c10::IValue sym_size_impl(const std::vector<c10::IValue>& args) {
  if (args.size() != 2 || !args[0].isTensor() || !args[1].isInt()) {
    throw ExecutionError("sym_size takes (a tensor, an int dimension)");
  }
  const at::Tensor& t = args[0].toTensor();
  const int64_t d = args[1].toInt();
  if (d < 0 || d >= t.dim()) {
    throw ExecutionError(absl::StrCat("sym_size: dimension ", d,
                                      " of a tensor with ", t.dim(),
                                      " dimensions"));
  }
  return t.size(d);
}

template <typename F>
const Function* int_function(const char* name, F f) {
  return register_function(
      name,
      [name, f](const std::vector<c10::IValue>& args) -> c10::IValue {
        if (args.size() != 2) {
          throw ExecutionError(absl::StrCat(name, " takes two ints, got ",
                                            args.size(), " arguments"));
        }
        return f(int_argument(args, 0, name), int_argument(args, 1, name));
      },
      /*is_pure=*/true);
}

}  // namespace

const Function* sym_size() {
  static const Function* f =
      register_function("sym_size", &sym_size_impl, /*is_pure=*/true);
  return f;
}

const Function* sym_add() {
  static const Function* f =
      int_function("sym_add", [](int64_t a, int64_t b) {
        int64_t sum = 0;
        if (__builtin_add_overflow(a, b, &sum)) {
          throw ExecutionError(absl::StrCat("sym_add: ", a, " + ", b,
                                            " overflows int64"));
        }
        return sum;
      });
  return f;
}

const Function* sym_mul() {
  static const Function* f =
      int_function("sym_mul", [](int64_t a, int64_t b) {
        int64_t product = 0;
        if (__builtin_mul_overflow(a, b, &product)) {
          throw ExecutionError(absl::StrCat("sym_mul: ", a, " * ", b,
                                            " overflows int64"));
        }
        return product;
      });
  return f;
}

namespace {

void check_divisor(int64_t a, int64_t b, const char* function) {
  if (b == 0) {
    throw ExecutionError(absl::StrCat(function, ": ", a, " divided by zero"));
  }
  if (b == -1 && a == std::numeric_limits<int64_t>::min()) {
    throw ExecutionError(absl::StrCat(function, ": ", a,
                                      " divided by -1 overflows int64"));
  }
}

}  // namespace

int64_t checked_floor_divide(int64_t a, int64_t b) {
  check_divisor(a, b, "sym_floordiv");
  return floor_divide(a, b);
}

int64_t checked_python_mod(int64_t a, int64_t b) {
  check_divisor(a, b, "sym_mod");
  const int64_t r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

const Function* sym_floordiv() {
  static const Function* f =
      int_function("sym_floordiv", &checked_floor_divide);
  return f;
}

const Function* sym_mod() {
  static const Function* f = int_function("sym_mod", &checked_python_mod);
  return f;
}

const Function* register_function(std::string name, BoxedFunction call,
                                  bool is_pure) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto& slot = r.functions[name];
  if (slot) {
    throw GraphError(absl::StrCat(
        "a function named '", name,
        "' is already registered: give each wrapped function its own name"));
  }
  slot = std::make_unique<Function>(std::move(name), std::move(call), is_pure);
  return slot.get();
}

const Function* find_function(std::string_view name) {
  if (name == "getitem") return getitem();
  if (name == "dict") return dict();
  if (name == "sym_size") return sym_size();
  if (name == "sym_add") return sym_add();
  if (name == "sym_mul") return sym_mul();
  if (name == "sym_floordiv") return sym_floordiv();
  if (name == "sym_mod") return sym_mod();
  if (name == "cond") return cond_function();
  if (name == "while_loop") return while_loop_function();
  if (name == "scan") return scan_function();
  if (name == "map") return map_function();
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.functions.find(absl::string_view(name.data(), name.size()));
  return it == r.functions.end() ? nullptr : it->second.get();
}

const Function* getitem() {
  static const Function* f =
      register_function("getitem", &getitem_impl, /*is_pure=*/true);
  return f;
}

bool is_sym_function(const Function& function) {
  return &function == sym_size() || &function == sym_add() ||
         &function == sym_mul() || &function == sym_floordiv() ||
         &function == sym_mod();
}

bool is_sym_call(const Node& node) {
  return node.op() == Opcode::kCallFunction && node.target().is_function() &&
         is_sym_function(node.target().function());
}

}  // namespace fx
