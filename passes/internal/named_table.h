// A process-wide table of named entries (passes, pipelines) that libraries
// add to while they load and tools read: thread-safe, in the order added,
// each name once.
#pragma once

#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "fx/ir/errors.h"

namespace fx::internal {

template <typename Entry>
class NamedTable {
 public:
  // `kind` names an entry in errors: "pass", "pipeline".
  NamedTable(const char* kind, std::vector<Entry> entries)
      : kind_(kind), entries_(std::move(entries)) {}

  std::vector<Entry> entries() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return entries_;
  }

  // Throws fx::GraphError when an entry of that name is there already.
  void add(Entry entry) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const Entry& known : entries_) {
      if (known.name == entry.name) {
        throw GraphError(absl::StrCat("a ", kind_, " named '", entry.name,
                                      "' is registered already"));
      }
    }
    entries_.push_back(std::move(entry));
  }

 private:
  const char* kind_;
  mutable std::mutex mutex_;
  std::vector<Entry> entries_;
};

}  // namespace fx::internal
