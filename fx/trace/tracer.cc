#include "fx/trace/tracer.h"

#include <atomic>

#include <torch/utils.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "fx/ir/data_dependent.h"
#include "fx/ir/errors.h"
#include "fx/ir/operator_schemas.h"
#include "fx/runtime/buffer_snapshot.h"
#include "fx/runtime/guards.h"
#include "fx/trace/internal/bounds.h"
#include "fx/trace/internal/generalize.h"
#include "fx/trace/internal/proxy.h"
#include "fx/trace/internal/session.h"
#include "fx/trace/internal/shape_inference.h"
#include "fx/trace/internal/size_fit.h"

namespace fx {

using internal::current_session;
using internal::DispatchState;
using internal::InternalScope;
using internal::kWorkaround;
using internal::SuspendTracing;
using internal::UserScope;

namespace {

std::atomic<uint64_t> next_session_id{1};

// Traces past the first three that tell fits of a size apart (each about
// halves the candidates: internal/size_fit.h).
constexpr int kMaxFittingTraces = 16;

}  // namespace

namespace detail {
Tracer* active_tracer() {
  return current_session != nullptr ? current_session->tracer : nullptr;
}
}  // namespace detail

Tracer::Tracer(TraceOptions options) : options_(std::move(options)) {}

Tracer::~Tracer() = default;

bool Tracer::is_leaf_module(const torch::nn::Module& /*module*/,
                            const std::string& qualified_path) {
  return options_.leaf_modules.count(qualified_path) > 0;
}

Node* Tracer::create_node(Opcode op, const Target& target,
                          std::vector<Argument> args, Kwargs kwargs,
                          const std::string& name) {
  Session& s = active_session("create_node");
  if (!s.bodies.empty()) {
    // In a body of control flow, values of the enclosing graphs (sizes
    // the TorchScript import computed outside it, say) are lifted.
    auto lift = [&](Node* n) -> Argument {
      return &n->graph() == s.graph.get() ? n
                                          : s.lift(n, s.bodies.size() - 1);
    };
    for (Argument& a : args) a = map_arg(a, lift);
    for (auto& kv : kwargs) kv.second = map_arg(kv.second, lift);
  }
  return s.graph->create_node(op, target, std::move(args), std::move(kwargs),
                              name);
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
    Node* n = p->node();
    if (&n->graph() == s.graph.get()) return n;
    if (!s.bodies.empty()) return s.lift(n, s.bodies.size() - 1);
    throw TraceError(absl::StrCat(
        "%", n->name(), ", computed inside a body of fx::cond or "
        "fx::while_loop, was used outside it", s.location(),
        ": return it from the body instead"));
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
    // Buffers restored after it ran on zeros for its outputs' metadata (a
    // BatchNorm in training mode would update its running statistics).
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
    snapshot.restore();
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

std::pair<Node*, int64_t> Tracer::record_sym_size(const at::Tensor& tensor,
                                                  int64_t dim,
                                                  const std::string& name) {
  InternalScope internal;
  Session& s = active_session("record_sym_size");
  const int64_t size = tensor.size(dim);
  internal::ProxyImpl* proxy = internal::as_proxy(tensor);
  if (proxy == nullptr || proxy->session() != s.id) return {nullptr, size};
  const int64_t d = dim < 0 ? dim + tensor.dim() : dim;
  return {create_node(Opcode::kCallFunction, Target(sym_size()),
                      {proxy->node(), d}, {}, name),
          size};
}

Node* Tracer::record_sym_call(const Function* function, Argument a,
                              Argument b, const std::string& name) {
  active_session("record_sym_call");
  return create_node(Opcode::kCallFunction, Target(function),
                     {std::move(a), std::move(b)}, {}, name);
}

void Tracer::substitute_next(const c10::OperatorName& op,
                             std::vector<std::pair<size_t, Argument>> args) {
  Session& s = active_session("substitute_next");
  if (s.substitution) s.read_sizes = true;  // an earlier one no call took
  s.substitution = Session::Substitution{op, std::move(args)};
}

bool Tracer::end_substitution() {
  Session& s = active_session("end_substitution");
  if (!s.substitution) return false;
  s.substitution.reset();
  s.read_sizes = true;
  return true;
}

Tracer::ListLengthChecks::ListLengthChecks(Tracer* tracer,
                                           const std::string& where)
    : tracer_(tracer) {
  if (tracer_ != nullptr) {
    tracer_->active_session("ListLengthChecks").list_checks = where;
  }
}

Tracer::ListLengthChecks::~ListLengthChecks() {
  if (tracer_ != nullptr && tracer_->session_) {
    tracer_->session_->list_checks.clear();
  }
}

void Tracer::specialize_sizes(const std::string& reason) {
  Session& s = active_session("specialize_sizes");
  if (s.specialized_by.empty()) s.specialized_by = reason;
  s.read_sizes = true;
}

bool Tracer::sizes_specialized() const {
  return active_session("sizes_specialized").read_sizes;
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

int64_t Tracer::unbacked_size(const std::string& op, int64_t max) {
  const size_t k = session_->unbacked_count++;
  if (k == unbacked_.size()) {
    if (!finding_unbacked_) {
      throw TraceError(absl::StrCat(
          op, " returns a tensor whose size depends on data, in a trace at "
          "other sizes only: the program calls such operators depending on "
          "sizes, which fx cannot generalize"));
    }
    DynamicDim d;
    d.input = DynamicDim::kOperatorOutput;
    d.min = 0;
    // Bounded by the elements it selects from in this trace, unless the
    // inputs' dimensions vary; Tracer::trace finds the bound it has at
    // the others' bounds.
    if (options_.dynamic.empty()) d.max = max;
    std::vector<DynamicDim> taken = options_.dynamic;
    taken.insert(taken.end(), unbacked_.begin(), unbacked_.end());
    d.symbol = data_dependent_symbol(k, taken);
    unbacked_.push_back(d);
    // The first trace's: neither 0 nor 1 (where programs change), nor the
    // max, so that the bounds are elsewhere.
    unbacked_sizes_[d.symbol] = d.max >= 16 ? 8 : std::max<int64_t>(d.max / 2, 0);
  }
  DynamicDim& d = unbacked_[k];
  if (unbacked_nodes_.size() != k) {
    throw TraceError(absl::StrCat(op, " is data-dependent but was not recorded"));
  }
  const int64_t size = unbacked_sizes_.at(d.symbol);
  // Tracing at the bounds (internal/bounds.h): all it selects from, the
  // bound it has in this trace, kept as the symbol's max.
  if (size != internal::kAtBound) return size;
  d.max = max;
  return max;
}

std::unique_ptr<Graph> Tracer::trace(
    const std::shared_ptr<torch::nn::Module>& root, const Attributes* named,
    const BoxedForward& forward,
    const std::vector<c10::IValue>& example_inputs) {
  unbacked_.clear();
  unbacked_sizes_.clear();
  internal::Trace base;
  if (!options_.dynamic.empty()) {
    base.sizes = internal::example_sizes(options_.dynamic, example_inputs);
  }
  {
    finding_unbacked_ = true;
    struct Reset {
      bool* flag;
      ~Reset() { *flag = false; }
    } reset{&finding_unbacked_};
    base.graph = trace_once(root, named, forward, example_inputs);
  }
  if (options_.dynamic.empty() && unbacked_.empty()) return std::move(base.graph);
  // The dynamic dimensions, then the data-dependent sizes (their bounds
  // found below).
  std::vector<DynamicDim> traced_dims = options_.dynamic;
  traced_dims.insert(traced_dims.end(), unbacked_.begin(), unbacked_.end());
  for (const DynamicDim& d : unbacked_) {
    base.sizes[d.symbol] = unbacked_sizes_.at(d.symbol);
  }
  auto take = [&](internal::Trace& t) {
    t.attributes = std::move(attributes_);
    for (size_t k = 0; k < unbacked_nodes_.size() && k < unbacked_.size(); ++k) {
      t.unbacked[unbacked_[k].symbol] = {unbacked_nodes_[k].first,
                                         unbacked_nodes_[k].second,
                                         unbacked_[k].max};
    }
  };
  take(base);
  // Traces at `sizes`: the inputs' dynamic dimensions resized, the
  // data-dependent sizes given.
  auto trace_at = [&](const internal::SymbolSizes& sizes, bool filled) {
    unbacked_sizes_ = sizes;
    internal::Trace t;
    t.graph = trace_once(
        root, named, forward,
        resized_inputs(example_inputs, traced_dims, sizes, filled));
    take(t);
    t.sizes = sizes;
    return t;
  };
  // What the data-dependent symbols are, for errors that name them.
  std::string symbols;
  for (size_t k = 0; k < unbacked_.size() && k < unbacked_nodes_.size(); ++k) {
    absl::StrAppend(&symbols, symbols.empty() ? "" : "; ", unbacked_[k].symbol,
                    " is the size of ",
                    unbacked_nodes_[k].first->target().to_string(), "'s output %",
                    unbacked_nodes_[k].first->name());
  }
  const TraceStats stats = stats_;
  // Each data-dependent size's bound (internal/bounds.h), where the inputs'
  // dynamic dimensions have a max (at it); without one, the selections
  // from them stay unbounded.
  bool bounded = !unbacked_.empty();
  internal::SymbolSizes hints = base.sizes;
  for (const DynamicDim& d : options_.dynamic) {
    const std::optional<int64_t> highest = internal::highest_size(d);
    bounded = bounded && highest.has_value();
    if (highest) hints[d.symbol] = *highest;
  }
  std::vector<std::string> narrowed;
  int64_t bound_traces = 0;
  if (bounded) {
    internal::DataDependentBounds found;
    try {
      found = internal::data_dependent_bounds(
          unbacked_, hints,
          [&](const internal::SymbolSizes& sizes, std::vector<int64_t>* seen) {
            for (DynamicDim& d : unbacked_) d.max = -1;
            struct Seen {
              const std::vector<DynamicDim>& unbacked;
              std::vector<int64_t>* seen;
              ~Seen() {
                for (size_t k = 0; k < unbacked.size(); ++k) {
                  (*seen)[k] = unbacked[k].max;
                }
              }
            } record{unbacked_, seen};
            trace_at(sizes, /*filled=*/false);
          });
    } catch (const TraceError& e) {
      throw TraceError(absl::StrCat(
          "finding the bounds of the sizes that depend on data failed: "
          "tracing ", e.msg(), "\n(", symbols, ")"));
    }
    for (size_t k = 0; k < unbacked_.size(); ++k) {
      unbacked_[k].max = found.max[k];
      base.unbacked.at(unbacked_[k].symbol).max = found.selects_from[k];
    }
    narrowed = std::move(found.narrowed);
    bound_traces = found.traces;
  }
  std::vector<DynamicDim> dims = options_.dynamic;
  dims.insert(dims.end(), unbacked_.begin(), unbacked_.end());
  std::vector<internal::Trace> others;
  try {
    std::vector<internal::SymbolSizes> samples;
    try {
      samples = sample_sizes(dims, base.sizes);
    } catch (const TraceError&) {
      // Bounds that leave too few sizes: fatal only where sizes were read.
      if (stats.read_sizes) throw;
    }
    for (internal::SymbolSizes& sizes : samples) {
      try {
        others.push_back(trace_at(sizes, /*filled=*/true));
      } catch (const TraceError& e) {
        if (!stats.read_sizes) {
          // Nothing was read, yet the program cannot run at another size: the
          // dimension is one it needs fixed (a Linear's features), and the
          // graph would fail inside a node at any other size.
          throw TraceError(absl::StrCat(
              "tracing again at ", internal::describe(sizes),
              " (other sizes of the dynamic dimensions) failed: ", e.msg(),
              "\nThe program cannot run at that size, so the dimension cannot "
              "be dynamic (a size a layer was built for, such as a Linear's "
              "in_features): leave it static, or bound it to the sizes the "
              "program takes"));
        }
        throw TraceError(absl::StrCat(
            "tracing again at ", internal::describe(sizes),
            " (other sizes of the dynamic dimensions, to generalize the graph) "
            "failed: ", e.msg(),
            "\nIf two dimensions must be equal, give them one symbol; if a "
            "size must divide, give DynamicDim::multiple_of"));
      }
    }
    if (!stats.read_sizes) {
      // Nothing was specialized to the example's sizes: the other traces give
      // only the metadata's symbolic sizes. Traced at the high bounds
      // too, where every symbol has one, so that a size the near traces
      // explain by a function that does not hold there (x.slice(0, 0, 20)
      // is [B] below B = 20) is left unknown rather than wrong; a program
      // that fails there fails eagerly too, and the trace is left out.
      internal::SymbolSizes high = base.sizes;
      bool bounded_above = true;
      for (const DynamicDim& d : dims) {
        const std::optional<int64_t> size = internal::highest_size(d);
        bounded_above = bounded_above && size.has_value() && *size >= 2;
        if (size) high[d.symbol] = *size;
      }
      bool traced = high == base.sizes;
      for (const internal::Trace& t : others) traced = traced || t.sizes == high;
      if (bounded_above && !traced) {
        try {
          others.push_back(trace_at(high, /*filled=*/false));
        } catch (const TraceError&) {
        } catch (const c10::Error&) {  // inputs at a large bound
        }
      }
      if (!others.empty()) internal::fit_metadata(base, others, dims);
      internal::mark_dynamic(*base.graph, dims);
    } else {
      // The near traces generalize first (refusing a program that changes
      // between them; undecided_sizes checks what check_generalizes would),
      // traced again where a literal has several fits that explain them (a
      // rounding's offset, a sum's terms); then traces at the bounds check or
      // narrow them.
      for (int round = 0;; ++round) {
        std::optional<internal::SymbolSizes> sizes =
            internal::undecided_sizes(base, others, dims);
        if (!sizes) break;
        if (round == kMaxFittingTraces) {
          throw TraceError(absl::StrCat(
              "the dynamic dimensions cannot be generalized: after ",
              kMaxFittingTraces, " more traces a size still has two fits that "
              "differ at ", internal::describe(*sizes),
              ". Make the dimension static, or bound it"));
        }
        try {
          others.push_back(trace_at(*sizes, /*filled=*/true));
        } catch (const TraceError& e) {
          throw TraceError(absl::StrCat(
              "tracing again at ", internal::describe(*sizes),
              " (to tell apart two functions of the dynamic sizes that explain "
              "a size) failed: ", e.msg()));
        }
      }
      internal::VerifiedBounds bounds = internal::verify_bounds(
          base, others, dims, [&](const internal::SymbolSizes& sizes) {
            return trace_at(sizes, /*filled=*/false);
          });
      std::vector<const internal::Trace*> checks;
      for (const internal::Trace& t : bounds.checks) checks.push_back(&t);
      internal::generalize(base, others, bounds.dims, checks);
      bound_traces += bounds.traces;
      narrowed.insert(narrowed.end(), bounds.narrowed.begin(),
                      bounds.narrowed.end());
    }
  } catch (const TraceError& e) {
    if (symbols.empty()) throw;
    throw TraceError(absl::StrCat(
        e.msg(), "\n(", symbols, ", which depends on the data: the program "
        "computes with it as a size only, or the graph cannot hold it)"));
  }
  attributes_ = std::move(base.attributes);
  stats_ = stats;
  for (const std::string& line : narrowed) {
    TORCH_WARN("fx::symbolic_trace narrowed a dynamic dimension to ", line);
  }
  stats_.narrowed = std::move(narrowed);
  stats_.traces = 1 + static_cast<int64_t>(others.size()) + bound_traces;
  stats_.nodes = static_cast<int64_t>(base.graph->size());
  return std::move(base.graph);
}

std::unique_ptr<Graph> Tracer::trace_once(
    const std::shared_ptr<torch::nn::Module>& root, const Attributes* named,
    const BoxedForward& forward,
    const std::vector<c10::IValue>& example_inputs) {
  attributes_ = Attributes();
  stats_ = TraceStats();
  unbacked_nodes_.clear();
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
