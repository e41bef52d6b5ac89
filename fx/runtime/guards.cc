#include "fx/runtime/guards.h"

#include <algorithm>

#include <ATen/ops/empty.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "fx/ir/argument.h"
#include "fx/ir/errors.h"
#include "fx/ir/node.h"
#include "fx/ir/operator_schemas.h"

namespace fx {
namespace {

std::string format_sizes(c10::IntArrayRef sizes) {
  return absl::StrCat("[", absl::StrJoin(sizes, ", "), "]");
}

[[noreturn]] void guard_failure(const std::string& what) {
  throw GuardError(guard_failure_message("GraphModule", what));
}

void check_tensor(const at::Tensor& t, const std::string& who,
                  c10::ScalarType dtype, c10::Device device, int64_t dim,
                  c10::optional<c10::IntArrayRef> sizes,
                  c10::optional<c10::IntArrayRef> strides) {
  if (!t.defined()) {
    throw GuardError(absl::StrCat("GraphModule ", who,
                                  " is an undefined tensor"));
  }
  if (t.scalar_type() != dtype) {
    guard_failure(absl::StrCat(who, " has dtype ",
                               format_dtype(t.scalar_type()),
                               " but the trace saw ", format_dtype(dtype)));
  }
  if (t.device() != device) {
    guard_failure(device_mismatch(who, t.device().str(), device));
  }
  if (t.dim() != dim) {
    guard_failure(rank_mismatch(who, absl::StrCat(t.dim()), dim));
  }
  if (sizes && t.sizes() != *sizes) {
    guard_failure(shape_mismatch(who, format_sizes(t.sizes()), *sizes));
  }
  if (strides && t.strides() != *strides) {
    guard_failure(stride_mismatch(who, format_sizes(t.strides()), *strides));
  }
}

// A tensor with dynamic dimensions: fixed dimensions as the example's,
// dynamic ones within their relations, bound to their symbols.
void check_dynamic_tensor(const at::Tensor& t, const std::string& who,
                          c10::ScalarType dtype, c10::Device device,
                          int64_t dim, bool check_sizes,
                          c10::IntArrayRef sizes,
                          c10::optional<c10::IntArrayRef> strides,
                          const std::vector<DynamicDim>& dynamic,
                          SymbolBindings* symbols) {
  check_tensor(t, who, dtype, device, dim, c10::nullopt, c10::nullopt);
  if (check_sizes) {
    for (size_t i = 0; i < sizes.size(); ++i) {
      const bool varies =
          std::any_of(dynamic.begin(), dynamic.end(), [&](const DynamicDim& d) {
            return d.dim == static_cast<int64_t>(i);
          });
      if (!varies && t.size(i) != sizes[i]) {
        std::vector<std::string> varying;
        for (const DynamicDim& d : dynamic) {
          varying.push_back(absl::StrCat(d.dim, " (", d.symbol, ")"));
        }
        guard_failure(absl::StrCat(
            who, " has shape ", format_sizes(t.sizes()),
            " but the traced code read its sizes: dimension ", i,
            " must be ", sizes[i], " as in the example (dimension",
            varying.size() == 1 ? " " : "s ", absl::StrJoin(varying, ", "),
            " may vary; mark more in fx::TraceOptions::dynamic)"));
      }
    }
  }
  for (const DynamicDim& d : dynamic) {
    const int64_t v = t.size(d.dim);
    if (v < d.min || v > d.max || (d.multiple_of > 1 && v % d.multiple_of)) {
      throw GuardError(absl::StrCat(
          "GraphModule ", outside_bounds(who, absl::StrCat(v), d),
          "; the graph was checked for those sizes only: trace the model "
          "again with bounds that include this one (fx::TraceOptions::"
          "dynamic)"));
    }
    if (symbols == nullptr) continue;
    auto [it, added] = symbols->values.emplace(d.symbol, std::make_pair(v, who));
    if (!added && it->second.first != v) {
      throw GuardError(absl::StrCat(
          "GraphModule ", who, " has ", d.symbol, " = ", v, " (dimension ",
          d.dim, ") but ", it->second.second, " has ", d.symbol, " = ",
          it->second.first, ": dimensions named ", d.symbol,
          " must be equal (the traced program relied on it)"));
    }
  }
  if (strides) {
    const std::vector<int64_t> expected = strides_for(
        t.sizes().vec(), memory_format_of(sizes.vec(), strides->vec()));
    if (t.strides() != c10::IntArrayRef(expected)) {
      guard_failure(stride_mismatch(who, format_sizes(t.strides()), expected));
    }
  }
}

void check_tensor_value(const InputGuard& g, const c10::IValue& value,
                        const std::string& who,
                        SymbolBindings* symbols = nullptr) {
  if (!value.isTensor()) {
    throw GuardError(absl::StrCat("GraphModule ", who,
                                  " must be a Tensor, got ", value.tagKind()));
  }
  if (!g.dynamic.empty()) {
    check_dynamic_tensor(
        value.toTensor(), who, g.dtype, g.device, g.dim, g.check_sizes,
        g.sizes,
        g.check_strides ? c10::optional<c10::IntArrayRef>(g.strides)
                        : c10::nullopt,
        g.dynamic, symbols);
    return;
  }
  check_tensor(value.toTensor(), who, g.dtype, g.device, g.dim,
               g.check_sizes ? c10::optional<c10::IntArrayRef>(g.sizes)
                             : c10::nullopt,
               g.check_strides ? c10::optional<c10::IntArrayRef>(g.strides)
                               : c10::nullopt);
}

void check_length(size_t length, const std::string& who, size_t expected) {
  if (length != expected) {
    guard_failure(length_mismatch(who, absl::StrCat(length), expected));
  }
}

void check_value(const c10::IValue& value, const std::string& who,
                 const std::string& expected) {
  std::string got;
  try {
    got = ivalue_to_argument(value, nullptr, [](const at::Tensor&) {
            return Argument("<tensor>");
          }).to_string();
  } catch (const GraphError&) {
    got = value.tagKind();
  }
  if (got != expected) {
    guard_failure(absl::StrCat(who, " is ", got, " but the trace saw ",
                               expected, ", which is baked into the graph"));
  }
}

}  // namespace

std::vector<std::string> dynamic_symbols(const Graph& graph) {
  std::vector<std::string> out;
  for (const Node* ph : graph.placeholders()) {
    const InputGuard* guard = ph->meta().get(kGuard);
    if (guard == nullptr) continue;
    for (const DynamicDim& d : guard->dynamic) {
      if (std::find(out.begin(), out.end(), d.symbol) == out.end()) {
        out.push_back(d.symbol);
      }
    }
  }
  return out;
}

std::vector<SymbolSizes> sample_sizes(const std::vector<DynamicDim>& dims,
                                      const SymbolSizes& example) {
  std::vector<SymbolSizes> out(2);
  int64_t k = 0;
  for (const auto& [symbol, e] : example) {
    const DynamicDim* d = nullptr;
    for (const DynamicDim& candidate : dims) {
      if (candidate.symbol == symbol) d = &candidate;
    }
    const int64_t m = d->multiple_of;
    auto aligned_down = [&](int64_t v) { return v / m * m; };
    auto aligned_up = [&](int64_t v) { return (v + m - 1) / m * m; };
    // A near size and a far one (a size read only through a division
    // changes between them), then whatever the bounds leave.
    std::vector<int64_t> candidates = {
        e + 2 * (k + 1) * m,
        2 * e + (2 * k + 5) * m,
        aligned_down(d->max),
        e - (k + 1) * m,
        aligned_up(std::max<int64_t>(d->min, 1)),
    };
    for (int64_t j = 1; j <= 4; ++j) {
      candidates.push_back(e + j * m);
      candidates.push_back(e - j * m);
    }
    // A data-dependent size (nonzero's rows) may be 0: a far size where it
    // selects from few elements (at most 2).
    if (d->data_dependent()) candidates.push_back(0);
    std::vector<int64_t> valid;
    for (int64_t v : candidates) {
      if (v < d->min || v > d->max || v < (d->data_dependent() ? 0 : 1) || v == e ||
          std::find(valid.begin(), valid.end(), v) != valid.end()) {
        continue;
      }
      valid.push_back(v);
    }
    // Two symbols whose three sizes lie on one line (T = 2*B + 3 in every
    // trace) would let a size of one pass for a function of the other: the
    // second size is the first candidate off every earlier symbol's line.
    std::vector<int64_t> picked(valid.begin(), valid.begin() + std::min<size_t>(valid.size(), 2));
    // Every other symbol goes far first: a size of one then cannot follow
    // the pattern of another's (T//2 = B + 2 at B = 2, 3, 9 and T = 8, 10,
    // 23 when both went near first).
    if (k % 2 == 1 && picked.size() == 2) std::swap(picked[0], picked[1]);
    const std::string& name = symbol;  // (structured bindings are not captured)
    const int64_t example_size = e;
    auto off_every_line = [&](int64_t second) {
      for (const auto& [earlier, size] : example) {
        if (earlier == name) break;
        const int64_t x1 = out[0].at(earlier) - size;
        const int64_t x2 = out[1].at(earlier) - size;
        if (x1 * (second - example_size) == x2 * (picked[0] - example_size)) return false;
      }
      return true;
    };
    if (picked.size() == 2 && !off_every_line(picked[1])) {
      for (int64_t j = 1; j <= 8; ++j) {
        const int64_t up = picked[1] + j * m, down = picked[1] - j * m;
        const int64_t choice = up <= d->max && off_every_line(up) ? up
                               : down >= std::max<int64_t>(d->min, 1) && down != e &&
                                         down != picked[0] && off_every_line(down)
                                   ? down
                                   : 0;
        if (choice != 0 && choice != e && choice != picked[0]) {
          picked[1] = choice;
          break;
        }
      }
    }
    if (picked.size() < 2) {
      if (d->data_dependent()) {
        throw TraceError(absl::StrCat(
            "the data-dependent size ", symbol, " (", d->relation(),
            ") has fewer than two values besides ", e,
            " to trace at, which generalizing it needs: it selects from too "
            "few elements"));
      }
      throw TraceError(absl::StrCat(
          "the dynamic dimension ", symbol, " (", d->relation(),
          ") leaves fewer than two sizes besides the example's ", e,
          " to trace at, which generalizing needs: widen its bounds, or "
          "leave it static"));
    }
    out[0][symbol] = picked[0];
    out[1][symbol] = picked[1];
    ++k;
  }
  return out;
}

namespace {

// A tensor of `shape` laid out as `t` is: its dimensions in the same order
// of strides, with the same gaps between them (a transposed or sliced
// example gives a transposed or sliced input), so that a program whose
// operators decide by strides (reshape copies what view cannot alias)
// records the same graph at every size.
at::Tensor like(const at::Tensor& t, const std::vector<int64_t>& shape,
                bool filled) {
  const at::TensorOptions options = t.options();
  if (t.is_contiguous() || t.dim() == 0 || t.numel() == 0 ||
      std::find(shape.begin(), shape.end(), 0) != shape.end()) {
    return filled ? at::zeros(shape, options) : at::empty(shape, options);
  }
  const c10::MemoryFormat format = t.suggest_memory_format();
  if (format != c10::MemoryFormat::Contiguous && t.is_contiguous(format)) {
    const auto formatted = options.memory_format(format);
    return filled ? at::zeros(shape, formatted) : at::empty(shape, formatted);
  }
  // Innermost first: by stride, then by position (later is inner).
  const int64_t n = t.dim();
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t d = 0; d < n; ++d) order[static_cast<size_t>(d)] = n - 1 - d;
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return t.stride(a) < t.stride(b);
  });
  std::vector<int64_t> strides(static_cast<size_t>(n), 0);
  int64_t next = 1;         // the new stride a dense dimension would take
  int64_t old_next = 1;     // the example's
  int64_t extent = 1;       // elements the new layout spans
  for (int64_t d : order) {
    const int64_t old_stride = t.stride(d);
    if (old_stride == 0) continue;  // expanded: stays a broadcast
    // The example's gap before this dimension, kept when it is whole.
    const int64_t gap = old_next > 0 && old_stride >= old_next &&
                                old_stride % old_next == 0
                            ? old_stride / old_next
                            : 1;
    const int64_t stride = next * gap;
    strides[static_cast<size_t>(d)] = stride;
    const int64_t size = shape[static_cast<size_t>(d)];
    extent += (size - 1) * stride;
    next = stride * std::max<int64_t>(size, 1);
    old_next = old_stride * std::max<int64_t>(t.size(d), 1);
  }
  at::Tensor storage = filled ? at::zeros({extent}, options)
                              : at::empty({extent}, options);
  return storage.as_strided(shape, strides);
}

}  // namespace

std::vector<c10::IValue> resized_inputs(const std::vector<c10::IValue>& inputs,
                                        const std::vector<DynamicDim>& dims,
                                        const SymbolSizes& sizes,
                                        bool filled) {
  std::vector<c10::IValue> out = inputs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::vector<int64_t> shape;
    for (const DynamicDim& d : dims) {
      if (d.input != i) continue;
      const at::Tensor& t = inputs[i].toTensor();
      if (shape.empty()) shape = t.sizes().vec();
      shape[d.dim] = sizes.at(d.symbol);
    }
    if (shape.empty()) continue;
    out[i] = like(inputs[i].toTensor(), shape, filled);
  }
  return out;
}

std::vector<DynamicDim> dynamic_dims(const Graph& graph) {
  std::vector<DynamicDim> out;
  for (const Node* ph : graph.placeholders()) {
    const InputGuard* guard = ph->meta().get(kGuard);
    if (guard == nullptr) continue;
    out.insert(out.end(), guard->dynamic.begin(), guard->dynamic.end());
  }
  return out;
}

std::string describe_input(const std::string& name, size_t index) {
  return absl::StrCat("input ", index, " ('", name, "')");
}

std::string device_mismatch(const std::string& who, const std::string& actual,
                            c10::Device expected) {
  return absl::StrCat(who, " is on ", actual, " but the trace saw ",
                      expected.str());
}

std::string rank_mismatch(const std::string& who, const std::string& actual,
                          int64_t expected) {
  return absl::StrCat(who, " has ", actual, " dimensions but the trace saw ",
                      expected);
}

std::string shape_mismatch(const std::string& who, const std::string& actual,
                           c10::IntArrayRef expected) {
  return absl::StrCat(
      who, " has shape ", actual,
      " but the traced code read the sizes of its example input ",
      format_sizes(expected),
      " (C++ reads sizes as plain integers, so the graph is specialized to "
      "them)");
}

std::string stride_mismatch(const std::string& who, const std::string& actual,
                            c10::IntArrayRef expected) {
  return absl::StrCat(
      who, " has strides ", actual,
      " but the traced code read the strides or contiguity of its example "
      "input, whose strides were ",
      format_sizes(expected),
      " (pass an input laid out alike, e.g. x.contiguous())");
}

std::string outside_bounds(const std::string& who, const std::string& actual,
                           const DynamicDim& d) {
  return absl::StrCat(who, " has ", d.symbol, " = ", actual, " (dimension ",
                      d.dim, "), outside what the trace allows: ",
                      d.relation());
}

std::string length_mismatch(const std::string& who, const std::string& actual,
                            size_t expected) {
  return absl::StrCat(who, " has ", actual, " tensors but the trace saw ",
                      expected);
}

std::string guard_failure_message(const std::string& module,
                                  const std::string& what,
                                  const std::string& then) {
  return absl::StrCat(
      module, " ", what,
      "; the graph was traced for other inputs: trace the model again with "
      "an example input like this one (fx::symbolic_trace)",
      then);
}

void check_tensor_input(const at::Tensor& tensor, const std::string& name,
                        size_t index, c10::ScalarType dtype,
                        c10::Device device, int64_t dim,
                        c10::optional<c10::IntArrayRef> sizes,
                        c10::optional<c10::IntArrayRef> strides) {
  check_tensor(tensor, describe_input(name, index), dtype, device, dim, sizes,
               strides);
}

void check_input(const InputGuard& guard, const c10::IValue& value,
                 const std::string& name, size_t index,
                 SymbolBindings* symbols) {
  const std::string who = describe_input(name, index);
  switch (guard.kind) {
    case InputGuard::Kind::kTensor:
      check_tensor_value(guard, value, who, symbols);
      return;
    case InputGuard::Kind::kTensorList: {
      if (!value.isList()) {
        throw GuardError(absl::StrCat("GraphModule ", who,
                                      " must be a list of tensors, got ",
                                      value.tagKind()));
      }
      auto list = value.toListRef();
      check_length(list.size(), who, guard.elements.size());
      for (size_t i = 0; i < list.size(); ++i) {
        check_tensor_value(guard.elements[i], list[i],
                           absl::StrCat(who, "[", i, "]"));
      }
      return;
    }
    case InputGuard::Kind::kValue:
      check_value(value, who, guard.value);
      return;
  }
}

void check_dynamic_tensor_input(const at::Tensor& tensor,
                                const std::string& name, size_t index,
                                c10::ScalarType dtype, c10::Device device,
                                int64_t dim, bool check_sizes,
                                c10::IntArrayRef sizes,
                                c10::optional<c10::IntArrayRef> strides,
                                const std::vector<DynamicDim>& dynamic,
                                SymbolBindings* symbols) {
  check_dynamic_tensor(tensor, describe_input(name, index), dtype, device,
                       dim, check_sizes, sizes, strides, dynamic, symbols);
}

void check_list_input(const std::vector<at::Tensor>& list,
                      const std::string& name, size_t index, size_t length) {
  check_length(list.size(), describe_input(name, index), length);
}

void check_value_input(const c10::IValue& value, const std::string& name,
                       size_t index, const std::string& expected) {
  check_value(value, describe_input(name, index), expected);
}

bool size_relation_holds(int64_t a, int64_t b, const std::string& relation) {
  if (relation == "==") return a == b;
  if (relation == "!=") return a != b;
  if (relation == "<") return a < b;
  if (relation == "<=") return a <= b;
  if (relation == ">") return a > b;
  if (relation == ">=") return a >= b;
  throw GraphError(absl::StrCat("fx_guard::check_size: '", relation,
                                "' is not ==, !=, <, <=, > or >="));
}

std::string size_check_failure(const std::string& module,
                               const std::string& what, const std::string& a,
                               const std::string& b, const std::string& then) {
  return guard_failure_message(
      module,
      absl::StrCat("has sizes the trace did not allow: ", what,
                   " held while tracing, but not for ", a, " and ", b),
      then);
}

namespace {

void check_size(int64_t a, int64_t b, c10::string_view relation,
                c10::string_view what) {
  if (!size_relation_holds(a, b, std::string(relation))) {
    throw GuardError(size_check_failure("GraphModule", std::string(what),
                                        std::to_string(a), std::to_string(b)));
  }
}

void check_list_length(const std::vector<at::Tensor>& list, int64_t length,
                  c10::string_view what) {
  if (static_cast<int64_t>(list.size()) != length) {
    throw GuardError(guard_failure_message(
        "GraphModule",
        absl::StrCat("has sizes the trace did not allow: ", std::string(what),
                     " returned ", length, " tensors while tracing, but ",
                     list.size(), " now")));
  }
}

void check_not_equal(const at::Tensor& a, const at::Tensor& b,
                     c10::string_view what) {
  if (a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type() &&
      at::equal(a, b)) {
    throw GuardError(guard_failure_message(
        "GraphModule", absl::StrCat(std::string(what), ", but they are equal")));
  }
}

}  // namespace
}  // namespace fx

// Guards the tracer records inside a graph, for what an input's values (not
// its shape) decided while tracing:
//
//   fx_guard::check_not_equal(%query, %key, "torch::equal(query, key) was
//   false while tracing")
//
// for comparisons of sizes (fx::size_relation_holds), and for the length of
// a list of tensors an operator returned (chunk, split, unbind):
//
//   fx_guard::check_length(%chunk, 3, "aten::chunk (TorchScript's
//   aten::chunk at model.py:20)")
TORCH_LIBRARY(fx_guard, m) {
  m.def("check_not_equal(Tensor a, Tensor b, str what) -> ()");
  m.def("check_size(int a, int b, str relation, str what) -> ()");
  m.def("check_length(Tensor[] list, int length, str what) -> ()");
}

TORCH_LIBRARY_IMPL(fx_guard, CompositeExplicitAutograd, m) {
  m.impl("check_not_equal", &fx::check_not_equal);
  m.impl("check_size", &fx::check_size);
  m.impl("check_length", &fx::check_list_length);
}
