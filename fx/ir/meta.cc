#include "fx/ir/meta.h"

#include <algorithm>
#include <cstdlib>
#include <numeric>

#include <ATen/core/Tensor.h>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "fx/ir/function.h"

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

SymbolSizes symbol_multiples(const std::vector<DynamicDim>& dims) {
  SymbolSizes out;
  for (const DynamicDim& d : dims) out[d.symbol] = d.multiple_of;
  return out;
}

SymbolicShapeFitter::SymbolicShapeFitter(std::vector<SymbolSizes> sizes,
                                         SymbolSizes multiples)
    : sizes_(std::move(sizes)), multiples_(std::move(multiples)) {}

void SymbolicShapeFitter::fit(const std::vector<TensorMeta*>& runs) {
  if (runs.size() < 3 || runs.size() != sizes_.size() || runs[0] == nullptr) return;
  TensorMeta& meta = *runs[0];
  meta.symbolic_sizes.clear();
  meta.symbolic_strides.clear();
  for (const TensorMeta* run : runs) {
    if (run == nullptr || run->sizes.size() != meta.sizes.size() ||
        run->strides.size() != meta.strides.size()) {
      return;
    }
  }
  bool varies = false;
  std::vector<int64_t> values(runs.size());
  auto fit_all = [&](auto field) {
    std::vector<SizeExpr> out;
    for (size_t d = 0; d < (meta.*field).size(); ++d) {
      bool constant = true;
      for (size_t t = 0; t < runs.size(); ++t) {
        values[t] = (runs[t]->*field)[d];
        constant = constant && values[t] == values[0];
      }
      if (constant) {
        out.push_back(SizeExpr::constant(values[0]));
        continue;
      }
      varies = true;
      auto it = fitted_.find(values);
      if (it == fitted_.end()) {
        std::optional<SizeExpr> e = SizeExpr::fit(values, sizes_, multiples_);
        it = fitted_.emplace(values, e ? *e : SizeExpr::unknown()).first;
      }
      out.push_back(it->second);
    }
    return out;
  };
  std::vector<SizeExpr> symbolic_sizes = fit_all(&TensorMeta::sizes);
  std::vector<SizeExpr> symbolic_strides = fit_all(&TensorMeta::strides);
  if (!varies) return;
  meta.symbolic_sizes = std::move(symbolic_sizes);
  meta.symbolic_strides = std::move(symbolic_strides);
}

int64_t TensorMeta::numel() const {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

namespace {

// Values, or their symbolic forms where there are some, comma-separated.
std::string join_sizes(const std::vector<int64_t>& values,
                       const std::vector<SizeExpr>& symbolic) {
  if (symbolic.empty()) return absl::StrJoin(values, ", ");
  std::vector<std::string> parts;
  for (const SizeExpr& e : symbolic) parts.push_back(e.to_string());
  return absl::StrJoin(parts, ", ");
}

}  // namespace

std::string TensorMeta::sizes_text() const {
  return join_sizes(sizes, symbolic_sizes);
}

std::string TensorMeta::to_string() const {
  std::string out =
      absl::StrCat(short_dtype_name(dtype), "[", sizes_text(), "]");
  if (memory_format != c10::MemoryFormat::Contiguous) {
    absl::StrAppend(&out, "{", join_sizes(strides, symbolic_strides), "}");
  }
  return out;
}

bool operator==(const TensorMeta& a, const TensorMeta& b) {
  return a.sizes == b.sizes && a.strides == b.strides && a.dtype == b.dtype &&
         a.device == b.device && a.requires_grad == b.requires_grad &&
         a.memory_format == b.memory_format &&
         a.symbolic_sizes == b.symbolic_sizes &&
         a.symbolic_strides == b.symbolic_strides;
}

namespace {

bool is_identifier(std::string_view s) {
  return !s.empty() && !absl::ascii_isdigit(static_cast<unsigned char>(s[0])) &&
         std::all_of(s.begin(), s.end(), [](char c) {
           return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_';
         });
}

}  // namespace

SizeExpr SizeExpr::constant(int64_t value) {
  SizeExpr e;
  e.q = value;
  return e;
}

SizeExpr SizeExpr::symbol(const std::string& name) {
  SizeExpr e;
  e.symbols = {name};
  e.p = 1;
  return e;
}

SizeExpr SizeExpr::unknown() {
  SizeExpr e;
  e.known = false;
  return e;
}

std::optional<int64_t> SizeExpr::at(const SymbolSizes& sizes) const {
  if (!known) return std::nullopt;
  int64_t m = 1;
  for (const std::string& s : symbols) {
    auto it = sizes.find(s);
    if (it == sizes.end() || __builtin_mul_overflow(m, it->second, &m)) {
      return std::nullopt;
    }
  }
  int64_t value = 0;
  if (r < 1 || __builtin_mul_overflow(p, m, &value) ||
      __builtin_add_overflow(value, q, &value)) {
    return std::nullopt;
  }
  return floor_divide(value, r);
}

std::string SizeExpr::to_string() const {
  if (!known) return "?";
  if (symbols.empty()) return absl::StrCat(q);
  std::string out = absl::StrJoin(symbols, "*");
  if (p == -1) {
    out = "-" + out;
  } else if (p != 1) {
    out = absl::StrCat(p, "*", out);
  }
  if (q > 0) absl::StrAppend(&out, " + ", q);
  if (q < 0) absl::StrAppend(&out, " - ", -q);
  if (r != 1) out = q != 0 ? absl::StrCat("(", out, ")//", r) : absl::StrCat(out, "//", r);
  return out;
}

std::optional<SizeExpr> SizeExpr::parse(std::string_view text) {
  std::string s;
  for (char c : text) {
    if (c != ' ') s.push_back(c);
  }
  if (s == "?") return unknown();
  int64_t value = 0;
  if (absl::SimpleAtoi(s, &value)) return constant(value);
  SizeExpr e;
  std::string body = s;
  bool parenthesized = false;
  const size_t div = s.rfind("//");
  if (div != std::string::npos) {
    if (!absl::SimpleAtoi(s.substr(div + 2), &e.r) || e.r < 2) return std::nullopt;
    body = s.substr(0, div);
    if (body.size() >= 2 && body.front() == '(' && body.back() == ')') {
      body = body.substr(1, body.size() - 2);
      parenthesized = true;
    }
  }
  const size_t sign = body.find_first_of("+-", 1);
  if (sign != std::string::npos) {
    if (!absl::SimpleAtoi(body.substr(sign + 1), &e.q) || e.q <= 0) return std::nullopt;
    if (body[sign] == '-') e.q = -e.q;
    body = body.substr(0, sign);
  }
  // As to_string writes it: "(S + q)//r" in parentheses, "S//r" without.
  if (parenthesized != (e.r != 1 && e.q != 0)) return std::nullopt;
  int64_t negative = 1;
  if (!body.empty() && body[0] == '-') {
    negative = -1;
    body = body.substr(1);
  }
  e.p = negative;
  bool first = true;
  for (const std::string& factor :
       std::vector<std::string>(absl::StrSplit(body, '*'))) {
    int64_t coefficient = 0;
    if (first && absl::SimpleAtoi(factor, &coefficient) && coefficient > 1) {
      e.p = negative * coefficient;
    } else if (is_identifier(factor)) {
      e.symbols.emplace_back(factor);
    } else {
      return std::nullopt;
    }
    first = false;
  }
  if (e.symbols.empty()) return std::nullopt;
  std::sort(e.symbols.begin(), e.symbols.end());
  return e;
}

std::optional<SizeExpr> SizeExpr::fit(const std::vector<int64_t>& values,
                                      const std::vector<SymbolSizes>& sizes,
                                      const SymbolSizes& multiples) {
  if (values.size() < 2 || values.size() != sizes.size()) return std::nullopt;
  auto fits = [&](const SizeExpr& e) {
    for (size_t t = 0; t < values.size(); ++t) {
      if (e.at(sizes[t]) != values[t]) return false;
    }
    return true;
  };
  if (std::all_of(values.begin(), values.end(),
                  [&](int64_t v) { return v == values[0]; })) {
    return constant(values[0]);
  }
  // Every candidate that explains all the traces: an affine function of
  // one symbol with floor division (its slope from the first trace and
  // another where the symbol moved), and products of symbols, each at most
  // squared (attention's T*T). Two different candidates make the sizes
  // ambiguous (the traces cannot tell which the program computes): no fit,
  // rather than a guess.
  const SymbolSizes& s0 = sizes[0];
  std::optional<SizeExpr> found;
  bool ambiguous = false;
  auto consider = [&](const SizeExpr& e) {
    if (e.p == 0 || !fits(e)) return;
    if (found && *found != e) ambiguous = true;
    found = e;
  };
  for (const auto& [symbol, size] : s0) {
    for (size_t t = 1; t < sizes.size() && t <= 2; ++t) {
      auto other = sizes[t].find(symbol);
      if (other == sizes[t].end()) continue;
      const int64_t ds = other->second - size;
      if (ds == 0) continue;
      const int64_t dl = values[t] - values[0];
      int64_t g = std::gcd(std::abs(dl), std::abs(ds));
      if (g == 0) g = 1;
      SizeExpr e = SizeExpr::symbol(symbol);
      e.p = dl / g;
      e.r = ds / g;
      if (e.r < 0) {
        e.p = -e.p;
        e.r = -e.r;
      }
      // A division only by what divides every size the symbol may take:
      // (p*S + q)//r is then linear in S, so two traces fix it and the
      // others check it. Other rounding three traces cannot pin down
      // ((T + 1)//4 and T//4 agree at T = 9, 13, 25).
      auto multiple = multiples.find(symbol);
      if (e.r > 1 && (multiple == multiples.end() || multiple->second % e.r != 0)) {
        continue;
      }
      if (__builtin_mul_overflow(e.r, values[0], &e.q)) continue;
      e.q -= e.p * size;
      consider(e);
    }
  }
  std::vector<std::string> symbols;
  for (const auto& item : s0) symbols.push_back(item.first);
  const size_t n = std::min<size_t>(symbols.size(), 8);
  std::vector<int> power(n, 0);
  while (true) {
    size_t i = 0;
    while (i < n && power[i] == 2) power[i++] = 0;
    if (i == n) break;
    ++power[i];
    if (std::accumulate(power.begin(), power.end(), 0) < 2) continue;
    SizeExpr e;
    int64_t m = 1;
    bool overflow = false;
    for (size_t k = 0; k < n; ++k) {
      for (int j = 0; j < power[k]; ++j) {
        e.symbols.push_back(symbols[k]);
        overflow = overflow || __builtin_mul_overflow(m, s0.at(symbols[k]), &m);
      }
    }
    if (overflow || m == 0 || values[0] % m != 0) continue;
    e.p = values[0] / m;
    consider(e);
  }
  if (ambiguous) return std::nullopt;
  return found;
}

bool operator==(const SizeExpr& a, const SizeExpr& b) {
  if (a.known != b.known) return false;
  return !a.known || (a.symbols == b.symbols && a.p == b.p && a.q == b.q &&
                      a.r == b.r);
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
