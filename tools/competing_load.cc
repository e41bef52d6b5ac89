#include "tools/competing_load.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <stdexcept>
#include <string>

extern char** environ;

namespace fx {
namespace benchmark {

CompetingLoad::CompetingLoad(int processes) {
  for (int i = 0; i < processes; ++i) {
    char sh[] = "/bin/sh";
    char flag[] = "-c";
    char loop[] = "while :; do :; done";
    char* argv[] = {sh, flag, loop, nullptr};
    pid_t pid = -1;
    const int error = posix_spawn(&pid, sh, nullptr, nullptr, argv, environ);
    if (error != 0) {
      stop();
      throw std::runtime_error("CompetingLoad: cannot start /bin/sh (error " +
                               std::to_string(error) + ")");
    }
    pids_.push_back(pid);
  }
}

CompetingLoad::~CompetingLoad() { stop(); }

void CompetingLoad::stop() {
  for (pid_t pid : pids_) kill(pid, SIGKILL);
  for (pid_t pid : pids_) waitpid(pid, nullptr, 0);
  pids_.clear();
}

}  // namespace benchmark
}  // namespace fx
