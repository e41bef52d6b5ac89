// Internal to fx::to_onnx: the built-in mappings of aten operators.
#pragma once

#include <functional>
#include <map>
#include <string>

#include "onnx/to_onnx.h"

namespace fx::internal {

// Adds a mapping per operator (by qualified name, with or without its
// overload: "aten::add.Tensor", "aten::relu").
void add_operator_mappings(
    std::map<std::string, OnnxMapping, std::less<>>* mappings);

}  // namespace fx::internal
