#include "interpreter/interpreter.h"

#include <torch/torch.h>

#include "fx/fx.h"
#include "third_party/catch.h"

namespace {

struct SmallNetImpl : torch::nn::Module {
  SmallNetImpl() {
    conv = register_module("conv", torch::nn::Conv2d(3, 4, 3));
    bn = register_module("bn", torch::nn::BatchNorm2d(4));
  }
  torch::Tensor forward(torch::Tensor x) {
    return torch::relu(bn(conv(x))).mean({2, 3});
  }
  torch::nn::Conv2d conv{nullptr};
  torch::nn::BatchNorm2d bn{nullptr};
};
TORCH_MODULE(SmallNet);

// Counts calls per opcode and records the order of operators.
class Recorder : public fx::Interpreter {
 public:
  using fx::Interpreter::Interpreter;
  c10::IValue call_function(const fx::Node& node, const fx::Target& target,
                            std::vector<c10::IValue> args,
                            fx::IValueKwargs kwargs) override {
    calls.push_back(target.to_string());
    return fx::Interpreter::call_function(node, target, std::move(args),
                                          std::move(kwargs));
  }
  c10::IValue get_attr(const fx::Node& node, const fx::Target& target,
                       std::vector<c10::IValue> args,
                       fx::IValueKwargs kwargs) override {
    ++attributes;
    return fx::Interpreter::get_attr(node, target, std::move(args),
                                     std::move(kwargs));
  }
  std::vector<std::string> calls;
  int attributes = 0;
};

TEST_CASE("the Interpreter runs node by node through overridable methods") {
  SmallNet model;
  model->eval();
  auto x = torch::randn({2, 3, 8, 8});
  fx::GraphModule gm = fx::symbolic_trace(model, x);
  Recorder recorder(gm);
  auto out = recorder.run({x}).toTensor();
  CHECK(torch::equal(out, model(x)));
  CHECK(recorder.calls == std::vector<std::string>{"aten::conv2d",
                                                   "aten::batch_norm",
                                                   "aten::relu",
                                                   "aten::mean.dim"});
  CHECK(recorder.attributes == 6);  // conv weight and bias, 4 of bn
  // A second run starts clean.
  recorder.calls.clear();
  recorder.run({x});
  CHECK(recorder.calls.size() == 4);
}

// Replaces relu by gelu while running: run_node sees every node.
class Swapper : public fx::Interpreter {
 public:
  using fx::Interpreter::Interpreter;
  c10::IValue run_node(const fx::Node& node) override {
    if (node.op() == fx::Opcode::kCallFunction &&
        node.target() == fx::op("aten::relu")) {
      auto [args, kwargs] = fetch_args_kwargs_from_env(node);
      return torch::gelu(args[0].toTensor());
    }
    return fx::Interpreter::run_node(node);
  }
};

TEST_CASE("run_node can change what a node computes") {
  SmallNet model;
  model->eval();
  auto x = torch::randn({2, 3, 8, 8});
  fx::GraphModule gm = fx::symbolic_trace(model, x);
  auto out = Swapper(gm).run({x}).toTensor();
  auto expected =
      torch::gelu(model->bn(model->conv(x))).mean({2, 3});
  CHECK(torch::equal(out, expected));
}

TEST_CASE("the Interpreter checks the number of inputs, not guards") {
  SmallNet model;
  model->eval();
  fx::GraphModule gm = fx::symbolic_trace(model, torch::randn({2, 3, 8, 8}));
  fx::Interpreter interpreter(gm);
  CHECK_THROWS_WITH(interpreter.run({}),
                    Catch::Contains("takes 1 input(s) but 0 were given"));
  // Another batch size runs: interpreting is for analyses on any input.
  auto x = torch::randn({5, 3, 8, 8});
  CHECK(torch::equal(interpreter.run({x}).toTensor(), model(x)));
}

}  // namespace
