// The benchmarks' verdict (print_targets): which targets gate a full run and
// a --quick one, and that a target that could not be measured is missed
// where it is gated.
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "third_party/catch.h"
#include "tools/benchmark_support.h"

namespace {

using fx::benchmark::TargetCheck;

struct Verdict {
  int status;
  std::string printed;
};

Verdict verdict(const std::vector<TargetCheck>& checks, bool quick) {
  std::ostringstream out;
  std::streambuf* saved = std::cout.rdbuf(out.rdbuf());
  const int status = fx::benchmark::print_targets(checks, quick);
  std::cout.rdbuf(saved);
  return {status, out.str()};
}

const TargetCheck kMet{"met", "1.0x", true};
const TargetCheck kMissed{"missed", "2.0x", false};
const TargetCheck kUnmeasuredTiming{"compared with Python", "Python n/a",
                                    std::nullopt};
const TargetCheck kUnmeasuredAccuracy{"SQNR", "n/a", std::nullopt,
                                      /*timing=*/false};

}  // namespace

TEST_CASE("a full run passes only when every target is met") {
  Verdict v = verdict({kMet}, /*quick=*/false);
  CHECK(v.status == 0);
  CHECK_THAT(v.printed, Catch::Contains("PASS") &&
                            Catch::Contains("every gated target met"));
  v = verdict({kMet, kMissed}, false);
  CHECK(v.status == 1);
  CHECK_THAT(v.printed, Catch::Contains("1 gated target(s) missed"));
}

TEST_CASE("a full run misses a target it could not measure") {
  Verdict v = verdict({kMet, kUnmeasuredTiming}, /*quick=*/false);
  CHECK(v.status == 1);
  CHECK_THAT(v.printed, Catch::Contains("MISS (not measured)") &&
                            Catch::Contains("1 gated target(s) missed"));
}

TEST_CASE("a --quick run prints timing targets but does not gate them") {
  Verdict v = verdict({kMet, kMissed, kUnmeasuredTiming}, /*quick=*/true);
  CHECK(v.status == 0);
  CHECK_THAT(v.printed, Catch::Contains("MISS (not gated: --quick)") &&
                            Catch::Contains("n/a (not gated: --quick)"));
}

TEST_CASE("a --quick run gates accuracy targets, measured or not") {
  TargetCheck missed_accuracy = kMissed;
  missed_accuracy.timing = false;
  CHECK(verdict({missed_accuracy}, /*quick=*/true).status == 1);
  Verdict v = verdict({kUnmeasuredAccuracy}, /*quick=*/true);
  CHECK(v.status == 1);
  CHECK_THAT(v.printed, Catch::Contains("MISS (not measured)"));
}
