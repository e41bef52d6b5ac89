#include "tools/cli/support.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <stdexcept>

#include <torch/script.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "fx/io/input_spec.h"
#include "fx/pt2/exported_program.h"
#include "fx/torchscript/torchscript.h"

namespace cli {

double milliseconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now() - start)
      .count();
}

std::vector<double> interleaved_ms(
    const std::vector<std::function<void()>>& variants, int rounds) {
  std::vector<std::vector<double>> samples(variants.size());
  for (const auto& run : variants) run();
  for (int round = 0; round < rounds; ++round) {
    for (size_t k = 0; k < variants.size(); ++k) {
      const size_t i = round % 2 == 0 ? k : variants.size() - 1 - k;
      auto start = std::chrono::steady_clock::now();
      variants[i]();
      samples[i].push_back(std::chrono::duration<double, std::milli>(
                               std::chrono::steady_clock::now() - start)
                               .count());
    }
  }
  std::vector<double> medians;
  for (auto& s : samples) {
    std::sort(s.begin(), s.end());
    medians.push_back(s[s.size() / 2]);
  }
  return medians;
}

Traced trace_zoo_model(const std::string& name,
                       const std::vector<fx::DynamicDim>& dynamic) {
  Traced t{models::make_zoo_model(name)};
  fx::TraceOptions options;
  options.leaf_modules = t.model.leaf_modules;
  options.dynamic = dynamic;
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

namespace {

// What a trace's graph holds for other shapes, for the trace lines below.
std::string describe_shapes(const fx::TraceStats& stats,
                            const fx::Graph& graph) {
  if (stats.traces > 1) {
    std::string out = absl::StrCat(
        "generalized over its dynamic dimensions from ", stats.traces,
        " traces");
    for (const std::string& line : stats.narrowed) {
      absl::StrAppend(&out, "; narrowed to ", line);
    }
    return out;
  }
  if (stats.read_sizes) {
    return stats.specialized_by.empty()
               ? "specialized to the example shapes"
               : "specialized to the example shapes (a size used as a "
                 "constant by " + stats.specialized_by + ")";
  }
  int64_t sizes = 0;
  for (const fx::Node* n : graph.nodes()) sizes += fx::is_sym_call(*n);
  return sizes > 0 ? absl::StrCat("its size arithmetic recorded (", sizes,
                                  " size nodes): runs other shapes")
                   : "not specialized to the example shapes";
}

}  // namespace

void print_stats(const Traced& t) {
  std::cout << "traced " << t.model.name << " in " << t.milliseconds
            << " ms: " << t.stats.nodes << " nodes; output shapes from "
            << t.stats.shape_rule << " shape rules, " << t.stats.meta_kernel
            << " meta kernels, " << t.stats.shape_function
            << " shape functions, " << t.stats.in_place
            << " in-place ops, and " << t.stats.real_kernel
            << " real kernels on zeros; "
            << describe_shapes(t.stats, t.module->graph()) << "\n";
}

void ShapeFlags::add_to(Flags& flags) {
  flags.add("dynamic", &dynamic,
            "dimensions of the inputs that vary from run to run, "
            "comma-separated, each SYMBOL:INPUT:DIM[:MAX[:MULTIPLE_OF]] "
            "(B:0:0:64 is input 0's dimension 0, up to 64); dimensions "
            "sharing a symbol are equal");
  flags.add("specialize", &specialize,
            "for a TorchScript MODEL.pt: fold the sizes it computes into the "
            "graph and guard the example's shapes, instead of recording its "
            "size arithmetic (which runs every shape TorchScript runs)");
}

std::vector<fx::DynamicDim> ShapeFlags::dynamic_dims() const {
  std::vector<fx::DynamicDim> out;
  for (const std::string& spec : dynamic) {
    std::vector<std::string> parts = absl::StrSplit(spec, ':');
    fx::DynamicDim d;
    int64_t input = 0;
    bool ok = parts.size() >= 3 && parts.size() <= 5 && !parts[0].empty() &&
              absl::SimpleAtoi(parts[1], &input) && input >= 0 &&
              absl::SimpleAtoi(parts[2], &d.dim) &&
              (parts.size() < 4 || absl::SimpleAtoi(parts[3], &d.max)) &&
              (parts.size() < 5 || absl::SimpleAtoi(parts[4], &d.multiple_of));
    if (!ok) {
      throw UsageError("--dynamic: '" + spec +
                       "' is not SYMBOL:INPUT:DIM[:MAX[:MULTIPLE_OF]], e.g. "
                       "B:0:0:64");
    }
    d.symbol = parts[0];
    d.input = static_cast<size_t>(input);
    out.push_back(std::move(d));
  }
  return out;
}

void add_input_flag(Flags& flags, std::vector<std::string>* input) {
  flags.add("input", input,
            "for a TorchScript MODEL.pt: the example inputs, comma-separated, "
            "as 1x3x224x224 or 1x3x224x224:float32 (zeros of that shape)");
}

std::vector<c10::IValue> example_inputs(const std::vector<std::string>& specs) {
  std::vector<c10::IValue> inputs;
  for (const std::string& spec : specs) {
    inputs.push_back(fx::example_input(spec));
  }
  return inputs;
}

namespace {

bool is_zoo_model(const std::string& name) {
  std::vector<std::string> names = models::zoo_model_names();
  return std::find(names.begin(), names.end(), name) != names.end();
}

bool is_exported_program(const std::string& path) {
  return absl::EndsWith(path, ".pt2");
}

// A torch.export program (.pt2), read as it was exported.
fx::GraphModule load_exported(const std::string& path,
                              const ShapeFlags& shapes) {
  if (!shapes.dynamic.empty() || shapes.specialize) {
    throw UsageError(path + " is a torch.export program, whose shapes were " +
                     "fixed when it was exported (its dynamic dimensions "
                     "are read from it): " +
                     (shapes.specialize ? "--specialize" : "--dynamic") +
                     " applies when tracing a bundled model or a TorchScript "
                     "file");
  }
  auto start = std::chrono::steady_clock::now();
  fx::GraphModule module = fx::load_exported_program(path);
  std::cerr << "read the exported program " << path << " in "
            << milliseconds_since(start) << " ms: " << module->graph().size()
            << " nodes\n";
  return module;
}

// Zeros shaped as the graph's inputs are (an exported program records them).
std::vector<c10::IValue> inputs_of(const fx::GraphModule& module) {
  std::vector<c10::IValue> inputs;
  for (const fx::Node* p : module->graph().placeholders()) {
    const fx::TensorMeta* m = p->tensor_meta();
    if (m == nullptr) return {};
    inputs.emplace_back(at::zeros(m->sizes, at::TensorOptions().dtype(m->dtype)));
  }
  return inputs;
}

// A TorchScript file traced on `input`, or a GraphModule file read back.
fx::GraphModule load_file(const std::string& path,
                          const std::vector<std::string>& input,
                          const ShapeFlags& shapes) {
  std::string torchscript_error;
  torch::jit::Module script;
  try {
    script = torch::jit::load(path);
  } catch (const c10::Error& e) {
    torchscript_error = e.what_without_backtrace();
  }
  if (torchscript_error.empty()) {
    std::vector<c10::IValue> inputs = example_inputs(input);
    if (inputs.empty()) {
      throw UsageError(path +
                       " is TorchScript: give its example inputs, e.g. "
                       "--input=1x3x224x224 (or 1x3x224x224:float32,1x10:int64)");
    }
    script.eval();
    auto start = std::chrono::steady_clock::now();
    fx::TraceOptions options;
    options.dynamic = shapes.dynamic_dims();
    options.specialize_sizes = shapes.specialize;
    fx::TraceStats stats;
    fx::GraphModule module =
        fx::symbolic_trace(script, inputs, options, &stats);
    std::cerr << "traced TorchScript " << path << " in "
              << milliseconds_since(start) << " ms: "
              << module->graph().size() << " nodes; "
              << describe_shapes(stats, module->graph()) << "\n";
    return module;
  }
  try {
    fx::GraphModule module = fx::load(path);
    if (!shapes.dynamic.empty() || shapes.specialize) {
      throw UsageError(path + " is a GraphModule file, already traced: " +
                       (shapes.specialize ? "--specialize applies when "
                                            "tracing a TorchScript file"
                                          : "--dynamic applies when tracing "
                                            "a bundled model or a "
                                            "TorchScript file"));
    }
    std::cerr << "loaded " << path << ": " << module->graph().size()
              << " nodes\n";
    return module;
  } catch (const fx::ParseError&) {
    throw;
  } catch (const fx::GraphError& e) {
    throw std::runtime_error(
        path + " is neither a TorchScript file (torch::jit::load: " +
        torchscript_error.substr(0, torchscript_error.find('\n')) +
        ") nor a GraphModule file (" + e.what() + ")");
  }
}

fx::GraphModule open_file(const std::string& name,
                          const std::vector<std::string>& input,
                          std::vector<c10::IValue>* inputs,
                          const ShapeFlags& shapes = {}) {
  if (!std::ifstream(name).good()) {
    throw UsageError("'" + name +
                     "' is neither a bundled model (`fx zoo` lists them) nor "
                     "a readable file");
  }
  *inputs = example_inputs(input);
  if (is_exported_program(name)) {
    fx::GraphModule module = load_exported(name, shapes);
    if (inputs->empty()) *inputs = inputs_of(module);
    return module;
  }
  return load_file(name, input, shapes);
}

}  // namespace

fx::GraphModule open_model(const std::string& name,
                           const std::vector<std::string>& input,
                           std::vector<c10::IValue>* inputs,
                           const ShapeFlags& shapes) {
  if (is_zoo_model(name)) {
    if (shapes.specialize) {
      throw UsageError("--specialize applies to TorchScript files: " + name +
                       " is C++, whose sizes are always specialized unless "
                       "--dynamic names them");
    }
    Traced t = trace_zoo_model(name, shapes.dynamic_dims());
    print_stats(t);
    *inputs = t.model.example_inputs;
    return t.module;
  }
  return open_file(name, input, inputs, shapes);
}

fx::GraphModule open_model_in_eval_mode(const std::string& name,
                                        const std::vector<std::string>& input,
                                        std::vector<c10::IValue>* inputs,
                                        const ShapeFlags& shapes) {
  if (is_zoo_model(name)) {
    if (shapes.specialize) {
      throw UsageError("--specialize applies to TorchScript files: " + name +
                       " is C++, whose sizes are always specialized unless "
                       "--dynamic names them");
    }
    models::ZooModel model = models::make_zoo_model(name);
    model.module->eval();
    *inputs = model.example_inputs;
    fx::TraceOptions options;
    options.leaf_modules = model.leaf_modules;
    options.dynamic = shapes.dynamic_dims();
    return fx::symbolic_trace(model.module, model.forward, model.example_inputs,
                              options);
  }
  return open_file(name, input, inputs, shapes);
}

std::function<fx::GraphModule(const std::vector<c10::IValue>&)> retracer(
    const std::string& name, const ShapeFlags& shapes) {
  if (!shapes.dynamic.empty()) {
    throw UsageError(
        "--calls keeps a graph per shape: drop --dynamic, which makes one "
        "graph for every shape");
  }
  if (is_zoo_model(name)) {
    auto model = std::make_shared<models::ZooModel>(models::make_zoo_model(name));
    return [model](const std::vector<c10::IValue>& inputs) {
      fx::TraceOptions options;
      options.leaf_modules = model->leaf_modules;
      fx::Tracer tracer(options);
      std::unique_ptr<fx::Graph> graph =
          tracer.trace(model->module, model->forward, inputs);
      return fx::GraphModule(model->module, std::move(graph),
                             tracer.take_attributes());
    };
  }
  torch::jit::Module script;
  try {
    script = torch::jit::load(name);
  } catch (const c10::Error&) {
    throw UsageError(
        "--calls traces the model again for each new shape: give a bundled "
        "model or a TorchScript file, not " + name);
  }
  script.eval();
  auto kept = std::make_shared<torch::jit::Module>(std::move(script));
  const bool specialize = shapes.specialize;
  return [kept, specialize](const std::vector<c10::IValue>& inputs) {
    fx::TraceOptions options;
    options.specialize_sizes = specialize;
    return fx::symbolic_trace(*kept, inputs, options);
  };
}

void add_passes_flag(Flags& flags, std::string* passes) {
  flags.add("passes", passes,
            "passes to run, in order, comma-separated, each with its "
            "options in braces: fuse_conv_bn,lower_onednn{bf16=true} "
            "(`fx passes` lists the passes, their options and the "
            "pipelines' steps)");
}

namespace {

fx::PassManager pass_manager(const std::string& passes) {
  fx::PassManager manager;
  manager.add(fx::parse_pass_pipeline(passes));
  return manager;
}

}  // namespace

void check_passes(const std::string& passes) {
  try {
    pass_manager(passes);
  } catch (const fx::GraphError& e) {
    throw UsageError(absl::StrCat("--passes=", passes, ": ", e.what()));
  }
}

fx::PassResult run_passes(const fx::GraphModule& module,
                          const std::string& passes) {
  if (passes.empty()) return {module, false};
  return pass_manager(passes).run(module);
}

void add_print_flag(Flags& flags, std::string* print) {
  flags.add("print", print,
            "what to print, comma-separated: graph, tabular, code, readable, "
            "meta (the graph with each node's shape), none");
}

void check_print(const std::string& what) {
  for (absl::string_view item : absl::StrSplit(what, ',', absl::SkipEmpty())) {
    if (item != "graph" && item != "meta" && item != "tabular" &&
        item != "code" && item != "readable" && item != "none") {
      throw UsageError(absl::StrCat(
          "--print takes graph, meta, tabular, code, readable or none, not '",
          item, "'"));
    }
  }
}

void print_module(const fx::GraphModule& module, const std::string& what,
                  const PrintModuleOptions& options) {
  check_print(what);
  // The graph, then each init step's, as `# init step I -> OUTPUTS`.
  auto print_graph = [&](const fx::PrintOptions& print) {
    std::cout << module->graph().to_string(print);
    if (options.init_steps) {
      const auto& steps = module->init_steps();
      for (size_t i = 0; i < steps.size(); ++i) {
        std::cout << "\n# init step " << i << " -> "
                  << absl::StrJoin(steps[i].outputs, ", ") << "\n"
                  << steps[i].graph->to_string(print);
      }
    }
    std::cout << "\n";
  };
  for (absl::string_view item : absl::StrSplit(what, ',', absl::SkipEmpty())) {
    if (item == "graph") {
      print_graph(fx::PrintOptions());
    } else if (item == "meta") {
      fx::PrintOptions print;
      print.tensor_meta = true;
      print_graph(print);
    } else if (item == "tabular") {
      std::cout << module->graph().tabular();
    } else if (item == "code") {
      std::cout << module->code();
    } else if (item == "readable") {
      std::cout << module->print_readable();
    }
  }
}

void MachineFlags::add_to(Flags& flags) {
  flags.add("peak_gflops", &peak_gflops,
            "the cost model's machine: peak GFLOP/s");
  flags.add("bandwidth_gbps", &bandwidth_gbps,
            "the cost model's machine: memory bandwidth in GB/s");
  flags.add("cache_mb", &cache_mb,
            "the machine's cache for weights in MB: a graph or stage with "
            "more weights reads them from memory on every run, without "
            "overlapping compute (inf: always in cache)");
}

fx::Machine MachineFlags::machine() const {
  fx::Machine machine;
  machine.peak_flops_per_second = peak_gflops * 1e9;
  machine.memory_bytes_per_second = bandwidth_gbps * 1e9;
  machine.cache_bytes = cache_mb * 1e6;
  return machine;
}

}  // namespace cli
