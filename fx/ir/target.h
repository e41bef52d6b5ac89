// Target: what a Node calls or names.
//
//   placeholder    the input's name                       "x"
//   get_attr       a qualified parameter/buffer path      "layer1.0.conv1.weight"
//   call_function  an operator (c10::OperatorHandle)      aten::conv2d, aten::add.Tensor
//                  or a registered C++ function           getitem, myproject::nms
//   call_module    a qualified submodule path             "layer1.0"
//   call_method    a tensor method name                   "relu"
//   output         "output"
#pragma once

#include <memory>
#include <string>
#include <string_view>

namespace c10 {
class OperatorHandle;
}

namespace fx {

class Function;

class Target {
 public:
  Target() = default;
  Target(std::string name) : name_(std::move(name)) {}
  Target(const char* name) : name_(name) {}
  explicit Target(const c10::OperatorHandle& op);
  Target(const Function* function) : function_(function) {}

  bool is_string() const { return !op_ && !function_; }
  bool is_operator() const { return op_ != nullptr; }
  bool is_function() const { return function_ != nullptr; }

  // Each throws fx::GraphError when the target is of another kind.
  const std::string& str() const;
  const c10::OperatorHandle& op() const;
  const Function& function() const;

  // "aten::conv2d", "aten::add.Tensor", "getitem", "conv1.weight".
  std::string to_string() const;

  friend bool operator==(const Target& a, const Target& b);
  friend bool operator!=(const Target& a, const Target& b) {
    return !(a == b);
  }

 private:
  std::string name_;
  std::shared_ptr<const c10::OperatorHandle> op_;
  const Function* function_ = nullptr;
};

// The operator named `qualified_name`: "aten::relu" (the default overload) or
// "aten::add.Tensor". Throws fx::GraphError naming the operator when no such
// operator is registered.
Target op(std::string_view qualified_name);

}  // namespace fx
