#include "testdata/codegen_models.h"

#include <torch/torch.h>

#include "fx/trace/control_flow.h"
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

// A branch on the input's sum (a Linear in one branch, a tensor computed
// before it lifted into both), then halving until small, the loop's body
// branching again: bodies as functions of the generated class.
struct ControlFlowImpl : torch::nn::Module {
  ControlFlowImpl() { fc = register_module("fc", torch::nn::Linear(4, 4)); }
  at::Tensor forward(at::Tensor x) {
    using Tensors = std::vector<at::Tensor>;
    const at::Tensor shift = x.mean(0, /*keepdim=*/true);
    const at::Tensor y = fx::cond(
        x.sum() > 0,
        [&](const Tensors& in) { return Tensors{fc(in[0]) + shift}; },
        [&](const Tensors& in) { return Tensors{in[0].neg() - shift}; },
        {x})[0];
    return fx::while_loop(
        [](const Tensors& c) { return c[0].abs().max() > 1; },
        [](const Tensors& c) {
          return fx::cond(
              c[0].sum() > 0,
              [](const Tensors& in) { return Tensors{in[0] / 2}; },
              [](const Tensors& in) { return Tensors{in[0] / 3}; }, {c[0]});
        },
        {y})[0];
  }
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(ControlFlow);

// Sizes that depend on data: the boxes whose score passes 0.5, the first
// one's corners (which needs one: the graph checks u0 >= 1), the corners
// of all, flattened to u0 * 2, and nonzero's rows.
struct SelectsBoxesImpl : torch::nn::Module {
  at::Tensor forward(at::Tensor boxes, at::Tensor scores) {
    const at::Tensor kept = boxes.index({scores > 0.5});
    const at::Tensor corners = kept.narrow(1, 0, 2);
    return torch::cat({corners.select(0, 0),
                       corners.reshape({kept.size(0) * 2}),
                       torch::nonzero(scores > 0.9).flatten().to(at::kFloat)});
  }
};
TORCH_MODULE(SelectsBoxes);

// scan and map: an Elman cell over time (x: [B, T, 4]), a head on each
// step's state.
struct ScanStepsImpl : torch::nn::Module {
  ScanStepsImpl() {
    cell = register_module("cell", torch::nn::Linear(4 + 8, 8));
    head = register_module("head", torch::nn::Linear(8, 3));
  }
  at::Tensor forward(at::Tensor x) {
    using Tensors = std::vector<at::Tensor>;
    fx::ScanResult r = fx::scan(
        [&](const Tensors& h, const Tensors& step) {
          at::Tensor next = torch::tanh(cell(torch::cat({step[0], h[0]}, 1)));
          return std::pair{Tensors{next}, Tensors{next}};
        },
        {torch::zeros({x.size(0), 8})}, {x.transpose(0, 1)});
    return fx::map([&](const Tensors& s) { return Tensors{head(s[0])}; },
                   r.ys)[0]
               .sum(0) +
           r.carried[0].sum();
  }
  torch::nn::Linear cell{nullptr}, head{nullptr};
};
TORCH_MODULE(ScanSteps);

// What optimize_for_inference lowers to operators that take lists of
// tensors: squeeze-excitation, a dense block's concatenations (one buffer,
// each piece written once) and an LSTM over the pixels.
struct DenseExciteImpl : torch::nn::Module {
  DenseExciteImpl() {
    stem = register_module("stem", torch::nn::Conv2d(
        torch::nn::Conv2dOptions(3, 16, 3).padding(1)));
    fc1 = register_module("fc1", torch::nn::Conv2d(16, 4, 1));
    fc2 = register_module("fc2", torch::nn::Conv2d(4, 16, 1));
    a = register_module("a", torch::nn::Conv2d(
        torch::nn::Conv2dOptions(16, 8, 3).padding(1)));
    b = register_module("b", torch::nn::Conv2d(
        torch::nn::Conv2dOptions(24, 8, 3).padding(1)));
    lstm = register_module("lstm", torch::nn::LSTM(
        torch::nn::LSTMOptions(32, 16).batch_first(true)));
  }
  at::Tensor forward(at::Tensor x) {
    at::Tensor f = torch::relu(stem(x));
    f = torch::sigmoid(fc2(torch::silu(fc1(torch::adaptive_avg_pool2d(f, {1, 1}))))) * f;
    const at::Tensor g = a(torch::relu(torch::cat({f}, 1)));
    const at::Tensor h = b(torch::relu(torch::cat({f, g}, 1)));
    const at::Tensor y = torch::cat({f, g, h}, 1);
    return std::get<0>(lstm(y.flatten(2).transpose(1, 2)));
  }
  torch::nn::Conv2d stem{nullptr}, fc1{nullptr}, fc2{nullptr}, a{nullptr},
      b{nullptr};
  torch::nn::LSTM lstm{nullptr};
};
TORCH_MODULE(DenseExcite);

}  // namespace

fx::codegen::Model dense_excite_model() {
  torch::manual_seed(0);
  DenseExcite model;
  model->eval();
  return fx::codegen::model_of(model);
}

fx::codegen::Model control_flow_model() {
  torch::manual_seed(0);
  return fx::codegen::model_of(ControlFlow());
}

fx::codegen::Model selects_boxes_model() {
  return fx::codegen::model_of(SelectsBoxes());
}

fx::codegen::Model scan_model() {
  torch::manual_seed(0);
  return fx::codegen::model_of(ScanSteps());
}

fx::codegen::Model two_heads_model() {
  torch::manual_seed(0);
  return fx::codegen::model_of(TwoHeads());
}

fx::codegen::Model resnet18_model() { return zoo_model("resnet18"); }
fx::codegen::Model resnet50_model() { return zoo_model("resnet50"); }
fx::codegen::Model mobilenet_v2_model() { return zoo_model("mobilenet_v2"); }
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
