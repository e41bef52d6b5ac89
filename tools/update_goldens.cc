// Rewrites testdata/golden/passes/*.out from the .ir cases, on purpose:
//   bazel run //tools:update_goldens
// Prints which files changed; review them with git diff.
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include "fx/errors.h"
#include "testdata/pass_golden.h"

int main() {
  const char* workspace = std::getenv("BUILD_WORKSPACE_DIRECTORY");
  if (workspace == nullptr) {
    std::cerr << "update_goldens: run it with `bazel run //tools:update_goldens` "
                 "(it writes into the source tree)\n";
    return 2;
  }
  const std::string directory =
      std::string(workspace) + "/testdata/golden/passes";
  int changed = 0;
  for (const fx::golden::Case& c : fx::golden::list_cases(directory)) {
    std::string actual;
    try {
      actual = fx::golden::run_case(c);
    } catch (const fx::Error& e) {
      std::cerr << c.ir_path << ": " << e.what() << "\n";
      return 1;
    }
    std::ifstream in(c.out_path, std::ios::binary);
    std::ostringstream old;
    if (in) old << in.rdbuf();
    if (in && old.str() == actual) continue;
    std::ofstream out(c.out_path, std::ios::binary | std::ios::trunc);
    out << actual;
    if (!out) {
      std::cerr << "cannot write " << c.out_path << "\n";
      return 1;
    }
    std::cout << "updated " << c.out_path << "\n";
    ++changed;
  }
  std::cout << changed << " golden file(s) changed\n";
  return 0;
}
