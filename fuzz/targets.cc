#include "fuzz/targets.h"

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <sstream>
#include <string>
#include <string_view>
#include <typeinfo>

#include <c10/util/Logging.h>

#include "fx/io/input_spec.h"
#include "fx/io/parser.h"
#include "fx/io/serialization.h"
#include "fx/pt2/exported_program.h"
#include "fx/ir/errors.h"

namespace fx {
namespace fuzz {
namespace {

// libtorch captures and symbolizes a C++ backtrace (dladdr per frame) for
// every c10::Error it throws; most fuzz inputs are refused with one, and that
// capture was a quarter of the load fuzzer's time. fx's errors carry no
// backtrace, so nothing a target checks depends on it.
const bool kNoBacktraces = [] {
  c10::SetStackTraceFetcher([] { return std::string(); });
  return true;
}();

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "fuzz finding: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

// Runs `body`; an fx::Error is a refusal, any other exception a finding.
// Returns whether `body` returned normally.
bool accepts(const std::function<void()>& body) {
  try {
    body();
    return true;
  } catch (const fx::Error&) {
    return false;
  } catch (const std::exception& e) {
    finding(std::string("an exception that is not an fx::Error left the "
                        "API: ") +
            typeid(e).name() + ": " + e.what());
  }
}

void expect(bool condition, const std::string& what) {
  if (!condition) finding(what);
}

// `gm` (whose graph prints as `printed`) saves, and loads back to the same
// graph.
void expect_saves_and_loads_back(const GraphModule& gm,
                                 const std::string& printed,
                                 const std::string& what) {
  GraphModule again{nullptr};
  expect(accepts([&] {
           std::stringstream copy;
           fx::save(gm, copy);
           again = fx::load(copy);
         }),
         what + " does not save and load back:\n" + printed);
  expect(again->graph().to_string() == printed,
         "save and load changed the graph of " + what + ":\n" + printed);
}

}  // namespace

void parse_graph(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  std::unique_ptr<Graph> graph;
  if (!accepts([&] { graph = fx::parse_graph(text); })) return;
  // What parses is a well-formed graph that prints, with and without its
  // types, as text that parses back to the same text.
  for (bool tensor_meta : {false, true}) {
    PrintOptions options;
    options.tensor_meta = tensor_meta;
    std::string printed;
    expect(accepts([&] {
             graph->lint();
             printed = graph->to_string(options);
           }),
           "a parsed graph fails lint or printing");
    std::unique_ptr<Graph> again;
    expect(accepts([&] { again = fx::parse_graph(printed); }),
           "the printed form of a parsed graph does not parse:\n" + printed);
    std::string reprinted = again->to_string(options);
    expect(reprinted == printed, "printing is not stable:\n" + printed +
                                     "\n---- reparsed and printed ----\n" +
                                     reprinted);
  }
}

void load(const uint8_t* data, size_t size) {
  // In memory: fx::load of a path reads the whole file and goes the same
  // way (fx/io/serialization_test.cc checks that the two agree).
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  GraphModule gm{nullptr};
  if (!accepts([&] { gm = fx::load(in); })) return;
  // What loads saves, and loads back to the same graph.
  expect_saves_and_loads_back(gm, gm->graph().to_string(), "a loaded module");
}

void input_spec(const uint8_t* data, size_t size) {
  std::string spec(reinterpret_cast<const char*>(data), size);
  InputSpec parsed;
  if (!accepts([&] { parsed = parse_input_spec(spec); })) return;
  int64_t numel = 1;
  for (int64_t s : parsed.sizes) {
    expect(s >= 0, "a negative size was accepted: " + spec);
    expect(s == 0 || numel <= INT64_MAX / s,
           "sizes whose product overflows were accepted: " + spec);
    numel *= s;
  }
  // The accepted spec prints as a spec that parses to the same.
  std::string printed = fx::to_string(parsed);
  InputSpec again;
  expect(accepts([&] { again = parse_input_spec(printed); }),
         "a printed spec does not parse: " + printed);
  expect(again.sizes == parsed.sizes && again.dtype == parsed.dtype,
         "a spec does not round-trip: " + spec + " -> " + printed);
}

void exported_program(const uint8_t* data, size_t size) {
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  GraphModule gm{nullptr};
  if (!accepts([&] { gm = fx::load_exported_program(in); })) return;
  // What loads is a well-formed graph that saves and loads back the same.
  std::string printed;
  expect(accepts([&] {
           gm->graph().lint();
           printed = gm->graph().to_string();
         }),
         "a loaded program fails lint or printing");
  expect_saves_and_loads_back(gm, printed, "a loaded program");
}

Target target_named(const std::string& name) {
  if (name == "parse_graph") return &parse_graph;
  if (name == "load") return &load;
  if (name == "input_spec") return &input_spec;
  if (name == "exported_program") return &exported_program;
  return nullptr;
}

std::vector<std::string> target_names() {
  return {"parse_graph", "load", "input_spec", "exported_program"};
}

}  // namespace fuzz
}  // namespace fx
