#include "fx/trace/tracer.h"

#include <atomic>

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/Backtrace.h>
#include <torch/library.h>
#include <torch/utils.h>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "fx/ir/errors.h"
#include "fx/ir/operator_schemas.h"
#include "fx/trace/internal/proxy.h"
#include "fx/trace/internal/shape_inference.h"

namespace fx {

struct Tracer::Session {
  Tracer* tracer;
  uint64_t id;
  std::unique_ptr<Graph> graph;
  std::shared_ptr<torch::nn::Module> root;
  // Parameters and buffers of root, by identity.
  absl::flat_hash_map<const c10::TensorImpl*, std::string> attribute_paths;
  // The node each real tensor seen so far stands for: its get_attr node, or
  // the last in-place operator applied to it.
  absl::flat_hash_map<const c10::TensorImpl*, Node*> tensor_nodes;
  absl::flat_hash_map<const torch::nn::Module*, std::string> module_paths;
  std::vector<std::string> module_stack;
  // getitem nodes the tracer made for multi-output calls; unused ones are
  // removed at the end (torch.fx makes them only when indexed).
  std::vector<Node*> getitems;
  std::vector<Node*> placeholders;
  // Tensors the traced code made from C++ data (torch::tensor({...}) is
  // aten::empty then per-element fill_), computed for real while tracing
  // until the graph uses one: then it is a constant.
  absl::flat_hash_set<const c10::TensorImpl*> fresh;
  std::vector<at::Tensor> fresh_tensors;  // keeps the addresses unique
  // For each storage of fresh tensors, the first fresh tensor spanning all
  // of it (torch::tensor's result, not the select views filling it): the
  // graph makes views of it from this one constant (create_arg).
  absl::flat_hash_map<const c10::StorageImpl*, at::Tensor> fresh_bases;
  int64_t constants = 0;
  bool read_sizes = false;
  bool read_layout = false;
  Session* enclosing = nullptr;

  // Records one operator call (the dispatcher fallback's work), in steps:
  void record(const c10::OperatorHandle& op, torch::jit::Stack* stack);
  void check_proxies_are_ours(const c10::OperatorHandle& op,
                              const std::vector<c10::IValue>& args) const;
  // Answers what needs data without it (torch::equal(x, x)), or throws
  // TraceError; false if the operator needs no data.
  bool answer_without_data(const c10::OperatorHandle& op,
                           const std::vector<c10::IValue>& args,
                           torch::jit::Stack* stack);
  std::vector<Argument> arguments_of(const c10::OperatorHandle& op,
                                     const std::vector<c10::IValue>& args);
  std::vector<internal::InferredOutput> outputs_of(
      const c10::OperatorHandle& op, const std::vector<c10::IValue>& args,
      const std::vector<int>& written);
  Node* call_node(const c10::OperatorHandle& op,
                  const std::vector<Argument>& full,
                  const std::vector<internal::InferredOutput>& outputs);
  void push_outputs(const c10::OperatorHandle& op, Node* node,
                    const std::vector<int>& written,
                    std::vector<internal::InferredOutput>* outputs,
                    std::vector<c10::IValue>* args, torch::jit::Stack* stack);
  bool computes_fresh_tensors(const c10::OperatorHandle& op,
                              const std::vector<c10::IValue>& args) const;
  void run_for_real(const c10::OperatorHandle& op,
                    std::vector<c10::IValue> args, torch::jit::Stack* stack);
  Node* getitem(Node* container, int64_t index);
  c10::IValue wrap_outputs(Node* node, const c10::IValue& value,
                           const std::string& what);
  void annotate(Node* node, const std::vector<Argument>& args);
  std::string location() const;
  // Names the tensor among `args` whose data an operator needs: an input,
  // a parameter or buffer (with its module), or a computed tensor.
  std::string whose_data(const std::vector<c10::IValue>& args) const;
  // Steps of Tracer::trace: the root's tensors and modules by path (or the
  // given `named` tensors), a placeholder per example input, and the output
  // node with the guards of what the program read.
  void name_attributes(const Attributes* named);
  c10::IValue make_input(size_t i, const c10::IValue& example, size_t count);
  void finish(const c10::IValue& out);
};

namespace {

std::atomic<uint64_t> next_session_id{1};
thread_local Tracer::Session* current_session = nullptr;
// > 0 while tracer code (not user code) runs: size reads are not noticed.
thread_local int internal_depth = 0;

class InternalScope {
 public:
  InternalScope() { ++internal_depth; }
  ~InternalScope() { --internal_depth; }
};

// Runs user code (forward) at depth 0 even if a trace was started from
// inside tracer code.
class UserScope {
 public:
  UserScope() : saved_(internal_depth) { internal_depth = 0; }
  ~UserScope() { internal_depth = saved_; }

 private:
  int saved_;
};

// Sets the thread's DeferredInit state for the trace and restores it after.
class DispatchState {
 public:
  DispatchState(bool included, bool excluded)
      : included_(c10::impl::tls_is_dispatch_key_included(
            c10::DispatchKey::DeferredInit)),
        excluded_(c10::impl::tls_is_dispatch_key_excluded(
            c10::DispatchKey::DeferredInit)) {
    c10::impl::tls_set_dispatch_key_included(c10::DispatchKey::DeferredInit,
                                             included);
    c10::impl::tls_set_dispatch_key_excluded(c10::DispatchKey::DeferredInit,
                                             excluded);
  }
  ~DispatchState() {
    c10::impl::tls_set_dispatch_key_included(c10::DispatchKey::DeferredInit,
                                             included_);
    c10::impl::tls_set_dispatch_key_excluded(c10::DispatchKey::DeferredInit,
                                             excluded_);
  }

 private:
  bool included_;
  bool excluded_;
};

// No trace records while opaque code (a leaf module, a wrapped function)
// runs on zero-filled inputs.
class SuspendTracing {
 public:
  SuspendTracing()
      : saved_(current_session), state_(/*included=*/false, /*excluded=*/true) {
    current_session = nullptr;
  }
  ~SuspendTracing() { current_session = saved_; }

 private:
  Tracer::Session* saved_;
  DispatchState state_;
};

// Buffers of a module, restored after it ran on zeros for its outputs'
// metadata (a BatchNorm in training mode would update running stats).
class BufferSnapshot {
 public:
  explicit BufferSnapshot(torch::nn::Module& module) {
    for (auto& buffer : module.buffers(/*recurse=*/true)) {
      if (buffer.defined()) saved_.emplace_back(buffer, buffer.clone());
    }
  }
  ~BufferSnapshot() {
    torch::NoGradGuard no_grad;
    for (auto& [buffer, copy] : saved_) buffer.copy_(copy);
  }

 private:
  std::vector<std::pair<at::Tensor, at::Tensor>> saved_;
};

std::string op_name(const c10::OperatorHandle& op) {
  return Target(op).to_string();
}

const char* kWorkaround =
    "To trace past it: make the code that needs the value a leaf module "
    "(call it through fx::call and list its path in "
    "TraceOptions::leaf_modules or override Tracer::is_leaf_module), wrap the "
    "function that needs it with fx::wrap, or pass the value as a non-tensor "
    "input (it is then baked into the graph and guarded).";

bool is_data_dependent(const c10::OperatorHandle& op) {
  if (op.hasTag(at::Tag::data_dependent_output)) return true;
  const std::string& name = op.schema().name();
  return name == "aten::item" || name == "aten::_local_scalar_dense" ||
         name == "aten::is_nonzero" || name == "aten::allclose" ||
         name == "aten::equal";
}

// The traced program's own C++ frames at this point, innermost first, for
// an error (only on the error path: a backtrace costs milliseconds): the
// frames between the dispatcher's entry (at::_ops, c10::Dispatcher) and the
// tracer's call of forward. Functions of the program's executable are named
// only when it is linked with -rdynamic; libtorch's (torch::nn modules) are.
std::string user_frames() {
  std::vector<std::string> frames =
      absl::StrSplit(c10::get_backtrace(/*frames_to_skip=*/2,
                                        /*maximum_number_of_frames=*/96),
                     '\n', absl::SkipEmpty());
  auto inside = [](const std::string& f, std::initializer_list<const char*> any) {
    for (const char* s : any) {
      if (absl::StrContains(f, s)) return true;
    }
    return false;
  };
  size_t begin = 0;
  for (size_t i = 0; i < frames.size(); ++i) {
    if (inside(frames[i], {"at::_ops::", "c10::Dispatcher", "c10::impl::",
                           "c10::BoxedKernel", "c10::KernelFunction",
                           "fx::Tracer::Session"})) {
      begin = i + 1;
    }
  }
  std::string out;
  for (size_t i = begin; i < frames.size(); ++i) {
    // The end: the tracer's call of forward, or TorchScript's interpreter
    // (a TorchScript program's own traceback is in the message already).
    if (inside(frames[i], {"fx::Tracer::trace", "fx::symbolic_trace",
                           "fx::internal::", "torch::jit::"})) {
      break;
    }
    // fx's boxing of forward, std::function, and frames without a name
    // (the dispatcher's inlined steps).
    if (inside(frames[i], {"std::_Function_handler", "fx::detail::",
                           "fx::box_forward", "_ZZN2fx6detail",
                           "_ZNSt17_Function_handler", "<unknown function>"})) {
      continue;
    }
    // "frame #7: name + 0x12 (0x55.. in /path/binary)": the name and the
    // file's base name.
    std::string frame = frames[i];
    if (size_t colon = frame.find(": "); colon != std::string::npos) {
      frame = frame.substr(colon + 2);
    }
    const size_t plus = frame.rfind(" + 0x");
    const size_t in = frame.rfind(" in ");
    if (plus != std::string::npos && in != std::string::npos && in > plus) {
      std::string file = frame.substr(in + 4);
      if (!file.empty() && file.back() == ')') file.pop_back();
      if (size_t slash = file.rfind('/'); slash != std::string::npos) {
        file = file.substr(slash + 1);
      }
      frame = absl::StrCat(frame.substr(0, plus), " (", file, ")");
    }
    absl::StrAppend(&out, "\n  ", frame);
  }
  if (out.empty()) return "";
  return absl::StrCat(
      "\nC++ frames of the traced program, innermost first (link it with "
      "-rdynamic to name its own functions):",
      out);
}

// aten::index.Tensor (`table[index]`) is tagged as having a data-dependent
// shape for boolean masks only: with integer index tensors, the output's shape
// follows from the indices' shapes.
bool indexes_with_integers(const c10::OperatorHandle& op,
                           const std::vector<c10::IValue>& args) {
  if (op.schema().name() != "aten::index" || args.size() != 2 ||
      !args[1].isList()) {
    return false;
  }
  for (const c10::IValue& index : args[1].toListRef()) {
    if (index.isNone()) continue;
    if (!index.isTensor()) return false;
    const at::Tensor& t = index.toTensor();
    if (t.defined() && !at::isIntegralType(t.scalar_type(),
                                           /*includeBool=*/false)) {
      return false;
    }
  }
  return true;
}

// Factories whose result C++ code then fills in (torch::tensor({...}) writes
// its elements with select and fill_, or through data_ptr): they run for
// real, as do the operators filling them (Session::fresh), and the result is
// a constant of the graph.
bool is_uninitialized_factory(const c10::OperatorHandle& op,
                              const std::vector<c10::IValue>& args) {
  const std::string& name = op.schema().name();
  if (name != "aten::empty" && name != "aten::empty_strided") return false;
  for (const c10::IValue& a : args) {
    if (a.isTensor()) return false;
  }
  return true;
}

// Whether `t` is all of its storage, laid out contiguously from its start
// (so a copy of it has the same layout, and views of the storage are views of
// it with the same strides and offsets).
bool spans_storage(const at::Tensor& t) {
  return t.has_storage() && t.storage_offset() == 0 && t.is_contiguous() &&
         static_cast<size_t>(t.numel()) * t.itemsize() == t.storage().nbytes();
}

// For each return, the index of the argument it writes and returns (in-place
// and out= operators), or -1.
std::vector<int> written_arguments(const c10::FunctionSchema& schema) {
  std::vector<int> out;
  out.reserve(schema.returns().size());
  for (const auto& r : schema.returns()) {
    int index = -1;
    const c10::AliasInfo* ra = r.alias_info();
    if (ra && ra->isWrite()) {
      const auto& params = schema.arguments();
      for (size_t i = 0; i < params.size(); ++i) {
        const c10::AliasInfo* pa = params[i].alias_info();
        if (pa && pa->isWrite() && pa->beforeSets() == ra->beforeSets()) {
          index = static_cast<int>(i);
          break;
        }
      }
    }
    out.push_back(index);
  }
  return out;
}

void fallback(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
              torch::jit::Stack* stack) {
  c10::impl::ExcludeDispatchKeyGuard exclude(c10::DispatchKey::DeferredInit);
  Tracer::Session* session = current_session;
  if (session == nullptr) {
    size_t n = op.schema().arguments().size();
    for (const c10::IValue& v : torch::jit::last(*stack, n)) {
      if (v.isTensor() && internal::as_proxy(v.toTensor())) {
        throw TraceError(absl::StrCat(
            op_name(op),
            " was called on a proxy tensor after its trace ended (or on "
            "another thread): a module kept a tensor from tracing. Do not "
            "store tensors computed in forward on the module."));
      }
    }
    // Not one of ours (another library using DeferredInit): pass it on.
    op.redispatchBoxed(
        keys & c10::DispatchKeySet(c10::DispatchKeySet::FULL_AFTER,
                                   c10::DispatchKey::DeferredInit),
        stack);
    return;
  }
  session->record(op, stack);
}

TORCH_LIBRARY_IMPL(_, DeferredInit, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&fallback>());
}


// Constants the trace made (torch::empty then copy_, torch::tensor({...})
// then mul_) that the graph writes into, directly or through a view, would
// be one tensor shared by every run and every thread: each run gets a copy
// instead, made right after the get_attr.
//   before: %c = get_attr[_tensor_constant0]; %w = aten::copy_(%c, %x)
//   after:  %c = get_attr[_tensor_constant0]; %c2 = aten::clone(%c);
//           %w = aten::copy_(%c2, %x)
void privatize_written_constants(Graph& graph, const Attributes& attributes) {
  // How many constants each storage holds: a copy of one of several would
  // not be seen through the others.
  absl::flat_hash_map<const c10::StorageImpl*, int> sharing;
  for (const auto& [path, tensor] : attributes.buffers) {
    if (tensor.has_storage()) ++sharing[tensor.storage().unsafeGetStorageImpl()];
  }
  for (Node* constant : graph.find_nodes(Opcode::kGetAttr)) {
    if (!attributes.buffers.count(constant->target().str())) continue;
    bool written = false;
    std::vector<const Node*> work{constant};
    absl::flat_hash_set<const Node*> seen{constant};
    while (!work.empty() && !written) {
      const Node* value = work.back();
      work.pop_back();
      for (Node* user : value->users()) {
        bool aliases = false;
        if (user->op() == Opcode::kCallFunction &&
            user->target().is_function() &&
            &user->target().function() == fx::getitem()) {
          aliases = true;  // an element of a view's list is a view
        } else if (std::optional<AliasedUse> use = aliased_use(*user, value)) {
          // (Leaf modules and wrapped functions are taken not to write
          // their inputs, as torch::nn modules do not.)
          aliases = use->aliased;
          written = written || use->written;
        }
        if (aliases && seen.insert(user).second) work.push_back(user);
      }
    }
    if (!written) continue;
    const at::Tensor& tensor = attributes.buffers.at(constant->target().str());
    if (tensor.has_storage() &&
        sharing[tensor.storage().unsafeGetStorageImpl()] > 1) {
      throw TraceError(absl::StrCat(
          "forward writes into the tensor %", constant->name(),
          " (a constant of the graph, made before forward or from C++ data) "
          "which shares memory with another constant: one tensor written by "
          "every run cannot be recorded. Make the tensor in forward from the "
          "input (x.new_zeros, torch::zeros(..., x.options())), or register "
          "it as a buffer"));
    }
    Node* copy;
    {
      auto guard = graph.inserting_after(constant);
      copy = graph.call_function(op("aten::clone"), {constant});
    }
    // clone keeps a dense tensor's strides.
    if (const TensorMeta* meta = constant->meta().get(kTensorMeta)) {
      copy->meta().set(kTensorMeta, *meta);
    }
    constant->replace_all_uses_with(copy);
  }
}

}  // namespace

namespace internal {
namespace {
// The session a read of a proxy of `session` is noticed by: this thread's
// trace of it, while user code (not tracer code) runs.
Tracer::Session* noticing(uint64_t session) {
  return internal_depth == 0 && current_session != nullptr &&
                 current_session->id == session
             ? current_session
             : nullptr;
}
}  // namespace

void note_size_read(uint64_t session) {
  if (Tracer::Session* s = noticing(session)) s->read_sizes = true;
}

void note_layout_read(uint64_t session) {
  if (Tracer::Session* s = noticing(session)) {
    s->read_sizes = true;
    s->read_layout = true;
  }
}
}  // namespace internal

namespace detail {
Tracer* active_tracer() {
  return current_session != nullptr ? current_session->tracer : nullptr;
}
}  // namespace detail

// --- Session -----------------------------------------------------------------

std::string Tracer::Session::whose_data(
    const std::vector<c10::IValue>& args) const {
  auto attribute = [](const std::string& path) {
    const size_t dot = path.rfind('.');
    return absl::StrCat(
        "the buffer or parameter '", path, "'",
        dot == std::string::npos
            ? ""
            : absl::StrCat(" of module '", path.substr(0, dot), "'"));
  };
  for (const c10::IValue& a : args) {
    if (!a.isTensor()) continue;
    const at::Tensor& t = a.toTensor();
    if (!t.defined()) continue;
    if (auto it = attribute_paths.find(t.unsafeGetTensorImpl());
        it != attribute_paths.end()) {
      return attribute(it->second);
    }
    internal::ProxyImpl* proxy = internal::as_proxy(t);
    auto updated = tensor_nodes.find(t.unsafeGetTensorImpl());
    if (!proxy && updated == tensor_nodes.end()) continue;
    // Back through in-place updates (num_batches_tracked += 1) to where
    // the tensor came from.
    const Node* n = proxy ? proxy->node() : updated->second;
    while (n->op() == Opcode::kCallFunction && n->target().is_operator() &&
           !n->args().empty() && n->args()[0].is_node()) {
      const std::vector<int> written =
          written_arguments(n->target().op().schema());
      if (written.empty() || written[0] != 0) break;
      n = n->args()[0].to_node();
    }
    if (n->op() == Opcode::kPlaceholder) {
      return absl::StrCat("the input '", n->name(), "'");
    }
    if (n->op() == Opcode::kGetAttr) {
      const std::string& target = n->target().str();
      if (absl::StartsWith(target, "_tensor_constant")) break;
      return attribute(target);
    }
    return absl::StrCat("a tensor computed while tracing (%", n->name(), ")");
  }
  return "a tensor";
}

std::string Tracer::Session::location() const {
  if (module_stack.empty() || module_stack.back().empty()) return "";
  return absl::StrCat(" (in module '", module_stack.back(), "')");
}

void Tracer::Session::annotate(Node* node, const std::vector<Argument>& args) {
  std::string path;
  if (!module_stack.empty()) {
    path = module_stack.back();
  } else {
    // Without fx::call, a call that uses a parameter belongs to the
    // parameter's module.
    for (const Argument& a : args) {
      if (!a.is_node() || a.to_node()->op() != Opcode::kGetAttr) continue;
      const std::string& target = a.to_node()->target().str();
      size_t dot = target.rfind('.');
      if (dot != std::string::npos && !absl::StartsWith(target, "_tensor_constant")) {
        path = target.substr(0, dot);
        break;
      }
    }
  }
  if (!path.empty()) node->meta().set(kModulePath, path);
  if (tracer->options_.record_stack_traces) {
    node->meta().set(kStackTrace, c10::get_backtrace(/*frames_to_skip=*/3));
  }
}

// An operator on tensors made from C++ data alone (at least one made while
// tracing; no proxy, no parameter, none used by the graph yet) computes more
// of that data: torch::tensor's select and fill_, or TorchScript's size
// arithmetic. Random operators are recorded, to stay random.
bool Tracer::Session::computes_fresh_tensors(
    const c10::OperatorHandle& op, const std::vector<c10::IValue>& args) const {
  if (fresh.empty() || op.hasTag(at::Tag::nondeterministic_seeded)) {
    return false;
  }
  bool any = false;
  for (const c10::IValue& a : args) {
    if (!a.isTensor()) {
      if (a.isTensorList() || a.isList()) return false;
      continue;
    }
    const at::Tensor& t = a.toTensor();
    const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
    if (tensor_nodes.contains(impl)) return false;
    if (fresh.contains(impl)) {
      any = true;
      continue;
    }
    // Other C++ data the program holds (a TorchScript constant such as
    // the divisor in `size // 3`) computes with it; the model's own
    // parameters and buffers, and proxies, do not.
    if (!t.defined() || internal::as_proxy(t) ||
        attribute_paths.contains(impl)) {
      return false;
    }
  }
  return any;
}

void Tracer::Session::run_for_real(const c10::OperatorHandle& op,
                                   std::vector<c10::IValue> args,
                                   torch::jit::Stack* stack) {
  size_t base = stack->size();
  for (c10::IValue& a : args) stack->push_back(std::move(a));
  op.callBoxed(stack);
  for (size_t i = base; i < stack->size(); ++i) {
    if ((*stack)[i].isTensor()) {
      const at::Tensor& t = (*stack)[i].toTensor();
      if (fresh.insert(t.unsafeGetTensorImpl()).second) {
        fresh_tensors.push_back(t);
        if (spans_storage(t)) {
          fresh_bases.try_emplace(t.storage().unsafeGetStorageImpl(), t);
        }
      }
    }
  }
}

Node* Tracer::Session::getitem(Node* container, int64_t index) {
  Node* n = tracer->create_node(Opcode::kCallFunction, Target(fx::getitem()),
                                {container, index}, {}, "");
  getitems.push_back(n);
  return n;
}

void Tracer::Session::record(const c10::OperatorHandle& op,
                             torch::jit::Stack* stack) {
  InternalScope internal;
  const c10::FunctionSchema& schema = op.schema();
  const auto& params = schema.arguments();
  std::vector<c10::IValue> args(
      std::make_move_iterator(stack->end() - params.size()),
      std::make_move_iterator(stack->end()));
  torch::jit::drop(*stack, params.size());

  check_proxies_are_ours(op, args);
  // C++ data (even aten::item of it) is computed for real.
  if (is_uninitialized_factory(op, args) ||
      computes_fresh_tensors(op, args)) {
    run_for_real(op, std::move(args), stack);
    return;
  }
  if (answer_without_data(op, args, stack)) return;
  std::vector<Argument> full = arguments_of(op, args);
  const std::vector<int> written = written_arguments(schema);
  std::vector<internal::InferredOutput> outputs =
      outputs_of(op, args, written);

  // An operator that only answers a question about shapes (aten::size,
  // aten::stride, aten::numel, ...) leaves no node: its answer is a
  // constant of this trace, which is therefore specialized.
  bool returns_tensors = false;
  for (const auto& out : outputs) {
    returns_tensors =
        returns_tensors || out.kind != internal::InferredOutput::Kind::kValue;
  }
  bool writes = false;
  for (const auto& p : params) {
    writes = writes || (p.alias_info() && p.alias_info()->isWrite());
  }
  if (!returns_tensors && !writes && !schema.returns().empty()) {
    read_sizes = true;
    for (auto& out : outputs) stack->push_back(std::move(out.value));
    return;
  }

  Node* node = call_node(op, full, outputs);
  push_outputs(op, node, written, &outputs, &args, stack);
}

void Tracer::Session::check_proxies_are_ours(
    const c10::OperatorHandle& op, const std::vector<c10::IValue>& args) const {
  for (const c10::IValue& v : args) {
    if (v.isTensor()) {
      internal::ProxyImpl* p = internal::as_proxy(v.toTensor());
      if (p && p->session() != id) {
        throw TraceError(absl::StrCat(
            op_name(op), " was called on a proxy tensor of another trace",
            location(), ": do not keep tensors from one trace for the next"));
      }
    }
  }
}

bool Tracer::Session::answer_without_data(const c10::OperatorHandle& op,
                                          const std::vector<c10::IValue>& args,
                                          torch::jit::Stack* stack) {
  if (is_data_dependent(op)) {
    if (op.schema().name() == "aten::equal" && args.size() == 2 &&
        args[0].isTensor() && args[1].isTensor()) {
      // x == x needs no data: C++ MultiheadAttention asks torch::equal(q, k).
      internal::ProxyImpl* a = internal::as_proxy(args[0].toTensor());
      internal::ProxyImpl* b = internal::as_proxy(args[1].toTensor());
      bool same = args[0].toTensor().is_same(args[1].toTensor()) ||
                  (a && b && a->node() == b->node());
      if (same) {
        stack->emplace_back(true);
        return true;
      }
      // Different shapes are never equal; for tensors of one shape (two
      // inputs, say: cross-attention's query and key) the trace takes the
      // "not equal" branch and the graph checks, each run, that it was the
      // branch to take.
      const at::Tensor& x = args[0].toTensor();
      const at::Tensor& y = args[1].toTensor();
      if (a || b) read_sizes = true;
      if (x.sizes() == y.sizes() && x.scalar_type() == y.scalar_type()) {
        static const c10::OperatorHandle check =
            c10::Dispatcher::singleton().findSchemaOrThrow(
                "fx_guard::check_not_equal", "");
        tracer->create_node(
            Opcode::kCallFunction, Target(check),
            {tracer->create_arg(x), tracer->create_arg(y),
             absl::StrCat("torch::equal(", a ? "%" + a->node()->name() : "a constant",
                          ", ", b ? "%" + b->node()->name() : "a constant",
                          ") was false while tracing")},
            {}, "");
      }
      stack->emplace_back(false);
      return true;
    }
    throw TraceError(absl::StrCat(
        op_name(op), location(), " needs the data of ", whose_data(args),
        ", which does not exist while tracing: the program's control flow or "
        "values depend on tensor data, which a graph cannot record. ",
        kWorkaround, user_frames()));
  }
  if (op.hasTag(at::Tag::dynamic_output_shape) &&
      !indexes_with_integers(op, args)) {
    throw TraceError(absl::StrCat(
        op_name(op), location(),
        " returns a tensor whose shape depends on the input's data, which a "
        "graph traced with fixed shapes cannot record. ",
        kWorkaround, user_frames()));
  }
  return false;
}

std::vector<Argument> Tracer::Session::arguments_of(
    const c10::OperatorHandle& op, const std::vector<c10::IValue>& args) {
  const auto& params = op.schema().arguments();
  std::vector<Argument> full;
  full.reserve(args.size());
  try {
    for (size_t i = 0; i < args.size(); ++i) {
      full.push_back(ivalue_to_argument(
          args[i], params[i].real_type(),
          [this](const at::Tensor& t) { return tracer->create_arg(t); }));
    }
  } catch (const GraphError& e) {
    throw TraceError(absl::StrCat(op_name(op), location(), ": ", e.msg()));
  }
  return full;
}

std::vector<internal::InferredOutput> Tracer::Session::outputs_of(
    const c10::OperatorHandle& op, const std::vector<c10::IValue>& args,
    const std::vector<int>& written) {
  bool all_written = !written.empty();
  for (int w : written) all_written = all_written && w >= 0;
  std::vector<internal::InferredOutput> outputs;
  if (all_written && !op.hasTag(at::Tag::inplace_view)) {
    // In place: the outputs are the written arguments.
    for (int w : written) {
      internal::InferredOutput out;
      if (args[w].isTensor()) {
        out.tensor = tensor_meta_of(args[w].toTensor());
      } else {
        out.kind = internal::InferredOutput::Kind::kValue;
      }
      outputs.push_back(std::move(out));
    }
    ++tracer->stats_.in_place;
    return outputs;
  }
  internal::InferenceTier tier;
  try {
    outputs = internal::infer_outputs(op, args, &tier);
  } catch (const internal::DataDependentOutput& e) {
    throw TraceError(absl::StrCat(
        op_name(op), location(),
        " returns a tensor whose shape depends on the input's data (", e.what(),
        "), which a graph traced with fixed shapes cannot record. ",
        kWorkaround));
  } catch (const c10::Error& e) {
    throw TraceError(absl::StrCat(op_name(op), " failed on the example "
                                  "inputs' shapes while tracing",
                                  location(), ": ",
                                  e.what_without_backtrace()));
  }
  switch (tier) {
    case internal::InferenceTier::kRule: ++tracer->stats_.shape_rule; break;
    case internal::InferenceTier::kMetaKernel:
      ++tracer->stats_.meta_kernel;
      break;
    case internal::InferenceTier::kShapeFunction:
      ++tracer->stats_.shape_function;
      break;
    case internal::InferenceTier::kRealKernel:
      ++tracer->stats_.real_kernel;
      break;
  }
  return outputs;
}

Node* Tracer::Session::call_node(
    const c10::OperatorHandle& op, const std::vector<Argument>& full,
    const std::vector<internal::InferredOutput>& outputs) {
  auto [node_args, node_kwargs] = split_arguments(op.schema(), full);
  Node* node = tracer->create_node(Opcode::kCallFunction, Target(op),
                                   std::move(node_args),
                                   std::move(node_kwargs), "");
  annotate(node, full);
  if (outputs.size() == 1 &&
      outputs[0].kind == internal::InferredOutput::Kind::kTensor) {
    node->meta().set(kTensorMeta, outputs[0].tensor);
  } else if (!outputs.empty()) {
    std::vector<TensorMeta> metas;
    for (const auto& out : outputs) {
      if (out.kind == internal::InferredOutput::Kind::kTensor) {
        metas.push_back(out.tensor);
      }
    }
    if (metas.size() == outputs.size()) {
      node->meta().set(kTensorMetaList, std::move(metas));
    }
  }
  return node;
}

void Tracer::Session::push_outputs(
    const c10::OperatorHandle& op, Node* node, const std::vector<int>& written,
    std::vector<internal::InferredOutput>* outputs,
    std::vector<c10::IValue>* args, torch::jit::Stack* stack) {
  const bool view_in_place = op.hasTag(at::Tag::inplace_view);
  const bool single = outputs->size() == 1;
  for (size_t r = 0; r < outputs->size(); ++r) {
    internal::InferredOutput& out = (*outputs)[r];
    if (written[r] >= 0) {
      // In-place: return the written tensor itself, which from now on
      // stands for this node.
      c10::IValue& target = (*args)[written[r]];
      if (target.isTensor()) {
        const at::Tensor& t = target.toTensor();
        if (internal::ProxyImpl* p = internal::as_proxy(t)) {
          p->set_node(single ? node : getitem(node, r));
          if (view_in_place) p->set_meta(out.tensor);
        } else {
          if (view_in_place) {
            throw TraceError(absl::StrCat(
                op_name(op), location(),
                " changes the shape of a parameter or constant in place; "
                "fx cannot trace that: use the out-of-place operator"));
          }
          tensor_nodes[t.unsafeGetTensorImpl()] =
              single ? node : getitem(node, r);
        }
      }
      stack->push_back(target);
      continue;
    }
    switch (out.kind) {
      case internal::InferredOutput::Kind::kTensor: {
        Node* value = single ? node : getitem(node, r);
        if (!single) value->meta().set(kTensorMeta, out.tensor);
        stack->push_back(tracer->create_proxy(value, out.tensor));
        break;
      }
      case internal::InferredOutput::Kind::kTensorList: {
        // How many tensors there are follows from sizes (unbind, split,
        // chunk, ...), which C++ code then loops over: a size read.
        read_sizes = true;
        Node* list = single ? node : getitem(node, r);
        c10::List<at::Tensor> proxies;
        for (size_t i = 0; i < out.tensors.size(); ++i) {
          Node* item = getitem(list, static_cast<int64_t>(i));
          item->meta().set(kTensorMeta, out.tensors[i]);
          proxies.push_back(tracer->create_proxy(item, out.tensors[i]));
        }
        stack->emplace_back(std::move(proxies));
        break;
      }
      case internal::InferredOutput::Kind::kValue:
        read_sizes = true;
        stack->push_back(std::move(out.value));
        break;
    }
  }
}

c10::IValue Tracer::Session::wrap_outputs(Node* node, const c10::IValue& value,
                                          const std::string& what) {
  if (value.isTensor() && !value.toTensor().defined()) {
    // No tensor (MultiheadAttention's weights when not asked for): none in
    // the graph's runs either.
    return value;
  }
  if (value.isTensor()) {
    TensorMeta meta = tensor_meta_of(value.toTensor());
    meta.requires_grad = false;
    node->meta().set(kTensorMeta, meta);
    return tracer->create_proxy(node, meta);
  }
  if (value.isTuple() || value.isList()) {
    std::vector<c10::IValue> items =
        value.isTuple() ? value.toTupleRef().elements().vec()
                        : value.toListRef().vec();
    std::vector<c10::IValue> wrapped;
    for (size_t i = 0; i < items.size(); ++i) {
      wrapped.push_back(wrap_outputs(getitem(node, static_cast<int64_t>(i)),
                                     items[i], what));
    }
    if (value.isTuple()) return c10::ivalue::Tuple::create(std::move(wrapped));
    // A list's length may follow from the inputs' sizes.
    read_sizes = true;
    if (value.isTensorList()) {
      c10::List<at::Tensor> list;
      for (auto& w : wrapped) list.push_back(w.toTensor());
      return list;
    }
    c10::impl::GenericList list(value.toList().elementType());
    for (auto& w : wrapped) list.push_back(std::move(w));
    return list;
  }
  if (value.isNone()) return value;
  throw TraceError(absl::StrCat(
      what, " returned a ", value.tagKind(),
      ": fx runs opaque calls on zero-filled inputs while tracing, so a "
      "non-tensor result would be a made-up value. Return tensors from it, "
      "or trace through it"));
}

// --- Tracer ------------------------------------------------------------------

Tracer::Tracer(TraceOptions options) : options_(std::move(options)) {}

Tracer::~Tracer() = default;

bool Tracer::is_leaf_module(const torch::nn::Module& /*module*/,
                            const std::string& qualified_path) {
  return options_.leaf_modules.count(qualified_path) > 0;
}

Node* Tracer::create_node(Opcode op, const Target& target,
                          std::vector<Argument> args, Kwargs kwargs,
                          const std::string& name) {
  return active_session("create_node")
      .graph->create_node(op, target, std::move(args), std::move(kwargs), name);
}

Argument Tracer::create_arg(const at::Tensor& tensor) {
  Session& s = active_session("create_arg");
  if (internal::ProxyImpl* p = internal::as_proxy(tensor)) {
    if (p->session() != s.id) {
      throw TraceError(absl::StrCat(
          "a proxy tensor of another trace reached this one", s.location(),
          " (through a leaf module, a wrapped function or a captured "
          "tensor): do not keep tensors from one trace for the next"));
    }
    return p->node();
  }
  const c10::TensorImpl* impl = tensor.unsafeGetTensorImpl();
  if (auto it = s.tensor_nodes.find(impl); it != s.tensor_nodes.end()) {
    return it->second;
  }
  Node* node;
  auto base = tensor.has_storage() ? s.fresh_bases.find(
                                         tensor.storage().unsafeGetStorageImpl())
                                   : s.fresh_bases.end();
  if (auto it = s.attribute_paths.find(impl); it != s.attribute_paths.end()) {
    node = create_node(Opcode::kGetAttr, Target(it->second), {}, {}, "");
  } else if (base != s.fresh_bases.end() && !base->second.is_same(tensor)) {
    // A view, made while tracing, of a tensor built from C++ data: a view
    // of that tensor's one constant in the graph too, so that a write into
    // either is seen through the other.
    //   %_tensor_constant0 = get_attr[...]
    //   %as_strided = aten::as_strided(%_tensor_constant0, [2], [1], 1)
    std::vector<Argument> sizes, strides;
    for (int64_t v : tensor.sizes()) sizes.emplace_back(v);
    for (int64_t v : tensor.strides()) strides.emplace_back(v);
    node = create_node(Opcode::kCallFunction, op("aten::as_strided"),
                       {create_arg(base->second),
                        Argument::list(std::move(sizes)),
                        Argument::list(std::move(strides)),
                        tensor.storage_offset()},
                       {}, "");
  } else {
    std::string name = absl::StrCat("_tensor_constant", s.constants++);
    attributes_.buffers[name] = tensor;
    node = create_node(Opcode::kGetAttr, Target(name), {}, {}, "");
  }
  node->meta().set(kTensorMeta, tensor_meta_of(tensor));
  s.tensor_nodes[impl] = node;
  return node;
}

at::Tensor Tracer::create_proxy(Node* node, const TensorMeta& meta) {
  return internal::make_proxy(active_session("create_proxy").id, node, meta);
}

std::string Tracer::module_path(const torch::nn::Module& module) const {
  const Session& s = active_session("module_path");
  auto it = s.module_paths.find(&module);
  if (it == s.module_paths.end()) {
    throw TraceError(absl::StrCat(
        "fx::call: module ", module.name(),
        " is not a submodule of the traced module (modules are found by "
        "identity among root->named_modules())"));
  }
  return it->second;
}

void Tracer::push_module_path(const std::string& path) {
  active_session("push_module_path").module_stack.push_back(path);
}

void Tracer::pop_module_path() {
  Session& s = active_session("pop_module_path");
  if (!s.module_stack.empty()) s.module_stack.pop_back();
}

Tracer::Session& Tracer::active_session(const char* what) const {
  if (!session_) {
    throw TraceError(absl::StrCat(
        "Tracer::", what, " was called outside a trace: it is for use while "
        "Tracer::trace runs"));
  }
  return *session_;
}

namespace {

std::vector<Argument> input_arguments(Tracer& tracer,
                                      const std::vector<c10::IValue>& inputs) {
  std::vector<Argument> args;
  for (const c10::IValue& v : inputs) {
    // An undefined tensor (C++'s "no tensor") is None.
    args.push_back(ivalue_to_argument(v, nullptr, [&](const at::Tensor& t) {
      return t.defined() ? tracer.create_arg(t) : Argument();
    }));
  }
  return args;
}

}  // namespace

c10::IValue Tracer::call_leaf_module(const std::string& path, LeafModule leaf,
                                     std::vector<c10::IValue> inputs) {
  InternalScope internal;
  if (path.empty()) {
    throw TraceError("the root module cannot be a leaf module");
  }
  Node* node;
  try {
    node = create_node(Opcode::kCallModule, Target(path),
                       input_arguments(*this, inputs), {}, "");
  } catch (const GraphError& e) {
    throw TraceError(absl::StrCat("fx::call(", path, "): ", e.msg()));
  }
  active_session("call_leaf_module").annotate(node, {});
  node->meta().set(kModulePath, path);
  c10::IValue result;
  {
    SuspendTracing suspend;
    BufferSnapshot snapshot(*leaf.module);
    torch::NoGradGuard no_grad;
    std::vector<c10::IValue> zeros;
    for (const c10::IValue& v : inputs) {
      zeros.push_back(internal::zeros_like_value(v));
    }
    try {
      result = leaf.forward(zeros);
    } catch (const c10::Error& e) {
      throw TraceError(absl::StrCat(
          "leaf module '", path, "' failed on zero-filled inputs of the "
          "example shapes (fx runs it so to learn its outputs' shapes): ",
          e.what_without_backtrace()));
    }
  }
  ++stats_.opaque_calls;
  attributes_.modules[path] = std::move(leaf);
  return session_->wrap_outputs(node, result,
                                absl::StrCat("leaf module '", path, "'"));
}

c10::IValue Tracer::call_function(const Function* function,
                                  const BoxedFunction& impl,
                                  std::vector<c10::IValue> inputs) {
  InternalScope internal;
  Node* node;
  try {
    node = create_node(Opcode::kCallFunction, Target(function),
                       input_arguments(*this, inputs), {}, "");
  } catch (const GraphError& e) {
    throw TraceError(absl::StrCat(function->name(), ": ", e.msg()));
  }
  active_session("call_function").annotate(node, node->args());
  c10::IValue result;
  {
    SuspendTracing suspend;
    torch::NoGradGuard no_grad;
    std::vector<c10::IValue> zeros;
    for (const c10::IValue& v : inputs) {
      zeros.push_back(internal::zeros_like_value(v));
    }
    try {
      result = impl(zeros);
    } catch (const c10::Error& e) {
      throw TraceError(absl::StrCat(
          "wrapped function ", function->name(),
          " failed on zero-filled inputs of the example shapes (fx runs it "
          "so to learn its outputs' shapes): ",
          e.what_without_backtrace()));
    }
  }
  ++stats_.opaque_calls;
  return session_->wrap_outputs(
      node, result, absl::StrCat("wrapped function ", function->name()));
}

Argument Tracer::output_argument(const c10::IValue& value) {
  if (value.isTensor()) {
    return value.toTensor().defined() ? create_arg(value.toTensor())
                                      : Argument();
  }
  if (value.isTuple() || value.isList()) {
    std::vector<Argument> elems;
    auto items = value.isTuple() ? value.toTupleRef().elements().vec()
                                 : value.toListRef().vec();
    for (const c10::IValue& e : items) elems.push_back(output_argument(e));
    return value.isTuple() ? Argument::tuple(std::move(elems))
                           : Argument::list(std::move(elems));
  }
  if (value.isGenericDict() &&
      value.toGenericDict().keyType()->kind() == c10::TypeKind::StringType) {
    // One node of the builtin dict(keys, values), in insertion order:
    //   %dict = dict(['out', 'aux'], [%relu, %add]); return %dict
    std::vector<Argument> keys, values;
    for (const auto& item : value.toGenericDict()) {
      keys.emplace_back(item.key().toStringRef());
      values.push_back(output_argument(item.value()));
    }
    return create_node(Opcode::kCallFunction, Target(find_function("dict")),
                       {Argument::list(std::move(keys)),
                        Argument::list(std::move(values))},
                       {}, "");
  }
  try {
    return ivalue_to_argument(value, nullptr, [](const at::Tensor&) {
      return Argument();
    });
  } catch (const GraphError&) {
    throw TraceError(absl::StrCat(
        "forward returned a ", value.tagKind(),
        ", which a graph cannot return: return tensors, tuples or lists of "
        "them, or plain values"));
  }
}

std::unique_ptr<Graph> Tracer::trace(
    const std::shared_ptr<torch::nn::Module>& root, const BoxedForward& forward,
    const std::vector<c10::IValue>& example_inputs) {
  return trace(root, nullptr, forward, example_inputs);
}

std::unique_ptr<Graph> Tracer::trace(
    const Attributes& named, const BoxedForward& forward,
    const std::vector<c10::IValue>& example_inputs) {
  return trace(nullptr, &named, forward, example_inputs);
}

void Tracer::Session::name_attributes(const Attributes* named) {
  if (named != nullptr) {
    for (const auto* tensors : {&named->parameters, &named->buffers}) {
      for (const auto& [path, tensor] : *tensors) {
        if (tensor.defined()) {
          attribute_paths.emplace(tensor.unsafeGetTensorImpl(), path);
        }
      }
    }
  } else if (auto* gm = dynamic_cast<const GraphModuleImpl*>(root.get())) {
    // A GraphModule (re-traced by a Transformer) knows its attributes; its
    // empty holder modules have nothing fx::call could name.
    for (const auto& [path, tensor] : gm->tensor_attributes()) {
      if (tensor.defined()) {
        attribute_paths.emplace(tensor.unsafeGetTensorImpl(), path);
      }
    }
    module_paths.emplace(gm, "");
    for (const auto& [path, leaf] : gm->leaf_modules()) {
      module_paths.emplace(leaf.module.get(), path);
    }
  } else if (root) {
    for (const auto& item : root->named_parameters(/*recurse=*/true)) {
      attribute_paths.emplace(item.value().unsafeGetTensorImpl(), item.key());
    }
    for (const auto& item : root->named_buffers(/*recurse=*/true)) {
      if (item.value().defined()) {
        attribute_paths.emplace(item.value().unsafeGetTensorImpl(), item.key());
      }
    }
    for (const auto& item :
         root->named_modules(/*name_prefix=*/"", /*include_self=*/true)) {
      module_paths.emplace(item.value().get(), item.key());
    }
  }
}

namespace {

InputGuard tensor_guard(const at::Tensor& t) {
  InputGuard g;
  g.kind = InputGuard::Kind::kTensor;
  g.dtype = t.scalar_type();
  g.device = t.device();
  g.dim = t.dim();
  g.sizes = t.sizes().vec();
  g.strides = t.strides().vec();
  return g;
}

}  // namespace

c10::IValue Tracer::Session::make_input(size_t i, const c10::IValue& v,
                                        size_t count) {
  const auto& names = tracer->options_.input_names;
  std::string name = names.empty() ? (count == 1 ? std::string("x")
                                                 : absl::StrCat("x", i))
                                   : names[i];
  Node* ph = tracer->create_node(Opcode::kPlaceholder, Target(name), {}, {},
                                 name);
  placeholders.push_back(ph);
  InputGuard guard;
  c10::IValue input;
  if (v.isTensor() && v.toTensor().defined()) {
    const at::Tensor& t = v.toTensor();
    if (internal::as_proxy(t)) {
      throw TraceError(absl::StrCat("example input ", i,
                                    " is a proxy of another trace"));
    }
    TensorMeta meta = tensor_meta_of(t);
    meta.requires_grad = false;
    ph->meta().set(kTensorMeta, meta);
    input = tracer->create_proxy(ph, meta);
    guard = tensor_guard(t);
  } else if (v.isTensorList()) {
    c10::List<at::Tensor> proxies;
    guard.kind = InputGuard::Kind::kTensorList;
    std::vector<TensorMeta> metas;
    auto list = v.toTensorVector();
    for (size_t j = 0; j < list.size(); ++j) {
      TensorMeta meta = tensor_meta_of(list[j]);
      meta.requires_grad = false;
      Node* item = getitem(ph, static_cast<int64_t>(j));
      item->meta().set(kTensorMeta, meta);
      proxies.push_back(tracer->create_proxy(item, meta));
      guard.elements.push_back(tensor_guard(list[j]));
      metas.push_back(meta);
    }
    ph->meta().set(kTensorMetaList, std::move(metas));
    input = c10::IValue(std::move(proxies));
  } else if (v.isNone() || v.isInt() || v.isDouble() || v.isBool() ||
             v.isString()) {
    guard.kind = InputGuard::Kind::kValue;
    guard.value = ivalue_to_argument(v, nullptr, [](const at::Tensor&) {
                    return Argument();
                  }).to_string();
    input = v;
  } else {
    throw TraceError(absl::StrCat(
        "example input ", i, " is a ", v.tagKind(),
        "; fx traces tensors, lists of tensors, and ints, doubles, "
        "bools and strings (which it bakes into the graph)"));
  }
  ph->meta().set(kGuard, std::move(guard));
  return input;
}

void Tracer::Session::finish(const c10::IValue& out) {
  tracer->create_node(Opcode::kOutput, Target("output"),
                      {tracer->output_argument(out)}, {}, "output");
  for (auto it = getitems.rbegin(); it != getitems.rend(); ++it) {
    if ((*it)->users().empty()) graph->erase_node(*it);
  }
  privatize_written_constants(*graph, tracer->attributes_);
  tracer->stats_.read_sizes = read_sizes;
  // What the traced code read of the inputs' sizes and layout is guarded.
  if (read_sizes) {
    for (Node* ph : placeholders) {
      InputGuard* g = ph->meta().get_mutable(kGuard);
      g->check_sizes = g->kind == InputGuard::Kind::kTensor;
      g->check_strides = g->check_sizes && read_layout;
      for (InputGuard& e : g->elements) {
        e.check_sizes = true;
        e.check_strides = read_layout;
      }
    }
  }
  graph->lint();
}

std::unique_ptr<Graph> Tracer::trace(
    const std::shared_ptr<torch::nn::Module>& root, const Attributes* named,
    const BoxedForward& forward,
    const std::vector<c10::IValue>& example_inputs) {
  attributes_ = Attributes();
  stats_ = TraceStats();
  auto session = std::make_unique<Session>();
  session->tracer = this;
  session->id = next_session_id++;
  session->graph = std::make_unique<Graph>();
  session->root = root;
  session->name_attributes(named);
  if (!options_.input_names.empty() &&
      options_.input_names.size() != example_inputs.size()) {
    throw TraceError(absl::StrCat(
        "TraceOptions::input_names has ", options_.input_names.size(),
        " names for ", example_inputs.size(), " example inputs"));
  }

  // Install the session for this thread; everything is undone on exit.
  session_ = std::move(session);
  Session* s = session_.get();
  s->enclosing = current_session;
  struct Uninstall {
    Tracer* tracer;
    ~Uninstall() {
      current_session = tracer->session_->enclosing;
      // The session (and graph) live only while tracing: proxies of this
      // trace are refused by any later one.
      tracer->session_.reset();
    }
  } uninstall{this};
  current_session = s;
  DispatchState dispatch(/*included=*/true, /*excluded=*/false);

  try {
    std::vector<c10::IValue> inputs;
    {
      InternalScope internal;
      for (size_t i = 0; i < example_inputs.size(); ++i) {
        inputs.push_back(s->make_input(i, example_inputs[i],
                                       example_inputs.size()));
      }
    }
    c10::IValue out;
    {
      UserScope user;
      out = forward(inputs);
    }
    InternalScope internal;
    s->finish(out);
  } catch (const TraceError&) {
    throw;
  } catch (const c10::Error& e) {
    std::string what = e.what_without_backtrace();
    std::string hint;
    if (absl::StrContains(what, "fx proxy tensor") ||
        absl::StrContains(what, "storage")) {
      hint =
          " (the program read a tensor's data directly, e.g. data_ptr(), "
          "accessor() or a tensor built from it in place; that depends on "
          "data. Create constant tensors outside forward, e.g. with "
          "register_buffer in the constructor.) ";
      hint += kWorkaround;
    }
    throw TraceError(absl::StrCat("tracing failed", s->location(), ": ", what,
                                  hint));
  }
  if (root) attributes_.traced_training = root->is_training();
  stats_.nodes = static_cast<int64_t>(s->graph->size());
  std::unique_ptr<Graph> graph = std::move(s->graph);
  return graph;
}

Attributes Tracer::take_attributes() { return std::move(attributes_); }

GraphModule symbolic_trace(const std::shared_ptr<torch::nn::Module>& root,
                           const BoxedForward& forward,
                           const std::vector<c10::IValue>& example_inputs,
                           const TraceOptions& options) {
  Tracer tracer(options);
  std::unique_ptr<Graph> graph = tracer.trace(root, forward, example_inputs);
  return GraphModule(root, std::move(graph), tracer.take_attributes());
}

}  // namespace fx
