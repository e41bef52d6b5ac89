// Constant folding: what depends only on parameters, buffers and constants
// is computed once, by an init step, and the main graph reads the results as
// new attributes (torch.fx's split_const_subgraphs and FoldedGraphModule).
//
//   before:
//       %x : [#users=1] = placeholder[target=x]
//       %fc_weight : [#users=1] = get_attr[target=fc.weight]
//       %t : [#users=1] = call_function[target=aten::t](args = (%fc_weight,), kwargs = {})
//       %fc_bias : [#users=1] = get_attr[target=fc.bias]
//       %addmm : [#users=1] = call_function[target=aten::addmm](args = (%fc_bias, %x, %t), kwargs = {})
//   after:
//       %x : [#users=1] = placeholder[target=x]
//       %t : [#users=1] = get_attr[target=_folded.t]
//       %fc_bias : [#users=1] = get_attr[target=fc.bias]
//       %addmm : [#users=1] = call_function[target=aten::addmm](args = (%fc_bias, %x, %t), kwargs = {})
//   init step (GraphModuleImpl::init_steps), its output stored as _folded.t:
//       %fc_weight : [#users=1] = get_attr[target=fc.weight]
//       %t : [#users=1] = call_function[target=aten::t](args = (%fc_weight,), kwargs = {})
//       return (t,)
//
// A node folds when it is pure (Node::is_impure), produces one tensor (or
// one script object: quantized::conv2d_prepack's packed weights), and
// all its inputs fold; an attribute folds unless something impure may write
// it or a view of it (an in-place operator through the parameter it writes,
// batch_norm in training mode, a leaf module: it may change between runs).
// After loading new weights, run the init steps again with
// GraphModuleImpl::run_init().
//
// Folded values carry no gradient. In a graph traced in training mode (a
// module is in training mode until eval()) no parameter that requires grad
// folds, so training through the folded graph trains what eager trains;
// trace in eval mode to fold for inference, or freeze a parameter
// (requires_grad_(false)) to fold it. A graph traced in eval mode is folded
// for inference: gradients through it reach only the parameters it still
// reads. With control flow, an attribute any body may write folds nowhere.
#pragma once

#include <vector>

#include "fx/runtime/graph_module.h"
#include "passes/pass.h"

namespace fx {

struct FoldOptions {
  // Fold only what these nodes need (themselves and their foldable
  // inputs). Empty: fold every foldable node.
  std::vector<const Node*> only;
  // Also fold in-place writes into tensors the folded part makes itself:
  // a mask built as zeros filled slice by slice (Swin's shifted windows),
  // its zeros made by new_zeros / new_ones / new_full of a literal size
  // (which read their input's dtype only). Folded only when nothing else
  // writes those tensors and everything else reads them after the last
  // write; otherwise folding goes on as without this.
  //   before:
  //       %new_zeros = call_function[target=aten::new_zeros](args = (%x, [4, 4]), kwargs = {dtype: torch.float32})
  //       %slice = call_function[target=aten::slice.Tensor](args = (%new_zeros, 0, 0, 2))
  //       %fill_ = call_function[target=aten::fill_.Scalar](args = (%slice, 1.0))
  //       %add = call_function[target=aten::add.Tensor](args = (%x, %new_zeros))
  //   after:
  //       %new_zeros = get_attr[target=_folded.zeros]
  //       %add = call_function[target=aten::add.Tensor](args = (%x, %new_zeros))
  bool writes = false;
};

// Rewrites module's graph to read the folded values as attributes
// (_folded.<node name>) and returns the init step computing them, without
// running it: add it with GraphModuleImpl::add_init_step, which registers
// the attributes (the graph does not lint before). The step's graph is
// empty (no outputs) when nothing folds.
GraphModuleImpl::InitStep split_const_subgraphs(GraphModuleImpl& module,
                                                const FoldOptions& options = {});

// split_const_subgraphs, then runs and keeps the init step; the same in
// each body of control flow (cond's branches, while_loop's bodies: what
// they compute from weights alone is computed once too). Returns whether
// anything was folded.
bool fold_constants(GraphModuleImpl& module, const FoldOptions& options = {});

// Options: writes=true (FoldOptions::writes).
class FoldConstants : public Pass {
 public:
  FoldConstants() = default;
  explicit FoldConstants(const PassOptions& options);
  std::string name() const override { return "fold_constants"; }
  Bodies bodies() const override { return Bodies::kItself; }
  bool run(GraphModuleImpl& module) override {
    return fold_constants(module, options_);
  }
  static std::vector<std::pair<std::string, std::string>> option_docs();

 private:
  FoldOptions options_;
};

}  // namespace fx
