// Internal to fx::to_onnx: the built-in mappings of aten operators.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include <c10/core/ScalarType.h>

#include "onnx/to_onnx.h"

namespace fx::internal {

// Adds a mapping per operator (by qualified name, with or without its
// overload: "aten::add.Tensor", "aten::relu").
void add_operator_mappings(
    std::map<std::string, OnnxMapping, std::less<>>* mappings);

// The ONNX element type (TensorProto::DataType) of a dtype; nullopt for a
// dtype ONNX has none for.
std::optional<int32_t> onnx_element_type(c10::ScalarType dtype);

}  // namespace fx::internal
