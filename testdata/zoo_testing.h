// Assertions the tests over zoo models share (Catch2).
#pragma once

#include <ATen/core/ivalue.h>

namespace testdata {

// Bitwise equality of (nested tuples of) outputs: same sizes, same values.
void check_outputs_equal(const c10::IValue& a, const c10::IValue& b);

}  // namespace testdata
