#include "testdata/pass_golden.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <ATen/ops/rand.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/zeros.h>
#include <ATen/core/Generator.h>
#include <ATen/CPUGeneratorImpl.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "fx/errors.h"
#include "fx/graph_module.h"
#include "fx/parser.h"
#include "passes/pass_manager.h"

namespace fx {
namespace golden {
namespace {

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw GraphError("golden: cannot read " + path);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// A tensor for get_attr `node`, made from its type: seeded by position so
// that values do not depend on other cases.
at::Tensor tensor_for(const Node& node, uint64_t seed) {
  const TensorMeta* meta = node.meta().get(kTensorMeta);
  if (meta == nullptr) {
    throw GraphError(absl::StrCat(
        "golden: get_attr %", node.name(), " has no type: write it as ",
        "%", node.name(), " : f32[3, 3] = get_attr[...] so that the case "
        "can make its tensor"));
  }
  at::Generator generator = at::detail::createCPUGenerator(seed);
  const at::TensorOptions options = at::TensorOptions().dtype(meta->dtype);
  if (!c10::isFloatingType(meta->dtype)) return at::zeros(meta->sizes, options);
  const std::string& target = node.target().to_string();
  if (absl::EndsWith(target, "running_var")) {
    return at::rand(meta->sizes, generator, options) + 0.5;
  }
  return at::randn(meta->sizes, generator, options);
}

bool is_buffer(const std::string& path) {
  return absl::StrContains(path, "running_") ||
         absl::StrContains(path, "num_batches_tracked") ||
         absl::StrContains(path, "_tensor_constant");
}

}  // namespace

std::vector<Case> list_cases(const std::string& directory) {
  std::vector<Case> cases;
  for (const auto& entry : std::filesystem::directory_iterator(directory)) {
    const std::filesystem::path& path = entry.path();
    if (path.extension() != ".ir") continue;
    std::filesystem::path out = path;
    out.replace_extension(".out");
    cases.push_back({path.stem().string(), path.string(), out.string()});
  }
  std::sort(cases.begin(), cases.end(),
            [](const Case& a, const Case& b) { return a.name < b.name; });
  return cases;
}

std::string run_case(const Case& c) {
  const std::string text = read(c.ir_path);
  // The header: comment lines, one of them "# passes: a, b".
  std::vector<std::string> passes;
  std::string graph_text;
  bool typed = false;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (graph_text.empty() && absl::StartsWith(line, "#")) {
      absl::string_view rest = absl::StripAsciiWhitespace(line.substr(1));
      if (absl::ConsumePrefix(&rest, "passes:")) {
        for (absl::string_view name : absl::StrSplit(rest, ',')) {
          name = absl::StripAsciiWhitespace(name);
          if (!name.empty()) passes.emplace_back(name);
        }
      }
      continue;
    }
    absl::StrAppend(&graph_text, line, "\n");
  }
  if (passes.empty()) {
    throw GraphError(absl::StrCat("golden: ", c.ir_path,
                                  " names no passes: add a line "
                                  "'# passes: cse, eliminate_dead_code'"));
  }
  std::unique_ptr<Graph> graph = parse_graph(graph_text);
  Attributes attributes;
  uint64_t seed = 0;
  for (const Node* n : graph->nodes()) {
    if (n->meta().get(kTensorMeta) != nullptr) typed = true;
    if (n->op() != Opcode::kGetAttr) continue;
    const std::string path = n->target().to_string();
    if (attributes.parameters.count(path) || attributes.buffers.count(path)) {
      continue;
    }
    (is_buffer(path) ? attributes.buffers : attributes.parameters)[path] =
        tensor_for(*n, seed++);
  }
  GraphModule gm(std::move(graph), std::move(attributes));
  PassManager manager;
  for (const std::string& name : passes) manager.add(name);
  GraphModule result = manager.run(gm).module;

  PrintOptions options;
  options.tensor_meta = typed;
  std::string out = result->graph().to_string(options);
  const auto& steps = result->init_steps();
  for (size_t i = 0; i < steps.size(); ++i) {
    absl::StrAppend(&out, "\n# init step ", i, " -> ",
                    absl::StrJoin(steps[i].outputs, ", "), "\n",
                    steps[i].graph->to_string(options));
  }
  return out;
}

}  // namespace golden
}  // namespace fx
