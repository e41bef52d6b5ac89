#include "interpreter/transformer.h"

#include <ATen/ATen.h>

#include <optional>

#include "absl/strings/str_cat.h"
#include "fx/ir/control_flow.h"
#include "fx/ir/errors.h"
#include "fx/ir/function.h"
#include "fx/trace/control_flow.h"

namespace fx {
namespace {

bool is_list_check(const Node& n) {
  return n.op() == Opcode::kCallFunction && n.target().is_operator() &&
         n.target().op().schema().name() == "fx_guard::check_length";
}

at::Tensor example_tensor(const InputGuard& guard, const TensorMeta* meta) {
  if (meta != nullptr) {
    return at::empty_strided(meta->sizes, meta->strides,
                             at::TensorOptions()
                                 .dtype(meta->dtype)
                                 .device(meta->device));
  }
  return at::empty(guard.sizes, at::TensorOptions()
                                    .dtype(guard.dtype)
                                    .device(guard.device));
}

// The value a kValue guard prints, read back: 3, 2.5, True, None, 'text'.
c10::IValue parse_value(const std::string& printed) {
  if (printed == "True") return true;
  if (printed == "False") return false;
  if (printed == "None") return c10::IValue();
  if (printed.size() >= 2 && printed.front() == '\'') {
    std::string out;
    for (size_t i = 1; i + 1 < printed.size(); ++i) {
      if (printed[i] == '\\' && i + 2 < printed.size()) ++i;
      out += printed[i];
    }
    return out;
  }
  if (printed.find_first_of(".eEn") != std::string::npos) {
    return std::stod(printed);
  }
  return static_cast<int64_t>(std::stoll(printed));
}

std::vector<c10::IValue> examples_from_meta(const Graph& graph) {
  std::vector<c10::IValue> examples;
  for (Node* ph : graph.placeholders()) {
    const InputGuard* guard = ph->meta().get(kGuard);
    const TensorMeta* meta = ph->meta().get(kTensorMeta);
    if (guard == nullptr) {
      if (meta == nullptr) {
        throw GraphError(absl::StrCat(
            "Transformer: placeholder %", ph->name(),
            " has no guard or tensor_meta to build an example from: pass "
            "example inputs to transform()"));
      }
      examples.emplace_back(example_tensor(InputGuard(), meta));
      continue;
    }
    switch (guard->kind) {
      case InputGuard::Kind::kTensor:
        examples.emplace_back(example_tensor(*guard, meta));
        break;
      case InputGuard::Kind::kTensorList: {
        c10::List<at::Tensor> list;
        const auto* metas = ph->meta().get(kTensorMetaList);
        for (size_t i = 0; i < guard->elements.size(); ++i) {
          list.push_back(example_tensor(
              guard->elements[i],
              metas != nullptr && i < metas->size() ? &(*metas)[i] : nullptr));
        }
        examples.emplace_back(std::move(list));
        break;
      }
      case InputGuard::Kind::kValue:
        examples.push_back(parse_value(guard->value));
        break;
    }
  }
  return examples;
}

}  // namespace

Transformer::Transformer(GraphModule module) : Interpreter(std::move(module)) {}

Transformer::~Transformer() = default;

GraphModule Transformer::transform() {
  return transform(examples_from_meta(module_->graph()));
}

GraphModule Transformer::transform(
    const std::vector<c10::IValue>& example_inputs) {
  Result result = transform_graph(example_inputs);
  return GraphModule(module_.ptr(), std::move(result.graph),
                     std::move(result.attributes));
}

Transformer::Result Transformer::transform_graph() {
  return transform_graph(examples_from_meta(module_->graph()));
}

Transformer::Result Transformer::transform_graph(
    const std::vector<c10::IValue>& example_inputs) {
  TraceOptions options;
  std::vector<Node*> old_placeholders = module_->graph().placeholders();
  for (Node* ph : old_placeholders) {
    options.input_names.push_back(ph->target().str());
    // Dynamic dimensions stay dynamic: traced at other sizes too.
    if (const InputGuard* guard = ph->meta().get(kGuard)) {
      options.dynamic.insert(options.dynamic.end(), guard->dynamic.begin(),
                             guard->dynamic.end());
    }
  }
  Tracer tracer(options);
  tracer_ = &tracer;
  sizes_.clear();
  list_checks_ = false;
  for (const Node* n : module_->graph().nodes()) {
    list_checks_ = list_checks_ || is_list_check(*n);
  }
  struct Reset {
    Tracer** tracer;
    absl::flat_hash_map<const Node*, Node*>* sizes;
    ~Reset() {
      *tracer = nullptr;
      sizes->clear();
    }
  } reset{&tracer_, &sizes_};
  std::unique_ptr<Graph> graph = tracer.trace(
      module_.ptr(),
      [this](const std::vector<c10::IValue>& inputs) { return run(inputs); },
      example_inputs);
  // The old graph's guards hold: what it specialized, the new one has too;
  // unless the new one is specialized to sizes the old one left free (an
  // override used a size as an int): then its own guards do.
  std::vector<Node*> placeholders = graph->placeholders();
  for (size_t i = 0; i < placeholders.size(); ++i) {
    const InputGuard* guard = old_placeholders[i]->meta().get(kGuard);
    if (guard == nullptr) continue;
    if (tracer.stats().read_sizes && !guard->sizes_fixed() &&
        options.dynamic.empty()) {
      continue;
    }
    placeholders[i]->meta().set(kGuard, *guard);
  }
  Attributes attributes = tracer.take_attributes();
  attributes.traced_training = module_->traced_training();
  return {std::move(graph), std::move(attributes)};
}

Argument Transformer::new_sizes(const Argument& old) const {
  return map_arg(old, [this](Node* n) {
    auto it = sizes_.find(n);
    return it == sizes_.end() ? Argument() : Argument(it->second);
  });
}

c10::IValue Transformer::run_node(const Node& node) {
  if (tracer_ == nullptr) return Interpreter::run_node(node);
  // The new trace checks the lists the calls below return itself.
  if (list_checks_ && is_list_check(node)) return c10::IValue();
  bool lists = false;
  if (list_checks_ && node.op() == Opcode::kCallFunction &&
      node.target().is_operator()) {
    for (const auto& r : node.target().op().schema().returns()) {
      lists = lists || r.type()->kind() == c10::TypeKind::ListType;
    }
  }
  Tracer::ListLengthChecks checks(lists ? tracer_ : nullptr,
                                  lists ? "%" + node.name() : "");
  // The sizes an operator call takes are the new graph's size nodes.
  std::vector<std::pair<size_t, Argument>> sizes;
  if (!sizes_.empty() && !is_sym_call(node)) {
    const c10::FunctionSchema* schema =
        node.op() == Opcode::kCallFunction && node.target().is_operator()
            ? &node.target().op().schema()
            : nullptr;
    auto add = [&](std::optional<size_t> index, const Argument& old) {
      Argument value = new_sizes(old);
      if (!value.contains_node()) return;
      if (!index) {
        // An int to C++ code (a leaf module, a wrapped function), or out.
        tracer_->specialize_sizes(absl::StrCat("%", node.name()));
        return;
      }
      sizes.emplace_back(*index, std::move(value));
    };
    for (size_t i = 0; i < node.args().size(); ++i) {
      add(schema ? std::optional<size_t>(i) : std::nullopt, node.args()[i]);
    }
    for (const auto& [name, value] : node.kwargs()) {
      std::optional<size_t> index;
      if (schema != nullptr) {
        if (auto i = schema->argumentIndexWithName(name)) index = *i;
      }
      add(index, value);
    }
  }
  // Ended below, whether or not a node took it.
  const bool substituted = !sizes.empty();
  if (substituted) {
    tracer_->substitute_next(node.target().op().schema().operator_name(),
                             std::move(sizes));
  }
  const std::string* path = node.meta().get(kModulePath);
  std::optional<detail::ModulePathScope> scope;
  if (path != nullptr) scope.emplace(tracer_, *path);
  c10::IValue out = Interpreter::run_node(node);
  if (substituted && tracer_->end_substitution()) {
    tracer_->specialize_sizes(absl::StrCat("%", node.name()));
  }
  return out;
}

c10::IValue Transformer::call_function(const Node& node, const Target& target,
                                       std::vector<c10::IValue> args,
                                       IValueKwargs kwargs) {
  // Sizes and their arithmetic are recorded as the same nodes.
  if (tracer_ != nullptr && target.is_function() &&
      is_sym_function(target.function()) && kwargs.empty() &&
      args.size() == 2 && node.args().size() == 2) {
    const Function& f = target.function();
    if (&f == sym_size()) {
      if (args[0].isTensor() && args[1].isInt()) {
        auto [size, value] = tracer_->record_sym_size(
            args[0].toTensor(), args[1].toInt(), node.name());
        if (size != nullptr) sizes_[&node] = size;
        return value;
      }
    } else {
      Argument a = new_sizes(node.args()[0]);
      Argument b = new_sizes(node.args()[1]);
      c10::IValue value = f(args);
      if ((a.contains_node() || b.contains_node()) && args[0].isInt() &&
          args[1].isInt()) {
        if (!a.contains_node()) a = args[0].toInt();
        if (!b.contains_node()) b = args[1].toInt();
        sizes_[&node] = tracer_->record_sym_call(&f, a, b, node.name());
      }
      return value;
    }
  }
  // cond and while_loop: traced again through fx::cond and fx::while_loop,
  // their bodies run node by node here, so that overrides apply inside.
  if (tracer_ != nullptr && is_control_flow_call(node)) {
    return control_flow(node, args);
  }
  if (tracer_ != nullptr && target.is_function() &&
      &target.function() != getitem() && !is_sym_function(target.function())) {
    if (!kwargs.empty()) {
      throw GraphError(absl::StrCat(target.to_string(),
                                    " takes no keyword arguments"));
    }
    const Function* function = &target.function();
    return tracer_->call_function(
        function,
        [function](const std::vector<c10::IValue>& inputs) {
          return (*function)(inputs);
        },
        std::move(args));
  }
  return Interpreter::call_function(node, target, std::move(args),
                                    std::move(kwargs));
}

namespace {

std::vector<at::Tensor> tensors_of(const c10::IValue& value,
                                   const Node& node) {
  std::vector<at::Tensor> out;
  auto add = [&](const c10::IValue& v) {
    if (!v.isTensor()) {
      throw GraphError(absl::StrCat(
          "the Transformer: %", node.name(), " passes a ", v.tagKind(),
          " to or from a body; bodies take and return tensors"));
    }
    out.push_back(v.toTensor());
  };
  if (value.isTuple()) {
    for (const c10::IValue& v : value.toTupleRef().elements()) add(v);
  } else if (value.isList()) {
    for (const c10::IValue& v : value.toListRef()) add(v);
  } else {
    add(value);
  }
  return out;
}

// A body as fx::cond and fx::while_loop take it: run on the tensors `in`
// and then `extra` (while_loop's additional values).
BodyFunction body_function(const c10::IValue& body, const Node& node,
                           const std::vector<at::Tensor>& extra = {}) {
  const Body* b = &as_body(body, "a body of control flow");
  return [b, &node, extra](const std::vector<at::Tensor>& in) {
    std::vector<c10::IValue> inputs(in.begin(), in.end());
    inputs.insert(inputs.end(), extra.begin(), extra.end());
    return tensors_of(b->run(std::move(inputs)), node);
  };
}

c10::IValue tuple_of(const std::vector<at::Tensor>& values) {
  return c10::ivalue::Tuple::create(
      std::vector<c10::IValue>(values.begin(), values.end()));
}

}  // namespace

c10::IValue Transformer::control_flow(const Node& node,
                                      const std::vector<c10::IValue>& args) {
  if (&node.target().function() == cond_function()) {
    const std::vector<at::Tensor> operands = tensors_of(args.at(3), node);
    if (!args.at(0).isTensor()) {
      // A bool or an int: the branch it picks, as eager takes it.
      const bool pred = truth_of(args[0], "cond's predicate");
      return tuple_of(body_function(args.at(pred ? 1 : 2), node)(operands));
    }
    return tuple_of(cond(args[0].toTensor(), body_function(args.at(1), node),
                         body_function(args.at(2), node), operands));
  }
  if (&node.target().function() == map_function()) {
    const std::vector<at::Tensor> additional = tensors_of(args.at(2), node);
    return tuple_of(fx::map(body_function(args.at(0), node, additional),
                            tensors_of(args.at(1), node)));
  }
  const std::vector<at::Tensor> additional = tensors_of(args.at(3), node);
  if (&node.target().function() == scan_function()) {
    const std::vector<at::Tensor> init = tensors_of(args.at(1), node);
    BodyFunction combine = body_function(args.at(0), node, additional);
    const size_t carried = init.size();
    ScanResult r = fx::scan(
        [&](const std::vector<at::Tensor>& c, const std::vector<at::Tensor>& x) {
          std::vector<at::Tensor> in = c;
          in.insert(in.end(), x.begin(), x.end());
          std::vector<at::Tensor> out = combine(in);
          return std::pair<std::vector<at::Tensor>, std::vector<at::Tensor>>{
              {out.begin(), out.begin() + std::min(carried, out.size())},
              {out.begin() + std::min(carried, out.size()), out.end()}};
        },
        init, tensors_of(args.at(2), node));
    r.carried.insert(r.carried.end(), r.ys.begin(), r.ys.end());
    return tuple_of(r.carried);
  }
  BodyFunction cond_graph = body_function(args.at(0), node, additional);
  BodyFunction body_graph = body_function(args.at(1), node, additional);
  return tuple_of(while_loop(
      [&](const std::vector<at::Tensor>& carried) {
        std::vector<at::Tensor> out = cond_graph(carried);
        if (out.size() != 1) {
          throw GraphError(absl::StrCat(
              "the Transformer: the cond_graph of %", node.name(),
              " returns ", out.size(), " values; it returns one"));
        }
        return out[0];
      },
      body_graph, tensors_of(args.at(2), node)));
}

c10::IValue Transformer::call_module(const Node& node, const Target& target,
                                     std::vector<c10::IValue> args,
                                     IValueKwargs kwargs) {
  if (tracer_ == nullptr) {
    return Interpreter::call_module(node, target, std::move(args),
                                    std::move(kwargs));
  }
  if (!kwargs.empty()) {
    throw GraphError(absl::StrCat(target.to_string(),
                                  " takes no keyword arguments"));
  }
  const LeafModule* leaf = module_->leaf_module(target.str());
  if (leaf == nullptr) {
    throw GraphError(absl::StrCat("no leaf module at '", target.str(), "'"));
  }
  return tracer_->call_leaf_module(target.str(), *leaf, std::move(args));
}

}  // namespace fx
