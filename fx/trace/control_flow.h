// fx::cond and fx::while_loop: torch.cond and torch.while_loop for C++
// forwards. Called eagerly they branch and loop; under the tracer they
// record one node whose bodies are traced into subgraphs
// (fx/ir/control_flow.h), so that a branch or a loop on tensor values
// stays in the graph instead of failing the trace.
//
//   at::Tensor forward(const at::Tensor& x) {
//     std::vector<at::Tensor> y = fx::cond(
//         x.sum() > 0,
//         [&](const std::vector<at::Tensor>& in) { return std::vector{fc1(in[0])}; },
//         [&](const std::vector<at::Tensor>& in) { return std::vector{in[0].neg()}; },
//         {x});
//     // Halve until small: the trip count depends on the data.
//     return fx::while_loop(
//         [](const std::vector<at::Tensor>& c) { return c[0].abs().max() > 1; },
//         [](const std::vector<at::Tensor>& c) { return std::vector{c[0] / 2}; },
//         {y[0]})[0];
//   }
//
// What the bodies may do, as in torch.cond and torch.while_loop:
//   - read their inputs, the module's parameters and buffers, and tensors
//     the enclosing forward computed (those become operands of the node, as
//     torch.cond lifts what a branch closes over);
//   - return tensors only: both branches of a cond as many, each of the
//     same dtype and sizes; a loop body its carried values' dtypes and
//     sizes; a loop's cond_fn a one-element tensor.
// Anything else is a TraceError naming what differs. A predicate that is no
// proxy (a tensor known while tracing) picks its branch then, as torch.cond
// specializes a constant predicate. Not yet: dynamic dimensions
// (TraceOptions::dynamic) with control flow (refused by name).
#pragma once

#include <functional>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "fx/trace/tracer.h"

namespace fx {

// torch.cond(pred, true_fn, false_fn, operands): true_fn(operands) if
// `pred` (a one-element tensor: bool, or a number, nonzero being true) is
// true, else false_fn(operands).
std::vector<at::Tensor> cond(const at::Tensor& pred, const BodyFunction& true_fn,
                             const BodyFunction& false_fn,
                             const std::vector<at::Tensor>& operands);

// torch.while_loop(cond_fn, body_fn, carried): carried = body_fn(carried)
// while cond_fn(carried) (a one-element tensor) is true; returns carried.
std::vector<at::Tensor> while_loop(
    const std::function<at::Tensor(const std::vector<at::Tensor>&)>& cond_fn,
    const BodyFunction& body_fn, std::vector<at::Tensor> carried);

// torch scan's combine_fn: (carried, one slice of each xs) -> (next
// carried values, ys of this step).
using ScanFunction =
    std::function<std::pair<std::vector<at::Tensor>, std::vector<at::Tensor>>(
        const std::vector<at::Tensor>& carried,
        const std::vector<at::Tensor>& x)>;
struct ScanResult {
  std::vector<at::Tensor> carried;  // after the last step
  std::vector<at::Tensor> ys;       // each step's, stacked along dimension 0
};

// torch.scan (torch._higher_order_ops.scan, dim=0): runs combine_fn on
// each slice along dimension 0 of the xs (all of one length, at least 1),
// carrying values from step to step (each keeping its dtype and sizes);
// returns the last carried values and the ys stacked. A recurrent cell:
//
//   fx::ScanResult r = fx::scan(
//       [&](const Tensors& h, const Tensors& x) {
//         at::Tensor next = torch::tanh(cell(torch::cat({x[0], h[0]}, 1)));
//         return std::pair{Tensors{next}, Tensors{next}};
//       },
//       {h0}, {x.transpose(0, 1)});   // steps along time
//   // r.carried[0]: the last state; r.ys[0]: every step's, [T, B, H]
ScanResult scan(const ScanFunction& combine_fn, std::vector<at::Tensor> init,
                const std::vector<at::Tensor>& xs);

// torch's map (torch._higher_order_ops.map): fn on each slice along
// dimension 0 of the xs, its outputs stacked along dimension 0.
std::vector<at::Tensor> map(const BodyFunction& fn,
                            const std::vector<at::Tensor>& xs);

}  // namespace fx
