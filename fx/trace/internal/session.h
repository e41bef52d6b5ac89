// Internal to the tracer: the state of a running trace, Tracer::Session,
// and of the thread it runs on.
//
// Tracer::trace makes a Session and installs it for its thread
// (current_session); the dispatcher fallback (fallback.cc) hands it every
// operator called on a proxy, and Session::record records it into the
// session's Graph. The thread's state tells tracer code (InternalScope) from
// user code (UserScope): only user code's reads of a proxy's sizes
// specialize the trace.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/stack.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/nn/module.h>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "fx/ir/data_dependent.h"
#include "fx/ir/graph.h"
#include "fx/runtime/graph_module.h"
#include "fx/trace/internal/shape_inference.h"
#include "fx/trace/tracer.h"

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
  // Tracer::substitute_next's, until a call of its operator takes it.
  struct Substitution {
    c10::OperatorName op;
    std::vector<std::pair<size_t, Argument>> args;
  };
  std::optional<Substitution> substitution;
  std::string specialized_by;  // TraceStats::specialized_by
  std::string list_checks;     // Tracer::ListLengthChecks
  bool read_layout = false;
  // The data-dependent size of the operator being recorded
  // (answer_without_data finds it, outputs_of gives it a symbol, record
  // notes its node).
  std::optional<DataDependentSize> data_dependent;
  size_t unbacked_count = 0;  // such operators recorded so far
  Session* enclosing = nullptr;
  // The bodies of control flow being traced (fx::cond, fx::while_loop),
  // innermost last; `graph` is the innermost's while it is traced.
  struct BodyFrame {
    Graph* outer = nullptr;  // the graph it was called from
    Graph* body = nullptr;
    // The values of enclosing graphs the body reads: each is a placeholder
    // of the body after its inputs', and an operand of the call.
    absl::flat_hash_map<const Node*, Node*> placeholders;
    std::vector<Node*> lifted;  // in `outer`, in placeholder order
  };
  std::vector<BodyFrame> bodies;
  // The placeholder of bodies[frame] standing for `value`, a node of an
  // enclosing graph, made on first use (torch.cond lifts what its branches
  // close over the same way). Throws TraceError for a value of no enclosing
  // graph (computed in a body that has ended).
  Node* lift(Node* value, size_t frame);

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
  void substitute(std::vector<std::pair<size_t, Argument>> values,
                  std::vector<Argument>* full);
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
  // Erases the getitems made for multi-output calls that nothing used
  // (the recording graph's: a body's at its end, the graph's at finish).
  void erase_unused_getitems();
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

namespace internal {

// The session recording on this thread (the innermost trace), or nullptr.
inline thread_local Tracer::Session* current_session = nullptr;
// > 0 while tracer code (not user code) runs: size reads are not noticed.
inline thread_local int internal_depth = 0;

// Marks tracer code: what it reads of a proxy is not noticed.
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

// The operator as messages name it: aten::add.Tensor.
std::string op_name(const c10::OperatorHandle& op);

// How to trace past a program that needs tensor data, for TraceError
// messages.
extern const char* const kWorkaround;

}  // namespace internal
}  // namespace fx
