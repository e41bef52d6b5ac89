// The values of a module's buffers, put back when the snapshot goes out of
// scope: for runs that must leave no trace in them (running on zeros for
// the outputs' metadata, shape propagation), whatever the run writes
// (batch-norm statistics in training mode, observers' ranges, counters).
//
//   {
//     fx::BufferSnapshot keep(*module);
//     module->forward(zeros);     // may update running statistics
//     keep.restore();             // the buffers hold what they held
//   }
//
// The destructor restores them too (after an exception), quietly: an
// error restoring while another unwinds is not raised.
#pragma once

#include <torch/torch.h>

#include <utility>
#include <vector>

#include "fx/runtime/graph_module.h"

namespace fx {

class BufferSnapshot {
 public:
  // Every defined buffer of `module` and its submodules.
  explicit BufferSnapshot(const torch::nn::Module& module);
  // A GraphModule's tensor attributes that are not parameters, and the
  // buffers of its leaf modules.
  explicit BufferSnapshot(const GraphModuleImpl& module);
  // Puts the values back (once; later calls do nothing).
  void restore();
  ~BufferSnapshot();
  BufferSnapshot(const BufferSnapshot&) = delete;
  BufferSnapshot& operator=(const BufferSnapshot&) = delete;

 private:
  void keep(const at::Tensor& buffer);
  std::vector<std::pair<at::Tensor, at::Tensor>> saved_;  // buffer, values
  bool restored_ = false;
};

}  // namespace fx
