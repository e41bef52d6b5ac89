#include "passes/graph_drawer.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "fx/ir/errors.h"

extern char** environ;

namespace fx {
namespace {

// `text` escaped for a quoted DOT identifier.
std::string quote(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string tensor_meta_row(const Node& node) {
  if (const TensorMeta* m = node.meta().get(kTensorMeta)) {
    return m->to_string();
  }
  if (const auto* list = node.meta().get(kTensorMetaList)) {
    std::vector<std::string> parts;
    for (const TensorMeta& m : *list) parts.push_back(m.to_string());
    return absl::StrCat("(", absl::StrJoin(parts, ", "), ")");
  }
  return "";
}

// torch.fx's skip_node_names_in_args: the arguments that hold no node.
std::string args_row(const Node& node) {
  std::vector<std::string> parts;
  for (const Argument& a : node.args()) {
    if (!a.contains_node()) parts.push_back(a.to_string());
  }
  if (parts.empty()) return "";
  return absl::StrCat("args=(", absl::StrJoin(parts, ", "),
                      parts.size() == 1 ? ",)" : ")");
}

std::string kwargs_row(const Node& node) {
  std::vector<std::string> parts;
  for (const auto& [key, value] : node.kwargs()) {
    if (!value.contains_node()) {
      parts.push_back(absl::StrCat(key, ": ", value.to_string()));
    }
  }
  if (parts.empty()) return "";
  return absl::StrCat("kwargs={", absl::StrJoin(parts, ", "), "}");
}

std::string temp_dir() {
  const char* dir = std::getenv("TMPDIR");
  return dir != nullptr && *dir != '\0' ? dir : "/tmp";
}

// A new file in the temporary directory, removed when this goes out of
// scope.
class TempFile {
 public:
  explicit TempFile(const std::string& suffix) {
    std::string pattern = absl::StrCat(temp_dir(), "/fx_graph_XXXXXX", suffix);
    int fd = mkstemps(pattern.data(), static_cast<int>(suffix.size()));
    if (fd < 0) {
      throw GraphError(absl::StrCat("render_dot: cannot create a file in ",
                                    temp_dir(), ": ", std::strerror(errno)));
    }
    close(fd);
    path_ = std::move(pattern);
  }
  ~TempFile() { unlink(path_.c_str()); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The first executable `name` on PATH, or "".
std::string find_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  for (absl::string_view dir :
       absl::StrSplit(path != nullptr ? path : "", ':', absl::SkipEmpty())) {
    std::string candidate = absl::StrCat(dir, "/", name);
    struct stat st;
    if (stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
  }
  return "";
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream out;
  out << in.rdbuf();
  return out.str();
}

}  // namespace

const char* dot_fill_color(Opcode op) {
  switch (op) {
    case Opcode::kPlaceholder: return "AliceBlue";
    case Opcode::kGetAttr: return "LightGrey";
    case Opcode::kCallFunction: return "#CAFFE3";
    case Opcode::kCallModule: return "LemonChiffon1";
    case Opcode::kCallMethod: return "Thistle1";
    case Opcode::kOutput: return "PowderBlue";
  }
  return "White";
}

std::string escape_dot_record(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '\\':
      case '"':
      case '{':
      case '}':
      case '|':
      case '<':
      case '>':
        out += '\\';
        out += c;
        break;
      case '\n': out += "\\n"; break;
      default: out += c;
    }
  }
  return out;
}

std::string to_dot(const Graph& graph, const DotOptions& options) {
  absl::flat_hash_map<const Node*, const NodeCost*> costs;
  if (options.cost != nullptr) {
    for (const auto& [node, cost] : options.cost->nodes) costs[node] = &cost;
  }
  auto drawn = [&](const Node& n) {
    return options.get_attr || n.op() != Opcode::kGetAttr;
  };
  std::string out = absl::StrCat("digraph ", quote(options.name), " {\n");
  absl::StrAppend(&out,
                  "  rankdir=TB;\n"
                  "  node [shape=record, style=\"filled,rounded\", "
                  "fontname=\"Helvetica\", fontsize=10];\n");
  for (const Node* n : graph.nodes()) {
    if (!drawn(*n)) continue;
    std::vector<std::string> rows = {
        absl::StrCat("name=%", n->name()),
        absl::StrCat("op_code=", opcode_name(n->op())),
        absl::StrCat("target=", n->target().to_string())};
    if (options.args) {
      for (std::string row : {args_row(*n), kwargs_row(*n)}) {
        if (!row.empty()) rows.push_back(std::move(row));
      }
    }
    if (options.tensor_meta) {
      std::string row = tensor_meta_row(*n);
      if (!row.empty()) rows.push_back(std::move(row));
    }
    std::string style;
    auto it = costs.find(n);
    if (it != costs.end()) {
      const NodeCost& c = *it->second;
      if (!c.modelled) {
        rows.push_back("cost=unmodelled");
        style = ", style=\"filled,rounded,dashed\"";
      } else if (c.flops > 0 || c.bytes() > 0) {
        rows.push_back(absl::StrCat("flops=", format_quantity(c.flops, "FLOPs"),
                                    " (", format_quantity(c.macs, "MACs"),
                                    ")"));
        rows.push_back(absl::StrCat(
            "bytes=", format_quantity(c.bytes_read, "B"), " read, ",
            format_quantity(c.bytes_written, "B"), " written"));
      }
    }
    for (std::string& row : rows) row = escape_dot_record(row);
    absl::StrAppend(
        &out, "  ", quote(n->name()), " [label=\"{", absl::StrJoin(rows, "|"),
        "}\", fillcolor=", quote(dot_fill_color(n->op())), style, "];\n");
  }
  for (const Node* n : graph.nodes()) {
    if (!drawn(*n)) continue;
    for (const Node* user : n->users()) {
      absl::StrAppend(&out, "  ", quote(n->name()), " -> ", quote(user->name()),
                      ";\n");
    }
  }
  return out + "}\n";
}

void render_dot(const std::string& dot, const std::string& output_path) {
  std::string format;
  for (const char* f : {"svg", "png", "pdf"}) {
    if (absl::EndsWith(output_path, absl::StrCat(".", f))) format = f;
  }
  if (format.empty()) {
    throw GraphError(absl::StrCat("render_dot: cannot tell the format of '",
                                  output_path,
                                  "': name it .svg, .png or .pdf"));
  }
  const std::string program = find_on_path("dot");
  if (program.empty()) {
    const char* path = std::getenv("PATH");
    throw GraphError(absl::StrCat(
        "render_dot: Graphviz's `dot` was not found on PATH (",
        path != nullptr ? path : "",
        "): install graphviz (apt-get install "
        "graphviz), or save to_dot's text and render it elsewhere"));
  }
  TempFile input(".dot");
  TempFile errors(".txt");
  {
    std::ofstream file(input.path(), std::ios::binary);
    file << dot;
    if (!file.flush()) {
      throw GraphError(absl::StrCat("render_dot: cannot write ", input.path()));
    }
  }
  std::vector<std::string> argv_strings = {"dot", absl::StrCat("-T", format),
                                           "-o", output_path, input.path()};
  std::vector<char*> argv;
  for (std::string& s : argv_strings) argv.push_back(s.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null",
                                   O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO,
                                   errors.path().c_str(), O_WRONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  pid_t pid;
  const int spawn_error = posix_spawn(&pid, program.c_str(), &actions, nullptr,
                                      argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawn_error != 0) {
    throw GraphError(absl::StrCat("render_dot: cannot run ", program, ": ",
                                  std::strerror(spawn_error)));
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      throw GraphError(absl::StrCat("render_dot: waiting for ", program,
                                    " failed: ", std::strerror(errno)));
    }
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    const std::string how =
        WIFEXITED(status) ? absl::StrCat("exit status ", WEXITSTATUS(status))
                          : absl::StrCat("signal ", WTERMSIG(status));
    throw GraphError(absl::StrCat(
        "render_dot: ", program, " -T", format, " -o ", output_path,
        " failed (", how,
        "): ", absl::StripTrailingAsciiWhitespace(read_file(errors.path()))));
  }
}

}  // namespace fx
