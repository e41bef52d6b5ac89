// TorchScript in: symbolic_trace of a torch::jit::Module, through the
// tracer.
#include "fx/torchscript/torchscript.h"

#include <memory>
#include <string>
#include <utility>

#include <torch/csrc/jit/runtime/graph_executor.h>

#include "fx/ir/errors.h"
#include "fx/torchscript/internal/torchscript_interpreter.h"

namespace fx {
namespace {

// The parameters and buffers of the module object `object` and its
// submodules by qualified name, as named_parameters() and named_buffers()
// give them, in one walk over the attribute slots (4x faster than those
// iterators, which rebuild each name). `path` holds the object's prefix
// ("layer1.0.") and is restored before returning.
void collect_tensors(const c10::ivalue::Object& object, std::string* path,
                     Attributes* out) {
  const c10::ClassType& type = *object.type();
  const size_t prefix = path->size();
  for (size_t i = 0; i < type.numAttributes(); ++i) {
    const c10::IValue& value = object.getSlot(i);
    const bool tensor = value.isTensor();
    const bool parameter = tensor && type.is_parameter(i);
    const bool buffer = tensor && !parameter && type.is_buffer(i) &&
                        value.toTensor().defined();
    const bool module = !tensor && value.isObject() &&
                        value.toObjectRef().type()->is_module();
    if (!parameter && !buffer && !module) continue;
    path->append(type.getAttributeName(i));
    if (module) {
      path->push_back('.');
      collect_tensors(value.toObjectRef(), path, out);
    } else {
      (parameter ? out->parameters : out->buffers)
          .emplace(*path, value.toTensor());
    }
    path->resize(prefix);
  }
}

}  // namespace

GraphModule symbolic_trace(const torch::jit::Module& module,
                           const std::vector<c10::IValue>& example_inputs,
                           TraceOptions options, TraceStats* stats) {
  Attributes named;
  std::string path;
  collect_tensors(*module._ivalue(), &path, &named);
  torch::jit::Method forward = module.get_method("forward");
  if (options.input_names.empty()) {
    const auto& arguments = forward.function().getSchema().arguments();
    // The given inputs; forward's defaults fill in the rest (detection
    // models' `targets=None`), as a TorchScript call does.
    for (size_t i = 1; i < arguments.size() && i <= example_inputs.size();
         ++i) {
      options.input_names.push_back(arguments[i].name());
    }
  }
  // Node by node, unless the module has a node kind only TorchScript's
  // interpreter runs (see internal/torchscript_interpreter.h).
  const bool sizes = !options.specialize_sizes;
  BoxedForward walk = [&forward, sizes](const std::vector<c10::IValue>& inputs) {
    return internal::run_torchscript_method(
        forward, inputs, sizes ? detail::active_tracer() : nullptr);
  };
  BoxedForward interpret = [&forward](const std::vector<c10::IValue>& inputs) {
    // The plain interpreter: no profiling runs, no fusion, each operator
    // called as the graph says.
    torch::jit::GraphOptimizerEnabledGuard no_optimization(false);
    try {
      return forward(inputs);
    } catch (const TraceError&) {
      throw;
    } catch (const c10::Error& e) {
      throw TraceError(e.what_without_backtrace());
    } catch (const std::exception& e) {
      // The interpreter rethrows errors (ours included) as its own
      // exception, with TorchScript's traceback: keep it, as a TraceError.
      throw TraceError(e.what());
    }
  };
  Tracer tracer(options);
  std::unique_ptr<Graph> graph;
  try {
    graph = tracer.trace(named, walk, example_inputs);
  } catch (const internal::UnsupportedNode&) {
    graph = tracer.trace(named, interpret, example_inputs);
  }
  if (stats != nullptr) *stats = tracer.stats();
  Attributes attributes = tracer.take_attributes();
  attributes.parameters.merge(named.parameters);
  attributes.buffers.merge(named.buffers);
  // As for a torch::nn::Module: the mode the trace recorded is guarded.
  attributes.traced_training = module.is_training();
  return GraphModule(std::move(graph), std::move(attributes));
}

}  // namespace fx
