#include "scheduling/child_processes.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "fx/ir/errors.h"

extern char** environ;

namespace fx {

using std::chrono::milliseconds;

ChildProcesses::~ChildProcesses() {
  for (pid_t pid : pids_) {
    if (pid <= 0) continue;
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
  }
}

void ChildProcesses::spawn(const std::vector<std::string>& argv) {
  if (argv.empty()) throw Error("spawn: no program");
  std::vector<char*> args;
  for (const std::string& arg : argv) {
    args.push_back(const_cast<char*>(arg.c_str()));
  }
  args.push_back(nullptr);
  pid_t pid = 0;
  const int error = ::posix_spawn(&pid, argv[0].c_str(), nullptr, nullptr,
                                  args.data(), environ);
  if (error != 0) {
    throw Error(absl::StrCat("cannot start ", argv[0], ": ",
                             std::strerror(error)));
  }
  pids_.push_back(pid);
}

std::vector<int> ChildProcesses::wait(milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<int> statuses(pids_.size(), -1);
  size_t left = pids_.size();
  for (pid_t pid : pids_) {
    if (pid <= 0) --left;
  }
  while (left > 0) {
    for (size_t i = 0; i < pids_.size(); ++i) {
      if (pids_[i] <= 0) continue;
      int status = 0;
      const bool late = std::chrono::steady_clock::now() >= deadline;
      if (late) ::kill(pids_[i], SIGKILL);
      if (::waitpid(pids_[i], &status, late ? 0 : WNOHANG) == pids_[i]) {
        statuses[i] = WIFEXITED(status)     ? WEXITSTATUS(status)
                      : WIFSIGNALED(status) ? 128 + WTERMSIG(status)
                                            : -1;
        pids_[i] = -1;
        --left;
      }
    }
    if (left > 0) std::this_thread::sleep_for(milliseconds(10));
  }
  pids_.clear();
  return statuses;
}

int free_local_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw Error("free_local_port: no socket");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  sockaddr* name = reinterpret_cast<sockaddr*>(&address);
  socklen_t length = sizeof(address);
  int port = 0;
  if (::bind(fd, name, sizeof(address)) == 0 &&
      ::getsockname(fd, name, &length) == 0) {
    port = ntohs(address.sin_port);
  }
  ::close(fd);
  if (port == 0) throw Error("free_local_port: no free port");
  return port;
}

}  // namespace fx
