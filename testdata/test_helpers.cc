#include "testdata/test_helpers.h"

namespace testdata {

size_t count_calls(const fx::Graph& graph, const std::string& target) {
  size_t n = 0;
  for (const fx::Node* node : graph.find_nodes(fx::Opcode::kCallFunction)) {
    n += node->target().to_string() == target;
  }
  return n;
}

size_t count_calls(const fx::GraphModule& module, const std::string& target) {
  return count_calls(module->graph(), target);
}

double relative_error(const at::Tensor& got, const at::Tensor& want) {
  return (got - want).abs().max().item<double>() /
         want.abs().max().item<double>();
}

}  // namespace testdata
