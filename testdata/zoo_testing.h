// Assertions the tests over zoo models share (Catch2).
#pragma once

#include <ATen/core/ivalue.h>

namespace testdata {

// Bitwise equality of (nested tuples of) outputs: same sizes, same values.
void check_outputs_equal(const c10::IValue& a, const c10::IValue& b);

// The same test as a value, without Catch2's assertions (which are not for
// use off the test's thread).
bool outputs_bitwise_equal(const c10::IValue& a, const c10::IValue& b);

}  // namespace testdata
