// The pass onednn_fold_weights: the lowering's last step. When the graph
// holds what the lowering passes left to fold (weights to pack:
// fx_onednn::pack_*; a recurrent layer's weights to transpose and sum),
// fold_constants moves it into an init step, run once now and on load,
// and eliminate_dead_code drops what the lowered calls no longer read (the
// packs of the convolutions a squeeze-excitation block absorbed); a graph
// the lowering left as it was stays so (InferenceOptions::fold = false
// folds nothing else).
#include <memory>

#include "fx/ir/operator_schemas.h"
#include "fx/runtime/graph_module.h"
#include "lowering/operators.h"
#include "lowering/passes/passes.h"
#include "lowering/passes/rewrite_support.h"
#include "passes/eliminate_dead_code.h"
#include "passes/fold_constants.h"

namespace fx {
namespace lowering {
namespace {

// Whether `n` is a lowered call whose weights are still computed in the
// graph.
bool needs_folding(const Node& n) {
  // The packing operators: those declared to run in init steps only
  // (lowering/operators.def).
  if (n.op() == Opcode::kCallFunction && n.target().is_operator()) {
    const std::string name = n.target().to_string();
    for (const onednn::OperatorDeclaration& op :
         onednn::operator_declarations()) {
      if (op.init_step && op.name == name) return true;
    }
  }
  if (!n.is_call_to({"fx_onednn::lstm", "fx_onednn::gru"})) return false;
  const Argument params = CallArguments(n)["params"];
  if (!params.is_sequence()) return false;
  for (const Argument& p : params.elements()) {
    if (p.is_node() && p.to_node()->op() != Opcode::kGetAttr) return true;
  }
  return false;
}

class FoldWeights : public LoweringPass {
 public:
  explicit FoldWeights(const InferenceOptions& options)
      : LoweringPass("onednn_fold_weights", options) {}

 private:
  bool rewrite(GraphModuleImpl& module) override {
    bool any = false;
    for (const Node* n : module.graph().nodes()) {
      if (needs_folding(*n)) {
        any = true;
        break;
      }
    }
    if (!any) return false;
    fold_constants(module);
    eliminate_dead_code(module);
    return true;
  }
};

}  // namespace

std::unique_ptr<Pass> make_fold_weights(const InferenceOptions& options) {
  return std::make_unique<FoldWeights>(options);
}

}  // namespace lowering
}  // namespace fx
