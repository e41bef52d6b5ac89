// Accuracy on real data: scikit-learn's digits (1,797 handwritten 8x8
// digits, shipped by Debian's python3-sklearn), a small CNN trained here in
// C++ with a fixed seed, quantized to int8 with calibration on the training
// split, and both evaluated on the held-out split.
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "fx/fx.h"
#include "quantization/quantize_fx.h"
#include "third_party/catch.h"

namespace {

constexpr char kDigits[] =
    "/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz";

struct Digits {
  at::Tensor images;  // [N, 1, 8, 8], in [0, 1]
  at::Tensor labels;  // [N]
};

Digits load_digits() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string csv = std::string(tmp ? tmp : "/tmp") + "/digits.csv";
  const std::string command =
      std::string("gzip -dc ") + kDigits + " > " + csv;
  REQUIRE(std::system(command.c_str()) == 0);
  std::ifstream in(csv);
  std::vector<float> pixels;
  std::vector<int64_t> labels;
  std::string line;
  while (std::getline(in, line)) {
    std::stringstream row(line);
    std::string cell;
    std::vector<float> values;
    while (std::getline(row, cell, ',')) values.push_back(std::stof(cell));
    REQUIRE(values.size() == 65);
    pixels.insert(pixels.end(), values.begin(), values.begin() + 64);
    labels.push_back(static_cast<int64_t>(values[64]));
  }
  const int64_t n = static_cast<int64_t>(labels.size());
  return {torch::tensor(pixels).reshape({n, 1, 8, 8}) / 16.0,
          torch::tensor(labels)};
}

struct NetImpl : torch::nn::Module {
  NetImpl() {
    conv1 = register_module("conv1", torch::nn::Conv2d(
        torch::nn::Conv2dOptions(1, 16, 3).padding(1).bias(false)));
    bn1 = register_module("bn1", torch::nn::BatchNorm2d(16));
    conv2 = register_module("conv2", torch::nn::Conv2d(
        torch::nn::Conv2dOptions(16, 16, 3).padding(1).bias(false)));
    bn2 = register_module("bn2", torch::nn::BatchNorm2d(16));
    conv3 = register_module("conv3", torch::nn::Conv2d(
        torch::nn::Conv2dOptions(16, 32, 3).padding(1)));
    fc1 = register_module("fc1", torch::nn::Linear(32 * 4 * 4, 64));
    fc2 = register_module("fc2", torch::nn::Linear(64, 10));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(bn1(conv1(x)));
    x = torch::relu(bn2(conv2(x)) + x);  // a residual: add-relu
    x = torch::max_pool2d(torch::relu(conv3(x)), 2);
    x = torch::relu(fc1(x.flatten(1)));
    return fc2(x);
  }
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr}, conv3{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr}, bn2{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(Net);

double accuracy(const std::function<at::Tensor(const at::Tensor&)>& model,
                const at::Tensor& images, const at::Tensor& labels) {
  torch::NoGradGuard no_grad;
  int64_t correct = 0;
  for (int64_t i = 0; i < images.size(0); i += 64) {
    const int64_t end = std::min<int64_t>(i + 64, images.size(0));
    at::Tensor predicted = model(images.slice(0, i, end)).argmax(1);
    correct += (predicted == labels.slice(0, i, end)).sum().item<int64_t>();
  }
  return 100.0 * static_cast<double>(correct) /
         static_cast<double>(images.size(0));
}

}  // namespace

TEST_CASE("int8 keeps the trained digits CNN's accuracy within a point") {
  at::set_num_threads(2);
  Digits digits = load_digits();
  REQUIRE(digits.labels.size(0) == 1797);
  torch::manual_seed(0);
  const at::Tensor order = torch::randperm(digits.labels.size(0));
  const int64_t train_size = 1437;  // 80%
  const at::Tensor train_x = digits.images.index({order.slice(0, 0, train_size)});
  const at::Tensor train_y = digits.labels.index({order.slice(0, 0, train_size)});
  const at::Tensor test_x = digits.images.index({order.slice(0, train_size)});
  const at::Tensor test_y = digits.labels.index({order.slice(0, train_size)});

  Net net;
  torch::optim::Adam optimizer(net->parameters(), torch::optim::AdamOptions(2e-3));
  net->train();
  for (int epoch = 0; epoch < 15; ++epoch) {
    const at::Tensor shuffle = torch::randperm(train_size);
    for (int64_t i = 0; i < train_size; i += 32) {
      const at::Tensor idx = shuffle.slice(0, i, std::min<int64_t>(i + 32, train_size));
      optimizer.zero_grad();
      at::Tensor loss = torch::cross_entropy_loss(net->forward(train_x.index({idx})),
                                                  train_y.index({idx}));
      loss.backward();
      optimizer.step();
    }
  }
  net->eval();
  const double fp32 = accuracy([&](const at::Tensor& x) { return net->forward(x); },
                               test_x, test_y);

  // Traced for any batch size (the net reads no sizes).
  fx::GraphModule gm = fx::symbolic_trace(net, torch::zeros({64, 1, 8, 8}));
  fx::set_quantized_engine("onednn");
  fx::GraphModule prepared =
      fx::prepare_fx(gm, fx::get_default_qconfig_mapping("onednn"));
  {
    torch::NoGradGuard no_grad;
    for (int64_t i = 0; i < train_size; i += 64) {
      prepared(train_x.slice(0, i, std::min<int64_t>(i + 64, train_size)));
    }
  }
  fx::GraphModule int8 = fx::convert_fx(prepared);
  const fx::QuantizedSummary summary = fx::summarize_quantized(int8);
  const double quantized = accuracy(
      [&](const at::Tensor& x) { return int8(x).toTensor(); }, test_x, test_y);
  std::printf("digits, held-out top-1 (%lld images): fp32 %.2f%%, int8 %.2f%% "
              "(%s)\n",
              static_cast<long long>(test_y.size(0)), fp32, quantized,
              summary.to_string().c_str());
  CHECK(fp32 > 95.0);
  CHECK(quantized >= fp32 - 1.0);
  CHECK(summary.quantized_ops >= 6);  // 3 conv, add_relu, 2 linear
  CHECK(summary.quantize == 1);
  CHECK(summary.dequantize == 1);
}
