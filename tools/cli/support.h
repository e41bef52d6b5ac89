// What several commands of the fx tool share: opening a model (a bundled
// one traced, a GraphModule file, a TorchScript file), running passes by
// name, printing a module, the cost model's machine, timing.
#pragma once

#include <chrono>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <ATen/core/ivalue.h>

#include "fx/fx.h"
#include "models/zoo.h"
#include "passes/cost_model.h"
#include "passes/pass_manager.h"
#include "tools/cli/command.h"

namespace cli {

double milliseconds_since(std::chrono::steady_clock::time_point start);

// Median milliseconds per call of each variant, interleaved round by round.
std::vector<double> interleaved_ms(
    const std::vector<std::function<void()>>& variants, int rounds);

struct Traced {
  models::ZooModel model;
  fx::GraphModule module{nullptr};
  fx::TraceStats stats{};
  double milliseconds = 0;
};

Traced trace_zoo_model(const std::string& name,
                       const std::vector<fx::DynamicDim>& dynamic = {});
void print_stats(const Traced& t);

// --input: example inputs as specs (fx/io/input_spec.h).
void add_input_flag(Flags& flags, std::vector<std::string>* input);
std::vector<c10::IValue> example_inputs(const std::vector<std::string>& specs);

// --dynamic: dimensions that vary, comma-separated, each
// SYMBOL:INPUT:DIM[:MAX[:MULTIPLE_OF]] ("B:0:0:64,T:0:1:512"); and
// --specialize: a TorchScript file's sizes folded into the graph
// (TraceOptions::specialize_sizes).
struct ShapeFlags {
  std::vector<std::string> dynamic;
  bool specialize = false;

  void add_to(Flags& flags);
  // Throws UsageError naming a --dynamic spec that does not parse.
  std::vector<fx::DynamicDim> dynamic_dims() const;
};

// A bundled model traced (its statistics printed), or a file read: a
// TorchScript file traced on `input`, or a GraphModule file. `inputs` gets
// the example inputs when known. Throws UsageError when `name` names
// neither, or a TorchScript file comes without `input`, or `shapes` asks
// what the model's kind does not take.
fx::GraphModule open_model(const std::string& name,
                           const std::vector<std::string>& input,
                           std::vector<c10::IValue>* inputs,
                           const ShapeFlags& shapes = {});

// The same, but a bundled model is traced in eval mode, quietly (what
// pipeline stages and branches cut).
fx::GraphModule open_model_in_eval_mode(const std::string& name,
                                        const std::vector<std::string>& input,
                                        std::vector<c10::IValue>* inputs,
                                        const ShapeFlags& shapes = {});

// What a cache of specializations (--calls) traces for each new shape: the
// bundled model or TorchScript file `name` traced on those inputs (with
// `shapes`' --specialize). Throws UsageError for a GraphModule file, which
// cannot be traced again.
std::function<fx::GraphModule(const std::vector<c10::IValue>&)> retracer(
    const std::string& name, const ShapeFlags& shapes);

// --passes: pass names (`fx passes` lists them), comma-separated.
void add_passes_flag(Flags& flags, std::string* passes);
// Throws UsageError naming the known passes if one of `passes` is unknown:
// commands check before their work.
void check_passes(const std::string& passes);
// The passes run in order through fx::PassManager (module unchanged if
// `passes` is empty).
fx::PassResult run_passes(const fx::GraphModule& module,
                          const std::string& passes);

// --print: what to print of a module, comma-separated.
void add_print_flag(Flags& flags, std::string* print);
struct PrintModuleOptions {
  // graph and meta also print each init step's graph after the graph.
  bool init_steps = false;
};
// Throws UsageError unless each of `what` is graph, meta, tabular, code,
// readable or none: commands check before their work.
void check_print(const std::string& what);
// Prints each of `what` of `module` (checked first).
void print_module(const fx::GraphModule& module, const std::string& what,
                  const PrintModuleOptions& options = {});

// --peak_gflops, --bandwidth_gbps, --cache_mb: the cost model's machine.
struct MachineFlags {
  double peak_gflops = 100;
  double bandwidth_gbps = 20;
  double cache_mb = std::numeric_limits<double>::infinity();
  void add_to(Flags& flags);
  fx::Machine machine() const;
};

}  // namespace cli
