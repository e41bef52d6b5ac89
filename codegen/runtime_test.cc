// What a generated class links (//codegen:runtime, without the rest of
// fx) holds what its init steps call: a class generated from a module
// that fuse_conv_bn folded runs fx_fold::fuse_conv_bn_weights when it is
// constructed and at run_init().
#include "codegen/runtime.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/torch.h>

#include "third_party/catch.h"

TEST_CASE("the runtime of generated classes registers the init steps' operators") {
  const auto op = c10::Dispatcher::singleton().findSchema(
      {"fx_fold::fuse_conv_bn_weights", ""});
  REQUIRE(op.has_value());
  std::vector<c10::IValue> stack = {
      torch::ones({2, 1, 1, 1}), c10::IValue(), torch::zeros({2}),
      torch::full({2}, 3.0), 1.0, c10::IValue(), c10::IValue(), false, 1};
  op->callBoxed(&stack);
  REQUIRE(stack.size() == 2);
  // 1 / sqrt(3 + 1) = 0.5 per output channel.
  CHECK(torch::equal(stack[0].toTensor(), torch::full({2, 1, 1, 1}, 0.5)));
  CHECK(torch::equal(stack[1].toTensor(), torch::zeros({2})));
}
