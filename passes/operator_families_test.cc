// The table of operator families: every operator it declares exists, the
// families and traits read through a node, and a second declaration of an
// operator refused.
#include <ATen/core/dispatch/Dispatcher.h>

#include <string>

#include "fx/ir/graph.h"
#include "fx/ir/target.h"
#include "passes/operator_families.h"
#include "third_party/catch.h"

namespace {

TEST_CASE("every operator the table declares is a registered operator") {
  size_t aten = 0;
  for (const auto& [name, info] : fx::operator_families()) {
    CAPTURE(name);
    if (name.rfind("aten::", 0) != 0) continue;
    ++aten;
    const size_t dot = name.find('.');
    const std::string base = name.substr(0, dot);
    const std::string overload =
        dot == std::string::npos ? "" : name.substr(dot + 1);
    CHECK(c10::Dispatcher::singleton().findSchema({base, overload})
              .has_value());
  }
  CHECK(aten >= 60);
}

TEST_CASE("families and traits are read through the node") {
  fx::Graph g;
  fx::Node* x = g.placeholder("x");
  fx::Node* w = g.placeholder("w");
  fx::Node* conv =
      g.call_function(fx::op("aten::conv2d.padding"), {x, w});
  fx::Node* relu6 = g.call_function(fx::op("aten::relu6_"), {conv});
  fx::Node* sigmoid = g.call_function(fx::op("aten::sigmoid"), {relu6});
  fx::Node* softmax =
      g.call_function(fx::op("aten::softmax.int"), {sigmoid, int64_t{1}});
  g.output(softmax);

  CHECK(fx::in_family(*conv, fx::OperatorFamily::kConvolution));
  CHECK_FALSE(fx::in_family(*conv, fx::OperatorFamily::kConvTranspose));
  CHECK(fx::has_trait(*conv, fx::kPerSample));
  CHECK_FALSE(fx::has_trait(*conv, fx::kKeepsLayout));

  CHECK(fx::in_family(*relu6, fx::OperatorFamily::kActivation));
  CHECK(fx::has_trait(*relu6, fx::kClampLike));
  CHECK(fx::has_trait(*relu6, fx::kKeepsLayout));
  CHECK(fx::has_trait(*relu6, fx::kQuantPassThrough));

  CHECK(fx::has_trait(*sigmoid, fx::kFixedQParams));
  CHECK_FALSE(fx::has_trait(*sigmoid, fx::kClampLike));

  // Not declared: no family, no trait.
  CHECK(fx::operator_family(*softmax) == nullptr);
  CHECK_FALSE(fx::has_trait(*softmax, fx::kKeepsLayout));
  CHECK(fx::operator_family(*x) == nullptr);
}

TEST_CASE("an operator is declared once") {
  using Catch::Matchers::Contains;
  CHECK_THROWS_WITH(fx::register_operator_family(
                        "aten::relu", fx::OperatorFamily::kActivation, 0),
                    Contains("aten::relu has a family already"));
  fx::register_operator_family("test::op", fx::OperatorFamily::kLowered,
                               fx::kPerSample);
  bool found = false;
  for (const auto& [name, info] : fx::operator_families()) {
    if (name == "test::op") {
      found = true;
      CHECK(info.traits == fx::kPerSample);
    }
  }
  CHECK(found);
}

}  // namespace
