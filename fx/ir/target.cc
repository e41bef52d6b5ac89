#include "fx/ir/target.h"

#include <ATen/core/dispatch/Dispatcher.h>

#include "absl/strings/str_cat.h"
#include "fx/ir/errors.h"
#include "fx/ir/function.h"

namespace fx {

Target::Target(const c10::OperatorHandle& op)
    : op_(std::make_shared<const c10::OperatorHandle>(op)) {}

const std::string& Target::str() const {
  if (!is_string()) {
    throw GraphError(absl::StrCat("target ", to_string(),
                                  " is not a string target"));
  }
  return name_;
}

const c10::OperatorHandle& Target::op() const {
  if (!op_) {
    throw GraphError(absl::StrCat("target ", to_string(),
                                  " is not an operator"));
  }
  return *op_;
}

const Function& Target::function() const {
  if (!function_) {
    throw GraphError(absl::StrCat("target ", to_string(),
                                  " is not a registered function"));
  }
  return *function_;
}

std::string Target::to_string() const {
  if (op_) {
    const c10::OperatorName& name = op_->operator_name();
    return name.overload_name.empty()
               ? name.name
               : absl::StrCat(name.name, ".", name.overload_name);
  }
  if (function_) return function_->name();
  return name_;
}

bool operator==(const Target& a, const Target& b) {
  if (a.op_ || b.op_) {
    return a.op_ && b.op_ && a.op_->operator_name() == b.op_->operator_name();
  }
  if (a.function_ || b.function_) return a.function_ == b.function_;
  return a.name_ == b.name_;
}

Target op(std::string_view qualified_name) {
  std::string name(qualified_name);
  std::string overload;
  size_t ns = name.find("::");
  size_t dot = name.find('.', ns == std::string::npos ? 0 : ns + 2);
  if (dot != std::string::npos) {
    overload = name.substr(dot + 1);
    name = name.substr(0, dot);
  }
  auto handle = c10::Dispatcher::singleton().findSchema({name, overload});
  if (!handle) {
    throw GraphError(absl::StrCat(
        "no operator named '", std::string(qualified_name),
        "' is registered: check the namespace, name and overload (as in "
        "'aten::add.Tensor'; no overload means the default one) and that the "
        "library defining it is linked into this program"));
  }
  return Target(*handle);
}

}  // namespace fx
