#include "fx/trace/internal/bounds.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <map>
#include <optional>
#include <utility>

#include <c10/util/Exception.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "fx/ir/errors.h"
#include "fx/trace/internal/size_fit.h"

namespace fx::internal {
namespace {

// Bisection steps per bound: from a max of 10^6 to within 2^-10 of it.
constexpr int kSearchSteps = 10;

// The sizes that depend on data whose bounds are searched one by one.
constexpr size_t kMostSearchedSizes = 16;

const DynamicDim& dim_of(const std::vector<DynamicDim>& dims,
                         const std::string& symbol) {
  for (const DynamicDim& d : dims) {
    if (d.symbol == symbol) return d;
  }
  throw TraceError(absl::StrCat("no dynamic dimension is named ", symbol));
}

// The first line of a disagreement, enough to name the node.
std::string first_sentence(const std::string& why) {
  const size_t end = why.find(". ");
  return end == std::string::npos ? why : why.substr(0, end);
}

class Verifier {
 public:
  Verifier(const Trace& base, const std::vector<Trace>& others,
           const std::vector<DynamicDim>& dims,
           const std::function<Trace(const SymbolSizes&)>& trace_at)
      : base_(base), others_(others), trace_at_(trace_at) {
    out_.dims = dims;
  }

  VerifiedBounds run() {
    // Every symbol at its lowest size, then at its highest.
    const std::optional<std::string> low = agrees(corner(false));
    const std::optional<std::string> high = agrees(corner(true));
    if (!low && !high) return std::move(out_);
    // Each symbol alone, the others at the example's sizes; then, where
    // the bounds still disagree together (a batch norm's statistics over
    // B * T values at B = T = 1), each with the others at their bounds.
    for (const auto& [symbol, size] : base_.sizes) {
      if (low) narrow(symbol, false, base_.sizes);
      if (high) narrow(symbol, true, base_.sizes);
    }
    for (bool up : {false, true}) {
      if (!agrees(corner(up))) continue;
      for (const auto& [symbol, size] : base_.sizes) {
        narrow(symbol, up, corner(up));
      }
      if (std::optional<std::string> why = agrees(corner(up))) {
        throw TraceError(absl::StrCat(
            "the dynamic dimensions, narrowed to where their traces agreed, "
            "still disagree together: ", *why));
      }
    }
    return std::move(out_);
  }

 private:
  SymbolSizes corner(bool up) const {
    SymbolSizes sizes = base_.sizes;
    for (auto& [symbol, size] : sizes) {
      const DynamicDim& d = dim_of(out_.dims, symbol);
      size = up ? highest_size(d).value_or(size) : lowest_size(d);
    }
    return sizes;
  }

  bool traced(const SymbolSizes& sizes) const {
    if (sizes == base_.sizes) return true;
    for (const Trace& t : others_) {
      if (t.sizes == sizes) return true;
    }
    for (const Trace& t : out_.checks) {
      if (t.sizes == sizes) return true;
    }
    return false;
  }

  // Why the trace at `sizes` disagrees; nothing when it agrees (kept as a
  // check) or was traced already. Each size is traced once: a
  // disagreement is kept too, for a corner asked about again.
  std::optional<std::string> agrees(const SymbolSizes& sizes) {
    if (traced(sizes)) return std::nullopt;
    if (auto it = disagreed_.find(sizes); it != disagreed_.end()) {
      return it->second;
    }
    ++out_.traces;
    std::string why;
    try {
      Trace t = trace_at_(sizes);
      t.sizes = sizes;
      check_generalizes(base_, others_, out_.dims, &t);
      out_.checks.push_back(std::move(t));
      return std::nullopt;
    } catch (const TraceError& e) {
      why = absl::StrCat("at ", describe(sizes), ": ", e.msg());
    } catch (const c10::Error& e) {  // the inputs at a large bound
      why = absl::StrCat("at ", describe(sizes), ": ",
                         e.what_without_backtrace());
    }
    disagreed_.emplace(sizes, why);
    return why;
  }

  // Moves `symbol`'s lower (or upper) bound to the last size whose trace
  // agrees, the other symbols at their sizes in `at`.
  void narrow(const std::string& symbol, bool up, const SymbolSizes& at) {
    DynamicDim d = dim_of(out_.dims, symbol);
    const std::optional<int64_t> bound = up ? highest_size(d) : lowest_size(d);
    if (!bound) return;
    SymbolSizes sizes = at;
    sizes[symbol] = *bound;
    std::optional<std::string> why = agrees(sizes);
    if (!why) return;
    // Verified: the sizes the near traces used.
    int64_t ok = base_.sizes.at(symbol);
    for (const Trace& t : others_) {
      const int64_t s = t.sizes.at(symbol);
      ok = up ? std::max(ok, s) : std::min(ok, s);
    }
    int64_t bad = *bound;
    const int64_t m = d.multiple_of;
    for (int step = 0; step < kSearchSteps && std::abs(bad - ok) > m; ++step) {
      const int64_t mid = (ok + (bad - ok) / 2) / m * m;
      if (mid == ok || mid == bad) break;
      sizes[symbol] = mid;
      if (std::optional<std::string> w = agrees(sizes)) {
        bad = mid;
        why = std::move(w);
      } else {
        ok = mid;
      }
    }
    const std::string was = d.relation();
    (up ? d.max : d.min) = ok;
    for (DynamicDim& e : out_.dims) {  // every dimension of this symbol
      if (e.symbol == symbol) (up ? e.max : e.min) = ok;
    }
    out_.narrowed.push_back(absl::StrCat(
        d.relation(), " (was ", was, "): the trace ", first_sentence(*why)));
  }

  const Trace& base_;
  const std::vector<Trace>& others_;
  const std::function<Trace(const SymbolSizes&)>& trace_at_;
  VerifiedBounds out_;
  std::map<SymbolSizes, std::string> disagreed_;
};

}  // namespace

DataDependentBounds data_dependent_bounds(
    const std::vector<DynamicDim>& unbacked, const SymbolSizes& hints,
    const std::function<void(const SymbolSizes&, std::vector<int64_t>*)>&
        trace_at) {
  DataDependentBounds out;
  const size_t n = unbacked.size();
  auto traces = [&](const SymbolSizes& sizes, std::vector<int64_t>* bounds,
                    std::string* why) {
    ++out.traces;
    bounds->assign(n, -1);
    try {
      trace_at(sizes, bounds);
      return true;
    } catch (const TraceError& e) {
      // "at u0=450, u1=3 (u2 at its bound)", or "with every size that
      // depends on data at its bound (at B=64)".
      SymbolSizes given;
      std::vector<std::string> at_bound;
      for (const auto& [symbol, size] : sizes) {
        if (size == kAtBound) {
          at_bound.push_back(symbol);
        } else {
          given[symbol] = size;
        }
      }
      std::string where;
      if (at_bound.size() == n) {
        where = "with every size that depends on data at its bound";
        if (!given.empty()) {
          absl::StrAppend(&where, " (at ", describe(given), ")");
        }
      } else {
        where = absl::StrCat("at ", describe(given));
        if (!at_bound.empty()) {
          absl::StrAppend(&where, " (", absl::StrJoin(at_bound, ", "),
                          " at its bound)");
        }
      }
      *why = absl::StrCat(where, ": ", e.msg());
      return false;
    }
  };
  SymbolSizes all = hints;
  for (const DynamicDim& d : unbacked) all[d.symbol] = kAtBound;
  std::vector<int64_t> bounds;
  std::string why;
  if (traces(all, &bounds, &why)) {
    out.max = out.selects_from = bounds;
    return out;
  }
  // One by one costs up to a trace per bit of each bound.
  if (n > kMostSearchedSizes) {
    throw TraceError(absl::StrCat(
        why, "\n(fx looks for the bounds of at most ", kMostSearchedSizes,
        " sizes that depend on data one by one; this program has ", n, ")"));
  }
  out.max.assign(n, 0);
  out.selects_from.assign(n, 0);
  SymbolSizes sizes = hints;
  for (size_t k = 0; k < n; ++k) {
    const std::string& symbol = unbacked[k].symbol;
    const int64_t hint = hints.at(symbol);
    sizes[symbol] = kAtBound;
    if (traces(sizes, &bounds, &why)) {
      out.max[k] = out.selects_from[k] = bounds[k];
      sizes[symbol] = bounds[k];
      continue;
    }
    // The sizes before it at their bounds and it at its hint traced (the
    // last trace that succeeded): the bound lies between.
    const int64_t bound = bounds[k];
    if (bound < 0 || bound <= hint) throw TraceError(why);
    int64_t ok = hint, bad = bound;
    std::vector<int64_t> ignored;
    // To the size: a few more traces than verify_bounds' (which stops
    // within 2^-10), so that the graph's check names the program's limit.
    while (bad - ok > 1) {
      const int64_t mid = ok + (bad - ok) / 2;
      sizes[symbol] = mid;
      std::string failed;
      if (traces(sizes, &ignored, &failed)) {
        ok = mid;
      } else {
        bad = mid;
        why = std::move(failed);
      }
    }
    out.max[k] = ok;
    out.selects_from[k] = bound;
    sizes[symbol] = ok;
    out.narrowed.push_back(absl::StrCat(
        "0 <= ", symbol, " <= ", ok, " (was 0 <= ", symbol, " <= ", bound,
        "): the trace ", first_sentence(why)));
  }
  return out;
}

VerifiedBounds verify_bounds(
    const Trace& base, const std::vector<Trace>& others,
    const std::vector<DynamicDim>& dims,
    const std::function<Trace(const SymbolSizes&)>& trace_at) {
  return Verifier(base, others, dims, trace_at).run();
}

}  // namespace fx::internal
