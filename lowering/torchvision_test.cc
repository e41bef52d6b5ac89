// torchvision 0.14 classification models, traced to TorchScript by
// testdata/torchscript_models.py, imported and lowered by
// fx::optimize_for_inference: outputs within 1e-4 of TorchScript's own
// (relative to the output's largest magnitude) at batch 1 and 8 (where
// some run their first layers one image at a time). VGG-11 and
// AlexNet (files of 530 and 240 MB) are checked by
// tools/benchmark_inference only.
#include <torch/script.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "fx/fx.h"
#include "fx/torchscript/torchscript.h"
#include "lowering/optimize_for_inference.h"
#include "testdata/test_files.h"
#include "testdata/test_helpers.h"
#include "third_party/catch.h"

namespace {

using testdata::relative_error;

const std::vector<std::string> kModels = {
    "resnet18",        "resnet50",       "mobilenet_v2",  "mobilenet_v3_small",
    "squeezenet",      "densenet121",    "googlenet",     "efficientnet_b0",
    "regnet_x_400mf",  "mnasnet0_5",     "convnext_tiny", "inception_v3"};

// Written once per test run, in the test's temporary directory.
std::string model_path(const std::string& name) {
  static const std::string dir = [] {
    std::vector<std::string> traced;
    for (const std::string& m : kModels) traced.push_back(m + "_traced");
    return testdata::torchscript_models("torchvision_models", traced);
  }();
  return dir + "/" + name + "_traced.pt";
}

}  // namespace

TEST_CASE("torchvision models lowered match TorchScript at batch 1 and 8") {
  torch::NoGradGuard no_grad;
  for (const std::string& name : kModels) {
    torch::jit::Module script = torch::jit::load(model_path(name));
    script.eval();
    const int64_t size = name == "inception_v3" ? 299 : 224;
    for (int64_t batch : {1, 8}) {
      CAPTURE(name, batch);
      torch::manual_seed(batch);
      const at::Tensor x = torch::randn({batch, 3, size, size});
      const at::Tensor want = script.forward({x}).toTensor();
      fx::GraphModule gm = fx::symbolic_trace(script, {x});
      fx::InferenceReport report = fx::optimize_for_inference(*gm);
      CHECK(report.convolutions > 0);
      CHECK(relative_error(gm(x).toTensor(), want) < 1e-4);
      // At batch 8 the first layers run one image at a time.
      if (batch == 1) {
        CHECK(report.micro_batched == 0);
      } else if (name == "mobilenet_v2" || name == "efficientnet_b0" ||
                 name == "densenet121" || name == "convnext_tiny") {
        CHECK(report.micro_batched > 0);
      } else if (name == "resnet50") {
        // Its stem and pooling alone would save 0.2% of its time, as
        // estimated: within the noise, so the graph stays whole.
        CHECK(report.micro_batched == 0);
      }
      if (name == "densenet121") {
        // Every block's concatenations write into one buffer.
        CHECK(report.concatenations == 62);
        CHECK(report.concat_buffers == 4);
      }
      if (name == "mobilenet_v3_small" || name == "efficientnet_b0") {
        // Every squeeze-excitation block is one call; no gate, pooling or
        // product of theirs is left.
        CHECK(report.squeeze_excites ==
              (name == "mobilenet_v3_small" ? 9 : 16));
        int left = 0;
        for (const fx::Node* n : gm->graph().nodes()) {
          left += n->is_call_to({"aten::hardsigmoid", "aten::hardsigmoid_",
                                 "aten::sigmoid", "aten::mul.Tensor"});
        }
        CHECK(left == 0);
      }
    }
  }
}
