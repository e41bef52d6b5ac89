// Fuzz targets: what the public API does with arbitrary bytes.
//
// Each function takes one input and either returns normally (the input was
// accepted, or refused with an fx::Error) or aborts with a message: any other
// exception leaving the API, or a broken property, is a finding. The same
// functions back the libFuzzer binaries (built with --config=fuzz, see
// tools/fuzz.sh) and the regression test over fuzz/regressions/.
//
//   parse_graph: fx::parse_graph(text); what parses must print, and the
//                printed text must parse back to the same text.
//   load:        fx::load of a file holding the bytes; what loads must
//                save and load back to the same graph.
//   input_spec:  the CLI's --input spec ("1x3x224x224:float32").
//   exported_program: fx::load_exported_program of the bytes (a .pt2
//                archive); what loads lints, and saves and loads back
//                (fx::save) to the same graph.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace fx {
namespace fuzz {

void parse_graph(const uint8_t* data, size_t size);
void load(const uint8_t* data, size_t size);
void input_spec(const uint8_t* data, size_t size);
void exported_program(const uint8_t* data, size_t size);

// The fuzz target of that name ("parse_graph", "load", "input_spec",
// "exported_program"), or
// nullptr.
using Target = void (*)(const uint8_t*, size_t);
Target target_named(const std::string& name);
std::vector<std::string> target_names();

}  // namespace fuzz
}  // namespace fx
