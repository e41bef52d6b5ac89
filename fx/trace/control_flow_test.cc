#include "fx/trace/control_flow.h"

#include <torch/torch.h>

#include <sstream>

#include "fx/fx.h"
#include "fx/ir/control_flow.h"
#include "fx/torchscript/torchscript.h"
#include "interpreter/interpreter.h"
#include "interpreter/shape_prop.h"
#include "interpreter/transformer.h"
#include "passes/cost_model.h"
#include "passes/pass_manager.h"
#include "passes/split_module.h"
#include "scheduling/pipeline.h"
#include "third_party/catch.h"

namespace {

using fx::Node;
using fx::Opcode;
using Tensors = std::vector<at::Tensor>;

// A branch on the input's sum: the true side uses a Linear (parameters in
// the body) and a tensor computed before the branch (lifted), the false
// side negates.
struct BranchesImpl : torch::nn::Module {
  BranchesImpl() { fc = register_module("fc", torch::nn::Linear(4, 4)); }
  torch::Tensor forward(torch::Tensor x) {
    at::Tensor scale = x.abs().mean(0, /*keepdim=*/true) + 1;
    Tensors y = fx::cond(
        x.sum() > 0,
        [&](const Tensors& in) { return Tensors{fc(in[0]) * scale}; },
        [&](const Tensors& in) { return Tensors{in[0].neg()}; }, {x});
    return y[0] + 1;
  }
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(Branches);

// Halves until every element is at most 1: a trip count set by the data.
struct HalvingImpl : torch::nn::Module {
  torch::Tensor forward(torch::Tensor x) {
    return fx::while_loop(
        [](const Tensors& c) { return c[0].abs().max() > 1; },
        [](const Tensors& c) { return Tensors{c[0] / 2, c[1] + 1}; },
        {x, torch::zeros({}, torch::kLong)})[0];
  }
};
TORCH_MODULE(Halving);

// A loop whose body branches on a lifted tensor computed before the loop
// (lifted through two bodies).
struct NestedImpl : torch::nn::Module {
  torch::Tensor forward(torch::Tensor x) {
    at::Tensor limit = x.abs().sum() * 4;
    return fx::while_loop(
        [&](const Tensors& c) { return c[0].abs().sum() < limit; },
        [&](const Tensors& c) {
          return fx::cond(
              c[0].sum() > 0,
              [&](const Tensors& in) { return Tensors{in[0] * 2 + limit * 0}; },
              [&](const Tensors& in) { return Tensors{in[0] * 3}; }, {c[0]});
        },
        {x})[0];
  }
};
TORCH_MODULE(Nested);

// A graph of inputs (p, x) returning cond(p, true_graph_0,
// false_graph_0, [x])[0], its bodies as `bodies` gives them.
std::unique_ptr<fx::Graph> cond_on_p(const std::string& bodies) {
  return fx::parse_graph(R"(graph():
    %p : [#users=1] = placeholder[target=p]
    %x : [#users=1] = placeholder[target=x]
    %true_graph_0 : [#users=1] = get_attr[target=true_graph_0]
    %false_graph_0 : [#users=1] = get_attr[target=false_graph_0]
    %cond : [#users=1] = call_function[target=cond](args = (%p, %true_graph_0, %false_graph_0, [%x]), kwargs = {})
    %getitem : [#users=1] = call_function[target=getitem](args = (%cond, 0), kwargs = {})
    return getitem

)" + bodies);
}

void check_bitwise(fx::GraphModule& gm, const std::function<at::Tensor(
                                             const at::Tensor&)>& eager,
                   const at::Tensor& x) {
  at::Tensor expected = eager(x);
  at::Tensor got = gm(x).toTensor();
  CHECK(got.sizes() == expected.sizes());
  CHECK(torch::equal(got, expected));
}

TEST_CASE("fx::cond traces both branches into subgraphs and runs the one "
          "the data picks") {
  torch::manual_seed(0);
  Branches model;
  at::Tensor x = torch::randn({3, 4}).abs();
  fx::GraphModule gm = fx::symbolic_trace(model, x);
  const fx::Graph& g = gm->graph();
  REQUIRE(g.subgraphs().size() == 2);
  CHECK(g.subgraph("true_graph_0") != nullptr);
  CHECK(g.subgraph("false_graph_0") != nullptr);
  // The lifted tensor is an operand after x; both bodies take both.
  std::vector<Node*> conds =
      g.find_nodes(Opcode::kCallFunction, fx::Target(fx::cond_function()));
  REQUIRE(conds.size() == 1);
  CHECK(conds[0]->args()[3].elements().size() == 2);
  CHECK(g.subgraph("true_graph_0")->placeholders().size() == 2);
  CHECK(g.subgraph("false_graph_0")->placeholders().size() == 2);
  // The Linear's parameters are read inside the body.
  CHECK(g.subgraph("true_graph_0")->find_nodes(Opcode::kGetAttr).size() == 2);
  CHECK(g.find_nodes(Opcode::kGetAttr).size() == 2);  // the two bodies

  for (float sign : {1.0f, -1.0f}) {
    for (int rows : {1, 3}) {
      at::Tensor input = torch::randn({rows, 4}).abs() * sign;
      check_bitwise(gm, [&](const at::Tensor& t) { return model(t); }, input);
    }
  }
  // Eager and the graph agree at a sum of exactly zero (false).
  check_bitwise(gm, [&](const at::Tensor& t) { return model(t); },
                torch::zeros({3, 4}));
}

TEST_CASE("fx::while_loop runs a data-dependent trip count") {
  Halving model;
  fx::GraphModule gm = fx::symbolic_trace(model, torch::full({2, 2}, 8.0));
  CHECK(gm->graph().subgraph("while_loop_cond_graph_0") != nullptr);
  CHECK(gm->graph().subgraph("while_loop_body_graph_0") != nullptr);
  for (float v : {0.5f, 1.0f, 3.0f, 1000.0f}) {
    at::Tensor x = torch::full({2, 2}, v);
    x[0][0] = -v;
    check_bitwise(gm, [&](const at::Tensor& t) { return model(t); }, x);
  }
  // Zero iterations: the input comes back.
  CHECK(torch::equal(gm(torch::ones({2, 2})).toTensor(), torch::ones({2, 2})));
}

TEST_CASE("a while_loop writes its own carried values in place, never the "
          "caller's") {
  // Fills the rows of a buffer one per step (a key/value cache's writes):
  // from the second step on, index_copy writes into the buffer the loop
  // carries rather than a copy (the Executor's in-place twins).
  auto fill = [](const at::Tensor& buffer, const at::Tensor& rows) {
    return fx::while_loop(
        [](const Tensors& c) { return c[0].lt(c[1].size(0)); },
        [](const Tensors& c) {
          const at::Tensor at = c[0].view({1});
          return Tensors{c[0] + 1, c[1].index_copy(0, at, c[2].index_select(0, at)),
                         c[2]};
        },
        {torch::zeros({}, torch::kLong), buffer, rows})[1];
  };
  const at::Tensor rows = torch::randn({6, 3});
  fx::GraphModule gm = fx::symbolic_trace(fill, torch::zeros({6, 3}), rows);
  const at::Tensor buffer = torch::full({6, 3}, 7.0);
  const at::Tensor got = gm(buffer, rows).toTensor();
  CHECK(torch::equal(got, rows));
  CHECK(torch::equal(buffer, torch::full({6, 3}, 7.0)));  // the caller's
  CHECK(torch::equal(gm(buffer, rows).toTensor(), rows));  // and again
  CHECK(torch::equal(fill(buffer, rows), rows));           // eagerly
}

TEST_CASE("control flow nests, lifting a tensor through two bodies") {
  Nested model;
  at::Tensor x = torch::tensor({0.5f, -0.25f});
  fx::GraphModule gm = fx::symbolic_trace(model, x);
  const fx::Graph* body = gm->graph().subgraph("while_loop_body_graph_0");
  REQUIRE(body != nullptr);
  CHECK(body->subgraphs().size() == 2);
  for (const at::Tensor& input :
       {torch::tensor({0.5f, -0.25f}), torch::tensor({-2.0f, 1.0f}),
        torch::tensor({0.1f, 0.1f})}) {
    check_bitwise(gm, [&](const at::Tensor& t) { return model(t); }, input);
  }
}

TEST_CASE("a graph with control flow prints, parses back, saves and loads") {
  torch::manual_seed(0);
  Nested model;
  at::Tensor x = torch::tensor({0.5f, -0.25f});
  fx::GraphModule gm = fx::symbolic_trace(model, x);
  const std::string text = gm->graph().to_string();
  CHECK(text.find("\n\nwhile_loop_body_graph_0 = graph():\n") !=
        std::string::npos);
  CHECK(text.find("\n\nwhile_loop_body_graph_0.true_graph_0 = graph():\n") !=
        std::string::npos);
  std::unique_ptr<fx::Graph> parsed = fx::parse_graph(text);
  CHECK(parsed->to_string() == text);
  CHECK(gm->graph().clone()->to_string() == text);

  std::stringstream file;
  fx::save(gm, file);
  fx::GraphModule loaded = fx::load(file);
  CHECK(loaded->graph().to_string() == text);
  // Node meta inside the bodies is saved too.
  CHECK(loaded->graph().to_string(fx::PrintOptions{.tensor_meta = true}) ==
        gm->graph().to_string(fx::PrintOptions{.tensor_meta = true}));
  CHECK(loaded->graph()
            .subgraph("while_loop_body_graph_0")
            ->subgraph("true_graph_0")
            ->output_node()
            ->args()[0]
            .elements()[0]
            .to_node()
            ->meta()
            .get(fx::kTensorMeta) != nullptr);
  at::Tensor input = torch::tensor({-2.0f, 1.0f});
  CHECK(torch::equal(loaded(input).toTensor(), model(input)));

  // The Interpreter runs the bodies node by node.
  fx::Interpreter interpreter(gm);
  CHECK(torch::equal(interpreter.run({input}).toTensor(), model(input)));
}

TEST_CASE("control flow refuses what torch.cond and torch.while_loop "
          "refuse, by name") {
  struct Mismatched : torch::nn::Module {
    torch::Tensor forward(torch::Tensor x) {
      return fx::cond(
          x.sum() > 0, [](const Tensors& in) { return Tensors{in[0]}; },
          [](const Tensors& in) { return Tensors{in[0].sum(0)}; }, {x})[0];
    }
  };
  CHECK_THROWS_WITH(
      fx::symbolic_trace(std::make_shared<Mismatched>(), torch::randn({2, 3})),
      Catch::Contains("output 0 is f32[2, 3] from true_fn and f32[3] from "
                      "false_fn"));

  struct Growing : torch::nn::Module {
    torch::Tensor forward(torch::Tensor x) {
      return fx::while_loop(
          [](const Tensors& c) { return c[0].sum() < 10; },
          [](const Tensors& c) { return Tensors{torch::cat({c[0], c[0]})}; },
          {x})[0];
    }
  };
  auto growing = std::make_shared<Growing>();
  CHECK_THROWS_WITH(fx::symbolic_trace(growing, torch::ones({2})),
      Catch::Contains("body_fn made carried value 0 f32[4] from f32[2]"));
  // Eagerly too: no silent shape change.
  CHECK_THROWS_WITH(growing->forward(torch::ones({2})),
                    Catch::Contains("carried value 0 f32[4] from f32[2]"));

  // A tensor made inside a branch cannot leave it but by its outputs.
  struct Leaking : torch::nn::Module {
    torch::Tensor forward(torch::Tensor x) {
      at::Tensor inner;
      fx::cond(
          x.sum() > 0,
          [&](const Tensors& in) {
            inner = in[0] * 2;
            return Tensors{in[0]};
          },
          [](const Tensors& in) { return Tensors{in[0]}; }, {x});
      return inner + 1;
    }
  };
  CHECK_THROWS_WITH(
      fx::symbolic_trace(std::make_shared<Leaking>(), torch::ones({2})),
      Catch::Contains("computed inside a body of fx::cond or fx::while_loop, "
                      "was used outside it"));

  fx::TraceOptions dynamic;
  dynamic.dynamic = {{.input = 0, .dim = 0, .symbol = "B"}};
  Halving halving;
  CHECK_THROWS_WITH(
      fx::symbolic_trace(halving, {torch::ones({2, 2})}, dynamic),
      Catch::Contains("fx::while_loop under TraceOptions::dynamic is not "
                      "supported yet"));
  // The failed traces leave nothing behind.
  CHECK_FALSE(fx::is_tracing());
}

TEST_CASE("cond's predicate must have one element at run time") {
  std::unique_ptr<fx::Graph> g = cond_on_p(R"(true_graph_0 = graph():
    %x : [#users=1] = placeholder[target=x]
    %mul : [#users=1] = call_function[target=aten::mul.Scalar](args = (%x, 2), kwargs = {})
    return (mul,)

false_graph_0 = graph():
    %x : [#users=1] = placeholder[target=x]
    return (x,))");
  fx::GraphModule gm(std::move(g), fx::Attributes{});
  at::Tensor x = torch::ones({2});
  CHECK(torch::equal(gm(torch::tensor(true), x).toTensor(), x * 2));
  CHECK(torch::equal(gm(torch::tensor(0.0), x).toTensor(), x));
  CHECK_THROWS_WITH(gm(torch::tensor({true, false}), x),
                    Catch::Contains("cond's predicate must have one element, "
                                    "got b8[2]"));
  CHECK_THROWS_WITH(gm(torch::empty({0}), x),
                    Catch::Contains("must have one element"));
}

TEST_CASE("subgraphs: names, lint inside bodies, dead code") {
  fx::Graph g;
  CHECK_THROWS_WITH(g.add_subgraph("a.b", std::make_unique<fx::Graph>()),
                    Catch::Contains("is not a subgraph name"));
  CHECK_THROWS_WITH(g.add_subgraph("1a", std::make_unique<fx::Graph>()),
                    Catch::Contains("is not a subgraph name"));
  fx::Graph* body = g.add_subgraph("body", std::make_unique<fx::Graph>());
  CHECK_THROWS_WITH(g.add_subgraph("body", std::make_unique<fx::Graph>()),
                    Catch::Contains("already holds a subgraph named 'body'"));
  // A body without an output fails the enclosing graph's lint.
  g.output(fx::Argument());
  CHECK_THROWS_WITH(g.lint(), Catch::Contains("in subgraph 'body'"));
  const uint64_t before = g.version();
  body->output(fx::Argument());
  CHECK(g.version() != before);  // an edit of a body is an edit of g
  g.lint();
  // Nothing reads it: dead code elimination drops it.
  CHECK(g.eliminate_dead_code());
  CHECK(g.subgraphs().empty());

  // A cond whose result is unused and whose bodies are pure goes too.
  Branches model;
  fx::GraphModule gm = fx::symbolic_trace(model, torch::ones({1, 4}));
  Node* cond =
      gm->graph().find_nodes(Opcode::kCallFunction,
                             fx::Target(fx::cond_function()))[0];
  CHECK_FALSE(cond->is_impure());
}

TEST_CASE("passes, the pipeline splitter and ShapeProp go into bodies") {
  Branches model;
  fx::GraphModule gm = fx::symbolic_trace(model, torch::ones({2, 4}));
  auto refused = [](const std::string& layer) {
    return Catch::Contains(layer + " does not handle control flow yet, and "
                           "the graph holds %cond (cond)");
  };
  // A pass of the user's own that does not say how it meets bodies
  // (Pass::bodies) is refused.
  struct Scale : fx::Pass {
    std::string name() const override { return "scale"; }
    bool run(fx::GraphModuleImpl&) override { return false; }
  };
  CHECK_THROWS_WITH(
      fx::PassManager().add(std::make_unique<Scale>()).run(gm),
      refused("pass scale"));
  // The pipeline splitter keeps the cond whole in one of its two stages.
  fx::PipelineOptions two;
  two.stages = 2;
  fx::Pipeline pipeline = fx::split_pipeline(gm, two);
  REQUIRE(pipeline.stages.size() == 2);
  CHECK((pipeline.stages[0].module->graph().has_subgraphs() !=
         pipeline.stages[1].module->graph().has_subgraphs()));
  for (float sign : {1.0f, -1.0f}) {
    at::Tensor x = torch::randn({2, 4}).abs() * sign;
    CHECK(torch::equal(fx::run_pipeline_locally(pipeline, {x}).toTensor(),
                       gm(x).toTensor()));
  }
  // Dead code elimination goes into the bodies; the passes local to a
  // graph run in each (the lowering's test: lowering/control_flow_test.cc).
  CHECK_FALSE(fx::PassManager().add("eliminate_dead_code").run(gm).modified);
  fx::GraphModule passed =
      fx::PassManager()
          .add(fx::parse_pass_pipeline(
              "remove_dropout,fuse_conv_bn,eliminate_common_subexpressions,"
              "eliminate_noops,fold_constants,decompose,normalize_args"))
          .run(gm)
          .module;
  for (float sign : {1.0f, -1.0f}) {
    at::Tensor x = torch::randn({3, 4}).abs() * sign;
    at::Tensor want = gm(x).toTensor();
    at::Tensor got = passed(x).toTensor();
    CHECK(torch::allclose(got, want, 1e-5, 1e-6));
  }
  // decompose rewrote the Linear inside the true branch.
  size_t linears = 0;
  for (Node* n : passed->graph().subgraph("true_graph_0")->nodes()) {
    if (n->is_call_to({"aten::linear"})) ++linears;
  }
  CHECK(linears == 0);

  // ShapeProp records the node's outputs.
  fx::ShapeProp(gm).propagate({torch::ones({5, 4})});
  Node* cond = gm->graph().find_nodes(Opcode::kCallFunction,
                                      fx::Target(fx::cond_function()))[0];
  const auto* metas = cond->meta().get(fx::kTensorMetaList);
  REQUIRE(metas != nullptr);
  CHECK((*metas)[0].sizes == std::vector<int64_t>{5, 4});
  // Into both bodies, the branch not taken too.
  for (const char* body : {"true_graph_0", "false_graph_0"}) {
    const fx::Node* out = gm->graph().subgraph(body)->output_node();
    const fx::TensorMeta* m =
        out->args()[0].elements()[0].to_node()->meta().get(fx::kTensorMeta);
    REQUIRE(m != nullptr);
    CHECK(m->sizes == std::vector<int64_t>{5, 4});
  }
}

TEST_CASE("the Transformer re-traces control flow, its overrides applying "
          "inside the bodies") {
  torch::manual_seed(0);
  Branches model;
  Nested nested;
  torch::NoGradGuard no_grad;
  fx::GraphModule gm = fx::symbolic_trace(model, torch::ones({2, 4}));
  class NegToAbs : public fx::Transformer {
   public:
    using fx::Transformer::Transformer;
    c10::IValue call_function(const Node& node, const fx::Target& target,
                              std::vector<c10::IValue> args,
                              fx::IValueKwargs kwargs) override {
      if (target == fx::op("aten::neg")) return torch::abs(args[0].toTensor());
      return fx::Transformer::call_function(node, target, std::move(args),
                                            std::move(kwargs));
    }
  };
  fx::GraphModule swapped = NegToAbs(gm).transform();
  INFO(swapped->graph());
  REQUIRE(swapped->graph().subgraphs().size() == 2);
  const fx::Graph& false_graph = *swapped->graph().subgraph("false_graph_0");
  size_t negs = 0, abses = 0;
  for (Node* n : false_graph.nodes()) {
    negs += n->is_call_to({"aten::neg"});
    abses += n->is_call_to({"aten::abs"});
  }
  CHECK(negs == 0);
  CHECK(abses == 1);
  // The false branch (sum <= 0) now takes the absolute value; the true one
  // is as it was. Other sizes than the example's run too.
  at::Tensor down = -torch::rand({3, 4});
  CHECK(torch::equal(swapped(down).toTensor(), down.abs() + 1));
  at::Tensor up = torch::rand({5, 4});
  CHECK(torch::equal(swapped(up).toTensor(), model(up)));

  // Nested bodies and a loop's lifted values, through the plain Transformer.
  fx::GraphModule loop = fx::symbolic_trace(nested, torch::ones({2, 3}) * 0.5);
  fx::GraphModule again = fx::Transformer(loop).transform();
  CHECK(again->graph().all_graphs().size() ==
        loop->graph().all_graphs().size());
  for (float scale : {0.1f, 1.0f, -3.0f}) {
    at::Tensor x = torch::randn({2, 3}) * scale;
    CHECK(torch::equal(again(x).toTensor(), nested(x)));
  }
}

TEST_CASE("split_module keeps a cond and a while_loop whole in a partition") {
  torch::manual_seed(0);
  Nested model;  // a while_loop whose body holds a cond
  Branches branches;
  torch::NoGradGuard no_grad;
  struct Case {
    fx::GraphModule gm;
    std::function<at::Tensor(const at::Tensor&)> eager;
    int64_t columns;
  };
  std::vector<Case> cases = {
      {fx::symbolic_trace(model, torch::ones({2, 3}) * 0.5),
       [&](const at::Tensor& x) { return model(x); }, 3},
      {fx::symbolic_trace(branches, torch::ones({2, 4})),
       [&](const at::Tensor& x) { return branches(x); }, 4}};
  for (const Case& c : cases) {
    // Everything before the control flow in partition 0, the rest in 1.
    bool seen = false;
    fx::GraphModule split = fx::split_module(c.gm, [&](const Node& n) {
      seen = seen || fx::is_control_flow_call(n);
      return seen ? 1 : 0;
    });
    INFO(split->graph());
    const auto& leaves = split->leaf_modules();
    REQUIRE(leaves.count("submod_1") == 1);
    auto* part = dynamic_cast<fx::GraphModuleImpl*>(
        leaves.at("submod_1").module.get());
    REQUIRE(part != nullptr);
    // The bodies went with their node, nested ones included.
    CHECK(part->graph().has_subgraphs());
    CHECK(part->graph().all_graphs().size() ==
          c.gm->graph().all_graphs().size());
    for (float scale : {0.1f, 0.5f, 3.0f, -2.0f}) {
      at::Tensor x = torch::randn({3, c.columns}) * scale;
      CHECK(torch::equal(split(x).toTensor(), c.eager(x)));
    }
  }

  // A body writing in place is refused: the write's order against reads in
  // other partitions is not tracked.
  std::unique_ptr<fx::Graph> writes = cond_on_p(R"(
true_graph_0 = graph():
    %x : [#users=1] = placeholder[target=x]
    %relu_ : [#users=1] = call_function[target=aten::relu_](args = (%x,), kwargs = {})
    return (relu_,)

false_graph_0 = graph():
    %x : [#users=1] = placeholder[target=x]
    return (x,)
)");
  fx::GraphModule impure(std::make_shared<fx::GraphModuleImpl>(
      std::move(writes), fx::Attributes{}));
  CHECK_THROWS_WITH(
      fx::split_module(impure, [](const Node&) { return 0; }),
      Catch::Contains("split_module: %cond (cond) writes in place inside "
                      "its bodies"));
}

TEST_CASE("control flow exports to TorchScript as prim::If and prim::Loop") {
  torch::manual_seed(0);
  Branches branches;
  Halving halving;
  Nested nested;
  torch::NoGradGuard no_grad;
  struct Case {
    std::function<at::Tensor(const at::Tensor&)> eager;
    fx::GraphModule gm;
    std::vector<at::Tensor> inputs;
  };
  std::vector<Case> cases = {
      {[&](const at::Tensor& t) { return branches(t); },
       fx::symbolic_trace(branches, torch::ones({2, 4})),
       {torch::rand({2, 4}) + 0.1, -torch::rand({2, 4}) - 0.1,
        torch::zeros({2, 4})}},
      {[&](const at::Tensor& t) { return halving(t); },
       fx::symbolic_trace(halving, torch::ones({2, 2})),
       {torch::full({2, 2}, 0.5), torch::full({2, 2}, 700.0)}},
      {[&](const at::Tensor& t) { return nested(t); },
       fx::symbolic_trace(nested, torch::tensor({0.5f, -0.25f})),
       {torch::tensor({0.5f, -0.25f}), torch::tensor({-2.0f, 1.0f})}},
  };
  for (Case& c : cases) {
    torch::jit::Module script = fx::to_torchscript(c.gm);
    const std::string code = script.get_method("forward").graph()->toString();
    CHECK((code.find("prim::If") != std::string::npos ||
           code.find("prim::Loop") != std::string::npos));
    for (const at::Tensor& x : c.inputs) {
      CHECK(torch::equal(script.forward({x}).toTensor(), c.eager(x)));
    }
  }
  // The check each iteration makes, in TorchScript too.
  std::unique_ptr<fx::Graph> g = fx::parse_graph(R"(graph():
    %x : [#users=1] = placeholder[target=x]
    %c : [#users=1] = get_attr[target=c]
    %b : [#users=1] = get_attr[target=b]
    %while_loop : [#users=1] = call_function[target=while_loop](args = (%c, %b, [%x], []), kwargs = {})
    %getitem : [#users=1] = call_function[target=getitem](args = (%while_loop, 0), kwargs = {})
    return getitem

b = graph():
    %x : [#users=2] = placeholder[target=x]
    %cat : [#users=1] = call_function[target=aten::cat](args = ([%x, %x],), kwargs = {})
    return (cat,)

c = graph():
    %x : [#users=1] = placeholder[target=x]
    %sum : [#users=1] = call_function[target=aten::sum](args = (%x,), kwargs = {})
    %lt : [#users=1] = call_function[target=aten::lt.Scalar](args = (%sum, 10), kwargs = {})
    return (lt,))");
  fx::GraphModule growing(std::move(g), fx::Attributes{});
  CHECK_THROWS_WITH(growing(torch::ones({2})),
                    Catch::Contains("carried value 0 f32[4] from f32[2]"));
  torch::jit::Module script = fx::to_torchscript(growing);
  CHECK_THROWS_WITH(script.forward({torch::ones({2})}),
                    Catch::Contains("an iteration changed carried value 0"));
  CHECK(torch::equal(script.forward({torch::full({2}, 6.0)}).toTensor(),
                     torch::full({2}, 6.0)));
}

TEST_CASE("generated C++ holds each body as a function of the class") {
  Nested model;
  fx::GraphModule gm = fx::symbolic_trace(model, torch::tensor({0.5f, -0.25f}));
  const std::string code = gm->code();
  CHECK(code.find("fx::truth_of(") != std::string::npos);
  CHECK(code.find("std::vector<at::Tensor> forward_while_loop_body_graph_0(") !=
        std::string::npos);
  CHECK(code.find("forward_while_loop_body_graph_0_true_graph_0(") !=
        std::string::npos);
  CHECK(code.find("fx::check_carried_values(while_loop, while_loop_next, "
                  "while_loop_iteration);") != std::string::npos);
  CHECK(gm->code() == code);  // deterministic
}

TEST_CASE("the cost model prices a cond by its costlier branch") {
  Branches model;
  fx::GraphModule gm = fx::symbolic_trace(model, torch::ones({5, 4}));
  Node* cond = gm->graph().find_nodes(Opcode::kCallFunction,
                                      fx::Target(fx::cond_function()))[0];
  const fx::NodeCost cost = fx::estimate_node_cost(*cond);
  CHECK(cost.modelled);
  CHECK(cost.macs == 5 * 4 * 4);  // the Linear's, not the negation's
  CHECK(cost.macs == fx::estimate_cost(*gm->graph().subgraph("true_graph_0"))
                         .total.macs);
  Halving halving;
  fx::GraphModule loop = fx::symbolic_trace(halving, torch::ones({2}));
  const fx::CostReport report = fx::estimate_cost(loop->graph());
  CHECK_FALSE(report.total.modelled);
  CHECK(report.unmodelled_ops ==
        std::vector<std::string>{
            "while_loop (its trip count is known only at run time)"});
}

TEST_CASE("ShapeProp refuses branches that disagree, naming the output") {
  std::unique_ptr<fx::Graph> g = cond_on_p(R"(true_graph_0 = graph():
    %x : [#users=1] = placeholder[target=x]
    %sum : [#users=1] = call_function[target=aten::sum.dim_IntList](args = (%x, [0]), kwargs = {})
    return (sum,)

false_graph_0 = graph():
    %x : [#users=1] = placeholder[target=x]
    return (x,))");
  fx::GraphModule gm(std::move(g), fx::Attributes{});
  // The graph runs (the branch taken decides), ShapeProp refuses.
  CHECK(gm(torch::tensor(true), torch::ones({2, 3})).toTensor().sizes() ==
        at::IntArrayRef{3});
  CHECK_THROWS_WITH(
      fx::ShapeProp(gm).propagate({torch::tensor(true), torch::ones({2, 3})}),
      Catch::Contains("%cond's output 0 is f32[2, 3] from the false branch "
                      "and f32[3] from the true branch"));
}

}  // namespace
