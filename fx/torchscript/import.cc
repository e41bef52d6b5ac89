// TorchScript in: symbolic_trace of a torch::jit::Module, through the
// tracer.
#include "fx/torchscript/torchscript.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <torch/csrc/autograd/grad_mode.h>
#include <torch/csrc/jit/runtime/graph_executor.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
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

// The attributes of a module object and its submodules as they were when
// made: a forward that sets one (torchvision's AnchorGenerator sets
// `self.cell_anchors` on every call) leaves it to each trace in turn, and to
// the user's module after tracing, as it found it. A trace's values are
// proxies, which the next trace (or an eager call) must not read.
class AttributeState {
 public:
  explicit AttributeState(const c10::intrusive_ptr<c10::ivalue::Object>& root) {
    std::string path;
    save(root, &path);
  }

  // Restores every attribute the code set (a new value, or a list's
  // items changed in place); returns their qualified names.
  std::vector<std::string> restore() const {
    std::vector<std::string> changed;
    for (const Slot& s : slots_) {
      const c10::IValue& now = s.object->getSlot(s.index);
      if (unchanged(s, now)) continue;
      changed.push_back(s.name);
      if (s.items) {
        c10::List<c10::IValue> list = s.value.toList();
        list.clear();
        for (const c10::IValue& item : *s.items) list.push_back(item);
      }
      s.object->setSlot(s.index, s.value);
    }
    return changed;
  }

  // Whether attribute `name` now holds what it held when saved: the same
  // object, or equal tensors (same dtype, sizes and values), lists, tuples
  // and scalars.
  bool holds_saved_value(const std::string& name) const {
    for (const Slot& s : slots_) {
      if (s.name == name) {
        return equal(s.object->getSlot(s.index), s.value);
      }
    }
    return true;
  }

 private:
  struct Slot {
    c10::intrusive_ptr<c10::ivalue::Object> object;
    size_t index;
    std::string name;
    c10::IValue value;
    std::optional<std::vector<c10::IValue>> items;  // of a list
  };

  void save(const c10::intrusive_ptr<c10::ivalue::Object>& object,
            std::string* path) {
    const c10::ClassType& type = *object->type();
    const size_t prefix = path->size();
    for (size_t i = 0; i < type.numAttributes(); ++i) {
      path->append(type.getAttributeName(i));
      const c10::IValue& value = object->getSlot(i);
      if (value.isObject() && value.toObjectRef().type()->is_module()) {
        path->push_back('.');
        save(value.toObject(), path);
      } else {
        Slot slot{object, i, *path, value, std::nullopt};
        if (value.isList()) slot.items = value.toListRef().vec();
        slots_.push_back(std::move(slot));
      }
      path->resize(prefix);
    }
  }

  static bool unchanged(const Slot& s, const c10::IValue& now) {
    if (!now.isSameIdentity(s.value)) return false;
    if (!s.items) return true;
    const auto& items = now.toListRef();
    if (items.size() != s.items->size()) return false;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].isSameIdentity((*s.items)[i])) return false;
    }
    return true;
  }

  static bool equal(const c10::IValue& a, const c10::IValue& b) {
    if (a.isSameIdentity(b)) return true;
    if (a.isTensor() && b.isTensor()) {
      const at::Tensor& x = a.toTensor();
      const at::Tensor& y = b.toTensor();
      if (!x.defined() || !y.defined()) return x.defined() == y.defined();
      return x.scalar_type() == y.scalar_type() && x.device() == y.device() &&
             x.sizes() == y.sizes() && x.strides() == y.strides() &&
             x.has_storage() && y.has_storage() && x.equal(y);
    }
    if ((a.isList() && b.isList()) || (a.isTuple() && b.isTuple())) {
      const auto items = [](const c10::IValue& v) {
        return v.isList() ? v.toListRef().vec()
                          : v.toTupleRef().elements().vec();
      };
      const std::vector<c10::IValue> x = items(a), y = items(b);
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!equal(x[i], y[i])) return false;
      }
      return true;
    }
    if (a.isNone() || a.isBool() || a.isInt() || a.isDouble() ||
        a.isString() || a.isDevice()) {
      return a.tagKind() == b.tagKind() && a == b;
    }
    return false;
  }

  std::vector<Slot> slots_;
};

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
  // Each trace starts from the module's attributes as they are now, and
  // leaves them so; what forward set is checked below.
  const AttributeState state(module._ivalue());
  std::vector<std::string> set_by_forward;
  auto restoring = [&state, &set_by_forward](BoxedForward run) {
    return [&state, &set_by_forward,
            run](const std::vector<c10::IValue>& inputs) {
      struct Restore {
        const AttributeState& state;
        std::vector<std::string>& names;
        ~Restore() {
          for (std::string& name : state.restore()) {
            if (std::find(names.begin(), names.end(), name) == names.end()) {
              names.push_back(std::move(name));
            }
          }
        }
      } restore{state, set_by_forward};
      return run(inputs);
    };
  };
  using Inputs = std::vector<c10::IValue>;
  BoxedForward walk = restoring([&forward, sizes](const Inputs& inputs) {
    return internal::run_torchscript_method(
        forward, inputs, sizes ? detail::active_tracer() : nullptr);
  });
  BoxedForward interpret = restoring([&forward](const Inputs& inputs) {
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
  });
  Tracer tracer(options);
  std::unique_ptr<Graph> graph;
  try {
    graph = tracer.trace(named, walk, example_inputs);
  } catch (const internal::UnsupportedNode&) {
    graph = tracer.trace(named, interpret, example_inputs);
  }
  // A graph reads attributes as they were when traced, on every call. An
  // attribute forward sets is right only if forward sets it to what it
  // held (cell_anchors cast to the dtype and device they have): checked
  // by a call on the example inputs, after which the module is restored,
  // its buffers' values too (batch norm's statistics, in training).
  if (!set_by_forward.empty()) {
    std::vector<std::string> differ;
    {
      struct Restore {
        const AttributeState& state;
        std::vector<std::pair<at::Tensor, at::Tensor>> buffers;
        ~Restore() {
          state.restore();
          torch::NoGradGuard no_grad;
          for (auto& [buffer, value] : buffers) buffer.copy_(value);
        }
      } restore{state, {}};
      for (const auto& [name, buffer] : named.buffers) {
        restore.buffers.emplace_back(buffer, buffer.clone());
      }
      torch::jit::GraphOptimizerEnabledGuard no_optimization(false);
      forward(example_inputs);
      for (const std::string& name : set_by_forward) {
        if (!state.holds_saved_value(name)) differ.push_back(name);
      }
    }
    if (!differ.empty()) {
      throw TraceError(absl::StrCat(
          "forward sets the module attribute", differ.size() > 1 ? "s " : " ",
          absl::StrJoin(differ, ", "),
          " to a value other than it held: a graph reads attributes as they "
          "were when traced, on every call, so it cannot keep state from "
          "one call to the next; keep that state outside forward (an input "
          "and an output of the graph)"));
    }
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
