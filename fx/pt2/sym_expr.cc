#include "fx/pt2/sym_expr.h"

#include "fx/ir/function.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace fx::pt2 {
namespace {

// A file's expressions nest a few levels; deeper is hostile.
constexpr int kMaxDepth = 32;

bool multiply(int64_t a, int64_t b, int64_t* out) {
  return !__builtin_mul_overflow(a, b, out);
}
bool add(int64_t a, int64_t b, int64_t* out) {
  return !__builtin_add_overflow(a, b, out);
}

SizeExpr scaled(const SizeExpr& e, int64_t c) {
  SizeExpr out = e;
  if (!e.known || e.r != 1 || !multiply(e.p, c, &out.p) ||
      !multiply(e.q, c, &out.q)) {
    return SizeExpr::unknown();
  }
  if (out.p == 0) out.symbols.clear();
  return out;
}

SizeExpr product(const SizeExpr& a, const SizeExpr& b) {
  if (!a.known || !b.known) return SizeExpr::unknown();
  if (a.is_constant()) return scaled(b, a.q);
  if (b.is_constant()) return scaled(a, b.q);
  if (a.q != 0 || b.q != 0 || a.r != 1 || b.r != 1) return SizeExpr::unknown();
  SizeExpr out;
  out.symbols = a.symbols;
  out.symbols.insert(out.symbols.end(), b.symbols.begin(), b.symbols.end());
  std::sort(out.symbols.begin(), out.symbols.end());
  if (!multiply(a.p, b.p, &out.p)) return SizeExpr::unknown();
  return out;
}

SizeExpr sum(const SizeExpr& a, const SizeExpr& b) {
  if (!a.known || !b.known || a.r != 1 || b.r != 1) return SizeExpr::unknown();
  SizeExpr out = a.is_constant() ? b : a;
  const SizeExpr& other = a.is_constant() ? a : b;
  if (!other.is_constant()) {
    if (other.symbols != out.symbols || !add(out.p, other.p, &out.p)) {
      return SizeExpr::unknown();
    }
  }
  if (!add(out.q, other.q, &out.q)) return SizeExpr::unknown();
  if (out.p == 0) out.symbols.clear();
  return out;
}

class Parser {
 public:
  explicit Parser(std::string_view text) : s_(text) {}

  std::optional<SizeExpr> parse() {
    std::optional<SizeExpr> e = expr(0);
    skip_spaces();
    if (!e || i_ != s_.size()) return std::nullopt;
    return e;
  }

 private:
  void skip_spaces() {
    while (i_ < s_.size() && s_[i_] == ' ') ++i_;
  }
  bool take(char c) {
    skip_spaces();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  std::string word() {
    skip_spaces();
    const size_t start = i_;
    while (i_ < s_.size() &&
           (std::isalnum(static_cast<unsigned char>(s_[i_])) || s_[i_] == '_')) {
      ++i_;
    }
    return std::string(s_.substr(start, i_ - start));
  }
  std::optional<int64_t> integer() {
    skip_spaces();
    const bool negative = i_ < s_.size() && s_[i_] == '-';
    if (negative) ++i_;
    const size_t start = i_;
    int64_t value = 0;
    while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) {
      if (!multiply(value, 10, &value) || !add(value, s_[i_] - '0', &value)) {
        return std::nullopt;
      }
      ++i_;
    }
    if (i_ == start) return std::nullopt;
    return negative ? -value : value;
  }
  std::optional<std::string> quoted() {
    skip_spaces();
    if (i_ >= s_.size() || (s_[i_] != '\'' && s_[i_] != '"')) {
      return std::nullopt;
    }
    const char quote = s_[i_++];
    const size_t start = i_;
    while (i_ < s_.size() && s_[i_] != quote) ++i_;
    if (i_ >= s_.size()) return std::nullopt;
    return std::string(s_.substr(start, i_++ - start));
  }
  // Skips to the parenthesis that closes the one just read.
  bool skip_to_close() {
    int depth = 1;
    while (i_ < s_.size() && depth > 0) {
      if (s_[i_] == '(') ++depth;
      if (s_[i_] == ')') --depth;
      ++i_;
    }
    return depth == 0;
  }

  // A name SizeExpr prints and reads back as one symbol.
  static bool identifier(const std::string& name) {
    if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) {
      return false;
    }
    return std::all_of(name.begin(), name.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
    });
  }

  std::optional<SizeExpr> expr(int depth) {
    if (depth > kMaxDepth) return std::nullopt;
    const std::string name = word();
    if (name.empty() || !take('(')) return std::nullopt;
    if (name == "Symbol") {
      std::optional<std::string> symbol = quoted();
      // Its assumptions (positive=True, integer=True) say nothing more here.
      if (!symbol || !identifier(*symbol) || !skip_to_close()) {
        return std::nullopt;
      }
      return SizeExpr::symbol(*symbol);
    }
    if (name == "Integer") {
      std::optional<int64_t> value = integer();
      if (!value || !take(')')) return std::nullopt;
      return SizeExpr::constant(*value);
    }
    std::vector<SizeExpr> args;
    if (!take(')')) {
      do {
        std::optional<SizeExpr> a = expr(depth + 1);
        if (!a) return std::nullopt;
        args.push_back(std::move(*a));
      } while (take(','));
      if (!take(')')) return std::nullopt;
    }
    if ((name == "Mul" || name == "Add") && !args.empty()) {
      SizeExpr out = args[0];
      for (size_t k = 1; k < args.size(); ++k) {
        out = name == "Mul" ? product(out, args[k]) : sum(out, args[k]);
      }
      return out;
    }
    if (name == "FloorDiv" && args.size() == 2 && args[0].known &&
        args[0].r == 1 && args[1].is_constant() && args[1].q > 0) {
      SizeExpr out = args[0];
      if (out.is_constant()) {
        out.q = floor_divide(out.q, args[1].q);
        return out;
      }
      out.r = args[1].q;
      return out;
    }
    // Well formed, but not of the form SizeExpr holds.
    return SizeExpr::unknown();
  }

  std::string_view s_;
  size_t i_ = 0;
};

}  // namespace

SizeExpr parse_sym_expr(std::string_view text) {
  if (text.find('(') == std::string_view::npos ||
      text.find("//") != std::string_view::npos) {
    // Python's infix form, as SizeExpr prints it.
    std::optional<SizeExpr> e = SizeExpr::parse(text);
    return e ? *e : SizeExpr::unknown();
  }
  std::optional<SizeExpr> e = Parser(text).parse();
  return e ? *e : SizeExpr::unknown();
}

}  // namespace fx::pt2
