// The build-time generator: traces a model, runs passes and writes the
// class codegen/module_codegen.h emits. codegen/defs.bzl's fx_cc_library
// builds a small binary around a user's model factory that calls
// generator_main, and runs it during the build:
//
//   // my_model.cc, in a cc_library the macro depends on
//   fx::codegen::Model my_model() { return fx::codegen::model_of(MyNet()); }
//
//   generator flags:
//     --input=1x3x224x224[:float32]   one per forward input (zeros: only
//                                     shapes and dtypes are read;
//                                     fx/io/input_spec.h)
//     --passes=fuse_conv_bn,...       passes/registry.h names, in order
//     --class_name=MyNetFolded --namespace=models
//     --header_include=models/my_net_folded.h
//     --header=OUT.h --source=OUT.cc [--weights=OUT.weights] [--train]
//     --max_function_nodes=2000       split longer functions (0: never)
//     --quantize=onednn               after the passes, int8 quantization
//                                     for this engine (prepare_fx, the
//                                     factory's calibration batches,
//                                     convert_fx: quantization/quantize_fx.h)
#pragma once

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <ATen/core/ivalue.h>
#include <torch/nn/module.h>

#include "fx/runtime/leaf_module.h"

namespace fx {
namespace codegen {

// What a model factory returns: the module and its boxed forward.
struct Model {
  std::shared_ptr<torch::nn::Module> module;
  BoxedForward forward;
  // Submodules to keep as call_module nodes (fx::TraceOptions).
  std::set<std::string> leaf_modules;
  // Batches of forward inputs to calibrate on when fx_cc_library quantizes
  // (quantize = "onednn"): one list of inputs per batch.
  std::function<std::vector<std::vector<c10::IValue>>()> calibration;
};

// A Model from a module (TORCH_MODULE holder or std::shared_ptr<Impl>)
// whose forward is not overloaded.
template <typename ModuleType>
Model model_of(const ModuleType& module) {
  auto ptr = detail::module_ptr(module);
  return Model{ptr, box_forward(ptr, ptr->name() + ".forward"), {}, {}};
}

// Runs the generator with the flags above; returns the process exit code
// and prints errors to stderr.
int generator_main(int argc, char** argv,
                   const std::function<Model()>& factory);

}  // namespace codegen
}  // namespace fx
