#include "fx/runtime/specializations.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "fx/ir/errors.h"
#include "fx/ir/argument.h"
#include "fx/ir/meta.h"
#include "fx/ir/operator_schemas.h"

namespace fx {
namespace {

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now() - start)
      .count();
}

std::string tensor_key(const at::Tensor& t) {
  if (!t.defined()) return "None";
  std::string out =
      absl::StrCat(short_dtype_name(t.scalar_type()), "[",
                   absl::StrJoin(t.sizes(), ", "), "]");
  if (!t.is_contiguous()) {
    absl::StrAppend(&out, " strides [", absl::StrJoin(t.strides(), ", "), "]");
  }
  if (!t.device().is_cpu()) absl::StrAppend(&out, " on ", t.device().str());
  return out;
}

}  // namespace

// One specialization: made once (by the first caller of its shapes; the
// others wait), then run by any.
struct SpecializationCache::Entry {
  std::mutex mutex;
  std::condition_variable ready_cv;
  bool ready = false;
  std::exception_ptr error;
  GraphModule module{nullptr};
  Specialization info;
  std::atomic<int64_t> runs{0};
  // Its place in the cache's order_ (under the cache's mutex).
  std::list<std::string>::iterator position;
};

SpecializationCache::SpecializationCache(TraceFunction trace,
                                         SpecializationOptions options)
    : trace_(std::move(trace)), options_(std::move(options)) {
  if (options_.capacity == 0) {
    throw GraphError(
        "SpecializationCache: capacity 0 would keep no specialization (each "
        "call would trace again): give a capacity of 1 or more");
  }
  if (!trace_) {
    throw GraphError("SpecializationCache: no trace function given");
  }
}

SpecializationCache::~SpecializationCache() = default;

std::string SpecializationCache::shapes_of(
    const std::vector<c10::IValue>& inputs) {
  std::vector<std::string> parts;
  for (const c10::IValue& v : inputs) {
    if (v.isTensor()) {
      parts.push_back(tensor_key(v.toTensor()));
    } else if (v.isTensorList()) {
      std::vector<std::string> items;
      for (const at::Tensor& t : v.toTensorVector()) {
        items.push_back(tensor_key(t));
      }
      parts.push_back(absl::StrCat("[", absl::StrJoin(items, ", "), "]"));
    } else {
      try {
        parts.push_back(ivalue_to_argument(v, nullptr, [](const at::Tensor&) {
                          return Argument("<tensor>");
                        }).to_string());
      } catch (const std::exception&) {
        parts.push_back(v.tagKind());
      }
    }
  }
  return absl::StrJoin(parts, ", ");
}

std::shared_ptr<SpecializationCache::Entry> SpecializationCache::entry_for(
    const std::string& key, const std::vector<c10::IValue>& inputs) {
  std::shared_ptr<Entry> entry;
  bool make = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(key);
    if (it != entries_.end()) {
      entry = it->second;
      order_.splice(order_.begin(), order_, entry->position);
    } else {
      entry = std::make_shared<Entry>();
      entry->info.shapes = key;
      entries_.emplace(key, entry);
      order_.push_front(key);
      entry->position = order_.begin();
      make = true;
      while (entries_.size() > options_.capacity) {
        // A dropped specialization still running elsewhere lives on in
        // its callers' shared_ptr.
        entries_.erase(order_.back());
        order_.pop_back();
        ++dropped_;
      }
    }
  }
  if (make) {
    try {
      std::lock_guard<std::mutex> tracing(trace_mutex_);
      auto start = std::chrono::steady_clock::now();
      GraphModule module = trace_(inputs);
      entry->info.trace_ms = ms_since(start);
      start = std::chrono::steady_clock::now();
      if (options_.passes) options_.passes(*module);
      entry->info.passes_ms = ms_since(start);
      std::lock_guard<std::mutex> lock(entry->mutex);
      entry->module = std::move(module);
      entry->ready = true;
    } catch (...) {
      {
        std::lock_guard<std::mutex> lock(entry->mutex);
        entry->error = std::current_exception();
        entry->ready = true;
      }
      entry->ready_cv.notify_all();
      // Nothing is kept: the next call of these shapes tries again.
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = entries_.find(key);
      if (it != entries_.end() && it->second == entry) {
        entries_.erase(it);
        order_.erase(entry->position);
      }
      throw;
    }
    entry->ready_cv.notify_all();
    std::lock_guard<std::mutex> lock(mutex_);
    ++made_;
    return entry;
  }
  std::unique_lock<std::mutex> lock(entry->mutex);
  entry->ready_cv.wait(lock, [&] { return entry->ready; });
  if (entry->error) std::rethrow_exception(entry->error);
  return entry;
}

c10::IValue SpecializationCache::operator()(std::vector<c10::IValue> inputs) {
  const std::string key = shapes_of(inputs);
  std::shared_ptr<Entry> entry = entry_for(key, inputs);
  ++entry->runs;
  return entry->module->forward(std::move(inputs));
}

std::vector<SpecializationCache::Specialization>
SpecializationCache::specializations() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<Specialization> out;
  for (const std::string& key : order_) {
    Entry& e = *entries_.at(key);
    std::lock_guard<std::mutex> entry_lock(e.mutex);
    if (!e.ready || e.error) continue;
    Specialization s = e.info;
    s.runs = e.runs.load();
    out.push_back(std::move(s));
  }
  return out;
}

int64_t SpecializationCache::made() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return made_;
}

int64_t SpecializationCache::dropped() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return dropped_;
}

std::string SpecializationCache::report() const {
  const std::vector<Specialization> held = specializations();
  std::string out = absl::StrFormat(
      "%d specialization%s held (capacity %d), %d made, %d dropped\n",
      held.size(), held.size() == 1 ? "" : "s", options_.capacity, made(),
      dropped());
  size_t width = 6;
  for (const Specialization& s : held) width = std::max(width, s.shapes.size());
  absl::StrAppendFormat(&out, "  %-*s  %9s  %9s  %6s\n", width, "shapes",
                        "trace ms", "passes ms", "runs");
  for (const Specialization& s : held) {
    absl::StrAppendFormat(&out, "  %-*s  %9.2f  %9.2f  %6d\n", width,
                          s.shapes, s.trace_ms, s.passes_ms, s.runs);
  }
  return out;
}

}  // namespace fx
