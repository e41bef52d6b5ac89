#include "testdata/zoo.h"

#include <cstdint>
#include <stdexcept>
#include <tuple>

#include "testdata/data_dependent.h"
#include "testdata/inplace_ops.h"
#include "testdata/lenet.h"
#include "testdata/lstm_tagger.h"
#include "testdata/mlp.h"
#include "testdata/mobilenet_v2.h"
#include "testdata/resnet.h"
#include "testdata/transformer_encoder.h"
#include "testdata/unet.h"

namespace testdata {
namespace {

constexpr uint64_t kWeightSeed = 0;
constexpr uint64_t kInputSeed = 1;

// Gives every BatchNorm2d random scales, shifts and running statistics
// (variances in [0.5, 1.5)), so that folding them into convolutions changes
// the weights for real.
void randomize_batch_norms(torch::nn::Module& root) {
  torch::NoGradGuard no_grad;
  for (const auto& module : root.modules()) {
    if (auto* bn = module->as<torch::nn::BatchNorm2d>()) {
      bn->weight.uniform_(0.5, 1.5);
      bn->bias.normal_(0, 0.1);
      bn->running_mean.normal_(0, 0.1);
      bn->running_var.uniform_(0.5, 1.5);
    }
  }
}

const torch::Tensor& single_tensor_input(const std::vector<c10::IValue>& args) {
  if (args.size() != 1 || !args[0].isTensor()) {
    throw std::invalid_argument("zoo model: expected a single tensor input");
  }
  return args[0].toTensor();
}

c10::IValue box(const torch::Tensor& tensor) { return tensor; }

// std::tuple -> IValue tuple, recursively.
template <typename... Elements>
c10::IValue box(const std::tuple<Elements...>& tuple) {
  return std::apply(
      [](const auto&... elements) {
        return c10::ivalue::Tuple::create({box(elements)...});
      },
      tuple);
}

// Randomizes the batch norms of `model`, puts it in eval mode and wraps it.
// Every zoo model takes a single tensor. `make_inputs` runs after the input
// seed is set.
template <typename Holder, typename MakeInputs>
ZooModel zoo_model(const std::string& name, Holder model,
                   MakeInputs make_inputs) {
  randomize_batch_norms(*model);
  model->eval();
  torch::manual_seed(kInputSeed);
  ZooModel zoo;
  zoo.name = name;
  zoo.module = model.ptr();
  zoo.forward = [model](std::vector<c10::IValue> args) mutable {
    return box(model->forward(single_tensor_input(args)));
  };
  zoo.example_inputs = {make_inputs()};
  return zoo;
}

}  // namespace

std::vector<std::string> zoo_model_names() {
  return {
      "mlp",          "lenet",
      "resnet18",     "resnet50",
      "mobilenet_v2", "transformer_encoder",
      "lstm_tagger",  "unet",
      "inplace_ops",  "data_dependent",
      "data_dependent_leaf",
  };
}

ZooModel make_zoo_model(const std::string& name) {
  torch::manual_seed(kWeightSeed);
  auto image = [](int64_t n, int64_t c, int64_t h, int64_t w) {
    return [=] { return torch::randn({n, c, h, w}); };
  };
  if (name == "mlp") {
    return zoo_model(name, Mlp(), [] { return torch::randn({4, 784}); });
  }
  if (name == "lenet") {
    return zoo_model(name, LeNet(), image(2, 1, 32, 32));
  }
  if (name == "resnet18") {
    return zoo_model(name, resnet18(), image(1, 3, 224, 224));
  }
  if (name == "resnet50") {
    return zoo_model(name, resnet50(), image(1, 3, 224, 224));
  }
  if (name == "mobilenet_v2") {
    return zoo_model(name, MobileNetV2(), image(1, 3, 224, 224));
  }
  if (name == "transformer_encoder") {
    return zoo_model(name, TransformerClassifier(), [] {
      return torch::randint(1000, {12, 2}, torch::kLong);
    });
  }
  if (name == "lstm_tagger") {
    return zoo_model(name, LstmTagger(), [] {
      return torch::randint(500, {7, 3}, torch::kLong);
    });
  }
  if (name == "unet") {
    return zoo_model(name, UNet(), image(1, 3, 64, 64));
  }
  if (name == "inplace_ops") {
    return zoo_model(name, InplaceNet(), image(2, 3, 16, 16));
  }
  if (name == "data_dependent") {
    return zoo_model(name, DataDependentNet(), image(2, 3, 8, 8));
  }
  if (name == "data_dependent_leaf") {
    ZooModel zoo = zoo_model(name, LeafGateNet(), image(2, 3, 8, 8));
    zoo.leaf_modules = {"gate"};
    return zoo;
  }
  throw std::invalid_argument("unknown zoo model: " + name);
}

}  // namespace testdata
