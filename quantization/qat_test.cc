#include "quantization/qat.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/torch.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>

#include "fx/fx.h"
#include "fx/io/serialization.h"
#include "models/zoo.h"
#include "quantization/numeric_suite.h"
#include "quantization/qconfig.h"
#include "quantization/quantize_fx.h"
#include "testdata/test_files.h"
#include "testdata/test_helpers.h"
#include "third_party/catch.h"

namespace {

using testdata::count_calls;

// The engine whose int8 kernels compute what the fake quantizers simulate
// here: onednn, or qnnpack on a CPU without VNNI (AVX2), where oneDNN's
// int8 kernels add pairs of uint8 x int8 products in 16 bits and saturate
// at QAT's full-range activations.
std::string exact_engine() { return fx::cpu_has_vnni() ? "onednn" : "qnnpack"; }

// Conv + batch norm (+ relu), a residual add, a conv with a bias, pooling,
// linear layers and a dropout: what quantization-aware training meets in a
// small CNN.
struct NetImpl : torch::nn::Module {
  NetImpl() {
    conv1 = register_module("conv1", torch::nn::Conv2d(
        torch::nn::Conv2dOptions(3, 8, 3).padding(1).bias(false)));
    bn1 = register_module("bn1", torch::nn::BatchNorm2d(8));
    conv2 = register_module("conv2", torch::nn::Conv2d(
        torch::nn::Conv2dOptions(8, 8, 3).padding(1)));
    bn2 = register_module("bn2", torch::nn::BatchNorm2d(8));
    conv3 = register_module("conv3", torch::nn::Conv2d(
        torch::nn::Conv2dOptions(8, 16, 3).padding(1)));
    fc1 = register_module("fc1", torch::nn::Linear(16 * 4 * 4, 32));
    drop = register_module("drop", torch::nn::Dropout(0.1));
    fc2 = register_module("fc2", torch::nn::Linear(32, 10));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(bn1(conv1(x)));
    x = torch::relu(bn2(conv2(x)) + x);
    x = torch::max_pool2d(torch::relu(conv3(x)), 2);
    x = drop(torch::relu(fc1(x.flatten(1))));
    return fc2(x);
  }
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr}, conv3{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr}, bn2{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  torch::nn::Dropout drop{nullptr};
};
TORCH_MODULE(Net);

fx::GraphModule trace_training(Net& net) {
  net->train();
  return fx::symbolic_trace(net, torch::randn({4, 3, 8, 8}));
}

at::Tensor run(fx::GraphModule m, const at::Tensor& x) { return m(x).toTensor(); }

// A few SGD steps through `qat` on random batches (seeded).
void train(fx::GraphModule& qat, int steps) {
  torch::optim::SGD sgd(qat->parameters(), torch::optim::SGDOptions(1e-2).momentum(0.9));
  for (int i = 0; i < steps; ++i) {
    torch::manual_seed(1000 + i);
    const at::Tensor x = torch::randn({4, 3, 8, 8});
    const at::Tensor y = torch::randint(0, 10, {4});
    sgd.zero_grad();
    torch::cross_entropy_loss(run(qat, x), y).backward();
    sgd.step();
  }
}

}  // namespace

TEST_CASE("prepare_qat_fx puts fake quantizers where prepare_fx puts observers, "
          "and conv/batch-norm blocks that train") {
  torch::manual_seed(0);
  Net net;
  fx::GraphModule gm = trace_training(net);
  const std::string before = gm->graph().to_string();
  fx::GraphModule qat =
      fx::prepare_qat_fx(gm, fx::get_default_qat_qconfig_mapping("onednn"));
  CHECK(gm->graph().to_string() == before);  // the module given is untouched
  const fx::Graph& g = qat->graph();
  // Weights: 3 convs and 2 linears. Activations: the input, conv1-bn1-relu,
  // bn2 (the add's input), add-relu, conv3-relu, fc1-relu, fc2 (the output
  // of the pool and flatten are quantized as they come).
  CHECK(count_calls(g, "fx_quant::fake_quantize") == 5 + 7);
  CHECK(count_calls(g, "aten::batch_norm") == 2);  // still training, in blocks
  CHECK(count_calls(g, "aten::sqrt") == 2);
  CHECK(count_calls(g, "aten::dropout") == 1);
  // The weights it trains are copies: the traced module's stay as they were.
  const at::Tensor w0 = gm->fetch_attr("conv1.weight").clone();
  train(qat, 3);
  CHECK(torch::equal(gm->fetch_attr("conv1.weight"), w0));
  CHECK(!torch::equal(qat->fetch_attr("conv1.weight"), w0));
  CHECK(!torch::equal(qat->fetch_attr("bn1.weight"), torch::ones({8})));  // gamma learns
  // Scales follow the ranges seen.
  CHECK(qat->fetch_attr("activation_post_process_0.scale").item<float>() != 1.0f);
  CHECK(qat->fetch_attr("weight_fake_quant_2.scale").numel() == 8);  // per channel

  SECTION("deterministic printing") {
    fx::GraphModule again =
        fx::prepare_qat_fx(gm, fx::get_default_qat_qconfig_mapping("onednn"));
    CHECK(again->graph().to_string() ==
          fx::prepare_qat_fx(gm, fx::get_default_qat_qconfig_mapping("onednn"))
              ->graph().to_string());
  }
}

TEST_CASE("with fake quantization off, the prepared module computes the float model") {
  torch::manual_seed(1);
  Net net;
  net->drop->options.p(0.0);
  fx::GraphModule gm = trace_training(net);
  fx::GraphModule qat =
      fx::prepare_qat_fx(gm, fx::get_default_qat_qconfig_mapping("qnnpack"));
  CHECK(fx::disable_fake_quant(qat) == 12);
  torch::manual_seed(5);
  const at::Tensor x = torch::randn({4, 3, 8, 8});
  // The block divides the scale back out: equal to rounding.
  const at::Tensor expected = run(gm, x);
  const at::Tensor got = run(qat, x);
  CHECK(torch::allclose(got, expected, 1e-4, 1e-5));
  CHECK(fx::enable_fake_quant(qat) == 12);
  CHECK(!torch::allclose(run(qat, x), expected, 1e-4, 1e-5));
}

TEST_CASE("observers and batch-norm statistics can be frozen, per module or whole") {
  torch::manual_seed(2);
  Net net;
  fx::GraphModule qat = fx::prepare_qat_fx(
      trace_training(net), fx::get_default_qat_qconfig_mapping("onednn"));
  train(qat, 1);
  const at::Tensor mean = qat->fetch_attr("bn1.running_mean").clone();
  const at::Tensor mean2 = qat->fetch_attr("bn2.running_mean").clone();
  CHECK(fx::freeze_bn_stats(qat, "bn1") == 1);
  train(qat, 1);
  CHECK(torch::equal(qat->fetch_attr("bn1.running_mean"), mean));
  CHECK(!torch::equal(qat->fetch_attr("bn2.running_mean"), mean2));
  CHECK(fx::freeze_bn_stats(qat) == 2);
  CHECK(fx::update_bn_stats(qat, "conv1") == 1);  // the block, by its conv
  train(qat, 1);
  CHECK(!torch::equal(qat->fetch_attr("bn1.running_mean"), mean));

  const at::Tensor scale = qat->fetch_attr("activation_post_process_0.scale").clone();
  CHECK(fx::disable_observer(qat) == 12);
  train(qat, 2);
  CHECK(torch::equal(qat->fetch_attr("activation_post_process_0.scale"), scale));
  CHECK(fx::enable_observer(qat, "fc1") >= 1);

  CHECK_THROWS_WITH(fx::freeze_bn_stats(qat, "fc9"),
                    Catch::Contains("no convolution/batch-norm block in 'fc9'"));
  CHECK_THROWS_WITH(fx::disable_observer(qat, "nothing"),
                    Catch::Contains("no fake quantizer in 'nothing'"));
}

TEST_CASE("convert_fx makes a trained QAT module the int8 graph PTQ makes") {
  torch::manual_seed(3);
  Net net;
  fx::set_quantized_engine(exact_engine());
  fx::GraphModule gm = trace_training(net);
  fx::GraphModule qat =
      fx::prepare_qat_fx(gm, fx::get_default_qat_qconfig_mapping(exact_engine()));
  train(qat, 5);
  fx::freeze_bn_stats(qat);
  fx::disable_observer(qat);
  fx::GraphModule int8 = fx::convert_fx(qat);
  fx::GraphModule reference = fx::convert_to_reference_fx(qat);

  // PTQ of the same model in eval mode: the same operators.
  net->eval();
  fx::GraphModule eval_gm = fx::symbolic_trace(net, torch::randn({4, 3, 8, 8}));
  fx::GraphModule prepared =
      fx::prepare_fx(eval_gm, fx::get_default_qconfig_mapping(exact_engine()));
  {
    torch::NoGradGuard no_grad;
    prepared(torch::randn({4, 3, 8, 8}));
  }
  fx::GraphModule ptq = fx::convert_fx(prepared);
  CHECK(fx::summarize_quantized(int8).to_string() ==
        fx::summarize_quantized(ptq).to_string());
  CHECK(fx::summarize_quantized(int8).quantized_ops >= 6);  // 3 conv, add_relu, 2 linear
  CHECK(!int8->traced_training().value_or(false));

  // The int8 module computes what the reference (fake-quantized float, batch
  // norms folded) computes, and that is what the QAT module computed with
  // its statistics frozen.
  torch::NoGradGuard no_grad;
  torch::manual_seed(9);
  const at::Tensor x = torch::randn({4, 3, 8, 8});
  const at::Tensor q = run(int8, x);
  const at::Tensor r = run(reference, x);
  CHECK(fx::sqnr_db(r, q) > 30);
}

TEST_CASE("fx_quant::fake_quantize computes torch.ao's fake quantizers, "
          "values and gradients") {
  // Four steps of different ranges, and upstream gradients.
  std::vector<at::Tensor> tensors;
  torch::manual_seed(4);
  for (int i = 0; i < 4; ++i) tensors.push_back(torch::randn({8, 3, 3, 3}) * (1 + i) + 0.3 * i);
  for (int i = 0; i < 4; ++i) tensors.push_back(torch::randn({8, 3, 3, 3}));
  const std::string dir = testdata::test_tmpdir();
  {
    std::vector<char> bytes = torch::pickle_save(c10::List<at::Tensor>(tensors));
    std::ofstream(dir + "/fq_in.pt", std::ios::binary).write(bytes.data(), bytes.size());
  }
  const std::string command = "/usr/bin/python3 quantization/fake_quantize_reference.py " +
                              dir + "/fq_in.pt " + dir + "/fq_out.pt 2>&1";
  REQUIRE(std::system(command.c_str()) == 0);
  std::ifstream in(dir + "/fq_out.pt", std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                                std::istreambuf_iterator<char>());
  const c10::IValue loaded = torch::pickle_load(bytes);
  std::vector<at::Tensor> expected;
  for (const c10::IValue& v : loaded.toListRef()) expected.push_back(v.toTensor());

  struct Config {
    c10::ScalarType dtype;
    std::string qscheme;
    int64_t quant_min, quant_max;
  };
  const std::vector<Config> configs = {
      {c10::ScalarType::QUInt8, "per_tensor_affine", 0, 255},
      {c10::ScalarType::QInt8, "per_tensor_symmetric", -128, 127},
      {c10::ScalarType::QInt8, "per_channel_symmetric", -128, 127}};
  static const c10::OperatorHandle op =
      c10::Dispatcher::singleton().findSchemaOrThrow("fx_quant::fake_quantize", "");
  size_t at = 0;
  for (const Config& c : configs) {
    const bool per_channel = c.qscheme == "per_channel_symmetric";
    at::Tensor on = torch::ones({1}, torch::kLong);
    at::Tensor min_val = per_channel ? torch::full({8}, INFINITY) : torch::full({}, INFINITY);
    at::Tensor max_val = -min_val.clone();
    at::Tensor scale = torch::ones({per_channel ? 8 : 1});
    at::Tensor zero_point = torch::zeros({per_channel ? 8 : 1}, torch::kInt);
    std::vector<at::Tensor> ours;
    for (int i = 0; i < 4; ++i) {
      at::Tensor x = tensors[i].clone().requires_grad_(true);
      torch::jit::Stack stack = {x, on, on, min_val, max_val, scale, zero_point,
                                 static_cast<int64_t>(c.dtype), c.qscheme,
                                 c.quant_min, c.quant_max, 0.01, int64_t{0},
                                 std::string("output")};
      op.callBoxed(&stack);
      at::Tensor y = stack[0].toTensor();
      y.backward(tensors[4 + i]);
      ours.insert(ours.end(), {y.detach(), x.grad(), scale.clone(), zero_point.clone()});
    }
    // Bitwise torch.ao's FusedMovingAvgObsFakeQuantize, every engine's
    // default, and FakeQuantize with the same observer for affine schemes.
    // For symmetric ones, torch.ao's two disagree: FakeQuantize's scale is
    // up to 0.5% off the fused one's (aten's choose_qparams), so values
    // differ by up to a step.
    for (const bool fused : {true, false}) {
      INFO(c.qscheme << (fused ? " against FusedMovingAvgObsFakeQuantize"
                               : " against FakeQuantize"));
      for (size_t k = 0; k < ours.size(); ++k) {
        INFO("step " << k / 4 << ", item " << k % 4 << " (output, grad, scale, zero point)");
        const at::Tensor theirs = expected.at(at + k).to(ours[k].scalar_type());
        if (fused || c.qscheme == "per_tensor_affine" || k % 4 == 3) {
          CHECK(torch::equal(ours[k], theirs));
        } else if (k % 4 == 2) {
          CHECK(torch::allclose(ours[k], theirs, 1e-2, 0));
        }
      }
      at += ours.size();
    }
  }
  CHECK(at == expected.size());
}

TEST_CASE("prepare_qat_fx and convert_fx say what is wrong") {
  torch::manual_seed(6);
  Net net;
  fx::GraphModule gm = trace_training(net);
  net->eval();
  fx::GraphModule eval_gm = fx::symbolic_trace(net, torch::randn({4, 3, 8, 8}));
  fx::GraphModule eval_qat =
      fx::prepare_qat_fx(eval_gm, fx::get_default_qat_qconfig_mapping("onednn"));
  CHECK_THROWS_WITH(fx::update_bn_stats(eval_qat),
                    Catch::Contains("traced in eval mode") && Catch::Contains("train()"));
  CHECK_THROWS_WITH(
      fx::prepare_qat_fx(gm, fx::get_default_qconfig_mapping("onednn")),
      Catch::Contains("histogram observer") &&
          Catch::Contains("get_default_qat_qconfig_mapping"));
  fx::GraphModule qat =
      fx::prepare_qat_fx(gm, fx::get_default_qat_qconfig_mapping("onednn"));
  CHECK_THROWS_WITH(
      fx::prepare_qat_fx(qat, fx::get_default_qat_qconfig_mapping("onednn")),
      Catch::Contains("it was prepared"));
  CHECK_THROWS_WITH(fx::prepare_fx(qat, fx::get_default_qconfig_mapping("onednn")),
                    Catch::Contains("it was prepared"));
  CHECK_THROWS_WITH(fx::convert_fx(qat), Catch::Contains("never observed a value") &&
                                             Catch::Contains("train the module"));
  CHECK_THROWS_WITH(fx::freeze_bn_stats(gm), Catch::Contains("no convolution/batch-norm blocks"));
  CHECK_THROWS_WITH(fx::disable_fake_quant(gm), Catch::Contains("no fake quantizers"));
}

TEST_CASE("a module traced in eval mode fine-tunes with its batch norms frozen") {
  torch::manual_seed(10);
  Net net;
  fx::set_quantized_engine("qnnpack");
  net->eval();
  fx::GraphModule gm = fx::symbolic_trace(net, torch::randn({4, 3, 8, 8}));
  fx::GraphModule qat =
      fx::prepare_qat_fx(gm, fx::get_default_qat_qconfig_mapping("qnnpack"));
  CHECK(!qat->is_training());
  CHECK(count_calls(qat->graph(), "aten::sqrt") == 2);  // the blocks, frozen
  const at::Tensor mean = qat->fetch_attr("bn1.running_mean").clone();
  const at::Tensor w0 = qat->fetch_attr("conv1.weight").clone();
  train(qat, 3);
  CHECK(torch::equal(qat->fetch_attr("bn1.running_mean"), mean));
  CHECK(!torch::equal(qat->fetch_attr("conv1.weight"), w0));
  CHECK(fx::freeze_bn_stats(qat) == 2);
  fx::disable_observer(qat);
  fx::GraphModule int8 = fx::convert_fx(qat);
  fx::GraphModule reference = fx::convert_to_reference_fx(qat);
  torch::NoGradGuard no_grad;
  const at::Tensor x = torch::randn({4, 3, 8, 8});
  CHECK(fx::sqnr_db(run(reference, x), run(int8, x)) > 25);
  // Converted with the qparams training simulated: the reference model (the
  // batch norms folded) computes what the QAT module computes.
  CHECK(fx::sqnr_db(run(qat, x), run(reference, x)) > 60);
  fx::set_quantized_engine("onednn");
}

namespace {
// A convolution as TorchScript files call it (aten::_convolution).
struct ScriptLikeImpl : torch::nn::Module {
  ScriptLikeImpl() {
    weight = register_parameter("weight", torch::randn({8, 3, 3, 3}) * 0.2);
    bias = register_parameter("bias", torch::randn({8}) * 0.1);
    bn = register_module("bn", torch::nn::BatchNorm2d(8));
    fc = register_module("fc", torch::nn::Linear(8 * 8 * 8, 4));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = at::_convolution(x, weight, bias, {1, 1}, {1, 1}, {1, 1}, false, {0, 0}, 1,
                         false, false, true, true);
    return fc(torch::relu(bn(x)).flatten(1));
  }
  torch::Tensor weight, bias;
  torch::nn::BatchNorm2d bn{nullptr};
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(ScriptLike);
}  // namespace

TEST_CASE("aten::_convolution (TorchScript's) gets a block, converted back") {
  torch::manual_seed(11);
  ScriptLike model;
  model->eval();
  fx::set_quantized_engine("qnnpack");
  fx::GraphModule gm = fx::symbolic_trace(model, torch::randn({2, 3, 8, 8}));
  REQUIRE(count_calls(gm->graph(), "aten::_convolution") == 1);
  fx::GraphModule qat =
      fx::prepare_qat_fx(gm, fx::get_default_qat_qconfig_mapping("qnnpack"));
  CHECK(count_calls(qat->graph(), "aten::sqrt") == 1);
  fx::DistillationOptions options;
  options.steps = 4;
  std::vector<std::vector<c10::IValue>> batches;
  for (int i = 0; i < 2; ++i) batches.push_back({torch::randn({2, 3, 8, 8})});
  const fx::DistillationReport report = fx::distill_qat(qat, gm, batches, options);
  CHECK(report.step_ms.size() == 4);
  fx::GraphModule int8 = fx::convert_fx(qat);
  CHECK(fx::summarize_quantized(int8).float_ops == 0);
  torch::NoGradGuard no_grad;
  const at::Tensor x = torch::randn({2, 3, 8, 8});
  CHECK(fx::sqnr_db(run(gm, x), run(int8, x)) > 20);
  std::vector<std::vector<c10::IValue>> none;
  CHECK_THROWS_WITH(fx::distill_qat(qat, gm, none, options),
                    Catch::Contains("at least one batch"));
  fx::set_quantized_engine("onednn");
}

namespace {
struct MlpImpl : torch::nn::Module {
  MlpImpl() {
    torch::NoGradGuard no_grad;
    bn->running_var.uniform_(0.2, 4.0);
    bn->running_mean.uniform_(-1, 1);
  }
  at::Tensor forward(at::Tensor x) { return fc2(torch::relu(bn(fc1(x)))); }
  torch::nn::Linear fc1{register_module("fc1", torch::nn::Linear(8, 16))};
  torch::nn::BatchNorm1d bn{register_module("bn", torch::nn::BatchNorm1d(16))};
  torch::nn::Linear fc2{register_module("fc2", torch::nn::Linear(16, 4))};
};
TORCH_MODULE(Mlp);
}  // namespace

TEST_CASE("a linear layer's batch norm stays its own operation, in training and in int8") {
  fx::set_quantized_engine(exact_engine());
  torch::manual_seed(12);
  Mlp mlp;
  mlp->eval();
  fx::GraphModule gm = fx::symbolic_trace(mlp, torch::randn({6, 8}));
  fx::GraphModule qat =
      fx::prepare_qat_fx(gm, fx::get_default_qat_qconfig_mapping(exact_engine()));
  torch::optim::SGD sgd(qat->parameters(), torch::optim::SGDOptions(1e-2));
  for (int i = 0; i < 3; ++i) {
    sgd.zero_grad();
    torch::cross_entropy_loss(run(qat, torch::randn({6, 8})), torch::randint(0, 4, {6}))
        .backward();
    sgd.step();
  }
  fx::disable_observer(qat);
  fx::GraphModule reference = fx::convert_to_reference_fx(qat);
  CHECK(count_calls(reference->graph(), "aten::batch_norm") == 1);
  torch::NoGradGuard no_grad;
  const at::Tensor x = torch::randn({6, 8});
  CHECK(fx::sqnr_db(run(qat, x), run(reference, x)) > 60);
  fx::GraphModule int8 = fx::convert_fx(qat);
  CHECK(fx::sqnr_db(run(reference, x), run(int8, x)) > 25);
}

TEST_CASE("a QAT module saves, loads and keeps training") {
  torch::manual_seed(7);
  Net net;
  net->drop->options.p(0.0);
  fx::GraphModule qat = fx::prepare_qat_fx(
      trace_training(net), fx::get_default_qat_qconfig_mapping("qnnpack"));
  train(qat, 2);
  std::stringstream file;
  fx::save(qat, file);
  fx::GraphModule loaded = fx::load(file);
  loaded->train();
  CHECK(loaded->graph().to_string() == qat->graph().to_string());
  torch::manual_seed(8);
  const at::Tensor x = torch::randn({4, 3, 8, 8});
  CHECK(torch::equal(run(loaded, x), run(qat, x)));
  train(loaded, 1);
  train(qat, 1);
  CHECK(torch::equal(loaded->fetch_attr("conv2.weight"), qat->fetch_attr("conv2.weight")));
  CHECK(torch::equal(loaded->fetch_attr("activation_post_process_0.min_val"),
                     qat->fetch_attr("activation_post_process_0.min_val")));
}

TEST_CASE("every traceable zoo model prepares, trains and converts") {
  fx::set_quantized_engine(exact_engine());
  for (const std::string& name : models::traceable_zoo_model_names()) {
    CAPTURE(name);
    models::ZooModel model = models::make_zoo_model(name);
    fx::GraphModule gm = models::trace_zoo_model(model);  // eval: frozen
    fx::GraphModule qat = fx::prepare_qat_fx(
        gm, fx::get_default_qat_qconfig_mapping(exact_engine()), model.example_inputs);
    if (count_calls(qat->graph(), "fx_quant::fake_quantize") == 0) continue;
    fx::DistillationOptions options;
    options.steps = 2;
    options.lr = 1e-6;
    const c10::IValue out = gm->forward(model.example_inputs);
    if (out.isTensor()) {
      fx::distill_qat(qat, gm, {model.example_inputs}, options);
    } else {
      torch::NoGradGuard no_grad;
      qat->forward(model.example_inputs);
    }
    fx::disable_observer(qat);
    fx::GraphModule int8 = fx::convert_fx(qat);
    fx::GraphModule reference = fx::convert_to_reference_fx(qat);
    torch::NoGradGuard no_grad;
    auto first = [](const c10::IValue& v) {
      return v.isTensor() ? v.toTensor() : v.toTupleRef().elements()[0].toTensor();
    };
    const at::Tensor fake = first(qat->forward(model.example_inputs));
    CAPTURE(fx::summarize_quantized(int8).to_string());
    CHECK(fx::summarize_quantized(int8).quantized_ops > 0);
    // What the QAT module computes, the reference computes (up to values
    // that the folding's rounding moves across a quantization step); int8
    // is near.
    CHECK(fx::sqnr_db(fake, first(reference->forward(model.example_inputs))) > 30);
    CHECK(fx::sqnr_db(first(out), first(int8->forward(model.example_inputs))) > 15);
  }
}

TEST_CASE("converted with the scales the observed ranges give, even with fake quantization off") {
  torch::manual_seed(13);
  Net net;
  net->eval();
  fx::set_quantized_engine("onednn");
  fx::GraphModule gm = fx::symbolic_trace(net, torch::randn({4, 3, 8, 8}));
  fx::GraphModule qat =
      fx::prepare_qat_fx(gm, fx::get_default_qat_qconfig_mapping("onednn"));
  fx::disable_fake_quant(qat);  // observers only: aten leaves scale at 1
  torch::NoGradGuard no_grad;
  for (int i = 0; i < 3; ++i) qat(torch::randn({4, 3, 8, 8}));
  fx::GraphModule int8 = fx::convert_fx(qat);
  const at::Tensor x = torch::randn({4, 3, 8, 8});
  CHECK(fx::sqnr_db(run(gm, x), run(int8, x)) > 20);
}

namespace {
// A linear layer by a weight stored [in, out] (x.matmul(W)): per-channel
// fake quantization along its columns.
struct ColumnsImpl : torch::nn::Module {
  ColumnsImpl() { w = register_parameter("w", torch::randn({16, 8}) * 0.2); }
  at::Tensor forward(at::Tensor x) { return torch::relu(x.matmul(w)); }
  at::Tensor w;
};
TORCH_MODULE(Columns);

// A batch norm without running statistics normalizes by the batch always.
struct BatchStatsImpl : torch::nn::Module {
  BatchStatsImpl() {
    conv = register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 4, 3)));
    bn = register_module("bn", torch::nn::BatchNorm2d(
                                   torch::nn::BatchNormOptions(4).track_running_stats(false)));
  }
  at::Tensor forward(at::Tensor x) { return torch::relu(bn(conv(x))); }
  torch::nn::Conv2d conv{nullptr};
  torch::nn::BatchNorm2d bn{nullptr};
};
TORCH_MODULE(BatchStats);
}  // namespace

TEST_CASE("a weight stored [in, out] fake-quantizes per column") {
  torch::manual_seed(14);
  Columns model;
  fx::set_quantized_engine("onednn");
  fx::GraphModule gm = fx::symbolic_trace(model, torch::randn({4, 16}));
  fx::GraphModule qat =
      fx::prepare_qat_fx(gm, fx::get_default_qat_qconfig_mapping("onednn"));
  const at::Tensor x = torch::randn({4, 16});
  const at::Tensor y = run(qat, x);  // aten's fused op takes axis 0 only
  y.sum().backward();
  CHECK(qat->fetch_attr("w").grad().defined());
  int64_t weight_scales = 0;
  for (const auto& [path, tensor] : qat->tensor_attributes()) {
    if (path.rfind("weight_fake_quant_", 0) == 0 && path.size() > 6 &&
        path.compare(path.size() - 6, 6, ".scale") == 0) {
      weight_scales = tensor.numel();
    }
  }
  CHECK(weight_scales == 8);
  fx::disable_observer(qat);
  torch::NoGradGuard no_grad;
  CHECK(fx::sqnr_db(run(qat, x), run(fx::convert_to_reference_fx(qat), x)) > 60);
}

TEST_CASE("a batch norm without running statistics stays as it is") {
  torch::manual_seed(15);
  BatchStats model;
  model->train();
  fx::GraphModule gm = fx::symbolic_trace(model, torch::randn({4, 3, 8, 8}));
  fx::GraphModule qat =
      fx::prepare_qat_fx(gm, fx::get_default_qat_qconfig_mapping("onednn"));
  train(qat, 0);
  torch::NoGradGuard no_grad;
  qat(torch::randn({4, 3, 8, 8}));
  fx::GraphModule int8 = fx::convert_fx(qat);
  const at::Tensor x = torch::randn({4, 3, 8, 8});
  model->eval();
  CHECK(fx::sqnr_db(model->forward(x), run(int8, x)) > 15);
}
