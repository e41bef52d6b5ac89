#include "lowering/threads.h"

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <optional>

#include <absl/strings/str_join.h>

#include "lowering/kernels/kernel_support.h"

namespace fx {
namespace {

// What each of this thread's intra-op threads could run on before it was
// first pinned (none while unpinned).
thread_local std::optional<std::vector<cpu_set_t>> masks_before_pinning;

std::vector<int> cpus_of(const cpu_set_t& set) {
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus;
}

cpu_set_t mask_of_this_thread() {
  cpu_set_t set;
  CPU_ZERO(&set);
  pthread_getaffinity_np(pthread_self(), sizeof(set), &set);
  return set;
}

// Runs `f(i)` on each of the calling thread's intra-op threads, i being the
// thread's number in the team libtorch and oneDNN run on (thread 0 is the
// calling thread).
// Returns how many threads ran it: fewer than asked inside a parallel
// region, or when the runtime may give fewer (OMP_DYNAMIC).
template <typename F>
int on_each_thread(int threads, const F& f) {
  struct Call {
    const F* f;
    std::atomic<int> ran{0};
  } call{&f};
  GOMP_parallel(
      [](void* data) {
        auto* c = static_cast<Call*>(data);
        ++c->ran;
        (*c->f)(omp_get_thread_num());
      },
      &call, static_cast<unsigned>(threads), 0);
  return call.ran.load();
}

// Sets thread i's mask to masks[i]; false if any thread's failed, or if
// fewer threads than masks ran.
bool set_masks(const std::vector<cpu_set_t>& masks) {
  std::atomic<int> failed{0};
  const int ran = on_each_thread(static_cast<int>(masks.size()), [&](int i) {
    if (pthread_setaffinity_np(pthread_self(), sizeof(cpu_set_t),
                               &masks[i]) != 0) {
      ++failed;
    }
  });
  return failed == 0 && ran == static_cast<int>(masks.size());
}

}  // namespace

void pin_intra_op_threads(const std::vector<int>& cpus) {
  const int threads = at::get_num_threads();
  // The CPUs this thread could run on before any pinning of ours.
  const std::vector<int> allowed =
      cpus_of(masks_before_pinning ? masks_before_pinning->front()
                                   : mask_of_this_thread());
  const std::vector<int>& chosen = cpus.empty() ? allowed : cpus;
  for (int cpu : chosen) {
    TORCH_CHECK(std::count(chosen.begin(), chosen.end(), cpu) == 1,
                "fx::pin_intra_op_threads: CPU ", cpu,
                " is given twice; give each thread a CPU of its own");
    TORCH_CHECK(std::count(allowed.begin(), allowed.end(), cpu) == 1,
                "fx::pin_intra_op_threads: CPU ", cpu,
                " is not one this thread may run on (",
                absl::StrJoin(allowed, ", "),
                "); give CPUs of its affinity mask");
  }
  TORCH_CHECK(static_cast<int>(chosen.size()) >= threads,
              "fx::pin_intra_op_threads: ", threads, " intra-op threads but ",
              chosen.size(), " CPUs (", absl::StrJoin(chosen, ", "),
              "): give a CPU per thread, or set fewer threads first "
              "(at::set_num_threads)");
  std::vector<cpu_set_t> before(threads);
  const int ran =
      on_each_thread(threads, [&](int i) { before[i] = mask_of_this_thread(); });
  TORCH_CHECK(ran == threads, "fx::pin_intra_op_threads: ", ran, " of ",
              threads,
              " intra-op threads ran (called inside a parallel region, or "
              "with OMP_DYNAMIC set?); pin from the thread that runs the "
              "model, outside parallel regions; nothing is pinned");
  std::vector<cpu_set_t> pinned(threads);
  for (int i = 0; i < threads; ++i) {
    CPU_ZERO(&pinned[i]);
    CPU_SET(chosen[i], &pinned[i]);
  }
  if (!set_masks(pinned)) {
    set_masks(before);
    TORCH_CHECK(false, "fx::pin_intra_op_threads: the system refused to pin "
                       "a thread, or a thread did not run; nothing is pinned");
  }
  if (!masks_before_pinning) masks_before_pinning = std::move(before);
}

void unpin_intra_op_threads() {
  if (!masks_before_pinning) return;
  std::vector<cpu_set_t> masks = *masks_before_pinning;
  // Threads the team has gained since take thread 0's mask.
  masks.resize(std::max<size_t>(masks.size(), at::get_num_threads()),
               masks.front());
  set_masks(masks);
  masks_before_pinning.reset();
}

std::vector<std::vector<int>> intra_op_thread_cpus() {
  const int threads = at::get_num_threads();
  std::vector<std::vector<int>> cpus(threads);
  const int ran = on_each_thread(
      threads, [&](int i) { cpus[i] = cpus_of(mask_of_this_thread()); });
  cpus.resize(ran);
  return cpus;
}

// --- LoadAwareThreads ----------------------------------------------------------

namespace {

// The calling thread's /proc/thread-self/schedstat, open while the thread
// lives.
struct SchedStat {
  int fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
  ~SchedStat() {
    if (fd >= 0) close(fd);
  }
};

// The time the calling thread has spent runnable but waiting for a CPU,
// in ns (schedstat's second field), or -1 where the kernel keeps none.
int64_t run_queue_delay_ns() {
  thread_local SchedStat stat;
  if (stat.fd < 0) return -1;
  char text[128];
  const ssize_t n = pread(stat.fd, text, sizeof(text) - 1, 0);
  if (n <= 0) return -1;
  text[n] = '\0';
  unsigned long long running = 0, waiting = 0;
  if (std::sscanf(text, "%llu %llu", &running, &waiting) != 2) return -1;
  return static_cast<int64_t>(waiting);
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The weight of one call in the running average: about the last four
// calls decide.
constexpr double kNewCallWeight = 0.25;

}  // namespace

LoadAwareThreads::LoadAwareThreads(Options options) : options_(options) {
  if (options_.threads == 0) options_.threads = at::get_num_threads();
  TORCH_CHECK(options_.threads >= 1 && options_.busy_threads >= 1,
              "fx::LoadAwareThreads: threads ", options_.threads,
              " and busy_threads ", options_.busy_threads,
              ": give each at least 1 (threads 0: at::get_num_threads())");
  TORCH_CHECK(options_.quiet_below <= options_.busy_above,
              "fx::LoadAwareThreads: quiet_below ", options_.quiet_below,
              " is above busy_above ", options_.busy_above,
              ": the machine would count as busy and quiet at once");
}

void LoadAwareThreads::record(double wall_ns, double waited_ns) {
  if (!(wall_ns > 0) || !(waited_ns >= 0)) return;
  const double share = std::min(1.0, waited_ns / wall_ns);
  waiting_ = (1 - kNewCallWeight) * waiting_ + kNewCallWeight * share;
  if (!busy_ && waiting_ > options_.busy_above) busy_ = true;
  if (busy_ && waiting_ < options_.quiet_below) busy_ = false;
}

LoadAwareThreads::Call::Call(LoadAwareThreads& owner)
    : owner_(owner),
      threads_before_(omp_get_max_threads()),
      start_ns_(now_ns()),
      waited_before_ns_(run_queue_delay_ns()) {
  omp_set_num_threads(owner_.threads());
}

LoadAwareThreads::Call::~Call() {
  const int64_t waited = run_queue_delay_ns();
  const int64_t end = now_ns();
  omp_set_num_threads(threads_before_);
  if (waited >= 0 && waited_before_ns_ >= 0) {
    owner_.record(static_cast<double>(end - start_ns_),
                  static_cast<double>(waited - waited_before_ns_));
  }
}

}  // namespace fx
