// Operator families and traits: which family an operator belongs to and
// what passes may assume of it, declared once per operator
// (passes/operator_families.def for aten's; a library registers its own,
// as the lowering does its fx_onednn operators) and read by every pass
// that reasons about a kind of operator rather than one (the lowering's
// channels-last chains, micro-batching, quantization's pass-through
// operators, QAT's convolution blocks, the pattern library's convolutions).
//
//   if (fx::has_trait(node, fx::kKeepsLayout)) ...
//   if (fx::in_family(node, fx::OperatorFamily::kConvolution)) ...
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "fx/ir/node.h"

namespace fx {

enum class OperatorFamily {
  kConvolution,     // conv1d..3d (and .padding), convolution, _convolution
  kConvTranspose,   // conv_transpose1d..3d
  kActivation,      // relu, clamp, gelu, sigmoid, ... and in-place forms
  kBinary,          // add, mul, sub, div of two tensors
  kPooling,
  kReshape,         // view, reshape, flatten, squeeze, unsqueeze
  kPermute,         // permute, transpose
  kLayout,          // contiguous
  kConcat,
  kNormalization,
  kReduction,
  kDropout,
  kUpsample,
  kLowered,         // a library's operator on its own kernels (fx_onednn)
};

enum OperatorTrait : uint32_t {
  // The output keeps a channels-last input's layout.
  kKeepsLayout = 1u << 0,
  // Each sample of the output comes from the same sample of the one
  // activation input; other tensor inputs are weights (get_attr).
  kPerSample = 1u << 1,
  // Elementwise over samples: each sample of the output from the same
  // sample of each input (broadcast inputs included).
  kPerSampleElementwise = 1u << 2,
  // Runs on a quantized input as it comes, its output keeping the input's
  // scale (or a fixed one): torch.ao's same-qparams and fixed-qparams ops.
  kQuantPassThrough = 1u << 3,
  // Clamps between two bounds (hardtanh, relu6, clamp).
  kClampLike = 1u << 4,
  // Quantized, its output takes a fixed scale (sigmoid, hardsigmoid, tanh).
  kFixedQParams = 1u << 5,
};

struct OperatorFamilyInfo {
  OperatorFamily family;
  uint32_t traits = 0;
};

// The family and traits of the operator `n` calls; null for another node
// or an operator no table declares.
const OperatorFamilyInfo* operator_family(const Node& n);
bool in_family(const Node& n, OperatorFamily family);
bool has_trait(const Node& n, OperatorTrait trait);

// Every operator declared, by name (sorted), with its family and traits.
std::vector<std::pair<std::string, OperatorFamilyInfo>> operator_families();

// Declares `qualified_name` ("fx_onednn::conv", with its overload if any)
// of `family` with `traits`; throws fx::GraphError when it is declared
// already. For a library's static registration.
void register_operator_family(const std::string& qualified_name,
                              OperatorFamily family, uint32_t traits);

}  // namespace fx
