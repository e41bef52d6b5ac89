// Operators whose output's size depends on their inputs' values, not only
// on their shapes: aten::nonzero's rows, the elements masked_select and a
// boolean mask (`x.index({mask})`) keep, the values unique finds. Declared
// once here and read by every layer that needs their shapes without data:
// the tracer gives such a size a symbol of its own (u0, u1, ...: torch.export's
// unbacked symbols), ShapeProp runs a graph at other values of it.
//
//   aten::nonzero(x)              [u, x.dim()]           u <= x.numel()
//   aten::masked_select(x, mask)  [u]                    u <= numel of both broadcast
//   aten::index(x, [mask])        x's sizes, the dimensions the mask covers
//                                 replaced by u          u <= mask.numel()
//   aten::_unique2, aten::_unique, aten::unique_consecutive (no dim)
//                                 values [u], counts [u]; inverse as x
//                                                        u <= x.numel()
//   aten::where(mask), aten::nonzero_numpy(mask)
//                                 a list of mask.dim() tensors [u]
//                                                        u <= mask.numel()
//   torchvision::nms(boxes, scores, iou)
//                                 [u] (the boxes kept)   u <= boxes.size(0)
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>

#include "fx/ir/meta.h"

namespace fx {

struct DataDependentSize {
  // The largest the size can be (the number of elements it selects from).
  int64_t max = 0;
  // Where the size is: dimension `dim` of output `output`.
  size_t output = 0;
  int64_t dim = 0;
  // Each output's dtype, and its sizes when the size is `size`.
  std::vector<c10::ScalarType> dtypes;
  std::vector<std::vector<int64_t>> sizes_at(int64_t size) const;

  // Each output's strides at that size: contiguous, but output 0's
  // column-major (strides 1, u) when `transposed` (nonzero's, as the CPU
  // kernel lays it out).
  std::vector<std::vector<int64_t>> strides_at(int64_t size) const;

  // Each output's sizes, -1 where the data-dependent size goes (unique's
  // values and counts both have it).
  std::vector<std::vector<int64_t>> shapes;
  bool transposed = false;
  // The operator returns one list of these tensors (torch.where(mask)).
  bool list = false;
};

// What `schema` called with `args` (its full boxed arguments; tensors are
// read for their metadata only) returns, when it is one of the operators
// above; nothing for any other. Throws fx::GraphError for one of them
// called in a form whose size this does not follow (an index mixing a mask
// with integer indices, unique along a dimension), naming it.
std::optional<DataDependentSize> data_dependent_size(
    const c10::FunctionSchema& schema, const std::vector<c10::IValue>& args);

// The symbol of the k-th data-dependent size of a program (u<k> for the
// k-th such operator to run, from 0), or the next u<n> that no symbol of
// `taken` has: the tracer and ShapeProp name them alike.
std::string data_dependent_symbol(size_t k,
                                  const std::vector<DynamicDim>& taken);

class Node;
// Whether node `n` calls an operator whose output's size depends on data:
// one of the above, or one ATen tags so (aten::index only with a boolean
// index).
bool returns_data_dependent_size(const Node& n);

}  // namespace fx
