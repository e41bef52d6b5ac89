// Pinning the intra-op threads: where each thread may run, the errors, and
// unpinning back to where they could run before.
#include "lowering/threads.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <sched.h>

#include <stdexcept>
#include <vector>

#include "third_party/catch.h"

namespace {

std::vector<int> allowed() {
  cpu_set_t set;
  CPU_ZERO(&set);
  sched_getaffinity(0, sizeof(set), &set);
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus;
}

}  // namespace

TEST_CASE("pin_intra_op_threads puts thread i on the i-th CPU, and unpins") {
  const std::vector<int> cpus = allowed();
  const int threads = std::min<int>(2, static_cast<int>(cpus.size()));
  at::set_num_threads(threads);
  const std::vector<std::vector<int>> unpinned(threads, cpus);
  REQUIRE(fx::intra_op_thread_cpus() == unpinned);

  fx::pin_intra_op_threads();
  std::vector<std::vector<int>> want;
  for (int i = 0; i < threads; ++i) want.push_back({cpus[i]});
  CHECK(fx::intra_op_thread_cpus() == want);
  // Work on the pinned team computes as before.
  const at::Tensor a = at::randn({256, 256});
  CHECK(at::allclose(at::mm(a, a), at::matmul(a, a)));

  // Pinned again, in another order; bad requests change nothing.
  std::vector<int> reversed(cpus.begin(), cpus.begin() + threads);
  std::reverse(reversed.begin(), reversed.end());
  fx::pin_intra_op_threads(reversed);
  std::vector<std::vector<int>> want_reversed;
  for (int cpu : reversed) want_reversed.push_back({cpu});
  CHECK(fx::intra_op_thread_cpus() == want_reversed);
  CHECK_THROWS_WITH(fx::pin_intra_op_threads({CPU_SETSIZE - 1}),
                    Catch::Matchers::Contains("is not one this thread may run "
                                              "on"));
  if (threads == 2) {
    CHECK_THROWS_WITH(fx::pin_intra_op_threads({cpus[0], cpus[0]}),
                      Catch::Matchers::Contains("is given twice"));
    CHECK_THROWS_WITH(fx::pin_intra_op_threads({cpus[0]}),
                      Catch::Matchers::Contains(
                          "2 intra-op threads but 1 CPUs") &&
                          Catch::Matchers::Contains("at::set_num_threads"));
  }
  CHECK(fx::intra_op_thread_cpus() == want_reversed);

  fx::unpin_intra_op_threads();
  CHECK(fx::intra_op_thread_cpus() == unpinned);
  fx::unpin_intra_op_threads();  // unpinned already: nothing to do
  CHECK(fx::intra_op_thread_cpus() == unpinned);
}

TEST_CASE("LoadAwareThreads counts the machine busy above a tenth of waiting, "
          "quiet again under a twentieth") {
  fx::LoadAwareThreads::Options options;
  options.threads = 2;
  fx::LoadAwareThreads threads(options);
  CHECK_FALSE(threads.busy());
  CHECK(threads.threads() == 2);
  // Quiet calls: no waiting.
  for (int i = 0; i < 10; ++i) threads.record(1e6, 0);
  CHECK(threads.waiting() == 0);
  CHECK_FALSE(threads.busy());
  // One call that waited half its time: the average (a quarter of it)
  // passes a tenth.
  threads.record(1e6, 5e5);
  CHECK(threads.waiting() == Approx(0.125));
  CHECK(threads.busy());
  CHECK(threads.threads() == 1);
  // Between a twentieth and a tenth it stays busy; under a twentieth it is
  // quiet again.
  threads.record(1e6, 0);  // 0.09375
  CHECK(threads.busy());
  threads.record(1e6, 0);  // 0.0703
  threads.record(1e6, 0);  // 0.0527
  CHECK(threads.busy());
  threads.record(1e6, 0);  // 0.0396
  CHECK_FALSE(threads.busy());
  CHECK(threads.threads() == 2);
  // Measurements that cannot be are ignored; a share is at most 1.
  threads.record(0, 1e6);
  threads.record(1e6, -1);
  CHECK(threads.waiting() == Approx(0.0396).epsilon(0.01));
  threads.record(1e6, 5e6);
  CHECK(threads.waiting() == Approx(0.0396 * 0.75 + 0.25).epsilon(0.01));
}

TEST_CASE("LoadAwareThreads runs a call on its thread count and restores the "
          "caller's") {
  at::set_num_threads(2);
  fx::LoadAwareThreads::Options options;
  options.threads = 2;
  options.busy_threads = 1;
  fx::LoadAwareThreads threads(options);
  CHECK(threads.run([] { return at::get_num_threads(); }) == 2);
  for (int i = 0; i < 4; ++i) threads.record(1e6, 1e6);
  REQUIRE(threads.busy());
  const at::Tensor a = at::randn({64, 512});
  const at::Tensor b = at::randn({512, 64});
  const at::Tensor one_thread = threads.run([&] {
    CHECK(at::get_num_threads() == 1);
    return at::mm(a, b);
  });
  CHECK(at::get_num_threads() == 2);
  CHECK(at::allclose(one_thread, at::mm(a, b)));
  // Restored after an exception too.
  CHECK_THROWS_WITH(threads.run([]() -> int {
    throw std::runtime_error("the model failed");
  }),
                    "the model failed");
  CHECK(at::get_num_threads() == 2);
}

TEST_CASE("LoadAwareThreads refuses thread counts under 1 and bounds out of "
          "order") {
  fx::LoadAwareThreads::Options zero;
  zero.busy_threads = 0;
  CHECK_THROWS_WITH(fx::LoadAwareThreads(zero),
                    Catch::Matchers::Contains("busy_threads 0") &&
                        Catch::Matchers::Contains("at least 1"));
  fx::LoadAwareThreads::Options crossed;
  crossed.busy_above = 0.05;
  crossed.quiet_below = 0.10;
  CHECK_THROWS_WITH(fx::LoadAwareThreads(crossed),
                    Catch::Matchers::Contains("quiet_below 0.1 is above "
                                              "busy_above 0.05"));
  // The default: the calling thread's count when made.
  at::set_num_threads(1);
  CHECK(fx::LoadAwareThreads().threads() == 1);
  at::set_num_threads(2);
}
