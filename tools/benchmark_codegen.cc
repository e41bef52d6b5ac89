// Generated C++ (fx_cc_library, built with this binary) beside eager C++ and
// the GraphModule, on ResNet-18 and ResNet-50, as traced (the same
// operators as eager) and conv/bn folded; then the emitter on graphs of 10k
// and 100k nodes (time per node, functions it splits into) and g++ -O2
// compiling the 10k one:
//
//   bazel run //tools:benchmark_codegen [-- --repeats=N --threads=N
//       --emit_blocks=1250,12500 --compile_blocks=1250]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "codegen/module_codegen.h"
#include "fx/fx.h"
#include "passes/pass_manager.h"
#include "testdata/resnet18_folded.h"
#include "testdata/resnet18_generated.h"
#include "testdata/resnet50_folded.h"
#include "testdata/resnet50_generated.h"
#include "models/blocks.h"
#include "models/zoo.h"
#include "tools/benchmark_support.h"

ABSL_FLAG(std::string, emit_blocks, "1250,12500",
          "sizes (conv/bn/relu blocks of 8 nodes) of the graphs to emit C++ "
          "for, comma-separated; empty skips");
ABSL_FLAG(int, compile_blocks, 1250,
          "compile the C++ emitted for a graph of this many blocks with g++ "
          "-O2 (0 skips; --quick skips it, a 3-minute compile)");

namespace {

using namespace fx::benchmark;

struct Times {
  std::string model;
  double eager = 0, gm = 0, generated = 0, gm_folded = 0, generated_folded = 0;
  double generated_over_eager = 0, generated_over_gm = 0;
  double folded_over_eager = 0, folded_over_gm_folded = 0;
  double max_difference = 0;   // of the folded generated class
  double plain_difference = 0;  // of the generated class as traced
  double max_magnitude = 0;     // max |eager output|
};

template <typename Generated, typename Folded>
Times measure(const std::string& name, int rounds) {
  torch::NoGradGuard no_grad;
  models::ZooModel model = models::make_zoo_model(name);
  fx::GraphModule gm =
      fx::symbolic_trace(model.module, model.forward, model.example_inputs);
  fx::GraphModule folded = fx::PassManager()
                               .add("fuse_conv_bn")
                               .add("remove_dropout")
                               .add("eliminate_dead_code")
                               .run(gm)
                               .module;
  Generated generated(*model.module);
  Folded generated_folded(*model.module);
  const std::vector<c10::IValue>& inputs = model.example_inputs;
  at::Tensor x = inputs[0].toTensor();
  at::Tensor expected = model.forward(inputs).toTensor();
  Times t;
  t.model = name;
  at::Tensor plain_out = generated.forward(x);
  at::Tensor folded_out = generated_folded.forward(x);
  t.plain_difference = (plain_out - expected).abs().max().item<double>();
  t.max_difference = (folded_out - expected).abs().max().item<double>();
  t.max_magnitude = expected.abs().max().item<double>();
  auto ms = interleaved_samples_ms(
      {[&] { model.forward(inputs); }, [&] { gm->forward(inputs); },
       [&] { generated.forward(x); }, [&] { folded->forward(inputs); },
       [&] { generated_folded.forward(x); }},
      rounds, 1);
  t.eager = median(ms[0]);
  t.gm = median(ms[1]);
  t.generated = median(ms[2]);
  t.gm_folded = median(ms[3]);
  t.generated_folded = median(ms[4]);
  t.generated_over_eager = median_paired_ratio(ms[2], ms[0]);
  t.generated_over_gm = median_paired_ratio(ms[2], ms[1]);
  t.folded_over_eager = median_paired_ratio(ms[4], ms[0]);
  t.folded_over_gm_folded = median_paired_ratio(ms[4], ms[3]);
  return t;
}

struct Emission {
  int64_t blocks = 0;
  size_t nodes = 0;
  double emit_ms = 0;
  size_t lines = 0;
  size_t functions = 0;
  std::optional<double> compile_s;
};

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos;
       at = text.find(what, at + 1)) {
    ++n;
  }
  return n;
}

// g++ -O2 on the emitted source, as the build compiles it; seconds, or
// nullopt if it could not run.
std::optional<double> compile_seconds(const fx::codegen::GeneratedModule& code) {
  const char* workspace = std::getenv("BUILD_WORKSPACE_DIRECTORY");
  if (workspace == nullptr) {
    std::cerr << "not run by `bazel run`: skipping the compile\n";
    return std::nullopt;
  }
  const std::string dir = "/tmp/fx_benchmark_codegen";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/blocks_generated.h") << code.header;
  std::ofstream(dir + "/blocks_generated.cc") << code.source;
  const std::string command = absl::StrCat(
      "g++ -std=c++17 -O2 -fPIC -c -I", dir, " -I", workspace,
      " -I/usr/include/torch/csrc/api/include ", dir,
      "/blocks_generated.cc -o ", dir, "/blocks_generated.o");
  auto start = Clock::now();
  int status = std::system(command.c_str());
  double seconds = ms_since(start) / 1000;
  if (status != 0) {
    std::cerr << "compile failed: " << command << "\n";
    return std::nullopt;
  }
  return seconds;
}

std::vector<Emission> measure_emission(const std::vector<int64_t>& sizes,
                                       int64_t compile_blocks) {
  std::vector<Emission> out;
  for (int64_t blocks : sizes) {
    std::cerr << "emitting " << blocks << " blocks\n";
    models::Blocks model(blocks);
    model->eval();
    fx::GraphModule gm = fx::symbolic_trace(model, torch::randn({1, 2, 4, 4}));
    fx::codegen::ModuleOptions options;
    options.class_name = "Blocks";
    options.header_include = "blocks_generated.h";
    Emission e;
    e.blocks = blocks;
    e.nodes = gm->graph().size();
    fx::codegen::GeneratedModule code;
    e.emit_ms = median_ms(
        [&] {
          auto start = Clock::now();
          code = fx::codegen::emit_module(*gm, options);
          return ms_since(start);
        },
        3);
    e.lines = count(code.header, "\n") + count(code.source, "\n");
    e.functions = 1 + count(code.header, " forward_part_");
    if (blocks == compile_blocks) {
      std::cerr << "compiling the code for " << blocks << " blocks\n";
      e.compile_s = compile_seconds(code);
    }
    out.push_back(e);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "generated C++ vs eager and GraphModule.\n  bazel run "
      "//tools:benchmark_codegen -- [--quick] [--threads=N] [--repeats=N] "
      "[--emit_blocks=a,b] [--compile_blocks=N]\n--quick: 3 rounds, no g++ "
      "compile.");
  absl::ParseCommandLine(argc, argv);
  const RunFlags flags = run_flags();
  at::set_num_threads(flags.threads);
  const int rounds = flags.repeats;
  const std::string before = machine_summary();
  std::vector<Times> all;
  std::cerr << "timing resnet18\n";
  all.push_back(measure<testdata::ResNet18Generated, testdata::ResNet18Folded>(
      "resnet18", rounds));
  std::cerr << "timing resnet50\n";
  all.push_back(measure<testdata::ResNet50Generated, testdata::ResNet50Folded>(
      "resnet50", rounds));

  std::vector<int64_t> sizes;
  for (absl::string_view size : absl::StrSplit(absl::GetFlag(FLAGS_emit_blocks),
                                               ',', absl::SkipEmpty())) {
    int64_t blocks = 0;
    if (!absl::SimpleAtoi(size, &blocks) || blocks <= 0) {
      std::cerr << "--emit_blocks takes counts, not '" << size << "'\n";
      return 2;
    }
    sizes.push_back(blocks);
  }
  std::vector<Emission> emissions =
      measure_emission(sizes,
                       flags.quick ? 0 : absl::GetFlag(FLAGS_compile_blocks));

  std::cout << "fx for LibTorch generated-code benchmark\nbefore: " << before
            << "; after: " << machine_summary()
            << "\nthreads: " << flags.threads
            << "; rounds: " << rounds << "\n";
  Table table({"model", "eager ms", "GM ms", "generated ms", "gen/eager",
               "gen/GM", "GM folded ms", "gen folded ms", "gen folded/eager",
               "gen folded/GM folded", "max |diff|"});
  for (const Times& t : all) {
    table.add_row({t.model, fixed(t.eager, 2), fixed(t.gm, 2),
                   fixed(t.generated, 2), times(t.generated_over_eager),
                   times(t.generated_over_gm), fixed(t.gm_folded, 2),
                   fixed(t.generated_folded, 2), times(t.folded_over_eager),
                   times(t.folded_over_gm_folded),
                   absl::StrFormat("%.2g, %.2g", t.plain_difference,
                                   t.max_difference)});
  }
  print_section(
      "Forward time (median ms, no grad, interleaved rounds)", table,
      {"generated: fx_cc_library classes built with this binary (as traced, "
       "and with fuse_conv_bn,remove_dropout,eliminate_dead_code).",
       "Ratios: medians of per-round ratios; max |diff|: generated vs eager, as "
       "traced and folded."});
  Table emission_table({"graph", "nodes", "emit ms", "us/node", "lines",
                        "functions", "g++ -O2 s"});
  for (const Emission& e : emissions) {
    emission_table.add_row(
        {absl::StrCat(e.blocks, " blocks"), absl::StrCat(e.nodes),
         fixed(e.emit_ms, 1), fixed(1000 * e.emit_ms / e.nodes, 2),
         absl::StrCat(e.lines), absl::StrCat(e.functions),
         e.compile_s ? fixed(*e.compile_s, 1) : "-"});
  }
  print_section(
      "Emitting C++ for large graphs (conv, batch_norm, relu blocks)",
      emission_table,
      {"emit: codegen::emit_module, median of 3; functions: forward and the "
       "parts it is split into (2000 nodes each, the default).",
       "g++ -O2: compiling the emitted source as fx_cc_library would."});
  std::vector<TargetCheck> checks;
  for (const Times& t : all) {
    checks.push_back(
        {"generated " + t.model + " within 2% of eager and the GraphModule",
         absl::StrFormat("%.3fx eager, %.3fx GM", t.generated_over_eager,
                         t.generated_over_gm),
         t.generated_over_eager <= 1.02 && t.generated_over_gm <= 1.02});
    checks.push_back({"generated folded " + t.model + " faster than eager",
                      absl::StrFormat("%.3fx eager", t.folded_over_eager),
                      t.folded_over_eager < 1.0});
    checks.push_back(
        {"generated " + t.model + " equals eager bitwise",
         absl::StrFormat("max |diff| %g", t.plain_difference),
         t.plain_difference == 0, /*timing=*/false});
    const double bound = 1e-4 * std::max(1.0, t.max_magnitude);
    checks.push_back(
        {"generated folded " + t.model + " matches eager (1e-4 relative)",
         absl::StrFormat("max |diff| %.2g (bound %.2g)", t.max_difference,
                         bound),
         t.max_difference <= bound, /*timing=*/false});
  }
  if (emissions.size() >= 2) {
    const Emission& small = emissions.front();
    const Emission& large = emissions.back();
    double growth = (large.emit_ms / large.nodes) / (small.emit_ms / small.nodes);
    checks.push_back(
        {absl::StrCat("emission linear from ", small.nodes, " to ", large.nodes,
                      " nodes"),
         absl::StrFormat("%.2fx time per node", growth), growth < 2.0});
  }
  return print_targets(checks, flags.quick);
}
