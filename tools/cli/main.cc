// fx: the command-line tool. `fx help` lists the commands, `fx COMMAND
// --help` the flags each takes:
//
//   bazel run //tools:fx -- demo
//   bazel run //tools:fx -- trace resnet50 --passes=fuse_conv_bn,eliminate_dead_code
//       --before --print=graph,code --dot=/tmp/resnet50.svg --cost
//       --save=/tmp/resnet50.fx
//   bazel run //tools:fx -- opt testdata/ir/passes/fuse_conv_bn.ir
//       --passes=fuse_conv_bn,eliminate_dead_code
//       (relative paths are the caller's: `bazel run` starts it elsewhere)
//   bazel run //tools:fx -- quantize resnet18 --calibrate=random:8 --report
//
// Each command is a file of its own (commands.h). Errors are printed here,
// one way: `fx COMMAND: what was wrong and what to do` on stderr, exit
// status 2 when the command line does not fit the command, 1 when the
// command failed.
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <c10/util/Exception.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tools/cli/commands.h"

namespace cli {
namespace {

std::vector<std::unique_ptr<Command>> all_commands() {
  std::vector<std::unique_ptr<Command>> commands;
  for (auto make : {make_demo, make_zoo, make_passes, make_trace, make_opt,
                    make_quantize, make_branches, make_pipeline_split,
                    make_pipeline_serve, make_pipeline_run}) {
    commands.push_back(make());
  }
  return commands;
}

std::string usage(const std::vector<std::unique_ptr<Command>>& commands) {
  std::string out = "fx: capture and transform LibTorch programs.\n\n";
  for (const auto& command : commands) {
    absl::StrAppend(&out, "  ", command->synopsis(), "\n",
                    wrap(command->summary(), 6));
  }
  absl::StrAppend(
      &out,
      "\n", wrap("`fx help COMMAND` or `fx COMMAND --help` says what a "
                 "command's arguments are and lists the flags it takes. Exit "
                 "status: 0 done, 1 the command failed, 2 the command line "
                 "does not fit the command.",
                 0));
  return out;
}

// The command `args` names ("trace", "pipeline split") and how many words
// its name took; null if none.
Command* find_command(const std::vector<std::unique_ptr<Command>>& commands,
                      const std::vector<std::string>& args, size_t* words) {
  for (size_t n : {2, 1}) {
    if (args.size() < n) continue;
    std::vector<std::string> name(args.begin(), args.begin() + n);
    for (const auto& command : commands) {
      if (command->name() == absl::StrJoin(name, " ")) {
        *words = n;
        return command.get();
      }
    }
  }
  return nullptr;
}

int main(const std::vector<std::string>& args) {
  const std::vector<std::unique_ptr<Command>> commands = all_commands();
  if (args.empty()) {
    std::cerr << usage(commands);
    return 2;
  }
  if (args[0] == "help" || args[0] == "--help" || args[0] == "-h") {
    std::vector<std::string> rest(args.begin() + 1, args.end());
    size_t words = 0;
    Command* command = find_command(commands, rest, &words);
    if (rest.empty() || (command != nullptr && words == rest.size())) {
      std::cout << (command != nullptr ? command->help() : usage(commands));
      return 0;
    }
    std::cerr << "fx help: no command '" << absl::StrJoin(rest, " ")
              << "'\n\n" << usage(commands);
    return 2;
  }
  size_t words = 0;
  Command* command = find_command(commands, args, &words);
  if (command == nullptr) {
    // `fx pipeline` alone, or with a word that is none of its own.
    std::vector<std::string> second_words;
    for (const auto& c : commands) {
      if (c->name().rfind(args[0] + " ", 0) == 0) {
        second_words.push_back(c->name().substr(args[0].size() + 1));
      }
    }
    if (!second_words.empty()) {
      std::cerr << "fx " << args[0] << ": give one of "
                << absl::StrJoin(second_words, ", ")
                << (args.size() > 1 ? ", not '" + args[1] + "'" : "")
                << "\n\n";
    } else {
      std::cerr << "fx: no command '" << args[0] << "'\n\n";
    }
    std::cerr << usage(commands);
    return 2;
  }
  const std::string prefix = "fx " + command->name() + ": ";
  try {
    return command->main(
        std::vector<std::string>(args.begin() + words, args.end()));
  } catch (const UsageError& e) {
    std::cerr << prefix << e.what() << "\n(`fx " << command->name()
              << " --help` lists what it takes)\n";
    return 2;
  } catch (const c10::Error& e) {
    std::cerr << prefix << e.what_without_backtrace() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << prefix << e.what() << "\n";
    return 1;
  }
}

}  // namespace
}  // namespace cli

int main(int argc, char** argv) {
  // `bazel run` starts the tool in its runfiles: relative paths are the
  // caller's.
  if (const char* dir = std::getenv("BUILD_WORKING_DIRECTORY")) {
    if (::chdir(dir) != 0) {
      std::cerr << "fx: cannot change to " << dir << "\n";
      return 1;
    }
  }
  return cli::main(std::vector<std::string>(argv + 1, argv + argc));
}
