// Whole-file reads and writes shared by fx::save, the tensor files of
// generated code and the code generator.
#pragma once

#include <istream>
#include <memory>
#include <optional>
#include <string>

#include <ATen/core/ivalue.h>
#include <caffe2/serialize/read_adapter_interface.h>

namespace fx {

// Writes `bytes` to `path`, replacing an existing file only once the new
// one is complete and on disk (a reader never sees a partial file, a crash
// leaves the old file or the new one): a unique partial file beside it
// (mkstemp), fsync'd, renamed over it, and the directory fsync'd. Safe from
// several threads and processes at once. Throws fx::GraphError naming the
// path and the system's reason if it cannot, and leaves no partial file.
void write_file_atomically(const std::string& path, const std::string& bytes);

// The bytes of the file at `path`. Throws fx::GraphError naming `who` (the
// calling function), the path and the system's reason if it cannot.
std::string read_file(const std::string& path, const char* who);

// The bytes left in `in`, read in blocks (not a character at a time).
// Throws fx::GraphError naming `who` if the stream's badbit gets set.
std::string read_stream(std::istream& in, const char* who);

// A zip reader's view of `bytes`, which must outlive it: no copy, and reads
// past the end return short (the reader then reports a truncated archive)
// instead of touching memory beyond.
std::shared_ptr<caffe2::serialize::ReadAdapterInterface> bytes_reader(
    const std::string& bytes);

// The value of a torch.save archive (torch::pickle_save's bytes, which
// fx::save and save_tensors write), unpickled as torch::pickle_load does
// but checked where libtorch's unpickler trusts the file: every length and
// memo index of data.pkl within the data (a string said to be 3 GB is not
// allocated), and every tensor's storage within the data record it comes
// from (a short record is not read past: torch::pickle_load makes a storage
// of the size the pickle claims over a smaller buffer). Returns nullopt and
// says what is wrong in *problem for such a file; libtorch's own errors (a
// truncated zip) are thrown as they are.
std::optional<c10::IValue> checked_pickle_load(const std::string& bytes,
                                               std::string* problem);

}  // namespace fx
