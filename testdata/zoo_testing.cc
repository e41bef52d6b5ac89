#include "testdata/zoo_testing.h"

#include <torch/torch.h>

#include "third_party/catch.h"

namespace testdata {

void check_outputs_equal(const c10::IValue& a, const c10::IValue& b) {
  if (a.isTensor()) {
    REQUIRE(b.isTensor());
    CHECK(a.toTensor().sizes() == b.toTensor().sizes());
    CHECK(torch::equal(a.toTensor(), b.toTensor()));
    return;
  }
  if (b.isGenericDict()) {
    REQUIRE(a.isGenericDict());
    const auto x = a.toGenericDict();
    const auto y = b.toGenericDict();
    REQUIRE(x.size() == y.size());
    auto xi = x.begin();
    for (const auto& item : y) {  // the same keys in the same order
      CHECK(xi->key() == item.key());
      check_outputs_equal(xi->value(), item.value());
      ++xi;
    }
    return;
  }
  REQUIRE(a.isTuple());
  REQUIRE(b.isTuple());
  const auto& x = a.toTupleRef().elements();
  const auto& y = b.toTupleRef().elements();
  REQUIRE(x.size() == y.size());
  for (size_t i = 0; i < x.size(); ++i) check_outputs_equal(x[i], y[i]);
}

bool outputs_bitwise_equal(const c10::IValue& a, const c10::IValue& b) {
  if (a.isTensor() && b.isTensor()) {
    return torch::equal(a.toTensor(), b.toTensor());
  }
  if (!a.isTuple() || !b.isTuple()) return false;
  const auto& xs = a.toTupleRef().elements();
  const auto& ys = b.toTupleRef().elements();
  if (xs.size() != ys.size()) return false;
  for (size_t i = 0; i < xs.size(); ++i) {
    if (!outputs_bitwise_equal(xs[i], ys[i])) return false;
  }
  return true;
}

}  // namespace testdata
