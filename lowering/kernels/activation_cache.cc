// A cache of freed blocks for the fx_onednn operators' outputs.
//
// glibc serves a block of more than 32 MiB (its largest dynamic mmap
// threshold) from a fresh mapping every time and unmaps it when freed, so
// each call pays a page fault and the zeroing of every 4 KiB page again:
// MobileNetV2 at batch 8 (a 38.5 MB activation) spent a third of its time
// there. ONNX Runtime keeps an arena; we keep the blocks freed by earlier
// calls, up to a limit, and hand them out again.
//
// Which block: the most recently freed one that fits and is at most twice
// the size asked for, and from 64 KiB on: an output then lands, as a rule,
// on a block a node just before it read or wrote, still in the cores'
// caches, rather than on one freed long ago (before: blocks from 1 MiB
// matched by size, smaller ones from glibc). Interleaved in one process
// (A-B-A, the cache emptied at each switch), at batch 1: MobileNetV2
// 0.93-0.98x the time, EfficientNet-B0 0.93x, MobileNetV3-Small 0.96x,
// DenseNet-121 0.96x, ResNet-18 0.99x; at batch 8 0.89-0.99x; the
// transformers 0.99x. Any free block that fits, however large, was
// faster still at batch 1 on a quiet machine but up to 1.05x slower at
// batch 8.
#include "lowering/kernels/activation_cache.h"

#include <ATen/EmptyTensor.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>

#include <list>
#include <mutex>

#include "fx/ir/libtorch_compat.h"
#include "lowering/onednn_ops.h"

namespace fx::onednn {
namespace {

// Smaller blocks come from glibc, whose own free lists serve them well.
constexpr size_t kMinBytes = size_t{64} << 10;
constexpr int64_t kDefaultLimit = int64_t{512} << 20;

struct Block {
  void* data;
  size_t bytes;
};

class BlockCache final : public compat::CpuAllocator {
 public:
  c10::DataPtr allocate_hook(size_t bytes) const override {
    if (bytes < kMinBytes) {
      void* data = c10::alloc_cpu(bytes);
      return {data, data, &c10::free_cpu, c10::Device(c10::DeviceType::CPU)};
    }
    void* data = nullptr;
    size_t size = bytes;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (auto it = freed_.rbegin(); it != freed_.rend(); ++it) {
        if (it->bytes >= bytes && it->bytes / 2 <= bytes) {
          data = it->data;
          size = it->bytes;
          cached_ -= static_cast<int64_t>(size);
          freed_.erase(std::next(it).base());
          break;
        }
      }
      ++(data != nullptr ? reused_ : allocated_);
    }
    if (data == nullptr) data = c10::alloc_cpu(size);
    auto* block = new Block{data, size};
    return {data, block, &BlockCache::release,
            c10::Device(c10::DeviceType::CPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }

  static BlockCache& instance() {
    static auto* cache = new BlockCache();  // outlives every tensor
    return *cache;
  }

  ActivationCacheStats stats() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return {cached_, limit_, reused_, allocated_};
  }

  void set_limit(int64_t bytes) {
    TORCH_CHECK(bytes >= 0,
                "fx::onednn::set_activation_cache_limit: the limit must be 0 "
                "(no cache) or more bytes, got ",
                bytes);
    std::lock_guard<std::mutex> lock(mutex_);
    limit_ = bytes;
    trim_locked();
  }

  void release_all() {
    std::lock_guard<std::mutex> lock(mutex_);
    const int64_t limit = limit_;
    limit_ = 0;
    trim_locked();
    limit_ = limit;
  }

 private:
  static void release(void* context) {
    auto* block = static_cast<Block*>(context);
    instance().give_back(block->data, block->bytes);
    delete block;
  }

  // Keeps the block, making room by freeing the blocks freed longest ago
  // (sizes no call asks for any more: a warm-up at another batch size).
  void give_back(void* data, size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (static_cast<int64_t>(bytes) <= limit_) {
        freed_.push_back(Block{data, bytes});
        cached_ += static_cast<int64_t>(bytes);
        trim_locked();
        return;
      }
    }
    c10::free_cpu(data);
  }

  // Frees the blocks freed longest ago until the cache is within its limit.
  void trim_locked() {
    while (cached_ > limit_ && !freed_.empty()) {
      const Block oldest = freed_.front();
      freed_.pop_front();
      cached_ -= static_cast<int64_t>(oldest.bytes);
      c10::free_cpu(oldest.data);
    }
  }

  mutable std::mutex mutex_;
  // Free blocks in the order they were freed (the longest free first).
  mutable std::list<Block> freed_;
  mutable int64_t cached_ = 0;
  mutable int64_t reused_ = 0;
  mutable int64_t allocated_ = 0;
  int64_t limit_ = kDefaultLimit;
};

}  // namespace

at::Tensor empty_activation(at::IntArrayRef sizes, at::IntArrayRef strides,
                            const at::TensorOptions& options) {
  if (!options.device().is_cpu()) {  // meta tensors, for shapes
    return at::empty_strided(sizes, strides, options);
  }
  return at::detail::empty_strided_generic(
      sizes, strides, &BlockCache::instance(),
      c10::DispatchKeySet(c10::DispatchKey::CPU),
      c10::typeMetaToScalarType(options.dtype()));
}

at::Tensor empty_activation(at::IntArrayRef sizes,
                            const at::TensorOptions& options) {
  return empty_activation(sizes, c10::contiguous_strides(sizes), options);
}

ActivationCacheStats activation_cache_stats() {
  return BlockCache::instance().stats();
}

void set_activation_cache_limit(int64_t bytes) {
  BlockCache::instance().set_limit(bytes);
}

void release_activation_cache() { BlockCache::instance().release_all(); }

}  // namespace fx::onednn
