#include "fx/internal/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>

#include "absl/strings/str_cat.h"
#include "fx/errors.h"

namespace fx {

namespace {

[[noreturn]] void fail(const std::string& what, const std::string& path,
                       int error) {
  throw GraphError(absl::StrCat("cannot ", what, " '", path,
                                "': ", std::strerror(error)));
}

// The directory holding `path` ("." for a bare file name).
std::string directory_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// The process's umask, read without changing it (umask(2) can only read it
// by setting it, which would race with other threads creating files).
mode_t current_umask() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Umask:", 0) == 0) {
      return static_cast<mode_t>(std::strtoul(line.c_str() + 6, nullptr, 8));
    }
  }
  return 022;
}

}  // namespace

void write_file_atomically(const std::string& path, const std::string& bytes) {
  // The partial file is made by mkstemp in the target's directory (so the
  // rename stays on one file system): unique per process and per thread.
  std::string partial = absl::StrCat(path, ".partial.XXXXXX");
  const int fd = ::mkstemp(partial.data());
  if (fd < 0) fail("create a file beside", path, errno);
  auto abandon = [&](const char* what, int error) {
    ::close(fd);
    ::unlink(partial.c_str());
    fail(what, partial, error);
  };
  // mkstemp makes the file 0600; give it the mode a new file would get.
  if (::fchmod(fd, 0666 & ~current_umask()) != 0) {
    abandon("set the mode of", errno);
  }
  size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t n =
        ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      abandon("write", errno);
    }
    written += static_cast<size_t>(n);
  }
  // On disk before it takes the name: a crash leaves the old file or the
  // new one, never a short one.
  if (::fsync(fd) != 0) abandon("flush", errno);
  if (::close(fd) != 0) {
    const int error = errno;
    ::unlink(partial.c_str());
    fail("close", partial, error);
  }
  if (std::rename(partial.c_str(), path.c_str()) != 0) {
    const int error = errno;
    ::unlink(partial.c_str());
    fail("replace", path, error);
  }
  // And the rename itself is durable once the directory is.
  const std::string directory = directory_of(path);
  const int dir = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY);
  if (dir >= 0) {
    ::fsync(dir);
    ::close(dir);
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
