// What a node writes in place and what storage its value shares, from the
// operators' schemas: the one reading of alias annotations that the passes
// and schedulers which reorder or separate nodes (split_module, the
// pipeline's cuts, parallel branches) share.
//
//   %v = aten::view(%y, [32])        aliased_input(v) = %y   (Tensor(a) -> Tensor(a))
//   %r = aten::relu_(%v)             written_in_place(r) = {%v}, aliased_input(r) = %v
//   StorageRoots roots;  roots(%r) == roots(%v) == %y
#pragma once

#include <vector>

#include "absl/container/flat_hash_map.h"
#include "fx/ir/node.h"

namespace fx {

// The nodes `node` writes in place: the arguments its operator's schema
// marks as written (Tensor(a!)), or the tensor of an in-place method call
// (a name ending in '_').
std::vector<Node*> written_in_place(const Node& node);

// The input whose storage `node`'s value may share, or nullptr: the
// argument an operator's schema gives the result's alias set (views,
// in-place ops), the container of a getitem, and (conservatively) the
// tensor of any method call.
Node* aliased_input(const Node& node);

// Each node's storage root: aliased_input followed to its end (the node
// itself when it aliases nothing). Remembers what it found; iterative, so
// long chains of views do not deepen the stack.
class StorageRoots {
 public:
  Node* operator()(Node* node);

 private:
  absl::flat_hash_map<Node*, Node*> roots_;
};

}  // namespace fx
