#include "interpreter/interpreter.h"

#include <functional>

#include <ATen/core/dispatch/Dispatcher.h>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "fx/ir/control_flow.h"
#include "fx/ir/errors.h"
#include "fx/ir/function.h"
#include "fx/runtime/internal/executor.h"

namespace fx {

Interpreter::Interpreter(GraphModule module) : module_(std::move(module)) {
  // torch.fx's user_to_last_uses: walk backwards, the first user seen of a
  // node is its last (in the graph and in each body of control flow).
  for (const Graph* graph : module_->graph().all_graphs()) {
    absl::flat_hash_set<const Node*> seen;
    for (Node* n : graph->nodes().reversed()) {
      for (Node* input : n->all_input_nodes()) {
        if (seen.insert(input).second) last_uses_[n].push_back(input);
      }
    }
  }
}

Interpreter::~Interpreter() = default;

c10::IValue Interpreter::run(std::vector<c10::IValue> inputs) {
  return run_graph(module_->graph(), std::move(inputs));
}

c10::IValue Interpreter::run_graph(const Graph& graph,
                                   std::vector<c10::IValue> inputs) {
  if (inputs.size() != graph.placeholders().size()) {
    throw ExecutionError(absl::StrCat("Interpreter: the graph takes ",
                                      graph.placeholders().size(),
                                      " input(s) but ", inputs.size(),
                                      " were given"));
  }
  // A body runs inside its node's call: the enclosing run's state waits.
  struct Saved {
    Interpreter& i;
    absl::flat_hash_map<const Node*, c10::IValue> env;
    std::vector<c10::IValue> inputs;
    size_t next_input;
    explicit Saved(Interpreter& interpreter)
        : i(interpreter),
          env(std::move(i.env_)),
          inputs(std::move(i.inputs_)),
          next_input(i.next_input_) {}
    ~Saved() {
      i.env_ = std::move(env);
      i.inputs_ = std::move(inputs);
      i.next_input_ = next_input;
    }
  } saved(*this);
  inputs_ = std::move(inputs);
  next_input_ = 0;
  env_.clear();
  c10::IValue result;
  for (Node* n : graph.nodes()) {
    c10::IValue value;
    try {
      value = run_node(*n);
    } catch (...) {
      rethrow_for_node(*n);
    }
    if (n->op() == Opcode::kOutput) {
      result = std::move(value);
      break;
    }
    env_[n] = std::move(value);
    auto it = last_uses_.find(n);
    if (it != last_uses_.end()) {
      for (const Node* dead : it->second) env_.erase(dead);
    }
  }
  return result;
}

namespace {

// A body of control flow run node by node by the Interpreter that read it
// (and its overrides: ShapeProp records the body's nodes), while that run
// lasts.
class InterpretedBody : public Body {
 public:
  InterpretedBody(const Graph* graph,
                  std::function<c10::IValue(const Graph&,
                                            std::vector<c10::IValue>)> run)
      : graph_(graph), run_(std::move(run)) {}
  c10::IValue run(std::vector<c10::IValue> inputs) const override {
    return run_(*graph_, std::move(inputs));
  }

 private:
  const Graph* graph_;
  std::function<c10::IValue(const Graph&, std::vector<c10::IValue>)> run_;
};

}  // namespace

const c10::IValue& Interpreter::value_of(const Node& node) const {
  auto it = env_.find(&node);
  if (it == env_.end()) {
    throw GraphError(absl::StrCat("Interpreter: %", node.name(),
                                  " has no value (used before it is "
                                  "defined, or after its last use)"));
  }
  return it->second;
}

c10::IValue Interpreter::materialize(const Argument& arg) {
  if (arg.is_node()) return value_of(*arg.to_node());
  if (!arg.contains_node()) return argument_to_ivalue(arg);
  std::vector<c10::IValue> values;
  for (const Argument& e : arg.elements()) values.push_back(materialize(e));
  if (arg.is_tuple()) return c10::ivalue::Tuple::create(std::move(values));
  bool all_tensors = !values.empty();
  for (const c10::IValue& v : values) all_tensors = all_tensors && v.isTensor();
  if (all_tensors) {
    c10::List<at::Tensor> list;
    for (c10::IValue& v : values) list.push_back(std::move(v).toTensor());
    return list;
  }
  c10::impl::GenericList list(c10::AnyType::get());
  for (c10::IValue& v : values) list.push_back(std::move(v));
  return list;
}

std::pair<std::vector<c10::IValue>, IValueKwargs>
Interpreter::fetch_args_kwargs_from_env(const Node& node) {
  std::vector<c10::IValue> args;
  args.reserve(node.args().size());
  for (const Argument& a : node.args()) args.push_back(materialize(a));
  IValueKwargs kwargs;
  for (const auto& [name, value] : node.kwargs()) {
    kwargs.emplace_back(name, materialize(value));
  }
  return {std::move(args), std::move(kwargs)};
}

c10::IValue Interpreter::run_node(const Node& node) {
  auto [args, kwargs] = fetch_args_kwargs_from_env(node);
  switch (node.op()) {
    case Opcode::kPlaceholder:
      return placeholder(node, node.target(), std::move(args),
                         std::move(kwargs));
    case Opcode::kGetAttr:
      return get_attr(node, node.target(), std::move(args), std::move(kwargs));
    case Opcode::kCallFunction:
      return call_function(node, node.target(), std::move(args),
                           std::move(kwargs));
    case Opcode::kCallModule:
      return call_module(node, node.target(), std::move(args),
                         std::move(kwargs));
    case Opcode::kCallMethod:
      return call_method(node, node.target(), std::move(args),
                         std::move(kwargs));
    case Opcode::kOutput:
      return output(node, node.target(), std::move(args), std::move(kwargs));
  }
  throw GraphError("unknown opcode");
}

c10::IValue Interpreter::placeholder(const Node& /*node*/,
                                     const Target& /*target*/,
                                     std::vector<c10::IValue> /*args*/,
                                     IValueKwargs /*kwargs*/) {
  return std::move(inputs_.at(next_input_++));
}

c10::IValue Interpreter::get_attr(const Node& node, const Target& target,
                                  std::vector<c10::IValue> /*args*/,
                                  IValueKwargs /*kwargs*/) {
  // A body of control flow runs node by node in this Interpreter.
  if (const Graph* body = node.graph().subgraph(target.str())) {
    return body_value(c10::make_intrusive<InterpretedBody>(
        body, [this](const Graph& g, std::vector<c10::IValue> in) {
          return run_graph(g, std::move(in));
        }));
  }
  return module_->fetch_attribute(target.str());
}

namespace {

c10::IValue call_operator(const c10::OperatorHandle& op,
                          std::vector<c10::IValue> args, IValueKwargs kwargs) {
  std::vector<c10::IValue> stack =
      bind_arguments(op.schema(), std::move(args), std::move(kwargs));
  op.callBoxed(&stack);
  if (stack.size() == 1) return std::move(stack[0]);
  if (stack.empty()) return c10::IValue();
  return c10::ivalue::Tuple::create(std::move(stack));
}

void require_no_kwargs(const Target& target, const IValueKwargs& kwargs) {
  if (!kwargs.empty()) {
    throw GraphError(absl::StrCat(
        target.to_string(),
        " takes no keyword arguments (C++ functions and modules have none)"));
  }
}

}  // namespace

c10::IValue Interpreter::call_function(const Node& /*node*/,
                                       const Target& target,
                                       std::vector<c10::IValue> args,
                                       IValueKwargs kwargs) {
  if (target.is_operator()) {
    return call_operator(target.op(), std::move(args), std::move(kwargs));
  }
  require_no_kwargs(target, kwargs);
  return target.function()(args);
}

c10::IValue Interpreter::call_module(const Node& /*node*/, const Target& target,
                                     std::vector<c10::IValue> args,
                                     IValueKwargs kwargs) {
  require_no_kwargs(target, kwargs);
  const LeafModule* leaf = module_->leaf_module(target.str());
  if (leaf == nullptr) {
    throw GraphError(absl::StrCat("no leaf module at '", target.str(), "'"));
  }
  return leaf->forward(args);
}

c10::IValue Interpreter::call_method(const Node& /*node*/, const Target& target,
                                     std::vector<c10::IValue> args,
                                     IValueKwargs kwargs) {
  c10::OperatorHandle op = resolve_method(target.str(), args, kwargs);
  return call_operator(op, std::move(args), std::move(kwargs));
}

c10::IValue Interpreter::output(const Node& /*node*/, const Target& /*target*/,
                                std::vector<c10::IValue> args,
                                IValueKwargs /*kwargs*/) {
  return std::move(args.at(0));
}

}  // namespace fx
