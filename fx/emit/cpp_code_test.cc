#include "fx/emit/cpp_code.h"

#include <regex>
#include <sstream>

#include "fx/ir/errors.h"
#include "fx/ir/graph.h"
#include "testdata/filecheck.h"
#include "third_party/catch.h"

namespace {

using fx::Node;

// Every `at::Tensor& NAME = ...;` a function declares is used later in that
// function (g++ -Wunused-variable, which the build treats as an error).
void check_member_references_used(const std::string& function) {
  static const std::regex declaration(R"(at::Tensor& (\w+) = \w+;)");
  for (auto it = std::sregex_iterator(function.begin(), function.end(),
                                      declaration);
       it != std::sregex_iterator(); ++it) {
    const std::string name = (*it)[1].str();
    const std::string rest = function.substr(it->position(0) + it->length(0));
    INFO(function);
    CHECK(std::regex_search(rest, std::regex("\\b" + name + "\\b")));
  }
}

// filecheck with its message and the text shown on failure.
void expect_filecheck(const std::string& checks, const std::string& text) {
  testdata::FileCheckResult result = testdata::filecheck(checks, text);
  INFO(result.message);
  INFO(text);
  CHECK(result.ok);
}

}  // namespace

TEST_CASE("a graph prints as one typed at::_ops call per node") {
  fx::Graph g;
  Node* x = g.placeholder("x");
  Node* w = g.get_attr("fc.weight");
  Node* t = g.call_function(fx::op("aten::t"), {w});
  Node* b = g.get_attr("fc.bias");
  Node* addmm = g.call_function(fx::op("aten::addmm"), {b, x, t});
  g.output(g.call_function(fx::op("aten::relu"), {addmm}));
  fx::codegen::Forward forward = fx::codegen::emit_forward(g);
  const std::string text = forward.text();
  // %x has no guard (nothing traced it): a c10::IValue, unboxed where used.
  expect_filecheck(R"(
    CHECK: forward(
    CHECK: at::Tensor& fc_weight = fc_weight_;
    CHECK-NEXT: auto t = at::_ops::t::call(fc_weight);
    CHECK-NEXT: at::Tensor& fc_bias = fc_bias_;
    CHECK-NEXT: auto addmm = at::_ops::addmm::call(fc_bias, x.toTensor(), t, 1, 1);
    CHECK-SAME: t.reset();
    CHECK-NEXT: auto relu = at::_ops::relu::call(addmm);
    CHECK-SAME: addmm.reset();
    CHECK-NEXT: return relu;
  )", text);
  REQUIRE(forward.tensors.size() == 2);
  CHECK(forward.tensors[0].name == "fc_weight_");
  CHECK(forward.tensors[0].path == "fc.weight");
  // Byte-identical across runs.
  CHECK(fx::codegen::emit_forward(g).text() == text);
}

TEST_CASE("split functions declare member references where they use them") {
  // x; relu; get_attr w; relu; add(relu_1, w): with one node per function
  // the part holding the get_attr does not use it.
  fx::Graph g;
  Node* x = g.placeholder("x");
  Node* r1 = g.call_function(fx::op("aten::relu"), {x});
  Node* w = g.get_attr("w");
  Node* r2 = g.call_function(fx::op("aten::relu"), {r1});
  Node* add = g.call_function(fx::op("aten::add.Tensor"), {r2, w});
  Node* mul = g.call_function(fx::op("aten::mul.Tensor"), {add, w});
  g.output(mul);
  fx::codegen::CodegenOptions options;
  options.max_nodes_per_function = 1;
  fx::codegen::Forward forward = fx::codegen::emit_forward(g, options);
  REQUIRE(forward.parts.size() >= 3);
  check_member_references_used(forward.signature + forward.body);
  int declarations = 0;
  for (const auto& part : forward.parts) {
    check_member_references_used(part.body);
    if (part.body.find("at::Tensor& w = w_;") != std::string::npos) {
      ++declarations;
    }
  }
  // Declared in the two parts that use it (add's and mul's), not in the
  // part that holds the get_attr.
  CHECK(declarations == 2);
  expect_filecheck(R"(
    CHECK: at::Tensor& w = w_;
    CHECK-NEXT: at::_ops::add_Tensor::call(relu_1, w, 1)
    CHECK: at::Tensor& w = w_;
    CHECK-NEXT: at::_ops::mul_Tensor::call(add, w)
  )", forward.text());
}

TEST_CASE("what C++ cannot express is a GraphError naming the node") {
  fx::Graph g;
  Node* x = g.placeholder("x");
  // An unknown keyword argument: the executor refuses it too.
  Node* relu = g.call_function(fx::op("aten::relu"), {x}, {{"alpha", 2}});
  g.output(relu);
  CHECK_THROWS_AS(fx::codegen::emit_forward(g), fx::GraphError);
  CHECK_THROWS_WITH(fx::codegen::emit_forward(g), Catch::Contains("alpha"));
}
