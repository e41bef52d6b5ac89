// Example inputs written as text, as the `fx` CLI's --input flag and the
// build-time generator (fx_cc_library's `inputs`) take them:
//
//   "1x3x224x224"          a float32 tensor of sizes [1, 3, 224, 224]
//   "1x3x224x224:float32"  the same, dtype named
//   "5:int64"              an int64 tensor of size [5]
//   "0x4:bool"             sizes may be 0
//
// Dtypes: float32 (float), float64 (double), float16, bfloat16, int64,
// int32, int8, uint8, bool.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace fx {

struct InputSpec {
  std::vector<int64_t> sizes;
  c10::ScalarType dtype = c10::ScalarType::Float;
};

// Parses a spec. Throws fx::GraphError naming the spec and what is wrong
// with it: no sizes, a size that is not a non-negative integer, sizes whose
// product overflows int64, an unknown dtype (the error lists the known
// ones) or more than one ':'.
InputSpec parse_input_spec(const std::string& spec);

// The spec's text, with its dtype named: parse_input_spec(to_string(s)) == s.
std::string to_string(const InputSpec& spec);

// A zero tensor of the spec's sizes and dtype (tracing reads only shapes and
// dtypes). Throws fx::GraphError if the spec is malformed or the tensor
// cannot be allocated.
at::Tensor example_input(const std::string& spec);

}  // namespace fx
