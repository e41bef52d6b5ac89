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
// reader does.
//
// Dynamic dimensions: each symbol of range_constraints (Dim("batch",
// max=64)) is a dynamic dimension of the inputs that have it, guarded to
// its range (fx::GuardError on 65, naming the range); sizes the program
// computes (sym_size, +, -, *, //, %) are our sym_* nodes; its runtime
// assertions on sizes (aten._assert_scalar of a comparison, torch.sym_not)
// are fx_guard::check_size nodes, and one that a dimension is a multiple
// of k is also that dimension's multiple_of. Mutations: the buffers and
// inputs a program writes in place stay in place; those a functionalized
// program returns (buffer_mutation, user_input_mutation outputs) are
// copied into the buffer or input after the call (aten::copy_), as
// ep.module() does.
//
// Not read yet, each refused by name (fx::ExportedProgramError):
// higher-order operators (cond, while_loop, map, scan), sizes known only
// at run time (unbacked symbols: item(), nonzero), inputs whose sizes are
// functions of other dimensions, operators outside aten, joint graphs
// (loss and gradient outputs), effect tokens, custom objects, and weights
// stored pickled. A malformed archive, JSON or reference (a missing
// record, a node naming an unknown value, a weight whose bytes do not
// cover its sizes) is an fx::ExportedProgramError naming what is wrong,
// never a crash (//fuzz:exported_program_fuzzer runs in CI).
#pragma once

#include <istream>
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
// The same from the bytes left in `in` (an archive in memory, a network
// stream), as torch::jit::load takes one.
GraphModule load_exported_program(std::istream& in);

}  // namespace fx
