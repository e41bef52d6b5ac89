// The model zoo: LibTorch models written as LibTorch users write them, each
// with deterministic weights and example inputs, for the tests of the tracer,
// the interpreter, the code generator and the passes.
#pragma once

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "fx/trace/tracer.h"

namespace models {

struct ZooModel {
  std::string name;                           // e.g. "resnet18"
  std::shared_ptr<torch::nn::Module> module;  // the root module, in eval() mode
                                              // unless noted
  // Calls the module's typed forward on boxed inputs and boxes the result
  // (Tensor -> IValue, std::tuple -> IValue tuple, nested tuples nested).
  std::function<c10::IValue(std::vector<c10::IValue>)> forward;
  std::vector<c10::IValue> example_inputs;  // deterministic (seeded) inputs
  // Submodules to trace as leaf modules (fx::TraceOptions::leaf_modules).
  std::set<std::string> leaf_modules;
};

// Names of all zoo models, in a fixed order.
std::vector<std::string> zoo_model_names();

// Builds a model with deterministic weights (seeded inside: torch::manual_seed)
// and non-trivial BatchNorm scales, shifts and running statistics (the
// statistics from a few training-mode forwards on random inputs), so conv/bn
// folding tests are meaningful. Throws
// std::invalid_argument for unknown names.
ZooModel make_zoo_model(const std::string& name);

// The models fx::symbolic_trace can trace: all but "data_dependent".
std::vector<std::string> traceable_zoo_model_names();

// Traces `model` on its example inputs, keeping its leaf modules
// (fx::TraceOptions::leaf_modules).
fx::GraphModule trace_zoo_model(const ZooModel& model);

}  // namespace models
