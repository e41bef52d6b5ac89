// Internal to //fx/pt2: torch.export's symbolic sizes as our SizeExpr.
// A .pt2 file writes each symbolic size as sympy's srepr
// ("Symbol('s77', positive=True, integer=True)", "Mul(Integer(3),
// Symbol('s77', ...))", "Add(...)", "FloorDiv(...)"), older files as
// Python's infix form ("3*s77"); both are read here.
#pragma once

#include <string_view>

#include "fx/ir/meta.h"

namespace fx::pt2 {

// The expression `text` writes, as (p * S1 * S2 ... + q) // r; unknown
// (SizeExpr::known false) for what that form cannot hold (Mod, Max, a sum
// of different products, ...) or what is malformed or too deep.
SizeExpr parse_sym_expr(std::string_view text);

}  // namespace fx::pt2
