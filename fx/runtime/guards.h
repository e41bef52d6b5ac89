// Input guards: checks that an input satisfies what a trace assumed.
//
// The tracer records an InputGuard (fx/ir/meta.h) on each placeholder; a
// GraphModule checks them before running, and generated C++ calls the same
// functions at the top of its forward, so both reject a bad input with the
// same fx::GuardError:
//
//   GraphModule input 0 ('x') has shape [1, 3, 32, 32] but the traced code
//   read the sizes of its example input [1, 3, 224, 224] (...); the graph was
//   traced for other inputs: trace the model again with an example input
//   like this one (fx::symbolic_trace)
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <c10/util/Optional.h>

#include "fx/ir/graph.h"
#include "fx/ir/meta.h"

namespace fx {

// The sizes the dynamic dimensions of one call's inputs took, by symbol,
// with the input that set each: a symbol bound by one input must hold in
// the others ("dimensions named T must be equal").
struct SymbolBindings {
  std::map<std::string, std::pair<int64_t, std::string>> values;
};

// Checks a tensor input: dtype, device, rank and (if given) sizes and
// strides.
void check_tensor_input(const at::Tensor& tensor, const std::string& name,
                        size_t index, c10::ScalarType dtype,
                        c10::Device device, int64_t dim,
                        c10::optional<c10::IntArrayRef> sizes,
                        c10::optional<c10::IntArrayRef> strides = c10::nullopt);

// Checks a tensor input with dynamic dimensions, as check_input does for
// its InputGuard: generated code's form (`dynamic` a static of the
// generated forward).
void check_dynamic_tensor_input(const at::Tensor& tensor,
                                const std::string& name, size_t index,
                                c10::ScalarType dtype, c10::Device device,
                                int64_t dim, bool check_sizes,
                                c10::IntArrayRef sizes,
                                c10::optional<c10::IntArrayRef> strides,
                                const std::vector<DynamicDim>& dynamic,
                                SymbolBindings* symbols);

// Checks the length of a list-of-tensors input (its elements are checked
// with check_tensor_input, named "x[0]", ...).
void check_list_input(const std::vector<at::Tensor>& list,
                      const std::string& name, size_t index, size_t length);

// Checks a non-tensor input against the value the trace baked in, given as
// the graph prints it ("3", "True", "'mean'").
void check_value_input(const c10::IValue& value, const std::string& name,
                       size_t index, const std::string& expected);

// Checks any input against its guard. With `symbols`, the sizes of dynamic
// dimensions are bound to their symbols and checked against what earlier
// inputs of the same call bound.
void check_input(const InputGuard& guard, const c10::IValue& value,
                 const std::string& name, size_t index,
                 SymbolBindings* symbols = nullptr);

// The symbols of the graph's dynamic dimensions (TraceOptions::dynamic), in
// order of first appearance; empty for a graph specialized to its shapes.
std::vector<std::string> dynamic_symbols(const Graph& graph);
// The dynamic dimensions of the graph's inputs, as their guards hold them.
std::vector<DynamicDim> dynamic_dims(const Graph& graph);
// Two further sizes of each symbol of `dims` besides the example's, within
// its bounds and multiples (a near size and a far one, so that a size read
// only through a division changes between them): where the tracer traces
// again, and ShapeProp runs again for symbolic sizes. Throws fx::TraceError
// when the bounds leave fewer than two.
std::vector<SymbolSizes> sample_sizes(const std::vector<DynamicDim>& dims,
                                      const SymbolSizes& example);
// Zero-filled inputs like `inputs` with the dynamic dimensions at `sizes`
// (memory format kept); not filled, for a tracer that reads only their
// metadata (no page of a large input is touched).
std::vector<c10::IValue> resized_inputs(const std::vector<c10::IValue>& inputs,
                                        const std::vector<DynamicDim>& dims,
                                        const SymbolSizes& sizes,
                                        bool filled = true);

// A comparison of sizes that held while tracing (`relation` is "==", "!=",
// "<", "<=", ">" or ">="): a TorchScript branch or assert on sizes, kept in
// the graph as a check instead of specializing it:
//
//   fx_guard::check_size(%T, 512, "<=", "%T <= 512 (TorchScript's aten::le
//   at model.py:30)")
//
// Whether `a relation b` holds; throws fx::GraphError for another relation.
bool size_relation_holds(int64_t a, int64_t b, const std::string& relation);
// "<module> has sizes the trace did not allow: <what> held while tracing,
// but not for <a> and <b>; ...".
std::string size_check_failure(const std::string& module,
                               const std::string& what,
                               const std::string& a, const std::string& b,
                               const std::string& then = "");

// The wording of the checks above, shared by the checks fx::to_torchscript
// writes into an exported forward. `who` names the input ("input 0 ('x')",
// "input 0 ('xs')[1]"); `actual` is its value as text, or "{}" where
// TorchScript formats it in at run time.
std::string describe_input(const std::string& name, size_t index);
std::string device_mismatch(const std::string& who, const std::string& actual,
                            c10::Device expected);
std::string rank_mismatch(const std::string& who, const std::string& actual,
                          int64_t expected);
std::string shape_mismatch(const std::string& who, const std::string& actual,
                           c10::IntArrayRef expected);
std::string stride_mismatch(const std::string& who, const std::string& actual,
                            c10::IntArrayRef expected);
std::string length_mismatch(const std::string& who, const std::string& actual,
                            size_t expected);
// "<who> has T = <actual> (dimension 1), outside what the trace allows:
// 1 <= T <= 512".
std::string outside_bounds(const std::string& who, const std::string& actual,
                           const DynamicDim& d);
// "<module> <what>; the graph was traced for other inputs: trace the model
// again with an example input like this one (fx::symbolic_trace)<then>".
std::string guard_failure_message(const std::string& module,
                                  const std::string& what,
                                  const std::string& then = "");

}  // namespace fx
