// GraphModules under threads: one module run from many threads at once is
// bitwise equal to running it serially; traces on different threads do not
// see each other; a model traced on one thread while its GraphModule runs
// on another is undisturbed.
#include <atomic>
#include <thread>
#include <vector>

#include <torch/torch.h>

#include "fx/fx.h"
#include "models/zoo.h"
#include "testdata/zoo_testing.h"
#include "third_party/catch.h"

namespace {

// Runs `gm` from `threads` threads, `runs` forwards each, on inputs that
// differ by thread and run; returns how many outputs differ from serial.
int run_concurrently(fx::GraphModule gm, const std::vector<at::Tensor>& inputs,
                     int threads, int runs) {
  std::vector<c10::IValue> expected;
  for (const at::Tensor& x : inputs) expected.push_back(gm(x));
  std::atomic<int> wrong{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      at::set_num_threads(1);
      for (int r = 0; r < runs; ++r) {
        const size_t k = static_cast<size_t>(t + r) % inputs.size();
        if (!testdata::outputs_bitwise_equal(gm(inputs[k]), expected[k])) ++wrong;
      }
    });
  }
  for (auto& t : pool) t.join();
  return wrong;
}

TEST_CASE("one GraphModule on 8 threads, 1,000 forwards each, equals serial") {
  at::set_num_threads(1);
  for (const char* name : {"mlp", "lenet", "inplace_ops"}) {
    INFO(name);
    models::ZooModel model = models::make_zoo_model(name);
    fx::GraphModule gm = models::trace_zoo_model(model);
    const at::Tensor example = model.example_inputs[0].toTensor();
    std::vector<at::Tensor> inputs;
    for (int i = 0; i < 5; ++i) inputs.push_back(torch::randn_like(example));
    CHECK(run_concurrently(gm, inputs, 8, 1000) == 0);
  }
}

TEST_CASE("a model that creates and fills tensors in forward, on 8 threads") {
  at::set_num_threads(1);
  auto f = [](at::Tensor x) {
    at::Tensor scale = torch::tensor({1.f, 2.f, 3.f, 4.f});
    scale.mul_(2);
    at::Tensor out = torch::empty({4}, x.options());
    out.copy_(x * scale);
    return out.relu_();
  };
  fx::GraphModule gm = fx::symbolic_trace(f, torch::zeros({4}));
  std::vector<at::Tensor> inputs;
  for (int i = 0; i < 7; ++i) inputs.push_back(torch::randn({4}));
  for (const at::Tensor& x : inputs) CHECK(torch::equal(gm(x).toTensor(), f(x)));
  CHECK(run_concurrently(gm, inputs, 8, 1000) == 0);
}

TEST_CASE("two models traced on two threads at once") {
  models::ZooModel lenet = models::make_zoo_model("lenet");
  models::ZooModel resnet = models::make_zoo_model("resnet18");
  std::string lenet_graph[2], resnet_graph[2];
  auto trace = [](const models::ZooModel& m, std::string* out) {
    for (int i = 0; i < 2; ++i) {
      out[i] = models::trace_zoo_model(m)->graph().to_string();
    }
  };
  std::thread a(trace, std::cref(lenet), lenet_graph);
  std::thread b(trace, std::cref(resnet), resnet_graph);
  a.join();
  b.join();
  // The same graphs as traced alone, one after the other.
  CHECK(lenet_graph[0] == models::trace_zoo_model(lenet)->graph().to_string());
  CHECK(lenet_graph[1] == lenet_graph[0]);
  CHECK(resnet_graph[0] == models::trace_zoo_model(resnet)->graph().to_string());
  CHECK(resnet_graph[1] == resnet_graph[0]);
  CHECK_FALSE(fx::is_tracing());
}

TEST_CASE("a model traced on one thread while its GraphModule runs on another") {
  at::set_num_threads(1);
  models::ZooModel model = models::make_zoo_model("lenet");
  fx::GraphModule gm = models::trace_zoo_model(model);
  const at::Tensor x = model.example_inputs[0].toTensor();
  const c10::IValue expected = gm(x);
  std::atomic<bool> done{false};
  std::atomic<int> wrong{0};
  std::atomic<int> runs{0};
  std::thread runner([&] {
    while (!done) {
      if (!testdata::outputs_bitwise_equal(gm(x), expected)) ++wrong;
      ++runs;
    }
  });
  const std::string graph = gm->graph().to_string();
  // At least 20 traces, and as many more as it takes for the other thread
  // to run 20 forwards meanwhile (a bounded number).
  int traces = 0;
  for (; traces < 20 || (runs < 20 && traces < 5000); ++traces) {
    CHECK(models::trace_zoo_model(model)->graph().to_string() == graph);
  }
  done = true;
  runner.join();
  CHECK(wrong == 0);
  CHECK(runs >= 20);
}

}  // namespace
