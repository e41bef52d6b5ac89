// Pinning the intra-op threads: where each thread may run, the errors, and
// unpinning back to where they could run before.
#include "lowering/threads.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <sched.h>

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
