// Pass tests as IR text, run through the fx tool (tools/ir_test.cc runs
// every case under testdata/ir/). A case is a .ir file: a graph as
// `print(graph)` writes it (fx/io/parser.h), a `# RUN:` line saying how to run
// fx on the file, and CHECK lines (testdata/filecheck.h) that what fx
// prints must match, as LLVM's lit and FileCheck run MLIR's tests:
//
//   # eliminate_common_subexpressions merges the second t(fc.weight) into
//   # the first.
//   # RUN: fx opt %s --passes=eliminate_common_subexpressions,eliminate_dead_code
//   graph():
//       %x = placeholder[target=x]
//       %fc_weight : f32[3, 3] = get_attr[target=fc.weight]
//       ...
//       return (mm, mm_1)
//
//   # CHECK:      %t : [#users=1] = call_function[target=aten::t]
//   # CHECK-NOT:  aten::t
//   # CHECK:      return (mm, mm)
//
// In the RUN line, `fx` is the fx binary and a word %s the case's path; it runs
// without a shell (arguments split at spaces). The command must exit 0;
// `# RUN: not fx ...` expects it to fail instead. The checks match what it
// printed on stdout, then on stderr. Writing CHECK: for the first line of
// the output and CHECK-NEXT: for every line after it, to the last, pins the
// whole output, as a golden file would.
#pragma once

#include <string>
#include <vector>

namespace testdata {

struct IrCaseResult {
  bool ok = false;
  // Empty if ok; else what failed, starting with the case's path and the
  // line at fault (the RUN line, or the CHECK line that did not match).
  std::string message;
  // Not run: it requires a feature the runner lacks (named in `message`).
  bool unsupported = false;
};

// Runs the case at `path` with the fx binary at `fx`.
IrCaseResult run_ir_case(const std::string& fx, const std::string& path,
                         const std::vector<std::string>& features = {});

// The .ir files under `directory` and its subdirectories, sorted.
std::vector<std::string> list_ir_cases(const std::string& directory);

}  // namespace testdata
