// fx passes: the passes --passes takes, with what each does and its
// options, then the registered pipelines as the text --passes takes.
#include <iostream>

#include "passes/pass_pipeline.h"
#include "passes/registry.h"
#include "tools/cli/commands.h"

namespace cli {
namespace {

class Passes : public Command {
 public:
  Passes()
      : Command("passes", {},
                "list the passes --passes takes, their options, and the "
                "pipelines") {}

 private:
  int run(const std::vector<std::string>&) override {
    for (const fx::PassInfo& info : fx::registered_passes()) {
      std::cout << info.name << "\n    " << info.description << "\n";
      for (const auto& [option, doc] : info.options) {
        std::cout << "    {" << option << "=...}  " << doc << "\n";
      }
    }
    const std::vector<fx::PassPipeline> pipelines = fx::registered_pass_pipelines();
    if (!pipelines.empty()) std::cout << "\npipelines (--passes=STEPS):\n";
    for (const fx::PassPipeline& pipeline : pipelines) {
      std::cout << pipeline.name << "\n    " << pipeline.description
                << "\n    " << fx::to_string(pipeline.steps) << "\n";
    }
    return 0;
  }
};

}  // namespace

std::unique_ptr<Command> make_passes() { return std::make_unique<Passes>(); }

}  // namespace cli
