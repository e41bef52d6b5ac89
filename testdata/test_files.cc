#include "testdata/test_files.h"

#include <cstdlib>

#include "libtorch/python.h"
#include "third_party/catch.h"

namespace testdata {

std::string test_tmpdir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr && *dir != '\0' ? dir : "/tmp";
}

std::string test_file(const std::string& name) {
  return test_tmpdir() + "/" + name;
}

namespace {

// `path` in the test's runfiles (absolute, so that a test that changed its
// working directory still finds it), or as given outside Bazel.
std::string runfile(const std::string& path) {
  const char* root = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  if (root == nullptr || workspace == nullptr || *root == '\0') return path;
  return std::string(root) + "/" + workspace + "/" + path;
}

// Runs `python script OUT [models...]`, which writes the models into OUT.
std::string write_models(const std::string& python, const std::string& script,
                         const std::string& dir,
                         const std::vector<std::string>& models) {
  const std::string out = test_file(dir);
  std::string command = python + " " + runfile(script) + " " + out;
  for (const std::string& model : models) command += " " + model;
  command += " > /dev/null";
  INFO(command);
  REQUIRE(std::system(command.c_str()) == 0);
  return out;
}

}  // namespace

std::string torchscript_models(const std::string& dir,
                               const std::vector<std::string>& models) {
  return write_models("/usr/bin/python3", "testdata/torchscript_models.py",
                      dir, models);
}

std::string attention_models(const std::string& dir,
                             const std::vector<std::string>& models) {
  return write_models(FX_LIBTORCH_PYTHON, "testdata/attention_models.py", dir,
                      models);
}

std::string exported_programs(const std::string& dir,
                              const std::vector<std::string>& models) {
  return write_models(FX_EXPORT_PYTHON, "testdata/exported_programs.py", dir,
                      models);
}

}  // namespace testdata
