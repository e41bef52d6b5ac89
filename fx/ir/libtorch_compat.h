// What differs between the LibTorch versions fx for LibTorch builds against
// (2.13, the default, and Debian 12's 1.13), in one place: every other file
// is written once, against these names. LibTorch's own torch/version.h says
// which version a translation unit sees (docs/building.md lists the
// differences and how each was verified).
#pragma once

#include <string>

#include <cstddef>

#include <c10/core/Allocator.h>
#include <c10/core/MemoryFormat.h>
#include <c10/core/TensorImpl.h>
#include <c10/util/Exception.h>
#include <torch/version.h>

// 1 when building against LibTorch 2.x (2.13 is the one tested), 0 against
// 1.13.
#define FX_LIBTORCH_2 (TORCH_VERSION_MAJOR >= 2)

namespace fx::compat {

// c10::Error's backtrace argument, empty: a string in 1.13, a lazily
// computed c10::Backtrace (a shared pointer) in 2.13.
#if FX_LIBTORCH_2
inline c10::Backtrace no_backtrace() { return nullptr; }
#else
inline std::string no_backtrace() { return ""; }
#endif

// A TensorImpl subclass that answers contiguity questions itself (the
// tracer's proxy): it implements is_contiguous_hook and
// is_non_overlapping_and_dense_hook, which this class hooks into
// TensorImpl's virtuals. 1.13 calls `bool is_contiguous_custom(format)` and
// `bool is_non_overlapping_and_dense_custom()`; 2.13 calls
// `c10::SymBool sym_is_contiguous_custom(format)` and
// `sym_is_non_overlapping_and_dense_custom()` (its bool versions are no
// longer virtual).
class TensorImplWithLayoutHooks : public c10::TensorImpl {
 public:
  using c10::TensorImpl::TensorImpl;

 protected:
  virtual bool is_contiguous_hook(at::MemoryFormat memory_format) const = 0;
  virtual bool is_non_overlapping_and_dense_hook() const = 0;

#if FX_LIBTORCH_2
  c10::SymBool sym_is_contiguous_custom(
      at::MemoryFormat memory_format) const override {
    return c10::SymBool(is_contiguous_hook(memory_format));
  }
  c10::SymBool sym_is_non_overlapping_and_dense_custom() const override {
    return c10::SymBool(is_non_overlapping_and_dense_hook());
  }
#else
  bool is_contiguous_custom(at::MemoryFormat memory_format) const override {
    return is_contiguous_hook(memory_format);
  }
  bool is_non_overlapping_and_dense_custom() const override {
    return is_non_overlapping_and_dense_hook();
  }
#endif
};

// A CPU allocator of our own (the lowering's activation cache): it
// implements allocate_hook, which this class hooks into c10::Allocator.
// 1.13's `allocate` is const; 2.13's is not, and 2.13 adds the pure virtual
// `copy_data` (memcpy here: the blocks are plain host memory).
class CpuAllocator : public c10::Allocator {
 protected:
  virtual c10::DataPtr allocate_hook(size_t bytes) const = 0;

 public:
#if FX_LIBTORCH_2
  c10::DataPtr allocate(size_t bytes) override { return allocate_hook(bytes); }
  void copy_data(void* dest, const void* src, size_t count) const override {
    default_copy_data(dest, src, count);
  }
#else
  c10::DataPtr allocate(size_t bytes) const override {
    return allocate_hook(bytes);
  }
#endif
};

}  // namespace fx::compat
