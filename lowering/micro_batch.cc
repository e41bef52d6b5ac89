#include "lowering/micro_batch.h"

#include <c10/core/ScalarType.h>

#include <algorithm>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "fx/ir/function.h"
#include "fx/ir/graph.h"
#include "passes/aliasing.h"
#include "passes/cost_model.h"
#include "passes/operator_families.h"

namespace fx {
namespace {

// The machine the choice assumes: two cores' convolution peak, main
// memory's bandwidth as one inference shares it, what a compute-bound
// kernel loses on a sample at a time, a call's own cost.
constexpr double kPeakFlopsPerSecond = 500e9;
constexpr double kMemoryBytesPerSecond = 20e9;
constexpr double kSplitLoss = 0.15;
constexpr double kCallSeconds = 2e-6;
// The least saving, as a share of the graph's time, worth a rewrite (the
// estimate is rough: MobileNetV2's 41% at batch 8 is 17-23% measured).
constexpr double kMinSaving = 0.02;
// A sample's rows (pixels) below which a compute-bound node ends the part.
constexpr int64_t kMinRows = 56 * 56;

int64_t bytes_of(const TensorMeta& m) {
  return m.numel() * static_cast<int64_t>(c10::elementSize(m.dtype));
}

// Whether `m` is a tensor whose dimension 0 is `batch`, fixed.
bool has_batch(const TensorMeta* m, int64_t batch) {
  return m != nullptr && !m->sizes.empty() && m->sizes[0] == batch &&
         (m->symbolic_sizes.empty() || m->symbolic_sizes[0].is_constant());
}

int64_t dim_arg(const Node& n, size_t index, int64_t fallback, size_t rank) {
  int64_t dim = fallback;
  if (index < n.args().size() && n.args()[index].is_int()) {
    dim = n.args()[index].to_int();
  }
  return dim < 0 ? dim + static_cast<int64_t>(rank) : dim;
}

// Whether the operator computes each sample of its output from the same
// sample of its activation inputs alone (its arguments permitting).
enum class PerSample { kNo, kOperator, kElementwise };

PerSample per_sample_operator(const Node& n, size_t rank) {
  if (has_trait(n, kPerSample)) {
    return PerSample::kOperator;  // its tensors from get_attr: weights
  }
  if (has_trait(n, kPerSampleElementwise)) return PerSample::kElementwise;
  if (n.is_call_to({"aten::slice.Tensor", "aten::cat"})) {
    return dim_arg(n, 1, 0, rank) != 0 ? PerSample::kElementwise
                                        : PerSample::kNo;
  }
  if (n.is_call_to({"aten::flatten.using_ints"})) {
    // From a dimension after the batch (counted from the front: the
    // output's rank is not the input's).
    const int64_t start =
        n.args().size() > 1 && n.args()[1].is_int() ? n.args()[1].to_int() : 0;
    return start >= 1 ? PerSample::kElementwise : PerSample::kNo;
  }
  if (n.is_call_to({"aten::permute"}) && n.args().size() > 1 &&
      n.args()[1].is_sequence()) {
    const std::vector<int64_t> dims = n.args()[1].to_int_list();
    return !dims.empty() && (dims[0] == 0 || dims[0] == -static_cast<int64_t>(
                                                             dims.size()))
               ? PerSample::kElementwise
               : PerSample::kNo;
  }
  if (n.is_call_to({"aten::layer_norm"}) && n.args().size() > 1 &&
      n.args()[1].is_sequence()) {
    return n.args()[1].elements().size() < rank ? PerSample::kElementwise
                                                 : PerSample::kNo;
  }
  return PerSample::kNo;
}

class MicroBatching {
 public:
  MicroBatching(Graph& graph, const MicroBatchOptions& options)
      : graph_(graph), options_(options) {}

  MicroBatchReport run() {
    MicroBatchReport report;
    if (!find_batch()) return report;
    find_part();
    // The micro-batch: as many samples as fit the budget in the largest
    // node taken to run from memory.
    int64_t per_sample = 0;
    for (const Node* n : part_) {
      if (moved_bytes(*n) >= options_.min_bytes) {
        per_sample = std::max(per_sample, moved_bytes(*n) / batch_);
      }
    }
    if (per_sample == 0) return report;
    int64_t micro = 1;
    for (int64_t d = batch_ / 2; d > 1; --d) {
      if (batch_ % d == 0 && d * per_sample <= options_.micro_batch_bytes) {
        micro = d;
        break;
      }
    }
    const size_t cut = choose_cut(batch_ / micro);
    if (cut == part_.size()) return report;
    rewrite(cut, micro);
    report.nodes = static_cast<int>(cut + 1);
    report.micro_batch = micro;
    report.micro_batches = batch_ / micro;
    return report;
  }

 private:
  // The batch: dimension 0 of the first tensor input, fixed and above 1.
  bool find_batch() {
    for (Node* p : graph_.placeholders()) {
      const TensorMeta* m = p->tensor_meta();
      if (m == nullptr || m->sizes.empty()) continue;
      if (!has_batch(m, m->sizes[0]) || m->sizes[0] < 2) return false;
      batch_ = m->sizes[0];
      return true;
    }
    return false;
  }

  bool batched_input(const Node& input) const {
    return input.op() == Opcode::kPlaceholder &&
           has_batch(input.tensor_meta(), batch_);
  }

  // The graph's leading per-sample nodes, in order: up to the first call
  // that is not one, or that is compute-bound on small images (whose
  // kernels run a sample at a time at a fraction of their speed on the
  // batch: DenseNet's 3x3 convolutions to 32 channels at 28x28, 1.5-1.8x
  // their time).
  void find_part() {
    for (Node* n : graph_.nodes()) {
      if (n->op() == Opcode::kPlaceholder || n->op() == Opcode::kGetAttr) {
        continue;
      }
      if (!per_sample(*n) || (compute_bound(*n) && rows(*n) < kMinRows)) {
        break;
      }
      part_.push_back(n);
      index_[n] = part_.size() - 1;
    }
  }

  bool per_sample(const Node& n) const {
    if (n.op() != Opcode::kCallFunction) return false;
    const TensorMeta* out = n.tensor_meta();
    if (!has_batch(out, batch_)) return false;
    const PerSample kind = per_sample_operator(n, out->sizes.size());
    if (kind == PerSample::kNo) return false;
    bool activation = false;
    for (const Node* in : n.all_input_nodes()) {
      if (index_.contains(in) || batched_input(*in)) {
        activation = true;
        continue;
      }
      if (in->op() != Opcode::kGetAttr) return false;
      if (kind == PerSample::kElementwise) {
        // A constant operand must broadcast over the batch.
        const TensorMeta* m = in->tensor_meta();
        if (m != nullptr && m->sizes.size() >= out->sizes.size() &&
            m->sizes[0] != 1) {
          return false;
        }
      }
    }
    return activation;
  }

  bool compute_bound(const Node& n) const {
    return estimate_node_cost(n).flops / kPeakFlopsPerSecond >=
           static_cast<double>(moved_bytes(n)) / kMemoryBytesPerSecond;
  }

  // The rows of a sample's output: pixels of an image (channels in
  // dimension 1 of a 4-d tensor), or rows of a linear layer's input.
  int64_t rows(const Node& n) const {
    const TensorMeta& m = *n.tensor_meta();
    const int64_t channels =
        m.sizes.size() == 4 ? m.sizes[1] : m.sizes.back();
    return channels > 0 ? m.numel() / (batch_ * channels) : 0;
  }

  // The bytes `n` reads from activations and writes, at the whole batch.
  int64_t moved_bytes(const Node& n) const {
    int64_t bytes = bytes_of(*n.tensor_meta());
    for (const Node* in : n.all_input_nodes()) {
      if (index_.contains(in) || batched_input(*in)) {
        bytes += bytes_of(*in->tensor_meta());
      }
    }
    return bytes;
  }

  // The values of part_[0..cut] that nodes after it read, in order.
  std::vector<Node*> crossing(size_t cut) const {
    std::vector<Node*> values;
    for (size_t i = 0; i <= cut; ++i) {
      for (Node* user : part_[i]->users()) {
        auto it = index_.find(user);
        if (it == index_.end() || it->second > cut) {
          values.push_back(part_[i]);
          break;
        }
      }
    }
    return values;
  }

  // What running `n` in `copies` micro-batches saves, in seconds: at the
  // whole batch, the larger of its compute and (if its activations
  // outgrow the caches) its memory traffic; in micro-batches, its compute
  // a little slower and a call per copy.
  double gain_seconds(const Node& n, int64_t copies) const {
    const double compute = estimate_node_cost(n).flops / kPeakFlopsPerSecond;
    const int64_t moved = moved_bytes(n);
    const double memory =
        moved >= options_.min_bytes
            ? static_cast<double>(moved) / kMemoryBytesPerSecond
            : 0.0;
    return std::max(compute, memory) - compute * (1 + kSplitLoss) -
           static_cast<double>(copies - 1) * kCallSeconds;
  }

  // The cut that saves most: the gains of the nodes up to it, less the
  // concatenation of the values crossing it (read and written once more),
  // which must share no storage (each is concatenated into a tensor of its
  // own). part_.size() when no cut saves anything.
  size_t choose_cut(int64_t copies) {
    size_t best = part_.size();
    double best_gain = 0;
    double gain = 0;
    StorageRoots roots;
    for (size_t cut = 0; cut < part_.size(); ++cut) {
      gain += gain_seconds(*part_[cut], copies);
      absl::flat_hash_set<Node*> seen;
      double crossing_bytes = 0;
      bool apart = true;
      for (Node* v : crossing(cut)) {
        apart = apart && seen.insert(roots(v)).second;
        crossing_bytes += static_cast<double>(bytes_of(*v->tensor_meta()));
      }
      const double net = gain - 2 * crossing_bytes / kMemoryBytesPerSecond;
      if (apart && net > best_gain) {
        best = cut;
        best_gain = net;
      }
    }
    // Not for a saving within the machine's noise: a share of the graph's
    // time at the whole batch, as the cost model's roofline prices it on
    // the machine above.
    const Machine machine{kPeakFlopsPerSecond, kMemoryBytesPerSecond};
    return best_gain >= kMinSaving * estimated_seconds(estimate_cost(graph_),
                                                       machine)
               ? best
               : part_.size();
  }

  static TensorMeta with_batch(TensorMeta m, int64_t batch) {
    m.sizes[0] = batch;
    if (!m.symbolic_sizes.empty()) {
      m.symbolic_sizes[0] = SizeExpr::constant(batch);
    }
    return m;
  }

  // Copies part_[0..cut] once per micro-batch. Copy c reads rows
  // [B*c/k, B*(c+1)/k) of each input, its batch B read when the graph runs
  // (sym_size): a graph whose input guard leaves the batch free (a
  // TorchScript file's) still serves every batch size, a smaller batch
  // leaving some copies empty.
  void rewrite(size_t cut, int64_t micro) {
    const int64_t copies = batch_ / micro;
    const std::vector<Node*> values = crossing(cut);
    std::vector<std::vector<Node*>> pieces(values.size());
    Node* const next = part_[cut]->next();
    {
      auto guard = graph_.inserting_before(next);
      absl::flat_hash_map<Node*, std::vector<Argument>> bounds;
      auto bounds_of = [&](Node* input) -> const std::vector<Argument>& {
        auto [it, added] = bounds.try_emplace(input);
        if (added) {
          Node* size =
              graph_.call_function(Target(sym_size()), {input, int64_t{0}});
          it->second.push_back(int64_t{0});
          for (int64_t c = 1; c < copies; ++c) {
            Node* scaled = graph_.call_function(Target(sym_mul()), {size, c});
            it->second.push_back(graph_.call_function(
                Target(sym_floordiv()), {scaled, copies}));
          }
          it->second.push_back(size);
        }
        return it->second;
      };
      for (int64_t c = 0; c < copies; ++c) {
        absl::flat_hash_map<Node*, Node*> copied;
        auto copy_of = [&](Node* in) -> Argument {
          auto it = copied.find(in);
          if (it != copied.end()) return it->second;
          if (!batched_input(*in)) return in;
          const std::vector<Argument>& rows = bounds_of(in);
          Node* slice = graph_.call_function(
              op("aten::slice.Tensor"),
              {in, int64_t{0}, rows[c], rows[c + 1], int64_t{1}});
          slice->meta().set(kTensorMeta, with_batch(*in->tensor_meta(), micro));
          copied[in] = slice;
          return slice;
        };
        for (size_t i = 0; i <= cut; ++i) {
          Node* copy = graph_.node_copy(*part_[i], copy_of);
          copy->meta().set(kTensorMeta,
                           with_batch(*part_[i]->tensor_meta(), micro));
          copied[part_[i]] = copy;
        }
        for (size_t v = 0; v < values.size(); ++v) {
          pieces[v].push_back(copied.at(values[v]));
        }
      }
      for (size_t v = 0; v < values.size(); ++v) {
        Node* cat =
            graph_.call_function(op("aten::cat"), {pieces[v], int64_t{0}});
        cat->meta().set(kTensorMeta, *values[v]->tensor_meta());
        values[v]->replace_all_uses_with(cat, [&](Node* user) {
          auto it = index_.find(user);
          return it == index_.end() || it->second > cut;
        });
      }
    }
    for (size_t i = cut + 1; i-- > 0;) graph_.erase_node(part_[i]);
  }

  Graph& graph_;
  const MicroBatchOptions& options_;
  int64_t batch_ = 0;
  std::vector<Node*> part_;
  absl::flat_hash_map<const Node*, size_t> index_;
};

}  // namespace

MicroBatchReport micro_batch(GraphModuleImpl& module,
                             const MicroBatchOptions& options) {
  return MicroBatching(module.graph(), options).run();
}

bool MicroBatch::run(GraphModuleImpl& module) {
  report_ = {};
  const std::vector<Node*> calls =
      module.graph().find_nodes(Opcode::kCallFunction);
  if (std::none_of(calls.begin(), calls.end(), [](const Node* n) {
        return n->is_call_to({"fx_onednn::conv", "fx_onednn::conv_add_",
                              "fx_onednn::conv_transpose",
                              "fx_onednn::linear"});
      })) {
    return false;
  }
  report_ = micro_batch(module);
  return report_.nodes > 0;
}

}  // namespace fx
