// The zoo's models as fx::codegen::Model factories, for fx_cc_library.
#include "codegen/generator.h"
#include "testdata/zoo.h"

namespace testdata {

fx::codegen::Model resnet18_model() {
  ZooModel zoo = make_zoo_model("resnet18");
  return {zoo.module,
          [forward = zoo.forward](const std::vector<c10::IValue>& inputs) {
            return forward(inputs);
          },
          zoo.leaf_modules};
}

}  // namespace testdata
