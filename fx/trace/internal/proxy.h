// Internal to the tracer: the proxy tensor.
//
// A ProxyImpl is a storage-less TensorImpl with real sizes, strides, dtype and
// device, the DispatchKey::DeferredInit key that routes every operator on it
// to the tracer's fallback, and the Node whose value it stands for. Reading
// its data throws. Reading its sizes is noticed (see note_size_read), since a
// program that reads sizes is specialized to them.
#pragma once

#include <cstdint>

#include <ATen/Tensor.h>
#include <c10/core/TensorImpl.h>

#include "fx/ir/libtorch_compat.h"
#include "fx/ir/meta.h"

namespace fx {
class Node;
namespace internal {

class ProxyImpl : public compat::TensorImplWithLayoutHooks {
 public:
  ProxyImpl(uint64_t session, Node* node, const TensorMeta& meta);

  uint64_t session() const { return session_; }
  Node* node() const { return node_; }
  // After an in-place operator, the proxy stands for that operator's node.
  void set_node(Node* node) { node_ = node; }
  // After an in-place view operator (t_, unsqueeze_, resize_), new sizes.
  void set_meta(const TensorMeta& meta);
  TensorMeta meta() const;

  const char* tensorimpl_type_name() const override;
  c10::intrusive_ptr<c10::TensorImpl> shallow_copy_and_detach(
      const c10::VariableVersion& version_counter,
      bool allow_tensor_metadata_change) const override;
  c10::intrusive_ptr<c10::TensorImpl> shallow_copy_and_detach(
      c10::VariableVersion&& version_counter,
      bool allow_tensor_metadata_change) const override;

 protected:
  c10::IntArrayRef sizes_custom() const override;
  c10::IntArrayRef strides_custom() const override;
  int64_t size_custom(int64_t d) const override;
  int64_t dim_custom() const override;
  int64_t numel_custom() const override;
  int64_t storage_offset_custom() const override;
  bool is_contiguous_hook(at::MemoryFormat memory_format) const override;
  bool is_strides_like_custom(at::MemoryFormat memory_format) const override;
  bool is_non_overlapping_and_dense_hook() const override;
  c10::SymIntArrayRef sym_sizes_custom() const override;
  c10::SymIntArrayRef sym_strides_custom() const override;
  c10::SymInt sym_size_custom(int64_t d) const override;
  c10::SymInt sym_numel_custom() const override;
  c10::SymInt sym_storage_offset_custom() const override;

 private:
  void noticed() const;
  void noticed_layout() const;
  uint64_t session_;
  Node* node_;
};

// The proxy behind `tensor`, or nullptr for a real tensor.
ProxyImpl* as_proxy(const at::Tensor& tensor);

at::Tensor make_proxy(uint64_t session, Node* node, const TensorMeta& meta);

// Implemented by the tracer: called when user code reads the sizes or numel
// of a proxy of session `session`.
void note_size_read(uint64_t session);
// Likewise for strides and contiguity, which specialize the trace to the
// inputs' layout as well.
void note_layout_read(uint64_t session);

}  // namespace internal
}  // namespace fx
