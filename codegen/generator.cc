#include "codegen/generator.h"

#include <exception>
#include <iostream>
#include <map>
#include <utility>

#include <ATen/ATen.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "codegen/internal/quantize_step.h"
#include "codegen/module_codegen.h"
#include "codegen/runtime.h"
#include "fx/io/input_spec.h"
#include "fx/io/internal/files.h"
#include "fx/ir/errors.h"
#include "fx/trace/tracer.h"
#include "passes/pass_manager.h"

namespace fx {
namespace codegen {

namespace internal {

namespace {
QuantizeStep& step() {
  static auto* s = new QuantizeStep();
  return *s;
}
}  // namespace

bool set_quantize_step(QuantizeStep s) {
  step() = std::move(s);
  return true;
}

const QuantizeStep& quantize_step() { return step(); }

}  // namespace internal

int generator_main(int argc, char** argv,
                   const std::function<Model()>& factory) {
  const std::string program = argc > 0 ? argv[0] : "generator";
  try {
    std::vector<std::string> inputs;
    std::map<std::string, std::string> flags;
    bool train = false;
    const std::set<std::string> known = {
        "passes", "class_name", "namespace", "header_include", "header",
        "source", "weights", "max_function_nodes", "quantize"};
    for (int i = 1; i < argc; ++i) {
      std::string arg = argv[i];
      if (arg == "--train") {
        train = true;
        continue;
      }
      if (!absl::StartsWith(arg, "--") || arg.find('=') == std::string::npos) {
        throw GraphError(absl::StrCat("unexpected argument '", arg,
                                      "': flags are --name=value"));
      }
      std::string name = arg.substr(2, arg.find('=') - 2);
      std::string value = arg.substr(arg.find('=') + 1);
      if (name == "input") {
        inputs.push_back(value);
      } else if (known.count(name)) {
        flags[name] = value;
      } else {
        throw GraphError(absl::StrCat("unknown flag --", name, " (known: --input, --",
                                      absl::StrJoin(known, ", --"),
                                      ", --train)"));
      }
    }
    for (const char* required : {"class_name", "header", "source"}) {
      if (flags[required].empty()) {
        throw GraphError(absl::StrCat("--", required, " is required"));
      }
    }
    if (inputs.empty()) {
      throw GraphError("no --input: give one per forward input, e.g. "
                       "--input=1x3x224x224");
    }
    std::vector<c10::IValue> examples;
    for (const std::string& spec : inputs) {
      examples.emplace_back(fx::example_input(spec));
    }
    Model model = factory();
    if (!model.module || !model.forward) {
      throw GraphError("the model factory returned no module or forward");
    }
    model.module->train(train);
    TraceOptions options;
    options.leaf_modules = model.leaf_modules;
    GraphModule gm =
        symbolic_trace(model.module, model.forward, examples, options);
    PassManager passes;
    for (absl::string_view name :
         absl::StrSplit(flags["passes"], ',', absl::SkipEmpty())) {
      passes.add(std::string(name));
    }
    gm = passes.run(gm).module;
    if (!flags["quantize"].empty()) {
      const internal::QuantizeStep& quantize = internal::quantize_step();
      if (!quantize) {
        throw GraphError(absl::StrCat(
            "--quantize=", flags["quantize"],
            ": this generator has no quantization linked; link "
            "//codegen:generator_quantize (fx_cc_library does when quantize "
            "is set)"));
      }
      gm = quantize(gm, flags["quantize"], examples, model);
    }

    ModuleOptions module_options;
    module_options.class_name = flags["class_name"];
    module_options.namespace_name = flags["namespace"];
    if (!flags["max_function_nodes"].empty() &&
        !absl::SimpleAtoi(flags["max_function_nodes"],
                          &module_options.max_nodes_per_function)) {
      throw GraphError(absl::StrCat("--max_function_nodes takes a count, not '",
                                    flags["max_function_nodes"], "'"));
    }
    module_options.header_include = flags["header_include"].empty()
                                        ? flags["header"]
                                        : flags["header_include"];
    GeneratedModule generated = emit_module(*gm, module_options);
    write_file_atomically(flags["header"], generated.header);
    write_file_atomically(flags["source"], generated.source);
    if (!flags["weights"].empty()) {
      TensorMap weights;
      for (const std::string& path : generated.bound_tensors) {
        weights.emplace(path, gm->fetch_attr(path));
      }
      save_tensors(weights, flags["weights"]);
    }
    return 0;
  } catch (const std::exception& e) {
    std::cerr << program << ": " << e.what() << "\n";
    return 1;
  }
}

}  // namespace codegen
}  // namespace fx
