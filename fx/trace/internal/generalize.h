// Dynamic dimensions (TraceOptions::dynamic): a program traced at several
// sizes of its dynamic dimensions, made into one graph that computes the
// sizes it uses from its inputs.
//
// C++ reads sizes as plain integers, so a trace sees `x.view({x.size(0),
// -1})` as a view to the example's batch size. Traced again at other sizes,
// the graphs agree node for node except for such literals; each literal that
// changed is fitted as a function of the dynamic sizes (affine with floor
// division, a product, a rounding or a sum: internal/size_fit.h), the fit
// checked on a trace it was not fitted to,
// and the literal replaced by nodes that compute it:
//
//   traced at B=2:  %view = aten::view(%x, [2, -1])
//   at B=3:         %view = aten::view(%x, [3, -1])
//   generalized:    %sym_size = sym_size(%x, 0)
//                   %view = aten::view(%x, [%sym_size, -1])
//
// A graph whose structure, floats, strings or constants change with a size
// is refused with the first node that differs.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/ivalue.h>

#include "fx/ir/graph.h"
#include "fx/ir/meta.h"
#include "fx/runtime/graph_module.h"

namespace fx::internal {

using fx::SymbolSizes;

// "B=2, T=8".
std::string describe(const SymbolSizes& sizes);

// Checks `dims` against the example inputs (an input that is a tensor, a
// dimension it has, bounds the example meets, one size per symbol) and
// returns the example's size of each symbol. Throws fx::TraceError.
SymbolSizes example_sizes(const std::vector<DynamicDim>& dims,
                          const std::vector<c10::IValue>& inputs);


// One trace: its graph, its constants and the sizes it was traced at.
struct Trace {
  std::unique_ptr<Graph> graph;
  Attributes attributes;
  SymbolSizes sizes;
  // Per data-dependent size (DynamicDim::data_dependent), the node whose
  // output has it, and which output (of a node returning several).
  struct Unbacked {
    Node* node = nullptr;
    size_t output = 0;
    int64_t max = std::numeric_limits<int64_t>::max();  // the operator's
  };
  std::map<std::string, Unbacked> unbacked;
};

// Rewrites `base.graph` to compute, from its inputs, every literal that
// `others` show changing with the dynamic sizes, and records `dims` in the
// placeholders' guards. `others` holds at least two traces. Throws
// fx::TraceError naming the first node that differs, or a literal no fit
// explains; `base` is then unchanged.
// `checks` are further traces (at the bounds) whose graphs must agree and
// whose literals every fit must explain; the metadata's symbolic sizes are
// fitted over `others` alone. A data-dependent size is read from its
// operator's output (%u0 = sym_size(%nonzero, 0)), the nodes computing
// with it are placed before their user, and a bound narrowed from its
// operator's (0 <= u0 <= numel) is checked where it is read
// (fx_guard::check_size).
//
//   %nonzero = aten::nonzero(%x)
//   %u0 = sym_size(%nonzero, 0)
//   %check_size = fx_guard::check_size(%u0, 1, ">=", "...")
//   %sym_mul = sym_mul(%u0, 2)
//   %view = aten::view(%nonzero, [%sym_mul])
void generalize(Trace& base, const std::vector<Trace>& others,
                const std::vector<DynamicDim>& dims,
                const std::vector<const Trace*>& checks = {});

// Sizes to trace at next: where two functions of the dynamic sizes that
// explain every trace so far give a literal different values
// (internal/size_fit.h); nothing when each literal has one fit, or none
// (generalize() then says which).
std::optional<SymbolSizes> undecided_sizes(const Trace& base,
                                           const std::vector<Trace>& others,
                                           const std::vector<DynamicDim>& dims);

// Throws the fx::TraceError generalize(base, others, dims, {check}) would:
// whether the traces agree (and `check`, if given, with what the others
// make of the base).
void check_generalizes(const Trace& base, const std::vector<Trace>& others,
                       const std::vector<DynamicDim>& dims,
                       const Trace* check = nullptr);

// Each node's metadata in `base` given its sizes and strides as functions
// of the symbols (TensorMeta::symbolic_sizes), fitted over the traces node
// for node; nothing when the traces differ in length. generalize() does
// this too.
void fit_metadata(Trace& base, const std::vector<Trace>& others,
                  const std::vector<DynamicDim>& dims);
void fit_metadata(const std::vector<Node*>& nodes,
                  const std::vector<std::vector<Node*>>& other_nodes,
                  const std::vector<SymbolSizes>& sizes,
                  const std::vector<DynamicDim>& dims);

// Records `dims` in the placeholders' guards of a graph that never read a
// size (nothing to generalize).
void mark_dynamic(Graph& graph, const std::vector<DynamicDim>& dims);

}  // namespace fx::internal
