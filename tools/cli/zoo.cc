// fx zoo: the bundled models' names, one a line.
#include <iostream>

#include "models/zoo.h"
#include "tools/cli/commands.h"

namespace cli {
namespace {

class Zoo : public Command {
 public:
  Zoo() : Command("zoo", {}, "list the bundled models") {}

 private:
  int run(const std::vector<std::string>&) override {
    for (const std::string& name : models::zoo_model_names()) {
      std::cout << name << "\n";
    }
    return 0;
  }
};

}  // namespace

std::unique_ptr<Command> make_zoo() { return std::make_unique<Zoo>(); }

}  // namespace cli
