// The pass onednn_channels_last: activations stay channels-last between
// lowered convolutions, through the operators of a chain (their values:
// lowering/passes/rewrite_support.h's Chains); they are converted where a
// chain starts (once per value) and where anything else reads them. In
// bfloat16 chains (lower_onednn_convolutions{bf16=true}) the chains' 4-d
// values are bfloat16, converted to it where they start and back to
// float32 where they end.
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "fx/ir/operator_schemas.h"
#include "fx/runtime/graph_module.h"
#include "lowering/passes/passes.h"
#include "lowering/passes/rewrite_support.h"

namespace fx {
namespace lowering {
namespace {

// How many lowered convolutions read `value`.
int64_t lowered_readers(const Node& value) {
  int64_t readers = 0;
  for (const Node* user : value.users()) {
    readers += is_lowered_convolution(*user);
  }
  return readers;
}

// Operators that read any layout right and keep nothing of it.
bool reads_any_layout(const Node& n) {
  return n.is_call_to({"aten::flatten.using_ints", "aten::reshape",
                       "aten::mean.dim", "aten::size.int", "aten::dim",
                       "aten::sum.dim_IntList", "aten::contiguous"});
}

// A conversion this pass makes in bfloat16: aten::to.dtype to `dtype` in
// `format` (so that running the pass again adds none).
bool is_conversion(const Node& n, c10::ScalarType dtype,
                   c10::MemoryFormat format) {
  if (!n.is_call_to({"aten::to.dtype"})) return false;
  const CallArguments arg(n);
  const Argument to = arg["dtype"], memory_format = arg["memory_format"];
  return to.is_dtype() && to.to_dtype() == dtype &&
         memory_format.is_memory_format() &&
         memory_format.to_memory_format() == format;
}

// Whether `user` reads a chain's value right as it is: another lowered
// convolution, an operator of the chain, or one that reads its layout
// (in bfloat16, only its sizes and the conversion back to float32: the
// value's dtype must not escape).
bool reads_chain_value(const Node& user, bool bf16) {
  if (is_lowered_convolution(user) || in_chain(user, bf16)) return true;
  if (bf16) {
    return user.is_call_to({"aten::size.int", "aten::dim"}) ||
           is_conversion(user, c10::ScalarType::Float,
                         c10::MemoryFormat::Contiguous);
  }
  return reads_any_layout(user);
}

class KeepChannelsLast : public LoweringPass {
 public:
  explicit KeepChannelsLast(const InferenceOptions& options)
      : LoweringPass("onednn_channels_last", options) {}

 private:
  bool rewrite(GraphModuleImpl& module) override {
    Graph& graph = module.graph();
    const Chains chains = Chains::of(graph);
    if (chains.values.empty()) return false;
    bool marked = false;
    if (chains.bf16) {
      // 4-d chains run in bfloat16 (other convolutions convert inside).
      for (const Node* n : chains.values) {
        TensorMeta* m = const_cast<Node*>(n)->meta().get_mutable(kTensorMeta);
        if (m != nullptr && m->sizes.size() == 4 &&
            m->dtype != c10::ScalarType::BFloat16) {
          m->dtype = c10::ScalarType::BFloat16;
          marked = true;
        }
      }
    }
    absl::flat_hash_map<Node*, Node*> converted;
    for (Node* n : graph.nodes()) {
      // A chain's start: a lowered convolution reading another layout.
      // One convolution converts its input itself (an image of 3 channels
      // on a kernel of ours: the first convolution of a vision model in
      // half of aten's time); a value several read is converted once.
      if (is_lowered_convolution(*n)) {
        Node* input = CallArguments(*n)["input"].to_node();
        const TensorMeta* m = input->tensor_meta();
        const bool converted_already =
            chains.bf16 && is_conversion(*input, c10::ScalarType::BFloat16,
                                         c10::MemoryFormat::ChannelsLast);
        if (!chains.contains(input) && !converted_already && m != nullptr &&
            m->sizes.size() == 4 &&
            (chains.bf16 || converted.count(input) > 0 ||
             lowered_readers(*input) > 1) &&
            (chains.bf16 ||
             m->memory_format != c10::MemoryFormat::ChannelsLast)) {
          auto [it, fresh] = converted.emplace(input, nullptr);
          if (fresh) {
            auto guard = graph.inserting_before(n);
            TensorMeta meta = channels_last_meta(*m);
            if (chains.bf16) {
              it->second = graph.call_function(
                  fx::op("aten::to.dtype"), {input, c10::ScalarType::BFloat16},
                  {{"memory_format", c10::MemoryFormat::ChannelsLast}});
              meta.dtype = c10::ScalarType::BFloat16;
            } else {
              it->second = graph.call_function(
                  fx::op("aten::contiguous"), {input},
                  {{"memory_format", c10::MemoryFormat::ChannelsLast}});
            }
            it->second->meta().set(kTensorMeta, meta);
            ++report().layout_conversions;
          }
          n->replace_input_with(input, it->second);
        }
      }
    }
    // A chain's ends: whatever reads a channels-last value but is not known
    // to read it right gets it contiguous.
    for (Node* value : graph.nodes()) {
      if (!chains.contains(value)) continue;
      Node* contiguous = nullptr;
      // A snapshot: replacing the input of a user edits value's users.
      for (Node* user : value->users().to_vector()) {
        if (reads_chain_value(*user, chains.bf16)) continue;
        if (contiguous == nullptr) {
          auto guard = graph.inserting_before(value->next());
          contiguous =
              chains.bf16
                  ? graph.call_function(
                        fx::op("aten::to.dtype"),
                        {value, c10::ScalarType::Float},
                        {{"memory_format", c10::MemoryFormat::Contiguous}})
                  : graph.call_function(fx::op("aten::contiguous"), {value});
          if (const TensorMeta* m = value->tensor_meta()) {
            TensorMeta meta = *m;
            meta.strides = strides_for(meta.sizes, c10::MemoryFormat::Contiguous);
            meta.memory_format = c10::MemoryFormat::Contiguous;
            meta.dtype = c10::ScalarType::Float;
            contiguous->meta().set(kTensorMeta, meta);
          }
          ++report().layout_conversions;
        }
        user->replace_input_with(value, contiguous);
      }
    }
    return marked || report().layout_conversions > 0;
  }
};

}  // namespace

std::unique_ptr<Pass> make_channels_last(const InferenceOptions& options) {
  return std::make_unique<KeepChannelsLast>(options);
}

}  // namespace lowering
}  // namespace fx
