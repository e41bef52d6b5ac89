// Internal to the tracer: the graph rewrite that ends each trace.
#pragma once

#include "fx/ir/graph.h"
#include "fx/runtime/graph_module.h"

namespace fx {
namespace internal {

// Constants the trace made (torch::empty then copy_, torch::tensor({...})
// then mul_) that the graph writes into, directly or through a view, would
// be one tensor shared by every run and every thread: each run gets a copy
// instead, made right after the get_attr.
//   before: %c = get_attr[_tensor_constant0]; %w = aten::copy_(%c, %x)
//   after:  %c = get_attr[_tensor_constant0]; %c2 = aten::clone(%c);
//           %w = aten::copy_(%c2, %x)
// Throws TraceError for a written constant that shares memory with another
// constant.
void privatize_written_constants(Graph& graph, const Attributes& attributes);

}  // namespace internal
}  // namespace fx
