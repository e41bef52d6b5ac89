#include "scheduling/parallel.h"

#include <string>
#include <thread>
#include <vector>

#include <torch/torch.h>

#include "fx/fx.h"
#include "fx/ir/errors.h"
#include "models/zoo.h"
#include "testdata/test_helpers.h"
#include "third_party/catch.h"

namespace fx {
namespace {

using testdata::trace_function;

// An inception block: four branches of different cost from one input.
GraphModule inception() {
  torch::manual_seed(0);
  static at::Tensor w1 = torch::randn({8, 4, 1, 1});
  static at::Tensor w2 = torch::randn({8, 4, 3, 3});
  static at::Tensor w3 = torch::randn({8, 8, 3, 3});
  static at::Tensor w4 = torch::randn({8, 4, 5, 5});
  return trace_function(
      [](at::Tensor x) {
        at::Tensor b1 = torch::relu(torch::conv2d(x, w1));
        at::Tensor b2 = torch::relu(torch::conv2d(
            torch::relu(torch::conv2d(x, w2, {}, 1, 1)), w3, {}, 1, 1));
        at::Tensor b3 = torch::relu(torch::conv2d(x, w4, {}, 1, 2));
        at::Tensor b4 = torch::max_pool2d(x, 3, 1, 1).sum(1, true).expand({-1, 8, -1, -1});
        return torch::cat({b1, b2, b3, b4}, 1);
      },
      {torch::randn({1, 4, 32, 32})});
}

at::Tensor sequential_at_one_thread(const GraphModule& gm, const at::Tensor& x) {
  const int before = at::get_num_threads();
  at::set_num_threads(1);
  GraphModule m = gm;
  at::Tensor y = m->forward({x}).toTensor();
  at::set_num_threads(before);
  return y;
}

TEST_CASE("an inception block's branches run on two workers, bitwise as sequential") {
  GraphModule gm = inception();
  ParallelModule parallel = parallelize_branches(gm);
  const ParallelSchedule& schedule = parallel->schedule();
  REQUIRE(schedule.workers.size() == 2);
  CHECK(!schedule.workers[0].empty());
  CHECK(!schedule.workers[1].empty());
  CHECK(schedule.parallel_seconds < schedule.sequential_seconds);
  CHECK(parallel->used_parallel());
  for (int run = 0; run < 20; ++run) {
    at::Tensor x = torch::randn({1, 4, 32, 32});
    CHECK(torch::equal(parallel->forward({x}).toTensor(),
                       sequential_at_one_thread(gm, x)));
  }
  std::string text = format_schedule(schedule);
  CHECK(text.find("worker 1: ") != std::string::npos);
  CHECK(text == format_schedule(parallelize_branches(gm)->schedule()));
}

int threads_of_a_new_thread() {
  int threads = 0;
  std::thread([&] { threads = at::get_num_threads(); }).join();
  return threads;
}

TEST_CASE("workers set only their own threads, leaving the process's alone") {
  // A worker calling at::set_num_threads(1) made 1 thread the count of
  // every thread started after it (and slowed libtorch's thread pools).
  const int before = at::get_num_threads();
  at::set_num_threads(2);
  REQUIRE(threads_of_a_new_thread() == 2);
  GraphModule gm = inception();
  {
    ParallelModule parallel = parallelize_branches(gm);  // 2 workers x 1
    REQUIRE(parallel->used_parallel());
    at::Tensor x = torch::randn({1, 4, 32, 32});
    at::Tensor y = parallel->forward({x}).toTensor();
    CHECK(threads_of_a_new_thread() == 2);
    CHECK(torch::equal(y, sequential_at_one_thread(gm, x)));
  }
  CHECK(threads_of_a_new_thread() == 2);
  at::set_num_threads(before);
}

TEST_CASE("the schedule must beat the sequential module on all the threads") {
  // Every node 1 ms on one worker's thread: 2 workers finish the block in
  // about 7 ms, less than one worker's 12 but more than the sequential
  // module on both threads (each node halved, plus the split's price).
  GraphModule gm = inception();
  ParallelOptions options;
  options.node_seconds = [](const Node&) { return 1e-3; };
  ParallelModule parallel = parallelize_branches(gm, options);
  const ParallelSchedule& schedule = parallel->schedule();
  CHECK(schedule.parallel_seconds < schedule.sequential_seconds);
  CHECK(schedule.all_threads_seconds < schedule.parallel_seconds);
  CHECK(schedule.all_threads_seconds ==
        Approx(schedule.sequential_seconds * (0.5 + 14e-3)));
  CHECK_FALSE(parallel->used_parallel());
  // Where splitting a node over threads costs more than it saves, the
  // sequential module gains nothing from the second thread.
  options.thread_split_seconds = 1e-3;
  ParallelModule costly = parallelize_branches(gm, options);
  CHECK(costly->schedule().all_threads_seconds ==
        Approx(costly->schedule().sequential_seconds));
  CHECK(costly->used_parallel());
  at::Tensor x = torch::randn({1, 4, 32, 32});
  CHECK(torch::equal(costly->forward({x}).toTensor(),
                     sequential_at_one_thread(gm, x)));
}

TEST_CASE("the zoo's U-Net and ResNet-18 through the schedule") {
  for (const char* name : {"unet", "resnet18"}) {
    models::ZooModel model = models::make_zoo_model(name);
    model.module->eval();
    GraphModule gm = models::trace_zoo_model(model);
    ParallelModule parallel = parallelize_branches(gm);
    at::Tensor x = model.example_inputs[0].toTensor();
    CHECK(torch::equal(parallel->forward({x}).toTensor(),
                       sequential_at_one_thread(gm, x)));
  }
}

TEST_CASE("a chain has no branches: the sequential module runs") {
  GraphModule gm = trace_function(
      [](at::Tensor x) { return torch::tanh(torch::relu(x * 2) + 1); },
      {torch::randn({4, 4})});
  ParallelModule parallel = parallelize_branches(gm);
  CHECK_FALSE(parallel->used_parallel());
  at::Tensor x = torch::randn({4, 4});
  CHECK(torch::equal(parallel->forward({x}).toTensor(), gm(x).toTensor()));
}

TEST_CASE("an in-place write keeps its order with the reads around it") {
  GraphModule gm = trace_function(
      [](at::Tensor x) {
        at::Tensor y = x * 2;
        at::Tensor before = torch::sin(y).exp().sqrt();   // reads y first
        y.relu_();                                         // then writes it
        at::Tensor after = torch::cos(y).exp().sqrt();    // then reads it
        at::Tensor view = y.view({-1});
        return before + after + view.sum();
      },
      {torch::randn({64, 64})});
  ParallelModule parallel = parallelize_branches(gm);
  for (int run = 0; run < 50; ++run) {
    at::Tensor x = torch::randn({64, 64});
    CHECK(torch::equal(parallel->forward({x}).toTensor(),
                       sequential_at_one_thread(gm, x)));
  }
}

TEST_CASE("segments that in-place writes would order both ways run in turn") {
  // %view reads %v before relu_ writes it, and %mul (in %view's chain)
  // reads it after: no order of the two segments keeps both.
  GraphModule gm = trace_function(
      [](at::Tensor x) {
        at::Tensor v = x * 2;
        at::Tensor view = v.view({-1});
        v.relu_();
        return view * 3;
      },
      {torch::randn({8, 8})});
  ParallelOptions options;
  options.decide_by_measuring = true;
  options.example_inputs = {torch::randn({8, 8})};
  ParallelModule parallel = parallelize_branches(gm, options);
  CHECK_FALSE(parallel->used_parallel());
  at::Tensor x = torch::randn({8, 8});
  CHECK(torch::equal(parallel->forward({x}).toTensor(), gm(x).toTensor()));
}

TEST_CASE("bad input fails as the GraphModule's would, and leaves it usable") {
  GraphModule gm = inception();
  ParallelModule parallel = parallelize_branches(gm);
  REQUIRE(parallel->used_parallel());
  CHECK_THROWS_AS(parallel->forward({torch::randn({1, 4, 32, 32}),
                                     torch::randn({1})}),
                  GuardError);
  // A wrong dtype fails in the segment that reads the input.
  CHECK_THROWS_WITH(parallel->forward({torch::randn({1, 4, 32, 32},
                                                    torch::kDouble)}),
                    Catch::Contains("has dtype torch.float64"));
  at::Tensor x = torch::randn({1, 4, 32, 32});
  CHECK(torch::equal(parallel->forward({x}).toTensor(),
                     sequential_at_one_thread(gm, x)));
  ParallelOptions none;
  none.workers = 0;
  CHECK_THROWS_WITH(parallelize_branches(gm, none),
                    Catch::Contains("at least 1 worker"));
}

TEST_CASE("deciding by measurement times both ways and keeps the faster") {
  GraphModule gm = inception();
  ParallelOptions options;
  options.decide_by_measuring = true;
  options.example_inputs = {torch::randn({1, 4, 32, 32})};
  options.measure_rounds = 3;
  ParallelModule parallel = parallelize_branches(gm, options);
  CHECK(parallel->measured_parallel_ms() > 0);
  CHECK(parallel->measured_sequential_ms() > 0);
  CHECK(parallel->used_parallel() ==
        (parallel->measured_parallel_ms() < parallel->measured_sequential_ms()));
  at::Tensor x = torch::randn({1, 4, 32, 32});
  at::Tensor y = parallel->forward({x}).toTensor();
  CHECK(torch::allclose(y, gm(x).toTensor(), 1e-5, 1e-5));
}

}  // namespace
}  // namespace fx
