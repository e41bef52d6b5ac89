#include "scheduling/parallel.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <ATen/Parallel.h>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "fx/ir/errors.h"
#include "fx/ir/function.h"
#include "fx/ir/meta.h"
#include "passes/aliasing.h"
#include "passes/split_module.h"
#include "passes/timing.h"
#include "third_party/libgomp.h"

namespace fx {
namespace {

bool is_getitem(const Node* n) {
  return n->op() == Opcode::kCallFunction && n->target().is_function() &&
         &n->target().function() == getitem();
}

}  // namespace

class ParallelModuleImpl::Impl {
 public:
  Impl(const GraphModule& module, const ParallelOptions& options)
      : sequential_(module), options_(options) {
    if (options.workers < 1 || options.threads_per_worker < 1) {
      throw GraphError(absl::StrCat(
          "parallelize_branches: ", options.workers, " workers of ",
          options.threads_per_worker,
          " threads; give at least 1 worker and 1 thread per worker"));
    }
    if (!module->object_attributes().empty()) {
      throw GraphError(
          "parallelize_branches: the module holds script objects (packed "
          "int8 weights), which its segments cannot share; parallelize the "
          "float graph");
    }
    module->graph().lint();
    if (!options.node_seconds) {
      weights_ = weights_in(estimate_cost(module->graph()).total.weight_bytes,
                            options.machine);
    }
    assign_segments();
    split_ = split_module(module, [this](const Node& n) {
      return segment_of_.at(&n);
    });
    build_tasks();
    schedule_tasks();
    use_parallel_ = !cyclic_ && options.workers > 1 &&
                    schedule_.parallel_seconds < schedule_.all_threads_seconds;
    if (cyclic_) return;
    if (use_parallel_ || options.decide_by_measuring) start_workers();
    if (options.decide_by_measuring && !options.example_inputs.empty()) {
      decide_by_measuring();
    }
  }

  ~Impl() { stop_workers(); }

  const ParallelSchedule& schedule() const { return schedule_; }
  bool used_parallel() const { return use_parallel_; }
  double parallel_ms() const { return parallel_ms_; }
  double sequential_ms() const { return sequential_ms_; }
  const GraphModule& sequential() const { return sequential_; }

 private:
  // --- Segments and the schedule -------------------------------------------

  double seconds_of(const Node& n) const {
    if (options_.node_seconds) return options_.node_seconds(n);
    return estimated_seconds(estimate_node_cost(n), options_.machine, weights_);
  }

  // Maximal chains: a node joins the segment of its only computed input
  // when it is that input's only user (getitem always joins its tuple's).
  void assign_segments() {
    int64_t next = 0;
    for (Node* n : sequential_->graph().nodes()) {
      if (!n->is_call()) continue;
      std::set<Node*> inputs;
      for (Node* input : n->all_input_nodes()) {
        if (input->is_call()) inputs.insert(input);
      }
      Node* only = inputs.size() == 1 ? *inputs.begin() : nullptr;
      if (only != nullptr && (is_getitem(n) || only->users().size() == 1)) {
        segment_of_[n] = segment_of_.at(only);
      } else {
        segment_of_[n] = next++;
      }
      const double seconds = std::max(seconds_of(*n), 0.0);
      segment_seconds_[segment_of_[n]] += seconds;
      // On all the threads: split `workers` ways at a price, where that
      // pays (aten's kernels keep small work on one thread).
      schedule_.all_threads_seconds += std::min(
          seconds, seconds / static_cast<double>(options_.workers) +
                       options_.thread_split_seconds);
    }
  }

  // Segment pairs (before, after) that in-place writes order: every reader
  // of the written storage before the write, and after it.
  std::set<std::pair<int64_t, int64_t>> in_place_order() {
    std::set<std::pair<int64_t, int64_t>> order;
    absl::flat_hash_map<const Node*, int64_t> position;
    absl::flat_hash_map<Node*, std::vector<Node*>> by_root;
    int64_t p = 0;
    for (Node* n : sequential_->graph().nodes()) {
      position[n] = p++;
      by_root[roots_(n)].push_back(n);
    }
    for (Node* writer : sequential_->graph().nodes()) {
      auto w = segment_of_.find(writer);
      if (w == segment_of_.end()) continue;
      for (Node* value : written_in_place(*writer)) {
        for (Node* alias : by_root[roots_(value)]) {
          for (Node* reader : alias->users()) {
            auto r = segment_of_.find(reader);
            if (reader == writer || r == segment_of_.end() ||
                r->second == w->second) {
              continue;
            }
            if (position.at(reader) < position.at(writer)) {
              order.emplace(r->second, w->second);
            } else {
              order.emplace(w->second, r->second);
            }
          }
        }
      }
    }
    return order;
  }

  // The graph calling the segments: one task per call_module node.
  void build_tasks() {
    const Graph& top = split_->graph();
    int64_t index = 0;
    for (Node* n : top.nodes()) {
      slot_[n] = index++;
      if (n->op() != Opcode::kCallModule) continue;
      Task task;
      task.node = n;
      task.module = std::dynamic_pointer_cast<GraphModuleImpl>(
          split_->leaf_module(n->target().str())->module);
      const std::string& name = n->target().str();
      task.segment = std::stoll(name.substr(name.find('_') + 1));
      task.seconds = segment_seconds_[task.segment];
      task_of_segment_[task.segment] = static_cast<int64_t>(tasks_.size());
      tasks_.push_back(std::move(task));
    }
    for (Task& task : tasks_) {
      std::set<int64_t> deps;
      for (Node* input : task.node->all_input_nodes()) {
        Node* source = is_getitem(input) ? input->all_input_nodes()[0] : input;
        if (source->op() == Opcode::kCallModule) {
          deps.insert(slot_.at(source));
        }
      }
      task.waits_for.assign(deps.begin(), deps.end());
    }
    for (const auto& [before, after] : in_place_order()) {
      Task& task = tasks_[task_of_segment_.at(after)];
      const int64_t slot = slot_.at(tasks_[task_of_segment_.at(before)].node);
      if (std::find(task.waits_for.begin(), task.waits_for.end(), slot) ==
          task.waits_for.end()) {
        task.waits_for.push_back(slot);
      }
    }
    slots_ = index;
  }

  // List scheduling (HEFT): tasks by their longest path to the end, each
  // on the worker where it finishes first.
  void schedule_tasks() {
    const size_t count = tasks_.size();
    absl::flat_hash_map<int64_t, size_t> task_at_slot;
    for (size_t t = 0; t < count; ++t) task_at_slot[slot_.at(tasks_[t].node)] = t;
    std::vector<std::vector<size_t>> successors(count);
    for (size_t t = 0; t < count; ++t) {
      for (int64_t slot : tasks_[t].waits_for) {
        successors[task_at_slot.at(slot)].push_back(t);
      }
    }
    // Kahn's algorithm, the ready task of highest rank first. Ranks (the
    // longest path to the end) come from a first pass in reverse order.
    auto kahn = [&](const std::function<bool(size_t, size_t)>& first) {
      std::vector<size_t> waiting(count);
      for (size_t t = 0; t < count; ++t) waiting[t] = tasks_[t].waits_for.size();
      std::set<size_t, std::function<bool(size_t, size_t)>> ready(first);
      for (size_t t = 0; t < count; ++t) {
        if (waiting[t] == 0) ready.insert(t);
      }
      std::vector<size_t> order;
      while (!ready.empty()) {
        const size_t t = *ready.begin();
        ready.erase(ready.begin());
        order.push_back(t);
        for (size_t s : successors[t]) {
          if (--waiting[s] == 0) ready.insert(s);
        }
      }
      return order;
    };
    std::vector<size_t> topological = kahn(std::less<size_t>());
    schedule_.segments = static_cast<int64_t>(count);
    for (const Task& task : tasks_) schedule_.sequential_seconds += task.seconds;
    if (topological.size() < count) {
      // In-place writes order two segments both ways (a view read before
      // a write and after it): no schedule keeps the program's order.
      cyclic_ = true;
      schedule_.workers.assign(static_cast<size_t>(options_.workers), {});
      schedule_.parallel_seconds = schedule_.sequential_seconds;
      return;
    }
    std::vector<double> rank(count, 0);
    for (size_t i = count; i-- > 0;) {
      const size_t t = topological[i];
      double longest = 0;
      for (size_t s : successors[t]) longest = std::max(longest, rank[s]);
      rank[t] = tasks_[t].seconds + longest;
    }
    topological = kahn([&](size_t a, size_t b) {
      return rank[a] != rank[b] ? rank[a] > rank[b] : a < b;
    });
    const size_t workers = static_cast<size_t>(options_.workers);
    std::vector<double> free_at(workers, 0);
    std::vector<double> finish(count, 0);
    plan_.assign(workers, {});
    for (size_t t : topological) {
      double ready = 0;
      for (int64_t slot : tasks_[t].waits_for) {
        ready = std::max(ready, finish[task_at_slot.at(slot)]);
      }
      size_t best = 0;
      double best_finish = 0;
      for (size_t w = 0; w < workers; ++w) {
        const double f = std::max(ready, free_at[w]) + tasks_[t].seconds;
        if (w == 0 || f < best_finish) {
          best = w;
          best_finish = f;
        }
      }
      finish[t] = best_finish;
      free_at[best] = best_finish;
      plan_[best].push_back(t);
    }
    schedule_.workers.assign(workers, {});
    for (size_t w = 0; w < workers; ++w) {
      for (size_t t : plan_[w]) {
        schedule_.workers[w].push_back(tasks_[t].node->target().str());
      }
    }
    schedule_.parallel_seconds =
        *std::max_element(free_at.begin(), free_at.end());
  }

  // --- Running ---------------------------------------------------------------

  struct Task {
    Node* node = nullptr;
    std::shared_ptr<GraphModuleImpl> module;
    int64_t segment = 0;
    double seconds = 0;
    std::vector<int64_t> waits_for;  // slots of the top graph
  };

  // One run's values and progress.
  struct Frame {
    std::vector<c10::IValue> values;
    std::vector<char> done;
    std::mutex mutex;
    std::condition_variable changed;
    std::exception_ptr error;
  };

  c10::IValue value_of(Frame& frame, Node* n) {
    if (is_getitem(n)) {
      const c10::IValue& container = frame.values[slot_.at(n->all_input_nodes()[0])];
      const int64_t index = n->args()[1].to_int();
      return container.isTuple() ? container.toTupleRef().elements()[index]
                                 : container.toList().get(index);
    }
    if (n->op() == Opcode::kGetAttr) {
      return split_->fetch_attribute(n->target().str());
    }
    return frame.values[slot_.at(n)];
  }

  c10::IValue evaluate(Frame& frame, const Argument& arg) {
    if (arg.is_node()) return value_of(frame, arg.to_node());
    if (arg.is_none()) return c10::IValue();
    if (arg.is_tuple() || arg.is_list()) {
      std::vector<c10::IValue> elements;
      for (const Argument& element : arg.elements()) {
        elements.push_back(evaluate(frame, element));
      }
      return c10::ivalue::Tuple::create(std::move(elements));
    }
    throw GraphError("parallelize_branches: the graph returns a constant");
  }

  void run_worker(size_t w, Frame& frame) {
    for (size_t t : plan_[w]) {
      const Task& task = tasks_[t];
      {
        std::unique_lock<std::mutex> lock(frame.mutex);
        frame.changed.wait(lock, [&] {
          if (frame.error) return true;
          for (int64_t slot : task.waits_for) {
            if (!frame.done[slot]) return false;
          }
          return true;
        });
        if (frame.error) return;
      }
      try {
        std::vector<c10::IValue> args;
        for (const Argument& arg : task.node->args()) {
          args.push_back(evaluate(frame, arg));
        }
        c10::IValue result = task.module->forward(std::move(args));
        std::lock_guard<std::mutex> lock(frame.mutex);
        frame.values[slot_.at(task.node)] = std::move(result);
        frame.done[slot_.at(task.node)] = 1;
      } catch (...) {
        std::lock_guard<std::mutex> lock(frame.mutex);
        if (!frame.error) frame.error = std::current_exception();
      }
      frame.changed.notify_all();
    }
  }

  // --- Worker threads --------------------------------------------------------

  void start_workers() {
    for (int64_t w = 0; w < options_.workers; ++w) {
      threads_.emplace_back([this, w] { worker_loop(static_cast<size_t>(w)); });
    }
  }

  void stop_workers() {
    {
      std::lock_guard<std::mutex> lock(pool_mutex_);
      stopping_ = true;
    }
    pool_changed_.notify_all();
    for (std::thread& t : threads_) t.join();
    threads_.clear();
  }

  void worker_loop(size_t w) {
    ThreadsOfThisThread threads(static_cast<int>(options_.threads_per_worker));
    uint64_t seen = 0;
    while (true) {
      Frame* frame = nullptr;
      {
        std::unique_lock<std::mutex> lock(pool_mutex_);
        pool_changed_.wait(lock, [&] { return stopping_ || generation_ != seen; });
        if (stopping_) return;
        seen = generation_;
        frame = frame_;
      }
      run_worker(w, *frame);
      {
        std::lock_guard<std::mutex> lock(pool_mutex_);
        ++finished_;
      }
      pool_done_.notify_all();
    }
  }

 public:
  // Runs the schedule on the workers (the calling thread waits).
  c10::IValue run_schedule(std::vector<c10::IValue> inputs) {
    std::vector<Node*> placeholders = split_->graph().placeholders();
    Frame frame;
    frame.values.resize(slots_);
    frame.done.assign(slots_, 0);
    for (size_t i = 0; i < placeholders.size() && i < inputs.size(); ++i) {
      frame.values[slot_.at(placeholders[i])] = std::move(inputs[i]);
      frame.done[slot_.at(placeholders[i])] = 1;
    }
    {
      std::lock_guard<std::mutex> lock(pool_mutex_);
      frame_ = &frame;
      finished_ = 0;
      ++generation_;
    }
    pool_changed_.notify_all();
    {
      std::unique_lock<std::mutex> lock(pool_mutex_);
      pool_done_.wait(lock, [&] {
        return finished_ == static_cast<int64_t>(threads_.size());
      });
      frame_ = nullptr;
    }
    if (frame.error) std::rethrow_exception(frame.error);
    const Node* output = split_->graph().output_node();
    return output->args().empty() ? c10::IValue()
                                  : evaluate(frame, output->args()[0]);
  }

 private:
  void decide_by_measuring() {
    const int rounds = std::max(options_.measure_rounds, 1);
    const int total_threads =
        static_cast<int>(options_.workers * options_.threads_per_worker);
    std::vector<double> parallel;
    std::vector<double> sequential;
    ThreadsOfThisThread threads(total_threads);
    sequential_->forward(options_.example_inputs);
    checked_forward(options_.example_inputs);
    for (int r = 0; r < rounds; ++r) {
      parallel.push_back(
          time_ms([&] { checked_forward(options_.example_inputs); }));
      sequential.push_back(
          time_ms([&] { sequential_->forward(options_.example_inputs); }));
    }
    parallel_ms_ = median(parallel);
    sequential_ms_ = median(sequential);
    use_parallel_ = parallel_ms_ < sequential_ms_;
  }

 public:
  // The schedule; the segments reading the graph's inputs check the
  // tracer's guards on them (and the training mode), as split_module keeps
  // them.
  c10::IValue checked_forward(std::vector<c10::IValue> inputs) {
    const size_t expected = split_->graph().placeholders().size();
    if (inputs.size() != expected) {
      throw GuardError(absl::StrCat("the module takes ", expected,
                                    " input(s) but ", inputs.size(),
                                    " were given"));
    }
    return run_schedule(std::move(inputs));
  }

 private:
  GraphModule sequential_;
  ParallelOptions options_;
  // Where the cost model finds the graph's weights (all workers share one
  // cache).
  WeightsIn weights_ = WeightsIn::kCache;
  absl::flat_hash_map<const Node*, int64_t> segment_of_;
  std::map<int64_t, double> segment_seconds_;
  StorageRoots roots_;
  GraphModule split_{nullptr};
  absl::flat_hash_map<const Node*, int64_t> slot_;
  int64_t slots_ = 0;
  std::vector<Task> tasks_;
  std::map<int64_t, int64_t> task_of_segment_;
  std::vector<std::vector<size_t>> plan_;
  ParallelSchedule schedule_;
  bool use_parallel_ = false;
  // No order of the segments keeps the program's in-place order.
  bool cyclic_ = false;
  double parallel_ms_ = 0;
  double sequential_ms_ = 0;

  std::vector<std::thread> threads_;
  std::mutex pool_mutex_;
  std::condition_variable pool_changed_;
  std::condition_variable pool_done_;
  uint64_t generation_ = 0;
  int64_t finished_ = 0;
  bool stopping_ = false;
  Frame* frame_ = nullptr;
};

ParallelModuleImpl::ParallelModuleImpl(const GraphModule& module,
                                       const ParallelOptions& options)
    : impl_(std::make_unique<Impl>(module, options)) {}
ParallelModuleImpl::~ParallelModuleImpl() = default;

c10::IValue ParallelModuleImpl::forward(std::vector<c10::IValue> inputs) {
  if (!impl_->used_parallel()) {
    GraphModule sequential = impl_->sequential();
    return sequential->forward(std::move(inputs));
  }
  return impl_->checked_forward(std::move(inputs));
}
const ParallelSchedule& ParallelModuleImpl::schedule() const {
  return impl_->schedule();
}
bool ParallelModuleImpl::used_parallel() const { return impl_->used_parallel(); }
double ParallelModuleImpl::measured_parallel_ms() const {
  return impl_->parallel_ms();
}
double ParallelModuleImpl::measured_sequential_ms() const {
  return impl_->sequential_ms();
}
const GraphModule& ParallelModuleImpl::sequential() const {
  return impl_->sequential();
}

ParallelModule parallelize_branches(const GraphModule& module,
                                    const ParallelOptions& options) {
  return ParallelModule(std::make_shared<ParallelModuleImpl>(module, options));
}

std::string format_schedule(const ParallelSchedule& schedule) {
  std::string text = absl::StrFormat(
      "%d segments; predicted %s on one worker, %s sequential on all the "
      "threads, %s on %d workers\n",
      schedule.segments, format_seconds(schedule.sequential_seconds),
      format_seconds(schedule.all_threads_seconds),
      format_seconds(schedule.parallel_seconds), schedule.workers.size());
  for (size_t w = 0; w < schedule.workers.size(); ++w) {
    absl::StrAppend(&text, "worker ", w, ": ",
                    absl::StrJoin(schedule.workers[w], ", "), "\n");
  }
  return text;
}

}  // namespace fx
