#include "tools/cli/command.h"

#include <limits>

#include "third_party/catch.h"

namespace {

using cli::Flags;
using cli::UsageError;

struct Example {
  bool before = false;
  int64_t stages = 2;
  double cache_mb = std::numeric_limits<double>::infinity();
  std::string passes;
  std::vector<std::string> input;
  Flags flags;
  Example() {
    flags.add("before", &before, "print before");
    flags.add("stages", &stages, "how many stages");
    flags.add("cache_mb", &cache_mb, "the cache");
    flags.add("passes", &passes, "the passes");
    flags.add("input", &input, "the inputs");
  }
};

TEST_CASE("flags are set from their forms; the rest are the arguments") {
  Example e;
  std::vector<std::string> positional = e.flags.parse(
      {"resnet18", "--before", "--stages=3", "--cache_mb", "2.5",
       "--passes=fuse_conv_bn,eliminate_dead_code", "--input=1x3:int64,4", "--",
       "--not-a-flag"});
  CHECK(positional == std::vector<std::string>{"resnet18", "--not-a-flag"});
  CHECK(e.before);
  CHECK(e.stages == 3);
  CHECK(e.cache_mb == 2.5);
  CHECK(e.passes == "fuse_conv_bn,eliminate_dead_code");
  CHECK(e.input == std::vector<std::string>{"1x3:int64", "4"});

  Example off;
  off.before = true;
  CHECK(off.flags.parse({"--before=false", "-"}) ==
        std::vector<std::string>{"-"});
  CHECK_FALSE(off.before);
}

TEST_CASE("a flag the command does not take is named with those it takes") {
  Example e;
  CHECK_THROWS_AS(e.flags.parse({"--out=/tmp"}), UsageError);
  CHECK_THROWS_WITH(
      e.flags.parse({"--out=/tmp"}),
      "it takes no flag --out; its flags are --before, --stages, --cache_mb, "
      "--passes, --input");
  Flags none;
  CHECK_THROWS_WITH(none.parse({"--passes=fuse_conv_bn"}),
                    "it takes no flags, not --passes");
}

TEST_CASE("bad values, missing values and repeated flags are usage errors") {
  Example e;
  CHECK_THROWS_WITH(e.flags.parse({"--stages=two"}),
                    Catch::StartsWith("--stages=two: "));
  CHECK_THROWS_WITH(e.flags.parse({"--before=maybe"}),
                    Catch::StartsWith("--before=maybe: "));
  CHECK_THROWS_WITH(e.flags.parse({"--stages"}),
                    "--stages needs a value (--stages=2)");
  CHECK_THROWS_WITH(e.flags.parse({"--stages=2", "--stages=3"}),
                    "--stages is given twice");
}

TEST_CASE("help lists each flag with its default") {
  Example e;
  const std::string help = e.flags.help();
  CHECK(help.find("  --stages=2\n      how many stages\n") != std::string::npos);
  CHECK(help.find("  --cache_mb=inf\n") != std::string::npos);
  CHECK(help.find("  --passes=\n      the passes\n") != std::string::npos);
}

class Echo : public cli::Command {
 public:
  Echo() : Command("echo", {"A", "B"}, "print A and B", "More words.") {
    flags().add("twice", &twice_, "print them twice");
  }
  std::vector<std::string> got;
  bool twice_ = false;

 private:
  int run(const std::vector<std::string>& args) override {
    got = args;
    return twice_ ? 7 : 0;
  }
};

TEST_CASE("a command checks its arguments and runs on them") {
  Echo echo;
  CHECK(echo.synopsis() == "fx echo A B [flags]");
  CHECK(echo.main({"x", "--twice", "y"}) == 7);
  CHECK(echo.got == std::vector<std::string>{"x", "y"});
  CHECK_THROWS_WITH(Echo().main({"x"}), "give A B: fx echo A B [flags]");
  CHECK_THROWS_WITH(Echo().main({"x", "y", "z"}),
                    "it takes A B, and is given 'x y z'");
  CHECK(echo.help() ==
        "fx echo A B [flags]\n\nprint A and B\n\nMore words.\n\nflags:\n"
        "  --twice=false\n      print them twice\n");
}

}  // namespace
