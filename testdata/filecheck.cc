#include "testdata/filecheck.h"

#include <cstring>
#include <optional>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <vector>

namespace testdata {
namespace {

enum class Kind { kCheck, kNext, kSame, kNot };

struct Directive {
  Kind kind;
  std::string pattern;  // as written, trimmed
  std::regex regex;
  int line;  // 1-based, in `checks`
};

const char* name_of(Kind kind) {
  switch (kind) {
    case Kind::kCheck: return "CHECK";
    case Kind::kNext: return "CHECK-NEXT";
    case Kind::kSame: return "CHECK-SAME";
    case Kind::kNot: return "CHECK-NOT";
  }
  return "?";
}

std::string trim(std::string_view s) {
  size_t begin = s.find_first_not_of(" \t");
  if (begin == std::string_view::npos) return "";
  size_t end = s.find_last_not_of(" \t\r");
  return std::string(s.substr(begin, end - begin + 1));
}

// Literal text with {{regex}} parts, as one ECMAScript regex.
std::string to_regex(const std::string& pattern) {
  std::string out;
  size_t pos = 0;
  while (pos < pattern.size()) {
    size_t open = pattern.find("{{", pos);
    size_t literal_end = open == std::string::npos ? pattern.size() : open;
    for (size_t i = pos; i < literal_end; ++i) {
      const char c = pattern[i];
      if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) {
        out += '\\';
      }
      out += c;
    }
    if (open == std::string::npos) break;
    size_t close = pattern.find("}}", open + 2);
    if (close == std::string::npos) {
      throw std::invalid_argument("'{{' without '}}'");
    }
    out += "(?:" + pattern.substr(open + 2, close - open - 2) + ")";
    pos = close + 2;
  }
  return out;
}

std::vector<std::string> split_lines(std::string_view text) {
  std::vector<std::string> lines;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) {
      if (pos < text.size()) lines.emplace_back(text.substr(pos));
      break;
    }
    lines.emplace_back(text.substr(pos, end - pos));
    pos = end + 1;
  }
  return lines;
}

struct Position {
  size_t line = 0;
  size_t column = 0;
};

struct Match {
  Position begin;
  Position end;
};

// The first match of `regex` in lines [from.line, to.line), starting at
// from.column on the first line and ending by to.column on the last.
std::optional<Match> find(const std::vector<std::string>& lines,
                          const std::regex& regex, Position from,
                          Position to) {
  for (size_t l = from.line; l < lines.size() && l <= to.line; ++l) {
    const size_t start = l == from.line ? from.column : 0;
    if (start > lines[l].size()) continue;
    const std::string& line = lines[l];
    std::smatch m;
    auto begin = line.begin() + static_cast<std::ptrdiff_t>(start);
    if (!std::regex_search(begin, line.end(), m, regex)) continue;
    const size_t column = start + static_cast<size_t>(m.position(0));
    const size_t end_column = column + static_cast<size_t>(m.length(0));
    if (l == to.line && end_column > to.column) continue;
    return Match{{l, column}, {l, end_column}};
  }
  return std::nullopt;
}

std::string context(const std::vector<std::string>& lines, size_t line) {
  std::ostringstream out;
  const size_t first = line >= 2 ? line - 2 : 0;
  for (size_t l = first; l < lines.size() && l < line + 3; ++l) {
    out << (l == line ? "  > " : "    ") << lines[l] << "\n";
  }
  return out.str();
}

}  // namespace

FileCheckResult filecheck(std::string_view checks, std::string_view text) {
  FileCheckResult result;
  std::vector<Directive> directives;
  const std::vector<std::string> check_lines = split_lines(checks);
  for (size_t i = 0; i < check_lines.size(); ++i) {
    const std::string& line = check_lines[i];
    static const std::pair<const char*, Kind> kPrefixes[] = {
        {"CHECK-NEXT:", Kind::kNext},
        {"CHECK-SAME:", Kind::kSame},
        {"CHECK-NOT:", Kind::kNot},
        {"CHECK:", Kind::kCheck},
    };
    for (const auto& [prefix, kind] : kPrefixes) {
      size_t at = line.find(prefix);
      if (at == std::string::npos) continue;
      Directive d{kind, trim(std::string_view(line).substr(at + std::strlen(prefix))),
                  std::regex(), static_cast<int>(i + 1)};
      try {
        d.regex = std::regex(to_regex(d.pattern));
      } catch (const std::exception& e) {
        result.message = "line " + std::to_string(d.line) + ": " +
                         name_of(kind) + ": cannot read the pattern '" +
                         d.pattern + "': " + e.what();
        return result;
      }
      if (d.pattern.empty()) {
        result.message = "line " + std::to_string(d.line) + ": " +
                         name_of(kind) + " has an empty pattern";
        return result;
      }
      directives.push_back(std::move(d));
      break;
    }
  }
  if (directives.empty()) {
    result.message = "no CHECK directive in the checks";
    return result;
  }
  if (directives[0].kind == Kind::kNext || directives[0].kind == Kind::kSame) {
    result.message = std::string(name_of(directives[0].kind)) +
                     " on line " + std::to_string(directives[0].line) +
                     " has no match before it to follow";
    return result;
  }

  const std::vector<std::string> lines = split_lines(text);
  const Position end_of_text{lines.empty() ? 0 : lines.size() - 1,
                             lines.empty() ? 0 : lines.back().size()};
  Position cursor;                  // where the last match ended
  std::optional<Match> last;        // the last positive match
  std::vector<const Directive*> nots;  // CHECK-NOTs waiting for a bound
  auto fail = [&](const Directive& d, const std::string& what, size_t line) {
    result.message = "checks line " + std::to_string(d.line) + ": " +
                     name_of(d.kind) + ": " + d.pattern + "\n" + what +
                     "\nin the text near line " + std::to_string(line + 1) +
                     ":\n" + context(lines, line);
    return result;
  };
  // Checks that no pending CHECK-NOT matches between `from` and `to`.
  auto check_nots = [&](Position from, Position to) -> bool {
    for (const Directive* d : nots) {
      if (auto m = find(lines, d->regex, from, to)) {
        fail(*d, "found where it must not be", m->begin.line);
        return false;
      }
    }
    nots.clear();
    return true;
  };

  for (const Directive& d : directives) {
    if (d.kind == Kind::kNot) {
      nots.push_back(&d);
      continue;
    }
    std::optional<Match> m;
    switch (d.kind) {
      case Kind::kCheck:
        m = find(lines, d.regex, cursor, end_of_text);
        if (!m) return fail(d, "not found after the last match", cursor.line);
        break;
      case Kind::kNext: {
        const size_t next = last->begin.line + 1;
        if (next >= lines.size()) {
          return fail(d, "no line follows the last match", last->begin.line);
        }
        m = find(lines, d.regex, Position{next, 0},
                 Position{next, lines[next].size()});
        if (!m) return fail(d, "not found on the next line", next);
        break;
      }
      case Kind::kSame:
        m = find(lines, d.regex, cursor,
                 Position{cursor.line, lines.empty() ? 0 : lines[cursor.line].size()});
        if (!m) return fail(d, "not found on the same line", cursor.line);
        break;
      case Kind::kNot:
        break;
    }
    if (!check_nots(cursor, m->begin)) return result;
    last = m;
    cursor = m->end;
  }
  if (!check_nots(cursor, end_of_text)) return result;
  result.ok = true;
  return result;
}

}  // namespace testdata
