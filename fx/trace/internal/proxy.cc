#include "fx/trace/internal/proxy.h"

#include <c10/core/DispatchKeySet.h>
#include <c10/core/WrapDimMinimal.h>

namespace fx {
namespace internal {
namespace {

c10::DispatchKeySet proxy_keys(const TensorMeta& meta) {
  c10::DispatchKey backend = c10::computeDispatchKey(
      meta.dtype, c10::Layout::Strided, meta.device);
  return c10::DispatchKeySet({c10::DispatchKey::DeferredInit, backend});
}

}  // namespace

ProxyImpl::ProxyImpl(uint64_t session, Node* node, const TensorMeta& meta)
    : TensorImplWithLayoutHooks(proxy_keys(meta),
                                c10::scalarTypeToTypeMeta(meta.dtype),
                                meta.device),
      session_(session),
      node_(node) {
  set_meta(meta);
  set_storage_access_should_throw();
  set_custom_sizes_strides(SizesStridesPolicy::CustomSizes);
}

void ProxyImpl::set_meta(const TensorMeta& meta) {
  // set_sizes_and_strides refuses custom sizes policies; drop it meanwhile.
  set_custom_sizes_strides(SizesStridesPolicy::Default);
  set_sizes_and_strides(meta.sizes, meta.strides);
  set_custom_sizes_strides(SizesStridesPolicy::CustomSizes);
}

TensorMeta ProxyImpl::meta() const {
  TensorMeta m;
  m.sizes = sizes_and_strides_.sizes_arrayref().vec();
  m.strides = sizes_and_strides_.strides_arrayref().vec();
  m.dtype = c10::typeMetaToScalarType(dtype());
  m.device = device_default();
  m.memory_format = memory_format_of(m.sizes, m.strides);
  return m;
}

const char* ProxyImpl::tensorimpl_type_name() const {
  return "fx proxy tensor (a symbolic value while tracing: it has no data)";
}

c10::intrusive_ptr<c10::TensorImpl> ProxyImpl::shallow_copy_and_detach(
    const c10::VariableVersion& /*version_counter*/,
    bool /*allow_tensor_metadata_change*/) const {
  return c10::make_intrusive<ProxyImpl>(session_, node_, meta());
}

c10::intrusive_ptr<c10::TensorImpl> ProxyImpl::shallow_copy_and_detach(
    c10::VariableVersion&& /*version_counter*/,
    bool /*allow_tensor_metadata_change*/) const {
  return c10::make_intrusive<ProxyImpl>(session_, node_, meta());
}

void ProxyImpl::noticed() const { note_size_read(session_); }
void ProxyImpl::noticed_layout() const { note_layout_read(session_); }

c10::IntArrayRef ProxyImpl::sizes_custom() const {
  noticed();
  return sizes_and_strides_.sizes_arrayref();
}
c10::IntArrayRef ProxyImpl::strides_custom() const {
  noticed_layout();
  return sizes_and_strides_.strides_arrayref();
}
int64_t ProxyImpl::size_custom(int64_t d) const {
  noticed();
  d = c10::maybe_wrap_dim(d, dim_custom(), /*wrap_scalar=*/false);
  return sizes_and_strides_.size_at_unchecked(d);
}
int64_t ProxyImpl::dim_custom() const {
  // The rank is always guarded, so reading it specializes nothing.
  return sizes_and_strides_.size();
}
int64_t ProxyImpl::numel_custom() const {
  noticed();
  return numel_;
}
int64_t ProxyImpl::storage_offset_custom() const { return storage_offset_; }
bool ProxyImpl::is_contiguous_hook(at::MemoryFormat memory_format) const {
  noticed_layout();
  return is_contiguous_default(memory_format);
}
bool ProxyImpl::is_strides_like_custom(at::MemoryFormat memory_format) const {
  noticed_layout();
  return is_strides_like_default(memory_format);
}
bool ProxyImpl::is_non_overlapping_and_dense_hook() const {
  noticed_layout();
  return is_non_overlapping_and_dense_default();
}
c10::SymIntArrayRef ProxyImpl::sym_sizes_custom() const {
  noticed();
  return c10::fromIntArrayRefKnownNonNegative(
      sizes_and_strides_.sizes_arrayref());
}
c10::SymIntArrayRef ProxyImpl::sym_strides_custom() const {
  noticed_layout();
  return c10::fromIntArrayRefKnownNonNegative(
      sizes_and_strides_.strides_arrayref());
}
c10::SymInt ProxyImpl::sym_size_custom(int64_t d) const {
  noticed();
  d = c10::maybe_wrap_dim(d, dim_custom(), /*wrap_scalar=*/false);
  return c10::SymInt(sizes_and_strides_.size_at_unchecked(d));
}
c10::SymInt ProxyImpl::sym_numel_custom() const {
  noticed();
  return c10::SymInt(numel_);
}
c10::SymInt ProxyImpl::sym_storage_offset_custom() const {
  return c10::SymInt(storage_offset_);
}

ProxyImpl* as_proxy(const at::Tensor& tensor) {
  c10::TensorImpl* impl = tensor.unsafeGetTensorImpl();
  if (impl == nullptr || !tensor.defined() ||
      !impl->key_set().has(c10::DispatchKey::DeferredInit)) {
    return nullptr;
  }
  return dynamic_cast<ProxyImpl*>(impl);
}

at::Tensor make_proxy(uint64_t session, Node* node, const TensorMeta& meta) {
  return at::Tensor(c10::make_intrusive<ProxyImpl>(session, node, meta));
}

}  // namespace internal
}  // namespace fx
