// The generator's --quantize step (codegen/internal/quantize_step.h):
// prepare_fx with the engine's default qconfig mapping, the model's
// calibration batches, convert_fx.
#include <string>
#include <vector>

#include <ATen/core/grad_mode.h>
#include <ATen/core/ivalue.h>

#include "absl/strings/str_cat.h"
#include "codegen/internal/quantize_step.h"
#include "fx/ir/errors.h"
#include "quantization/quantize_fx.h"

namespace fx {
namespace codegen {
namespace {

GraphModule quantize(const GraphModule& module, const std::string& engine,
                     const std::vector<c10::IValue>& examples,
                     const Model& model) {
  if (!model.calibration) {
    throw GraphError(absl::StrCat(
        "--quantize=", engine,
        " needs calibration batches: set "
        "fx::codegen::Model::calibration in the model factory"));
  }
  set_quantized_engine(engine);
  GraphModule prepared =
      prepare_fx(module, get_default_qconfig_mapping(engine), examples);
  at::NoGradGuard no_grad;
  for (const std::vector<c10::IValue>& batch : model.calibration()) {
    prepared->forward(batch);
  }
  return convert_fx(prepared);
}

const bool registered = internal::set_quantize_step(&quantize);

}  // namespace
}  // namespace codegen
}  // namespace fx
