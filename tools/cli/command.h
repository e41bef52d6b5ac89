// A command of the fx tool and the flags it takes.
//
// Each command (tools/cli/<name>.cc) is a Command whose constructor declares
// its flags, each bound to a member of its own, and whose run() gets the
// positional arguments once they are parsed:
//
//   class Opt : public Command {
//    public:
//     Opt() : Command("opt", {"FILE.ir"}, "run passes on a graph") {
//       flags().add("passes", &passes_, "passes to run, comma-separated");
//     }
//    private:
//     int run(const std::vector<std::string>& args) override;  // args[0]
//     std::string passes_;  // the default until parsed
//   };
//
// A flag exists only for the commands that declare it: `fx zoo
// --passes=fuse_conv_bn` is an error naming the flags zoo takes (none).
// Errors go through exceptions to main (tools/cli/main.cc), which prints
// them as `fx COMMAND: message` on stderr and exits with 2 for a UsageError
// (the command line does not fit the command: see `fx COMMAND --help`) and
// 1 for any other failure.
#pragma once

#include <functional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/flags/marshalling.h"
#include "absl/strings/string_view.h"

namespace cli {

// The command line does not fit the command: an unknown flag, a value that
// does not parse, a missing argument or flag.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The flags of one command, each bound to a variable that holds its default
// until parse() sets it. Values are read with abseil's flag parsers
// (absl::ParseFlag): bool, int64_t, double, std::string and
// std::vector<std::string> (comma-separated).
class Flags {
 public:
  template <typename T>
  void add(std::string name, T* value, std::string help) {
    static_assert(std::is_same_v<T, bool> || std::is_same_v<T, int64_t> ||
                      std::is_same_v<T, double> ||
                      std::is_same_v<T, std::string> ||
                      std::is_same_v<T, std::vector<std::string>>,
                  "a flag is a bool, int64_t, double, string or list of "
                  "strings");
    add_flag(Flag{std::move(name), std::move(help), absl::UnparseFlag(*value),
                  std::is_same_v<T, bool>,
                  [value](absl::string_view text, std::string* error) {
                    return absl::ParseFlag(text, value, error);
                  }});
  }

  // Sets the flags `args` names and returns the other arguments, in order.
  // A flag is `--name=value` or `--name value`, a bool also `--name`
  // (true); `--` ends the flags. Throws UsageError for a flag this command
  // does not take (naming those it takes), one given twice, or a value that
  // does not parse.
  std::vector<std::string> parse(const std::vector<std::string>& args) const;

  // One entry per flag: `--name=DEFAULT` and its help, indented.
  std::string help() const;
  std::vector<std::string> names() const;

 private:
  struct Flag {
    std::string name;
    std::string help;
    std::string default_value;
    bool is_bool;
    std::function<bool(absl::string_view, std::string*)> set;
  };
  void add_flag(Flag flag);
  const Flag* find(absl::string_view name) const;

  std::vector<Flag> flags_;
};

// `text` wrapped at 78 columns, each line indented by `indent` spaces.
std::string wrap(absl::string_view text, size_t indent);

class Command {
 public:
  // `name` as typed ("trace", "pipeline split"), the positional arguments'
  // names ("MODEL"), a one-line summary for `fx help` and what else
  // `fx NAME --help` says before the flags.
  Command(std::string name, std::vector<std::string> arguments,
          std::string summary, std::string details = "");
  virtual ~Command();
  Command(const Command&) = delete;
  Command& operator=(const Command&) = delete;

  const std::string& name() const { return name_; }
  const std::string& summary() const { return summary_; }
  // "fx trace MODEL [flags]".
  std::string synopsis() const;
  // The synopsis, the summary, the details and the flags.
  std::string help() const;

  // Parses `args` (what follows the command's name), checks the number of
  // positional arguments and runs the command. Returns its exit status;
  // throws UsageError, or whatever run() throws.
  int main(const std::vector<std::string>& args);

 protected:
  Flags& flags() { return flags_; }
  // Runs with the flags set, on exactly as many arguments as the
  // constructor named.
  virtual int run(const std::vector<std::string>& args) = 0;

 private:
  std::string name_;
  std::vector<std::string> arguments_;
  std::string summary_;
  std::string details_;
  Flags flags_;
};

}  // namespace cli
