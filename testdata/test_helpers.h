// What the tests share: how many calls of an operator a graph holds, how
// far a tensor is from the one it should equal, a free function traced.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "fx/fx.h"

namespace testdata {

// The call_function nodes of `graph` whose target prints as `target`
// ("aten::relu", "aten::add.Tensor", "quantized::conv2d.new", a wrapped
// function's name).
size_t count_calls(const fx::Graph& graph, const std::string& target);
size_t count_calls(const fx::GraphModule& module, const std::string& target);

// The largest difference between `got` and `want`, relative to `want`'s
// largest magnitude.
double relative_error(const at::Tensor& got, const at::Tensor& want);

// A free function (or lambda) of tensors traced into a GraphModule.
template <typename F>
fx::GraphModule trace_function(F f, std::vector<c10::IValue> inputs) {
  return fx::symbolic_trace(nullptr, fx::box_function(f), inputs);
}

}  // namespace testdata
