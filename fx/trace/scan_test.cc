// fx::scan and fx::map: a recurrent cell scanned over time and a function
// mapped over a batch, traced into scan and map nodes whose bodies are
// subgraphs, through the layers that handle them.
#include <torch/script.h>
#include <torch/torch.h>

#include <sstream>
#include <utility>
#include <vector>

#include "fx/fx.h"
#include "fx/io/parser.h"
#include "fx/ir/control_flow.h"
#include "fx/torchscript/torchscript.h"
#include "interpreter/interpreter.h"
#include "interpreter/shape_prop.h"
#include "interpreter/transformer.h"
#include "passes/cost_model.h"
#include "passes/pass_manager.h"
#include "testdata/recurrent_scan.h"
#include "third_party/catch.h"

namespace {

using fx::Node;
using Tensors = std::vector<at::Tensor>;
using testdata::Recurrent;


// Maps over two xs (their lengths may differ: refused).
struct TwoLengthsImpl : torch::nn::Module {
  torch::Tensor forward(torch::Tensor x, torch::Tensor y) {
    return fx::map([](const Tensors& s) { return Tensors{s[0] + s[1]}; },
                   {x, y})[0];
  }
};
TORCH_MODULE(TwoLengths);

size_t calls_of(const fx::Graph& g, const fx::Function* f) {
  return g.find_nodes(fx::Opcode::kCallFunction, fx::Target(f)).size();
}

TEST_CASE("fx::scan and fx::map trace into nodes with bodies and run as "
          "eager does, at other lengths too") {
  torch::manual_seed(0);
  Recurrent model;
  torch::NoGradGuard no_grad;
  fx::GraphModule gm = fx::symbolic_trace(model, torch::randn({2, 5, 4}), torch::zeros({2, 8}));
  const fx::Graph& g = gm->graph();
  INFO(g);
  CHECK(calls_of(g, fx::scan_function()) == 1);
  CHECK(calls_of(g, fx::map_function()) == 1);
  REQUIRE(g.subgraph("scan_combine_graph_0") != nullptr);
  REQUIRE(g.subgraph("map_body_graph_0") != nullptr);
  // The cell's and the head's parameters are read inside the bodies.
  CHECK(g.subgraph("scan_combine_graph_0")
            ->find_nodes(fx::Opcode::kGetAttr)
            .size() == 2);

  fx::Interpreter interpreter(gm);
  for (int64_t steps : {1, 5, 7}) {
    for (int64_t batch : {1, 3}) {
      const at::Tensor x = torch::randn({batch, steps, 4});
      const at::Tensor h0 = torch::randn({batch, 8});
      const at::Tensor want = model(x, h0);
      CHECK(torch::equal(gm(x, h0).toTensor(), want));
      CHECK(torch::equal(interpreter.run({x, h0}).toTensor(), want));
    }
  }
  // No step: refused, as torch's scan refuses it.
  CHECK_THROWS_WITH(
      gm(torch::randn({2, 0, 4}), torch::zeros({2, 8})),
      Catch::Contains("scan over xs of length 0 (f32[0, 2, 4]"));
  CHECK_THROWS_WITH(model(torch::randn({2, 0, 4}), torch::zeros({2, 8})),
                    Catch::Contains("scan over xs of length 0"));
}

TEST_CASE("scan and map print, parse, save, load, propagate shapes, price "
          "and re-trace") {
  torch::manual_seed(0);
  Recurrent model;
  torch::NoGradGuard no_grad;
  const at::Tensor example = torch::randn({2, 5, 4});
  const at::Tensor h0 = torch::zeros({2, 8});
  fx::GraphModule gm = fx::symbolic_trace(model, example, h0);
  const std::string text = gm->graph().to_string();
  CHECK(fx::parse_graph(text)->to_string() == text);
  std::stringstream file;
  fx::save(gm, file);
  fx::GraphModule loaded = fx::load(file);
  CHECK(loaded->graph().to_string() == text);
  const at::Tensor x = torch::randn({3, 6, 4});
  const at::Tensor h = torch::randn({3, 8});
  CHECK(torch::equal(loaded(x, h).toTensor(), model(x, h)));

  // ShapeProp: the node's outputs, the ys stacked over the 5 steps.
  fx::ShapeProp(gm).propagate({example, h0});
  Node* scan = gm->graph().find_nodes(fx::Opcode::kCallFunction,
                                      fx::Target(fx::scan_function()))[0];
  const auto* metas = scan->meta().get(fx::kTensorMetaList);
  REQUIRE(metas != nullptr);
  REQUIRE(metas->size() == 3);
  CHECK((*metas)[0].sizes == std::vector<int64_t>{2, 8});
  CHECK((*metas)[1].sizes == std::vector<int64_t>{5, 2, 8});
  CHECK((*metas)[2].sizes == std::vector<int64_t>{5, 2});

  // The cost model: the body's multiply-adds once per step.
  const fx::CostReport body =
      fx::estimate_cost(*gm->graph().subgraph("scan_combine_graph_0"));
  REQUIRE(body.total.modelled);
  CHECK(fx::estimate_node_cost(*scan).macs == body.total.macs * 5);
  CHECK(body.total.macs == 2 * 12 * 8);

  // The Transformer re-traces both, into new bodies.
  fx::GraphModule again = fx::Transformer(gm).transform();
  CHECK(calls_of(again->graph(), fx::scan_function()) == 1);
  CHECK(calls_of(again->graph(), fx::map_function()) == 1);
  CHECK(torch::equal(again(x, h).toTensor(), model(x, h)));

  // Passes local to a graph run in the bodies.
  fx::GraphModule decomposed =
      fx::PassManager().add("decompose").add("eliminate_dead_code").run(gm).module;
  size_t linears = 0;
  for (const fx::Graph* g : decomposed->graph().all_graphs()) {
    for (Node* n : g->nodes()) linears += n->is_call_to({"aten::linear"});
  }
  CHECK(linears == 0);
  CHECK(torch::allclose(decomposed(x, h).toTensor(), model(x, h), 1e-5, 1e-6));
}

TEST_CASE("scan's and map's refusals name what differs") {
  torch::NoGradGuard no_grad;
  const at::Tensor a = torch::randn({3, 2});
  const at::Tensor b = torch::randn({4, 2});
  // xs of two lengths.
  CHECK_THROWS_WITH(
      fx::map([](const Tensors& s) { return Tensors{s[0] + s[1]}; }, {a, b}),
      Catch::Contains("map: xs 1 is f32[4, 2] and xs 0 f32[3, 2]; the xs "
                      "share their length along dimension 0"));
  // A carried value that changes its sizes.
  CHECK_THROWS_WITH(
      fx::scan(
          [](const Tensors& c, const Tensors& s) {
            return std::pair{Tensors{torch::cat({c[0], s[0]})}, Tensors{}};
          },
          {torch::zeros({2})}, {a}),
      Catch::Contains("scan: iteration 0 of the body made carried value 0 "
                      "f32[4] from f32[2]"));
  // A y whose sizes change from step to step.
  int step = 0;
  CHECK_THROWS_WITH(
      fx::map(
          [&](const Tensors& s) {
            return Tensors{step++ == 0 ? s[0] : torch::cat({s[0], s[0]})};
          },
          {a}),
      Catch::Contains("map: step 1 returned y 0 f32[4] where step 0 "
                      "returned f32[2]"));
  // Traced: the same, at trace time.
  TwoLengths two;
  CHECK_THROWS_WITH(
      fx::symbolic_trace(two, a, b),
      Catch::Contains("fx::map: xs 1 is f32[4, 2] and xs 0 f32[3, 2]"));
}

TEST_CASE("scan and map export to TorchScript as prim::Loop and emit as "
          "C++ loops") {
  torch::manual_seed(0);
  Recurrent model;
  torch::NoGradGuard no_grad;
  fx::GraphModule gm = fx::symbolic_trace(model, torch::randn({2, 5, 4}), torch::zeros({2, 8}));
  torch::jit::Module script = fx::to_torchscript(gm);
  for (int64_t steps : {1, 5, 8}) {
    const at::Tensor x = torch::randn({2, steps, 4});
    const at::Tensor h0 = torch::randn({2, 8});
    CHECK(torch::equal(script.forward({x, h0}).toTensor(), model(x, h0)));
  }
  CHECK_THROWS_WITH(script.forward({torch::randn({2, 0, 4}), torch::zeros({2, 8})}),
                    Catch::Contains("over xs of length 0"));
  // Saved and loaded as a TorchScript file.
  std::stringstream file;
  script.save(file);
  torch::jit::Module loaded = torch::jit::load(file);
  const at::Tensor x = torch::randn({2, 3, 4});
  const at::Tensor h0 = torch::randn({2, 8});
  CHECK(torch::equal(loaded.forward({x, h0}).toTensor(), model(x, h0)));
  // Generated C++: the steps as a loop of the emitted function.
  const std::string code = gm->code();
  CHECK(code.find("fx::scan_length(") != std::string::npos);
  CHECK(code.find("fx::stack_steps(") != std::string::npos);
}

}  // namespace
