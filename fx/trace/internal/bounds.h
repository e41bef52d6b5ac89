// The bounds of dynamic dimensions, checked by tracing at them.
//
// Three traces near the example (generalize.h) cannot see a program that
// changes where none of them looked: at size 1, where squeeze, broadcasting
// and batch statistics behave differently, or past a branch on a size
// (`T > 16 ? x * 2 : x + 1` with T <= 64, traced at T = 4). So the tracer
// traces again at each symbol's lowest size (its min, 1 by default) and at
// its max when it has one, all symbols at once. Where such a trace fails
// or its graph differs from what the near traces generalize to, each
// symbol is tried alone at that bound, and a bound whose trace disagrees
// is narrowed, by bisection, to the last size whose trace agrees:
//
//   T <= 64 traced at T = 4, 6, 13 (a branch on T > 16): at T = 64 the
//   graph differs; T = 38, 25, 19 differ, 16 agrees, 17 differs: T <= 16.
//
// Every size in between is not traced: a program that changes at one
// exact size inside the verified range (`T == 7 ? ...`) is still out of
// reach (specialize it, or bound the dimension so it cannot reach it).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "fx/trace/internal/generalize.h"

namespace fx::internal {

struct VerifiedBounds {
  std::vector<DynamicDim> dims;  // narrowed where a bound's trace disagreed
  std::vector<Trace> checks;     // the traces that agreed, for generalize()
  // One line per narrowed bound: "T <= 16 (was T <= 64): at T = 17, ...".
  std::vector<std::string> narrowed;
  int64_t traces = 0;  // traces run here
};

// `trace_at` traces the program with the dynamic dimensions at the given
// sizes and throws fx::TraceError when it fails. Throws fx::TraceError
// when bounds narrowed one by one still disagree together.
VerifiedBounds verify_bounds(
    const Trace& base, const std::vector<Trace>& others,
    const std::vector<DynamicDim>& dims,
    const std::function<Trace(const SymbolSizes&)>& trace_at);

// Sizes that depend on data (u0, u1, ...) are bounded by what their
// operators select from, which may itself be a selection (u1 among u0's
// rows): the first trace, at small sizes, sees u1's operator select from u0's
// hint. Their bounds are found by tracing with the operators keeping all
// they select from, in `trace_at`'s size kAtBound:
//
//   u0 <= 450 (a mask over 450 scores), u1 <= u0's 450, u2 <= u1's 450
//
// all at once; where that trace fails (a program that branches to code
// fx cannot follow past some size: torchvision's batched_nms past 1,000
// boxes), one symbol at a time in the order their operators run, the
// earlier ones at their bounds, and a bound at which the program fails is
// narrowed by bisection to the last size that traces (its operator's
// bound stays in `selects_from`, so that the graph checks the narrowed one).
constexpr int64_t kAtBound = -1;

struct DataDependentBounds {
  std::vector<int64_t> max;           // per symbol, in `unbacked`'s order
  std::vector<int64_t> selects_from;  // their operators' bounds
  // "0 <= u5 <= 1002 (was 0 <= u5 <= 13500): the trace at ..."
  std::vector<std::string> narrowed;
  int64_t traces = 0;
};

// `trace_at(sizes, bounds)` traces with the symbols at `sizes` (kAtBound:
// all their operator selects from) and writes, as each symbol's operator
// runs, the number it selects from into `bounds` (-1 for one that did not
// run); it throws fx::TraceError when the program fails. `hints` are sizes
// at which the program traced, the inputs' dynamic dimensions included.
DataDependentBounds data_dependent_bounds(
    const std::vector<DynamicDim>& unbacked, const SymbolSizes& hints,
    const std::function<void(const SymbolSizes&, std::vector<int64_t>*)>&
        trace_at);

}  // namespace fx::internal
