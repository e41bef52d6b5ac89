// Whole-file reads and writes shared by fx::save, the tensor files of
// generated code and the code generator.
#pragma once

#include <string>

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

}  // namespace fx
