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

}  // namespace fx::internal
