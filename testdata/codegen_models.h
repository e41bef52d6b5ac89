// The zoo's models as fx::codegen::Model factories, for fx_cc_library
// (testdata/BUILD.bazel), and LeNet's calibration batches.
#pragma once

#include <vector>

#include "codegen/generator.h"

namespace testdata {

fx::codegen::Model resnet18_model();
fx::codegen::Model resnet50_model();
fx::codegen::Model mobilenet_v2_model();
fx::codegen::Model lenet_model();
// Squeeze-excitation, a dense block and an LSTM (in eval mode): lowered,
// operators that take lists of tensors.
fx::codegen::Model dense_excite_model();
// A convolution with two heads, returned as a dict {'out', 'aux'}.
fx::codegen::Model two_heads_model();
// A cond and a while_loop (with a cond in its body): control flow.
fx::codegen::Model control_flow_model();
// Boxes selected by score, nonzero: sizes that depend on data.
fx::codegen::Model selects_boxes_model();
// fx::scan and fx::map (an Elman cell over time, a head on each step).
fx::codegen::Model scan_model();
// LeNet with lenet_calibration() as its calibration batches.
fx::codegen::Model lenet_calibrated_model();
// Four seeded batches of 2x1x32x32 normal noise.
std::vector<std::vector<c10::IValue>> lenet_calibration();

}  // namespace testdata
