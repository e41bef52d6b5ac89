// torch.export programs read in C++ beside Python reading them:
// fx::load_exported_program against torch.export.load on the same .pt2
// files (ResNet-50 at batch 1; a BERT-base-sized encoder with a dynamic
// batch and length), the loaded module's output against the program's
// own in Python beside each time.
//
//   bazel run //tools:benchmark_exported -- [--quick] [--repeats=N]
//
// --quick: ResNet-18 and a 2-layer encoder, 3 loads each. Python's times
// come from its own process (tools/pyexport_reference.py, which also
// writes the files), run first.
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "fx/fx.h"
#include "fx/pt2/exported_program.h"
#include "tools/benchmark_support.h"

namespace {

using namespace fx::benchmark;  // NOLINT: the benchmark vocabulary

constexpr char kScript[] = "tools/pyexport_reference.py";

// NAME_io.pt: the program's input and output in Python.
std::vector<at::Tensor> io(const std::string& dir, const std::string& name) {
  std::ifstream in(dir + "/" + name + "_io.pt", std::ios::binary);
  std::vector<char> bytes{std::istreambuf_iterator<char>(in),
                          std::istreambuf_iterator<char>()};
  const c10::IValue list = torch::pickle_load(bytes);
  std::vector<at::Tensor> out;
  for (const c10::IValue& v : list.toListRef()) out.push_back(v.toTensor());
  return out;
}

struct Row {
  std::string model;
  double ours_ms = 0;
  std::optional<double> python_ms, file_mb;
  double difference = 0;  // max |ours - Python's output|, relative
  std::string failure;
};

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "fx::load_exported_program beside torch.export.load on the same .pt2 "
      "files.\n  bazel run //tools:benchmark_exported -- [--quick] "
      "[--repeats=N]\n--quick: ResNet-18 and a 2-layer encoder, 3 loads.");
  absl::ParseCommandLine(argc, argv);
  const RunFlags flags = run_flags();
  at::set_num_threads(flags.threads);
  torch::NoGradGuard no_grad;
  const std::string before = machine_summary();
  const std::string dir = "/tmp/fx_benchmark_exported";
  const int repeats = flags.quick ? 3 : 5;
  std::cerr << "exporting and loading in Python\n";
  const PythonReference py = run_python_reference(
      argv[0], kScript,
      absl::StrFormat("%s --repeats=%d%s", dir, repeats,
                      flags.quick ? " --quick" : ""));
  std::vector<Row> rows;
  std::vector<TargetCheck> checks;
  for (const std::string& name :
       {std::string(flags.quick ? "resnet18" : "resnet50"), std::string("bert")}) {
    Row r;
    r.model = name;
    r.python_ms = py.number(name + ".load_ms");
    r.file_mb = py.number(name + ".file_mb");
    const std::string path = dir + "/" + name + ".pt2";
    try {
      if (!py.unavailable.empty()) throw std::runtime_error(py.unavailable);
      std::cerr << "loading " << path << "\n";
      r.ours_ms = median_ms(
          [&] {
            const auto start = Clock::now();
            fx::load_exported_program(path);
            return ms_since(start);
          },
          repeats);
      fx::GraphModule gm = fx::load_exported_program(path);
      const std::vector<at::Tensor> t = io(dir, name);
      const at::Tensor got = gm(t.at(0)).toTensor();
      const at::Tensor& want = t.at(1);
      r.difference = (got - want).abs().max().item<double>() /
                     std::max(1.0, want.abs().max().item<double>());
    } catch (const std::exception& e) {
      r.failure = std::string(e.what()).substr(0, 300);
    }
    rows.push_back(r);
  }

  Table table({"model", "file MB", "ours load ms", "Python load ms",
               "ours / Python", "output vs Python's"});
  for (const Row& r : rows) {
    if (!r.failure.empty()) {
      table.add_row({r.model, fixed(r.file_mb, 1), "failed: " + r.failure});
    } else {
      table.add_row({r.model, fixed(r.file_mb, 1), fixed(r.ours_ms, 1),
                     fixed(r.python_ms, 1), times(ratio(r.ours_ms, r.python_ms)),
                     absl::StrFormat("%.1e", r.difference)});
    }
    const std::optional<double> vs = ratio(r.ours_ms, r.python_ms);
    checks.push_back({r.model + ": load at most torch.export.load's time",
                      r.failure.empty() ? times(vs) : r.failure,
                      !r.failure.empty() ? std::optional<bool>(false)
                      : vs               ? std::optional<bool>(*vs <= 1.0)
                                         : std::nullopt});
    checks.push_back({r.model + ": output within 1e-5 of Python's (relative)",
                      r.failure.empty() ? absl::StrFormat("%.1e", r.difference)
                                        : r.failure,
                      r.failure.empty() && r.difference <= 1e-5, false});
  }
  std::cout << before << "\n";
  print_section(
      absl::StrFormat("Reading torch.export programs (%d threads), medians of "
                      "%d loads after one",
                      flags.threads, repeats),
      table,
      {"ours: fx::load_exported_program (the archive, the program's JSON, "
       "the weights); Python: torch.export.load of the same file, in "
       "tools/pyexport_reference.py's own process, run first (torch " +
           py.text("torch_version") +
           "); output: the loaded module on the program's example input "
           "against program.module()'s output in Python, relative to its "
           "largest magnitude."});
  return print_targets(checks, flags.quick);
}
