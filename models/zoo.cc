#include "models/zoo.h"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <tuple>

#include "models/data_dependent.h"
#include "models/inplace_ops.h"
#include "models/lenet.h"
#include "models/lstm_tagger.h"
#include "models/mlp.h"
#include "models/mobilenet_v2.h"
#include "models/resnet.h"
#include "models/transformer_encoder.h"
#include "models/unet.h"

namespace models {
namespace {

constexpr uint64_t kWeightSeed = 0;
constexpr uint64_t kInputSeed = 1;

constexpr uint64_t kCalibrationSeed = 2;
constexpr int kCalibrationBatches = 3;

// Gives every BatchNorm2d random scales and shifts, then running statistics
// from a few forwards in training mode on random inputs (as the first steps
// of training would give). Folding them into convolutions then changes the
// weights for real, while the model stays as well conditioned as
// torchvision's (statistics drawn at random made ResNet-50's logits reach
// ~1e3, where float32 rounding alone exceeds the tolerances folding is held
// to).
template <typename Holder, typename MakeInputs>
void calibrate_batch_norms(Holder& model, const MakeInputs& make_inputs) {
  torch::NoGradGuard no_grad;
  bool any = false;
  for (const auto& module : model->modules()) {
    if (auto* bn = module->template as<torch::nn::BatchNorm2d>()) {
      bn->weight.uniform_(0.8, 1.2);
      bn->bias.normal_(0, 0.05);
      any = true;
    }
  }
  if (!any) return;
  torch::manual_seed(kCalibrationSeed);
  model->train();
  for (int i = 0; i < kCalibrationBatches; ++i) {
    // Training-mode batch norm needs more than one value per channel.
    torch::Tensor x = make_inputs();
    model->forward(x.size(0) > 1 ? x : torch::cat({x, make_inputs()}));
  }
  for (const auto& module : model->modules()) {
    if (auto* bn = module->template as<torch::nn::BatchNorm2d>()) {
      bn->num_batches_tracked.zero_();
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
  calibrate_batch_norms(model, make_inputs);
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

std::vector<std::string> traceable_zoo_model_names() {
  std::vector<std::string> names = zoo_model_names();
  names.erase(std::find(names.begin(), names.end(), "data_dependent"));
  return names;
}

fx::GraphModule trace_zoo_model(const ZooModel& model) {
  fx::TraceOptions options;
  options.leaf_modules = model.leaf_modules;
  return fx::symbolic_trace(model.module, model.forward, model.example_inputs,
                            options);
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

}  // namespace models
