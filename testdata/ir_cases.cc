#include "testdata/ir_cases.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "testdata/filecheck.h"

extern char** environ;

namespace testdata {
namespace {

struct Output {
  // The exit status, or 128 + the signal that killed it.
  int status = 0;
  std::string out;
  std::string err;
};

// A temporary file, removed when this goes.
class TempFile {
 public:
  TempFile() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "ir_case_XXXXXX").string();
    fd_ = ::mkstemp(pattern.data());
    if (fd_ < 0) {
      throw std::runtime_error("mkstemp: " + std::string(std::strerror(errno)));
    }
    path_ = pattern;
  }
  ~TempFile() {
    ::close(fd_);
    ::unlink(path_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  int fd() const { return fd_; }
  std::string read() const {
    std::ifstream in(path_, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
  }

 private:
  int fd_ = -1;
  std::string path_;
};

// Runs `argv` (no shell), stdin from /dev/null, stdout and stderr captured.
Output run(const std::vector<std::string>& argv) {
  TempFile out;
  TempFile err;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out.fd(), 1);
  posix_spawn_file_actions_adddup2(&actions, err.fd(), 2);
  std::vector<char*> args;
  for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int spawned =
      posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) {
    throw std::runtime_error("cannot run " + argv[0] + ": " +
                             std::strerror(spawned));
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  Output output;
  output.status = WIFEXITED(status) ? WEXITSTATUS(status)
                                    : 128 + WTERMSIG(status);
  output.out = out.read();
  output.err = err.read();
  return output;
}

IrCaseResult failure(std::string message) {
  return IrCaseResult{false, std::move(message)};
}

}  // namespace

IrCaseResult run_ir_case(const std::string& fx, const std::string& path,
                         const std::vector<std::string>& features) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return failure(path + ": cannot read the case");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();

  // The RUN line: one, `# RUN: [not] fx ARGS`.
  std::vector<std::string> words;
  int run_line = 0;
  std::istringstream lines(text);
  std::string line;
  std::vector<std::string> missing;
  for (int number = 1; std::getline(lines, line); ++number) {
    const size_t hash = line.find_first_not_of(" \t");
    const size_t required = line.find("REQUIRES:");
    if (hash != std::string::npos && line[hash] == '#' &&
        required != std::string::npos) {
      std::istringstream split(line.substr(required + 9));
      for (std::string feature; split >> feature;) {
        if (std::find(features.begin(), features.end(), feature) ==
            features.end()) {
          missing.push_back(feature);
        }
      }
      continue;
    }
    const size_t at = line.find("RUN:");
    if (hash == std::string::npos || line[hash] != '#' ||
        at == std::string::npos) {
      continue;
    }
    const std::string where = path + ":" + std::to_string(number) + ": ";
    if (run_line != 0) {
      return failure(where + "a second RUN line (the first is line " +
                     std::to_string(run_line) + "): one command per case");
    }
    run_line = number;
    std::istringstream split(line.substr(at + 4));
    for (std::string word; split >> word;) words.push_back(word);
  }
  if (run_line == 0) {
    return failure(path +
                   ": no RUN line: say how to run fx on the case, e.g. "
                   "`# RUN: fx opt %s --passes=fuse_conv_bn`");
  }
  if (!missing.empty()) {
    IrCaseResult r{true, path + ": not run: requires"};
    r.unsupported = true;
    for (const std::string& feature : missing) r.message += " " + feature;
    return r;
  }
  const std::string where = path + ":" + std::to_string(run_line) + ": ";
  const bool expect_failure = !words.empty() && words[0] == "not";
  if (expect_failure) words.erase(words.begin());
  if (words.empty() || words[0] != "fx") {
    return failure(where + "the RUN line runs fx (`# RUN: fx opt %s ...` or "
                           "`# RUN: not fx ...`)");
  }
  std::vector<std::string> argv = {fx};
  std::string command = "fx";
  for (size_t i = 1; i < words.size(); ++i) {
    argv.push_back(words[i] == "%s" ? path : words[i]);
    command += " " + argv.back();
  }

  const Output output = run(argv);
  if (expect_failure ? output.status == 0 : output.status != 0) {
    return failure(where + "`" + command + "` " +
                   (expect_failure
                        ? "succeeded, but the RUN line expects it to fail "
                          "(`not`); it printed:\n" + output.out
                        : "exited with status " +
                              std::to_string(output.status) + ":\n" +
                              output.err));
  }
  const FileCheckResult checked = filecheck(text, output.out + output.err);
  if (!checked) {
    return failure(path + ": " + checked.message + "\n(`" + command +
                   "` printed:)\n" + output.out + output.err);
  }
  return IrCaseResult{true, ""};
}

std::vector<std::string> list_ir_cases(const std::string& directory) {
  std::vector<std::string> cases;
  for (const auto& entry :
       std::filesystem::recursive_directory_iterator(directory)) {
    if (entry.is_regular_file() && entry.path().extension() == ".ir") {
      cases.push_back(entry.path().string());
    }
  }
  std::sort(cases.begin(), cases.end());
  return cases;
}

}  // namespace testdata
