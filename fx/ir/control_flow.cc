#include "fx/ir/control_flow.h"

#include <string>
#include <utility>

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
  for (int64_t iteration = 0;; ++iteration) {
    c10::IValue go = test.run(inputs());
    if (go.isTuple() && go.toTupleRef().elements().size() == 1) {
      go = go.toTupleRef().elements()[0];
    }
    if (!truth_of(go, "while_loop's cond_graph output")) break;
    std::vector<c10::IValue> next =
        elements_of(as_tuple(body.run(inputs())), "while_loop", "body output");
    check_carried_values(carried, next, iteration);
    carried = std::move(next);
  }
  return c10::ivalue::Tuple::create(std::move(carried));
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
                          int64_t iteration) {
  if (after.size() != before.size()) {
    throw ExecutionError(absl::StrCat(
        "while_loop: iteration ", iteration, " of the body returned ",
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
          "while_loop: iteration ", iteration, " of the body made carried "
          "value ", i, " ", value_description(b), " from ", value_description(a),
          ": a loop's carried values keep their dtypes and sizes, as "
          "torch.while_loop's do"));
    }
  }
}

void check_carried_values(const std::vector<at::Tensor>& before,
                          const std::vector<at::Tensor>& after,
                          int64_t iteration) {
  check_carried_values(std::vector<c10::IValue>(before.begin(), before.end()),
                       std::vector<c10::IValue>(after.begin(), after.end()),
                       iteration);
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

bool is_control_flow_call(const Node& node) {
  if (node.op() != Opcode::kCallFunction || !node.target().is_function()) {
    return false;
  }
  const Function* f = &node.target().function();
  return f == cond_function() || f == while_loop_function();
}

std::vector<const Graph*> bodies_of(const Node& node) {
  if (!is_control_flow_call(node)) return {};
  if (&node.target().function() == cond_function()) {
    return {body_argument(node, 1, "true_graph"),
            body_argument(node, 2, "false_graph")};
  }
  return {body_argument(node, 0, "cond_graph"),
          body_argument(node, 1, "body_graph")};
}

}  // namespace fx
