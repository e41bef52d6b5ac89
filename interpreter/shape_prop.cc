#include "interpreter/shape_prop.h"

#include <utility>

namespace fx {

ShapeProp::ShapeProp(GraphModule module) : Interpreter(std::move(module)) {}

c10::IValue ShapeProp::propagate_keeping_buffers(std::vector<c10::IValue> inputs) {
  std::vector<std::pair<at::Tensor, at::Tensor>> saved;  // the buffer, its values
  for (const auto& [path, tensor] : module_->tensor_attributes()) {
    if (!module_->is_parameter(path)) saved.emplace_back(tensor, tensor.clone());
  }
  auto restore = [&] {
    at::NoGradGuard no_grad;
    for (auto& [buffer, values] : saved) buffer.copy_(values);
  };
  c10::IValue result;
  try {
    result = propagate(std::move(inputs));
  } catch (...) {
    restore();
    throw;
  }
  restore();
  return result;
}

c10::IValue ShapeProp::propagate(std::vector<c10::IValue> inputs) {
  recorded_.clear();
  c10::IValue result;
  try {
    result = run(std::move(inputs));
  } catch (...) {
    recorded_.clear();
    throw;
  }
  for (Node* n : module_->graph().nodes()) {
    auto it = recorded_.find(n);
    if (it == recorded_.end()) continue;
    Recorded& r = it->second;
    n->meta().erase(kTensorMeta.name);
    n->meta().erase(kTensorMetaList.name);
    switch (r.kind) {
      case Recorded::Kind::kTensor:
        n->meta().set(kTensorMeta, std::move(r.tensor));
        break;
      case Recorded::Kind::kTensorList:
        n->meta().set(kTensorMetaList, std::move(r.tensors));
        break;
      case Recorded::Kind::kNone: break;
    }
  }
  recorded_.clear();
  return result;
}

c10::IValue ShapeProp::run_node(const Node& node) {
  c10::IValue value = Interpreter::run_node(node);
  Recorded r;
  if (value.isTensor()) {
    r.kind = Recorded::Kind::kTensor;
    r.tensor = tensor_meta_of(value.toTensor());
  } else if (value.isTuple() || value.isList()) {
    c10::ArrayRef<c10::IValue> items =
        value.isTuple() ? value.toTupleRef().elements() : value.toListRef();
    bool all_tensors = !items.empty();
    for (const c10::IValue& item : items) {
      all_tensors = all_tensors && item.isTensor();
    }
    if (all_tensors) {
      r.kind = Recorded::Kind::kTensorList;
      for (const c10::IValue& item : items) {
        r.tensors.push_back(tensor_meta_of(item.toTensor()));
      }
    }
  }
  recorded_[&node] = std::move(r);
  return value;
}

}  // namespace fx
