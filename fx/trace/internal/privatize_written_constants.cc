#include "fx/trace/internal/privatize_written_constants.h"

#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "fx/ir/errors.h"
#include "fx/ir/function.h"
#include "fx/ir/operator_schemas.h"

namespace fx {
namespace internal {

void privatize_written_constants(Graph& graph, const Attributes& attributes) {
  // How many constants each storage holds: a copy of one of several would
  // not be seen through the others.
  absl::flat_hash_map<const c10::StorageImpl*, int> sharing;
  for (const auto& [path, tensor] : attributes.buffers) {
    if (tensor.has_storage()) ++sharing[tensor.storage().unsafeGetStorageImpl()];
  }
  for (Node* constant : graph.find_nodes(Opcode::kGetAttr)) {
    if (!attributes.buffers.count(constant->target().str())) continue;
    bool written = false;
    std::vector<const Node*> work{constant};
    absl::flat_hash_set<const Node*> seen{constant};
    while (!work.empty() && !written) {
      const Node* value = work.back();
      work.pop_back();
      for (Node* user : value->users()) {
        bool aliases = false;
        if (user->op() == Opcode::kCallFunction &&
            user->target().is_function() &&
            &user->target().function() == fx::getitem()) {
          aliases = true;  // an element of a view's list is a view
        } else if (std::optional<AliasedUse> use = aliased_use(*user, value)) {
          // (Leaf modules and wrapped functions are taken not to write
          // their inputs, as torch::nn modules do not.)
          aliases = use->aliased;
          written = written || use->written;
        }
        if (aliases && seen.insert(user).second) work.push_back(user);
      }
    }
    if (!written) continue;
    const at::Tensor& tensor = attributes.buffers.at(constant->target().str());
    if (tensor.has_storage() &&
        sharing[tensor.storage().unsafeGetStorageImpl()] > 1) {
      throw TraceError(absl::StrCat(
          "forward writes into the tensor %", constant->name(),
          " (a constant of the graph, made before forward or from C++ data) "
          "which shares memory with another constant: one tensor written by "
          "every run cannot be recorded. Make the tensor in forward from the "
          "input (x.new_zeros, torch::zeros(..., x.options())), or register "
          "it as a buffer"));
    }
    Node* copy;
    {
      auto guard = graph.inserting_after(constant);
      copy = graph.call_function(op("aten::clone"), {constant});
    }
    // clone keeps a dense tensor's strides.
    if (const TensorMeta* meta = constant->meta().get(kTensorMeta)) {
      copy->meta().set(kTensorMeta, *meta);
    }
    constant->replace_all_uses_with(copy);
  }
}

}  // namespace internal
}  // namespace fx
