// A GraphModule as a C++ class: a header and a source that define its
// forward over the typed aten entry points, for a build to compile (the
// build-time step in codegen/defs.bzl writes them with codegen/generator.h).
//
//   graph():                                  class Lenet {
//       %x : ... = placeholder[target=x]       public:
//       %conv1_weight : ... = get_attr[...]     explicit Lenet(const fx::TensorMap& tensors, ...);
//       ...                                     at::Tensor forward(at::Tensor x);
//       return addmm_2                          void run_init();
//                                              private:
//                                               at::Tensor conv1_weight_; ...
//                                             };
//
// - Tensors are bound by qualified name when the object is built, from the
//   traced model (fx::named_tensors(model)) or a weights file
//   (fx::load_tensors), each checked against the dtype and shape the code
//   was generated for. Constants the trace made (_tensor_constant0) are
//   embedded in the source.
// - Init steps (constant folding, conv/bn folding) become code that
//   computes their tensors from the bound ones when the object is built
//   (and again on run_init(), after new weights are loaded), so the code
//   can be generated before the weights exist.
// - The input guards are checked at the top of forward (fx::GuardError),
//   leaf modules are fx::LeafModule members bound by path, registered
//   functions are looked up when the object is built.
#pragma once

#include <string>
#include <vector>

#include "fx/runtime/graph_module.h"

namespace fx {
namespace codegen {

struct ModuleOptions {
  std::string class_name = "GeneratedModule";
  // "" for the global namespace; "a::b" for nested ones.
  std::string namespace_name;
  // How the source includes the header: "models/resnet18_folded.h".
  std::string header_include = "generated_module.h";
  // forward and each init step continue in a new private member function
  // after about this many nodes (CodegenOptions::max_nodes_per_function),
  // so that compilers cope with graphs of 100k nodes; 0 never splits.
  size_t max_nodes_per_function = 2000;
};

struct GeneratedModule {
  std::string header;
  std::string source;
  // The qualified names of the tensors the constructor binds.
  std::vector<std::string> bound_tensors;
};

// Throws fx::GraphError for what C++ cannot express (see emit_forward).
GeneratedModule emit_module(const GraphModuleImpl& module,
                            const ModuleOptions& options);

}  // namespace codegen
}  // namespace fx
