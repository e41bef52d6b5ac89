// What the oneDNN lowering's passes (lowering/passes/*.cc, in the order
// lowering/lower_onednn.h gives) share: the activations they fuse as
// oneDNN post-ops, the replacement of matched nodes by one lowered call,
// the channels-last chains between lowered convolutions (an analysis of the
// graph, computed afresh by each pass that reads it), and the base class
// that runs a rewrite and reports its InferenceReport counts as statistics.
// Internal to //lowering.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "fx/ir/graph.h"
#include "lowering/inference_options.h"
#include "passes/pass.h"
#include "passes/patterns.h"

namespace fx {
namespace lowering {

// An activation as a oneDNN post-op: the `activation` argument of the
// lowered operators (onednn::activation_names()) and its parameters.
struct PostOp {
  std::string name = "none";
  double alpha = 0, beta = 0;
};
PostOp post_op(const std::optional<Activation>& activation);
// The post-op's arguments of a lowered call (none for "none").
void append_activation(const PostOp& act, std::vector<Argument>* args);

// `m` with channels-last strides, not requiring grad.
TensorMeta channels_last_meta(TensorMeta m);

// Replaces `original` and the nodes absorbed after it by a call of `op` on
// `args` (and `kwargs`), placed where the last absorbed node was, with its
// metadata (module path and stack trace of `original`, tensor metadata of
// the last node, channels-last when `channels_last`). Returns the new call.
Node* replace_with_call(Graph& graph, Node* original,
                        const std::vector<Node*>& absorbed, const char* op,
                        std::vector<Argument> args, bool channels_last,
                        Kwargs kwargs = {});

// A convolution lowered by lower_onednn_convolutions (fx_onednn::conv,
// conv_add_, conv_transpose).
bool is_lowered_convolution(const Node& n);
// Operators whose output keeps a channels-last input's layout.
bool keeps_layout(const Node& n);
// Operators a chain runs through: those that keep the layout and, in
// bfloat16, those aten runs in bfloat16 (batch norms and bilinear
// upsampling take float32).
bool in_chain(const Node& n, bool bf16);

// The chains of a graph: the values lowered convolutions leave
// channels-last and the operators of a chain carry on, in program order.
struct Chains {
  // Whether the chains run in bfloat16 (their convolutions' weights are
  // packed in it: lower_onednn_convolutions{bf16=true}).
  bool bf16 = false;
  absl::flat_hash_set<const Node*> values;

  static Chains of(const Graph& graph);
  bool contains(const Node* n) const { return values.count(n) > 0; }
  // While the returned listener lives, a node erased from `graph` leaves
  // `values` (a rewrite adds the calls it makes itself). The chains must
  // stay where they are until then.
  [[nodiscard]] EraseListener follow_erasures(Graph& graph);
  // `value`'s metadata when it is a chain's 4-d CPU value in the chain's
  // dtype (float32, or bfloat16), as a lowered convolution leaves it (an
  // elementwise operator may have promoted it); else null.
  const TensorMeta* value(const Argument& value) const;
};

// A lowering pass: runs `rewrite` on graphs not traced in training mode
// (those stay as they are), with the oneDNN operators registered, and
// reports the InferenceReport counts it made: those FX_INFERENCE_COUNTS
// gives it, and any other it changed (the squeeze-excitation pass takes
// back the convolutions it absorbs).
class LoweringPass : public Pass {
 public:
  explicit LoweringPass(std::string name, InferenceOptions options = {})
      : name_(std::move(name)), options_(options) {}
  std::string name() const override { return name_; }
  Bodies bodies() const override { return Bodies::kEachGraph; }
  bool run(GraphModuleImpl& module) final;
  std::vector<std::pair<std::string, int64_t>> statistics() const override;

 protected:
  // Returns whether the graph changed.
  virtual bool rewrite(GraphModuleImpl& module) = 0;
  const InferenceOptions& options() const { return options_; }
  InferenceReport& report() { return report_; }

 private:
  std::string name_;
  InferenceOptions options_;
  InferenceReport report_;
};

}  // namespace lowering
}  // namespace fx
