// The build-time generator alone (//codegen:generator without the lowering
// and the quantize step, as fx_cc_library builds it for a model that uses
// neither): what it writes, and what it refuses.
#include "codegen/generator.h"

#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "fx/io/internal/files.h"
#include "testdata/test_files.h"
#include "third_party/catch.h"

namespace {

struct SmallNetImpl : torch::nn::Module {
  SmallNetImpl() { fc = register_module("fc", torch::nn::Linear(4, 3)); }
  at::Tensor forward(const at::Tensor& x) { return torch::relu(fc->forward(x)); }
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(SmallNet);

fx::codegen::Model small_net() { return fx::codegen::model_of(SmallNet()); }

struct Run {
  int status;
  std::string errors;
};

// generator_main on these flags (after the program name), stderr captured.
Run generate(std::vector<std::string> flags) {
  flags.insert(flags.begin(), "generator");
  std::vector<char*> argv;
  for (std::string& flag : flags) argv.push_back(flag.data());
  std::ostringstream errors;
  std::streambuf* saved = std::cerr.rdbuf(errors.rdbuf());
  int status = fx::codegen::generator_main(static_cast<int>(argv.size()),
                                           argv.data(), &small_net);
  std::cerr.rdbuf(saved);
  return {status, errors.str()};
}

bool exists(const std::string& path) { return std::ifstream(path).good(); }

}  // namespace

TEST_CASE("The generator writes a class without the lowering or quantization linked") {
  const std::string header = testdata::test_file("small_net.h");
  const std::string source = testdata::test_file("small_net.cc");
  Run run = generate({"--input=2x4", "--passes=eliminate_dead_code",
                      "--class_name=SmallNetGenerated", "--header=" + header,
                      "--source=" + source});
  INFO(run.errors);
  REQUIRE(run.status == 0);
  CHECK(fx::read_file(header, "generator_test").find(
            "class SmallNetGenerated") != std::string::npos);
  std::remove(header.c_str());
  std::remove(source.c_str());
}

TEST_CASE("Without its libraries the generator refuses to quantize or lower, by name, and writes nothing") {
  const std::string header = testdata::test_file("refused.h");
  const std::string source = testdata::test_file("refused.cc");
  const std::vector<std::string> outputs = {
      "--input=2x4", "--class_name=Refused", "--header=" + header,
      "--source=" + source};

  std::vector<std::string> quantize = outputs;
  quantize.push_back("--quantize=onednn");
  Run run = generate(quantize);
  CHECK(run.status == 1);
  CHECK(run.errors.find("--quantize=onednn") != std::string::npos);
  CHECK(run.errors.find("//codegen:generator_quantize") != std::string::npos);

  std::vector<std::string> lower = outputs;
  lower.push_back("--passes=optimize_for_inference");
  run = generate(lower);
  CHECK(run.status == 1);
  CHECK(run.errors.find("no pass named 'optimize_for_inference'") !=
        std::string::npos);

  CHECK_FALSE(exists(header));
  CHECK_FALSE(exists(source));
}
