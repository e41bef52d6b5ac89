// A FileCheck-like matcher for printed graphs (LLVM's FileCheck, as MLIR's
// tests use it): the expected IR is a list of directives, each a pattern
// that must (or must not) occur in the printed text, in order.
//
//   CHECK: %conv2d : [#users=1] = call_function[target=aten::conv2d]
//   CHECK-SAME: args = (%x, %{{.*}}weight
//   CHECK-NEXT: %relu
//   CHECK-NOT: aten::batch_norm
//   CHECK: return relu
//
//   CHECK:       the pattern occurs at or after where the last match ended;
//   CHECK-NEXT:  ... on the line right after the last match's line;
//   CHECK-SAME:  ... on the last match's line, after it;
//   CHECK-NOT:   the pattern does not occur between the last match and the
//                next positive match (or the end of the text).
// A pattern is literal text; {{regex}} embeds an ECMAScript regular
// expression. Leading and trailing spaces of a pattern are ignored. Lines
// without a directive are ignored, so directives can be written in a C++
// raw string with comments between them.
#pragma once

#include <string>
#include <string_view>

namespace testdata {

struct FileCheckResult {
  bool ok = false;
  // Empty if ok; else the failing directive (with its line in `checks`),
  // what was expected where, and the text around the place searched.
  std::string message;
  explicit operator bool() const { return ok; }
};

// Matches `text` against the directives in `checks`. Directives that cannot
// be read (no directive at all, a CHECK-NEXT or CHECK-SAME first, a bad
// regex) fail with a message saying so.
FileCheckResult filecheck(std::string_view checks, std::string_view text);

}  // namespace testdata
