// What every transformed graph must keep (Catch2 checks): saved and loaded
// (fx::save, fx::load) it prints the same graph and computes the same
// outputs, bitwise; exported to TorchScript (fx::to_torchscript) it
// computes the same outputs, bitwise.
//
//   fx::optimize_for_inference(*gm);
//   testdata::check_round_trips(gm, {x});
#pragma once

#include <vector>

#include <ATen/core/ivalue.h>

#include "fx/runtime/graph_module.h"

namespace testdata {

void check_round_trips(fx::GraphModule gm,
                       const std::vector<c10::IValue>& inputs);

}  // namespace testdata
