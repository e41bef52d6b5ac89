// Between the quantization entry points (not a public API): where
// prepare_fx puts observers, which prepare_qat_fx follows with fake
// quantizers, and the step back from a quantization-aware training module
// to a prepared one, which convert_fx takes.
#pragma once

#include <string>
#include <vector>

#include <ATen/core/ivalue.h>

#include "fx/runtime/graph_module.h"
#include "passes/patterns.h"
#include "quantization/qconfig.h"

namespace fx::quantization_internal {

// One observer prepare_fx inserts: on an activation (role "input" or
// "output"), or on a weight (role "weight": `value` is the get_attr,
// `root` the quantized operator reading it through `weight`).
struct PlannedObserver {
  Node* value = nullptr;
  ObserverSpec spec;
  std::string role;
  Node* root = nullptr;
  Weight weight;
};

// prepare_fx's steps before observers: a copy with batch norms folded
// (those after linear layers only with `fold_linear`) and dropouts
// removed, and tensor metadata (from `example_inputs` when the graph has
// none). `what` names the caller in errors.
GraphModule inference_copy(const GraphModule& module,
                           const std::vector<c10::IValue>& example_inputs,
                           const char* what, bool fold_linear = true);

// Where prepare_fx puts observers in `module` (an inference_copy).
std::vector<PlannedObserver> plan_observers(GraphModuleImpl& module,
                                            const QConfigMapping& mapping);

// An fx_quant::observe node of `value` for `spec` whose state, `state`, is
// registered as the buffer `path`; inserted after `value`, its uses left
// to the caller.
Node* insert_observer(GraphModuleImpl& module, Node* value,
                      const ObserverSpec& spec, const at::Tensor& state,
                      const std::string& path, const std::string& role);

// The node that reads `weight` for the operator `root`: root itself, or the
// aten::t between them; an observer of the weight goes before it.
Node* weight_reader(const Weight& weight, Node* root);

// Whether `module` holds observers or fake quantizers (it was prepared).
bool is_prepared(const GraphModuleImpl& module);

// Whether `module` holds fake quantizers (prepare_qat_fx's).
bool is_qat_module(const GraphModuleImpl& module);

// A module prepare_qat_fx made (and training changed), as prepare_fx would
// have prepared the trained model in inference mode: batch norms folded
// with their running statistics, dropouts removed, and an observer where
// each fake quantizer was, holding its range.
GraphModule qat_as_prepared(const GraphModuleImpl& module);

}  // namespace fx::quantization_internal
