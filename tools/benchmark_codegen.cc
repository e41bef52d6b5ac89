// Generated C++ (fx_cc_library, built with this binary) beside eager C++ and
// the GraphModule, on ResNet-18 and ResNet-50, as traced (the same
// operators as eager) and conv/bn folded:
//
//   bazel run //tools:benchmark_codegen [-- --repeats=N --threads=N]
#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_format.h"
#include "fx/fx.h"
#include "passes/pass_manager.h"
#include "testdata/resnet18_folded.h"
#include "testdata/resnet18_generated.h"
#include "testdata/resnet50_folded.h"
#include "testdata/resnet50_generated.h"
#include "testdata/zoo.h"
#include "tools/benchmark_support.h"

ABSL_FLAG(int, threads, 2, "intra-op threads (at::set_num_threads)");
ABSL_FLAG(int, repeats, 20, "interleaved rounds per model");

namespace {

using namespace fx::benchmark;

struct Times {
  std::string model;
  double eager = 0, gm = 0, generated = 0, gm_folded = 0, generated_folded = 0;
  double generated_over_eager = 0, generated_over_gm = 0;
  double folded_over_eager = 0, folded_over_gm_folded = 0;
  double max_difference = 0;
};

template <typename Generated, typename Folded>
Times measure(const std::string& name, int rounds) {
  torch::NoGradGuard no_grad;
  testdata::ZooModel model = testdata::make_zoo_model(name);
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
  t.max_difference =
      std::max((plain_out - expected).abs().max().item<double>(),
               (folded_out - expected).abs().max().item<double>());
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

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "generated C++ vs eager and GraphModule.\n  bazel run "
      "//tools:benchmark_codegen -- [--threads=N] [--repeats=N]");
  absl::ParseCommandLine(argc, argv);
  at::set_num_threads(absl::GetFlag(FLAGS_threads));
  const int rounds = absl::GetFlag(FLAGS_repeats);
  const std::string before = machine_summary();
  std::vector<Times> all;
  std::cerr << "timing resnet18\n";
  all.push_back(measure<testdata::ResNet18Generated, testdata::ResNet18Folded>(
      "resnet18", rounds));
  std::cerr << "timing resnet50\n";
  all.push_back(measure<testdata::ResNet50Generated, testdata::ResNet50Folded>(
      "resnet50", rounds));

  std::cout << "fx for LibTorch generated-code benchmark\nbefore: " << before
            << "; after: " << machine_summary()
            << "\nthreads: " << absl::GetFlag(FLAGS_threads)
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
                   absl::StrFormat("%.2g", t.max_difference)});
  }
  print_section(
      "Forward time (median ms, no grad, interleaved rounds)", table,
      {"generated: fx_cc_library classes built with this binary (as traced, "
       "and with fuse_conv_bn,remove_dropout,eliminate_dead_code).",
       "Ratios: medians of per-round ratios; max |diff|: generated vs eager."});
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
  }
  print_targets(checks);
  return 0;
}
