#include "interpreter/shape_prop.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <utility>

#include <ATen/core/grad_mode.h>
#include <ATen/ops/zeros.h>

#include "absl/strings/str_cat.h"
#include "fx/ir/control_flow.h"
#include "fx/ir/errors.h"
#include "fx/ir/operator_schemas.h"
#include "fx/runtime/buffer_snapshot.h"
#include "fx/runtime/guards.h"

namespace fx {
namespace {

// In ShapeProp::unbacked_sizes_: the operator's output keeps all it selects
// from, and that is kept as the symbol's max.
constexpr int64_t kAtBound = -1;

}  // namespace

ShapeProp::ShapeProp(GraphModule module, ShapePropOptions options)
    : Interpreter(std::move(module)), options_(options) {}

c10::IValue ShapeProp::propagate_keeping_buffers(std::vector<c10::IValue> inputs) {
  BufferSnapshot snapshot(*module_);
  c10::IValue result = propagate(std::move(inputs));
  snapshot.restore();
  return result;
}

c10::IValue ShapeProp::propagate(std::vector<c10::IValue> inputs) {
  recorded_.clear();
  unbacked_.clear();
  unbacked_example_.clear();
  unbacked_sizes_.reset();
  unbacked_count_ = 0;
  std::vector<c10::IValue> example;
  if (options_.symbolic) example = inputs;
  c10::IValue result;
  try {
    result = run(std::move(inputs));
  } catch (...) {
    recorded_.clear();
    throw;
  }
  Recording recorded = std::move(recorded_);
  recorded_.clear();
  if (options_.symbolic) fit_symbolic(recorded, example);
  for (const Graph* graph : module_->graph().all_graphs()) {
  for (Node* n : graph->nodes()) {
    auto it = recorded.find(n);
    if (it == recorded.end()) continue;
    Recorded& r = it->second;
    n->meta().erase(kTensorMeta.name);
    n->meta().erase(kTensorMetaList.name);
    switch (r.kind) {
      case Recorded::Kind::kTensor:
        n->meta().set(kTensorMeta, std::move(r.tensor));
        break;
      case Recorded::Kind::kTensorList:
        n->meta().set(kTensorMetaList, std::move(r.tensors));
        break;
      case Recorded::Kind::kNone: break;
    }
  }
  }
  return result;
}

void ShapeProp::fit_symbolic(Recording& example,
                             const std::vector<c10::IValue>& inputs) {
  std::vector<DynamicDim> dims = dynamic_dims(module_->graph());
  // The data-dependent sizes, unbounded where the inputs' sizes vary. With
  // fixed inputs, each is bounded by what its operator selects from at the
  // others' bounds (u1 among u0's rows may be as many as u0 can: not the
  // example's u0), found by a run with every such operator keeping all it
  // selects from, as the tracer finds them (fx/trace/internal/bounds.h).
  const bool fixed_inputs = dims.empty();
  // `resized` with each tensor that is the caller's own cloned: a graph that
  // writes into an input must not write the caller's again.
  auto own = [&inputs](std::vector<c10::IValue> resized) {
    for (size_t i = 0; i < resized.size(); ++i) {
      if (resized[i].isTensor() && inputs[i].isTensor() &&
          resized[i].toTensor().is_same(inputs[i].toTensor())) {
        resized[i] = resized[i].toTensor().clone();
      }
    }
    return resized;
  };
  if (fixed_inputs && !unbacked_.empty()) {
    SymbolSizes at_bounds;
    for (const DynamicDim& d : unbacked_) at_bounds[d.symbol] = kAtBound;
    std::vector<DynamicDim> found = unbacked_;
    BufferSnapshot snapshot(*module_);
    try {
      unbacked_sizes_ = at_bounds;
      unbacked_count_ = 0;
      run(own(inputs));
    } catch (const std::exception&) {
      // A graph that does not run there (a bound it checks): each bound
      // stays what the example's run selected from.
      unbacked_ = std::move(found);
    }
    unbacked_sizes_.reset();
    snapshot.restore();
    recorded_.clear();
  }
  for (DynamicDim d : unbacked_) {
    if (!fixed_inputs) d.max = std::numeric_limits<int64_t>::max();
    dims.push_back(d);
  }
  if (dims.empty()) return;
  SymbolSizes sizes = unbacked_example_;
  for (const DynamicDim& d : dims) {
    if (d.data_dependent()) continue;
    if (d.input >= inputs.size() || !inputs[d.input].isTensor() ||
        d.dim >= inputs[d.input].toTensor().dim()) {
      return;
    }
    const int64_t size = inputs[d.input].toTensor().size(d.dim);
    auto [it, added] = sizes.emplace(d.symbol, size);
    if (!added && it->second != size) return;
  }
  std::vector<SymbolSizes> all = {sizes};
  std::vector<Recording> runs;
  // Runs the graph at `at`; its recording joins `runs`.
  auto run_at = [&](const SymbolSizes& at) {
    recorded_.clear();
    unbacked_sizes_ = at;
    unbacked_count_ = 0;
    run(own(resized_inputs(inputs, dims, at)));
    runs.push_back(std::move(recorded_));
  };
  // The buffers as they were once the runs are done.
  BufferSnapshot snapshot(*module_);
  try {
    for (SymbolSizes& other : sample_sizes(dims, sizes)) {
      run_at(other);
      all.push_back(std::move(other));
    }
  } catch (const std::exception&) {
    // Sizes the graph does not run at: the example's metadata only.
    runs.clear();
  }
  // And, for sizes that depend on data with the inputs fixed, at their
  // bounds, so that a size the near runs explain by a function that does
  // not hold there (x.slice(0, 0, 20) is [u1] below 20) is left unknown
  // rather than wrong; left out where the graph does not run there (a bound
  // it checks). Not at the inputs' max: a run is a real forward, which at
  // B = 64 and T = 512 costs what a trace (metadata only) does not.
  SymbolSizes high = sizes;
  bool bounded = fixed_inputs && !runs.empty();
  for (const DynamicDim& d : dims) {  // all data-dependent, each bounded
    bounded = bounded && d.max >= 2;
    high[d.symbol] = d.max;
  }
  if (bounded && std::find(all.begin(), all.end(), high) == all.end()) {
    try {
      run_at(high);
      all.push_back(high);
    } catch (const std::exception&) {
    }
  }
  unbacked_sizes_.reset();
  snapshot.restore();
  recorded_.clear();
  if (runs.empty()) return;
  SymbolicShapeFitter fitter(all, symbol_multiples(dims));
  auto find = [](Recording& run, const Node* n) -> Recorded* {
    auto it = run.find(n);
    return it == run.end() ? nullptr : &it->second;
  };
  for (auto& [node, r] : example) {
    if (r.kind == Recorded::Kind::kTensor) {
      std::vector<TensorMeta*> metas = {&r.tensor};
      for (Recording& run : runs) {
        Recorded* other = find(run, node);
        metas.push_back(other && other->kind == Recorded::Kind::kTensor ? &other->tensor
                                                                        : nullptr);
      }
      fitter.fit(metas);
    } else if (r.kind == Recorded::Kind::kTensorList) {
      for (size_t k = 0; k < r.tensors.size(); ++k) {
        std::vector<TensorMeta*> metas = {&r.tensors[k]};
        for (Recording& run : runs) {
          Recorded* other = find(run, node);
          metas.push_back(other && other->kind == Recorded::Kind::kTensorList &&
                                  k < other->tensors.size()
                              ? &other->tensors[k]
                              : nullptr);
        }
        fitter.fit(metas);
      }
    }
  }
}

c10::IValue ShapeProp::run_node(const Node& node) {
  // A cond's branch not taken runs too (on the same operands, buffers
  // restored after), so that both bodies get metadata and are checked to
  // agree; a branch that fails on what the other takes is left as it was.
  std::optional<std::pair<bool, std::vector<c10::IValue>>> branch;
  if (is_control_flow_call(node) &&
      &node.target().function() == cond_function()) {
    auto [args, kwargs] = fetch_args_kwargs_from_env(node);
    if (args.size() == 4 && args[3].isList()) {
      branch.emplace(truth_of(args[0], "cond's predicate"),
                     args[3].toListRef().vec());
    }
  }
  std::optional<DataDependentSize> data_dependent;
  if (options_.symbolic && returns_data_dependent_size(node)) {
    auto [args, kwargs] = fetch_args_kwargs_from_env(node);
    const c10::FunctionSchema& schema = node.target().op().schema();
    try {
      data_dependent = data_dependent_size(
          schema, bind_arguments(schema, std::move(args), std::move(kwargs)));
    } catch (const GraphError&) {
      // A form whose size fx does not follow: it runs, its size as it is.
    }
  }
  c10::IValue value = data_dependent ? run_data_dependent(node, *data_dependent)
                                     : Interpreter::run_node(node);
  if (branch) check_other_branch(node, branch->first, branch->second, value);
  Recorded r;
  if (value.isTensor()) {
    r.kind = Recorded::Kind::kTensor;
    r.tensor = tensor_meta_of(value.toTensor());
  } else if (value.isTuple() || value.isList()) {
    c10::ArrayRef<c10::IValue> items =
        value.isTuple() ? value.toTupleRef().elements() : value.toListRef();
    bool all_tensors = !items.empty();
    for (const c10::IValue& item : items) {
      all_tensors = all_tensors && item.isTensor();
    }
    if (all_tensors) {
      r.kind = Recorded::Kind::kTensorList;
      for (const c10::IValue& item : items) {
        r.tensors.push_back(tensor_meta_of(item.toTensor()));
      }
    }
  }
  recorded_[&node] = std::move(r);
  return value;
}

c10::IValue ShapeProp::run_data_dependent(const Node& node,
                                          const DataDependentSize& size) {
  const size_t k = unbacked_count_++;
  if (!unbacked_sizes_) {
    c10::IValue value = Interpreter::run_node(node);
    if (k != unbacked_.size()) return value;  // (a body run again)
    const at::Tensor out =
        value.isTensor()  ? value.toTensor()
        : value.isList()  ? value.toListRef().at(size.output).toTensor()
                          : value.toTupleRef().elements().at(size.output).toTensor();
    std::vector<DynamicDim> taken = dynamic_dims(module_->graph());
    taken.insert(taken.end(), unbacked_.begin(), unbacked_.end());
    DynamicDim d;
    d.input = DynamicDim::kOperatorOutput;
    d.dim = size.dim;
    d.min = 0;
    d.max = size.max;
    d.symbol = data_dependent_symbol(k, taken);
    unbacked_example_[d.symbol] = out.size(size.dim);
    unbacked_.push_back(d);
    return value;
  }
  // At another size: zeros (valid indices, values and counts) of its shape;
  // at its bound, all it selects from here, kept as its max.
  int64_t u = k < unbacked_.size() ? unbacked_sizes_->at(unbacked_[k].symbol)
                                   : 0;
  if (u == kAtBound) {
    u = size.max;
    unbacked_[k].max = size.max;
  }
  auto [args, kwargs] = fetch_args_kwargs_from_env(node);
  at::Device device = args.empty() || !args[0].isTensor()
                          ? at::Device(at::kCPU)
                          : args[0].toTensor().device();
  std::vector<c10::IValue> outputs;
  const std::vector<std::vector<int64_t>> shapes = size.sizes_at(u);
  const std::vector<std::vector<int64_t>> strides = size.strides_at(u);
  for (size_t i = 0; i < shapes.size(); ++i) {
    outputs.emplace_back(at::zeros(
        shapes[i], at::TensorOptions().dtype(size.dtypes[i]).device(device))
        .as_strided(shapes[i], strides[i]));
  }
  if (size.list) {
    c10::List<at::Tensor> list;
    for (const c10::IValue& t : outputs) list.push_back(t.toTensor());
    return list;
  }
  if (outputs.size() == 1) return outputs[0];
  return c10::ivalue::Tuple::create(std::move(outputs));
}

void ShapeProp::check_other_branch(const Node& node, bool taken,
                                   const std::vector<c10::IValue>& operands,
                                   const c10::IValue& outputs) {
  const std::vector<const Graph*> bodies = bodies_of(node);
  const Graph& other = *bodies[taken ? 1 : 0];
  c10::IValue others;
  {
    BufferSnapshot snapshot(*module_);
    try {
      others = run_graph(other, operands);
    } catch (const c10::Error&) {
      snapshot.restore();
      return;
    }
    snapshot.restore();
  }
  auto items = [](const c10::IValue& v) {
    return v.isTuple() ? v.toTupleRef().elements().vec()
                       : std::vector<c10::IValue>{v};
  };
  const std::vector<c10::IValue> a = items(outputs);
  const std::vector<c10::IValue> b = items(others);
  const std::string names[2] = {bodies[0] == &other ? "the true branch"
                                                     : "the false branch",
                                bodies[0] == &other ? "the false branch"
                                                    : "the true branch"};
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    const std::string mine = i < a.size() ? value_description(a[i]) : "nothing";
    const std::string its = i < b.size() ? value_description(b[i]) : "nothing";
    if (mine != its) {
      throw ExecutionError(absl::StrCat(
          "ShapeProp: %", node.name(), "'s output ", i, " is ", its, " from ",
          names[0], " and ", mine, " from ", names[1],
          " on these inputs: a cond's branches return tensors of the same "
          "dtypes and sizes"));
    }
  }
}

void propagate_symbolic_shapes(GraphModule module, const std::string& who) {
  std::vector<c10::IValue> inputs;
  for (const Node* ph : module->graph().placeholders()) {
    const TensorMeta* meta = ph->meta().get(kTensorMeta);
    if (meta == nullptr) {
      throw GraphError(absl::StrCat(who, ": input %", ph->name(),
                                    " has no tensor metadata (shape and dtype) "
                                    "to run the graph on"));
    }
    inputs.emplace_back(at::zeros(meta->sizes, at::TensorOptions().dtype(meta->dtype)));
  }
  try {
    ShapeProp(module).propagate_keeping_buffers(inputs);
  } catch (const std::exception& e) {
    throw GraphError(absl::StrCat(
        who, ": the graph did not run on zeros of its example's shapes, which "
        "finding how its sizes follow its dynamic dimensions needs: ", e.what()));
  }
  for (const Node* ph : module->graph().placeholders()) {
    const InputGuard* guard = ph->meta().get(kGuard);
    if (guard != nullptr && !guard->dynamic.empty() &&
        ph->tensor_meta()->symbolic_sizes.empty()) {
      throw GraphError(absl::StrCat(
          who, ": the graph did not run at other sizes of its dynamic "
          "dimensions (", guard->to_string(), ", zeros as inputs), which "
          "finding how its sizes follow them needs; specialize its sizes "
          "(fx::specialize_sizes) or mend the bounds"));
    }
  }
}

}  // namespace fx
