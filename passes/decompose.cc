#include "passes/decompose.h"

#include <cmath>

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "fx/ir/errors.h"
#include "fx/ir/operator_schemas.h"
#include "fx/runtime/graph_module.h"
#include "interpreter/transformer.h"

namespace fx {
namespace {

class Decomposer : public Transformer {
 public:
  Decomposer(GraphModule module, const DecompositionTable& table)
      : Transformer(std::move(module)), table_(table) {}

  c10::IValue call_function(const Node& node, const Target& target,
                            std::vector<c10::IValue> args,
                            IValueKwargs kwargs) override {
    if (target.is_operator()) {
      // One lookup by name per operator, not per node.
      const c10::FunctionSchema* key = &target.op().schema();
      auto cached = rules_.find(key);
      if (cached == rules_.end()) {
        cached = rules_.emplace(key, table_.find(target)).first;
      }
      if (const DecompositionRule* rule = cached->second) {
        ++decomposed;
        return (*rule)(bind_arguments(target.op().schema(), std::move(args),
                                      std::move(kwargs)));
      }
    }
    return Transformer::call_function(node, target, std::move(args),
                                      std::move(kwargs));
  }

  int decomposed = 0;

 private:
  const DecompositionTable& table_;
  absl::flat_hash_map<const c10::FunctionSchema*, const DecompositionRule*>
      rules_;
};

at::Tensor tensor(const std::vector<c10::IValue>& args, size_t i) {
  return args.at(i).toTensor();
}

}  // namespace

DecompositionTable& DecompositionTable::add(const std::string& op_name,
                                            DecompositionRule rule) {
  rules_[op(op_name).to_string()] = std::move(rule);
  return *this;
}

const DecompositionRule* DecompositionTable::find(const Target& target) const {
  auto it = rules_.find(target.to_string());
  return it == rules_.end() ? nullptr : &it->second;
}

std::vector<std::string> DecompositionTable::names() const {
  std::vector<std::string> out;
  for (const auto& entry : rules_) out.push_back(entry.first);
  return out;
}

const DecompositionTable& default_decompositions() {
  static const DecompositionTable* table = [] {
    auto* t = new DecompositionTable();
    t->add("aten::relu", [](const std::vector<c10::IValue>& a) {
      at::Tensor x = tensor(a, 0);
      return c10::IValue((x > 0) * x);
    });
    t->add("aten::relu_", [](const std::vector<c10::IValue>& a) {
      at::Tensor x = tensor(a, 0);
      return c10::IValue(x.mul_(x > 0));
    });
    t->add("aten::hardtanh", [](const std::vector<c10::IValue>& a) {
      return c10::IValue(
          at::clamp(tensor(a, 0), a.at(1).toScalar(), a.at(2).toScalar()));
    });
    t->add("aten::hardtanh_", [](const std::vector<c10::IValue>& a) {
      return c10::IValue(
          tensor(a, 0).clamp_(a.at(1).toScalar(), a.at(2).toScalar()));
    });
    t->add("aten::relu6", [](const std::vector<c10::IValue>& a) {
      return c10::IValue(at::clamp(tensor(a, 0), 0, 6));
    });
    t->add("aten::silu", [](const std::vector<c10::IValue>& a) {
      at::Tensor x = tensor(a, 0);
      return c10::IValue(x * at::sigmoid(x));
    });
    t->add("aten::hardsigmoid", [](const std::vector<c10::IValue>& a) {
      return c10::IValue(at::clamp(tensor(a, 0) + 3, 0, 6) / 6);
    });
    t->add("aten::hardswish", [](const std::vector<c10::IValue>& a) {
      at::Tensor x = tensor(a, 0);
      return c10::IValue(x * at::clamp(x + 3, 0, 6) / 6);
    });
    t->add("aten::gelu", [](const std::vector<c10::IValue>& a) {
      at::Tensor x = tensor(a, 0);
      if (a.at(1).toStringRef() == "tanh") {
        const double k = std::sqrt(2.0 / M_PI);
        return c10::IValue(0.5 * x *
                           (1 + at::tanh(k * (x + 0.044715 * x * x * x))));
      }
      return c10::IValue(0.5 * x * (1 + at::erf(x / std::sqrt(2.0))));
    });
    t->add("aten::linear", [](const std::vector<c10::IValue>& a) {
      at::Tensor y = at::matmul(tensor(a, 0), tensor(a, 1).t());
      if (!a.at(2).isNone()) y = y + tensor(a, 2);
      return c10::IValue(y);
    });
    t->add("aten::addmm", [](const std::vector<c10::IValue>& a) {
      at::Tensor product = at::mm(tensor(a, 1), tensor(a, 2));
      const c10::Scalar beta = a.at(3).toScalar();
      const c10::Scalar alpha = a.at(4).toScalar();
      at::Tensor self = tensor(a, 0);
      if (!(alpha.isIntegral(false) && alpha.toLong() == 1)) {
        product = product * alpha;
      }
      if (!(beta.isIntegral(false) && beta.toLong() == 1)) self = self * beta;
      return c10::IValue(self + product);
    });
    return t;
  }();
  return *table;
}

bool decompose(GraphModuleImpl& module, const DecompositionTable& table) {
  GraphModule holder(
      std::static_pointer_cast<GraphModuleImpl>(module.shared_from_this()));
  Decomposer decomposer(holder, table);
  Transformer::Result decomposed = decomposer.transform_graph();
  if (decomposer.decomposed == 0) return false;
  module.set_graph(std::move(decomposed.graph),
                   std::move(decomposed.attributes));
  return true;
}

}  // namespace fx
