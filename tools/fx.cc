// fx: the command-line tool.
//
//   bazel run //tools:fx -- demo                 trace the bundled ResNet-18,
//                                                print its graph and code,
//                                                run it against eager
//   bazel run //tools:fx -- zoo                  list the bundled models
//   bazel run //tools:fx -- trace resnet50 --print=graph,tabular,code,readable
#include <chrono>
#include <iostream>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "fx/fx.h"
#include "testdata/zoo.h"

ABSL_FLAG(std::string, print, "graph",
          "what `trace` prints, comma-separated: graph, tabular, code, "
          "readable, meta (the graph with each node's shape)");

namespace {

constexpr char kUsage[] =
    "fx: capture and transform LibTorch programs.\n\n"
    "  fx demo                         trace the bundled ResNet-18, print "
    "its graph and\n"
    "                                  generated C++, run it and compare "
    "with eager\n"
    "  fx zoo                          list the bundled models\n"
    "  fx trace MODEL [--print=...]    trace a bundled model and print it "
    "(graph,\n"
    "                                  tabular, code, readable, meta)\n";

double milliseconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now() - start)
      .count();
}

struct Traced {
  testdata::ZooModel model;
  fx::GraphModule module{nullptr};
  fx::TraceStats stats;
  double milliseconds = 0;
};

Traced trace_zoo_model(const std::string& name) {
  Traced t{testdata::make_zoo_model(name)};
  fx::TraceOptions options;
  options.leaf_modules = t.model.leaf_modules;
  fx::Tracer tracer(options);
  auto start = std::chrono::steady_clock::now();
  std::unique_ptr<fx::Graph> graph =
      tracer.trace(t.model.module, t.model.forward, t.model.example_inputs);
  t.module = fx::GraphModule(t.model.module, std::move(graph),
                             tracer.take_attributes());
  t.milliseconds = milliseconds_since(start);
  t.stats = tracer.stats();
  return t;
}

void print_stats(const Traced& t) {
  std::cout << "traced " << t.model.name << " in " << t.milliseconds
            << " ms: " << t.stats.nodes << " nodes; output shapes from "
            << t.stats.shape_rule << " shape rules, " << t.stats.meta_kernel
            << " meta kernels, " << t.stats.shape_function
            << " shape functions, " << t.stats.in_place
            << " in-place ops, and " << t.stats.real_kernel
            << " real kernels on zeros; "
            << (t.stats.read_sizes ? "specialized to the example shapes"
                                   : "not specialized to the example shapes")
            << "\n";
}

int demo() {
  std::cout << "== Tracing ResNet-18 (testdata/resnet.h, eval mode) on a "
               "1x3x224x224 input\n";
  Traced t = trace_zoo_model("resnet18");
  print_stats(t);
  std::cout << "\n== The graph (print(gm.graph) in torch.fx)\n"
            << t.module->graph() << "\n";
  std::cout << "\n== The generated C++ forward (gm.code in torch.fx)\n"
            << t.module->code();
  std::cout << "\n== Running it\n";
  torch::NoGradGuard no_grad;
  at::Tensor x = t.model.example_inputs[0].toTensor();
  at::Tensor eager = t.model.forward({x}).toTensor();
  at::Tensor traced = t.module(x).toTensor();
  bool equal = torch::equal(eager, traced);
  std::cout << "eager output      " << eager.sizes()
            << ", top class " << eager.argmax().item<int64_t>() << "\n"
            << "GraphModule output " << traced.sizes() << ", top class "
            << traced.argmax().item<int64_t>() << "\n"
            << "max |difference| = "
            << (eager - traced).abs().max().item<double>() << ", "
            << (equal ? "bitwise equal" : "NOT bitwise equal") << "\n";
  try {
    t.module(torch::randn({1, 3, 112, 112}));
  } catch (const fx::GuardError& e) {
    std::cout << "\nA 112x112 input is rejected, as the trace read sizes:\n  "
              << e.what() << "\n";
  }
  return equal ? 0 : 1;
}

int zoo() {
  for (const std::string& name : testdata::zoo_model_names()) {
    std::cout << name << "\n";
  }
  return 0;
}

int trace(const std::string& name) {
  std::vector<std::string> names = testdata::zoo_model_names();
  if (std::find(names.begin(), names.end(), name) == names.end()) {
    std::cerr << "fx trace: no bundled model named '" << name
              << "'; `fx zoo` lists them\n";
    return 2;
  }
  Traced t = trace_zoo_model(name);
  print_stats(t);
  for (absl::string_view what :
       absl::StrSplit(absl::GetFlag(FLAGS_print), ',', absl::SkipEmpty())) {
    if (what == "graph") {
      std::cout << t.module->graph() << "\n";
    } else if (what == "meta") {
      fx::PrintOptions options;
      options.tensor_meta = true;
      std::cout << t.module->graph().to_string(options) << "\n";
    } else if (what == "tabular") {
      std::cout << t.module->graph().tabular();
    } else if (what == "code") {
      std::cout << t.module->code();
    } else if (what == "readable") {
      std::cout << t.module->print_readable();
    } else {
      std::cerr << "fx trace: --print takes graph, meta, tabular, code or "
                   "readable, not '"
                << what << "'\n";
      return 2;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(kUsage);
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() < 2) {
    std::cerr << kUsage;
    return 2;
  }
  std::string command = args[1];
  try {
    if (command == "demo" && args.size() == 2) return demo();
    if (command == "zoo" && args.size() == 2) return zoo();
    if (command == "trace" && args.size() == 3) return trace(args[2]);
  } catch (const fx::Error& e) {
    std::cerr << "fx " << command << ": " << e.what() << "\n";
    return 1;
  }
  std::cerr << "fx: unknown command or wrong arguments\n\n" << kUsage;
  return 2;
}
