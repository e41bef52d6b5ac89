#include "fx/internal/files.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "fx/errors.h"

namespace fx {

void write_file_atomically(const std::string& path, const std::string& bytes) {
  // Unique per process, so that two processes saving to one path do not
  // write into each other's partial file.
  const std::string partial =
      absl::StrCat(path, ".partial.", static_cast<long>(::getpid()));
  {
    std::ofstream out(partial, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.close();
    if (!out) {
      const int error = errno;
      std::remove(partial.c_str());
      throw GraphError(absl::StrCat("cannot write '", partial,
                                    "': ", std::strerror(error)));
    }
  }
  if (std::rename(partial.c_str(), path.c_str()) != 0) {
    const int error = errno;
    std::remove(partial.c_str());
    throw GraphError(absl::StrCat("cannot replace '", path,
                                  "': ", std::strerror(error)));
  }
}

std::string read_file(const std::string& path, const char* who) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw GraphError(absl::StrCat(who, ": cannot open '", path,
                                  "': ", std::strerror(errno)));
  }
  std::string bytes((std::istreambuf_iterator<char>(in)),
                    std::istreambuf_iterator<char>());
  if (in.bad()) {
    throw GraphError(absl::StrCat(who, ": cannot read '", path,
                                  "': ", std::strerror(errno)));
  }
  return bytes;
}

}  // namespace fx
