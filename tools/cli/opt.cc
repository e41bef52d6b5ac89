// fx opt FILE.ir: a graph written as text (the textual IR, fx/io/parser.h)
// read, passes run on it through fx::PassManager, and the result printed,
// as mlir-opt does for MLIR. Pass tests are .ir files run through it
// (tools/ir_test.cc); their get_attr nodes get tensors made from their
// types (passes/typed_attributes.h). With --patterns it prints instead what
// the pattern library (passes/patterns.h) matches at each call: the
// pattern tests.
#include <fstream>
#include <iostream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "fx/fx.h"
#include "passes/patterns.h"
#include "passes/typed_attributes.h"
#include "tools/cli/commands.h"
#include "tools/cli/support.h"

namespace cli {
namespace {

std::string read_text(const std::string& path) {
  std::ostringstream text;
  if (path == "-") {
    text << std::cin.rdbuf();
    return text.str();
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError("cannot read " + path);
  text << in.rdbuf();
  return text.str();
}

class Opt : public Command {
 public:
  Opt()
      : Command("opt", {"FILE.ir"},
                "read a graph written as text, run passes on it and print "
                "the result (pass tests are written this way)",
                "FILE.ir holds one graph as `print(graph)` writes it (`-`: "
                "read it from stdin); lines starting with # are comments. "
                "Each get_attr target gets a tensor made from its type "
                "(%w : f32[4, 3] = get_attr[target=fc.weight]). graph and "
                "meta print the init steps' graphs after the graph.") {
    add_passes_flag(flags(), &passes_);
    add_print_flag(flags(), &print_);
    flags().add("patterns", &patterns_,
                "instead of running passes, print what match_fusion finds at "
                "each call for these fusions, tried in order, comma-separated "
                "(passes/patterns.h: conv_add_activation, conv_relu, conv, "
                "...)");
    flags().add("untyped", &untyped_,
                "with --patterns: match without checking the operands' types "
                "(as fuse_conv_bn does)");
  }

 private:
  int run(const std::vector<std::string>& args) override {
    check_print(print_);
    check_passes(passes_);
    const std::vector<fx::Fusion> fusions = parse_fusions();
    const std::string& path = args[0];
    const std::string text = read_text(path);
    fx::GraphModule module{nullptr};
    try {
      module = fx::parse_graph_module(text);
    } catch (const fx::GraphError& e) {
      throw fx::GraphError(path + ": " + e.what());
    }
    if (!fusions.empty()) {
      print_matches(module, fusions);
      return 0;
    }
    PrintModuleOptions options;
    options.init_steps = true;
    print_module(run_passes(module, passes_).module, print_, options);
    return 0;
  }

  std::vector<fx::Fusion> parse_fusions() const {
    std::vector<fx::Fusion> fusions;
    for (absl::string_view name :
         absl::StrSplit(patterns_, ',', absl::SkipEmpty())) {
      const auto fusion = fx::fusion_named(std::string(name));
      if (!fusion) {
        throw UsageError(absl::StrCat("--patterns: no fusion named '", name,
                                      "' (passes/patterns.cc lists them)"));
      }
      fusions.push_back(*fusion);
    }
    if (!fusions.empty() && !passes_.empty()) {
      throw UsageError("--patterns prints matches instead of running passes: "
                       "give one of --patterns and --passes");
    }
    if (untyped_ && fusions.empty()) {
      throw UsageError("--untyped goes with --patterns");
    }
    return fusions;
  }

  // Each call in program order: what matches there, or "no match".
  void print_matches(const fx::GraphModule& module,
                     const std::vector<fx::Fusion>& fusions) const {
    fx::PatternOptions options;
    options.typed = !untyped_;
    for (fx::Node* n : module->graph().nodes()) {
      if (!n->is_call()) continue;
      if (auto match = fx::match_fusion(*module, *n, fusions, options)) {
        std::cout << fx::to_string(*match);
      } else {
        std::cout << "%" << n->name() << ": no match\n";
      }
    }
  }

  std::string passes_;
  std::string print_ = "graph";
  std::string patterns_;
  bool untyped_ = false;
};

}  // namespace

std::unique_ptr<Command> make_opt() { return std::make_unique<Opt>(); }

}  // namespace cli
