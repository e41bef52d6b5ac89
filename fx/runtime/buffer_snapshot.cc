#include "fx/runtime/buffer_snapshot.h"

namespace fx {

BufferSnapshot::BufferSnapshot(const torch::nn::Module& module) {
  for (const at::Tensor& buffer : module.buffers(/*recurse=*/true)) {
    keep(buffer);
  }
}

BufferSnapshot::BufferSnapshot(const GraphModuleImpl& module) {
  for (const auto& [path, tensor] : module.tensor_attributes()) {
    if (!module.is_parameter(path)) keep(tensor);
  }
  for (const auto& [path, leaf] : module.leaf_modules()) {
    for (const at::Tensor& buffer : leaf.module->buffers(/*recurse=*/true)) {
      keep(buffer);
    }
  }
}

void BufferSnapshot::keep(const at::Tensor& buffer) {
  if (buffer.defined()) saved_.emplace_back(buffer, buffer.clone());
}

void BufferSnapshot::restore() {
  if (restored_) return;
  restored_ = true;
  at::NoGradGuard no_grad;
  for (auto& [buffer, values] : saved_) buffer.copy_(values);
}

BufferSnapshot::~BufferSnapshot() {
  try {
    restore();
  } catch (...) {  // NOLINT(bugprone-empty-catch): see the header
  }
}

}  // namespace fx
