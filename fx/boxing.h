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
// void (returns None).
#pragma once

#include <cstddef>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <ATen/core/ivalue.h>

#include "fx/errors.h"

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
  auto call = [module](auto&&... args) {
    return module->forward(std::forward<decltype(args)>(args)...);
  };
  return detail::box<typename Traits::Return, typename Traits::ArgsTuple>(
      std::move(name), std::move(call));
}

}  // namespace fx
