// Sizes beyond SizeExpr's single term, fitted by tracing where the
// candidates disagree.
//
// SizeExpr::fit (fx/ir/meta.h) explains a literal that changes with the
// dynamic sizes as an affine function of one symbol, a floor division by a
// divisor of its multiple_of, or a product, from three traces. Programs
// also round and add sizes, which three traces cannot pin down:
//
//   (T + 1) / 2                     (T + 1)//2: the offset of a rounding
//   (T + 7) / 8 * 8                 8*((T + 7)//8): padding to a multiple
//   (T + 7) / 8 * 8 - T             8*((T + 7)//8) - T: the padding itself
//   T + S                           S + T: two inputs concatenated
//
// A rounding of one symbol, m * ((S + q) // r) + a * S with r <=
// kMaxDivisor, m 1 or r and a -1, 0 or 1, has many candidates that agree on three sizes (8*((T + 7)//8)
// and 4*((T + 4)//4) both give 8, 8, 16 at T = 4, 6, 13); an affine
// function of n symbols needs n + 1 traces to solve and one more to check.
// So the candidates that explain every trace are kept, and while two of
// them give different sizes somewhere in the bounds, the program is traced
// again where they split most evenly (near the example first). The fit is
// the one candidate left, or every candidate left gives the same size at
// every size the bounds allow (they are one function). A C++ program
// divides with `/`, which truncates: where a rounding's numerator can be
// negative within the bounds ((T - 5) / 2 at T = 2 is -1 in C++, -2
// floored), its truncating twin is a rival too, and the program is traced
// where the two differ; a size only truncation explains is refused, since
// the graph floors. Two functions of
// these forms that agree on a run of kWindow consecutive sizes agree on
// all of them, so the search looks no further.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "fx/ir/meta.h"

namespace fx::internal {

// m * ((c1 * S1 + c2 * S2 ... + q) // r) + a * S, with r >= 1, m >= 1.
struct SizeFit {
  std::vector<std::pair<std::string, int64_t>> terms;  // sorted by symbol
  int64_t q = 0, r = 1, m = 1;
  std::string outer;  // S, when a is not 0
  int64_t a = 0;
  // The division truncates toward zero, as C++'s `/` on integers does,
  // where the graph's sym_floordiv floors: the two differ on a negative
  // numerator that r does not divide. Only a rival while fitting: a fit
  // that needs it is refused (fit_size never returns one).
  bool truncates = false;

  int64_t at(const SymbolSizes& sizes) const;
  // As Python writes it: "S + T", "(T + 1)//2", "8*((T + 7)//8) - T".
  std::string to_string() const;
};

// What the traces make of a literal: a SizeExpr (fx/ir/meta.h's forms), a
// SizeFit, or the sizes where two candidates that explain every trace
// disagree (trace there and fit again), or nothing explains it.
struct Undecided {
  SymbolSizes at;
  std::string first, second;  // two of the candidates, for errors
};
using SizeFitResult =
    std::variant<std::monostate, SizeExpr, SizeFit, Undecided>;

// The largest divisor a rounding is fitted with.
constexpr int64_t kMaxDivisor = 64;

// values[t] is the literal at sizes[t] (sizes[0] the example's). SizeExpr's
// forms first, as SizeExpr::fit finds them; then roundings of one symbol
// and affine functions of several.
SizeFitResult fit_size(const std::vector<int64_t>& values,
                       const std::vector<SymbolSizes>& sizes,
                       const std::vector<DynamicDim>& dims);

// The smallest size a dimension may take: its min (at least 1 for an
// input's, 0 for a data-dependent one), rounded up
// to its multiple_of.
int64_t lowest_size(const DynamicDim& d);
// Its largest, or nothing when it has no max.
std::optional<int64_t> highest_size(const DynamicDim& d);

}  // namespace fx::internal
