// The pass tests written as IR text: every testdata/golden/passes/NAME.ir,
// run and compared with NAME.out (see testdata/pass_golden.h). On a difference the
// message shows both; `bazel run //tools:update_goldens` rewrites the .out
// files when the change is meant.
#include "testdata/pass_golden.h"

#include <fstream>
#include <sstream>

#include "third_party/catch.h"

TEST_CASE("every golden pass case prints its expected graph") {
  const std::vector<fx::golden::Case> cases =
      fx::golden::list_cases("testdata/golden/passes");
  // A glob that matched nothing must not pass as "no difference".
  REQUIRE(cases.size() >= 8);
  for (const fx::golden::Case& c : cases) {
    INFO(c.ir_path);
    std::ifstream in(c.out_path, std::ios::binary);
    INFO("missing " << c.out_path
                    << ": run `bazel run //tools:update_goldens`");
    REQUIRE(in.good());
    std::ostringstream expected;
    expected << in.rdbuf();
    const std::string actual = fx::golden::run_case(c);
    INFO("if the new output is right: bazel run //tools:update_goldens");
    CHECK(actual == expected.str());
  }
}
