// The input checks on their own (GraphModule and generated code call them).
#include "fx/runtime/guards.h"

#include <torch/torch.h>

#include "fx/ir/errors.h"
#include "third_party/catch.h"

TEST_CASE("check_tensor_input accepts what the trace assumed, and only that") {
  const at::Tensor x = torch::randn({2, 3});
  const std::vector<int64_t> sizes{2, 3};
  const std::vector<int64_t> strides{3, 1};
  CHECK_NOTHROW(fx::check_tensor_input(x, "x", 0, at::kFloat, at::kCPU, 2,
                                       sizes, strides));
  // Only rank guarded: other sizes pass.
  CHECK_NOTHROW(fx::check_tensor_input(torch::randn({5, 7}), "x", 0,
                                       at::kFloat, at::kCPU, 2, c10::nullopt));
  CHECK_THROWS_AS(fx::check_tensor_input(x.to(at::kDouble), "x", 0, at::kFloat,
                                         at::kCPU, 2, c10::nullopt),
                  fx::GuardError);
  CHECK_THROWS_WITH(fx::check_tensor_input(x.flatten(), "x", 0, at::kFloat,
                                           at::kCPU, 2, c10::nullopt),
                    Catch::Contains("input 0 ('x')") && Catch::Contains("has 1 dimensions"));
  CHECK_THROWS_WITH(fx::check_tensor_input(torch::randn({4, 3}), "x", 0,
                                           at::kFloat, at::kCPU, 2, sizes),
                    Catch::Contains("[4, 3]") && Catch::Contains("[2, 3]") &&
                        Catch::Contains("trace the model again"));
  // Same shape, other strides: refused when the trace read them.
  const at::Tensor transposed = torch::randn({3, 2}).t();
  CHECK_NOTHROW(fx::check_tensor_input(transposed, "x", 0, at::kFloat, at::kCPU,
                                       2, sizes));
  CHECK_THROWS_AS(fx::check_tensor_input(transposed, "x", 0, at::kFloat,
                                         at::kCPU, 2, sizes, strides),
                  fx::GuardError);
}

TEST_CASE("list and value inputs are checked by length and by value") {
  std::vector<at::Tensor> two{torch::randn({1}), torch::randn({1})};
  CHECK_NOTHROW(fx::check_list_input(two, "xs", 1, 2));
  CHECK_THROWS_WITH(fx::check_list_input(two, "xs", 1, 3),
                    Catch::Contains("input 1 ('xs')") && Catch::Contains("3"));
  CHECK_NOTHROW(fx::check_value_input(c10::IValue(int64_t{3}), "n", 0, "3"));
  CHECK_THROWS_AS(fx::check_value_input(c10::IValue(int64_t{4}), "n", 0, "3"),
                  fx::GuardError);
  CHECK_NOTHROW(fx::check_value_input(c10::IValue(true), "flag", 0, "True"));
  CHECK_THROWS_AS(fx::check_value_input(c10::IValue(false), "flag", 0, "True"),
                  fx::GuardError);
}

TEST_CASE("the messages name the module, the input and what to do") {
  CHECK(fx::describe_input("x", 0) == "input 0 ('x')");
  const std::string message = fx::guard_failure_message(
      "GraphModule", fx::shape_mismatch("input 0 ('x')", "[1, 2]", {3, 4}));
  CHECK_THAT(message, Catch::StartsWith("GraphModule input 0 ('x') has shape [1, 2]") &&
                          Catch::Contains("[3, 4]") &&
                          Catch::Contains("fx::symbolic_trace"));
}
