// A cache of specializations: for a program that cannot be made one generic
// graph (its structure changes with a size, or it is traced without
// TraceOptions::dynamic), a GraphModule per input shape, traced and run
// through the user's passes the first time that shape is seen (as
// torch.compile recompiles, and TensorRT keeps optimization profiles).
//
//   fx::SpecializationCache cache(
//       [&](const std::vector<c10::IValue>& inputs) {
//         return fx::symbolic_trace(model, inputs, {});
//       },
//       {.capacity = 4, .passes = [](fx::GraphModuleImpl& gm) {
//          fx::optimize_for_inference(gm); }});
//   cache({x_1x128});   // traced, lowered, run
//   cache({x_1x128});   // run
//   cache({x_8x64});    // a second specialization
//   std::cout << cache.report();
//
// Each specialization is an ordinary traced graph with its guards, run only
// on inputs of its exact shapes, dtypes, devices and strides (and non-tensor
// values): what it computes is what a trace at that shape computes. The
// least recently used one is dropped past `capacity`. Calls may come from
// several threads at once; a shape seen by several at once is traced once.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <ATen/core/ivalue.h>

#include "fx/runtime/graph_module.h"

namespace fx {

struct SpecializationOptions {
  // Specializations kept (1 or more); the least recently used is dropped
  // past it.
  size_t capacity = 8;
  // Run on each new specialization before its first call (the user's
  // pipeline: fold_constants, optimize_for_inference, ...).
  std::function<void(GraphModuleImpl&)> passes;
};

class SpecializationCache {
 public:
  // `trace` makes the GraphModule for example inputs (fx::symbolic_trace of
  // the C++ module or TorchScript module the cache keeps).
  using TraceFunction =
      std::function<GraphModule(const std::vector<c10::IValue>& inputs)>;
  // Throws fx::GraphError for a capacity of 0 or no `trace`.
  explicit SpecializationCache(TraceFunction trace,
                               SpecializationOptions options = {});
  ~SpecializationCache();
  SpecializationCache(const SpecializationCache&) = delete;
  SpecializationCache& operator=(const SpecializationCache&) = delete;

  // Runs the specialization for these inputs' shapes, making it first if
  // there is none. Throws what tracing or the passes throw (nothing is
  // kept then), and what the GraphModule throws.
  c10::IValue operator()(std::vector<c10::IValue> inputs);

  // What one specialization cost and how often it ran.
  struct Specialization {
    std::string shapes;  // "f32[1, 3, 224, 224]", ", "-separated per input
    double trace_ms = 0;
    double passes_ms = 0;
    int64_t runs = 0;
  };
  // The specializations held, most recently used first.
  std::vector<Specialization> specializations() const;
  // Specializations made and dropped since the cache was built.
  int64_t made() const;
  int64_t dropped() const;
  // A table of the above:
  //   3 specializations held (capacity 8), 3 made, 0 dropped
  //     shapes                 trace ms  passes ms  runs
  //     i64[1, 128]              1.21      30.40      12
  std::string report() const;

  // The key of inputs: their dtypes, sizes, strides and devices (values for
  // non-tensors), as report() shows them (strides only where not
  // contiguous).
  static std::string shapes_of(const std::vector<c10::IValue>& inputs);

 private:
  struct Entry;
  std::shared_ptr<Entry> entry_for(const std::string& key,
                                   const std::vector<c10::IValue>& inputs);

  TraceFunction trace_;
  SpecializationOptions options_;
  mutable std::mutex mutex_;
  std::mutex trace_mutex_;  // one trace at a time (tracing runs leaf modules)
  std::list<std::string> order_;  // most recently used first
  std::map<std::string, std::shared_ptr<Entry>> entries_;
  int64_t made_ = 0;
  int64_t dropped_ = 0;
};

}  // namespace fx
