#include "fx/ir/control_flow.h"

#include <string>
#include <utility>

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "fx/ir/errors.h"
#include "fx/ir/graph.h"
#include "fx/ir/meta.h"
#include "fx/ir/node.h"

namespace fx {
namespace {

std::vector<c10::IValue> elements_of(const c10::IValue& value,
                                     const char* function, const char* what) {
  if (value.isList()) return value.toListRef().vec();
  if (value.isTuple()) return value.toTupleRef().elements().vec();
  throw ExecutionError(absl::StrCat(function, ": ", what,
                                    " must be a list of values, got a ",
                                    value.tagKind()));
}

c10::IValue as_tuple(c10::IValue out) {
  if (out.isTuple()) return out;
  return c10::ivalue::Tuple::create({std::move(out)});
}

c10::IValue cond_impl(const std::vector<c10::IValue>& args) {
  if (args.size() != 4) {
    throw ExecutionError(absl::StrCat(
        "cond takes (pred, true_graph, false_graph, operands), got ",
        args.size(), " arguments"));
  }
  const bool pred = truth_of(args[0], "cond's predicate");
  const Body& body =
      as_body(args[pred ? 1 : 2], pred ? "cond's true_graph" : "cond's false_graph");
  return as_tuple(body.run(elements_of(args[3], "cond", "operands")));
}

c10::IValue while_loop_impl(const std::vector<c10::IValue>& args) {
  if (args.size() != 3 && args.size() != 4) {
    throw ExecutionError(absl::StrCat(
        "while_loop takes (cond_graph, body_graph, carried, additional), got ",
        args.size(), " arguments"));
  }
  const Body& test = as_body(args[0], "while_loop's cond_graph");
  const Body& body = as_body(args[1], "while_loop's body_graph");
  std::vector<c10::IValue> carried =
      elements_of(args[2], "while_loop", "carried");
  const std::vector<c10::IValue> additional =
      args.size() == 4 ? elements_of(args[3], "while_loop", "additional")
                       : std::vector<c10::IValue>{};
  auto inputs = [&] {
    std::vector<c10::IValue> in = carried;
    in.insert(in.end(), additional.begin(), additional.end());
    return in;
  };
  // What each carried value must stay: its dtype and sizes, kept on the
  // meta device, so that from the second iteration on the body is given
  // the only reference to the values it made (Body::run_donated: a
  // key/value cache written in place rather than copied each step).
  std::vector<c10::IValue> kept;
  for (const c10::IValue& v : carried) {
    kept.push_back(v.isTensor() && v.toTensor().defined()
                       ? c10::IValue(at::empty(v.toTensor().sizes(),
                                               v.toTensor().options().device(
                                                   at::kMeta)))
                       : v);
  }
  for (int64_t iteration = 0;; ++iteration) {
    c10::IValue go = test.run(inputs());
    if (go.isTuple() && go.toTupleRef().elements().size() == 1) {
      go = go.toTupleRef().elements()[0];
    }
    if (!truth_of(go, "while_loop's cond_graph output")) break;
    std::vector<c10::IValue> in;
    if (iteration == 0) {
      in = inputs();  // the caller's values: theirs to keep
    } else {
      in = std::move(carried);
      in.insert(in.end(), additional.begin(), additional.end());
    }
    c10::IValue out = iteration == 0 ? body.run(std::move(in))
                                     : body.run_donated(std::move(in));
    std::vector<c10::IValue> next =
        elements_of(as_tuple(std::move(out)), "while_loop", "body output");
    check_carried_values(kept, next, iteration);
    carried = std::move(next);
  }
  return c10::ivalue::Tuple::create(std::move(carried));
}

std::vector<at::Tensor> tensors_of(const std::vector<c10::IValue>& values,
                                   const char* function, const char* what) {
  std::vector<at::Tensor> out;
  for (size_t i = 0; i < values.size(); ++i) {
    if (!values[i].isTensor()) {
      throw ExecutionError(absl::StrCat(function, ": ", what, " ", i,
                                        " must be a tensor, got a ",
                                        values[i].tagKind()));
    }
    out.push_back(values[i].toTensor());
  }
  return out;
}

// scan's and map's steps on a body: `body` on (*carried, *slice i of each
// xs, *additional), its first carried.size() outputs carried on; the
// carried values and the stacked ys as one tuple.
c10::IValue run_body_steps(const Body& body, std::vector<c10::IValue> carried,
                           const std::vector<at::Tensor>& xs,
                           const std::vector<c10::IValue>& additional,
                           const char* function) {
  auto [last, ys] = run_steps(
      std::move(carried), xs,
      [&](const std::vector<c10::IValue>& now, std::vector<at::Tensor> x,
          int64_t i) {
        std::vector<c10::IValue> in = now;
        in.insert(in.end(), x.begin(), x.end());
        in.insert(in.end(), additional.begin(), additional.end());
        std::vector<c10::IValue> out = elements_of(
            as_tuple(body.run(std::move(in))), function, "body output");
        if (out.size() < now.size()) {
          throw ExecutionError(absl::StrCat(
              function, ": step ", i, " returned ", out.size(), " values for ",
              now.size(), " carried ones and the ys"));
        }
        std::vector<c10::IValue> next(out.begin(), out.begin() + now.size());
        return std::pair{
            std::move(next),
            tensors_of(std::vector<c10::IValue>(out.begin() + now.size(),
                                                out.end()),
                       function, "y")};
      },
      function);
  for (at::Tensor& y : ys) last.emplace_back(std::move(y));
  return c10::ivalue::Tuple::create(std::move(last));
}

c10::IValue scan_impl(const std::vector<c10::IValue>& args) {
  if (args.size() != 3 && args.size() != 4) {
    throw ExecutionError(absl::StrCat(
        "scan takes (combine_graph, init, xs, additional), got ", args.size(),
        " arguments"));
  }
  return run_body_steps(
      as_body(args[0], "scan's combine_graph"),
      elements_of(args[1], "scan", "init"),
      tensors_of(elements_of(args[2], "scan", "xs"), "scan", "xs"),
      args.size() == 4 ? elements_of(args[3], "scan", "additional")
                       : std::vector<c10::IValue>{},
      "scan");
}

c10::IValue map_impl(const std::vector<c10::IValue>& args) {
  if (args.size() != 2 && args.size() != 3) {
    throw ExecutionError(absl::StrCat(
        "map takes (body_graph, xs, additional), got ", args.size(),
        " arguments"));
  }
  return run_body_steps(
      as_body(args[0], "map's body_graph"), {},
      tensors_of(elements_of(args[1], "map", "xs"), "map", "xs"),
      args.size() == 3 ? elements_of(args[2], "map", "additional")
                       : std::vector<c10::IValue>{},
      "map");
}

const Graph* body_argument(const Node& node, size_t index, const char* role) {
  const char* function = node.target().function().name().c_str();
  if (index >= node.args().size() || !node.args()[index].is_node() ||
      node.args()[index].to_node()->op() != Opcode::kGetAttr) {
    throw GraphError(absl::StrCat("%", node.name(), ": ", function,
                                  "'s argument ", index, " (", role,
                                  ") must be a get_attr of a subgraph"));
  }
  const std::string& name = node.args()[index].to_node()->target().str();
  const Graph* body = node.graph().subgraph(name);
  if (body == nullptr) {
    throw GraphError(absl::StrCat("%", node.name(), ": ", function, "'s ",
                                  role, " '", name,
                                  "' is not a subgraph of its graph"));
  }
  return body;
}

}  // namespace

c10::IValue body_value(c10::intrusive_ptr<Body> body) {
  return c10::IValue::make_capsule(std::move(body));
}

const Body& as_body(const c10::IValue& value, const char* what) {
  if (value.isCapsule()) {
    if (const auto* body = dynamic_cast<const Body*>(value.toCapsule().get())) {
      return *body;
    }
  }
  throw ExecutionError(absl::StrCat(what, " must be a subgraph (a get_attr "
                                    "of one), got a ", value.tagKind()));
}

std::string value_description(const c10::IValue& v) {
  if (!v.isTensor()) return v.tagKind();
  const at::Tensor& t = v.toTensor();
  if (!t.defined()) return "an undefined tensor";
  return tensor_meta_of(t).to_string();
}

void check_carried_values(const std::vector<c10::IValue>& before,
                          const std::vector<c10::IValue>& after,
                          int64_t iteration, const char* function) {
  if (after.size() != before.size()) {
    throw ExecutionError(absl::StrCat(
        function, ": iteration ", iteration, " of the body returned ",
        after.size(), " values for ", before.size(), " carried ones"));
  }
  for (size_t i = 0; i < after.size(); ++i) {
    const c10::IValue& a = before[i];
    const c10::IValue& b = after[i];
    const bool same =
        a.isTensor() && b.isTensor()
            ? a.toTensor().defined() == b.toTensor().defined() &&
                  (!a.toTensor().defined() ||
                   (a.toTensor().scalar_type() == b.toTensor().scalar_type() &&
                    a.toTensor().sizes() == b.toTensor().sizes()))
            : a.tagKind() == b.tagKind();
    if (!same) {
      throw ExecutionError(absl::StrCat(
          function, ": iteration ", iteration, " of the body made carried "
          "value ", i, " ", value_description(b), " from ", value_description(a),
          ": a loop's carried values keep their dtypes and sizes, as "
          "torch.", function, "'s do"));
    }
  }
}

void check_carried_values(const std::vector<at::Tensor>& before,
                          const std::vector<at::Tensor>& after,
                          int64_t iteration, const char* function) {
  check_carried_values(std::vector<c10::IValue>(before.begin(), before.end()),
                       std::vector<c10::IValue>(after.begin(), after.end()),
                       iteration, function);
}

int64_t scan_length(const std::vector<at::Tensor>& xs, const char* function) {
  if (xs.empty()) {
    throw ExecutionError(absl::StrCat(
        function, " takes at least one tensor to run over (xs)"));
  }
  int64_t length = -1;
  for (size_t i = 0; i < xs.size(); ++i) {
    const at::Tensor& x = xs[i];
    if (!x.defined() || x.dim() == 0) {
      throw ExecutionError(absl::StrCat(
          function, ": xs ", i, " is ", value_description(x),
          "; it runs over dimension 0 of tensors of at least one dimension"));
    }
    if (length >= 0 && x.size(0) != length) {
      throw ExecutionError(absl::StrCat(
          function, ": xs ", i, " is ", value_description(x), " and xs 0 ",
          value_description(xs[0]), "; the xs share their length along "
          "dimension 0"));
    }
    length = x.size(0);
  }
  if (length == 0) {
    throw ExecutionError(absl::StrCat(
        function, " over xs of length 0 (", value_description(xs[0]),
        "): no step would run to give its outputs' shapes, as torch.",
        function, " refuses too; check the length before calling it"));
  }
  return length;
}

std::vector<at::Tensor> stack_steps(
    const std::vector<std::vector<at::Tensor>>& steps, const char* function) {
  std::vector<at::Tensor> out;
  if (steps.empty()) return out;
  for (size_t k = 0; k < steps[0].size(); ++k) {
    std::vector<at::Tensor> column;
    for (size_t s = 0; s < steps.size(); ++s) {
      const at::Tensor& y = steps[s].at(k);
      const at::Tensor& first = steps[0][k];
      if (!y.defined() || y.scalar_type() != first.scalar_type() ||
          y.sizes() != first.sizes()) {
        throw ExecutionError(absl::StrCat(
            function, ": step ", s, " returned y ", k, " ",
            value_description(y), " where step 0 returned ",
            value_description(first), "; each y keeps its dtype and sizes "
            "from step to step, to be stacked"));
      }
      column.push_back(y);
    }
    out.push_back(at::stack(column));
  }
  return out;
}

std::pair<std::vector<c10::IValue>, std::vector<at::Tensor>> run_steps(
    std::vector<c10::IValue> carried, const std::vector<at::Tensor>& xs,
    const StepFunction& step, const char* function) {
  const int64_t length = scan_length(xs, function);
  std::vector<std::vector<at::Tensor>> steps;
  for (int64_t i = 0; i < length; ++i) {
    std::vector<at::Tensor> x;
    for (const at::Tensor& t : xs) x.push_back(t.select(0, i));
    auto [next, ys] = step(carried, std::move(x), i);
    check_carried_values(carried, next, i, function);
    carried = std::move(next);
    if (!steps.empty() && ys.size() != steps.front().size()) {
      throw ExecutionError(absl::StrCat(
          function, ": step ", i, " returned ", ys.size(),
          " ys where step 0 returned ", steps.front().size()));
    }
    steps.push_back(std::move(ys));
  }
  return {std::move(carried), stack_steps(steps, function)};
}

void refuse_control_flow(const Graph& graph, const std::string& layer) {
  if (!graph.has_subgraphs()) return;
  std::string where = absl::StrCat("subgraph '", graph.subgraphs().begin()->first, "'");
  for (const Node* n : graph.nodes()) {
    if (is_control_flow_call(*n)) {
      where = absl::StrCat("%", n->name(), " (", n->target().to_string(), ")");
      break;
    }
  }
  throw GraphError(absl::StrCat(
      layer, " does not handle control flow yet, and the graph holds ", where,
      ": run it as a GraphModule or with the Interpreter, or trace the "
      "branch taken (a plain C++ if) for this layer"));
}

bool truth_of(const c10::IValue& pred, const char* what) {
  if (pred.isBool()) return pred.toBool();
  if (pred.isInt()) return pred.toInt() != 0;
  if (pred.isTensor() && pred.toTensor().defined()) {
    const at::Tensor& t = pred.toTensor();
    if (t.numel() == 1) return t.item<bool>();
    throw ExecutionError(absl::StrCat(
        what, " must have one element, got ", value_description(pred)));
  }
  throw ExecutionError(absl::StrCat(
      what, " must be a one-element tensor, a bool or an int, got a ",
      value_description(pred)));
}

const Function* cond_function() {
  static const Function* f =
      register_function("cond", &cond_impl, /*is_pure=*/true);
  return f;
}

const Function* while_loop_function() {
  static const Function* f =
      register_function("while_loop", &while_loop_impl, /*is_pure=*/true);
  return f;
}

const Function* scan_function() {
  static const Function* f =
      register_function("scan", &scan_impl, /*is_pure=*/true);
  return f;
}

const Function* map_function() {
  static const Function* f =
      register_function("map", &map_impl, /*is_pure=*/true);
  return f;
}

bool is_control_flow_call(const Node& node) {
  if (node.op() != Opcode::kCallFunction || !node.target().is_function()) {
    return false;
  }
  const Function* f = &node.target().function();
  return f == cond_function() || f == while_loop_function() ||
         f == scan_function() || f == map_function();
}

std::vector<const Graph*> bodies_of(const Node& node) {
  if (!is_control_flow_call(node)) return {};
  if (&node.target().function() == cond_function()) {
    return {body_argument(node, 1, "true_graph"),
            body_argument(node, 2, "false_graph")};
  }
  if (&node.target().function() == scan_function()) {
    return {body_argument(node, 0, "combine_graph")};
  }
  if (&node.target().function() == map_function()) {
    return {body_argument(node, 0, "body_graph")};
  }
  return {body_argument(node, 0, "cond_graph"),
          body_argument(node, 1, "body_graph")};
}

}  // namespace fx
