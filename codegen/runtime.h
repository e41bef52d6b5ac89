// What generated C++ (codegen/module_codegen.h) calls: binding tensors and
// leaf modules by qualified name, input guards (fx/runtime/guards.h) and the
// registry of opaque functions (fx/ir/function.h).
//
//   ResNet18Folded net(fx::named_tensors(*model));   // from the model
//   ResNet18Folded net(fx::load_tensors("resnet18.weights"));  // from a file
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include "fx/ir/control_flow.h"
#include "fx/ir/function.h"
#include "fx/runtime/guards.h"
#include "fx/runtime/leaf_module.h"

namespace fx {

// Tensors by qualified name ("layer1.0.conv1.weight").
using TensorMap = std::map<std::string, at::Tensor>;
using LeafModuleMap = std::map<std::string, LeafModule>;

// A module's named_parameters() and named_buffers(), recursively.
TensorMap named_tensors(const torch::nn::Module& module);

// The values a generated forward split into several functions
// (ModuleOptions::max_nodes_per_function) hands from one to the next.
struct ForwardFrame {
  std::vector<at::Tensor> tensors;
  std::vector<c10::IValue> values;
};

// A list of script objects of one class (aten::quantized_lstm's cell
// parameters), typed as the first one's class.
c10::IValue object_list(std::vector<c10::IValue> objects);

// Writes / reads a TensorMap as one file (torch::pickle_save of a
// dict from name to tensor, readable in Python with torch.load). save
// replaces an existing file only once the new one is complete.
void save_tensors(const TensorMap& tensors, const std::string& path);
TensorMap load_tensors(const std::string& path);

// One row of a generated class's table of the tensors it binds: the
// qualified path, and the dtype and sizes (`dim` values from `sizes`) the
// code was generated for. Converts to its path.
struct BoundTensor {
  const char* path;
  c10::ScalarType dtype;
  const int64_t* sizes;
  size_t dim;
  operator std::string() const { return path; }
};

// The tensor `spec` names in `tensors`, checked as bind_tensor below does.
at::Tensor bind_tensor(const TensorMap& tensors, const BoundTensor& spec,
                       const char* who);

// The tensor at `path` in `tensors`, checked against the dtype and sizes the
// code was generated for. Throws fx::GraphError naming `who` (the generated
// class), the path, and what was found instead.
at::Tensor bind_tensor(const TensorMap& tensors, const std::string& path,
                       c10::ScalarType dtype, std::vector<int64_t> sizes,
                       const char* who);
// The leaf module at `path`, or an fx::GraphError naming it.
LeafModule bind_leaf_module(const LeafModuleMap& modules,
                            const std::string& path, const char* who);
// An opaque function registered with fx::wrap, or an fx::GraphError.
const Function& bind_function(const std::string& name, const char* who);

// A tensor from bytes embedded in generated source (a constant the traced
// code made, such as _tensor_constant0).
at::Tensor embedded_tensor(const unsigned char* data, size_t size,
                           c10::ScalarType dtype, std::vector<int64_t> sizes);

}  // namespace fx
