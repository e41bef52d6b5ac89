#include "fx/ir/argument.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "fx/ir/errors.h"
#include "fx/ir/node.h"

namespace fx {
namespace {

const char* kind_name(ArgumentKind kind) {
  switch (kind) {
    case ArgumentKind::kNone: return "None";
    case ArgumentKind::kBool: return "bool";
    case ArgumentKind::kInt: return "int";
    case ArgumentKind::kDouble: return "float";
    case ArgumentKind::kComplex: return "complex";
    case ArgumentKind::kString: return "str";
    case ArgumentKind::kDtype: return "dtype";
    case ArgumentKind::kLayout: return "layout";
    case ArgumentKind::kDevice: return "device";
    case ArgumentKind::kMemoryFormat: return "memory_format";
    case ArgumentKind::kNode: return "Node";
    case ArgumentKind::kList: return "list";
    case ArgumentKind::kTuple: return "tuple";
  }
  return "?";
}

[[noreturn]] void wrong_kind(const Argument& arg, const char* wanted) {
  throw GraphError(absl::StrCat("expected an argument of kind ", wanted,
                                ", got ", kind_name(arg.kind()), " ",
                                arg.to_string()));
}

std::string quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    switch (c) {
      case '\'': out += "\\'"; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
          // Python's repr: '\x01'.
          char buf[5];
          std::snprintf(buf, sizeof(buf), "\\x%02x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  out += "'";
  return out;
}

}  // namespace

Argument::Argument(const c10::Scalar& scalar) {
  if (scalar.isBoolean()) {
    value_ = scalar.toBool();
  } else if (scalar.isIntegral(/*includeBool=*/false)) {
    value_ = scalar.toLong();
  } else if (scalar.isComplex()) {
    value_ = scalar.toComplexDouble();
  } else {
    value_ = scalar.toDouble();
  }
}

Argument::Argument(const std::vector<int64_t>& ints) {
  Sequence elements(ints.begin(), ints.end());
  value_ = std::make_shared<const SequenceBox>(
      SequenceBox{std::move(elements), /*is_tuple=*/false});
}

Argument::Argument(const std::vector<Node*>& nodes) {
  Sequence elements(nodes.begin(), nodes.end());
  value_ = std::make_shared<const SequenceBox>(
      SequenceBox{std::move(elements), /*is_tuple=*/false});
}

Argument Argument::list(std::vector<Argument> elements) {
  Argument arg;
  arg.value_ = std::make_shared<const SequenceBox>(
      SequenceBox{std::move(elements), /*is_tuple=*/false});
  return arg;
}

Argument Argument::tuple(std::vector<Argument> elements) {
  Argument arg;
  arg.value_ = std::make_shared<const SequenceBox>(
      SequenceBox{std::move(elements), /*is_tuple=*/true});
  return arg;
}

ArgumentKind Argument::kind() const {
  switch (value_.index()) {
    case 0: return ArgumentKind::kNone;
    case 1: return ArgumentKind::kBool;
    case 2: return ArgumentKind::kInt;
    case 3: return ArgumentKind::kDouble;
    case 4: return ArgumentKind::kComplex;
    case 5: return ArgumentKind::kString;
    case 6: return ArgumentKind::kDtype;
    case 7: return ArgumentKind::kLayout;
    case 8: return ArgumentKind::kDevice;
    case 9: return ArgumentKind::kMemoryFormat;
    case 10: return ArgumentKind::kNode;
    default:
      return std::get<11>(value_)->is_tuple ? ArgumentKind::kTuple
                                            : ArgumentKind::kList;
  }
}

bool Argument::to_bool() const {
  if (!is_bool()) wrong_kind(*this, "bool");
  return std::get<bool>(value_);
}

int64_t Argument::to_int() const {
  if (!is_int()) wrong_kind(*this, "int");
  return std::get<int64_t>(value_);
}

double Argument::to_double() const {
  if (is_int()) return static_cast<double>(std::get<int64_t>(value_));
  if (!is_double()) wrong_kind(*this, "float");
  return std::get<double>(value_);
}

c10::complex<double> Argument::to_complex() const {
  if (!is_complex()) wrong_kind(*this, "complex");
  return std::get<c10::complex<double>>(value_);
}

const std::string& Argument::to_string_ref() const {
  if (!is_string()) wrong_kind(*this, "str");
  return std::get<std::string>(value_);
}

c10::ScalarType Argument::to_dtype() const {
  if (!is_dtype()) wrong_kind(*this, "dtype");
  return std::get<c10::ScalarType>(value_);
}

c10::Layout Argument::to_layout() const {
  if (!is_layout()) wrong_kind(*this, "layout");
  return std::get<c10::Layout>(value_);
}

c10::Device Argument::to_device() const {
  if (!is_device()) wrong_kind(*this, "device");
  return std::get<c10::Device>(value_);
}

c10::MemoryFormat Argument::to_memory_format() const {
  if (!is_memory_format()) wrong_kind(*this, "memory_format");
  return std::get<c10::MemoryFormat>(value_);
}

Node* Argument::to_node() const {
  if (!is_node()) wrong_kind(*this, "Node");
  return std::get<Node*>(value_);
}

const std::vector<Argument>& Argument::elements() const {
  if (!is_sequence()) wrong_kind(*this, "list or tuple");
  return std::get<11>(value_)->elements;
}

std::vector<int64_t> Argument::to_int_list() const {
  std::vector<int64_t> out;
  for (const Argument& e : elements()) out.push_back(e.to_int());
  return out;
}

bool Argument::contains_node() const {
  if (is_node()) return true;
  if (!is_sequence()) return false;
  for (const Argument& e : elements()) {
    if (e.contains_node()) return true;
  }
  return false;
}

std::string Argument::to_string(bool node_prefix) const {
  switch (kind()) {
    case ArgumentKind::kNone: return "None";
    case ArgumentKind::kBool: return to_bool() ? "True" : "False";
    case ArgumentKind::kInt: return std::to_string(to_int());
    case ArgumentKind::kDouble: return format_double(to_double());
    case ArgumentKind::kComplex: {
      auto c = to_complex();
      // Python: (1+2j), 2j, (1-0j)
      if (c.real() == 0 && !std::signbit(c.real())) {
        return format_double(c.imag()) + "j";
      }
      std::string imag = format_double(c.imag());
      if (imag[0] != '-') imag = "+" + imag;
      return absl::StrCat("(", format_double(c.real()), imag, "j)");
    }
    case ArgumentKind::kString: return quote(to_string_ref());
    case ArgumentKind::kDtype: return format_dtype(to_dtype());
    case ArgumentKind::kLayout: return format_layout(to_layout());
    case ArgumentKind::kDevice:
      return absl::StrCat("device(type='", to_device().str(), "')");
    case ArgumentKind::kMemoryFormat:
      return format_memory_format(to_memory_format());
    case ArgumentKind::kNode:
      return node_prefix ? "%" + to_node()->name() : to_node()->name();
    case ArgumentKind::kList:
    case ArgumentKind::kTuple: {
      std::string out = is_list() ? "[" : "(";
      const auto& elems = elements();
      for (size_t i = 0; i < elems.size(); ++i) {
        if (i) out += ", ";
        out += elems[i].to_string(node_prefix);
      }
      if (is_tuple() && elems.size() == 1) out += ",";
      out += is_list() ? "]" : ")";
      return out;
    }
  }
  return "?";
}

bool operator==(const Argument& a, const Argument& b) {
  if (a.kind() != b.kind()) return false;
  if (a.is_sequence()) {
    const auto& x = a.elements();
    const auto& y = b.elements();
    if (x.size() != y.size()) return false;
    for (size_t i = 0; i < x.size(); ++i) {
      if (x[i] != y[i]) return false;
    }
    return true;
  }
  if (a.is_double()) {
    // Bitwise, so that nan == nan and -0.0 != 0.0: equality means "the same
    // literal", which is what graph comparison and CSE need.
    double x = a.to_double(), y = b.to_double();
    return std::memcmp(&x, &y, sizeof(double)) == 0;
  }
  return a.value_ == b.value_;
}

const Argument* find_kwarg(const Kwargs& kwargs, std::string_view name) {
  for (const auto& [key, value] : kwargs) {
    if (key == name) return &value;
  }
  return nullptr;
}

Argument map_arg(const Argument& arg,
                 const std::function<Argument(Node*)>& fn) {
  if (arg.is_node()) return fn(arg.to_node());
  if (!arg.is_sequence() || !arg.contains_node()) return arg;
  std::vector<Argument> mapped;
  mapped.reserve(arg.elements().size());
  for (const Argument& e : arg.elements()) mapped.push_back(map_arg(e, fn));
  return arg.is_tuple() ? Argument::tuple(std::move(mapped))
                        : Argument::list(std::move(mapped));
}

void for_each_node(const Argument& arg,
                   const std::function<void(Node*)>& fn) {
  if (arg.is_node()) {
    fn(arg.to_node());
  } else if (arg.is_sequence()) {
    for (const Argument& e : arg.elements()) for_each_node(e, fn);
  }
}

std::string format_args(const std::vector<Argument>& args) {
  return Argument::tuple(args).to_string();
}

std::string format_kwargs(const Kwargs& kwargs) {
  std::string out = "{";
  for (size_t i = 0; i < kwargs.size(); ++i) {
    if (i) out += ", ";
    absl::StrAppend(&out, kwargs[i].first, ": ", kwargs[i].second.to_string());
  }
  return out + "}";
}

std::string format_double(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  // Shortest round-trip digits, as Python's repr; std::to_chars, unlike
  // printf, ignores the C locale (no decimal comma).
  char buf[64];
  char* end = std::to_chars(buf, buf + sizeof(buf), value,
                            std::chars_format::scientific)
                  .ptr;
  // buf is [-]d[.ddd]e[+-]XX
  std::string s(buf, end);
  bool negative = s[0] == '-';
  if (negative) s = s.substr(1);
  size_t e_pos = s.find('e');
  int exponent = std::atoi(s.c_str() + e_pos + 1);
  std::string digits;
  for (size_t i = 0; i < e_pos; ++i) {
    if (s[i] != '.') digits += s[i];
  }
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  int decpt = exponent + 1;  // position of the decimal point in digits
  std::string out;
  if (decpt <= -4 || decpt > 16) {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    out += exponent < 0 ? "e-" : "e+";
    if (std::abs(exponent) < 10) out += "0";
    out += std::to_string(std::abs(exponent));
  } else if (decpt <= 0) {
    out = "0." + std::string(-decpt, '0') + digits;
  } else if (decpt >= static_cast<int>(digits.size())) {
    out = digits + std::string(decpt - digits.size(), '0') + ".0";
  } else {
    out = digits.substr(0, decpt) + "." + digits.substr(decpt);
  }
  return negative ? "-" + out : out;
}

std::string format_dtype(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::ScalarType::Byte: return "torch.uint8";
    case c10::ScalarType::Char: return "torch.int8";
    case c10::ScalarType::Short: return "torch.int16";
    case c10::ScalarType::Int: return "torch.int32";
    case c10::ScalarType::Long: return "torch.int64";
    case c10::ScalarType::Half: return "torch.float16";
    case c10::ScalarType::Float: return "torch.float32";
    case c10::ScalarType::Double: return "torch.float64";
    case c10::ScalarType::ComplexHalf: return "torch.complex32";
    case c10::ScalarType::ComplexFloat: return "torch.complex64";
    case c10::ScalarType::ComplexDouble: return "torch.complex128";
    case c10::ScalarType::Bool: return "torch.bool";
    case c10::ScalarType::QInt8: return "torch.qint8";
    case c10::ScalarType::QUInt8: return "torch.quint8";
    case c10::ScalarType::QInt32: return "torch.qint32";
    case c10::ScalarType::BFloat16: return "torch.bfloat16";
    case c10::ScalarType::QUInt4x2: return "torch.quint4x2";
    case c10::ScalarType::QUInt2x4: return "torch.quint2x4";
    default: return absl::StrCat("torch.", c10::toString(dtype));
  }
}

std::string format_layout(c10::Layout layout) {
  switch (layout) {
    case c10::Layout::Strided: return "torch.strided";
    case c10::Layout::Sparse: return "torch.sparse_coo";
    case c10::Layout::SparseCsr: return "torch.sparse_csr";
    case c10::Layout::SparseCsc: return "torch.sparse_csc";
    case c10::Layout::SparseBsr: return "torch.sparse_bsr";
    case c10::Layout::SparseBsc: return "torch.sparse_bsc";
    case c10::Layout::Mkldnn: return "torch._mkldnn";
    default: return "torch.strided";
  }
}

std::string format_memory_format(c10::MemoryFormat memory_format) {
  switch (memory_format) {
    case c10::MemoryFormat::Contiguous: return "torch.contiguous_format";
    case c10::MemoryFormat::Preserve: return "torch.preserve_format";
    case c10::MemoryFormat::ChannelsLast: return "torch.channels_last";
    case c10::MemoryFormat::ChannelsLast3d: return "torch.channels_last_3d";
    default: return "torch.contiguous_format";
  }
}

std::optional<Argument> parse_torch_name(std::string_view name) {
  static const auto* names = [] {
    auto* map = new absl::flat_hash_map<std::string, Argument>();
    for (int i = 0; i < static_cast<int>(c10::ScalarType::NumOptions); ++i) {
      auto dtype = static_cast<c10::ScalarType>(i);
      map->emplace(format_dtype(dtype), Argument(dtype));
    }
    for (c10::Layout layout :
         {c10::Layout::Strided, c10::Layout::Sparse, c10::Layout::SparseCsr,
          c10::Layout::SparseCsc, c10::Layout::SparseBsr,
          c10::Layout::SparseBsc, c10::Layout::Mkldnn}) {
      map->emplace(format_layout(layout), Argument(layout));
    }
    for (c10::MemoryFormat format :
         {c10::MemoryFormat::Contiguous, c10::MemoryFormat::Preserve,
          c10::MemoryFormat::ChannelsLast, c10::MemoryFormat::ChannelsLast3d}) {
      map->emplace(format_memory_format(format), Argument(format));
    }
    return map;
  }();
  auto it = names->find(std::string(name));
  if (it == names->end()) return std::nullopt;
  return it->second;
}

}  // namespace fx
