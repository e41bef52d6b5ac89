#include "passes/pass.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "fx/ir/errors.h"

namespace fx {

bool bool_option(const std::string& pass, const std::string& option,
                 const std::string& value) {
  if (value == "true") return true;
  if (value == "false") return false;
  throw GraphError(absl::StrCat("pass ", pass, ": option ", option,
                                " takes true or false, not '", value, "'"));
}

int64_t int_option(const std::string& pass, const std::string& option,
                   const std::string& value) {
  int64_t out = 0;
  if (!absl::SimpleAtoi(value, &out)) {
    throw GraphError(absl::StrCat("pass ", pass, ": option ", option,
                                  " takes an integer, not '", value, "'"));
  }
  return out;
}

}  // namespace fx
