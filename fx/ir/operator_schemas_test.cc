// Between node arguments and operators' boxed stacks, on its own.
#include "fx/ir/operator_schemas.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/torch.h>

#include "fx/ir/errors.h"
#include "fx/ir/graph.h"
#include "third_party/catch.h"

namespace {

const c10::FunctionSchema& schema_of(const char* name, const char* overload) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, overload).schema();
}

}  // namespace

TEST_CASE("bind_arguments fills defaults, takes kwargs by name, refuses misfits") {
  const auto& add = schema_of("aten::add", "Tensor");
  at::Tensor x = torch::ones({2});
  std::vector<c10::IValue> stack = fx::bind_arguments(add, {x, x}, {});
  REQUIRE(stack.size() == 3);
  CHECK(stack[2].toScalar().toLong() == 1);  // alpha's default
  stack = fx::bind_arguments(add, {x, x}, {{"alpha", c10::IValue(int64_t{2})}});
  CHECK(stack[2].toScalar().toLong() == 2);
  CHECK(fx::arguments_fit(add, {x, x}, {}));
  CHECK_FALSE(fx::arguments_fit(add, {x}, {}));
  CHECK_THROWS_WITH(fx::bind_arguments(add, {x, x}, {{"beta", c10::IValue(1.0)}}),
                    Catch::Contains("beta"));
  CHECK_THROWS_AS(fx::bind_arguments(add, {x, x, x, x}, {}), fx::GraphError);
  // An int list where the schema takes one.
  const auto& sum = schema_of("aten::sum", "dim_IntList");
  stack = fx::bind_arguments(sum, {x, c10::IValue(std::vector<int64_t>{0})}, {});
  CHECK(stack[1].toIntVector() == std::vector<int64_t>{0});
}

TEST_CASE("a node's arguments bind to its schema the one way") {
  fx::Graph g;
  fx::Node* x = g.placeholder("x");
  fx::Node* add = g.call_function(fx::op("aten::add.Tensor"), {x, x}, {{"alpha", 2}});
  g.output(add);
  const auto& schema = schema_of("aten::add", "Tensor");
  auto bound = fx::bind_node_arguments(*add, schema);
  REQUIRE(bound.size() == 3);
  CHECK(bound[0]->to_node() == x);
  CHECK(bound[2]->to_int() == 2);
  std::vector<fx::Argument> full = fx::full_arguments(*add, schema);
  CHECK(full[2].to_int() == 2);
  CHECK(fx::operator_argument(*add, "alpha")->to_int() == 2);
  CHECK_FALSE(fx::operator_argument(*add, "beta").has_value());
  // Back to what a caller writes: alpha differs from its default, so it
  // stays, as a keyword (it is keyword-only).
  auto [args, kwargs] = fx::split_arguments(schema, full);
  CHECK(args.size() == 2);
  REQUIRE(kwargs.size() == 1);
  CHECK(kwargs[0].first == "alpha");

  fx::Node* twice = g.call_function(fx::op("aten::add.Tensor"), {x, x},
                                    {{"self", x}});
  CHECK_THROWS_WITH(fx::bind_node_arguments(*twice, schema),
                    Catch::Contains("%add_1") && Catch::Contains("given twice"));
  fx::Node* unknown = g.call_function(fx::op("aten::add.Tensor"), {x, x},
                                      {{"beta", 1}});
  CHECK_THROWS_WITH(fx::bind_node_arguments(*unknown, schema),
                    Catch::Contains("no argument named 'beta'"));
  fx::Node* missing = g.call_function(fx::op("aten::add.Tensor"), {x});
  CHECK_NOTHROW(fx::bind_node_arguments(*missing, schema));
  CHECK_THROWS_AS(fx::full_arguments(*missing, schema), fx::GraphError);
}

TEST_CASE("aliased_use reads the schema's alias sets") {
  fx::Graph g;
  fx::Node* x = g.placeholder("x");
  fx::Node* view = g.call_function(fx::op("aten::select.int"), {x, 0, 1});
  fx::Node* copy = g.call_function(fx::op("aten::copy_"), {view, x});
  fx::Node* add = g.call_function(fx::op("aten::add.Tensor"), {x, x});
  g.output(fx::Argument::tuple({copy, add}));
  auto select_use = fx::aliased_use(*view, x);
  REQUIRE(select_use);
  CHECK(select_use->aliased);
  CHECK_FALSE(select_use->written);
  auto copy_use = fx::aliased_use(*copy, view);
  REQUIRE(copy_use);
  CHECK(copy_use->aliased);
  CHECK(copy_use->written);
  auto add_use = fx::aliased_use(*add, x);
  REQUIRE(add_use);
  CHECK_FALSE(add_use->aliased);
}

TEST_CASE("call_method resolves to the overload its values fit") {
  at::Tensor x = torch::ones({2});
  c10::OperatorHandle tensor_add = fx::resolve_method("add", {x, x}, {});
  CHECK(tensor_add.schema().overload_name() == "Tensor");
  c10::OperatorHandle scalar_add =
      fx::resolve_method("add", {x, c10::IValue(2.0)}, {});
  CHECK(scalar_add.schema().overload_name() == "Scalar");
  CHECK_THROWS_AS(fx::resolve_method("no_such_method", {x}, {}), fx::GraphError);
  CHECK(fx::schema_string(tensor_add.schema()) ==
        "aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor");
}

TEST_CASE("CallArguments names a call's arguments, defaults included") {
  fx::Graph g;
  fx::Node* x = g.placeholder("x");
  fx::Node* w = g.placeholder("w");
  fx::Node* conv = g.call_function(fx::op("aten::conv2d"),
                                   {x, w, fx::Argument(), std::vector<int64_t>{2, 2}},
                                   {{"groups", int64_t{2}}});
  const fx::CallArguments args(*conv);
  CHECK(args["input"].to_node() == x);
  CHECK(args["bias"].is_none());
  CHECK(args["stride"].to_int_list() == std::vector<int64_t>{2, 2});
  CHECK(args["padding"].to_int_list() == std::vector<int64_t>{0, 0});  // default
  CHECK(args["groups"].to_int() == 2);
  CHECK(args.has("dilation"));
  CHECK_FALSE(args.has("transposed"));
  CHECK(args.full().size() == 7);
  CHECK_THROWS_WITH(args["transposed"],
                    Catch::Contains("no argument 'transposed'") &&
                        Catch::Contains("aten::conv2d"));
  CHECK_THROWS_WITH(fx::CallArguments(*x),
                    Catch::Contains("not a call_function of an operator"));
}

TEST_CASE("set_operator_argument sets one argument by name, as a caller "
          "would write it") {
  fx::Graph g;
  fx::Node* x = g.placeholder("x");
  fx::Node* d = g.call_function(fx::op("aten::dropout"), {x, 0.1, true});
  fx::set_operator_argument(*d, "train", false);
  CHECK(d->format_node() ==
        "%dropout : [#users=0] = call_function[target=aten::dropout](args = "
        "(%x, 0.1, False), kwargs = {})");
  // A default drops out of the call; a keyword-only one stays a keyword.
  fx::Node* a = g.call_function(fx::op("aten::add.Tensor"), {x, x},
                                {{"alpha", int64_t{2}}});
  fx::set_operator_argument(*a, "alpha", int64_t{1});
  CHECK(a->args().size() == 2);
  CHECK(a->kwargs().empty());
  fx::set_operator_argument(*a, "alpha", int64_t{3});
  REQUIRE(a->kwargs().size() == 1);
  CHECK(a->kwargs()[0].first == "alpha");
  CHECK_THROWS_WITH(fx::set_operator_argument(*a, "beta", int64_t{1}),
                    Catch::Contains("no argument 'beta'") &&
                        Catch::Contains("aten::add.Tensor"));
  CHECK_THROWS_WITH(fx::set_operator_argument(*x, "train", false),
                    Catch::Contains("set_operator_argument: %x") &&
                        Catch::Contains("not a call_function of an operator"));
  // A full list written back.
  std::vector<fx::Argument> full = fx::CallArguments(*d).full();
  full[1] = 0.5;
  fx::set_full_arguments(*d, full);
  CHECK(fx::CallArguments(*d)["p"].to_double() == 0.5);
}
