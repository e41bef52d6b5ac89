#include "passes/typed_attributes.h"

#include <map>
#include <string>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>
#include <ATen/ops/rand.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/zeros.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "fx/io/parser.h"
#include "fx/ir/errors.h"

namespace fx {
namespace {

at::Tensor tensor_for(const std::string& target, const TensorMeta& meta,
                      uint64_t seed) {
  at::Generator generator = at::detail::createCPUGenerator(seed);
  const at::TensorOptions options = at::TensorOptions().dtype(meta.dtype);
  if (!c10::isFloatingType(meta.dtype)) return at::zeros(meta.sizes, options);
  if (absl::EndsWith(target, "running_var")) {
    return at::rand(meta.sizes, generator, options) + 0.5;
  }
  return at::randn(meta.sizes, generator, options);
}

bool is_buffer(const std::string& path) {
  return absl::StrContains(path, "running_") ||
         absl::StrContains(path, "num_batches_tracked") ||
         absl::StrContains(path, "_tensor_constant");
}

}  // namespace

Attributes typed_attributes(const Graph& graph) {
  // Each target's first node, and the first of its nodes with a type, in
  // program order.
  std::vector<std::string> targets;
  std::map<std::string, std::pair<const Node*, const TensorMeta*>> nodes;
  // The bodies of control flow read the module's tensors too; a get_attr
  // of a body reads no tensor.
  for (const Graph* g : graph.all_graphs()) {
    for (const Node* n : g->nodes()) {
      if (n->op() != Opcode::kGetAttr || Graph::reads_subgraph(*n)) continue;
      const std::string target = n->target().to_string();
      auto [it, added] = nodes.try_emplace(target, n, nullptr);
      if (added) targets.push_back(target);
      if (it->second.second == nullptr) {
        it->second.second = n->meta().get(kTensorMeta);
      }
    }
  }
  Attributes attributes;
  uint64_t seed = 0;
  for (const std::string& target : targets) {
    const auto& [node, meta] = nodes.at(target);
    if (meta == nullptr) {
      throw GraphError(absl::StrCat(
          "get_attr %", node->name(), " reads ", target,
          " but has no type to make its tensor from: write one, as in %",
          node->name(), " : f32[3, 3] = get_attr[target=", target, "]"));
    }
    (is_buffer(target) ? attributes.buffers : attributes.parameters)[target] =
        tensor_for(target, *meta, seed++);
  }
  return attributes;
}

GraphModule parse_graph_module(std::string_view text) {
  std::unique_ptr<Graph> graph = parse_graph(text);
  Attributes attributes = typed_attributes(*graph);
  return GraphModule(std::move(graph), std::move(attributes));
}

}  // namespace fx
