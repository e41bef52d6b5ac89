#include "tools/timed_process.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <fstream>
#include <stdexcept>

#include <ATen/ATen.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "passes/timing.h"

namespace fx {
namespace benchmark {
namespace {

std::string dims_text(at::IntArrayRef sizes) {
  return absl::StrJoin(sizes, "x");
}

void write_raw(const std::string& path, const at::Tensor& t) {
  const at::Tensor c = t.contiguous();
  std::ofstream out(path, std::ios::binary);
  out.write(static_cast<const char*>(c.data_ptr()),
            static_cast<std::streamsize>(c.numel() * c.element_size()));
  if (!out.good()) throw std::runtime_error("cannot write " + path);
}

}  // namespace

std::string ort_node_modules() {
  const char* dir = std::getenv("FX_ORT_DIR");
  return std::string(dir ? dir : "/usr/local/lib/fx-libtorch/onnxruntime") +
         "/node_modules";
}

std::string raw_inputs(const std::vector<at::Tensor>& inputs,
                       const std::string& dir) {
  std::vector<std::string> specs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const at::Tensor& t = inputs[i];
    const std::string file = absl::StrCat(dir, "/timed_input_", i, ".bin");
    write_raw(file, t);
    const char* dtype = t.scalar_type() == at::kLong ? "int64" : "float32";
    specs.push_back(absl::StrCat(file, ":", dtype, ":", dims_text(t.sizes())));
  }
  return absl::StrJoin(specs, " ");
}

std::string ort_timer_command(const std::string& script,
                              const std::string& model, int threads) {
  return absl::StrCat("NODE_PATH=", ort_node_modules(), " exec node ", script,
                      " ", model, " ", threads);
}

TimedProcess::TimedProcess(const std::string& command_prefix,
                           const std::string& what,
                           const std::vector<at::Tensor>& inputs,
                           const std::string& scratch_dir)
    : what_(what), scratch_dir_(scratch_dir) {
  const std::string command =
      absl::StrCat(command_prefix, " ", raw_inputs(inputs, scratch_dir));
  // A child that dies must not kill us by a write to its closed pipe.
  signal(SIGPIPE, SIG_IGN);
  int to_child[2], from_child[2];
  if (pipe2(to_child, O_CLOEXEC) != 0 || pipe2(from_child, O_CLOEXEC) != 0) {
    throw std::runtime_error("TimedProcess: pipe() failed");
  }
  pid_ = fork();
  if (pid_ < 0) throw std::runtime_error("TimedProcess: fork() failed");
  if (pid_ == 0) {
    dup2(to_child[0], STDIN_FILENO);
    dup2(from_child[1], STDOUT_FILENO);
    close(to_child[0]);
    close(to_child[1]);
    close(from_child[0]);
    close(from_child[1]);
    execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(to_child[0]);
  close(from_child[1]);
  to_ = fdopen(to_child[1], "w");
  from_ = fdopen(from_child[0], "r");
  const std::string ready = request("");
  if (ready != "ready") {
    stop();  // a destructor does not run for a constructor that throws
    throw std::runtime_error(absl::StrCat(what_, " did not start (", command,
                                          "): said '", ready, "'"));
  }
}

TimedProcess::~TimedProcess() { stop(); }

void TimedProcess::stop() {
  // The end of its input ends the Node.js process.
  if (to_ != nullptr) fclose(to_);
  if (from_ != nullptr) fclose(from_);
  to_ = from_ = nullptr;
  if (pid_ > 0) {
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
  }
}

std::string TimedProcess::request(const std::string& line) {
  if (!line.empty()) {
    fputs((line + "\n").c_str(), to_);
    fflush(to_);
  }
  std::string answer;
  int c;
  while ((c = fgetc(from_)) != EOF && c != '\n') answer.push_back(static_cast<char>(c));
  return answer;
}

double TimedProcess::warm_median_ms(int calls) {
  std::vector<double> ms = run(calls + 1);
  return median(std::vector<double>(ms.begin() + 1, ms.end()));
}

std::vector<double> TimedProcess::run(int n) {
  const std::string answer = request(absl::StrCat("run ", n));
  std::vector<double> ms;
  for (absl::string_view word :
       absl::StrSplit(absl::StripPrefix(answer, "ms "), ' ', absl::SkipEmpty())) {
    double value = 0;
    if (!absl::SimpleAtod(word, &value)) break;
    ms.push_back(value);
  }
  if (ms.size() != static_cast<size_t>(n)) {
    throw std::runtime_error(what_ + " stopped: '" + answer + "'");
  }
  return ms;
}

at::Tensor TimedProcess::output(at::ScalarType dtype) {
  const std::string file = scratch_dir_ + "/timed_output.bin";
  const std::string answer = request("save " + file);
  if (!absl::StartsWith(answer, "saved ")) {
    throw std::runtime_error(what_ + " did not save its output: '" + answer +
                             "'");
  }
  std::vector<int64_t> sizes;
  for (absl::string_view d :
       absl::StrSplit(absl::StripPrefix(answer, "saved "), 'x', absl::SkipEmpty())) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(d, &v)) throw std::runtime_error("bad dims: " + answer);
    sizes.push_back(v);
  }
  at::Tensor out = at::empty(sizes, dtype);
  std::ifstream in(file, std::ios::binary);
  in.read(static_cast<char*>(out.data_ptr()),
          static_cast<std::streamsize>(out.nbytes()));
  if (!in.good()) throw std::runtime_error("cannot read " + file);
  return out;
}

}  // namespace benchmark
}  // namespace fx
