// fx passes: the passes --passes takes, with what each does.
#include <iostream>

#include "passes/registry.h"
#include "tools/cli/commands.h"

namespace cli {
namespace {

class Passes : public Command {
 public:
  Passes() : Command("passes", {}, "list the passes --passes takes") {}

 private:
  int run(const std::vector<std::string>&) override {
    for (const fx::PassInfo& info : fx::registered_passes()) {
      std::cout << info.name << "\n    " << info.description << "\n";
    }
    return 0;
  }
};

}  // namespace

std::unique_ptr<Command> make_passes() { return std::make_unique<Passes>(); }

}  // namespace cli
