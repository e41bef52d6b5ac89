#include "fx/io/internal/files.h"

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
#include <vector>
#include <string>

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/unpickler.h>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "fx/ir/errors.h"

namespace fx {

namespace {

// libtorch's unpickler trusts the lengths and memo indices in the pickle: a
// string said to be 3 GB long is allocated and zeroed before the short read
// fails, and a memo index of 4e9 grows the memo to 4e9 entries. Walks the
// opcodes of `pickle` and returns what is wrong (empty if nothing): every
// length within the bytes left, memo indices as a pickler writes them (each
// new one next, each read one already written), only the opcodes of the
// protocols libtorch writes, STOP at the end, and the stack as a pickler
// leaves it: libtorch's unpickler indexes its stack without checking, so an
// opcode that takes more values than there are (above the last MARK, for
// those that take none below it), or a mark-taking opcode without a MARK,
// writes outside it (found by the load fuzzer: a bad free in ~Unpickler).
std::string check_pickle(const char* data, size_t size) {
  size_t pos = 0;
  uint64_t memo_size = 0;
  // The values on the unpickler's stack, and where each open MARK is.
  uint64_t depth = 0;
  std::vector<uint64_t> marks;
  // Takes `n` values above the last mark and leaves `push`.
  auto take = [&](uint64_t n, uint64_t push) {
    const uint64_t floor = marks.empty() ? 0 : marks.back();
    if (depth < floor + n) return false;
    depth = depth - n + push;
    return true;
  };
  // Takes the values above the last mark (an even count with `pairs`) and
  // the mark, plus `below` values under it, and leaves `push`.
  auto to_mark = [&](uint64_t below, bool pairs, uint64_t push) {
    if (marks.empty()) return false;
    const uint64_t mark = marks.back();
    marks.pop_back();
    if (pairs && (depth - mark) % 2 != 0) return false;
    const uint64_t floor = marks.empty() ? 0 : marks.back();
    if (mark < floor + below) return false;
    depth = mark - below + push;
    return true;
  };
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
    bool stack_ok = true;
    switch (op) {
      case '.':  // STOP
        if (!take(1, 1)) {
          return absl::StrCat("STOP at ", at, " with no value on the stack");
        }
        return pos == size ? "" : absl::StrCat("bytes after the end at ", pos);
      case '(':  // MARK
        marks.push_back(depth);
        break;
      case '0': stack_ok = take(1, 0); break;                  // POP
      case '1': stack_ok = to_mark(0, false, 0); break;       // POP_MARK
      case '2': stack_ok = take(1, 2); break;                  // DUP
      case 'N': case 0x88: case 0x89:                          // None, bools
      case ']': case ')': case '}': case 0x8f:                 // empty containers
        stack_ok = take(0, 1);
        break;
      case 'a': stack_ok = take(2, 1); break;                  // APPEND
      case 's': stack_ok = take(3, 1); break;                  // SETITEM
      case 'e': case 0x90:                                     // APPENDS, ADDITEMS
        stack_ok = to_mark(1, false, 1);
        break;
      case 'u': stack_ok = to_mark(1, true, 1); break;         // SETITEMS
      case 't': case 'l': case 0x91:                           // TUPLE, LIST, FROZENSET
        stack_ok = to_mark(0, false, 1);
        break;
      case 'd': stack_ok = to_mark(0, true, 1); break;         // DICT
      case 0x85: stack_ok = take(1, 1); break;                 // TUPLE1
      case 0x86: stack_ok = take(2, 1); break;                 // TUPLE2
      case 0x87: stack_ok = take(3, 1); break;                 // TUPLE3
      case 'R': case 'b': case 0x81: case 0x93:                // REDUCE, BUILD,
        stack_ok = take(2, 1);                                 // NEWOBJ,
        break;                                                 // STACK_GLOBAL
      case 0x92: stack_ok = take(3, 1); break;                 // NEWOBJ_EX
      case 'Q': stack_ok = take(1, 1); break;                  // BINPERSID
      case 0x94:  // MEMOIZE
        stack_ok = take(1, 1);
        ++memo_size;
        break;
      case 0x80: case 0x95:                              // PROTO, FRAME
        ok = read_le(op == 0x80 ? 1 : 8, &n);
        break;
      case 'K': ok = read_le(1, &n); stack_ok = take(0, 1); break;  // BININT1
      case 'M': ok = read_le(2, &n); stack_ok = take(0, 1); break;  // BININT2
      case 'J': ok = read_le(4, &n); stack_ok = take(0, 1); break;  // BININT
      case 'G': ok = read_le(8, &n); stack_ok = take(0, 1); break;  // BINFLOAT
      case 'h': case 'j':                                // BINGET, LONG_BINGET
        ok = read_le(op == 'h' ? 1 : 4, &n) && n < memo_size;
        stack_ok = take(0, 1);
        break;
      case 'q': case 'r':                                // BINPUT, LONG_BINPUT
        ok = read_le(op == 'q' ? 1 : 4, &n) && n <= memo_size;
        if (ok && n == memo_size) ++memo_size;
        stack_ok = take(1, 1);
        break;
      case 0x8a: case 'C': case 'U': case 0x8c:  // 1-byte length
        ok = read_le(1, &n) && have(n);
        pos += ok ? n : 0;
        stack_ok = take(0, 1);
        break;
      case 0x8b: case 'X': case 'B': case 'T':  // 4-byte length
        ok = read_le(4, &n) && have(n);
        pos += ok ? n : 0;
        stack_ok = take(0, 1);
        break;
      case 0x8d: case 0x8e: case 0x96:  // 8-byte length
        ok = read_le(8, &n) && have(n);
        pos += ok ? n : 0;
        stack_ok = take(0, 1);
        break;
      case 'c':  // GLOBAL: module and name lines
        ok = skip_line() && skip_line();
        stack_ok = take(0, 1);
        break;
      case 'I': case 'L': case 'S': case 'V': case 'F': case 'P':
        ok = skip_line();
        stack_ok = take(0, 1);
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
    if (!stack_ok) {
      return absl::StrCat("opcode ", static_cast<int>(op), " at ", at,
                          " takes values the stack does not hold (or a MARK "
                          "there is none of)");
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

namespace {

// Appends what is left in `in` to *bytes, in blocks (not a character at a
// time); the caller checks in.bad().
void append_rest(std::istream& in, std::string* bytes) {
  char block[1 << 16];
  while (in) {
    in.read(block, sizeof block);
    bytes->append(block, static_cast<size_t>(in.gcount()));
  }
}

}  // namespace

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
  append_rest(in, &bytes);
  if (in.bad()) {
    throw GraphError(absl::StrCat(who, ": cannot read '", path,
                                  "': ", std::strerror(errno)));
  }
  return bytes;
}

std::string read_stream(std::istream& in, const char* who) {
  std::string bytes;
  append_rest(in, &bytes);
  if (in.bad()) {
    throw GraphError(absl::StrCat(
        who, ": the stream could not be read (its badbit is set)"));
  }
  return bytes;
}

}  // namespace fx
