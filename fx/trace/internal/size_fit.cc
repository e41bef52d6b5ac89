#include "fx/trace/internal/size_fit.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "fx/ir/function.h"

namespace fx::internal {
namespace {

constexpr int64_t kUnbounded = std::numeric_limits<int64_t>::max();
// Sizes looked at on each side of the example, along each symbol and all
// of them together: more than the period of any two roundings with
// divisors up to kMaxDivisor (so two that agree on it agree everywhere),
// and enough for two slopes 1/r1 and 1/r2 to part.
constexpr int64_t kWindow = 4 * kMaxDivisor * kMaxDivisor;
// Of those, the nearest sizes among which the one that splits the
// candidates most evenly is chosen.
constexpr int64_t kSplitWindow = 64;

int64_t ceil_div(int64_t a, int64_t b) { return -floor_divide(-a, b); }

// A candidate: one of SizeExpr's forms or a SizeFit.
struct Candidate {
  std::variant<SizeExpr, SizeFit> fit;
  int64_t at(const SymbolSizes& sizes) const {
    if (const auto* e = std::get_if<SizeExpr>(&fit)) return *e->at(sizes);
    return std::get<SizeFit>(fit).at(sizes);
  }
  std::string to_string() const {
    if (const auto* e = std::get_if<SizeExpr>(&fit)) return e->to_string();
    return std::get<SizeFit>(fit).to_string();
  }
};

struct Axis {
  int64_t lo, hi, step;  // hi is kUnbounded without a max
};

class Fitter {
 public:
  Fitter(const std::vector<int64_t>& values,
         const std::vector<SymbolSizes>& sizes,
         const std::vector<DynamicDim>& dims)
      : values_(values), sizes_(sizes) {
    for (const DynamicDim& d : dims) {
      axes_[d.symbol] = {lowest_size(d), highest_size(d).value_or(kUnbounded),
                         d.multiple_of};
    }
    for (const auto& [symbol, size] : sizes_[0]) symbols_.push_back(symbol);
  }

  SizeFitResult run() {
    roundings();
    products();
    if (std::optional<Undecided> more = affine()) return *more;
    if (candidates_.empty()) return std::monostate();
    if (std::optional<Undecided> split = disagreement()) return *split;
    // One function: its simplest form (SizeExpr's first, in the order
    // found: smaller divisors first). The graph floors: a size that only a
    // truncating division explains is not expressed.
    for (const Candidate& c : candidates_) {
      if (std::holds_alternative<SizeExpr>(c.fit)) return std::get<SizeExpr>(c.fit);
    }
    for (const Candidate& c : candidates_) {
      if (!std::get<SizeFit>(c.fit).truncates) return std::get<SizeFit>(c.fit);
    }
    return std::monostate();
  }

 private:
  bool explains(const Candidate& c) const {
    for (size_t t = 0; t < values_.size(); ++t) {
      if (c.at(sizes_[t]) != values_[t]) return false;
    }
    return true;
  }

  void add(Candidate c) {
    if (explains(c)) candidates_.push_back(std::move(c));
  }

  // m * ((S + q) // r) + a * S for r in 2..kMaxDivisor, m 1 or r, a -1,
  // 0 or 1: each q that every trace allows. With C++'s truncating
  // division as a rival, for the offsets that make the numerator negative
  // at the smallest size (elsewhere the two divisions agree).
  void roundings() {
    for (const std::string& symbol : symbols_) {
      for (int64_t r = 2; r <= kMaxDivisor; ++r) {
        for (int64_t m : {int64_t{1}, r}) {
          for (int64_t a : {int64_t{0}, int64_t{-1}, int64_t{1}}) {
            for (bool truncates : {false, true}) {
              std::optional<std::pair<int64_t, int64_t>> q =
                  offsets(symbol, r, m, a, truncates);
              if (!q) continue;
              if (truncates) {
                q->second = std::min(q->second, -axes_.at(symbol).lo - 1);
              }
              for (int64_t offset = q->first; offset <= q->second; ++offset) {
                SizeFit f;
                f.terms = {{symbol, 1}};
                f.q = offset;
                f.r = r;
                f.m = m;
                if (a != 0) {
                  f.outer = symbol;
                  f.a = a;
                }
                f.truncates = truncates;
                add(Candidate{f});
              }
            }
          }
        }
      }
    }
  }

  // The offsets q (lowest, highest) that every trace allows: with w =
  // (value - a * s) / m, s + q lies in [r * w, r * w + r - 1] for floor
  // division; truncating, there for w > 0, in [r * w - r + 1, r * w] for
  // w < 0, and in [-(r - 1), r - 1] for w = 0. Nothing when none does.
  std::optional<std::pair<int64_t, int64_t>> offsets(
      const std::string& symbol, int64_t r, int64_t m, int64_t a,
      bool truncates) const {
    int64_t lo = std::numeric_limits<int64_t>::min();
    int64_t hi = std::numeric_limits<int64_t>::max();
    for (size_t t = 0; t < values_.size(); ++t) {
      const int64_t s = sizes_[t].at(symbol);
      const int64_t v = values_[t] - a * s;
      if (v % m != 0) return std::nullopt;
      const int64_t w = v / m;
      const int64_t low = truncates && w <= 0 ? r * w - r + 1 : r * w;
      const int64_t high = truncates && w < 0 ? r * w : r * w + r - 1;
      lo = std::max(lo, low - s);
      hi = std::min(hi, high - s);
      if (lo > hi) return std::nullopt;
    }
    return std::make_pair(lo, hi);
  }

  // SizeExpr's forms, rivals of the others: a * S + b, and p * S1 * S2 + b
  // (a square when S1 is S2), each solved from two traces.
  void products() {
    std::vector<std::vector<std::string>> terms;
    for (size_t i = 0; i < symbols_.size(); ++i) {
      terms.push_back({symbols_[i]});
      for (size_t j = i; j < symbols_.size(); ++j) {
        terms.push_back({symbols_[i], symbols_[j]});
      }
    }
    for (const std::vector<std::string>& term : terms) {
      auto product = [&](const SymbolSizes& s) {
        int64_t p = 1;
        for (const std::string& symbol : term) p *= s.at(symbol);
        return p;
      };
      const int64_t x0 = product(sizes_[0]);
      for (size_t t = 1; t < sizes_.size(); ++t) {
        const int64_t dx = product(sizes_[t]) - x0;
        if (dx == 0) continue;
        const int64_t dv = values_[t] - values_[0];
        if (dv % dx != 0 || dv == 0) break;
        SizeExpr e;
        e.symbols = term;
        e.p = dv / dx;
        e.q = values_[0] - e.p * x0;
        add(Candidate{e});
        break;
      }
    }
  }

  // c1 * S1 + ... + cn * Sn + q over n >= 2 symbols: solved from n + 1
  // traces, checked on another. Asks for a trace while the traces cannot
  // solve it, or none is left to check it.
  std::optional<Undecided> affine() {
    const size_t n = symbols_.size();
    if (n < 2) return std::nullopt;
    std::vector<std::vector<double>> rows;
    for (size_t t = 0; t < sizes_.size() && rows.size() < n + 1; ++t) {
      std::vector<double> row;
      for (const std::string& symbol : symbols_) {
        row.push_back(static_cast<double>(sizes_[t].at(symbol)));
      }
      row.push_back(1.0);
      row.push_back(static_cast<double>(values_[t]));
      if (independent(rows, row)) rows.push_back(row);
    }
    if (rows.size() < n + 1 || sizes_.size() < n + 2) {
      // Not solved or not checked: one more trace off the traces' span.
      std::optional<Undecided> more;
      nearby([&](const SymbolSizes& at) {
        if (traced(at)) return false;
        std::vector<double> row;
        for (const std::string& symbol : symbols_) {
          row.push_back(static_cast<double>(at.at(symbol)));
        }
        row.push_back(1.0);
        row.push_back(0.0);
        if (rows.size() < n + 1 && !independent(rows, row)) return false;
        more = Undecided{at,
                         "an affine function of " + absl::StrJoin(symbols_, ", "),
                         "another"};
        return true;
      });
      return more;
    }
    std::vector<double> solution = solve(rows);
    SizeFit f;
    for (size_t i = 0; i < n; ++i) {
      const double c = std::round(solution[i]);
      if (c != 0) f.terms.emplace_back(symbols_[i], static_cast<int64_t>(c));
    }
    f.q = static_cast<int64_t>(std::round(solution[n]));
    if (f.terms.size() >= 2) add(Candidate{f});
    return std::nullopt;
  }

  // Whether `row` (sizes, 1, value) adds to the rank of `rows`' sizes.
  static bool independent(const std::vector<std::vector<double>>& rows,
                          const std::vector<double>& row) {
    std::vector<std::vector<double>> m = rows;
    m.push_back(row);
    const size_t cols = row.size() - 1;  // not the value
    size_t rank = 0;
    for (size_t c = 0; c < cols && rank < m.size(); ++c) {
      size_t pivot = rank;
      for (size_t i = rank; i < m.size(); ++i) {
        if (std::abs(m[i][c]) > std::abs(m[pivot][c])) pivot = i;
      }
      if (std::abs(m[pivot][c]) < 1e-9) continue;
      std::swap(m[pivot], m[rank]);
      for (size_t i = 0; i < m.size(); ++i) {
        if (i == rank) continue;
        const double f = m[i][c] / m[rank][c];
        for (size_t k = c; k < m[i].size(); ++k) m[i][k] -= f * m[rank][k];
      }
      ++rank;
    }
    return rank == m.size();
  }

  // The coefficients of n + 1 independent rows (sizes, 1, value).
  static std::vector<double> solve(std::vector<std::vector<double>> m) {
    const size_t n = m.size();
    for (size_t c = 0; c < n; ++c) {
      size_t pivot = c;
      for (size_t i = c; i < n; ++i) {
        if (std::abs(m[i][c]) > std::abs(m[pivot][c])) pivot = i;
      }
      std::swap(m[pivot], m[c]);
      for (size_t i = 0; i < n; ++i) {
        if (i == c) continue;
        const double f = m[i][c] / m[c][c];
        for (size_t k = c; k <= n; ++k) m[i][k] -= f * m[c][k];
      }
    }
    std::vector<double> out(n);
    for (size_t i = 0; i < n; ++i) out[i] = m[i][n] / m[i][i];
    return out;
  }

  bool traced(const SymbolSizes& at) const {
    return std::find(sizes_.begin(), sizes_.end(), at) != sizes_.end();
  }

  // Calls `visit` with the sizes the bounds allow, nearest to the example
  // first (each symbol moved alone, and all together, j steps either way,
  // up to kWindow), until it returns true.
  template <typename Visit>
  void nearby(const Visit& visit) const {
    const SymbolSizes& example = sizes_[0];
    for (int64_t j = 1; j <= kWindow; ++j) {
      bool any = false;
      for (int64_t sign : {int64_t{1}, int64_t{-1}}) {
        SymbolSizes all = example;
        bool all_ok = true;
        for (const std::string& symbol : symbols_) {
          const Axis& a = axes_.at(symbol);
          const int64_t s = example.at(symbol) + sign * j * a.step;
          if (s < a.lo || s > a.hi) {
            all_ok = false;
            continue;
          }
          any = true;
          SymbolSizes one = example;
          one[symbol] = s;
          if (visit(one)) return;
          all[symbol] = s;
        }
        if (all_ok && symbols_.size() > 1 && visit(all)) return;
      }
      if (!any) return;
    }
  }

  // Where the candidates disagree: of the nearest sizes, the one whose
  // largest group of candidates giving one value is smallest; else the
  // first size further out where any two differ. Nothing when they agree
  // on the whole window: they are one function.
  std::optional<Undecided> disagreement() const {
    if (candidates_.size() < 2) return std::nullopt;
    std::optional<SymbolSizes> best;
    size_t best_group = candidates_.size();
    size_t looked = 0;
    const size_t split_window =
        static_cast<size_t>(kSplitWindow) * 2 * (symbols_.size() + 1);
    nearby([&](const SymbolSizes& at) {
      ++looked;
      const int64_t v0 = candidates_.front().at(at);
      if (std::all_of(candidates_.begin(), candidates_.end(),
                      [&](const Candidate& c) { return c.at(at) == v0; })) {
        return best.has_value() && looked >= split_window;
      }
      std::map<int64_t, size_t> groups;
      for (const Candidate& c : candidates_) ++groups[c.at(at)];
      size_t largest = 0;
      for (const auto& [value, count] : groups) largest = std::max(largest, count);
      if (largest < best_group) {
        best_group = largest;
        best = at;
      }
      return looked >= split_window;
    });
    if (!best) return std::nullopt;
    const int64_t v0 = candidates_.front().at(*best);
    for (const Candidate& c : candidates_) {
      if (c.at(*best) != v0) {
        return Undecided{*best, candidates_.front().to_string(), c.to_string()};
      }
    }
    return std::nullopt;  // unreachable: the best point splits them
  }

  const std::vector<int64_t>& values_;
  const std::vector<SymbolSizes>& sizes_;
  std::map<std::string, Axis> axes_;
  std::vector<std::string> symbols_;
  std::vector<Candidate> candidates_;
};

}  // namespace

int64_t SizeFit::at(const SymbolSizes& sizes) const {
  int64_t sum = q;
  for (const auto& [symbol, c] : terms) sum += c * sizes.at(symbol);
  const int64_t quotient = truncates ? sum / r : floor_divide(sum, r);
  return m * quotient + (a == 0 ? 0 : a * sizes.at(outer));
}

std::string SizeFit::to_string() const {
  std::vector<std::string> parts;
  for (const auto& [symbol, c] : terms) {
    parts.push_back(c == 1 ? symbol : absl::StrCat(c, "*", symbol));
  }
  std::string sum = absl::StrJoin(parts, " + ");
  if (q != 0) absl::StrAppend(&sum, q > 0 ? " + " : " - ", std::abs(q));
  std::string out = sum;
  if (r != 1) {
    out = truncates ? absl::StrCat("int((", sum, ")/", r, ")")
                    : absl::StrCat("(", sum, ")//", r);
  }
  if (m != 1) out = absl::StrCat(m, "*(", out, ")");
  if (a == 1) absl::StrAppend(&out, " + ", outer);
  if (a == -1) absl::StrAppend(&out, " - ", outer);
  if (a != 0 && a != 1 && a != -1) {
    absl::StrAppend(&out, a > 0 ? " + " : " - ", std::abs(a), "*", outer);
  }
  return out;
}

int64_t lowest_size(const DynamicDim& d) {
  const int64_t m = d.multiple_of;
  // An input's dimension is at least 1; nonzero may find no element.
  return ceil_div(std::max<int64_t>(d.min, d.data_dependent() ? 0 : 1), m) * m;
}

std::optional<int64_t> highest_size(const DynamicDim& d) {
  if (d.max == kUnbounded) return std::nullopt;
  return d.max / d.multiple_of * d.multiple_of;
}

SizeFitResult fit_size(const std::vector<int64_t>& values,
                       const std::vector<SymbolSizes>& sizes,
                       const std::vector<DynamicDim>& dims) {
  if (std::optional<SizeExpr> e =
          SizeExpr::fit(values, sizes, symbol_multiples(dims))) {
    return *e;
  }
  if (values.size() < 3) return std::monostate();
  return Fitter(values, sizes, dims).run();
}

}  // namespace fx::internal
