// Every pass test written as IR (testdata/ir/**/*.ir, see
// testdata/ir_cases.h), run through the fx binary; and the runner itself,
// which must fail a bad case naming its file and line.
#include <filesystem>
#include <fstream>
#include <future>
#include <string>
#include <vector>

#include "lowering/onednn_ops.h"
#include "testdata/ir_cases.h"
#include "third_party/catch.h"

namespace {

// The fx binary, in the test's runfiles.
constexpr char kFx[] = "tools/fx";

TEST_CASE("every .ir case passes") {
  const std::vector<std::string> cases = testdata::list_ir_cases("testdata/ir");
  // A glob that matched nothing must not pass as "no failure".
  REQUIRE(cases.size() >= 10);
  // Two at a time: most of a case's time is the binary starting.
  constexpr size_t kAtOnce = 2;
  std::vector<std::string> features;
  if (fx::onednn::int8_supported()) features.push_back("vnni");
  std::vector<std::future<testdata::IrCaseResult>> results(cases.size());
  size_t started = 0, unsupported = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    for (; started < cases.size() && started < i + kAtOnce; ++started) {
      results[started] =
          std::async(std::launch::async, [&cases, &features, started] {
            return testdata::run_ir_case(kFx, cases[started], features);
          });
    }
    const testdata::IrCaseResult result = results[i].get();
    INFO(result.message);
    CHECK(result.ok);
    if (result.unsupported) {
      WARN(result.message);
      ++unsupported;
    }
  }
  // Most cases run on every CPU.
  CHECK(unsupported * 4 < cases.size());
}

// Writes `text` as NAME.ir in the test's temporary directory.
std::string write_case(const std::string& name, const std::string& text) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / "ir_runner_test";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / (name + ".ir")).string();
  std::ofstream(path) << text;
  return path;
}

constexpr char kGraph[] = R"(graph():
    %x = placeholder[target=x]
    %relu = call_function[target=aten::relu](args = (%x,), kwargs = {})
    %neg = call_function[target=aten::neg](args = (%x,), kwargs = {})
    return neg
)";

TEST_CASE("the runner passes good cases and fails bad ones, naming where") {
  {
    const std::string path = write_case(
        "good", std::string("# RUN: fx opt %s --passes=eliminate_dead_code\n") +
                    kGraph + "# CHECK: %x : [#users=1]\n# CHECK-NOT: %relu\n");
    const testdata::IrCaseResult result = testdata::run_ir_case(kFx, path);
    INFO(result.message);
    CHECK(result.ok);
  }
  {
    const std::string path = write_case(
        "expected_failure",
        std::string("# RUN: not fx opt %s --passes=no_such_pass\n") + kGraph +
            "# CHECK: no pass named 'no_such_pass'\n");
    const testdata::IrCaseResult result = testdata::run_ir_case(kFx, path);
    INFO(result.message);
    CHECK(result.ok);
  }
  {
    // REQUIRES: not run without the feature, run with it.
    const std::string path = write_case(
        "requires", std::string("# REQUIRES: some_feature\n# RUN: fx opt %s "
                                "--passes=eliminate_dead_code\n") +
                        kGraph + "# CHECK: no such output\n");
    const testdata::IrCaseResult without = testdata::run_ir_case(kFx, path);
    CHECK(without.ok);
    CHECK(without.unsupported);
    CHECK(without.message.find("requires some_feature") != std::string::npos);
    const testdata::IrCaseResult with =
        testdata::run_ir_case(kFx, path, {"some_feature"});
    CHECK_FALSE(with.ok);
    CHECK_FALSE(with.unsupported);
  }
  struct Bad {
    const char* name;
    std::string text;
    std::vector<std::string> message;  // what the failure must say
  };
  const std::vector<Bad> bad = {
      {"unknown_pass",
       std::string("# a comment\n# RUN: fx opt %s --passes=no_such_pass\n") +
           kGraph + "# CHECK: graph():\n",
       {"unknown_pass.ir:2: `fx opt", "exited with status 2",
        "no pass named 'no_such_pass'"}},
      {"malformed",
       "# RUN: fx opt %s\ngraph():\n    %x = placeholder[target=x]\n"
       "    return y\n# CHECK: graph():\n",
       {"malformed.ir:1: `fx opt", "exited with status 1",
        "malformed.ir: parse_graph: line 4"}},
      {"no_match",
       std::string("# RUN: fx opt %s --passes=eliminate_dead_code\n") + kGraph +
           "# CHECK: %x\n# CHECK-NEXT: %relu\n",
       {"no_match.ir: checks line 8: CHECK-NEXT: %relu",
        "not found on the next line"}},
      {"found_not",
       std::string("# RUN: fx opt %s\n") + kGraph + "# CHECK-NOT: %relu\n",
       {"found_not.ir: checks line 7: CHECK-NOT: %relu",
        "found where it must not be"}},
      {"no_checks", std::string("# RUN: fx opt %s\n") + kGraph,
       {"no_checks.ir: no CHECK directive"}},
      {"no_run", std::string(kGraph) + "# CHECK: graph():\n",
       {"no_run.ir: no RUN line"}},
      {"two_runs",
       std::string("# RUN: fx opt %s\n") +
           "# RUN: fx opt %s --passes=fuse_conv_bn\n" + kGraph +
           "# CHECK: graph():\n",
       {"two_runs.ir:2: a second RUN line"}},
      {"not_fx", std::string("# RUN: cat %s\n") + kGraph + "# CHECK: graph\n",
       {"not_fx.ir:1: the RUN line runs fx"}},
      {"unexpected_success",
       std::string("# RUN: not fx opt %s\n") + kGraph + "# CHECK: graph():\n",
       {"unexpected_success.ir:1: `fx opt",
        "succeeded, but the RUN line expects it to fail"}},
  };
  for (const Bad& b : bad) {
    const std::string path = write_case(b.name, b.text);
    const testdata::IrCaseResult result = testdata::run_ir_case(kFx, path);
    INFO(b.name << ": " << result.message);
    CHECK_FALSE(result.ok);
    CHECK(result.message.rfind(path, 0) == 0);
    for (const std::string& part : b.message) {
      CHECK(result.message.find(part) != std::string::npos);
    }
  }
}

}  // namespace
