// A cache of large freed blocks for the fx_onednn operators' outputs.
//
// glibc serves a block of more than 32 MiB (its largest dynamic mmap
// threshold) from a fresh mapping every time and unmaps it when freed, so
// each call pays a page fault and the zeroing of every 4 KiB page again:
// MobileNetV2 at batch 8 (a 38.5 MB activation) spent a third of its time
// there. ONNX Runtime keeps an arena; we keep the blocks freed by earlier
// calls, up to a limit, and hand them out again by size.
#include "lowering/activation_cache.h"

#include <ATen/EmptyTensor.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>

#include <iterator>
#include <list>
#include <map>
#include <mutex>

#include "lowering/onednn_ops.h"

namespace fx::onednn {
namespace {

constexpr size_t kMinBytes = size_t{1} << 20;  // smaller: glibc does well
constexpr int64_t kDefaultLimit = int64_t{512} << 20;

struct Block {
  void* data;
  size_t bytes;
};

class BlockCache final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t bytes) const override {
    if (bytes < kMinBytes) {
      void* data = c10::alloc_cpu(bytes);
      return {data, data, &c10::free_cpu, c10::Device(c10::DeviceType::CPU)};
    }
    void* data = nullptr;
    size_t size = bytes;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      // The smallest free block that fits without wasting more than an
      // eighth: repeated calls ask for the same sizes again.
      auto it = by_size_.lower_bound(bytes);
      if (it != by_size_.end() && it->first <= bytes + bytes / 8) {
        data = it->second->data;
        size = it->first;
        cached_ -= static_cast<int64_t>(size);
        oldest_first_.erase(it->second);
        by_size_.erase(it);
        ++reused_;
      } else {
        ++allocated_;
      }
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
        oldest_first_.push_back(Block{data, bytes});
        by_size_.emplace(bytes, std::prev(oldest_first_.end()));
        cached_ += static_cast<int64_t>(bytes);
        trim_locked();
        return;
      }
    }
    c10::free_cpu(data);
  }

  // Frees the blocks freed longest ago until the cache is within its limit.
  void trim_locked() {
    while (cached_ > limit_ && !oldest_first_.empty()) {
      const Block oldest = oldest_first_.front();
      auto range = by_size_.equal_range(oldest.bytes);
      for (auto it = range.first; it != range.second; ++it) {
        if (it->second == oldest_first_.begin()) {
          by_size_.erase(it);
          break;
        }
      }
      oldest_first_.pop_front();
      cached_ -= static_cast<int64_t>(oldest.bytes);
      c10::free_cpu(oldest.data);
    }
  }

  mutable std::mutex mutex_;
  // Free blocks, the longest free first, and by size.
  mutable std::list<Block> oldest_first_;
  mutable std::multimap<size_t, std::list<Block>::iterator> by_size_;
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
