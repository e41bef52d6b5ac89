// Argument normalization (torch.fx's NormalizeArgs), and its inverse.
//
// normalize_args rewrites every call_function of an operator so that it
// passes all its arguments as kwargs named by the operator's schema, in
// schema order, with the defaults written out (as torch.fx 1.13's
// normalize_function does: it binds, then applies the defaults). Passes that
// read arguments by name then need not know where a caller put them:
//
//   before:  %conv2d = call_function[target=aten::conv2d](args = (%x, %w, None, [2, 2], [3, 3]), kwargs = {})
//   after:   %conv2d = call_function[target=aten::conv2d](args = (), kwargs = {input: %x, weight: %w, bias: None, stride: [2, 2], padding: [3, 3], dilation: [1, 1], groups: 1})
//
// denormalize_args writes them back the way the tracer records calls
// (fx::split_arguments): positional up to the last argument that differs
// from its default, keyword-only ones as kwargs when not default. So
// normalize_args then denormalize_args gives back a traced graph exactly.
//
//   before:  %add = call_function[target=aten::add.Tensor](args = (), kwargs = {self: %x, other: %y, alpha: 1})
//   after:   %add = call_function[target=aten::add.Tensor](args = (%x, %y), kwargs = {})
//
// Only the arguments' places change, never their values, so neither pass
// changes what the graph computes. Both leave alone what has no schema of
// its own: call_function of registered functions (getitem, fx::wrap) and
// call_method nodes, whose overload is chosen from the arguments' kinds when
// the graph is compiled (fx::resolve_method reads args[0] as the tensor);
// use them on call_function graphs, which is what the tracer makes.
#pragma once

#include "passes/pass.h"

namespace fx {

struct NormalizeOptions {
  // Also write out the arguments a node leaves to their defaults. Without
  // it, a node gets kwargs for the arguments it gives only.
  bool fill_defaults = true;
};

// Returns whether any node changed. Throws fx::GraphError naming the node
// when a node's arguments do not fit its operator's schema (too many
// positional arguments, an unknown or repeated keyword, a missing argument).
bool normalize_args(GraphModuleImpl& module,
                    const NormalizeOptions& options = {});

// Returns whether any node changed; throws as normalize_args.
bool denormalize_args(GraphModuleImpl& module);

class NormalizeArgs : public Pass {
 public:
  std::string name() const override { return "normalize_args"; }
  Bodies bodies() const override { return Bodies::kEachGraph; }
  bool run(GraphModuleImpl& module) override { return normalize_args(module); }
};

class DenormalizeArgs : public Pass {
 public:
  std::string name() const override { return "denormalize_args"; }
  Bodies bodies() const override { return Bodies::kEachGraph; }
  bool run(GraphModuleImpl& module) override {
    return denormalize_args(module);
  }
};

}  // namespace fx
