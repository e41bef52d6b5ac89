#include "fx/runtime/graph_module.h"

#include <optional>
#include <ostream>
#include <string_view>

#include <torch/utils.h>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "fx/emit/cpp_code.h"
#include "fx/ir/errors.h"
#include "fx/runtime/guards.h"
#include "fx/runtime/internal/executor.h"

namespace fx {
namespace {

// The empty modules a GraphModule creates to hold tensors at qualified
// paths ("layer1" and "0" for "layer1.0.conv1.weight"), as torch.fx does.
class AttributeModule : public torch::nn::Module {
 public:
  AttributeModule() : torch::nn::Module("Module") {}
  void set_parameter(const std::string& name, const at::Tensor& tensor) {
    parameters_[name] = tensor;
  }
};

}  // namespace

GraphModuleImpl::GraphModuleImpl(const std::shared_ptr<torch::nn::Module>& root,
                                 std::unique_ptr<Graph> graph,
                                 Attributes attributes)
    : torch::nn::Module("GraphModule"), graph_(std::move(graph)) {
  if (!graph_) throw GraphError("GraphModule: the graph is null");
  graph_->lint();
  take_attributes(*graph_, root, attributes);
  traced_training_ = attributes.traced_training;
  if (traced_training_) train(*traced_training_);
  graph_->set_owner(this);
  // Linted above; take_attributes found every get_attr and call_module
  // target, which is what lint checks of an owned graph besides.
  compile();
}

GraphModuleImpl::GraphModuleImpl(std::unique_ptr<Graph> graph,
                                 Attributes attributes)
    : GraphModuleImpl(nullptr, std::move(graph), std::move(attributes)) {}

GraphModuleImpl::GraphModuleImpl(std::unique_ptr<Graph> graph,
                                 Attributes attributes,
                                 std::vector<InitStep> init_steps)
    : torch::nn::Module("GraphModule"), graph_(std::make_unique<Graph>()) {
  if (!graph) throw GraphError("GraphModule: the graph is null");
  graph_->output(Argument());
  graph_->set_owner(this);
  // Leaf modules first, so that tensors under a leaf's path reuse it.
  for (const auto& [path, leaf] : attributes.modules) {
    register_leaf_module(path, leaf);
  }
  for (const auto& [path, tensor] : attributes.parameters) {
    register_tensor_attribute(path, tensor, /*is_parameter=*/true);
  }
  for (const auto& [path, tensor] : attributes.buffers) {
    register_tensor_attribute(path, tensor, /*is_parameter=*/false);
  }
  for (InitStep& step : init_steps) add_init_step(std::move(step));
  attributes.parameters.clear();
  attributes.buffers.clear();
  graph->lint();
  take_attributes(*graph, nullptr, attributes);
  traced_training_ = attributes.traced_training;
  if (traced_training_) train(*traced_training_);
  graph_->set_owner(nullptr);
  graph_ = std::move(graph);
  graph_->set_owner(this);
  compile();  // linted above; take_attributes found every target
}

GraphModuleImpl::~GraphModuleImpl() {
  if (graph_) graph_->set_owner(nullptr);
}

void GraphModuleImpl::for_each_body(const std::function<void()>& fn) {
  Graph& top = graph();
  for (size_t i = 1;; ++i) {
    std::vector<Graph*> graphs = top.all_graphs();
    if (i >= graphs.size()) return;
    with_body_as_graph(*graphs[i], fn);
  }
}

void GraphModuleImpl::with_body_as_graph(Graph& body,
                                         const std::function<void()>& fn) {
  if (&body == graph_.get() || &body.root() != graph_.get()) {
    throw GraphError(
        "GraphModule::with_body_as_graph: the graph given is not a body of "
        "this module's graph (a subgraph read by cond or while_loop)");
  }
  struct Restore {
    Graph*& slot;
    Graph* previous;
    ~Restore() { slot = previous; }
  } restore{body_, body_};
  body_ = &body;
  fn();
}

namespace {

// The parameters and buffers of a module by qualified path, walked once
// and only if needed; a GraphModule's own map when the root is one.
class RootTensors {
 public:
  explicit RootTensors(const std::shared_ptr<torch::nn::Module>& root)
      : root_(root) {}

  // The tensor at `path` and whether it is a parameter, or nullptr.
  const std::pair<at::Tensor, bool>* find(const std::string& path) {
    if (!root_) return nullptr;
    if (!walked_) walk();
    auto it = tensors_.find(path);
    return it == tensors_.end() ? nullptr : &it->second;
  }

 private:
  void walk() {
    walked_ = true;
    if (auto* gm = dynamic_cast<const GraphModuleImpl*>(root_.get())) {
      for (const auto& [path, tensor] : gm->tensor_attributes()) {
        tensors_.emplace(path, std::make_pair(tensor, gm->is_parameter(path)));
      }
      return;
    }
    for (const auto& item : root_->named_parameters(/*recurse=*/true)) {
      tensors_.emplace(item.key(), std::make_pair(item.value(), true));
    }
    for (const auto& item : root_->named_buffers(/*recurse=*/true)) {
      tensors_.emplace(item.key(), std::make_pair(item.value(), false));
    }
  }

  std::shared_ptr<torch::nn::Module> root_;
  bool walked_ = false;
  absl::flat_hash_map<std::string, std::pair<at::Tensor, bool>> tensors_;
};

}  // namespace

struct GraphModuleImpl::FoundAttributes {
  struct Tensor {
    const std::string* path;  // a node's target, alive with the graph
    at::Tensor tensor;
    bool is_parameter;
  };
  std::vector<std::pair<std::string, LeafModule*>> leaves;
  std::vector<Tensor> tensors;
};

GraphModuleImpl::FoundAttributes GraphModuleImpl::find_attributes(
    const Graph& graph, const std::shared_ptr<torch::nn::Module>& root,
    Attributes& attributes) const {
  FoundAttributes found;
  // The bodies of control flow read the module's attributes too.
  std::vector<Node*> calls, reads;
  for (const Graph* g : graph.all_graphs()) {
    for (Node* n : g->find_nodes(Opcode::kCallModule)) calls.push_back(n);
    for (Node* n : g->find_nodes(Opcode::kGetAttr)) {
      if (!Graph::reads_subgraph(*n)) reads.push_back(n);
    }
  }
  for (Node* n : calls) {
    const std::string& path = n->target().str();
    if (leaves_.count(path)) continue;
    auto it = attributes.modules.find(path);
    if (it == attributes.modules.end()) {
      throw GraphError(absl::StrCat(
          "GraphModule: call_module target '", path,
          "' has no module: pass it in Attributes::modules "
          "(fx::make_leaf_module)"));
    }
    found.leaves.emplace_back(path, &it->second);
  }
  RootTensors root_tensors(root);
  absl::flat_hash_set<absl::string_view> seen;
  for (Node* n : reads) {
    const std::string& path = n->target().str();
    if (!seen.insert(absl::string_view(path)).second) continue;
    if (auto parameter = attributes.parameters.find(path);
        parameter != attributes.parameters.end()) {
      found.tensors.push_back({&path, parameter->second, true});
    } else if (auto buffer = attributes.buffers.find(path);
               buffer != attributes.buffers.end()) {
      found.tensors.push_back({&path, buffer->second, false});
    } else if (tensors_.count(path) || objects_.count(path)) {
      continue;
    } else if (const auto* in_root = root_tensors.find(path)) {
      found.tensors.push_back({&path, in_root->first, in_root->second});
    } else {
      throw GraphError(absl::StrCat(
          "GraphModule: get_attr target '", path,
          "' is not a parameter or buffer of the root module nor in the "
          "given Attributes"));
    }
  }
  return found;
}

void GraphModuleImpl::register_attributes(FoundAttributes& found) {
  // Leaf modules first, so that tensors under a leaf's path reuse it.
  for (auto& [path, leaf] : found.leaves) register_leaf_module(path, *leaf);
  for (FoundAttributes::Tensor& f : found.tensors) {
    auto existing = tensors_.find(*f.path);
    if (existing != tensors_.end() && existing->second.is_same(f.tensor) &&
        is_parameter_.at(*f.path) == f.is_parameter) {
      continue;
    }
    register_tensor_attribute(*f.path, std::move(f.tensor), f.is_parameter);
  }
}

void GraphModuleImpl::take_attributes(
    const Graph& graph, const std::shared_ptr<torch::nn::Module>& root,
    Attributes& attributes) {
  FoundAttributes found = find_attributes(graph, root, attributes);
  register_attributes(found);
}

bool GraphModuleImpl::is_container(const torch::nn::Module& module) const {
  return &module == this ||
         dynamic_cast<const AttributeModule*>(&module) != nullptr;
}

torch::nn::Module& GraphModuleImpl::parent_module(const std::string& path,
                                                  std::string* leaf_name) {
  // Fast path: the parent was walked before.
  size_t dot = path.rfind('.');
  if (dot != std::string::npos && dot + 1 < path.size()) {
    auto cached = modules_.find(std::string_view(path.data(), dot));
    if (cached != modules_.end()) {
      *leaf_name = path.substr(dot + 1);
      return *cached->second;
    }
  }
  std::vector<std::string> parts = absl::StrSplit(path, '.');
  for (const std::string& part : parts) {
    if (part.empty()) {
      throw GraphError(absl::StrCat("'", path,
                                    "' is not a valid qualified path"));
    }
  }
  *leaf_name = parts.back();
  parts.pop_back();
  torch::nn::Module* current = this;
  size_t prefix_size = 0;
  for (const std::string& part : parts) {
    prefix_size += (prefix_size == 0 ? 0 : 1) + part.size();
    std::string_view prefix(path.data(), prefix_size);
    auto cached = modules_.find(prefix);
    if (cached != modules_.end()) {
      current = cached->second;
      continue;
    }
    // Every child this GraphModule or its containers have was registered
    // here and is cached; only a leaf module's own children need a lookup
    // (named_children copies them all, so not for the root: that would make
    // building a GraphModule quadratic).
    const std::shared_ptr<torch::nn::Module>* child = nullptr;
    torch::OrderedDict<std::string, std::shared_ptr<torch::nn::Module>>
        children;
    if (!is_container(*current)) {
      children = current->named_children();
      child = children.find(part);
    }
    current = child != nullptr
                  ? child->get()
                  : current
                        ->register_module(part,
                                          std::make_shared<AttributeModule>())
                        .get();
    modules_.emplace(prefix, current);
  }
  return *current;
}

void GraphModuleImpl::register_tensor_attribute(const std::string& path,
                                                at::Tensor tensor,
                                                bool is_parameter) {
  std::string name;
  torch::nn::Module& parent = parent_module(path, &name);
  auto* container = dynamic_cast<AttributeModule*>(&parent);
  // The containers this GraphModule made hold only what was registered
  // here; other parents (leaf modules) may hold the name already.
  // One lookup for both the check and the insertion below.
  auto slot = tensors_.lower_bound(path);
  const bool present = slot != tensors_.end() && slot->first == path;
  const bool fresh = container != nullptr && !present;
  const at::Tensor* existing_param = nullptr;
  const at::Tensor* existing_buffer = nullptr;
  std::optional<torch::OrderedDict<std::string, at::Tensor>> params, buffers;
  if (!fresh) {
    params = parent.named_parameters(/*recurse=*/false);
    buffers = parent.named_buffers(/*recurse=*/false);
    existing_param = params->find(name);
    existing_buffer = buffers->find(name);
  }
  const at::Tensor* existing = existing_param ? existing_param : existing_buffer;
  if (existing != nullptr) {
    bool same_kind = (existing_param != nullptr) == is_parameter;
    if (existing->unsafeGetTensorImpl() != tensor.unsafeGetTensorImpl() ||
        !same_kind) {
      if (container == nullptr || !is_parameter || !same_kind) {
        throw GraphError(absl::StrCat(
            "GraphModule: cannot replace '", path,
            "' (a ", existing_param ? "parameter" : "buffer",
            " of a leaf module, the GraphModule itself, or of another "
            "kind); register the new tensor under a new name"));
      }
      container->set_parameter(name, tensor);
    }
  } else if (is_parameter) {
    parent.register_parameter(name, tensor, tensor.requires_grad());
  } else {
    parent.register_buffer(name, tensor);
  }
  if (present && !slot->second.is_same(tensor)) {
    // The executor bound the old tensor when it compiled.
    replaced_since_compile_ = path;
  }
  tensors_.insert_or_assign(slot, path, std::move(tensor));
  is_parameter_[path] = is_parameter;
}

void GraphModuleImpl::register_leaf_module(const std::string& path,
                                           LeafModule module) {
  if (!module.module || !module.forward) {
    throw GraphError(absl::StrCat("GraphModule: the leaf module for '", path,
                                  "' needs a module and a forward"));
  }
  std::string name;
  torch::nn::Module& parent = parent_module(path, &name);
  bool exists = modules_.count(path) > 0;
  if (!exists && !is_container(parent)) {
    exists = parent.named_children().find(name) != nullptr;
  }
  if (exists) {
    parent.replace_module(name, module.module);
  } else {
    parent.register_module(name, module.module);
  }
  // Forget what was cached under the old module at this path.
  // ("layer1." and not "layer1": "layer10" is not below it.)
  const std::string below = path + ".";
  auto first = modules_.lower_bound(below);
  auto last = first;
  while (last != modules_.end() && absl::StartsWith(last->first, below)) ++last;
  modules_.erase(first, last);
  modules_[path] = module.module.get();
  leaves_[path] = std::move(module);
}

at::Tensor GraphModuleImpl::fetch_attr(const std::string& path) const {
  auto it = tensors_.find(path);
  if (it == tensors_.end()) {
    throw GraphError(absl::StrCat("GraphModule has no tensor attribute '",
                                  path, "'"));
  }
  return it->second;
}

c10::IValue GraphModuleImpl::fetch_attribute(const std::string& path) const {
  if (auto it = tensors_.find(path); it != tensors_.end()) return it->second;
  if (auto it = objects_.find(path); it != objects_.end()) return it->second;
  throw GraphError(absl::StrCat("GraphModule has no tensor or object '", path,
                                "'"));
}

bool GraphModuleImpl::has_object_attribute(const std::string& path) const {
  return objects_.count(path) > 0;
}

const LeafModule* GraphModuleImpl::leaf_module(const std::string& path) const {
  auto it = leaves_.find(path);
  return it == leaves_.end() ? nullptr : &it->second;
}

bool GraphModuleImpl::has_tensor_attribute(const std::string& path) const {
  return tensors_.count(path) > 0;
}

bool GraphModuleImpl::is_parameter(const std::string& path) const {
  auto it = is_parameter_.find(path);
  if (it == is_parameter_.end()) {
    throw GraphError(absl::StrCat("GraphModule has no tensor attribute '",
                                  path, "'"));
  }
  return it->second;
}

bool GraphModuleImpl::has_leaf_module(const std::string& path) const {
  return leaves_.count(path) > 0;
}

namespace {

ExecutionEnvironment environment_of(const GraphModuleImpl& module) {
  ExecutionEnvironment env;
  env.attribute = [&module](const std::string& path) {
    return module.fetch_attribute(path);
  };
  env.module = [&module](const std::string& path) {
    return module.leaf_module(path);
  };
  return env;
}

}  // namespace

void GraphModuleImpl::add_init_step(InitStep step) {
  if (!step.graph) throw GraphError("add_init_step: the graph is null");
  step.graph->lint();
  if (!step.graph->placeholders().empty()) {
    throw GraphError("an init graph takes no inputs: it reads attributes");
  }
  c10::IValue result;
  {
    torch::NoGradGuard no_grad;
    result = Executor(*step.graph, environment_of(*this)).run({});
  }
  if (!result.isTuple() ||
      result.toTupleRef().elements().size() != step.outputs.size()) {
    throw GraphError(absl::StrCat("an init graph must return a tuple of ",
                                  step.outputs.size(), " values"));
  }
  const auto& values = result.toTupleRef().elements();
  for (size_t i = 0; i < values.size(); ++i) {
    if (!values[i].isTensor() && !values[i].isObject()) {
      throw GraphError(absl::StrCat("init graph output ", i, " (",
                                    step.outputs[i],
                                    ") is neither a tensor nor a script "
                                    "object, but a ",
                                    values[i].tagKind()));
    }
    if (values[i].isTensor() ? objects_.count(step.outputs[i]) > 0
                             : tensors_.count(step.outputs[i]) > 0) {
      throw GraphError(absl::StrCat("init graph output ", i, " (",
                                    step.outputs[i],
                                    ") would replace an attribute of another "
                                    "kind"));
    }
  }
  // Folded values are computed copies: an output that shares memory with a
  // tensor the step read (weight.t() is a view of the weight) is copied, so
  // that it neither follows later writes to that tensor (torch::load,
  // optimizer.step()) nor blocks them (views made in no_grad mode).
  absl::flat_hash_set<const c10::StorageImpl*> read;
  for (Node* n : step.graph->find_nodes(Opcode::kGetAttr)) {
    if (!has_tensor_attribute(n->target().str())) continue;
    const at::Tensor t = fetch_attr(n->target().str());
    if (t.defined() && t.has_storage()) {
      read.insert(t.storage().unsafeGetStorageImpl());
    }
  }
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i].isObject()) {
      // Immutable once made (packed weights): run_init replaces it.
      if (objects_.count(step.outputs[i]) > 0) {
        replaced_since_compile_ = step.outputs[i];
      }
      objects_[step.outputs[i]] = values[i];
      continue;
    }
    at::Tensor t = values[i].toTensor();
    if (t.defined() && t.has_storage() &&
        read.contains(t.storage().unsafeGetStorageImpl())) {
      torch::NoGradGuard no_grad;
      t = t.clone();
    }
    register_tensor_attribute(step.outputs[i], std::move(t),
                              /*is_parameter=*/true);
  }
  init_steps_.push_back(std::move(step));
}

void GraphModuleImpl::run_init() {
  std::vector<InitStep> steps = init_steps_;  // graphs are shared, immutable
  init_steps_.clear();
  try {
    for (const InitStep& step : steps) add_init_step(step);
  } catch (...) {
    // Every step is kept, to be run again once the cause is fixed.
    init_steps_ = std::move(steps);
    throw;
  }
  recompile();
}

void GraphModuleImpl::recompile() {
  graph_->lint();
  compile();
}

void GraphModuleImpl::compile(std::unique_ptr<Executor> executor) {
  executor_ = executor ? std::move(executor)
                       : std::make_unique<Executor>(*graph_,
                                                    environment_of(*this));
  guards_.clear();
  for (Node* n : graph_->placeholders()) {
    Guard g;
    g.name = n->target().str();
    if (const InputGuard* ig = n->meta().get(kGuard)) {
      g.guard = *ig;
      g.present = true;
    }
    guards_.push_back(std::move(g));
  }
  compiled_version_ = graph_->version();
  replaced_since_compile_.reset();
}

void GraphModuleImpl::check_inputs(
    const std::vector<c10::IValue>& inputs) const {
  if (graph_->version() != compiled_version_) {
    throw GraphError(
        "GraphModule: the graph was edited after the last recompile(): call "
        "recompile() before running it");
  }
  if (replaced_since_compile_) {
    throw GraphError(absl::StrCat(
        "GraphModule: the tensor at '", *replaced_since_compile_,
        "' was replaced after the last recompile(), which bound the old one: "
        "call recompile() before running it"));
  }
  if (inputs.size() != guards_.size()) {
    std::vector<std::string> names;
    for (const Guard& g : guards_) names.push_back(g.name);
    throw GuardError(absl::StrCat("GraphModule takes ", guards_.size(),
                                  " input(s) (", absl::StrJoin(names, ", "),
                                  ") but ", inputs.size(), " were given"));
  }
  SymbolBindings symbols;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (guards_[i].present) {
      check_input(guards_[i].guard, inputs[i], guards_[i].name, i, &symbols);
    }
  }
  if (traced_training_ && is_training() != *traced_training_) {
    auto mode = [](bool training) { return training ? "training" : "eval"; };
    throw GuardError(absl::StrCat(
        "GraphModule was traced in ", mode(*traced_training_),
        " mode but is in ", mode(is_training()),
        " mode now: the traced graph has the behaviour of ",
        mode(*traced_training_),
        " mode baked in (dropout, batch_norm statistics); put the model in ",
        mode(is_training()), " mode and trace it again"));
  }
}

c10::IValue GraphModuleImpl::forward(std::vector<c10::IValue> inputs) {
  check_inputs(inputs);
  return executor_->run(std::move(inputs));
}

namespace {

void check_device(const torch::Device& device) {
  if (!device.is_cpu()) {
    throw GraphError(absl::StrCat(
        "GraphModule::to(", device.str(),
        "): this libtorch runs on the CPU only; the graph stays there"));
  }
}

// The node of `graph` whose arguments name a floating dtype, or nullptr.
const Node* names_floating_dtype(const Graph& graph) {
  for (const Node* n : graph.nodes()) {
    bool found = false;
    auto visit = [&](const Argument& a, const auto& self) -> void {
      if (a.is_dtype() && c10::isFloatingType(a.to_dtype())) found = true;
      if (a.is_sequence()) {
        for (const Argument& e : a.elements()) self(e, self);
      }
    };
    for (const Argument& a : n->args()) visit(a, visit);
    for (const auto& kv : n->kwargs()) visit(kv.second, visit);
    if (found) return n;
  }
  return nullptr;
}

void retype_guard(InputGuard& guard, c10::ScalarType dtype) {
  if (guard.kind == InputGuard::Kind::kTensor &&
      c10::isFloatingType(guard.dtype)) {
    guard.dtype = dtype;
  }
  for (InputGuard& e : guard.elements) retype_guard(e, dtype);
}

}  // namespace

void GraphModuleImpl::to(torch::Dtype dtype, bool non_blocking) {
  if (!c10::isFloatingType(dtype)) {
    throw GraphError(absl::StrCat(
        "GraphModule::to(", c10::toString(dtype),
        "): parameters convert to floating-point dtypes only (as "
        "torch::nn::Module::to)"));
  }
  if (!objects_.empty()) {
    throw GraphError(absl::StrCat(
        "GraphModule::to(", c10::toString(dtype), "): the module holds script "
        "objects (", objects_.begin()->first, ", packed weights of a fixed "
        "dtype), which cannot be converted: convert the float module before "
        "lowering or quantizing it"));
  }
  std::vector<const Graph*> graphs;
  for (const Graph* g : graph_->all_graphs()) graphs.push_back(g);
  for (const InitStep& step : init_steps_) graphs.push_back(step.graph.get());
  for (const Graph* g : graphs) {
    if (const Node* n = names_floating_dtype(*g)) {
      throw GraphError(absl::StrCat(
          "GraphModule::to(", c10::toString(dtype), "): ", n->format_node(),
          " names a floating dtype itself, so the graph cannot simply run in "
          "another: trace the model again after converting it (model->to(",
          c10::toString(dtype), "), then fx::symbolic_trace)"));
    }
  }
  // Floating tensors only (torch::nn::Module::to would convert integer
  // buffers and constants too), in place (set_data) as the optimizer and
  // the traced model see them.
  {
    torch::NoGradGuard no_grad;
    for (auto& [path, tensor] : tensors_) {
      if (tensor.defined() && tensor.is_floating_point()) {
        at::Tensor t = tensor;
        t.set_data(tensor.to(dtype, non_blocking));
      }
    }
  }
  for (auto& [path, leaf] : leaves_) leaf.module->to(dtype, non_blocking);
  for (Graph* g : graph_->all_graphs()) {
  for (Node* n : g->nodes()) {
    if (InputGuard* guard = n->meta().get_mutable(kGuard)) {
      retype_guard(*guard, dtype);
    }
    if (TensorMeta* m = n->meta().get_mutable(kTensorMeta)) {
      if (c10::isFloatingType(m->dtype)) m->dtype = dtype;
    }
    if (auto* list = n->meta().get_mutable(kTensorMetaList)) {
      for (TensorMeta& m : *list) {
        if (c10::isFloatingType(m.dtype)) m.dtype = dtype;
      }
    }
  }
  }
  compile();
}

void GraphModuleImpl::to(torch::Device device, torch::Dtype dtype,
                         bool non_blocking) {
  check_device(device);
  to(dtype, non_blocking);
}

void GraphModuleImpl::to(torch::Device device, bool non_blocking) {
  check_device(device);
  torch::nn::Module::to(device, non_blocking);
}

std::shared_ptr<GraphModuleImpl> GraphModuleImpl::copy() const {
  Attributes attributes;
  attributes.modules = leaves_;
  attributes.traced_training = traced_training_;
  if (objects_.empty()) {
    for (const auto& [path, tensor] : tensors_) {
      (is_parameter_.at(path) ? attributes.parameters : attributes.buffers)
          .emplace(path, tensor);
    }
    auto copy = std::make_shared<GraphModuleImpl>(graph_->clone(),
                                                  std::move(attributes));
    // What only the init steps read (say, the weights folded into others).
    for (const auto& [path, tensor] : tensors_) {
      if (!copy->has_tensor_attribute(path)) {
        copy->register_tensor_attribute(path, tensor, is_parameter_.at(path));
      }
    }
    copy->init_steps_ = init_steps_;  // graphs are immutable once added
    if (!traced_training_) copy->train(is_training());
    return copy;
  }
  // The graph reads objects: give the copy this module's tensors and
  // objects (shared: objects are immutable once made), then the graph.
  auto stub = std::make_unique<Graph>();
  stub->output(Argument());
  auto copy = std::make_shared<GraphModuleImpl>(std::move(stub), Attributes{});
  for (Node* n : graph_->find_nodes(Opcode::kGetAttr)) {
    const std::string& path = n->target().str();
    auto it = tensors_.find(path);
    if (it != tensors_.end() && !copy->has_tensor_attribute(path)) {
      copy->register_tensor_attribute(path, it->second, is_parameter_.at(path));
    }
  }
  for (const auto& [path, tensor] : tensors_) {
    if (!copy->has_tensor_attribute(path)) {
      copy->register_tensor_attribute(path, tensor, is_parameter_.at(path));
    }
  }
  copy->objects_ = objects_;
  copy->init_steps_ = init_steps_;
  copy->set_graph(graph_->clone(), std::move(attributes));
  if (!traced_training_) copy->train(is_training());
  return copy;
}

std::string GraphModuleImpl::code() const {
  codegen::CodegenOptions options;
  for (const auto& item : objects_) options.objects.insert(item.first);
  return codegen::emit_forward(*graph_, options).text();
}

std::string GraphModuleImpl::print_readable() const {
  codegen::CodegenOptions options;
  options.tensor_meta_comments = true;
  for (const auto& item : objects_) options.objects.insert(item.first);
  codegen::Forward forward = codegen::emit_forward(*graph_, options);
  std::string out = "class GraphModule : public torch::nn::Module {\n public:\n";
  absl::StrAppend(&out, "  ", forward.signature, " {\n");
  for (absl::string_view line : absl::StrSplit(forward.body, '\n')) {
    if (!line.empty()) absl::StrAppend(&out, "  ", line, "\n");
  }
  absl::StrAppend(&out, "  }\n");
  if (!forward.tensors.empty() || !forward.leaf_modules.empty() ||
      !forward.objects.empty()) {
    absl::StrAppend(&out, "\n private:\n");
  }
  for (const auto& member : forward.tensors) {
    std::string shape;
    auto it = tensors_.find(member.path);
    if (it != tensors_.end()) shape = ": " + tensor_meta_of(it->second).to_string();
    absl::StrAppend(&out, "  at::Tensor ", member.name, ";  // ", member.path,
                    shape, "\n");
  }
  for (const auto& member : forward.leaf_modules) {
    absl::StrAppend(&out, "  fx::LeafModule ", member.name, ";  // ",
                    member.path, "\n");
  }
  for (const auto& member : forward.objects) {
    auto it = objects_.find(member.path);
    absl::StrAppend(&out, "  c10::IValue ", member.name, ";  // ", member.path,
                    it == objects_.end() ? "" : ": " + it->second.type()->str(),
                    "\n");
  }
  return out + "};\n";
}

void GraphModuleImpl::set_graph(std::unique_ptr<Graph> graph,
                                Attributes attributes) {
  if (!graph) throw GraphError("set_graph: the graph is null");
  if (body_ != nullptr) {
    // A body re-traced: it replaces the one standing in for the graph.
    graph->lint();
    Graph* parent = body_->parent();
    std::string name;
    for (const auto& [n, b] : parent->subgraphs()) {
      if (b.get() == body_) name = n;
    }
    FoundAttributes found = find_attributes(*graph, nullptr, attributes);
    register_attributes(found);
    body_ = parent->replace_subgraph(name, std::move(graph));
    compile();
    return;
  }
  graph->lint();
  // Find every attribute and compile before changing anything, so that a
  // graph that cannot run leaves the module as it was.
  FoundAttributes found = find_attributes(*graph, nullptr, attributes);
  std::unique_ptr<Executor> executor;
  {
    // The tensors the module will hold once `found` is registered.
    absl::flat_hash_map<absl::string_view, const at::Tensor*> taken;
    for (const FoundAttributes::Tensor& f : found.tensors) {
      taken.emplace(*f.path, &f.tensor);
    }
    static const LeafModule unchecked;
    ExecutionEnvironment env;
    env.attribute = [&](const std::string& path) -> c10::IValue {
      auto it = taken.find(path);
      return it != taken.end() ? c10::IValue(*it->second)
                               : fetch_attribute(path);
    };
    // New leaf modules move into the module when registered: the executor
    // compiled here only checks the graph then, and is compiled again.
    const bool new_leaves = !found.leaves.empty();
    env.module = [&](const std::string& path) -> const LeafModule* {
      return new_leaves ? &unchecked : leaf_module(path);
    };
    executor = std::make_unique<Executor>(*graph, env);
    if (new_leaves) executor.reset();
  }
  register_attributes(found);
  graph_->set_owner(nullptr);
  graph_ = std::move(graph);
  graph_->set_owner(this);
  if (attributes.traced_training) {
    traced_training_ = attributes.traced_training;
    train(*traced_training_);
  }
  compile(std::move(executor));  // linted above
}

void GraphModuleImpl::pretty_print(std::ostream& stream) const {
  stream << "GraphModule";
}

}  // namespace fx
