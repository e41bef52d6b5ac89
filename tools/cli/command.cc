#include "tools/cli/command.h"

#include <algorithm>
#include <iostream>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace cli {

std::string wrap(absl::string_view text, size_t indent) {
  constexpr size_t kWidth = 78;
  const std::string margin(indent, ' ');
  std::string out;
  std::string line;
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    if (!line.empty() && indent + line.size() + 1 + word.size() > kWidth) {
      absl::StrAppend(&out, margin, line, "\n");
      line.clear();
    }
    absl::StrAppend(&line, line.empty() ? "" : " ", word);
  }
  if (!line.empty()) absl::StrAppend(&out, margin, line, "\n");
  return out;
}

void Flags::add_flag(Flag flag) {
  if (find(flag.name) != nullptr || flag.name == "help") {
    throw std::logic_error("flag --" + flag.name + " declared twice");
  }
  flags_.push_back(std::move(flag));
}

const Flags::Flag* Flags::find(absl::string_view name) const {
  for (const Flag& flag : flags_) {
    if (flag.name == name) return &flag;
  }
  return nullptr;
}

std::vector<std::string> Flags::names() const {
  std::vector<std::string> names;
  for (const Flag& flag : flags_) names.push_back("--" + flag.name);
  return names;
}

std::vector<std::string> Flags::parse(
    const std::vector<std::string>& args) const {
  std::vector<std::string> positional;
  std::set<std::string> seen;
  for (size_t i = 0; i < args.size(); ++i) {
    absl::string_view arg = args[i];
    if (arg == "--") {
      positional.insert(positional.end(), args.begin() + i + 1, args.end());
      break;
    }
    if (!absl::ConsumePrefix(&arg, "--")) {
      positional.emplace_back(arg);
      continue;
    }
    const size_t equals = arg.find('=');
    const std::string name(arg.substr(0, equals));
    const Flag* flag = find(name);
    if (flag == nullptr) {
      throw UsageError(
          flags_.empty()
              ? absl::StrCat("it takes no flags, not --", name)
              : absl::StrCat("it takes no flag --", name,
                             "; its flags are ", absl::StrJoin(names(), ", ")));
    }
    if (!seen.insert(name).second) {
      throw UsageError(absl::StrCat("--", name, " is given twice"));
    }
    std::string value;
    if (equals != absl::string_view::npos) {
      value = std::string(arg.substr(equals + 1));
    } else if (flag->is_bool) {
      value = "true";
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      throw UsageError(absl::StrCat("--", name, " needs a value (--", name,
                                    "=", flag->default_value.empty()
                                             ? "..."
                                             : flag->default_value,
                                    ")"));
    }
    std::string error;
    if (!flag->set(value, &error)) {
      throw UsageError(absl::StrCat("--", name, "=", value, ": ", error));
    }
  }
  return positional;
}

std::string Flags::help() const {
  std::string out;
  for (const Flag& flag : flags_) {
    absl::StrAppend(&out, "  --", flag.name, "=", flag.default_value, "\n",
                    wrap(flag.help, 6));
  }
  return out;
}

Command::Command(std::string name, std::vector<std::string> arguments,
                 std::string summary, std::string details)
    : name_(std::move(name)),
      arguments_(std::move(arguments)),
      summary_(std::move(summary)),
      details_(std::move(details)) {}

Command::~Command() = default;

std::string Command::synopsis() const {
  std::string out = "fx " + name_;
  for (const std::string& argument : arguments_) absl::StrAppend(&out, " ", argument);
  if (!flags_.names().empty()) absl::StrAppend(&out, " [flags]");
  return out;
}

std::string Command::help() const {
  std::string out = absl::StrCat(synopsis(), "\n\n", wrap(summary_, 0));
  if (!details_.empty()) absl::StrAppend(&out, "\n", wrap(details_, 0));
  if (!flags_.names().empty()) absl::StrAppend(&out, "\nflags:\n", flags_.help());
  return out;
}

int Command::main(const std::vector<std::string>& args) {
  for (const std::string& arg : args) {
    if (arg == "--") break;
    if (arg == "--help" || arg == "-h") {
      std::cout << help();
      return 0;
    }
  }
  std::vector<std::string> positional = flags_.parse(args);
  if (positional.size() != arguments_.size()) {
    throw UsageError(
        arguments_.empty()
            ? absl::StrCat("it takes no arguments, and is given '",
                           absl::StrJoin(positional, " "), "'")
        : positional.size() < arguments_.size()
            ? absl::StrCat("give ", absl::StrJoin(arguments_, " "), ": ",
                           synopsis())
            : absl::StrCat("it takes ", absl::StrJoin(arguments_, " "),
                           ", and is given '", absl::StrJoin(positional, " "),
                           "'"));
  }
  return run(positional);
}

}  // namespace cli
