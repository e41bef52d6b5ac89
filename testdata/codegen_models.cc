#include "testdata/codegen_models.h"

#include "models/zoo.h"

namespace testdata {

namespace {

fx::codegen::Model zoo_model(const std::string& name) {
  models::ZooModel zoo = models::make_zoo_model(name);
  return {zoo.module, zoo.forward, zoo.leaf_modules, {}};
}

}  // namespace

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
