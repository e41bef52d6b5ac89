// Accuracy on real data: scikit-learn's digits (1,797 handwritten 8x8
// digits, shipped by Debian's python3-sklearn), a small CNN trained here in
// C++ with a fixed seed, quantized to int8 with calibration on the training
// split, and both evaluated on the held-out split.
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "fx/fx.h"
#include "quantization/qat.h"
#include "quantization/quantize_fx.h"
#include "testdata/test_files.h"
#include "third_party/catch.h"

namespace {

constexpr char kDigits[] =
    "/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz";

struct Digits {
  at::Tensor images;  // [N, 1, 8, 8], in [0, 1]
  at::Tensor labels;  // [N]
};

Digits load_digits() {
  const std::string csv = testdata::test_file("digits.csv");
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

struct Trained {
  Net net;
  at::Tensor train_x, train_y, test_x, test_y;
  double fp32 = 0;
};

// The CNN trained in float (once for the test cases).
Trained& trained() {
  static Trained* t = [] {
    at::set_num_threads(2);
    torch::manual_seed(0);  // the initial weights too
    auto* t = new Trained;
    Digits digits = load_digits();
    REQUIRE(digits.labels.size(0) == 1797);
    torch::manual_seed(0);
    const at::Tensor order = torch::randperm(digits.labels.size(0));
    const int64_t train_size = 1437;  // 80%
    t->train_x = digits.images.index({order.slice(0, 0, train_size)});
    t->train_y = digits.labels.index({order.slice(0, 0, train_size)});
    t->test_x = digits.images.index({order.slice(0, train_size)});
    t->test_y = digits.labels.index({order.slice(0, train_size)});
    Net& net = t->net;
    torch::optim::Adam optimizer(net->parameters(), torch::optim::AdamOptions(2e-3));
    net->train();
    for (int epoch = 0; epoch < 15; ++epoch) {
      const at::Tensor shuffle = torch::randperm(train_size);
      for (int64_t i = 0; i < train_size; i += 32) {
        const at::Tensor idx = shuffle.slice(0, i, std::min<int64_t>(i + 32, train_size));
        optimizer.zero_grad();
        at::Tensor loss = torch::cross_entropy_loss(
            net->forward(t->train_x.index({idx})), t->train_y.index({idx}));
        loss.backward();
        optimizer.step();
      }
    }
    net->eval();
    t->fp32 = accuracy([&](const at::Tensor& x) { return net->forward(x); },
                       t->test_x, t->test_y);
    return t;
  }();
  return *t;
}

// Post-training quantization, calibrated on the training split.
fx::GraphModule post_training(const std::string& engine) {
  Trained& t = trained();
  t.net->eval();
  // Traced for any batch size (the net reads no sizes).
  fx::GraphModule gm = fx::symbolic_trace(t.net, torch::zeros({64, 1, 8, 8}));
  fx::set_quantized_engine(engine);
  fx::GraphModule prepared =
      fx::prepare_fx(gm, fx::get_default_qconfig_mapping(engine));
  torch::NoGradGuard no_grad;
  const int64_t n = t.train_x.size(0);
  for (int64_t i = 0; i < n; i += 64) {
    prepared(t.train_x.slice(0, i, std::min<int64_t>(i + 64, n)));
  }
  return fx::convert_fx(prepared);
}

// Quantization-aware fine-tuning of the float CNN: three epochs of SGD on
// the training split, batch norms frozen after the first, observers after
// the second (torch.ao's recipe), then converted.
fx::GraphModule quantization_aware(const std::string& engine) {
  Trained& t = trained();
  t.net->train();
  // Trained at batch 32, evaluated at 64 and 40: a dynamic batch.
  fx::TraceOptions options;
  options.dynamic = {{.input = 0, .dim = 0, .symbol = "B"}};
  fx::GraphModule gm =
      fx::symbolic_trace(t.net, {torch::zeros({32, 1, 8, 8})}, options);
  t.net->eval();
  fx::set_quantized_engine(engine);
  fx::GraphModule qat =
      fx::prepare_qat_fx(gm, fx::get_default_qat_qconfig_mapping(engine));
  torch::optim::SGD sgd(qat->parameters(),
                        torch::optim::SGDOptions(1e-3).momentum(0.9));
  torch::manual_seed(1);
  const int64_t n = t.train_x.size(0);
  for (int epoch = 0; epoch < 3; ++epoch) {
    if (epoch == 1) fx::freeze_bn_stats(qat);
    if (epoch == 2) fx::disable_observer(qat);
    const at::Tensor shuffle = torch::randperm(n);
    for (int64_t i = 0; i + 32 <= n; i += 32) {
      const at::Tensor idx = shuffle.slice(0, i, i + 32);
      sgd.zero_grad();
      torch::cross_entropy_loss(qat(t.train_x.index({idx})).toTensor(),
                                t.train_y.index({idx}))
          .backward();
      sgd.step();
    }
  }
  return fx::convert_fx(qat);
}

double int8_accuracy(fx::GraphModule& int8) {
  Trained& t = trained();
  return accuracy([&](const at::Tensor& x) { return int8(x).toTensor(); },
                  t.test_x, t.test_y);
}

// The held-out cross-entropy: finer than the accuracy, which moves by whole
// images.
double int8_loss(fx::GraphModule& int8) {
  Trained& t = trained();
  torch::NoGradGuard no_grad;
  std::vector<at::Tensor> logits;
  for (int64_t i = 0; i < t.test_x.size(0); i += 64) {
    logits.push_back(int8(t.test_x.slice(0, i, i + 64)).toTensor());
  }
  return torch::cross_entropy_loss(torch::cat(logits), t.test_y).item<double>();
}

}  // namespace

TEST_CASE("int8 keeps the trained digits CNN's accuracy within a point") {
  Trained& t = trained();
  fx::GraphModule int8 = post_training("onednn");
  const fx::QuantizedSummary summary = fx::summarize_quantized(int8);
  const double quantized = int8_accuracy(int8);
  std::printf("digits, held-out top-1 (%lld images): fp32 %.2f%%, int8 %.2f%% "
              "(%s)\n",
              static_cast<long long>(t.test_y.size(0)), t.fp32, quantized,
              summary.to_string().c_str());
  CHECK(t.fp32 > 95.0);
  CHECK(quantized >= t.fp32 - 1.0);
  CHECK(summary.quantized_ops >= 6);  // 3 conv, add_relu, 2 linear
  CHECK(summary.quantize == 1);
  CHECK(summary.dequantize == 1);
}

TEST_CASE("quantization-aware training keeps the digits CNN's accuracy at "
          "least as well as post-training quantization") {
  Trained& t = trained();
  for (const std::string engine : {"onednn", "qnnpack"}) {
    fx::GraphModule ptq = post_training(engine);
    fx::GraphModule qat = quantization_aware(engine);
    const double ptq_accuracy = int8_accuracy(ptq);
    const double qat_accuracy = int8_accuracy(qat);
    const double ptq_loss = int8_loss(ptq), qat_loss = int8_loss(qat);
    std::printf("digits on %s, held-out top-1: fp32 %.2f%%, PTQ %.2f%%, QAT "
                "%.2f%%; held-out loss: PTQ %.4f, QAT %.4f\n",
                engine.c_str(), t.fp32, ptq_accuracy, qat_accuracy, ptq_loss,
                qat_loss);
    INFO(engine);
    CHECK(fx::summarize_quantized(qat).to_string() ==
          fx::summarize_quantized(ptq).to_string());
    // QAT loses no more than PTQ loses against float: a PTQ that happens to
    // beat float by a held-out image (1/360) is not a bar to clear.
    CHECK(qat_accuracy >= std::min(ptq_accuracy, t.fp32));
    CHECK(qat_accuracy >= t.fp32 - 0.5);
  }
}
