#include "fx/trace/internal/session.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/utils.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "fx/ir/data_dependent.h"
#include "fx/ir/errors.h"
#include "fx/ir/operator_schemas.h"
#include "fx/trace/internal/privatize_written_constants.h"
#include "fx/trace/internal/proxy.h"
#include "fx/trace/internal/user_frames.h"

namespace fx {

namespace internal {

std::string op_name(const c10::OperatorHandle& op) {
  return Target(op).to_string();
}

const char* const kWorkaround =
    "To trace past it: make the code that needs the value a leaf module "
    "(call it through fx::call and list its path in "
    "TraceOptions::leaf_modules or override Tracer::is_leaf_module), wrap the "
    "function that needs it with fx::wrap, or pass the value as a non-tensor "
    "input (it is then baked into the graph and guarded).";

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

using internal::InternalScope;
using internal::kWorkaround;
using internal::op_name;
using internal::privatize_written_constants;
using internal::user_frames;

namespace {

bool is_data_dependent(const c10::OperatorHandle& op) {
  if (op.hasTag(at::Tag::data_dependent_output)) return true;
  const std::string& name = op.schema().name();
  return name == "aten::item" || name == "aten::_local_scalar_dense" ||
         name == "aten::is_nonzero" || name == "aten::allclose" ||
         name == "aten::equal";
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

}  // namespace

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

void Tracer::Session::erase_unused_getitems() {
  for (auto it = getitems.rbegin(); it != getitems.rend(); ++it) {
    if ((*it)->users().empty()) graph->erase_node(*it);
  }
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
  // Size nodes for this call's ints (Tracer::substitute_next): taken by
  // the node recorded below; any other outcome uses the ints as constants.
  std::vector<std::pair<size_t, Argument>> sizes;
  if (substitution && substitution->op == schema.operator_name()) {
    sizes = std::move(substitution->args);
    substitution.reset();
  }
  struct Specialize {
    Session* s;
    const std::vector<std::pair<size_t, Argument>>* sizes;
    bool taken = false;
    ~Specialize() {
      if (!taken && !sizes->empty()) s->read_sizes = true;
    }
  } specialize{this, &sizes};
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
    if (!read_sizes) specialized_by = op_name(op);
    read_sizes = true;
    for (auto& out : outputs) stack->push_back(std::move(out.value));
    return;
  }

  substitute(std::move(sizes), &full);
  specialize.taken = true;
  Node* node = call_node(op, full, outputs);
  if (data_dependent) {
    tracer->unbacked_nodes_.emplace_back(node, data_dependent->output);
    data_dependent.reset();
  }
  push_outputs(op, node, written, &outputs, &args, stack);
}

namespace {

// `literal` with the nodes of `sizes` at their places, if `sizes` has the
// literal's structure (a node where the literal has an int).
std::optional<Argument> with_sizes(const Argument& literal,
                                   const Argument& sizes) {
  if (sizes.is_node()) {
    if (!literal.is_int()) return std::nullopt;
    return sizes;
  }
  if (!sizes.contains_node()) return literal;
  if (!sizes.is_sequence() || !literal.is_sequence() ||
      sizes.elements().size() != literal.elements().size()) {
    return std::nullopt;
  }
  std::vector<Argument> elements;
  for (size_t i = 0; i < literal.elements().size(); ++i) {
    std::optional<Argument> e =
        with_sizes(literal.elements()[i], sizes.elements()[i]);
    if (!e) return std::nullopt;
    elements.push_back(std::move(*e));
  }
  return literal.is_list() ? Argument::list(std::move(elements))
                           : Argument::tuple(std::move(elements));
}

}  // namespace

void Tracer::Session::substitute(
    std::vector<std::pair<size_t, Argument>> values,
    std::vector<Argument>* full) {
  for (auto& [index, sizes] : values) {
    std::optional<Argument> merged;
    if (index < full->size()) merged = with_sizes((*full)[index], sizes);
    if (merged) {
      (*full)[index] = std::move(*merged);
    } else {
      read_sizes = true;  // the ints are constants of this trace
    }
  }
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
  data_dependent.reset();
  // A tensor's rank is always guarded, so asking it specializes nothing.
  // LibTorch 2.13 dispatches TorchScript's aten::dim (1.13 answered it in
  // the interpreter, never reaching the tracer).
  if (op.schema().name() == "aten::dim" && args.size() == 1 &&
      args[0].isTensor()) {
    stack->emplace_back(args[0].toTensor().dim());
    return true;
  }
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
  try {
    data_dependent = data_dependent_size(op.schema(), args);
  } catch (const GraphError& e) {
    throw TraceError(absl::StrCat(e.msg(), location(), user_frames()));
  }
  const bool size = data_dependent.has_value();
  if (size || (op.hasTag(at::Tag::dynamic_output_shape) &&
               !indexes_with_integers(op, args))) {
    if (size && !bodies.empty()) {
      throw TraceError(absl::StrCat(
          op_name(op), location(),
          " returns a tensor whose size depends on the input's data inside "
          "the body of a cond or while_loop, where fx does not give it a "
          "symbol yet: call it before the control flow, or give its result "
          "a fixed size (torch::nonzero_static)", user_frames()));
    }
    // Its size becomes a symbol (outputs_of).
    if (size) return false;
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
  if (const std::optional<DataDependentSize>& d = data_dependent) {
    // A size of its own (u0, u1, ...), which the tracer varies from trace
    // to trace as it does the dynamic dimensions'.
    const int64_t size = tracer->unbacked_size(op_name(op), d->max);
    // The dimension of its output that has it (a mask after a leading
    // Slice() leaves it in dimension 1), for the node reading it.
    tracer->unbacked_[unbacked_count - 1].dim = d->dim;
    const at::Tensor& self = args[0].toTensor();
    const std::vector<std::vector<int64_t>> shapes = d->sizes_at(size);
    const std::vector<std::vector<int64_t>> strides = d->strides_at(size);
    for (size_t i = 0; i < shapes.size(); ++i) {
      internal::InferredOutput out;
      out.tensor.sizes = shapes[i];
      out.tensor.strides = strides[i];
      out.tensor.memory_format = memory_format_of(shapes[i], strides[i]);
      out.tensor.dtype = d->dtypes[i];
      out.tensor.device = self.device();
      outputs.push_back(std::move(out));
    }
    if (d->list) {
      // One output: a list of them (torch.where(mask)'s).
      internal::InferredOutput list;
      list.kind = internal::InferredOutput::Kind::kTensorList;
      for (internal::InferredOutput& out : outputs) {
        list.tensors.push_back(std::move(out.tensor));
      }
      outputs = {std::move(list)};
    }
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
  } catch (const std::runtime_error& e) {
    // TorchScript's shape functions raise std::runtime_error.
    throw TraceError(absl::StrCat(op_name(op), " failed on the example "
                                  "inputs' shapes while tracing",
                                  location(), ": ", e.what()));
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
        // chunk, ...), which C++ code then loops over: a size read, or,
        // where the caller asked (Tracer::ListLengthChecks), a check.
        Node* list = single ? node : getitem(node, r);
        if (!list_checks.empty()) {
          static const c10::OperatorHandle check =
              c10::Dispatcher::singleton().findSchemaOrThrow(
                  "fx_guard::check_length", "");
          tracer->create_node(
              Opcode::kCallFunction, Target(check),
              {list, static_cast<int64_t>(out.tensors.size()),
               absl::StrCat(op_name(op), " (", list_checks, ")")},
              {}, "");
        } else {
          if (!read_sizes) {
            specialized_by = absl::StrCat(op_name(op), " (a list of tensors)");
          }
          read_sizes = true;
        }
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
        // A number may follow from sizes; no tensor (MultiheadAttention's
        // weights when not asked for) does not.
        if (!(out.value.isTensor() && !out.value.toTensor().defined()) &&
            !out.value.isNone()) {
          read_sizes = true;
        }
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
  erase_unused_getitems();
  // Sizes recorded (Tracer::record_sym_size) but not used.
  const std::vector<Node*> nodes = graph->nodes().to_vector();
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
    if (is_sym_call(**it) && (*it)->users().empty()) graph->erase_node(*it);
  }
  privatize_written_constants(*graph, tracer->attributes_);
  // Size nodes no call took: their ints are constants of this trace.
  if (substitution) read_sizes = true;
  tracer->stats_.read_sizes = read_sizes;
  tracer->stats_.specialized_by = read_sizes ? specialized_by : "";
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

}  // namespace fx
