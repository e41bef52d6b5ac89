// GraphModule: a torch::nn::Module that runs a Graph (torch.fx's
// GraphModule).
//
//   fx::GraphModule gm = fx::symbolic_trace(model, torch::randn({1, 3, 224, 224}));
//   std::cout << gm->graph();                  // edit it, then:
//   gm->recompile();
//   at::Tensor y = gm(x).toTensor();           // or gm->forward({x})
//   gm->named_parameters();                    // "conv1.weight", ...
//
// A GraphModule owns only what its graph uses: the parameters, buffers and
// constants named by get_attr nodes and the leaf modules named by
// call_module nodes, registered under the same qualified paths as in the
// traced model (so named_parameters(), to(), parameters() for an optimizer
// all work). Tensors are shared with the model, not copied, as in torch.fx:
// a BatchNorm traced in training mode updates the model's running stats.
//
// The graph runs through an Executor compiled by recompile() (the
// constructor calls it): operators resolved once, values freed after their
// last use. Before running, forward checks each input against the guards the
// tracer recorded (dtype, device, rank, and the sizes the traced code read)
// and the training mode the trace was made in; a mismatch throws
// fx::GuardError saying what to do.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <ATen/core/ivalue.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "absl/container/flat_hash_map.h"
#include "fx/ir/graph.h"
#include "fx/runtime/leaf_module.h"

namespace fx {

class Executor;

// What a GraphModule takes besides its graph: tensors and leaf modules by
// qualified path. Entries here win over the root module's.
struct Attributes {
  std::map<std::string, at::Tensor> parameters;
  // Buffers, and constants captured by the tracer (`_tensor_constant0`).
  std::map<std::string, at::Tensor> buffers;
  std::map<std::string, LeafModule> modules;
  // The training mode the graph was traced in, when it matters: forward
  // refuses to run in the other mode, whose behaviour (dropout, batch_norm
  // statistics) the trace did not record.
  std::optional<bool> traced_training;
};

class GraphModuleImpl : public torch::nn::Module, public GraphOwner {
 public:
  // Takes each get_attr target from `attributes` or else from `root` (its
  // named_parameters() and named_buffers()), and each call_module target
  // from `attributes.modules`. Throws fx::GraphError naming a target that
  // is found in neither.
  GraphModuleImpl(const std::shared_ptr<torch::nn::Module>& root,
                  std::unique_ptr<Graph> graph, Attributes attributes = {});
  GraphModuleImpl(std::unique_ptr<Graph> graph, Attributes attributes);
  struct InitStep;
  // With init steps: registers every tensor of `attributes`, runs
  // `init_steps` in order (they read those tensors and each other's
  // outputs), then takes `graph`, which may read what the steps made
  // (script objects included). What fx::load and convert_fx build.
  GraphModuleImpl(std::unique_ptr<Graph> graph, Attributes attributes,
                  std::vector<InitStep> init_steps);
  ~GraphModuleImpl() override;

  // The graph, or the body standing in for it (with_body_as_graph).
  Graph& graph() { return body_ != nullptr ? *body_ : *graph_; }
  const Graph& graph() const { return body_ != nullptr ? *body_ : *graph_; }

  // Runs `fn` with `body`, a subgraph of this module's graph at any depth
  // (a branch of a cond, a while_loop's body), standing in for the graph:
  // graph() returns it meanwhile, so that a pass written for one graph
  // edits a body as it would the graph (PassManager runs the passes whose
  // work is local to a graph so: Pass::Bodies::kEachGraph). What `fn`
  // registers (folded weights, init steps) is this module's, which bodies
  // read by name; recompile() meanwhile compiles the whole graph, and
  // set_graph replaces the body. Throws fx::GraphError if `body` is not one
  // of this module's subgraphs.
  void with_body_as_graph(Graph& body, const std::function<void()>& fn);
  // `fn` with each body of graph() at every depth standing in for it in
  // turn (with_body_as_graph), outermost first; each found again after the
  // one before ran (which may have replaced it, and the bodies in it).
  void for_each_body(const std::function<void()>& fn);

  // Rebuilds the executor after the graph was edited; lints the graph
  // first. forward throws fx::GraphError if the graph changed since.
  void recompile();

  // Runs the graph: one input per placeholder, in order. (The only
  // forward, so that a GraphModule can sit in a torch::nn::Sequential or
  // AnyModule; the holder's gm(x, y) is the shorthand.)
  c10::IValue forward(std::vector<c10::IValue> inputs);

  // Converts the floating-point parameters and buffers (as
  // torch::nn::Module::to does) and re-specializes the graph to the new
  // dtype: the floating inputs' dtype guards, the tensor metadata, and
  // nothing else, so it runs in the new dtype as eager does. A graph that
  // names a dtype itself (aten::to(x, torch.float32), a factory's dtype=)
  // or holds script objects (packed weights) cannot follow: GraphError
  // naming the node, with the module left as it was. Devices other than
  // the CPU are refused (this libtorch has no other).
  void to(torch::Dtype dtype, bool non_blocking = false) override;
  void to(torch::Device device, torch::Dtype dtype,
          bool non_blocking = false) override;
  void to(torch::Device device, bool non_blocking = false) override;

  // The C++ of forward, as the code generator emits it (torch.fx's
  // gm.code): one statement per node calling the typed aten entry points.
  std::string code() const;
  // A class around code(), each statement annotated with its value's shape
  // and dtype, and the members it uses (torch.fx's print_readable).
  std::string print_readable() const;

  // The tensor a get_attr node with target `path` reads (torch.fx's
  // fetch_attr; Graph::get_attr makes the node, Interpreter::get_attr runs
  // it). Throws fx::GraphError if there is none.
  at::Tensor fetch_attr(const std::string& path) const;
  // What a get_attr of `path` reads: the tensor, or the script object.
  // Throws fx::GraphError if there is neither.
  c10::IValue fetch_attribute(const std::string& path) const;
  // The leaf module at `path`, or nullptr.
  const LeafModule* leaf_module(const std::string& path) const;
  bool has_tensor_attribute(const std::string& path) const override;
  // Script objects: instances of LibTorch's torchbind classes (quantized
  // packed weights, say) that init steps compute, as torch.fx keeps
  // ScriptObjects as attributes. A get_attr reads one like a tensor; they
  // are neither parameters nor buffers, and are never saved: fx::save keeps
  // the init step that makes one and fx::load runs it again.
  bool has_object_attribute(const std::string& path) const override;
  const std::map<std::string, c10::IValue>& object_attributes() const {
    return objects_;
  }
  // Whether the tensor attribute at `path` is registered as a parameter
  // (else a buffer). Throws fx::GraphError if there is none.
  bool is_parameter(const std::string& path) const;
  bool has_leaf_module(const std::string& path) const override;
  // Adds (or replaces) a parameter, buffer or leaf module at a qualified
  // path, creating empty parent modules as needed. For passes that make new
  // tensors (folded weights); call recompile() afterwards.
  void register_tensor_attribute(const std::string& path, at::Tensor tensor,
                                 bool is_parameter);
  void register_leaf_module(const std::string& path, LeafModule module);

  // --- Init steps (constant folding) ------------------------------------
  // Graphs that compute attributes from other attributes, once, before the
  // main graph runs (torch.fx's split_const_subgraphs: the const subgraph).
  // An init graph has no placeholders; its output is a tuple whose element
  // i is stored as `outputs[i]`: a tensor as a parameter that requires no
  // gradient (as torch.fx stores folded attributes), a script object as an
  // object attribute. Steps run in order, so a later one may read what an
  // earlier one made.
  struct InitStep {
    std::shared_ptr<const Graph> graph;
    std::vector<std::string> outputs;
  };
  const std::vector<InitStep>& init_steps() const { return init_steps_; }
  // Runs `step` now, registers its outputs, and keeps it.
  void add_init_step(InitStep step);
  // Runs every init step again, e.g. after new weights were loaded into the
  // tensors they read (torch.fx's FoldedGraphModule.run_folding), replacing
  // their outputs (copies made with copy() keep theirs), and recompiles.
  void run_init();

  // The training mode the graph was traced in, if it is guarded.
  std::optional<bool> traced_training() const { return traced_training_; }
  // A GraphModule with a copy of this graph that shares this one's
  // tensors and leaf modules (edit the copy freely).
  std::shared_ptr<GraphModuleImpl> copy() const;
  // Replaces the graph, as torch.fx's `gm.graph = new_graph` does (the
  // body standing in for it, under with_body_as_graph), and recompiles. Targets the new graph reads that this module lacks come
  // from `attributes`; init steps and registered attributes stay. Throws
  // fx::GraphError naming a missing target, leaving this module as it was.
  // For passes that build a new graph (re-tracing) but run in place.
  void set_graph(std::unique_ptr<Graph> graph, Attributes attributes = {});

  // Every tensor attribute and leaf module, by qualified path.
  const std::map<std::string, at::Tensor>& tensor_attributes() const {
    return tensors_;
  }
  const std::map<std::string, LeafModule>& leaf_modules() const {
    return leaves_;
  }

  void pretty_print(std::ostream& stream) const override;

 private:
  // What `graph` reads that this module lacks, found in `attributes` or
  // else `root` (throws naming a target found nowhere; changes nothing).
  struct FoundAttributes;
  FoundAttributes find_attributes(
      const Graph& graph, const std::shared_ptr<torch::nn::Module>& root,
      Attributes& attributes) const;
  // Registers what find_attributes found.
  void register_attributes(FoundAttributes& found);
  // Both: checks everything is found before registering any.
  void take_attributes(const Graph& graph,
                       const std::shared_ptr<torch::nn::Module>& root,
                       Attributes& attributes);
  torch::nn::Module& parent_module(const std::string& path,
                                   std::string* leaf_name);
  // Whether `module` is this GraphModule or one of the empty modules it
  // made to hold attributes (whose children are all in modules_).
  bool is_container(const torch::nn::Module& module) const;
  void check_inputs(const std::vector<c10::IValue>& inputs) const;
  // recompile() without the lint; `executor`, when given, was compiled
  // from graph_ already.
  void compile(std::unique_ptr<Executor> executor = nullptr);

  std::unique_ptr<Graph> graph_;
  // The body standing in for graph_ (with_body_as_graph), or null.
  Graph* body_ = nullptr;
  std::map<std::string, at::Tensor> tensors_;
  absl::flat_hash_map<std::string, bool> is_parameter_;
  std::map<std::string, LeafModule> leaves_;
  std::map<std::string, c10::IValue> objects_;
  // The module at each qualified path walked so far; ordered, so that the
  // paths below one are a range, and looked up by std::string_view.
  std::map<std::string, torch::nn::Module*, std::less<>> modules_;
  std::optional<bool> traced_training_;
  std::vector<InitStep> init_steps_;
  std::unique_ptr<Executor> executor_;
  uint64_t compiled_version_ = 0;
  // A tensor attribute replaced since the executor bound the old one.
  std::optional<std::string> replaced_since_compile_;
  struct Guard {
    std::string name;
    InputGuard guard;
    bool present = false;
  };
  std::vector<Guard> guards_;
};

// The module holder, as TORCH_MODULE(GraphModule) would declare it, plus
// a call operator taking the inputs directly: gm(x, y) == gm->forward({x, y}).
class GraphModule : public torch::nn::ModuleHolder<GraphModuleImpl> {
 public:
  using torch::nn::ModuleHolder<GraphModuleImpl>::ModuleHolder;
  using Impl = GraphModuleImpl;

  template <typename... Inputs>
  c10::IValue operator()(Inputs&&... inputs) {
    return get()->forward(std::vector<c10::IValue>{
        c10::IValue(std::forward<Inputs>(inputs))...});
  }
};

}  // namespace fx
