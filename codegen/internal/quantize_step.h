// What the generator's --quantize=ENGINE runs after the passes. It lives in
// //codegen:generator_quantize (quantize_step.cc), which registers it when
// linked; fx_cc_library links it only when `quantize` is set, so that a
// generator that does not quantize builds without quantization/.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <ATen/core/ivalue.h>

#include "codegen/generator.h"
#include "fx/runtime/graph_module.h"

namespace fx {
namespace codegen {
namespace internal {

// Quantizes `module` (traced on `examples`, its passes run) for `engine`,
// calibrating on `model.calibration`.
using QuantizeStep = std::function<GraphModule(
    const GraphModule& module, const std::string& engine,
    const std::vector<c10::IValue>& examples, const Model& model)>;

// Sets the step (once, from a static initializer); returns true.
bool set_quantize_step(QuantizeStep step);

// The step, or an empty function when //codegen:generator_quantize is not
// linked.
const QuantizeStep& quantize_step();

}  // namespace internal
}  // namespace codegen
}  // namespace fx
