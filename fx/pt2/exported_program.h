// torch.export's programs in C++: a `.pt2` file (torch.export.save of an
// ExportedProgram) read into a GraphModule, with no Python.
//
//   # Python
//   ep = torch.export.export(model.eval(), (torch.randn(1, 3, 224, 224),))
//   torch.export.save(ep, "model.pt2")
//
//   // C++
//   fx::GraphModule gm = fx::load_exported_program("model.pt2");
//   at::Tensor y = gm(x).toTensor();          // as ep.module()(x)
//   fx::optimize_for_inference(*gm);           // then as any GraphModule
//
// The graph is the exported one: a placeholder per user input, a get_attr
// per parameter, buffer and tensor constant (named by its fully qualified
// name, "layer1.0.conv1.weight"), a call_function per node (its core ATen
// operator by overload: torch.ops.aten.conv2d.default is aten::conv2d,
// torch.ops.aten.add.Tensor aten::add.Tensor; a number given for a Tensor
// argument takes the operator's Scalar overload, aten::mul.Scalar), and
// the user outputs. Each value keeps the tensor metadata the program
// records (shape, dtype, strides), and each user input is guarded to the
// exported shape, dtype and device (fx::GuardError on another).
//
// The archive is read with LibTorch's own zip reader, the program's JSON
// with Debian's nlohmann-json. The schema's major version must be one this
// reader knows (8); fields it does not know are ignored, as upstream's
// reader does. Not read yet, each refused by name (fx::ExportedProgramError):
// dynamic dimensions (symbolic sizes), higher-order operators (cond,
// while_loop, map, scan), operators outside aten, buffers the program
// mutates (batch-norm statistics of a training-mode export), custom
// objects, and weights stored pickled. A malformed archive, JSON or
// reference (a missing record, a node naming an unknown value, a weight
// whose bytes do not cover its sizes) is an fx::ExportedProgramError naming
// what is wrong, never a crash.
#pragma once

#include <string>

#include "fx/ir/errors.h"
#include "fx/runtime/graph_module.h"

namespace fx {

// What load_exported_program throws for a file it cannot read.
class ExportedProgramError : public GraphError {
 public:
  using GraphError::GraphError;
};

// The schema major version this reader knows.
constexpr int kExportSchemaMajor = 8;

// Reads the ExportedProgram in the .pt2 file at `path` (torch.export.save)
// into a GraphModule, as above.
GraphModule load_exported_program(const std::string& path);

}  // namespace fx
