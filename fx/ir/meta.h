// Meta: a typed key/value map on every Node, for what passes and analyses
// learn about it (torch.fx's node.meta).
//
//   node->meta().set(fx::kModulePath, std::string("layer1.0.conv1"));
//   if (const fx::TensorMeta* tm = node->meta().get(fx::kTensorMeta)) ...
//
// Keys are typed: MetaKey<T> names an entry and the type stored under it, so
// a lookup never needs a cast. Passes may define their own keys. Iteration
// (keys()) is in sorted key order, so printing is deterministic.
#pragma once

#include <any>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <c10/core/Device.h>
#include <c10/core/MemoryFormat.h>
#include <c10/core/ScalarType.h>

namespace at {
class Tensor;
}

namespace fx {

template <typename T>
struct MetaKey {
  std::string_view name;
};

class Meta {
 public:
  template <typename T>
  void set(const MetaKey<T>& key, T value) {
    entries_[std::string(key.name)] = std::move(value);
  }

  // The value stored under `key`, or nullptr if there is none (or it was
  // stored with another type).
  template <typename T>
  const T* get(const MetaKey<T>& key) const {
    auto it = entries_.find(key.name);
    return it == entries_.end() ? nullptr : std::any_cast<T>(&it->second);
  }
  template <typename T>
  T* get_mutable(const MetaKey<T>& key) {
    auto it = entries_.find(key.name);
    return it == entries_.end() ? nullptr : std::any_cast<T>(&it->second);
  }

  bool contains(std::string_view name) const {
    return entries_.find(name) != entries_.end();
  }
  void erase(std::string_view name) {
    auto it = entries_.find(name);
    if (it != entries_.end()) entries_.erase(it);
  }
  bool empty() const { return entries_.empty(); }
  // Sorted.
  std::vector<std::string> keys() const {
    std::vector<std::string> out;
    for (const auto& entry : entries_) out.push_back(entry.first);
    return out;
  }

 private:
  std::map<std::string, std::any, std::less<>> entries_;
};

// The size each symbol of the dynamic dimensions takes ("B" -> 8).
using SymbolSizes = std::map<std::string, int64_t>;
struct DynamicDim;
// Each symbol's multiple_of.
SymbolSizes symbol_multiples(const std::vector<DynamicDim>& dims);

// A size or stride as a function of the symbols of the graph's dynamic
// dimensions (fx::TraceOptions::dynamic): (p * S1 * S2 ... + q) // r, the
// constant q when there is no symbol, or unknown ("?": no such function
// explains it). Printed as Python would write it: "B", "4*T", "B*T",
// "T + 1", "(H + 1)//2", "64*B*T".
struct SizeExpr {
  std::vector<std::string> symbols;  // sorted; may repeat (T*T)
  int64_t p = 0, q = 0, r = 1;
  bool known = true;

  static SizeExpr constant(int64_t value);
  static SizeExpr symbol(const std::string& name);
  static SizeExpr unknown();
  bool is_constant() const { return known && symbols.empty(); }
  // The value at `sizes` (every symbol given); nullopt when unknown.
  std::optional<int64_t> at(const SymbolSizes& sizes) const;
  std::string to_string() const;
  // Reads to_string's form back; nullopt when `text` is not one.
  static std::optional<SizeExpr> parse(std::string_view text);
  // The expression that gives values[t] at sizes[t] for every t (at least
  // three traces): affine in one symbol (fitted to the first trace and
  // another, checked on the rest), with a floor division only by a divisor
  // of the symbol's `multiples` entry (DynamicDim::multiple_of: the
  // division is then exact on every size it may take), or a product of
  // symbols, each at most squared. nullopt when none does, or when two
  // different ones do (the traces cannot tell which).
  static std::optional<SizeExpr> fit(const std::vector<int64_t>& values,
                                     const std::vector<SymbolSizes>& sizes,
                                     const SymbolSizes& multiples = {});
  friend bool operator==(const SizeExpr& a, const SizeExpr& b);
  friend bool operator!=(const SizeExpr& a, const SizeExpr& b) {
    return !(a == b);
  }
};

// Shape, strides, dtype and device of a tensor value, as torch.fx's
// ShapeProp records (its TensorMetadata).
struct TensorMeta {
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  c10::ScalarType dtype = c10::ScalarType::Float;
  c10::Device device = c10::Device(c10::DeviceType::CPU);
  bool requires_grad = false;
  // The format the strides follow (contiguous, channels_last, ...), or
  // Preserve when they follow none.
  c10::MemoryFormat memory_format = c10::MemoryFormat::Contiguous;
  // In a graph with dynamic dimensions, each size and stride as a function
  // of their symbols (ShapeProp, and the tracer, fit them over runs at
  // several sizes); `sizes` and `strides` are then the example's. Empty
  // when every size is fixed.
  std::vector<SizeExpr> symbolic_sizes;
  std::vector<SizeExpr> symbolic_strides;

  int64_t numel() const;
  // "f32[1, 3, 224, 224]"; strides are shown when not contiguous:
  // "f32[3, 2]{1, 3}"; symbolic sizes in place of the example's:
  // "f32[B, 4*T, 16]{16, 64*B, 1}".
  std::string to_string() const;
  // The sizes alone, symbolic where they are: "1, 3, 224, 224", "B, 4*T, 16".
  std::string sizes_text() const;
  friend bool operator==(const TensorMeta& a, const TensorMeta& b);
  friend bool operator!=(const TensorMeta& a, const TensorMeta& b) {
    return !(a == b);
  }
};

// The metadata of a tensor (torch.fx's _extract_tensor_metadata).
TensorMeta tensor_meta_of(const at::Tensor& tensor);

// Fits metadata over runs of one graph at several sizes of its symbols
// (runs[t] at sizes[t]; at least three), remembering each sequence of
// values it fitted: a graph's sizes repeat (B, T, 4*T, ...).
class SymbolicShapeFitter {
 public:
  // `multiples`: each symbol's DynamicDim::multiple_of (SizeExpr::fit).
  SymbolicShapeFitter(std::vector<SymbolSizes> sizes, SymbolSizes multiples);
  // Sets runs[0]'s symbolic sizes and strides from the same value's
  // metadata in the other runs: each fitted by SizeExpr::fit, "?" where no
  // fit explains it. Left empty when nothing varies, or when a run has no
  // metadata or another rank.
  void fit(const std::vector<TensorMeta*>& runs);

 private:
  std::vector<SymbolSizes> sizes_;
  SymbolSizes multiples_;
  std::map<std::vector<int64_t>, SizeExpr> fitted_;
};

// The memory format `strides` follow for `sizes`, or Preserve if none.
c10::MemoryFormat memory_format_of(const std::vector<int64_t>& sizes,
                                   const std::vector<int64_t>& strides);
// Contiguous strides for `sizes` in `memory_format`.
std::vector<int64_t> strides_for(const std::vector<int64_t>& sizes,
                                 c10::MemoryFormat memory_format);
// "f32", "i64", "b8", ...
std::string short_dtype_name(c10::ScalarType dtype);

// A dimension of an input that may vary from run to run (one entry of
// fx::TraceOptions::dynamic): named by a symbol, within bounds. Dimensions
// that share a symbol must be equal; a graph traced with them computes the
// sizes it uses from its inputs (sym_size nodes) instead of baking them in.
//   {.input = 0, .dim = 1, .symbol = "T", .max = 512}   // tokens [N, T]
// The tracer makes one too for each size an operator's output takes from
// data (fx/ir/data_dependent.h): `input` is then kOperatorOutput, `dim` the
// operator's place among them, its symbol u0, u1, ... and its min 0.
struct DynamicDim {
  static constexpr size_t kOperatorOutput = std::numeric_limits<size_t>::max();
  size_t input = 0;  // which input of forward
  int64_t dim = 0;   // which of its dimensions
  std::string symbol;
  int64_t min = 1;
  int64_t max = std::numeric_limits<int64_t>::max();
  // The size must be a multiple of this (a patch or window size).
  int64_t multiple_of = 1;

  // "1 <= T <= 512", "B >= 1", "16 <= H <= 1024, H % 16 == 0".
  std::string relation() const;
  // A size an operator's output takes from data, not an input's.
  bool data_dependent() const { return input == kOperatorOutput; }
};

// A symbol and its bounds, in LibTorch's options style, as torch.export's
// Dim("B", max=64); placed on an input's dimension with on():
//   const fx::Dim batch = fx::Dim("B").max(64);
//   options.dynamic = {batch.on(0, 0),                           // x [B, T]
//                      fx::Dim("T").max(512).multiple_of(8).on(0, 1),
//                      batch.on(1, 0)};                          // mask [B, T]
class Dim {
 public:
  explicit Dim(std::string symbol) : symbol_(std::move(symbol)) {}
  Dim& min(int64_t value) {
    min_ = value;
    return *this;
  }
  Dim& max(int64_t value) {
    max_ = value;
    return *this;
  }
  Dim& multiple_of(int64_t value) {
    multiple_of_ = value;
    return *this;
  }
  const std::string& symbol() const { return symbol_; }
  int64_t min() const { return min_; }
  int64_t max() const { return max_; }
  int64_t multiple_of() const { return multiple_of_; }
  // This symbol as dimension `dim` of forward's input `input`.
  DynamicDim on(size_t input, int64_t dim) const {
    return DynamicDim{input, dim, symbol_, min_, max_, multiple_of_};
  }

 private:
  std::string symbol_;
  int64_t min_ = 1;
  int64_t max_ = std::numeric_limits<int64_t>::max();
  int64_t multiple_of_ = 1;
};

// What the trace assumed about one input of the traced program. The tracer
// stores it on each placeholder (key kGuard); a GraphModule checks it on every
// call and rejects inputs that break it with fx::GuardError.
struct InputGuard {
  enum class Kind : uint8_t {
    // A tensor: dtype, device and rank always; sizes when `sizes` is set,
    // i.e. when the traced program read sizes and so was specialized to them.
    kTensor,
    // A non-tensor input (int, double, bool, string) whose value was baked
    // into the graph: it must be equal.
    kValue,
    // A list of tensors, one guard per element.
    kTensorList,
  };
  Kind kind = Kind::kTensor;
  c10::ScalarType dtype = c10::ScalarType::Float;
  c10::Device device = c10::Device(c10::DeviceType::CPU);
  int64_t dim = 0;
  bool check_sizes = false;
  std::vector<int64_t> sizes;
  // Strides too, when the traced program read strides or contiguity
  // (x.stride(0), x.is_contiguous(), a contiguous() that did nothing): the
  // graph then holds only for inputs laid out alike. Implies check_sizes.
  bool check_strides = false;
  std::vector<int64_t> strides;
  // For kValue: the value printed as in the graph (e.g. "3", "True", "'x'").
  std::string value;
  // For kTensorList.
  std::vector<InputGuard> elements;
  // For kTensor: the dimensions that may vary (their entries of `sizes`
  // are the example's); with check_strides, the strides are those of the
  // example's memory format at the input's sizes.
  std::vector<DynamicDim> dynamic;

  // Whether every size is fixed, so the sizes in kTensorMeta hold on every
  // run: check_sizes and no dynamic dimension.
  bool sizes_fixed() const { return check_sizes && dynamic.empty(); }

  // "f32[1, 3, 224, 224] on cpu", "f32[?, ?] on cpu", "== 3",
  // "f32[2, 3] strides [3, 1] on cpu", "i64[B, T] on cpu (1 <= B <= 64,
  // 1 <= T <= 512)".
  std::string to_string() const;
};

// Well-known keys.
inline constexpr MetaKey<TensorMeta> kTensorMeta{"tensor_meta"};
// For nodes producing a tuple or list of tensors (an op with several
// outputs, a leaf module returning a tuple): one entry per element.
inline constexpr MetaKey<std::vector<TensorMeta>> kTensorMetaList{
    "tensor_meta_list"};
// The qualified path of the module whose forward produced the node
// ("layer1.0.conv1"), when the tracer knows it: from fx::call, or else from
// the parameters a call uses. Absent for calls in the root's own forward.
inline constexpr MetaKey<std::string> kModulePath{"module_path"};
// A C++ backtrace of the call that the tracer recorded (only with
// TraceOptions::record_stack_traces).
inline constexpr MetaKey<std::string> kStackTrace{"stack_trace"};
inline constexpr MetaKey<InputGuard> kGuard{"guard"};

}  // namespace fx
