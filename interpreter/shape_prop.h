// ShapeProp: runs a GraphModule on example inputs and records, in each
// node's meta, the metadata of the value it computed (torch.fx's
// passes/shape_prop.py).
//
// The tracer already records metadata at trace time. ShapeProp is for graphs
// built or edited by hand, and for inputs of other shapes: it runs the graph
// through the Interpreter (which checks no guards) and overwrites what was
// there.
//
//   before:  %x : [#users=1] = placeholder[target=x]
//            %relu : [#users=1] = call_function[target=aten::relu](args = (%x,), kwargs = {})
//
//   fx::ShapeProp(gm).propagate({torch::randn({8, 3})});
//   gm->graph().to_string(fx::PrintOptions{.tensor_meta = true});
//
//   after:   %x : f32[8, 3] [#users=1] = placeholder[target=x]
//            %relu : f32[8, 3] [#users=1] = call_function[target=aten::relu](args = (%x,), kwargs = {})
//
// What each node gets:
//   a tensor                        kTensorMeta
//   a tuple or list of tensors      kTensorMetaList, one entry per element
//   anything else (None, ints, a    neither: a kTensorMeta or
//   tuple holding non-tensors)      kTensorMetaList left from before is
//                                   erased, so no stale shape survives
// The output node is recorded too, as torch.fx does. The bodies of control
// flow are recorded as they run; a cond's branch not taken runs too, and
// its outputs must have the dtypes and sizes of the branch taken
// (fx::ExecutionError naming the node and output otherwise).
//
// A graph with dynamic dimensions (TraceOptions::dynamic) is also run at two
// other sizes of its symbols (on zeros, its buffers restored after), and
// each size and stride fitted as a function of them (TensorMeta's
// symbolic_sizes; "?" where none fits), as torch.export's symbolic shapes.
// So is a graph with an operator whose output's size depends on data
// (aten::nonzero, ...: fx/ir/data_dependent.h): its size is a symbol (u0,
// u1, ...), and in those runs the operator returns zeros of other sizes:
//
//   %x : f32[B, T, 64] = placeholder[target=x]
//   %view : f32[B*T, 64] = call_function[target=aten::view](args = (%x, [%sym_mul, 64]), ...)
//   %chunk : (f32[B, T, 32]{64*T, 64, 1}, ...) = call_function[target=aten::chunk](...)
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include "absl/container/flat_hash_map.h"
#include "fx/ir/data_dependent.h"
#include "fx/ir/meta.h"
#include "interpreter/interpreter.h"

namespace fx {

struct ShapePropOptions {
  // Symbolic sizes for graphs with dynamic dimensions (two more runs).
  bool symbolic = true;
};

class ShapeProp : public Interpreter {
 public:
  explicit ShapeProp(GraphModule module, ShapePropOptions options = {});

  // Runs the graph on one value per placeholder, records every node's
  // metadata and returns the graph's output. Throws fx::ExecutionError
  // naming the failing node, as Interpreter::run does; nodes are written only
  // after the whole graph ran, so a failed run changes no meta. (run()
  // alone writes nothing.)
  c10::IValue propagate(std::vector<c10::IValue> inputs);
  // The same, the module's buffers then restored to what they held before
  // (what running writes into them: observers' ranges, batch-norm
  // statistics, counters), for metadata at other shapes without side
  // effects (the cost model's estimate_cost_at, the ONNX export's dynamic
  // dimensions).
  c10::IValue propagate_keeping_buffers(std::vector<c10::IValue> inputs);

  c10::IValue run_node(const Node& node) override;

 private:
  struct Recorded {
    enum class Kind { kNone, kTensor, kTensorList };
    Kind kind = Kind::kNone;
    TensorMeta tensor;
    std::vector<TensorMeta> tensors;
  };
  using Recording = absl::flat_hash_map<const Node*, Recorded>;
  // Fits `example`'s metadata (recorded on `inputs`) over runs at other
  // sizes of the dynamic dimensions; leaves it as it is when the inputs do
  // not bind them or a run fails.
  void fit_symbolic(Recording& example, const std::vector<c10::IValue>& inputs);

  // Runs the branch of cond `node` not taken on its operands and throws
  // fx::ExecutionError if its outputs differ from `outputs` in dtype or
  // sizes.
  void check_other_branch(const Node& node, bool taken,
                          const std::vector<c10::IValue>& operands,
                          const c10::IValue& outputs);

  // A node whose output's size depends on data (fx/ir/data_dependent.h):
  // in the example's run, it runs and its size is a symbol's example (u0,
  // u1, ... in the order they run, as the tracer names them); in the runs
  // at other sizes, it returns zeros of the symbol's size instead.
  c10::IValue run_data_dependent(const Node& node,
                                 const DataDependentSize& size);

  ShapePropOptions options_;
  Recording recorded_;
  std::vector<DynamicDim> unbacked_;
  SymbolSizes unbacked_example_;
  std::optional<SymbolSizes> unbacked_sizes_;  // in the runs at other sizes
  size_t unbacked_count_ = 0;
};

// Gives a graph with dynamic dimensions its symbolic sizes afresh (after
// passes that made nodes without them): ShapeProp on zeros of its inputs'
// example shapes (their metadata), buffers kept. Throws fx::GraphError,
// starting with `who`, when the graph does not run there, or not at the
// other sizes ShapeProp tries (then nothing would say how sizes follow).
void propagate_symbolic_shapes(GraphModule module, const std::string& who);

}  // namespace fx
