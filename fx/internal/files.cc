#include "fx/internal/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <tuple>
#include <string>

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/unpickler.h>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "fx/errors.h"

namespace fx {

namespace {

// libtorch's unpickler trusts the lengths and memo indices in the pickle: a
// string said to be 3 GB long is allocated and zeroed before the short read
// fails, and a memo index of 4e9 grows the memo to 4e9 entries. Walks the
// opcodes of `pickle` and returns what is wrong (empty if nothing): every
// length within the bytes left, memo indices as a pickler writes them (each
// new one next, each read one already written), only the opcodes of the
// protocols libtorch writes, and STOP at the end.
std::string check_pickle(const char* data, size_t size) {
  size_t pos = 0;
  uint64_t memo_size = 0;
  auto have = [&](uint64_t n) { return n <= size - pos; };
  auto read_le = [&](int bytes, uint64_t* value) {
    if (!have(bytes)) return false;
    *value = 0;
    for (int i = bytes - 1; i >= 0; --i) {
      *value = (*value << 8) | static_cast<uint8_t>(data[pos + i]);
    }
    pos += bytes;
    return true;
  };
  auto skip_line = [&] {
    const void* end = std::memchr(data + pos, '\n', size - pos);
    if (end == nullptr) return false;
    pos = static_cast<const char*>(end) - data + 1;
    return true;
  };
  while (pos < size) {
    const size_t at = pos;
    const uint8_t op = static_cast<uint8_t>(data[pos++]);
    uint64_t n = 0;
    bool ok = true;
    switch (op) {
      case '.':  // STOP
        return pos == size ? "" : absl::StrCat("bytes after the end at ", pos);
      case '(': case '0': case '1': case '2': case 'N': case 0x88: case 0x89:
      case ']': case ')': case '}': case 'a': case 'e': case 's': case 'u':
      case 't': case 0x85: case 0x86: case 0x87: case 'R': case 'b':
      case 0x81: case 'l': case 'd': case 0x8f: case 0x90: case 0x91:
      case 0x93: case 0x92: case 'Q':
        break;
      case 0x94:  // MEMOIZE
        ++memo_size;
        break;
      case 0x80: case 'K': ok = read_le(1, &n); break;  // PROTO, BININT1
      case 'M': ok = read_le(2, &n); break;              // BININT2
      case 'J': ok = read_le(4, &n); break;              // BININT
      case 'G': case 0x95: ok = read_le(8, &n); break;   // BINFLOAT, FRAME
      case 'h': case 'j':                                // BINGET, LONG_BINGET
        ok = read_le(op == 'h' ? 1 : 4, &n) && n < memo_size;
        break;
      case 'q': case 'r':                                // BINPUT, LONG_BINPUT
        ok = read_le(op == 'q' ? 1 : 4, &n) && n <= memo_size;
        if (ok && n == memo_size) ++memo_size;
        break;
      case 0x8a: case 'C': case 'U': case 0x8c:  // 1-byte length
        ok = read_le(1, &n) && have(n);
        pos += ok ? n : 0;
        break;
      case 0x8b: case 'X': case 'B': case 'T':  // 4-byte length
        ok = read_le(4, &n) && have(n);
        pos += ok ? n : 0;
        break;
      case 0x8d: case 0x8e: case 0x96:  // 8-byte length
        ok = read_le(8, &n) && have(n);
        pos += ok ? n : 0;
        break;
      case 'c':  // GLOBAL: module and name lines
        ok = skip_line() && skip_line();
        break;
      case 'I': case 'L': case 'S': case 'V': case 'F': case 'P':
        ok = skip_line();
        break;
      case 'g': case 'p':  // GET, PUT: decimal memo index lines
        ok = false;
        break;
      default:
        return absl::StrCat("unknown opcode ", static_cast<int>(op), " at ",
                            at);
    }
    if (!ok) {
      return absl::StrCat("opcode ", static_cast<int>(op), " at ", at,
                          " has a length or memo index beyond the data");
    }
  }
  return "no STOP";
}


// Whether every tensor in `v` has its storage within the record its data
// came from (`records`: data pointer -> record size).
std::string check_storages(
    const c10::IValue& v,
    const absl::flat_hash_map<const void*, size_t>& records, int depth = 0) {
  if (depth > 100) return "values nested too deep";
  if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    if (!t.defined() || !t.has_storage()) return "";
    const c10::Storage& storage = t.storage();
    if (storage.nbytes() == 0) return "";
    auto it = records.find(storage.data());
    if (it == records.end()) return "";  // made by the unpickler itself
    if (storage.nbytes() > it->second) {
      return absl::StrCat("a tensor's storage claims ", storage.nbytes(),
                          " bytes but its data record holds ", it->second);
    }
    return "";
  }
  auto each = [&](const auto& values) -> std::string {
    for (const c10::IValue& e : values) {
      std::string p = check_storages(e, records, depth + 1);
      if (!p.empty()) return p;
    }
    return "";
  };
  if (v.isList()) return each(v.toListRef());
  if (v.isTuple()) return each(v.toTupleRef().elements());
  if (v.isGenericDict()) {
    for (const auto& item : v.toGenericDict()) {
      std::string p = check_storages(item.key(), records, depth + 1);
      if (p.empty()) p = check_storages(item.value(), records, depth + 1);
      if (!p.empty()) return p;
    }
  }
  return "";
}

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

namespace {

class BytesReader final : public caffe2::serialize::ReadAdapterInterface {
 public:
  explicit BytesReader(const std::string& bytes) : bytes_(bytes) {}
  size_t size() const override { return bytes_.size(); }
  size_t read(uint64_t pos, void* buf, size_t n,
              const char* /*what*/) const override {
    if (pos >= bytes_.size()) return 0;
    n = std::min<uint64_t>(n, bytes_.size() - pos);
    std::memcpy(buf, bytes_.data() + pos, n);
    return n;
  }

 private:
  const std::string& bytes_;
};

}  // namespace

std::shared_ptr<caffe2::serialize::ReadAdapterInterface> bytes_reader(
    const std::string& bytes) {
  return std::make_shared<BytesReader>(bytes);
}

std::optional<c10::IValue> checked_pickle_load(const std::string& bytes,
                                               std::string* problem) {
  caffe2::serialize::PyTorchStreamReader reader(bytes_reader(bytes));
  std::tuple<at::DataPtr, size_t> record = reader.getRecord("data.pkl");
  const at::DataPtr& pickle = std::get<0>(record);
  const size_t pickle_size = std::get<1>(record);
  const char* data = static_cast<const char*>(pickle.get());
  *problem = check_pickle(data, pickle_size);
  if (!problem->empty()) {
    *problem = "its data.pkl: " + *problem;
    return std::nullopt;
  }
  // torch::jit::readArchiveAndTensors("data", ...), recording each data
  // record's size.
  size_t read = 0;
  auto read_pickle = [&](char* buffer, size_t length) -> size_t {
    length = std::min(pickle_size - read, length);
    std::memcpy(buffer, data + read, length);
    read += length;
    return length;
  };
  absl::flat_hash_map<const void*, size_t> records;
  auto read_record = [&](const std::string& name) {
    auto [record, size] = reader.getRecord("data/" + name);
    records[record.get()] = size;
    return std::move(record);
  };
  torch::jit::Unpickler unpickler(read_pickle, nullptr, nullptr, read_record,
                                  c10::nullopt);
  unpickler.set_version(reader.version());
  c10::IValue value = unpickler.parse_ivalue();
  *problem = check_storages(value, records);
  if (!problem->empty()) return std::nullopt;
  return value;
}

std::string read_file(const std::string& path, const char* who) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw GraphError(absl::StrCat(who, ": cannot open '", path,
                                  "': ", std::strerror(errno)));
  }
  std::string bytes;
  std::error_code size_error;
  const auto size = std::filesystem::file_size(path, size_error);
  if (!size_error) bytes.reserve(size);
  char block[1 << 16];
  while (in) {
    in.read(block, sizeof block);
    bytes.append(block, static_cast<size_t>(in.gcount()));
  }
  if (in.bad()) {
    throw GraphError(absl::StrCat(who, ": cannot read '", path,
                                  "': ", std::strerror(errno)));
  }
  return bytes;
}

std::string read_stream(std::istream& in, const char* who) {
  std::string bytes;
  char block[1 << 16];
  while (in) {
    in.read(block, sizeof block);
    bytes.append(block, static_cast<size_t>(in.gcount()));
  }
  if (in.bad()) {
    throw GraphError(absl::StrCat(
        who, ": the stream could not be read (its badbit is set)"));
  }
  return bytes;
}

}  // namespace fx
