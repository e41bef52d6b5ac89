#include "fx/ir/meta.h"

#include <algorithm>

#include <ATen/core/Tensor.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace fx {

TensorMeta tensor_meta_of(const at::Tensor& tensor) {
  TensorMeta m;
  m.sizes = tensor.sizes().vec();
  m.strides = tensor.strides().vec();
  m.dtype = tensor.scalar_type();
  m.device = tensor.device();
  m.requires_grad = tensor.requires_grad();
  m.memory_format = memory_format_of(m.sizes, m.strides);
  return m;
}

int64_t TensorMeta::numel() const {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

std::string TensorMeta::to_string() const {
  std::string out =
      absl::StrCat(short_dtype_name(dtype), "[", absl::StrJoin(sizes, ", "), "]");
  if (memory_format != c10::MemoryFormat::Contiguous) {
    absl::StrAppend(&out, "{", absl::StrJoin(strides, ", "), "}");
  }
  return out;
}

bool operator==(const TensorMeta& a, const TensorMeta& b) {
  return a.sizes == b.sizes && a.strides == b.strides && a.dtype == b.dtype &&
         a.device == b.device && a.requires_grad == b.requires_grad &&
         a.memory_format == b.memory_format;
}

namespace {

// The dimensions of a `memory_format` tensor of rank `n`, innermost first
// (row-major: n-1, ..., 0), one by one without allocating.
class DimensionOrder {
 public:
  DimensionOrder(c10::MemoryFormat memory_format, size_t n) : n_(n) {
    static constexpr size_t kChannelsLast[] = {1, 3, 2, 0};
    static constexpr size_t kChannelsLast3d[] = {1, 4, 3, 2, 0};
    if (memory_format == c10::MemoryFormat::ChannelsLast && n == 4) {
      order_ = kChannelsLast;
    } else if (memory_format == c10::MemoryFormat::ChannelsLast3d && n == 5) {
      order_ = kChannelsLast3d;
    }
  }
  size_t operator[](size_t i) const { return order_ ? order_[i] : n_ - 1 - i; }

 private:
  size_t n_;
  const size_t* order_ = nullptr;
};

}  // namespace

std::vector<int64_t> strides_for(const std::vector<int64_t>& sizes,
                                 c10::MemoryFormat memory_format) {
  const size_t n = sizes.size();
  std::vector<int64_t> strides(n);
  DimensionOrder order(memory_format, n);
  int64_t stride = 1;
  for (size_t i = 0; i < n; ++i) {
    strides[order[i]] = stride;
    stride *= std::max<int64_t>(sizes[order[i]], 1);
  }
  return strides;
}

c10::MemoryFormat memory_format_of(const std::vector<int64_t>& sizes,
                                   const std::vector<int64_t>& strides) {
  // Whether the strides are strides_for(sizes, f), but for size-1
  // dimensions, whose stride does not matter.
  auto matches = [&](c10::MemoryFormat f) {
    DimensionOrder order(f, sizes.size());
    int64_t stride = 1;
    for (size_t i = 0; i < sizes.size(); ++i) {
      const size_t d = order[i];
      if (sizes[d] != 1 && strides[d] != stride) return false;
      stride *= std::max<int64_t>(sizes[d], 1);
    }
    return true;
  };
  if (matches(c10::MemoryFormat::Contiguous)) {
    return c10::MemoryFormat::Contiguous;
  }
  if (sizes.size() == 4 && matches(c10::MemoryFormat::ChannelsLast)) {
    return c10::MemoryFormat::ChannelsLast;
  }
  if (sizes.size() == 5 && matches(c10::MemoryFormat::ChannelsLast3d)) {
    return c10::MemoryFormat::ChannelsLast3d;
  }
  return c10::MemoryFormat::Preserve;
}

std::string short_dtype_name(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::ScalarType::Byte: return "u8";
    case c10::ScalarType::Char: return "i8";
    case c10::ScalarType::Short: return "i16";
    case c10::ScalarType::Int: return "i32";
    case c10::ScalarType::Long: return "i64";
    case c10::ScalarType::Half: return "f16";
    case c10::ScalarType::Float: return "f32";
    case c10::ScalarType::Double: return "f64";
    case c10::ScalarType::ComplexHalf: return "c32";
    case c10::ScalarType::ComplexFloat: return "c64";
    case c10::ScalarType::ComplexDouble: return "c128";
    case c10::ScalarType::Bool: return "b8";
    case c10::ScalarType::BFloat16: return "bf16";
    default: return c10::toString(dtype);
  }
}

std::string DynamicDim::relation() const {
  std::string out =
      max == std::numeric_limits<int64_t>::max()
          ? absl::StrCat(symbol, " >= ", min)
          : absl::StrCat(min, " <= ", symbol, " <= ", max);
  if (multiple_of > 1) absl::StrAppend(&out, ", ", symbol, " % ", multiple_of, " == 0");
  return out;
}

std::string InputGuard::to_string() const {
  switch (kind) {
    case Kind::kValue:
      return "== " + value;
    case Kind::kTensorList: {
      std::vector<std::string> parts;
      for (const InputGuard& e : elements) parts.push_back(e.to_string());
      return absl::StrCat("[", absl::StrJoin(parts, ", "), "]");
    }
    case Kind::kTensor: {
      std::string dims;
      if (check_sizes) {
        std::vector<std::string> parts;
        for (int64_t v : sizes) parts.push_back(absl::StrCat(v));
        for (const DynamicDim& d : dynamic) {
          if (d.dim >= 0 && d.dim < static_cast<int64_t>(parts.size())) {
            parts[d.dim] = d.symbol;
          }
        }
        dims = absl::StrJoin(parts, ", ");
      } else {
        std::vector<std::string> q(dim, "?");
        dims = absl::StrJoin(q, ", ");
      }
      std::string layout;
      if (check_strides) {
        layout = absl::StrCat(" strides [", absl::StrJoin(strides, ", "), "]");
      }
      std::string relations;
      if (!dynamic.empty()) {
        std::vector<std::string> parts;
        for (const DynamicDim& d : dynamic) parts.push_back(d.relation());
        relations = absl::StrCat(" (", absl::StrJoin(parts, ", "), ")");
      }
      return absl::StrCat(short_dtype_name(dtype), "[", dims, "]", layout,
                          " on ", device.str(), relations);
    }
  }
  return "";
}

}  // namespace fx
