#include "fx/io/input_spec.h"

#include <map>

#include <ATen/ATen.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "fx/ir/errors.h"

namespace fx {
namespace {

// Ordered, so that errors list the names in a fixed order; the first name of
// each dtype is the one to_string prints.
const std::vector<std::pair<std::string, c10::ScalarType>>& dtype_names() {
  static const auto* names =
      new std::vector<std::pair<std::string, c10::ScalarType>>{
          {"float32", at::kFloat}, {"float", at::kFloat},
          {"float64", at::kDouble}, {"double", at::kDouble},
          {"float16", at::kHalf},  {"bfloat16", at::kBFloat16},
          {"int64", at::kLong},    {"int32", at::kInt},
          {"int8", at::kChar},     {"uint8", at::kByte},
          {"bool", at::kBool}};
  return *names;
}

GraphError bad_spec(const std::string& spec, const std::string& why) {
  return GraphError(absl::StrCat(
      "input spec '", spec, "': ", why,
      "; write sizes joined by 'x' and an optional dtype, e.g. "
      "1x3x224x224 or 1x3x224x224:float32"));
}

}  // namespace

InputSpec parse_input_spec(const std::string& spec) {
  std::vector<std::string> parts = absl::StrSplit(spec, ':');
  if (parts.size() > 2) throw bad_spec(spec, "more than one ':'");
  InputSpec parsed;
  if (parts.size() == 2) {
    bool found = false;
    std::vector<std::string> names;
    for (const auto& [name, dtype] : dtype_names()) {
      names.push_back(name);
      if (name == parts[1]) {
        parsed.dtype = dtype;
        found = true;
      }
    }
    if (!found) {
      throw bad_spec(spec, absl::StrCat("unknown dtype '", parts[1],
                                        "' (known: ",
                                        absl::StrJoin(names, ", "), ")"));
    }
  }
  if (parts[0].empty()) throw bad_spec(spec, "no sizes");
  int64_t numel = 1;
  for (absl::string_view s : absl::StrSplit(parts[0], 'x')) {
    int64_t size = 0;
    if (!absl::SimpleAtoi(s, &size) || size < 0) {
      throw bad_spec(spec, absl::StrCat("'", std::string(s),
                                        "' is not a size (a non-negative "
                                        "integer)"));
    }
    if (size != 0 && numel > INT64_MAX / size) {
      throw bad_spec(spec, "the sizes' product overflows int64");
    }
    numel *= size;
    parsed.sizes.push_back(size);
  }
  return parsed;
}

std::string to_string(const InputSpec& spec) {
  for (const auto& [name, dtype] : dtype_names()) {
    if (dtype == spec.dtype) {
      return absl::StrCat(absl::StrJoin(spec.sizes, "x"), ":", name);
    }
  }
  throw GraphError(absl::StrCat("an input spec cannot name the dtype ",
                                c10::toString(spec.dtype)));
}

at::Tensor example_input(const std::string& spec) {
  InputSpec parsed = parse_input_spec(spec);
  try {
    return at::zeros(parsed.sizes, at::TensorOptions().dtype(parsed.dtype));
  } catch (const c10::Error& e) {
    throw bad_spec(spec, absl::StrCat("cannot allocate the tensor: ",
                                      e.what_without_backtrace()));
  }
}

}  // namespace fx
