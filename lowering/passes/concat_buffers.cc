// The pass onednn_concat_buffers: chains of concatenations along the
// channels of channels-last float32 values (DenseNet's blocks), each
// extending the one before, write each piece once into one buffer
// (fx_onednn::concat_buffer / concat_write_), each concatenation a view of
// its first channels, rather than copying every piece again into each.
#include <algorithm>
#include <memory>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "fx/ir/operator_schemas.h"
#include "fx/runtime/graph_module.h"
#include "lowering/passes/passes.h"
#include "lowering/passes/rewrite_support.h"
#include "passes/aliasing.h"

namespace fx {
namespace lowering {
namespace {

class ConcatBuffers : public LoweringPass {
 public:
  explicit ConcatBuffers(const InferenceOptions& options)
      : LoweringPass("onednn_concat_buffers", options) {}

 private:
  // A concatenation along the channels of 4-d float32 channels-last values
  // of one fixed size but the channels, that nothing writes in place
  // (directly or through a view): its pieces; else nothing.
  static std::optional<std::vector<Node*>> concat_pieces(
      const Node& n, const Chains& chains) {
    if (!n.is_call_to({"aten::cat"}) || !chains.contains(&n)) {
      return std::nullopt;
    }
    const CallArguments arg(n);
    const Argument dim = arg["dim"];
    const TensorMeta* out = n.tensor_meta();
    if (!dim.is_int() || (dim.to_int() != 1 && dim.to_int() != -3) ||
        out == nullptr || !fixed_4d_float(*out) || !arg["tensors"].is_list()) {
      return std::nullopt;
    }
    std::vector<Node*> pieces;
    for (const Argument& a : arg["tensors"].elements()) {
      const TensorMeta* m = a.is_node() ? a.to_node()->tensor_meta() : nullptr;
      if (m == nullptr || !fixed_4d_float(*m) || m->sizes[0] != out->sizes[0] ||
          m->sizes[2] != out->sizes[2] || m->sizes[3] != out->sizes[3]) {
        return std::nullopt;
      }
      pieces.push_back(a.to_node());
    }
    if (written_through(&n)) return std::nullopt;
    return pieces;
  }

  // Whether a user writes `value` in place, or a view of it (a user that
  // may share its storage, followed).
  static bool written_through(const Node* value) {
    std::vector<const Node*> work = {value};
    for (size_t seen = 0; !work.empty(); ++seen) {
      const Node* v = work.back();
      work.pop_back();
      if (seen > 64) return true;  // too many views to follow: assume so
      for (const Node* user : v->users()) {
        const std::vector<Node*> written = written_in_place(*user);
        if (std::find(written.begin(), written.end(), v) != written.end()) {
          return true;
        }
        if (aliased_input(*user) == v) work.push_back(user);
      }
    }
    return false;
  }

  static bool fixed_4d_float(const TensorMeta& m) {
    if (m.sizes.size() != 4 || m.dtype != c10::ScalarType::Float ||
        !m.device.is_cpu()) {
      return false;
    }
    for (const SizeExpr& e : m.symbolic_sizes) {
      if (!e.is_constant()) return false;
    }
    return true;
  }

  // Chains of concatenations along the channels, each extending the one
  // before it by the pieces it appends (DenseNet's blocks: each layer
  // reads the concatenation of the block's outputs so far), write each
  // piece once into one buffer; each concatenation becomes a view of the
  // buffer's first channels, which later writes leave as they are:
  //   %cat = aten::cat([%a], 1)                    %a: 32 channels, %b, %c: 16
  //   %cat_1 = aten::cat([%a, %b], 1)
  //   %cat_2 = aten::cat([%a, %b, %c], 1)
  // become
  //   %concat_buffer = fx_onednn::concat_buffer([%a], 64)
  //   %slice = aten::slice.Tensor(%concat_buffer, 1, 0, 32)
  //   %concat_write_ = fx_onednn::concat_write_(%concat_buffer, [%b], 32)
  //   %slice_1 = aten::slice.Tensor(%concat_write_, 1, 0, 48)
  //   %concat_write__1 = fx_onednn::concat_write_(%concat_write_, [%c], 48)
  // (the last the whole buffer).
  bool rewrite(GraphModuleImpl& module) override {
    Graph& graph = module.graph();
    const Chains chains = Chains::of(graph);
    // Program order, of the concatenations.
    absl::flat_hash_map<const Node*, int64_t> position;
    // Each concatenation's pieces, a piece that is a concatenation itself
    // (cat([cat([a, b]), c]), as C++ code grows a tensor) replaced by its
    // own.
    std::vector<Node*> cats;  // in program order
    absl::flat_hash_map<Node*, std::vector<Node*>> flat;
    absl::flat_hash_map<std::vector<Node*>, Node*> by_pieces;
    for (Node* n : graph.nodes()) {
      auto pieces = concat_pieces(*n, chains);
      if (!pieces) continue;
      const int64_t place = static_cast<int64_t>(position.size());
      position[n] = place;
      std::vector<Node*> all;
      for (Node* piece : *pieces) {
        auto it = flat.find(piece);
        if (it == flat.end()) {
          all.push_back(piece);
        } else {
          all.insert(all.end(), it->second.begin(), it->second.end());
        }
      }
      by_pieces.emplace(all, n);
      flat[n] = std::move(all);
      cats.push_back(n);
    }
    // Each concatenation's longest predecessor (the one whose pieces begin
    // its own), and how many extend each.
    absl::flat_hash_map<Node*, Node*> before;
    absl::flat_hash_map<Node*, int> extended;
    for (Node* n : cats) {
      const std::vector<Node*>& pieces = flat[n];
      for (size_t k = pieces.size() - 1; k > 0; --k) {
        auto it = by_pieces.find(
            std::vector<Node*>(pieces.begin(), pieces.begin() + k));
        if (it != by_pieces.end() && position[it->second] < position[n]) {
          before[n] = it->second;
          ++extended[it->second];
          break;
        }
      }
    }
    // The chains, from the heads (concatenations extending none), each link
    // the only extension of the one before.
    absl::flat_hash_map<Node*, Node*> after;
    for (const auto& [n, b] : before) {
      if (extended[b] == 1) after[b] = n;
    }
    for (Node* head : cats) {
      if (before.count(head) > 0 && extended[before[head]] == 1) continue;
      std::vector<Node*> chain = {head};
      while (after.count(chain.back()) > 0) chain.push_back(after[chain.back()]);
      if (chain.size() < 2) continue;
      const int64_t capacity = chain.back()->tensor_meta()->sizes[1];
      Node* buffer = nullptr;
      int64_t filled = 0;    // channels written so far
      size_t written = 0;    // pieces written so far
      for (Node* cat : chain) {
        const std::vector<Node*>& pieces = flat[cat];
        const int64_t channels = cat->tensor_meta()->sizes[1];
        auto guard = graph.inserting_before(cat);
        const TensorMeta whole = channels_last_meta([&] {
          TensorMeta m = *cat->tensor_meta();
          m.sizes[1] = capacity;
          return m;
        }());
        if (buffer == nullptr) {
          buffer = graph.call_function(
              fx::op("fx_onednn::concat_buffer"),
              {Argument(pieces), capacity});
        } else {
          const std::vector<Node*> appended(pieces.begin() + written,
                                            pieces.end());
          buffer = graph.call_function(fx::op("fx_onednn::concat_write_"),
                                        {buffer, Argument(appended), filled});
        }
        buffer->meta().set(kTensorMeta, whole);
        written = pieces.size();
        filled = channels;
        Node* view = buffer;
        if (channels < capacity) {
          view = graph.call_function(fx::op("aten::slice.Tensor"),
                                      {buffer, int64_t{1}, int64_t{0}, channels});
          TensorMeta m = *cat->tensor_meta();
          m.strides = whole.strides;
          m.memory_format = c10::MemoryFormat::Preserve;
          view->meta().set(kTensorMeta, m);
        }
        cat->replace_all_uses_with(view);
        graph.erase_node(cat);
        ++report().concatenations;
      }
      ++report().concat_buffers;
    }
    return report().concat_buffers > 0;
  }

};

}  // namespace

std::unique_ptr<Pass> make_concat_buffers(const InferenceOptions& options) {
  return std::make_unique<ConcatBuffers>(options);
}

}  // namespace lowering
}  // namespace fx
