#include "interpreter/transformer.h"

#include <torch/torch.h>

#include "fx/fx.h"
#include "models/zoo.h"
#include "third_party/catch.h"

namespace {

using fx::Node;
using fx::Opcode;

class NegSigmoidSwap : public fx::Transformer {
 public:
  using fx::Transformer::Transformer;
  c10::IValue call_function(const fx::Node& node, const fx::Target& target,
                            std::vector<c10::IValue> args,
                            fx::IValueKwargs kwargs) override {
    if (target == fx::op("aten::sigmoid")) {
      return torch::neg(args[0].toTensor());
    }
    if (target == fx::op("aten::neg")) {
      return torch::sigmoid(args[0].toTensor());
    }
    return fx::Transformer::call_function(node, target, std::move(args),
                                          std::move(kwargs));
  }
};

TEST_CASE("a Transformer swaps neg and sigmoid, as in torch.fx's docs") {
  auto fn = [](torch::Tensor x) { return torch::sigmoid(torch::neg(x)); };
  auto x = torch::randn({3, 4});
  fx::GraphModule gm = fx::symbolic_trace(fn, x);
  fx::GraphModule swapped = NegSigmoidSwap(gm).transform();
  CHECK(swapped->graph().to_string() ==
        "graph():\n"
        "    %x : [#users=1] = placeholder[target=x]\n"
        "    %sigmoid : [#users=1] = call_function[target=aten::sigmoid](args "
        "= (%x,), kwargs = {})\n"
        "    %neg : [#users=1] = call_function[target=aten::neg](args = "
        "(%sigmoid,), kwargs = {})\n"
        "    return neg");
  CHECK(torch::equal(swapped(x).toTensor(), torch::neg(torch::sigmoid(x))));
}

TEST_CASE("an identity Transformer reproduces every zoo model") {
  torch::NoGradGuard no_grad;
  for (const char* name : {"resnet18", "lstm_tagger", "transformer_encoder",
                           "inplace_ops", "data_dependent_leaf"}) {
    INFO(name);
    models::ZooModel model = models::make_zoo_model(name);
    fx::GraphModule gm = models::trace_zoo_model(model);
    fx::GraphModule again = fx::Transformer(gm).transform();
    CHECK(again->graph().to_string() == gm->graph().to_string());
    c10::IValue a = again->forward(model.example_inputs);
    c10::IValue b = gm->forward(model.example_inputs);
    CHECK(a.tagKind() == b.tagKind());
    if (a.isTensor()) CHECK(torch::equal(a.toTensor(), b.toTensor()));
    // Guards carry over: a traced shape is still required.
    for (size_t i = 0; i < gm->graph().placeholders().size(); ++i) {
      const fx::InputGuard* old_guard =
          gm->graph().placeholders()[i]->meta().get(fx::kGuard);
      const fx::InputGuard* new_guard =
          again->graph().placeholders()[i]->meta().get(fx::kGuard);
      REQUIRE(new_guard != nullptr);
      CHECK(new_guard->to_string() == old_guard->to_string());
    }
    CHECK(again->traced_training() == gm->traced_training());
  }
}

}  // namespace
