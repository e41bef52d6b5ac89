// Internal to //lowering:onednn_ops: the memory the fx_onednn operators
// allocate their outputs and scratchpads in (the public controls are in
// lowering/onednn_ops.h).
#pragma once

#include <ATen/ATen.h>
#include <c10/util/strides.h>

namespace fx::onednn {

// An empty CPU tensor of `sizes` and `strides` whose memory, when it is
// 64 KiB or more, comes from the blocks earlier tensors freed
// (activation_cache_*).
at::Tensor empty_activation(at::IntArrayRef sizes, at::IntArrayRef strides,
                            const at::TensorOptions& options);
at::Tensor empty_activation(at::IntArrayRef sizes,
                            const at::TensorOptions& options);

}  // namespace fx::onednn
