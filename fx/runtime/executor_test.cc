// The executor behind GraphModule, on its own: a graph compiled against an
// environment of tensors, run, and refused where it cannot be compiled.
#include "fx/runtime/internal/executor.h"

#include <map>
#include <thread>
#include <vector>

#include <torch/torch.h>

#include "fx/ir/errors.h"
#include "fx/ir/function.h"
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

TEST_CASE("a functional write into a value the call alone holds happens in "
          "place, and never into a caller's tensor") {
  // data_ptr_of(t) -> the address of t's data, as an int.
  static const fx::Function* data_ptr_of = fx::register_function(
      "executor_test::data_ptr_of",
      [](const std::vector<c10::IValue>& args) -> c10::IValue {
        return static_cast<int64_t>(
            reinterpret_cast<intptr_t>(args.at(0).toTensor().data_ptr()));
      },
      /*is_pure=*/false);
  std::map<std::string, at::Tensor> tensors;
  const at::Tensor x = torch::randn({5, 3});
  const at::Tensor index = torch::tensor({4, 1}, torch::kLong);
  const at::Tensor source = torch::randn({2, 3});
  const at::Tensor want = x.mul(2).index_copy(0, index, source);
  auto address = [](const at::Tensor& t) {
    return static_cast<int64_t>(reinterpret_cast<intptr_t>(t.data_ptr()));
  };

  // y = x * 2 is the graph's own, and index_copy its last use: written in
  // place (the result is y's memory), the values those of the copy.
  {
    fx::Graph g;
    Node* in = g.placeholder("x");
    Node* idx = g.placeholder("index");
    Node* src = g.placeholder("source");
    Node* y = g.call_function(fx::op("aten::mul.Scalar"), {in, 2});
    Node* where = g.call_function(fx::Target(data_ptr_of), {y});
    Node* z = g.call_function(fx::op("aten::index_copy"), {y, 0, idx, src});
    g.output(fx::Argument::tuple({z, where}));
    fx::Executor executor(g, environment(&tensors));
    const c10::IValue out = executor.run({x, index, source});
    const at::Tensor z_value = out.toTupleRef().elements()[0].toTensor();
    CHECK(torch::equal(z_value, want));
    CHECK(address(z_value) == out.toTupleRef().elements()[1].toInt());
  }
  // y read again after index_copy: a copy, y unchanged.
  {
    fx::Graph g;
    Node* in = g.placeholder("x");
    Node* idx = g.placeholder("index");
    Node* src = g.placeholder("source");
    Node* y = g.call_function(fx::op("aten::mul.Scalar"), {in, 2});
    Node* z = g.call_function(fx::op("aten::index_copy"), {y, 0, idx, src});
    g.output(fx::Argument::tuple({z, y}));
    fx::Executor executor(g, environment(&tensors));
    const c10::IValue out = executor.run({x, index, source});
    CHECK(torch::equal(out.toTupleRef().elements()[0].toTensor(), want));
    CHECK(torch::equal(out.toTupleRef().elements()[1].toTensor(), x.mul(2)));
  }
  // index_copy of an input: the caller's tensor is never written, whether
  // the caller keeps it or gives its only reference (a temporary, or
  // memory of its own wrapped by from_blob), unless the inputs are donated
  // (a loop's own carried values).
  {
    fx::Graph g;
    Node* in = g.placeholder("x");
    Node* idx = g.placeholder("index");
    Node* src = g.placeholder("source");
    g.output(g.call_function(fx::op("aten::index_copy"), {in, 0, idx, src}));
    fx::Executor executor(g, environment(&tensors));
    const at::Tensor kept = x.clone();
    CHECK(torch::equal(executor.run({kept, index, source}).toTensor(),
                       x.index_copy(0, index, source)));
    CHECK(torch::equal(kept, x));
    // (Built by moving: an initializer list's elements are copies.)
    auto given = [&](at::Tensor t) {
      std::vector<c10::IValue> inputs;
      inputs.emplace_back(std::move(t));
      inputs.emplace_back(index);
      inputs.emplace_back(source);
      return inputs;
    };
    std::vector<float> buffer(x.data_ptr<float>(), x.data_ptr<float>() + 15);
    const at::Tensor got =
        executor.run(given(torch::from_blob(buffer.data(), {5, 3})),
                     /*donated=*/true)
            .toTensor();
    CHECK(torch::equal(got, x.index_copy(0, index, source)));
    CHECK(torch::equal(torch::from_blob(buffer.data(), {5, 3}), x));

    at::Tensor owned = x.clone();
    const int64_t owned_at = address(owned);
    CHECK(address(executor.run(given(std::move(owned))).toTensor()) !=
          owned_at);
    at::Tensor donated = x.clone();
    const int64_t donated_at = address(donated);
    const at::Tensor written =
        executor.run(given(std::move(donated)), /*donated=*/true).toTensor();
    CHECK(address(written) == donated_at);
    CHECK(torch::equal(written, x.index_copy(0, index, source)));
  }
}
