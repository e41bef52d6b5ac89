#include "fx/trace/control_flow.h"

#include <algorithm>
#include <string>
#include <utility>

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "fx/ir/control_flow.h"
#include "fx/ir/errors.h"
#include "fx/trace/internal/proxy.h"
#include "fx/trace/internal/session.h"

namespace fx {

using internal::InternalScope;

namespace {

// A placeholder of `body` after its others, standing for `like`.
Node* add_input(Graph& body, const Node& like) {
  Node* first = nullptr;
  for (Node* n : body.nodes()) {
    if (n->op() != Opcode::kPlaceholder) {
      first = n;
      break;
    }
  }
  // (inserting_before(nullptr) is the start; after(nullptr) the end.)
  InsertionGuard guard = first != nullptr ? body.inserting_before(first)
                                          : body.inserting_after(nullptr);
  Node* ph = body.create_node(Opcode::kPlaceholder, Target(like.name()), {},
                              {}, like.name());
  if (const TensorMeta* meta = like.meta().get(kTensorMeta)) {
    ph->meta().set(kTensorMeta, *meta);
  }
  return ph;
}

bool same_dtype_and_sizes(const TensorMeta& a, const TensorMeta& b) {
  return a.dtype == b.dtype && a.sizes == b.sizes && a.device == b.device;
}

void refuse_dynamic(const Tracer& tracer, const char* what) {
  if (!tracer.options().dynamic.empty()) {
    throw TraceError(absl::StrCat(
        what, " under TraceOptions::dynamic is not supported yet: trace "
        "with static shapes (fx::SpecializationCache traces one graph per "
        "shape)"));
  }
}

}  // namespace

Node* Tracer::Session::lift(Node* value, size_t frame) {
  BodyFrame& f = bodies[frame];
  if (auto it = f.placeholders.find(value); it != f.placeholders.end()) {
    return it->second;
  }
  Node* outer = value;
  if (&value->graph() != f.outer) {
    if (frame == 0) {
      throw TraceError(absl::StrCat(
          "%", value->name(), ", computed inside another body of fx::cond "
          "or fx::while_loop, reached this one", location(),
          ": return it from its body and pass it in the operands"));
    }
    outer = lift(value, frame - 1);
  }
  Node* ph = add_input(*f.body, *outer);
  f.placeholders[value] = ph;
  f.lifted.push_back(outer);
  return ph;
}

Tracer::TracedBody Tracer::trace_body(const BodyFunction& fn,
                                      const std::vector<at::Tensor>& inputs,
                                      const std::vector<Node*>& lift_first) {
  Session& s = active_session("trace_body");
  auto body = std::make_unique<Graph>();
  std::vector<at::Tensor> proxies;
  {
    InternalScope internal;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const at::Tensor& t = inputs[i];
      if (!t.defined()) {
        throw TraceError(absl::StrCat("operand ", i, " of a body of fx::cond "
                                      "or fx::while_loop is undefined"));
      }
      internal::ProxyImpl* p = internal::as_proxy(t);
      std::string name = p != nullptr && p->session() == s.id
                             ? p->node()->name()
                             : absl::StrCat("arg", i);
      Node* ph =
          body->create_node(Opcode::kPlaceholder, Target(name), {}, {}, name);
      TensorMeta meta = tensor_meta_of(t);
      meta.requires_grad = false;
      ph->meta().set(kTensorMeta, meta);
      proxies.push_back(create_proxy(ph, meta));
    }
  }
  // The session records into the body until it returns; its facts about
  // the calling graph's nodes wait.
  struct Switch {
    Session& s;
    std::unique_ptr<Graph> outer;
    decltype(Session::tensor_nodes) tensor_nodes;
    std::vector<Node*> getitems;
    Switch(Session& session, std::unique_ptr<Graph> body) : s(session) {
      s.bodies.push_back({s.graph.get(), body.get(), {}, {}});
      outer = std::move(s.graph);
      s.graph = std::move(body);
      tensor_nodes.swap(s.tensor_nodes);
      getitems.swap(s.getitems);
    }
    std::unique_ptr<Graph> restore() {
      std::unique_ptr<Graph> body = std::move(s.graph);
      s.graph = std::move(outer);
      tensor_nodes.swap(s.tensor_nodes);
      getitems.swap(s.getitems);
      s.bodies.pop_back();
      return body;
    }
    ~Switch() {
      if (outer) restore();
    }
  } in_body(s, std::move(body));

  TracedBody out;
  {
    InternalScope internal;
    for (Node* n : lift_first) s.lift(n, s.bodies.size() - 1);
  }
  std::vector<at::Tensor> results = fn(proxies);
  {
    InternalScope internal;
    std::vector<Argument> values;
    for (size_t i = 0; i < results.size(); ++i) {
      if (!results[i].defined()) {
        throw TraceError(absl::StrCat(
            "a body of fx::cond or fx::while_loop returned an undefined "
            "tensor as output ", i));
      }
      values.push_back(create_arg(results[i]));
      TensorMeta meta = tensor_meta_of(results[i]);
      meta.requires_grad = false;
      out.outputs.push_back(std::move(meta));
    }
    s.graph->create_node(Opcode::kOutput, Target("output"),
                         {Argument::tuple(std::move(values))}, {}, "output");
    s.erase_unused_getitems();
    out.lifted = s.bodies.back().lifted;
  }
  out.graph = in_body.restore();
  return out;
}

void Tracer::lift_more(TracedBody& body, const std::vector<Node*>& lifted) {
  for (size_t i = body.lifted.size(); i < lifted.size(); ++i) {
    add_input(*body.graph, *lifted[i]);
    body.lifted.push_back(lifted[i]);
  }
}

Node* Tracer::add_body(TracedBody body, const std::string& base) {
  Session& s = active_session("add_body");
  std::string name;
  for (int i = 0;; ++i) {
    name = absl::StrCat(base, "_", i);
    if (s.graph->subgraph(name) == nullptr) break;
  }
  s.graph->add_subgraph(name, std::move(body.graph));
  return create_node(Opcode::kGetAttr, Target(name), {}, {}, name);
}

std::vector<at::Tensor> Tracer::record_control_flow(
    const Function* function, std::vector<Argument> args,
    const std::vector<TensorMeta>& outputs) {
  Session& s = active_session("record_control_flow");
  Node* node = create_node(Opcode::kCallFunction, Target(function),
                           std::move(args), {}, "");
  s.annotate(node, node->args());
  node->meta().set(kTensorMetaList, outputs);
  std::vector<at::Tensor> proxies;
  for (size_t i = 0; i < outputs.size(); ++i) {
    Node* item = s.getitem(node, static_cast<int64_t>(i));
    item->meta().set(kTensorMeta, outputs[i]);
    proxies.push_back(create_proxy(item, outputs[i]));
  }
  return proxies;
}

namespace {

std::vector<Argument> operand_arguments(Tracer& tracer,
                                        const std::vector<at::Tensor>& values,
                                        const std::vector<Node*>& lifted) {
  std::vector<Argument> args;
  for (const at::Tensor& t : values) args.push_back(tracer.create_arg(t));
  for (Node* n : lifted) args.emplace_back(n);
  return args;
}

}  // namespace

std::vector<at::Tensor> cond(const at::Tensor& pred, const BodyFunction& true_fn,
                             const BodyFunction& false_fn,
                             const std::vector<at::Tensor>& operands) {
  Tracer* tracer = detail::active_tracer();
  if (tracer == nullptr || internal::as_proxy(pred) == nullptr) {
    return truth_of(pred, "fx::cond's predicate") ? true_fn(operands)
                                                   : false_fn(operands);
  }
  refuse_dynamic(*tracer, "fx::cond");
  {
    // What fx reads of a proxy here does not specialize the trace.
    InternalScope internal;
    const TensorMeta pred_meta = tensor_meta_of(pred);
    if (pred_meta.numel() != 1) {
      throw TraceError(absl::StrCat("fx::cond's predicate must have one "
                                    "element, got ", pred_meta.to_string()));
    }
  }
  Tracer::TracedBody t = tracer->trace_body(true_fn, operands, {});
  Tracer::TracedBody f = tracer->trace_body(false_fn, operands, t.lifted);
  Tracer::lift_more(t, f.lifted);
  if (t.outputs.size() != f.outputs.size()) {
    throw TraceError(absl::StrCat(
        "fx::cond: true_fn returned ", t.outputs.size(), " tensors and "
        "false_fn ", f.outputs.size(), ": both branches return as many "
        "tensors, of the same dtypes and sizes (as torch.cond's)"));
  }
  for (size_t i = 0; i < t.outputs.size(); ++i) {
    if (!same_dtype_and_sizes(t.outputs[i], f.outputs[i])) {
      throw TraceError(absl::StrCat(
          "fx::cond: output ", i, " is ", t.outputs[i].to_string(),
          " from true_fn and ", f.outputs[i].to_string(), " from false_fn: "
          "both branches return tensors of the same dtypes and sizes (as "
          "torch.cond's)"));
    }
  }
  InternalScope internal;
  std::vector<TensorMeta> outputs = t.outputs;
  std::vector<Argument> args = operand_arguments(*tracer, operands, f.lifted);
  Argument p = tracer->create_arg(pred);
  Node* true_graph = tracer->add_body(std::move(t), "true_graph");
  Node* false_graph = tracer->add_body(std::move(f), "false_graph");
  return tracer->record_control_flow(
      cond_function(),
      {p, true_graph, false_graph, Argument::list(std::move(args))}, outputs);
}

std::vector<at::Tensor> while_loop(
    const std::function<at::Tensor(const std::vector<at::Tensor>&)>& cond_fn,
    const BodyFunction& body_fn, std::vector<at::Tensor> carried) {
  Tracer* tracer = detail::active_tracer();
  if (tracer == nullptr) {
    for (int64_t iteration = 0;
         truth_of(cond_fn(carried), "fx::while_loop's cond_fn result");
         ++iteration) {
      std::vector<at::Tensor> next = body_fn(carried);
      check_carried_values(carried, next, iteration);
      carried = std::move(next);
    }
    return carried;
  }
  refuse_dynamic(*tracer, "fx::while_loop");
  std::vector<TensorMeta> outputs;
  {
    InternalScope internal;
    for (size_t i = 0; i < carried.size(); ++i) {
      if (!carried[i].defined()) {
        throw TraceError(absl::StrCat("fx::while_loop: carried value ", i,
                                      " is undefined"));
      }
      TensorMeta meta = tensor_meta_of(carried[i]);
      meta.requires_grad = false;
      outputs.push_back(std::move(meta));
    }
  }
  Tracer::TracedBody c = tracer->trace_body(
      [&](const std::vector<at::Tensor>& in) {
        return std::vector<at::Tensor>{cond_fn(in)};
      },
      carried, {});
  Tracer::TracedBody b = tracer->trace_body(body_fn, carried, c.lifted);
  Tracer::lift_more(c, b.lifted);
  if (c.outputs[0].numel() != 1) {
    throw TraceError(absl::StrCat(
        "fx::while_loop: cond_fn returned ", c.outputs[0].to_string(),
        "; it returns a one-element tensor"));
  }
  if (b.outputs.size() != carried.size()) {
    throw TraceError(absl::StrCat(
        "fx::while_loop: body_fn returned ", b.outputs.size(), " tensors for ",
        carried.size(), " carried ones"));
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!same_dtype_and_sizes(outputs[i], b.outputs[i])) {
      throw TraceError(absl::StrCat(
          "fx::while_loop: body_fn made carried value ", i, " ",
          b.outputs[i].to_string(), " from ", outputs[i].to_string(),
          ": a loop's carried values keep their dtypes and sizes (as "
          "torch.while_loop's)"));
    }
  }
  InternalScope internal;
  std::vector<Argument> values = operand_arguments(*tracer, carried, {});
  std::vector<Argument> additional;
  for (Node* n : b.lifted) additional.emplace_back(n);
  Node* cond_graph = tracer->add_body(std::move(c), "while_loop_cond_graph");
  Node* body_graph = tracer->add_body(std::move(b), "while_loop_body_graph");
  return tracer->record_control_flow(
      while_loop_function(),
      {cond_graph, body_graph, Argument::list(std::move(values)),
       Argument::list(std::move(additional))},
      outputs);
}

namespace {

// What scan and map record: `fn` traced on (*carried, *a slice of each xs)
// as the body, its outputs checked, and the node. The ys' metadata gets the
// xs' length in front.
std::vector<at::Tensor> record_steps(Tracer& tracer, const Function* function,
                                     const BodyFunction& fn,
                                     const std::vector<at::Tensor>& carried,
                                     const std::vector<at::Tensor>& xs,
                                     const char* name) {
  refuse_dynamic(tracer, name);
  std::vector<TensorMeta> outputs;
  std::vector<at::Tensor> inputs = carried;
  int64_t length = 0;
  {
    InternalScope internal;
    for (size_t i = 0; i < carried.size(); ++i) {
      if (!carried[i].defined()) {
        throw TraceError(absl::StrCat(name, ": init ", i, " is undefined"));
      }
      TensorMeta meta = tensor_meta_of(carried[i]);
      meta.requires_grad = false;
      outputs.push_back(std::move(meta));
    }
    std::vector<TensorMeta> metas;
    for (size_t i = 0; i < xs.size(); ++i) {
      if (!xs[i].defined()) {
        throw TraceError(absl::StrCat(name, ": xs ", i, " is undefined"));
      }
      metas.push_back(tensor_meta_of(xs[i]));
    }
    // The lengths checked as at run time, on tensors of the xs' metadata.
    internal::SuspendTracing suspend;
    std::vector<at::Tensor> like;
    for (const TensorMeta& m : metas) {
      like.push_back(at::empty(m.sizes, at::TensorOptions().dtype(m.dtype)));
    }
    try {
      length = scan_length(like, name);
    } catch (const ExecutionError& e) {
      throw TraceError(e.msg());
    }
    for (const at::Tensor& x : like) inputs.push_back(x.select(0, 0));
  }
  size_t ys = 0;
  Tracer::TracedBody b = tracer.trace_body(
      [&](const std::vector<at::Tensor>& in) {
        std::vector<at::Tensor> out = fn(in);
        if (out.size() < carried.size()) {
          throw TraceError(absl::StrCat(
              name, ": the body returned ", out.size(), " tensors for ",
              carried.size(), " carried ones"));
        }
        ys = out.size() - carried.size();
        return out;
      },
      inputs, {});
  for (size_t i = 0; i < carried.size(); ++i) {
    if (!same_dtype_and_sizes(outputs[i], b.outputs[i])) {
      throw TraceError(absl::StrCat(
          name, ": the body made carried value ", i, " ",
          b.outputs[i].to_string(), " from ", outputs[i].to_string(),
          ": carried values keep their dtypes and sizes (as torch.scan's)"));
    }
  }
  for (size_t k = 0; k < ys; ++k) {
    TensorMeta y = b.outputs[carried.size() + k];
    y.sizes.insert(y.sizes.begin(), length);
    // at::stack's result: contiguous.
    y.strides.assign(y.sizes.size(), 1);
    for (size_t d = y.sizes.size() - 1; d > 0; --d) {
      y.strides[d - 1] = y.strides[d] * std::max<int64_t>(y.sizes[d], 1);
    }
    y.memory_format = c10::MemoryFormat::Contiguous;
    outputs.push_back(std::move(y));
  }
  InternalScope internal;
  std::vector<Argument> init = operand_arguments(tracer, carried, {});
  std::vector<Argument> scanned = operand_arguments(tracer, xs, {});
  std::vector<Argument> additional;
  for (Node* n : b.lifted) additional.emplace_back(n);
  Node* body = tracer.add_body(
      std::move(b), function == scan_function() ? "scan_combine_graph"
                                                : "map_body_graph");
  std::vector<Argument> args = {body};
  if (function == scan_function()) args.push_back(Argument::list(std::move(init)));
  args.push_back(Argument::list(std::move(scanned)));
  args.push_back(Argument::list(std::move(additional)));
  return tracer.record_control_flow(function, std::move(args), outputs);
}

}  // namespace

ScanResult scan(const ScanFunction& combine_fn, std::vector<at::Tensor> init,
                const std::vector<at::Tensor>& xs) {
  const size_t carried = init.size();
  auto split = [carried](const std::vector<at::Tensor>& in) {
    return std::pair<std::vector<at::Tensor>, std::vector<at::Tensor>>{
        {in.begin(), in.begin() + carried}, {in.begin() + carried, in.end()}};
  };
  Tracer* tracer = detail::active_tracer();
  if (tracer == nullptr) {
    auto [last, ys] = run_steps(
        std::vector<c10::IValue>(init.begin(), init.end()), xs,
        [&](const std::vector<c10::IValue>& now, std::vector<at::Tensor> x,
            int64_t) {
          std::vector<at::Tensor> c;
          for (const c10::IValue& v : now) c.push_back(v.toTensor());
          auto [next, step_ys] = combine_fn(c, x);
          return std::pair{std::vector<c10::IValue>(next.begin(), next.end()),
                           std::move(step_ys)};
        },
        "scan");
    std::vector<at::Tensor> final_carried;
    for (const c10::IValue& v : last) final_carried.push_back(v.toTensor());
    return {std::move(final_carried), std::move(ys)};
  }
  std::vector<at::Tensor> out = record_steps(
      *tracer, scan_function(),
      [&](const std::vector<at::Tensor>& in) {
        auto [c, x] = split(in);
        auto [next, ys] = combine_fn(c, x);
        next.insert(next.end(), ys.begin(), ys.end());
        return next;
      },
      init, xs, "fx::scan");
  auto [c, ys] = split(out);
  return {std::move(c), std::move(ys)};
}

std::vector<at::Tensor> map(const BodyFunction& fn,
                            const std::vector<at::Tensor>& xs) {
  Tracer* tracer = detail::active_tracer();
  if (tracer == nullptr) {
    return run_steps(
               {}, xs,
               [&](const std::vector<c10::IValue>&, std::vector<at::Tensor> x,
                   int64_t) {
                 return std::pair{std::vector<c10::IValue>{}, fn(x)};
               },
               "map")
        .second;
  }
  return record_steps(*tracer, map_function(), fn, {}, xs, "fx::map");
}

}  // namespace fx
