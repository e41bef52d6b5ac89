// Internal to the tracer: the outputs' metadata of an operator called on
// proxies, without touching data.
//
// Tried in order, and remembered per operator:
//   1. fx's shape rules, for common operators libtorch 1.13 has no Meta
//      kernel for (convolutions, batch_norm, layer_norm, relu, hardtanh,
//      adaptive pooling, embedding);
//   2. the operator's Meta kernel, on meta tensors of the inputs' shapes;
//   3. TorchScript's shape function registry (sizes; the dtype is the
//      `dtype` argument's, else `self`'s (or `input`'s) promoted with
//      `other`'s, else the first tensor input's; layout follows that input);
//   4. last resort, counted: the real kernel on zero-filled inputs, and again
//      on inputs of other values: outputs whose shapes differ between the two
//      depend on data (at::_unique), and raise DataDependentOutput.
#pragma once

#include <stdexcept>
#include <vector>

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>

#include "fx/ir/meta.h"

namespace fx {
namespace internal {

// One output of an operator.
struct InferredOutput {
  enum class Kind { kTensor, kTensorList, kValue };
  Kind kind = Kind::kTensor;
  TensorMeta tensor;
  std::vector<TensorMeta> tensors;
  // For kValue: the (shape-derived) value, e.g. of aten::size.int.
  c10::IValue value;
};

// Thrown by infer_outputs for an operator whose outputs' shapes (or count)
// depend on its inputs' values.
struct DataDependentOutput : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class InferenceTier { kRule, kMetaKernel, kShapeFunction, kRealKernel };

// Metadata of the outputs of `op` called with `args` (its full boxed
// arguments; tensors may be proxies or real tensors, whose data is never
// read). Throws the operator's own error when the inputs' shapes are invalid
// for it. Sets *tier to the method that answered.
std::vector<InferredOutput> infer_outputs(const c10::OperatorHandle& op,
                                          const std::vector<c10::IValue>& args,
                                          InferenceTier* tier);

// `value` with every tensor (proxy or real) replaced by a fresh zero-filled
// tensor of the same metadata. Used to run opaque code (leaf modules,
// wrapped functions) for its outputs' metadata.
c10::IValue zeros_like_value(const c10::IValue& value);

}  // namespace internal
}  // namespace fx
