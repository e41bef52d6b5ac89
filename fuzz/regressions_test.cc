// The fuzz targets (fuzz/targets.h) over every input a fuzzer ever found a
// problem with (fuzz/regressions/TARGET/*, each named after what it found)
// and over the zoo's graphs and saved files, which are the fuzzers' seeds.
// A target aborts on a finding, which fails this test.
#include <filesystem>
#include <string>
#include <vector>

#include "fuzz/targets.h"
#include "fx/io/internal/files.h"
#include "fx/io/serialization.h"
#include "fx/runtime/graph_module.h"
#include "models/zoo.h"
#include "testdata/test_files.h"
#include "third_party/catch.h"

namespace {

std::vector<uint8_t> read_bytes(const std::filesystem::path& path) {
  const std::string text = fx::read_file(path.string(), "regressions_test");
  return std::vector<uint8_t>(text.data(), text.data() + text.size());
}

void run(fx::fuzz::Target target, const std::string& text) {
  target(reinterpret_cast<const uint8_t*>(text.data()), text.size());
}

}  // namespace

TEST_CASE("every saved fuzz finding is refused or accepted soundly") {
  const std::filesystem::path root = "fuzz/regressions";
  REQUIRE(std::filesystem::is_directory(root));
  size_t inputs = 0;
  for (const std::string& name : fx::fuzz::target_names()) {
    const std::filesystem::path dir = root / name;
    if (!std::filesystem::is_directory(dir)) continue;
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
      INFO(entry.path().string());
      std::vector<uint8_t> bytes = read_bytes(entry.path());
      fx::fuzz::target_named(name)(bytes.data(), bytes.size());
      ++inputs;
    }
  }
  CHECK(inputs > 0);
}

TEST_CASE("the zoo's graphs and files, the fuzzers' seeds, pass the targets") {
  const std::string scratch = testdata::test_file("z.fx");
  for (const char* name : {"mlp", "lenet", "resnet18", "unet"}) {
    INFO(name);
    models::ZooModel model = models::make_zoo_model(name);
    fx::GraphModule gm = models::trace_zoo_model(model);
    fx::PrintOptions typed;
    typed.tensor_meta = true;
    run(fx::fuzz::parse_graph, gm->graph().to_string());
    run(fx::fuzz::parse_graph, gm->graph().to_string(typed));
    fx::save(gm, scratch);
    std::vector<uint8_t> bytes = read_bytes(scratch);
    fx::fuzz::load(bytes.data(), bytes.size());
  }
  for (const char* spec : {"1x3x224x224", "5:int64", "0x4:float16"}) {
    run(fx::fuzz::input_spec, spec);
  }
}

TEST_CASE("the .pt2 programs, the exported_program fuzzer's seeds, pass its target, cut and flipped") {
  // testdata/exported_programs.py's files (torch.export.save), whole, cut
  // short at 16 places, and with a byte flipped at 64 places each: every
  // one loads soundly or is refused with an fx error.
  const std::string dir = testdata::exported_programs("fuzz_pt2_seeds");
  size_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".pt2") continue;
    INFO(entry.path().string());
    const std::vector<uint8_t> bytes = read_bytes(entry.path());
    fx::fuzz::exported_program(bytes.data(), bytes.size());
    for (size_t k = 1; k <= 16; ++k) {
      const size_t cut = bytes.size() * k / 17;
      fx::fuzz::exported_program(bytes.data(), cut);
    }
    for (size_t k = 0; k < 64; ++k) {
      std::vector<uint8_t> flipped = bytes;
      flipped[(k * 2654435761u) % flipped.size()] ^= static_cast<uint8_t>(1u << (k % 8));
      fx::fuzz::exported_program(flipped.data(), flipped.size());
    }
    ++files;
  }
  CHECK(files >= 10);
}

TEST_CASE("a saved file with lengths or memo indices beyond its data is refused") {
  // libtorch's unpickler would allocate what they claim (GBs) first.
  for (const char* name : {"huge_string_length", "huge_memo_index"}) {
    INFO(name);
    CHECK_THROWS_WITH(
        fx::load(std::string("fuzz/regressions/load/") + name),
        Catch::Contains("is corrupt or is not a file written by fx::save") &&
            Catch::Contains("beyond the data"));
  }
}

TEST_CASE("the fuzz targets refuse malformed input with fx errors") {
  // Each returns (refusal) instead of aborting.
  run(fx::fuzz::parse_graph, "graph():\n    %x = placeholder[target=");
  run(fx::fuzz::load, "PK\x03\x04 not a zip");
  run(fx::fuzz::input_spec, "99999999999x99999999999x99999999999");
  run(fx::fuzz::input_spec, "1x:float32");
}
