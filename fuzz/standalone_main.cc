// main() for the fuzzer binaries when they are built without libFuzzer (the
// default gcc build): runs each file, or each file in each directory, given
// on the command line through LLVMFuzzerTestOneInput once, as libFuzzer does
// when given files. Lets the binaries reproduce a finding anywhere.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

int run_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", path.c_str());
    return 1;
  }
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                          std::istreambuf_iterator<char>());
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()),
                         bytes.size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: %s FILE_OR_DIR...\n"
                 "runs each input once (built without libFuzzer; build with "
                 "--config=fuzz to fuzz)\n",
                 argv[0]);
    return 2;
  }
  int status = 0;
  size_t count = 0;
  for (int i = 1; i < argc; ++i) {
    std::filesystem::path arg(argv[i]);
    if (std::filesystem::is_directory(arg)) {
      std::vector<std::filesystem::path> files;
      for (const auto& entry : std::filesystem::directory_iterator(arg)) {
        if (entry.is_regular_file()) files.push_back(entry.path());
      }
      std::sort(files.begin(), files.end());
      for (const auto& file : files) status |= run_file(file), ++count;
    } else {
      status |= run_file(arg), ++count;
    }
  }
  std::printf("ran %zu inputs\n", count);
  return status;
}
