// fx trace MODEL: a bundled model traced, or a GraphModule or TorchScript
// file read; passes run; the result printed, drawn, costed, saved or
// exported to TorchScript.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <torch/script.h>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "fx/fx.h"
#include "fx/runtime/specializations.h"
#include "fx/torchscript/torchscript.h"
#include "onnx/to_onnx.h"
#include "passes/cost_model.h"
#include "passes/graph_drawer.h"
#include "passes/registry.h"
#include "tools/cli/commands.h"
#include "tools/cli/support.h"

namespace cli {
namespace {

void print_cost(const fx::CostReport& report, const MachineFlags& flags) {
  const fx::Machine machine = flags.machine();
  fx::CostTableOptions options;
  options.group_by = fx::CostTableOptions::GroupBy::kModuleTree;
  options.top_n = 20;
  options.machine = &machine;
  std::cout << "== Cost (roofline: " << flags.peak_gflops << " GFLOP/s, "
            << flags.bandwidth_gbps << " GB/s; weights in "
            << (fx::weights_in(report.total.weight_bytes, machine) ==
                        fx::WeightsIn::kMemory
                    ? "memory"
                    : "cache")
            << ")\n"
            << fx::format_cost_table(report, options);
}

void write_picture(const fx::Graph& graph, const std::string& path) {
  fx::CostReport report = fx::estimate_cost(graph);
  fx::DotOptions options;
  options.cost = &report;
  std::string dot = fx::to_dot(graph, options);
  if (absl::EndsWith(path, ".dot")) {
    std::ofstream out(path);
    out << dot;
    if (!out) throw fx::GraphError("cannot write " + path);
  } else {
    fx::render_dot(dot, path);
  }
  std::cerr << "wrote " << path << "\n";
}

class Trace : public Command {
 public:
  Trace()
      : Command("trace", {"MODEL"},
                "trace a model, run passes on it, and print, draw, cost, "
                "save or export the result",
                "MODEL is a bundled model (`fx zoo` lists them), a "
                "GraphModule file (written by --save), or a TorchScript file "
                "(torch.jit.save; give --input).") {
    add_print_flag(flags(), &print_);
    add_passes_flag(flags(), &passes_);
    flags().add("before", &before_,
                "with --passes: also print the graph before the passes");
    flags().add("dot", &dot_,
                "write the graph (after the passes) as a picture: .dot (DOT "
                "text), .svg, .png or .pdf (rendered with graphviz's dot)");
    flags().add("cost", &cost_,
                "print the cost model's table: FLOPs, MACs, bytes and a "
                "roofline time per module, on the machine --peak_gflops, "
                "--bandwidth_gbps and --cache_mb describe");
    machine_.add_to(flags());
    flags().add("save", &save_,
                "write the GraphModule (after the passes) to this file "
                "(fx::save); `fx trace FILE` reads it back");
    flags().add("torchscript", &torchscript_,
                "export the GraphModule (after the passes) as TorchScript to "
                "this file (torch.jit.load reads it)");
    flags().add("onnx", &onnx_,
                "export the GraphModule (after the passes) as an ONNX model "
                "(opset 17) to this file (fx::to_onnx), checked by ONNX's "
                "checker with full shape inference");
    add_input_flag(flags(), &input_);
    shapes_.add_to(flags());
    flags().add("cost_at", &cost_at_,
                "--cost at these inputs (specs as --input takes them): a "
                "graph with dynamic dimensions priced at other sizes "
                "(fx::estimate_cost_at)");
    flags().add("calls", &calls_,
                "run the model on these inputs through a cache of "
                "specializations (fx::SpecializationCache): calls separated "
                "by ';', each call's input specs by ',' as --input takes "
                "them (\"1x3x224x224;8x3x224x224\"); each shape not seen "
                "before is traced again and --passes run on it; prints each "
                "call's time and the cache's report");
    flags().add("capacity", &capacity_, "--calls: the specializations kept");
  }

 private:
  int run(const std::vector<std::string>& args) override {
    check_print(print_);
    check_passes(passes_);
    std::vector<c10::IValue> inputs;
    fx::GraphModule module =
        open_model(args[0], input_, &inputs, shapes_);
    const size_t nodes_before = module->graph().size();
    if (!passes_.empty()) {
      if (before_) {
        std::cout << "== Before " << passes_ << "\n" << module->graph() << "\n";
      }
      fx::PassResult result = run_passes(module, passes_);
      module = result.module;
      std::cerr << "passes " << passes_ << ": "
                << (result.modified ? "changed the graph" : "changed nothing")
                << ", " << nodes_before << " -> " << module->graph().size()
                << " nodes\n";
      if (before_) std::cout << "== After\n";
    }
    print_module(module, print_);
    if (cost_ || !cost_at_.empty()) {
      if (cost_at_.empty()) {
        print_cost(fx::estimate_cost(module->graph()), machine_);
      } else {
        const std::vector<std::string> specs =
            absl::StrSplit(cost_at_, ',', absl::SkipWhitespace());
        std::cout << "== Cost at " << cost_at_ << "\n";
        print_cost(fx::estimate_cost_at(*module, example_inputs(specs)), machine_);
      }
    }
    if (!dot_.empty()) write_picture(module->graph(), dot_);
    if (!torchscript_.empty()) {
      fx::to_torchscript(module).save(torchscript_);
      std::cerr << "wrote " << torchscript_ << "\n";
    }
    if (!onnx_.empty()) {
      const auto start = std::chrono::steady_clock::now();
      fx::to_onnx(*module, onnx_);
      const std::chrono::duration<double, std::milli> took =
          std::chrono::steady_clock::now() - start;
      std::cerr << "wrote " << onnx_ << " ("
                << std::filesystem::file_size(onnx_) << " bytes, checked, "
                << static_cast<int64_t>(took.count()) << " ms)\n";
    }
    if (!save_.empty()) {
      fx::save(module, save_);
      std::cerr << "wrote " << save_ << "\n";
    }
    if (!calls_.empty()) run_calls(args[0]);
    return 0;
  }

  // --calls: the calls through a cache of specializations.
  void run_calls(const std::string& name) const {
    std::vector<std::vector<c10::IValue>> calls;
    for (absl::string_view call : absl::StrSplit(calls_, ';', absl::SkipEmpty())) {
      std::vector<std::string> specs =
          absl::StrSplit(call, ',', absl::SkipWhitespace());
      calls.push_back(example_inputs(specs));
    }
    if (capacity_ < 1) {
      throw UsageError("--capacity=" + std::to_string(capacity_) +
                       ": keep 1 or more specializations");
    }
    fx::SpecializationOptions options;
    options.capacity = static_cast<size_t>(capacity_);
    if (!passes_.empty()) {
      const std::vector<fx::PassStep> steps = fx::parse_pass_pipeline(passes_);
      options.passes = [steps](fx::GraphModuleImpl& gm) {
        fx::PassManager().add(steps).run_in_place(gm);
      };
    }
    fx::SpecializationCache cache(retracer(name, shapes_), options);
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < calls.size(); ++i) {
      const auto start = std::chrono::steady_clock::now();
      cache(calls[i]);
      std::cout << "call " << i + 1 << " ("
                << fx::SpecializationCache::shapes_of(calls[i]) << "): "
                << absl::StrFormat("%.2f", milliseconds_since(start)) << " ms\n";
    }
    std::cout << cache.report();
  }

  std::string print_ = "graph";
  std::string passes_;
  bool before_ = false;
  std::string dot_;
  bool cost_ = false;
  MachineFlags machine_;
  std::string save_;
  std::string torchscript_;
  std::string onnx_;
  std::vector<std::string> input_;
  ShapeFlags shapes_;
  std::string calls_;
  int64_t capacity_ = 8;
  std::string cost_at_;
};

}  // namespace

std::unique_ptr<Command> make_trace() { return std::make_unique<Trace>(); }

}  // namespace cli
