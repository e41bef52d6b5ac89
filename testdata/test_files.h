// Where a test keeps the files it writes: its own temporary directory
// (Bazel's TEST_TMPDIR; /tmp when a test binary is run by hand).
//
//   const std::string csv = testdata::test_file("digits.csv");
//   static const std::string dir = testdata::torchscript_models(
//       "transformer_models", {"fused_encoder_traced", "lstm_lm_scripted"});
//   torch::jit::load(dir + "/lstm_lm_scripted.pt");
#pragma once

#include <string>
#include <vector>

namespace testdata {

// The test's temporary directory.
std::string test_tmpdir();

// test_tmpdir() + "/" + name.
std::string test_file(const std::string& name);

// Runs testdata/torchscript_models.py (the test lists it in its data),
// which writes `models` (its names; every model it knows if none) as
// TorchScript files NAME.pt into test_file(dir); returns that directory.
// Fails the test (Catch2's REQUIRE) if the script fails.
std::string torchscript_models(const std::string& dir,
                               const std::vector<std::string>& models = {});

// Likewise testdata/attention_models.py, run with the Python whose torch
// matches the LibTorch of the build (FX_LIBTORCH_PYTHON: torch 2.13 by
// default): TorchScript files written by that torch.
std::string attention_models(const std::string& dir,
                             const std::vector<std::string>& models = {});

// Likewise testdata/exported_programs.py, run with a Python that has
// torch.export (FX_EXPORT_PYTHON: tools/setup.sh's torch 2.13, whichever
// LibTorch the build uses): NAME.pt2 files, and NAME_io.pt beside each.
std::string exported_programs(const std::string& dir,
                              const std::vector<std::string>& models = {});

}  // namespace testdata
