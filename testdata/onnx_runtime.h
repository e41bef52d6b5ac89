// For the ONNX export's tests: runs an exported model under ONNX Runtime
// (testdata/ort_run.js, through Node.js; tools/setup.sh installs
// onnxruntime-node) and compares its outputs with the GraphModule's.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <ATen/core/ivalue.h>

#include "fx/runtime/graph_module.h"

namespace onnx_testing {

// Runs a shell command (shown if the test fails), returning its status.
int run_command(const std::string& command);

// A directory for the test's files (under TEST_TMPDIR).
std::filesystem::path scratch();

// The model's outputs under ONNX Runtime, by output name (Catch2 REQUIREs
// that it ran).
std::map<std::string, at::Tensor> run_ort(const std::filesystem::path& model,
                                          const std::vector<at::Tensor>& inputs);

// A GraphModule's outputs under the names fx::to_onnx gives them (tensors,
// tuples, lists and dicts of them).
void flatten_outputs(const c10::IValue& value, const std::string& name,
                     std::map<std::string, at::Tensor>* out);

// Checks (Catch2) that ONNX Runtime's outputs for `file` on `inputs` are
// the GraphModule's within `tolerance` of each output's largest magnitude
// (at least 1); boolean outputs equal.
void check_against_ort(fx::GraphModule gm, const std::filesystem::path& file,
                       const std::vector<c10::IValue>& inputs,
                       double tolerance = 1e-5);

}  // namespace onnx_testing
