#include "passes/pass_pipeline.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "fx/ir/errors.h"
#include "passes/internal/named_table.h"

namespace fx {

std::string to_string(const std::vector<PassStep>& steps) {
  std::string out;
  for (const PassStep& step : steps) {
    if (!out.empty()) out += ",";
    out += step.pass;
    if (step.options.empty()) continue;
    out += "{";
    for (size_t i = 0; i < step.options.size(); ++i) {
      if (i > 0) out += ",";
      absl::StrAppend(&out, step.options[i].first, "=",
                      step.options[i].second);
    }
    out += "}";
  }
  return out;
}

std::ostream& operator<<(std::ostream& os, const PassStep& step) {
  return os << to_string(std::vector<PassStep>{step});
}

namespace {

std::string stripped(const std::string& text, size_t begin, size_t end) {
  return std::string(absl::StripAsciiWhitespace(
      absl::string_view(text).substr(begin, end - begin)));
}

GraphError malformed(const std::string& text, const std::string& what) {
  return GraphError(absl::StrCat("pipeline '", text, "': ", what,
                                 " (write pass,pass{option=value,...},...)"));
}

}  // namespace

std::vector<PassStep> parse_pass_pipeline(const std::string& text) {
  std::vector<PassStep> steps;
  size_t i = 0;
  while (i < text.size()) {
    const size_t name_end = text.find_first_of(",{}=", i);
    const size_t stop = name_end == std::string::npos ? text.size() : name_end;
    PassStep step{stripped(text, i, stop), {}};
    if (stop < text.size() && (text[stop] == '}' || text[stop] == '=')) {
      throw malformed(text, absl::StrCat("unexpected '", text.substr(stop, 1),
                                         "' after '", step.pass, "'"));
    }
    i = stop;
    if (i < text.size() && text[i] == '{') {
      const size_t close = text.find('}', i);
      if (close == std::string::npos) {
        throw malformed(text, absl::StrCat("the options of '", step.pass,
                                           "' have no closing '}'"));
      }
      size_t j = i + 1;
      while (j < close) {
        size_t comma = text.find(',', j);
        if (comma == std::string::npos || comma > close) comma = close;
        const size_t eq = text.find('=', j);
        if (eq == std::string::npos || eq > comma) {
          throw malformed(text, absl::StrCat("option '",
                                             stripped(text, j, comma),
                                             "' of '", step.pass,
                                             "' has no value"));
        }
        std::string option = stripped(text, j, eq);
        std::string value = stripped(text, eq + 1, comma);
        if (option.empty() || value.empty()) {
          throw malformed(text, absl::StrCat("an option of '", step.pass,
                                             "' has an empty name or value"));
        }
        step.options.emplace_back(std::move(option), std::move(value));
        j = comma + 1;
      }
      i = close + 1;
      const size_t next = text.find_first_not_of(" \t\n", i);
      if (next != std::string::npos && text[next] != ',') {
        throw malformed(text, absl::StrCat("'", step.pass,
                                           "{...}' is followed by '",
                                           text.substr(next, 1),
                                           "', not a comma"));
      }
      i = next == std::string::npos ? text.size() : next;
    }
    if (step.pass.empty()) {
      if (!step.options.empty()) throw malformed(text, "options without a pass");
      // Empty entries ("a,,b", a trailing comma) are skipped.
    } else {
      steps.push_back(std::move(step));
    }
    if (i < text.size()) ++i;  // the comma
  }
  return steps;
}

namespace {

internal::NamedTable<PassPipeline>& pipeline_table() {
  static auto* t = new internal::NamedTable<PassPipeline>("pipeline", {});
  return *t;
}

}  // namespace

std::vector<PassPipeline> registered_pass_pipelines() {
  return pipeline_table().entries();
}

void register_pass_pipeline(PassPipeline pipeline) {
  pipeline_table().add(std::move(pipeline));
}

std::optional<PassPipeline> pass_pipeline_named(const std::string& name) {
  for (PassPipeline& pipeline : registered_pass_pipelines()) {
    if (pipeline.name == name) return std::move(pipeline);
  }
  return std::nullopt;
}

}  // namespace fx
