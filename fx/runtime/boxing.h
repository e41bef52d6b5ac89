// Boxing: typed C++ callables as functions over c10::IValue.
//
// A graph calls leaf modules and wrapped functions with boxed values; these
// templates build the adapter from the callable's own signature:
//
//   torch::Tensor nms(const torch::Tensor& boxes, double threshold);
//   fx::BoxedFunction boxed = fx::box_function(&nms);
//   boxed({boxes, 0.5})  // == nms(boxes, 0.5), as an IValue
//
// Supported parameter and return types: at::Tensor (by value or const&),
// int64_t, double, bool, std::string, c10::optional<T>, std::vector<T>,
// c10::ArrayRef<T> (parameters), std::tuple<...> (nested), c10::IValue, and
// void (returns None). An undefined at::Tensor is None. A module's forward
// boxed with fewer inputs than it has parameters gets the module's own
// defaults (FORWARD_HAS_DEFAULT_ARGS), as a C++ call would:
//
//   fx::box_forward(mha)({q, kv, kv})  // == mha->forward(q, kv, kv)
#pragma once

#include <cstddef>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <ATen/core/ivalue.h>
#include <torch/nn/modules/container/any.h>

#include "fx/ir/errors.h"

namespace fx {
namespace detail {

// What a parameter of type T is unboxed into: an owning value that converts
// to T (ArrayRef parameters are backed by a vector).
template <typename T>
struct Unboxed {
  using type = std::decay_t<T>;
};
template <typename E>
struct Unboxed<c10::ArrayRef<E>> {
  using type = std::vector<E>;
};
template <typename E>
struct Unboxed<const c10::ArrayRef<E>&> {
  using type = std::vector<E>;
};

template <typename T>
T from_ivalue(const c10::IValue& value) {
  if constexpr (std::is_same_v<T, c10::IValue>) {
    return value;
  } else if constexpr (std::is_same_v<T, at::Tensor>) {
    // An undefined tensor (C++'s "no tensor", e.g. MultiheadAttention's
    // key_padding_mask = {}) is None in a graph.
    return value.isNone() ? at::Tensor() : value.toTensor();
  } else {
    return value.to<T>();
  }
}

template <typename T>
c10::IValue to_ivalue(T&& value) {
  using D = std::decay_t<T>;
  if constexpr (std::is_same_v<D, c10::IValue>) {
    return std::forward<T>(value);
  } else if constexpr (std::is_same_v<D, std::vector<at::Tensor>>) {
    return c10::IValue(c10::List<at::Tensor>(value));
  } else {
    return c10::IValue(std::forward<T>(value));
  }
}

template <typename Signature>
struct FunctionTraits;
template <typename R, typename... Args>
struct FunctionTraits<R(Args...)> {
  using Return = R;
  using ArgsTuple = std::tuple<Args...>;
  static constexpr size_t arity = sizeof...(Args);
};
template <typename R, typename... Args>
struct FunctionTraits<R (*)(Args...)> : FunctionTraits<R(Args...)> {};
template <typename C, typename R, typename... Args>
struct FunctionTraits<R (C::*)(Args...)> : FunctionTraits<R(Args...)> {};
template <typename C, typename R, typename... Args>
struct FunctionTraits<R (C::*)(Args...) const> : FunctionTraits<R(Args...)> {};

// The signature of a function pointer, function, or lambda (its call
// operator).
template <typename F, typename = void>
struct CallableTraits : FunctionTraits<decltype(&F::operator())> {};
template <typename F>
struct CallableTraits<F, std::enable_if_t<std::is_pointer_v<F> ||
                                          std::is_function_v<F>>>
    : FunctionTraits<std::remove_pointer_t<F>> {};

// Calls `f` on inputs unboxed as Args.
template <typename R, typename ArgsTuple, typename F, size_t... I>
c10::IValue call_unboxed(F& f, const std::vector<c10::IValue>& inputs,
                         std::index_sequence<I...>) {
  std::tuple<typename Unboxed<std::tuple_element_t<I, ArgsTuple>>::type...>
      unboxed(from_ivalue<
              typename Unboxed<std::tuple_element_t<I, ArgsTuple>>::type>(
          inputs[I])...);
  if constexpr (std::is_void_v<R>) {
    f(std::get<I>(unboxed)...);
    return c10::IValue();
  } else {
    return to_ivalue(f(std::get<I>(unboxed)...));
  }
}

template <typename R, typename ArgsTuple, typename F>
std::function<c10::IValue(const std::vector<c10::IValue>&)> box(
    std::string what, F f) {
  constexpr size_t arity = std::tuple_size_v<ArgsTuple>;
  return [what = std::move(what), f = std::move(f)](
             const std::vector<c10::IValue>& inputs) mutable {
    if (inputs.size() != arity) {
      throw ExecutionError(what + " takes " + std::to_string(arity) +
                           " argument(s) but " +
                           std::to_string(inputs.size()) + " were given");
    }
    return call_unboxed<R, ArgsTuple>(f, inputs,
                                      std::make_index_sequence<arity>{});
  };
}

// Whether torch::nn::AnyModule can hold a module whose forward takes Args
// and returns R (no void return, no non-const references).
template <typename R, typename... Args>
constexpr bool any_module_can_hold(std::tuple<Args...>*) {
  return !std::is_void_v<R> &&
         ((!std::is_lvalue_reference_v<Args> ||
           std::is_const_v<std::remove_reference_t<Args>>) &&
          ...);
}

// Calls `any` with the first K inputs, unboxed as Args' first K types: the
// module fills in the rest from its defaults (FORWARD_HAS_DEFAULT_ARGS).
template <typename R, typename ArgsTuple, size_t... I>
c10::IValue call_with_first(torch::nn::AnyModule& any,
                            const std::vector<c10::IValue>& inputs,
                            std::index_sequence<I...>) {
  torch::nn::AnyValue out = any.any_forward(
      std::decay_t<std::tuple_element_t<I, ArgsTuple>>(from_ivalue<
          std::decay_t<std::tuple_element_t<I, ArgsTuple>>>(inputs[I]))...);
  return to_ivalue(out.get<std::decay_t<R>>());
}

template <typename R, typename ArgsTuple, size_t... K>
c10::IValue call_with_defaults(torch::nn::AnyModule& any,
                               const std::vector<c10::IValue>& inputs,
                               std::index_sequence<K...>) {
  c10::IValue out;
  auto call_if = [&](auto k) {
    if (inputs.size() == decltype(k)::value) {
      out = call_with_first<R, ArgsTuple>(
          any, inputs, std::make_index_sequence<decltype(k)::value>{});
    }
  };
  (call_if(std::integral_constant<size_t, K>{}), ...);
  return out;
}

}  // namespace detail

// Boxes a function pointer (or a lambda with one, non-template operator()).
template <typename F>
std::function<c10::IValue(const std::vector<c10::IValue>&)> box_function(
    F f, std::string name = "function") {
  using Traits = detail::CallableTraits<F>;
  return detail::box<typename Traits::Return, typename Traits::ArgsTuple>(
      std::move(name), std::move(f));
}

// Boxes `module->forward`, for a module class whose forward is not
// overloaded or a template.
template <typename ModulePtr>
std::function<c10::IValue(const std::vector<c10::IValue>&)> box_forward(
    ModulePtr module, std::string name = "forward") {
  using Impl = std::decay_t<decltype(*module)>;
  using Traits = detail::FunctionTraits<decltype(&Impl::forward)>;
  using Return = typename Traits::Return;
  using ArgsTuple = typename Traits::ArgsTuple;
  constexpr size_t arity = std::tuple_size_v<ArgsTuple>;
  auto call = [module](auto&&... args) {
    return module->forward(std::forward<decltype(args)>(args)...);
  };
  auto full = detail::box<Return, ArgsTuple>(name, std::move(call));
  if constexpr (arity == 0 || !detail::any_module_can_hold<Return>(
                                  static_cast<ArgsTuple*>(nullptr))) {
    return full;
  } else {
    // Fewer inputs than parameters: the module's own default arguments, as
    // C++ fills them in (FORWARD_HAS_DEFAULT_ARGS, read by AnyModule).
    auto any = std::make_shared<torch::nn::AnyModule>(
        std::shared_ptr<Impl>(module));
    return [full = std::move(full), any, name = std::move(name)](
               const std::vector<c10::IValue>& inputs) -> c10::IValue {
      if (inputs.size() >= arity) return full(inputs);
      try {
        return detail::call_with_defaults<Return, ArgsTuple>(
            *any, inputs, std::make_index_sequence<arity>{});
      } catch (const c10::Error& e) {
        if (e.msg().find("argument(s)") == std::string::npos) throw;
        throw ExecutionError(name + " takes " + std::to_string(arity) +
                             " argument(s) but " +
                             std::to_string(inputs.size()) +
                             " were given (and declares no defaults for "
                             "the rest with FORWARD_HAS_DEFAULT_ARGS): " +
                             e.what_without_backtrace());
      }
    };
  }
}

}  // namespace fx
