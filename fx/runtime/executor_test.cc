// The executor behind GraphModule, on its own: a graph compiled against an
// environment of tensors, run, and refused where it cannot be compiled.
#include "fx/runtime/internal/executor.h"

#include <map>
#include <thread>
#include <vector>

#include <torch/torch.h>

#include "fx/ir/errors.h"
#include "fx/ir/graph.h"
#include "third_party/catch.h"

namespace {

using fx::Node;

fx::ExecutionEnvironment environment(std::map<std::string, at::Tensor>* tensors) {
  fx::ExecutionEnvironment env;
  env.attribute = [tensors](const std::string& path) -> c10::IValue {
    auto it = tensors->find(path);
    if (it == tensors->end()) throw fx::GraphError("no tensor " + path);
    return it->second;
  };
  env.module = [](const std::string&) -> const fx::LeafModule* { return nullptr; };
  return env;
}

}  // namespace

TEST_CASE("the executor runs a graph with kwargs, defaults and attributes") {
  fx::Graph g;
  Node* x = g.placeholder("x");
  Node* w = g.get_attr("w");
  Node* add = g.call_function(fx::op("aten::add.Tensor"), {x, w}, {{"alpha", 2}});
  Node* sum = g.call_function(fx::op("aten::sum.dim_IntList"), {add, fx::Argument::list({1})});
  g.output(fx::Argument::tuple({add, sum}));
  std::map<std::string, at::Tensor> tensors{{"w", torch::randn({2, 3})}};
  fx::Executor executor(g, environment(&tensors));
  at::Tensor in = torch::randn({2, 3});
  c10::IValue out = executor.run({in});
  const auto& elements = out.toTupleRef().elements();
  at::Tensor expected = in + 2 * tensors["w"];
  CHECK(torch::equal(elements[0].toTensor(), expected));
  CHECK(torch::equal(elements[1].toTensor(), expected.sum({1})));
}

TEST_CASE("one executor runs on many threads at once, bitwise as serially") {
  fx::Graph g;
  Node* x = g.placeholder("x");
  Node* relu = g.call_function(fx::op("aten::relu"), {x});
  g.output(g.call_function(fx::op("aten::mul.Scalar"), {relu, 3}));
  std::map<std::string, at::Tensor> tensors;
  fx::Executor executor(g, environment(&tensors));
  std::vector<at::Tensor> inputs;
  for (int i = 0; i < 8; ++i) inputs.push_back(torch::randn({64}));
  std::vector<int> wrong(inputs.size(), 0);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < inputs.size(); ++t) {
    threads.emplace_back([&, t] {
      const at::Tensor expected = torch::relu(inputs[t]) * 3;
      for (int i = 0; i < 200; ++i) {
        if (!torch::equal(executor.run({inputs[t]}).toTensor(), expected)) {
          ++wrong[t];
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int w : wrong) CHECK(w == 0);
}

TEST_CASE("what cannot be compiled or run names the node") {
  std::map<std::string, at::Tensor> tensors;
  {
    fx::Graph g;
    Node* x = g.placeholder("x");
    g.output(g.call_function(fx::op("aten::relu"), {x}, {{"alpha", 2}}));
    CHECK_THROWS_WITH(fx::Executor(g, environment(&tensors)),
                      Catch::Contains("%relu") &&
                          Catch::Contains("no argument named 'alpha'"));
  }
  {
    fx::Graph g;
    Node* x = g.placeholder("x");
    g.output(g.call_function(fx::op("aten::add.Tensor"), {x}));
    CHECK_THROWS_WITH(fx::Executor(g, environment(&tensors)),
                      Catch::Contains("missing argument 'other'"));
  }
  {
    fx::Graph g;
    Node* x = g.placeholder("x");
    g.output(g.call_function(fx::op("aten::mm"), {x, x}));
    fx::Executor executor(g, environment(&tensors));
    CHECK_THROWS_AS(executor.run({torch::randn({2, 3})}), fx::ExecutionError);
    CHECK_THROWS_WITH(executor.run({torch::randn({2, 3})}),
                      Catch::Contains("While executing %mm"));
  }
}
