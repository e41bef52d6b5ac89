// The symbolic tracer: runs a module's C++ forward on proxy tensors and
// records every operator it calls into a Graph (torch.fx's symbolic_trace).
//
//   ResNet18 model;
//   model->eval();
//   fx::GraphModule gm = fx::symbolic_trace(model, torch::randn({1, 3, 224, 224}));
//   std::cout << gm->graph();
//
//   graph():
//       %x : [#users=1] = placeholder[target=x]
//       %conv1_weight : [#users=1] = get_attr[target=conv1.weight]
//       %conv2d : [#users=1] = call_function[target=aten::conv2d](args = (%x, %conv1_weight, None, [2, 2], [3, 3]), kwargs = {})
//       ...
//
// How it works: each example input is replaced by a proxy, a tensor with
// sizes, strides, dtype and device but no data, carrying the dispatch key
// DeferredInit. A boxed fallback on that key sees every operator called on a
// proxy and, because the key is also included for the whole thread while
// tracing, every operator called on parameters (F::linear's weight.t()) and
// every factory call (torch::ones). It records a call_function node and
// returns proxies whose metadata come from meta kernels, shape rules, or as
// a counted last resort the real kernel on zero-filled inputs.
//
// What C++ changes compared with torch.fx:
// - Sizes read in C++ are plain integers, so a traced program that reads
//   the sizes of a proxy (x.size(0), x.sizes(), numel(), most C++ frontend
//   modules that reshape) is specialized to the example shapes. The tracer
//   notices such reads and records the input shapes as guards on the
//   placeholders; the GraphModule rejects other shapes with fx::GuardError.
//   A program that reads no sizes is guarded on dtype, device and rank only.
// - Values that are not tensors (ints, bools, strings) given as inputs are
//   baked into the graph as constants and guarded for equality.
// - Module calls are plain C++ calls the tracer cannot see. Calls made
//   through fx::call(submodule, args...) are visible: they become call_module
//   nodes when Tracer::is_leaf_module says so, and otherwise are traced
//   through with the module path recorded in each node's meta. By default
//   every module is traced through down to aten operators.
// - Control flow that depends on data (item(), tensor-to-bool, equal() of two
//   different tensors, nonzero()) raises fx::TraceError naming the operator
//   and how to get around it.
// - Random factories (torch::randn, torch::rand_like, dropout in training)
//   are recorded as nodes, so the GraphModule draws new numbers on each run
//   (torch.fx bakes them as constants).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <ATen/core/ivalue.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "fx/ir/function.h"
#include "fx/ir/graph.h"
#include "fx/runtime/boxing.h"
#include "fx/runtime/graph_module.h"
#include "fx/runtime/leaf_module.h"

namespace fx {

// A body of control flow (fx/trace/control_flow.h): tensors in, tensors
// out.
using BodyFunction =
    std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;

struct TraceOptions {
  // Placeholder names, one per input. Default: "x" for a single input,
  // otherwise "x0", "x1", ... (C++ does not expose forward's parameter
  // names).
  std::vector<std::string> input_names;
  // Qualified paths of submodules to keep as call_module nodes when called
  // through fx::call (used by the default Tracer::is_leaf_module).
  std::set<std::string> leaf_modules;
  // Record a C++ backtrace of each recorded call in its node's meta
  // (kStackTrace). Slow: for debugging. The program's own frames are named
  // only when it is linked with -rdynamic.
  bool record_stack_traces = false;
  // Dimensions of the example inputs that vary from run to run (a batch, a
  // sequence length, an image side), each named by a symbol with optional
  // bounds. The graph then reads the sizes it uses from its inputs (sym_size
  // nodes) instead of baking in the example's, and its guards check the
  // relations instead of the sizes. C++ reads sizes as plain integers, so
  // the tracer traces twice more at other sizes, checks that the graphs
  // agree node for node, fits each size that changed as a function of the
  // dynamic ones and checks the fit on a trace it was not made from. A
  // program whose graph changes with a size (a branch or a loop count on
  // it) is refused with the first node that differs.
  //   options.dynamic = {{.input = 0, .dim = 0, .symbol = "B", .max = 64},
  //                      {.input = 0, .dim = 1, .symbol = "T", .max = 512}};
  // What the three traces cannot see: a program that changes only between
  // sizes none of them used (bound the dimension to where it does not).
  std::vector<DynamicDim> dynamic;
  // TorchScript modules compute their sizes in the graph TorchScript loaded
  // (aten::size and integer arithmetic, or prim::NumToTensor and aten::Int
  // in a torch.jit.trace file), and the trace records that computation as
  // sym_* nodes: the graph runs every shape TorchScript runs. A size used as
  // a constant (a branch or loop count on it, a float made from it) makes
  // the trace specialized to the example shapes, as for C++ code. Set this
  // to specialize them always (sizes folded into literals, shapes guarded).
  bool specialize_sizes = false;
};

// How the tracer obtained output metadata, for benchmarks and tests.
struct TraceStats {
  int64_t nodes = 0;
  // Operators whose outputs were described without running anything...
  int64_t in_place = 0;    // in-place ops: the output is the input
  int64_t shape_rule = 0;  // fx's own shape rules (conv, batch_norm, ...)
  int64_t meta_kernel = 0;
  int64_t shape_function = 0;  // TorchScript's shape function registry
  // ...and the last resort: the real kernel on zero-filled inputs.
  int64_t real_kernel = 0;
  // Leaf modules and wrapped functions run on zero-filled inputs.
  int64_t opaque_calls = 0;
  // Whether the traced program read the sizes of a proxy (so the graph is
  // specialized to the example shapes and guards them).
  bool read_sizes = false;
  // What specialized it, when the tracer knows: the TorchScript node that
  // used a size as a constant ("aten::eq at model.py:12").
  std::string specialized_by;
  // Traces run: 1, or 3 with dynamic dimensions (the other two give the
  // metadata's symbolic sizes even when the program read no size), and
  // where it read sizes, those at the dimensions' bounds (usually 2).
  int64_t traces = 1;
  // The bounds of dynamic dimensions the tracer narrowed because the trace
  // at a bound failed or differed, one line each, naming the node:
  // "1 <= T <= 16 (was 1 <= T <= 64): the trace at T=17: ...". Each is
  // also given to TORCH_WARN.
  std::vector<std::string> narrowed;
};

class Tracer {
 public:
  explicit Tracer(TraceOptions options = {});
  virtual ~Tracer();
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  // Traces `forward`, a call into `root` (may be null, for plain
  // functions), on proxies standing for `example_inputs`. Parameters and
  // buffers of root become get_attr nodes; other tensors the program uses
  // become constants (_tensor_constant0, ...). Throws fx::TraceError; a
  // failed trace leaves the module, its parameters and the thread's
  // dispatch state as they were.
  std::unique_ptr<Graph> trace(const std::shared_ptr<torch::nn::Module>& root,
                               const BoxedForward& forward,
                               const std::vector<c10::IValue>& example_inputs);
  // The same for a program that is not a torch::nn::Module (a TorchScript
  // module, say) whose parameters and buffers are given by qualified name
  // in `named.parameters` and `named.buffers`: those it reads become
  // get_attr nodes with these names. take_attributes() afterwards holds
  // only the constants; GraphModule(graph, attributes) takes the rest from
  // `named`.
  std::unique_ptr<Graph> trace(const Attributes& named,
                               const BoxedForward& forward,
                               const std::vector<c10::IValue>& example_inputs);

  // What a GraphModule of the last trace needs besides root and graph:
  // constants, leaf modules, the traced training mode.
  //   auto graph = tracer.trace(model, forward, inputs);
  //   fx::GraphModule gm(model, std::move(graph), tracer.take_attributes());
  Attributes take_attributes();
  const TraceStats& stats() const { return stats_; }
  const TraceOptions& options() const { return options_; }

  // --- Overridable, as in torch.fx ------------------------------------

  // Whether a submodule called through fx::call becomes one call_module
  // node. Default: whether its path is in TraceOptions::leaf_modules.
  virtual bool is_leaf_module(const torch::nn::Module& module,
                              const std::string& qualified_path);
  // Creates every node the tracer records.
  virtual Node* create_node(Opcode op, const Target& target,
                            std::vector<Argument> args, Kwargs kwargs,
                            const std::string& name);
  // The argument a tensor seen during tracing becomes: its node for a
  // proxy, a get_attr node for a parameter or buffer of root (by identity),
  // and a new constant attribute for any other tensor.
  virtual Argument create_arg(const at::Tensor& tensor);
  // The proxy standing for the value of `node`.
  virtual at::Tensor create_proxy(Node* node, const TensorMeta& meta);

  // --- Used by fx::call and fx::wrap; not for direct use -----------------
  std::string module_path(const torch::nn::Module& module) const;
  c10::IValue call_leaf_module(const std::string& path, LeafModule leaf,
                               std::vector<c10::IValue> inputs);
  c10::IValue call_function(const Function* function,
                            const BoxedFunction& impl,
                            std::vector<c10::IValue> inputs);
  void push_module_path(const std::string& path);
  void pop_module_path();

  // --- Used by fx::cond and fx::while_loop; not for direct use ---------
  // A body of control flow traced into a graph of its own.
  struct TracedBody {
    std::unique_ptr<Graph> graph;
    // Values of the calling graph the body reads: its placeholders after
    // the inputs', in this order.
    std::vector<Node*> lifted;
    std::vector<TensorMeta> outputs;
  };
  // Traces `fn` on proxies of `inputs` (placeholders of the new graph),
  // `lift_first` lifted before it runs (another body's, so that both take
  // their operands in one order).
  TracedBody trace_body(const BodyFunction& fn,
                        const std::vector<at::Tensor>& inputs,
                        const std::vector<Node*>& lift_first);
  // Gives `body` placeholders for the values of `lifted` (which starts with
  // body.lifted) it lacks.
  static void lift_more(TracedBody& body, const std::vector<Node*>& lifted);
  // Adds `body` to the graph being recorded as a subgraph named `base`_N;
  // returns the get_attr node reading it.
  Node* add_body(TracedBody body, const std::string& base);
  // Records the call of cond or while_loop and returns proxies of its
  // outputs, described by `outputs`.
  std::vector<at::Tensor> record_control_flow(
      const Function* function, std::vector<Argument> args,
      const std::vector<TensorMeta>& outputs);

  // --- Sizes as graph values: used by the TorchScript import and the
  // Transformer, which see the size arithmetic of the program they run
  // (TorchScript's, a graph's sym_* nodes); not for direct use.
  //
  // sym_size(tensor, dim) without specializing the trace, and its value
  // (no node for a tensor that is not a proxy: its sizes are fixed).
  std::pair<Node*, int64_t> record_sym_size(const at::Tensor& tensor,
                                            int64_t dim,
                                            const std::string& name = "");
  // sym_add, sym_mul or sym_floordiv of two nodes or ints.
  Node* record_sym_call(const Function* function, Argument a, Argument b,
                        const std::string& name = "");
  // The next call of `op` the trace records as a node takes, for each
  // (argument index, value), the size nodes in `value` in place of the ints
  // at the same places in that argument (an int, or an element of an int
  // list): [%B, -1] for the literal [1, -1].
  void substitute_next(const c10::OperatorName& op,
                       std::vector<std::pair<size_t, Argument>> args);
  // Ends substitute_next. Returns whether no node took the substitution:
  // the trace is then specialized (name the call with specialize_sizes).
  bool end_substitution();
  // A size was used as a constant (a branch, a loop count, a float) by
  // `reason`: the trace is specialized to the inputs' sizes.
  void specialize_sizes(const std::string& reason);
  // Whether the running trace is specialized to the inputs' sizes so far.
  bool sizes_specialized() const;
  // While it lives, an operator returning a list of tensors (chunk, split,
  // unbind: their number follows from a size) is followed by a check of
  // that number (fx_guard::check_length) instead of specializing the trace;
  // `where` names the call, for the check's message. Without a tracer it
  // does nothing.
  class ListLengthChecks {
   public:
    ListLengthChecks(Tracer* tracer, const std::string& where);
    ~ListLengthChecks();
    ListLengthChecks(const ListLengthChecks&) = delete;
    ListLengthChecks& operator=(const ListLengthChecks&) = delete;

   private:
    Tracer* tracer_;
  };

  struct Session;

 private:
  friend struct Session;
  // The session of the running trace; throws fx::TraceError naming `what`
  // outside a trace.
  Session& active_session(const char* what) const;
  Argument output_argument(const c10::IValue& value);
  std::unique_ptr<Graph> trace(const std::shared_ptr<torch::nn::Module>& root,
                               const Attributes* named,
                               const BoxedForward& forward,
                               const std::vector<c10::IValue>& example_inputs);
  std::unique_ptr<Graph> trace_once(
      const std::shared_ptr<torch::nn::Module>& root, const Attributes* named,
      const BoxedForward& forward,
      const std::vector<c10::IValue>& example_inputs);

  // The size the next operator whose output's size depends on data
  // (fx/ir/data_dependent.h) returns in this trace: its symbol's, which the
  // first trace makes (u0, u1, ... in the order they run, from 0 to `max`).
  int64_t unbacked_size(const std::string& op, int64_t max);

  TraceOptions options_;
  TraceStats stats_;
  Attributes attributes_;
  std::unique_ptr<Session> session_;
  // The symbols of data-dependent sizes (DynamicDim::data_dependent), the
  // size each takes in the trace running (the first trace's: a hint), and
  // the trace's nodes that return them (with the output's index).
  std::vector<DynamicDim> unbacked_;
  SymbolSizes unbacked_sizes_;
  std::vector<std::pair<Node*, size_t>> unbacked_nodes_;
  bool finding_unbacked_ = false;
};

namespace detail {
// The tracer recording on this thread, or nullptr.
Tracer* active_tracer();

template <typename T>
struct IsModuleHolder : std::false_type {};
template <typename T>
struct IsModuleHolder<std::shared_ptr<T>>
    : std::is_base_of<torch::nn::Module, T> {};
template <typename T>
constexpr bool is_module_v =
    IsModuleHolder<std::decay_t<T>>::value ||
    std::is_base_of_v<torch::detail::ModuleHolderIndicator, std::decay_t<T>>;

// Each T is one input (not a std::vector of inputs, which IValue claims to
// take but cannot).
template <typename... T>
constexpr bool all_ivalues_v =
    ((std::is_constructible_v<c10::IValue, T> &&
      !std::is_same_v<std::decay_t<T>, std::vector<c10::IValue>>) &&
     ...);

// A function pointer or an object with one operator() (a lambda).
template <typename F, typename = void>
struct HasCallOperator : std::false_type {};
template <typename F>
struct HasCallOperator<F, std::void_t<decltype(&F::operator())>>
    : std::true_type {};
// A TorchScript module (torch::jit::Module): callable, but traced by the
// overload fx/torchscript/torchscript.h declares.
template <typename F, typename = void>
struct IsScriptModule : std::false_type {};
template <typename F>
struct IsScriptModule<F, std::void_t<decltype(std::declval<const F&>()
                                                  .find_method(""))>>
    : std::true_type {};
template <typename F>
constexpr bool is_script_module_v = IsScriptModule<std::decay_t<F>>::value;
template <typename F>
constexpr bool is_function_v =
    std::is_function_v<std::remove_pointer_t<std::decay_t<F>>> ||
    HasCallOperator<std::decay_t<F>>::value;

// Records a path while tracing through a non-leaf module.
class ModulePathScope {
 public:
  ModulePathScope(Tracer* tracer, const std::string& path) : tracer_(tracer) {
    tracer_->push_module_path(path);
  }
  ~ModulePathScope() { tracer_->pop_module_path(); }

 private:
  Tracer* tracer_;
};
}  // namespace detail

// Whether a trace is recording on this thread.
inline bool is_tracing() { return detail::active_tracer() != nullptr; }

// Traces a module (a std::shared_ptr<Impl> or TORCH_MODULE holder whose
// forward is not overloaded) on example inputs: tensors, ints, doubles,
// bools, strings, lists of tensors.
GraphModule symbolic_trace(const std::shared_ptr<torch::nn::Module>& root,
                           const BoxedForward& forward,
                           const std::vector<c10::IValue>& example_inputs,
                           const TraceOptions& options = {});

template <typename ModuleType, typename... Inputs,
          std::enable_if_t<detail::is_module_v<ModuleType> &&
                               detail::all_ivalues_v<Inputs...>,
                           int> = 0>
GraphModule symbolic_trace(const ModuleType& module,
                           Inputs&&... example_inputs) {
  auto ptr = detail::module_ptr(module);
  return symbolic_trace(ptr, box_forward(ptr, ptr->name() + ".forward"),
                        {c10::IValue(std::forward<Inputs>(example_inputs))...});
}

// Traces a plain function over tensors (a function pointer or a lambda with
// one operator()); tensors it uses that are not inputs become constants.
template <typename Function, typename... Inputs,
          std::enable_if_t<!detail::is_module_v<Function> &&
                               detail::is_function_v<Function> &&
                               detail::all_ivalues_v<Inputs...>,
                           int> = 0>
GraphModule symbolic_trace(Function fn, Inputs&&... example_inputs) {
  static_assert(!detail::is_script_module_v<Function>,
                "fx::symbolic_trace of a torch::jit::Module: include "
                "\"fx/torchscript/torchscript.h\" and pass the inputs as a "
                "list: fx::symbolic_trace(module, {inputs...}[, options])");
  return symbolic_trace(nullptr, box_function(std::move(fn)),
                        {c10::IValue(std::forward<Inputs>(example_inputs))...});
}

// The same with options (dynamic dimensions, leaf modules, input names):
//   fx::symbolic_trace(model, {tokens}, options)
template <typename ModuleType,
          std::enable_if_t<detail::is_module_v<ModuleType>, int> = 0>
GraphModule symbolic_trace(const ModuleType& module,
                           const std::vector<c10::IValue>& example_inputs,
                           const TraceOptions& options) {
  auto ptr = detail::module_ptr(module);
  return symbolic_trace(ptr, box_forward(ptr, ptr->name() + ".forward"),
                        example_inputs, options);
}
template <typename Function,
          std::enable_if_t<!detail::is_module_v<Function> &&
                               detail::is_function_v<Function>,
                           int> = 0>
GraphModule symbolic_trace(Function fn,
                           const std::vector<c10::IValue>& example_inputs,
                           const TraceOptions& options) {
  static_assert(!detail::is_script_module_v<Function>,
                "fx::symbolic_trace of a torch::jit::Module: include "
                "\"fx/torchscript/torchscript.h\", which declares the "
                "overload that traces it");
  return symbolic_trace(nullptr, box_function(std::move(fn)), example_inputs,
                        options);
}

// Calls `module->forward(args...)`, visibly to the tracer: use it in a
// forward for the submodules that should be able to appear as call_module
// nodes (leaf modules) or carry their path into node meta. When not tracing
// it is a plain call.
//   x = fx::call(gate, x);   // instead of gate->forward(x) / gate(x)
template <typename ModuleType, typename... Args>
auto call(const ModuleType& module, Args&&... args)
    -> decltype(detail::module_ptr(module)->forward(
        std::forward<Args>(args)...)) {
  auto ptr = detail::module_ptr(module);
  using Result = decltype(ptr->forward(std::forward<Args>(args)...));
  Tracer* tracer = detail::active_tracer();
  if (tracer == nullptr) return ptr->forward(std::forward<Args>(args)...);
  std::string path = tracer->module_path(*ptr);
  if (!tracer->is_leaf_module(*ptr, path)) {
    detail::ModulePathScope scope(tracer, path);
    return ptr->forward(std::forward<Args>(args)...);
  }
  std::vector<c10::IValue> inputs{detail::to_ivalue(args)...};
  c10::IValue out = tracer->call_leaf_module(
      path, LeafModule{ptr, box_forward(ptr, path + ".forward")},
      std::move(inputs));
  if constexpr (std::is_void_v<Result>) {
    return;
  } else {
    return detail::from_ivalue<std::decay_t<Result>>(out);
  }
}

// A C++ function that traces as one opaque call_function node (torch.fx's
// wrap): the tracer does not look inside, and the GraphModule calls it.
//   static const auto my_nms = fx::wrap("myproject::nms", &nms);
//   ... y = my_nms(boxes, scores);   // in a forward
// Its outputs' metadata come from running it on zero-filled inputs while
// tracing. Declare it pure if it has no side effects, so that dead code
// elimination may remove unused calls.
template <typename F>
class WrappedFunction {
 public:
  WrappedFunction(std::string name, F fn, bool is_pure)
      : fn_(fn),
        boxed_(box_function(fn, name)),
        function_(register_function(std::move(name), boxed_, is_pure)) {}

  template <typename... Args>
  auto operator()(Args&&... args) const
      -> decltype(std::declval<const F&>()(std::forward<Args>(args)...)) {
    using Result = decltype(fn_(std::forward<Args>(args)...));
    Tracer* tracer = detail::active_tracer();
    if (tracer == nullptr) return fn_(std::forward<Args>(args)...);
    c10::IValue out = tracer->call_function(
        function_, boxed_, {detail::to_ivalue(args)...});
    if constexpr (std::is_void_v<Result>) {
      return;
    } else {
      return detail::from_ivalue<std::decay_t<Result>>(out);
    }
  }

  const Function* function() const { return function_; }

 private:
  F fn_;
  BoxedFunction boxed_;
  const Function* function_;
};

template <typename F>
WrappedFunction<F> wrap(std::string name, F fn, bool is_pure = false) {
  return WrappedFunction<F>(std::move(name), fn, is_pure);
}

}  // namespace fx
