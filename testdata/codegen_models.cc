// The zoo's models as fx::codegen::Model factories, for fx_cc_library.
#include "codegen/generator.h"
#include "models/zoo.h"

namespace testdata {

namespace {

fx::codegen::Model zoo_model(const std::string& name) {
  models::ZooModel zoo = models::make_zoo_model(name);
  return {zoo.module, zoo.forward, zoo.leaf_modules};
}

}  // namespace

fx::codegen::Model resnet18_model() { return zoo_model("resnet18"); }
fx::codegen::Model resnet50_model() { return zoo_model("resnet50"); }
fx::codegen::Model lenet_model() { return zoo_model("lenet"); }

}  // namespace testdata
