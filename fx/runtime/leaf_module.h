// LeafModule: a submodule that graphs call as one opaque call_module node.
//
// C++ modules have no common forward signature, so a leaf module is kept
// with a boxed adapter that unpacks IValues into its typed forward. The
// tracer makes one for every module it keeps as a leaf (fx::call);
// fx::make_leaf_module builds one for a module whose forward is not
// overloaded:
//
//   attributes.modules["gate"] = fx::make_leaf_module(model->gate);
#pragma once

#include <memory>
#include <type_traits>

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "fx/runtime/boxing.h"

namespace fx {

using BoxedForward =
    std::function<c10::IValue(const std::vector<c10::IValue>& inputs)>;

struct LeafModule {
  std::shared_ptr<torch::nn::Module> module;
  BoxedForward forward;
};

namespace detail {
template <typename Impl>
std::shared_ptr<Impl> module_ptr(const std::shared_ptr<Impl>& module) {
  return module;
}
template <typename Impl>
std::shared_ptr<Impl> module_ptr(const torch::nn::ModuleHolder<Impl>& module) {
  return module.ptr();
}
}  // namespace detail

// A LeafModule for `module` (a std::shared_ptr<Impl> or a TORCH_MODULE
// holder) calling its forward.
template <typename ModuleType>
LeafModule make_leaf_module(const ModuleType& module) {
  auto ptr = detail::module_ptr(module);
  return LeafModule{ptr, box_forward(ptr, ptr->name() + ".forward")};
}

}  // namespace fx
