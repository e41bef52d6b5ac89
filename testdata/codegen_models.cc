#include "testdata/codegen_models.h"

#include <torch/torch.h>

#include "models/zoo.h"

namespace testdata {

namespace {

fx::codegen::Model zoo_model(const std::string& name) {
  models::ZooModel zoo = models::make_zoo_model(name);
  return {zoo.module, zoo.forward, zoo.leaf_modules, {}};
}

// Returns a dict, as torchvision's segmentation models do.
struct TwoHeadsImpl : torch::nn::Module {
  TwoHeadsImpl() {
    conv = register_module("conv", torch::nn::Conv2d(3, 4, 3));
  }
  c10::Dict<std::string, at::Tensor> forward(at::Tensor x) {
    at::Tensor y = conv(x);
    c10::Dict<std::string, at::Tensor> out;
    out.insert("out", y.relu());
    out.insert("aux", y.sigmoid());
    return out;
  }
  torch::nn::Conv2d conv{nullptr};
};
TORCH_MODULE(TwoHeads);

}  // namespace

fx::codegen::Model two_heads_model() {
  torch::manual_seed(0);
  return fx::codegen::model_of(TwoHeads());
}

fx::codegen::Model resnet18_model() { return zoo_model("resnet18"); }
fx::codegen::Model resnet50_model() { return zoo_model("resnet50"); }
fx::codegen::Model lenet_model() { return zoo_model("lenet"); }

std::vector<std::vector<c10::IValue>> lenet_calibration() {
  std::vector<std::vector<c10::IValue>> batches;
  for (int i = 0; i < 4; ++i) {
    torch::manual_seed(200 + i);
    batches.push_back({torch::randn({2, 1, 32, 32})});
  }
  return batches;
}

fx::codegen::Model lenet_calibrated_model() {
  fx::codegen::Model model = zoo_model("lenet");
  model.calibration = lenet_calibration;
  return model;
}

}  // namespace testdata
