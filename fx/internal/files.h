// Whole-file reads and writes shared by fx::save, the tensor files of
// generated code and the code generator.
#pragma once

#include <string>

namespace fx {

// Writes `bytes` to `path`, replacing an existing file only once the new
// one is complete (a reader never sees a partial file). Throws
// fx::GraphError naming the path and the system's reason if it cannot.
void write_file_atomically(const std::string& path, const std::string& bytes);

// The bytes of the file at `path`. Throws fx::GraphError naming `who` (the
// calling function), the path and the system's reason if it cannot.
std::string read_file(const std::string& path, const char* who);

}  // namespace fx
