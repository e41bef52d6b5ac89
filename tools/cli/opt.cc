// fx opt FILE.ir: a graph written as text (the textual IR, fx/parser.h)
// read, passes run on it through fx::PassManager, and the result printed,
// as mlir-opt does for MLIR. Pass tests are .ir files run through it
// (tools/ir_test.cc); their get_attr nodes get tensors made from their
// types (passes/typed_attributes.h).
#include <fstream>
#include <iostream>
#include <sstream>

#include "fx/fx.h"
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
  }

 private:
  int run(const std::vector<std::string>& args) override {
    check_print(print_);
    check_passes(passes_);
    const std::string& path = args[0];
    const std::string text = read_text(path);
    fx::GraphModule module{nullptr};
    try {
      module = fx::parse_graph_module(text);
    } catch (const fx::GraphError& e) {
      throw fx::GraphError(path + ": " + e.what());
    }
    PrintModuleOptions options;
    options.init_steps = true;
    print_module(run_passes(module, passes_).module, print_, options);
    return 0;
  }

  std::string passes_;
  std::string print_ = "graph";
};

}  // namespace

std::unique_ptr<Command> make_opt() { return std::make_unique<Opt>(); }

}  // namespace cli
