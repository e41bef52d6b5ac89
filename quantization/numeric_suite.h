// Where quantization loses accuracy (torch.ao.ns's idea): each quantized
// node's output against the float value it stands for, as a
// signal-to-quantization-noise ratio, to find the layer that breaks a
// model.
//
//   auto rows = fx::quantization_report(prepared, int8, {{x0}, {x1}});
//   std::cout << fx::format_quantization_report(rows);
//
//   node                 operator                    SQNR (dB)
//   conv2d               quantized::conv2d_relu.new  38.1
//   add                  quantized::add_relu         31.7
//   ...
#pragma once

#include <string>
#include <vector>

#include <ATen/core/ivalue.h>

#include "fx/runtime/graph_module.h"

namespace fx {

struct NodeQuantizationError {
  std::string node;       // the prepared module's node
  std::string op;         // the quantized operator standing for it
  double sqnr_db = 0;     // 20 log10(|float| / |float - dequantized|)
};

// For each node of `quantized` (convert_fx or quantize_dynamic_fx of
// `prepared`, or of the float module) that computes a node of `prepared`
// (fx::kQuantizedFrom), its SQNR over all `inputs` (one list of forward
// inputs per run), in graph order. `prepared` is not modified: its
// observers do not run.
std::vector<NodeQuantizationError> quantization_report(
    const GraphModule& prepared, const GraphModule& quantized,
    const std::vector<std::vector<c10::IValue>>& inputs);

// A table, one row per node, and the lowest SQNR named.
std::string format_quantization_report(
    const std::vector<NodeQuantizationError>& rows);

// 20 log10(|reference| / |reference - other|) over all elements (inf when
// equal).
double sqnr_db(const at::Tensor& reference, const at::Tensor& other);

}  // namespace fx
