// Local processes for the ranks of a pipeline on one machine (`fx pipeline
// run`, the pipeline benchmark and tests): child processes that never
// outlive their launcher, and a free port for the rendezvous.
//
//   fx::ChildProcesses children;
//   const int port = fx::free_local_port();
//   children.spawn({"/proc/self/exe", "--serve_rank=1", ...});
//   ...
//   std::vector<int> statuses = children.wait(std::chrono::seconds(60));
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace fx {

// Child processes (posix_spawn), killed and reaped when this object goes
// away unless they were waited for: a launcher leaves nothing behind.
class ChildProcesses {
 public:
  ChildProcesses() = default;
  ~ChildProcesses();
  ChildProcesses(const ChildProcesses&) = delete;
  ChildProcesses& operator=(const ChildProcesses&) = delete;

  // Starts argv[0] (a path) with `argv`. Throws fx::Error if it cannot.
  void spawn(const std::vector<std::string>& argv);
  // Waits for every child up to `timeout`, killing those still running
  // then; returns each one's exit status (128 + signal if killed by one),
  // in spawn order.
  std::vector<int> wait(std::chrono::milliseconds timeout);

 private:
  std::vector<pid_t> pids_;
};

// A TCP port on 127.0.0.1 that was free a moment ago. Throws fx::Error when
// there is none.
int free_local_port();

}  // namespace fx
