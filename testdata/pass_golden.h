// Pass tests as IR text: a case is a file testdata/golden/passes/NAME.ir
// holding the graph in (the textual IR, fx/parser.h) after a header of
// comment lines, one of which names the passes to run:
//
//   # cse merges the second weight.t() into the first
//   # passes: cse, eliminate_dead_code
//   graph():
//       %x : f32[2, 3] = placeholder[target=x]
//       ...
//
// and NAME.out the printed graph out (and each init step's graph, for the
// passes that make them). Tensors for get_attr targets are made from their
// types (seeded; `running_var` positive). //passes:golden_test compares;
// `bazel run //tools:update_goldens` rewrites the .out files, on purpose,
// never the test.
#pragma once

#include <string>
#include <vector>

namespace fx {
namespace golden {

struct Case {
  std::string name;      // "cse_merges_weight_t"
  std::string ir_path;   // ".../NAME.ir"
  std::string out_path;  // ".../NAME.out"
};

// The cases under `directory` (NAME.ir files), sorted by name.
std::vector<Case> list_cases(const std::string& directory);

// Parses the case's input, runs its passes through fx::PassManager and
// returns the printed result. Throws fx::Error for a malformed case.
std::string run_case(const Case& c);

}  // namespace golden
}  // namespace fx
