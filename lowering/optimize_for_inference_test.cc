#include "lowering/optimize_for_inference.h"
#include "lowering/threads.h"

#include <torch/torch.h>

#include <sstream>
#include <thread>
#include <vector>

#include "fx/fx.h"
#include "fx/io/parser.h"
#include "fx/io/serialization.h"
#include "fx/torchscript/torchscript.h"
#include "lowering/onednn_ops.h"
#include "models/zoo.h"
#include "passes/cost_model.h"
#include "passes/pass_manager.h"
#include "testdata/excited_blocks.h"
#include "testdata/filecheck.h"
#include "testdata/round_trip.h"
#include "testdata/test_helpers.h"
#include "third_party/catch.h"

namespace {

using testdata::relative_error;

using testdata::count_calls;
using testdata::ExcitedBlocks;

double output_error(const c10::IValue& a, const c10::IValue& b) {
  if (a.isTensor()) return relative_error(a.toTensor(), b.toTensor());
  REQUIRE(a.isTuple());
  double worst = 0;
  const auto& x = a.toTupleRef().elements();
  const auto& y = b.toTupleRef().elements();
  REQUIRE(x.size() == y.size());
  for (size_t i = 0; i < x.size(); ++i) {
    worst = std::max(worst, output_error(x[i], y[i]));
  }
  return worst;
}

struct Conv : torch::nn::Module {
  Conv() {
    a = register_module("a", torch::nn::Conv2d(
        torch::nn::Conv2dOptions(3, 8, 3).padding(1).bias(false)));
    bn = register_module("bn", torch::nn::BatchNorm2d(8));
    b = register_module("b", torch::nn::Conv2d(
        torch::nn::Conv2dOptions(8, 8, 3).padding(1)));
    fc = register_module("fc", torch::nn::Linear(8, 4));
  }
  at::Tensor forward(at::Tensor x) {
    at::Tensor y = torch::relu(bn(a(x)));
    at::Tensor z = b(y);
    z += y;
    z = torch::relu(z);
    // Pooling inside the chain: oneDNN's, with ceil mode's extra window.
    z = torch::max_pool2d(z, {3, 3}, {2, 2}, {0, 0}, {1, 1}, true);
    z = torch::avg_pool2d(z, {2, 2}, {1, 1});
    at::Tensor pooled = torch::adaptive_avg_pool2d(z, {1, 1}).flatten(1);
    return torch::hardswish(fc(pooled)) + z.sum();
  }
  torch::nn::Conv2d a{nullptr}, b{nullptr};
  torch::nn::BatchNorm2d bn{nullptr};
  torch::nn::Linear fc{nullptr};
};

// DenseNet's layer: batch norm and relu on the block's concatenation so
// far, then the convolution (no convolution before a batch norm to fold
// it into).
struct DenseLayers : torch::nn::Module {
  DenseLayers() {
    stem = register_module("stem", torch::nn::Conv2d(
        torch::nn::Conv2dOptions(3, 16, 3).padding(1)));
    for (int i = 0; i < 2; ++i) {
      norms.push_back(register_module(
          "norm" + std::to_string(i), torch::nn::BatchNorm2d(16 + 8 * i)));
      convs.push_back(register_module(
          "conv" + std::to_string(i),
          torch::nn::Conv2d(
              torch::nn::Conv2dOptions(16 + 8 * i, 8, 3).padding(1))));
    }
    last = register_module("last", torch::nn::BatchNorm2d(32));
  }
  at::Tensor forward(at::Tensor x) {
    at::Tensor features = stem(x);
    for (size_t i = 0; i < convs.size(); ++i) {
      at::Tensor y = convs[i](torch::relu(norms[i](features)));
      features = torch::cat({features, y}, 1);
    }
    return last(features);  // no relu after this one
  }
  torch::nn::Conv2d stem{nullptr};
  std::vector<torch::nn::BatchNorm2d> norms;
  std::vector<torch::nn::Conv2d> convs;
  torch::nn::BatchNorm2d last{nullptr};
};


}  // namespace

TEST_CASE("squeeze-excitation blocks run as one fx_onednn::squeeze_excite") {
  torch::NoGradGuard no_grad;
  torch::manual_seed(5);
  auto model = std::make_shared<ExcitedBlocks>();
  model->eval();
  const at::Tensor x = torch::randn({2, 3, 14, 14});
  const at::Tensor want = model->forward(x);
  fx::GraphModule gm = fx::symbolic_trace(model, x);
  fx::InferenceReport report = fx::optimize_for_inference(*gm);
  CHECK(report.squeeze_excites == 2);
  // The blocks' own convolutions and pooling are not counted.
  CHECK(report.convolutions == 3);
  CHECK(report.pooling == 0);
  const std::string printed = gm->graph().to_string();
  INFO(printed);
  CHECK(count_calls(gm->graph(), "fx_onednn::conv") == 3);
  CHECK(count_calls(gm->graph(), "fx_onednn::avg_pool2d") == 0);
  CHECK(count_calls(gm->graph(), "aten::mul.Tensor") == 0);
  CHECK(testdata::filecheck(R"(
    CHECK: fx_onednn::conv]
    CHECK-SAME: 'hardswish'
    CHECK: fx_onednn::squeeze_excite]
    CHECK-SAME: 'relu', 'hardsigmoid')
    CHECK: fx_onednn::conv]
    CHECK-SAME: 'silu'
    CHECK: fx_onednn::squeeze_excite]
    CHECK-SAME: 'silu', 'sigmoid')
    CHECK: fx_onednn::conv]
  )", printed));
  CHECK(relative_error(gm(x).toTensor(), want) < 1e-5);
  // Saved and loaded, and exported to TorchScript: the same results.
  testdata::check_round_trips(gm, {x});
  // Off: the five operators each.
  fx::GraphModule kept = fx::symbolic_trace(model, x);
  fx::InferenceOptions options;
  options.lower_squeeze_excite = false;
  CHECK(fx::optimize_for_inference(*kept, options).squeeze_excites == 0);
  CHECK(count_calls(kept->graph(), "fx_onednn::squeeze_excite") == 0);
  CHECK(count_calls(kept->graph(), "aten::mul.Tensor") == 2);
  CHECK(relative_error(kept(x).toTensor(), want) < 1e-5);
}

TEST_CASE("batch norms no convolution absorbs run on fx_onednn::batch_norm") {
  torch::manual_seed(3);
  auto model = std::make_shared<DenseLayers>();
  // Statistics and affine parameters of a trained model.
  for (auto& p : model->named_buffers()) {
    if (p.key().find("running_var") != std::string::npos) {
      p.value().uniform_(0.5, 2.0);
    } else if (p.key().find("running_mean") != std::string::npos) {
      p.value().normal_();
    }
  }
  {
    torch::NoGradGuard no_grad;
    for (auto& bn : model->norms) bn->weight.normal_();
  }
  model->eval();
  const at::Tensor x = torch::randn({2, 3, 12, 12});
  const at::Tensor want = model->forward(x);
  fx::GraphModule gm = fx::symbolic_trace(model, x);
  fx::InferenceReport report = fx::optimize_for_inference(*gm);
  CHECK(report.batch_norms == 3);
  CHECK(report.convolutions == 3);
  const std::string printed = gm->graph().to_string();
  INFO(printed);
  CHECK(count_calls(gm->graph(), "aten::batch_norm") == 0);
  CHECK(count_calls(gm->graph(), "aten::relu") == 0);
  CHECK(testdata::filecheck(R"(
    CHECK: fx_onednn::batch_norm]
    CHECK-SAME: 'relu')
    CHECK: fx_onednn::conv
    CHECK: fx_onednn::batch_norm]
    CHECK-SAME: 'relu')
    CHECK: fx_onednn::batch_norm]
    CHECK-SAME: 'none')
  )", printed));
  // One layout conversion, the output's: the stem converts its input
  // itself.
  CHECK(report.layout_conversions == 1);
  // The two concatenations (cat([cat([stem, y0]), y1])) write into one
  // buffer, each output once; the batch norm reads the first's view.
  CHECK(report.concatenations == 2);
  CHECK(report.concat_buffers == 1);
  CHECK(count_calls(gm->graph(), "aten::cat") == 0);
  CHECK(testdata::filecheck(R"(
    CHECK: fx_onednn::concat_buffer](args = ([%conv, %conv_1], 32)
    CHECK: aten::slice.Tensor](args = (%concat_buffer, 1, 0, 24)
    CHECK: fx_onednn::concat_write_](args = (%concat_buffer, [%conv_2], 24)
  )", printed));
  CHECK(relative_error(gm(x).toTensor(), want) < 1e-5);
  // Off: aten's.
  fx::GraphModule kept = fx::symbolic_trace(model, x);
  fx::InferenceOptions options;
  options.lower_batch_norm = false;
  CHECK(fx::optimize_for_inference(*kept, options).batch_norms == 0);
  CHECK(count_calls(kept->graph(), "aten::batch_norm") == 3);
  CHECK(relative_error(kept(x).toTensor(), want) < 1e-5);
}

// torchvision's dense block: every layer concatenates the list of all the
// block's outputs so far; the block's output is the concatenation of all.
struct DenseList : torch::nn::Module {
  explicit DenseList(bool in_place) : in_place(in_place) {
    stem = register_module("stem", torch::nn::Conv2d(
        torch::nn::Conv2dOptions(3, 16, 3).padding(1)));
    for (int i = 0; i < 3; ++i) {
      convs.push_back(register_module(
          "conv" + std::to_string(i),
          torch::nn::Conv2d(
              torch::nn::Conv2dOptions(16 + 8 * i, 8, 3).padding(1))));
    }
  }
  at::Tensor forward(at::Tensor x) {
    std::vector<at::Tensor> features = {stem(x)};
    for (auto& conv : convs) {
      at::Tensor joined = torch::cat(features, 1);
      // Written in place (by an operator that keeps the channels-last
      // layout, so on the concatenation itself): a copy of its own, which a
      // buffer's view is not.
      if (in_place && features.size() == 2) joined.relu_();
      features.push_back(conv(torch::relu(joined)));
    }
    return torch::cat(features, 1);
  }
  bool in_place;
  torch::nn::Conv2d stem{nullptr};
  std::vector<torch::nn::Conv2d> convs;
};

TEST_CASE("chained concatenations write each piece once into one buffer") {
  torch::NoGradGuard no_grad;
  torch::manual_seed(7);
  auto model = std::make_shared<DenseList>(false);
  model->eval();
  const at::Tensor x = torch::randn({2, 3, 11, 11});
  const at::Tensor want = model->forward(x);
  fx::GraphModule gm = fx::symbolic_trace(model, x);
  const fx::InferenceReport report = fx::optimize_for_inference(*gm);
  CHECK(report.concatenations == 4);
  CHECK(report.concat_buffers == 1);
  const std::string printed = gm->graph().to_string();
  INFO(printed);
  CHECK(count_calls(gm->graph(), "aten::cat") == 0);
  CHECK(testdata::filecheck(R"(
    CHECK: fx_onednn::concat_buffer](args = ([%conv], 40)
    CHECK: aten::slice.Tensor](args = (%concat_buffer, 1, 0, 16)
    CHECK: fx_onednn::concat_write_](args = (%concat_buffer, [%conv_1], 16)
    CHECK: aten::slice.Tensor](args = (%concat_write_, 1, 0, 24)
    CHECK: fx_onednn::concat_write_](args = (%concat_write_, [%conv_2], 24)
    CHECK: fx_onednn::concat_write_](args = (%concat_write__1, [%conv_3], 32)
    CHECK-NEXT: aten::contiguous](args = (%concat_write__2,)
  )", printed));
  CHECK(relative_error(gm(x).toTensor(), want) < 1e-5);
  // Saved and loaded, exported to TorchScript, run from two threads at
  // once: the same results.
  testdata::check_round_trips(gm, {x});
  at::Tensor other;
  std::thread second([&] {
    torch::NoGradGuard inner;
    other = gm(x * 2).toTensor();
  });
  const at::Tensor mine = gm(x).toTensor();
  second.join();
  CHECK(relative_error(mine, want) < 1e-5);
  CHECK(relative_error(other, model->forward(x * 2)) < 1e-5);
  // A concatenation written in place keeps its own copy; the next extends
  // the one before it (by two pieces).
  auto writes = std::make_shared<DenseList>(true);
  writes->eval();
  fx::GraphModule gw = fx::symbolic_trace(writes, x);
  const fx::InferenceReport wrote = fx::optimize_for_inference(*gw);
  CHECK(wrote.concatenations == 3);
  CHECK(count_calls(gw->graph(), "aten::cat") == 1);
  CHECK(testdata::filecheck(R"(
    CHECK: fx_onednn::concat_buffer](args = ([%conv], 40)
    CHECK: aten::cat](args = ([%conv, %conv_1], 1)
    CHECK: fx_onednn::concat_write_](args = (%concat_buffer, [%conv_1, %conv_2], 16)
  )", gw->graph().to_string()));
  CHECK(relative_error(gw(x).toTensor(), writes->forward(x)) < 1e-5);
  // Off: aten's.
  fx::GraphModule kept = fx::symbolic_trace(model, x);
  fx::InferenceOptions options;
  options.concat_buffers = false;
  CHECK(fx::optimize_for_inference(*kept, options).concatenations == 0);
  CHECK(count_calls(kept->graph(), "aten::cat") == 4);
  CHECK(relative_error(kept(x).toTensor(), want) < 1e-5);
}

TEST_CASE("an input several convolutions read is converted once") {
  // Inception's branches: one channels-last copy of the input for all; a
  // convolution reading an input alone converts it itself (an RGB image on
  // a kernel of ours).
  torch::manual_seed(6);
  torch::nn::Conv2d a(torch::nn::Conv2dOptions(5, 8, 3).padding(1));
  torch::nn::Conv2d b(torch::nn::Conv2dOptions(5, 8, 1));
  torch::nn::Conv2d c(torch::nn::Conv2dOptions(3, 8, 3).padding(1));
  struct Branches : torch::nn::Module {
    torch::nn::Conv2d a{nullptr}, b{nullptr}, c{nullptr};
    at::Tensor forward(at::Tensor x, at::Tensor z) {
      return torch::cat({a(x), b(x), c(z)}, 1);
    }
  };
  auto model = std::make_shared<Branches>();
  model->a = model->register_module("a", a);
  model->b = model->register_module("b", b);
  model->c = model->register_module("c", c);
  model->eval();
  for (int64_t batch : {1, 3}) {
    // 3 * 47 * 47 values an image: at batch 3 the RGB copy splits between
    // the threads, mid-image, its pixels not a multiple of 16.
    const at::Tensor x = torch::randn({batch, 5, 47, 47});
    const at::Tensor z = torch::randn({batch, 3, 47, 47});
    fx::GraphModule gm = fx::symbolic_trace(model, x, z);
    const fx::InferenceReport report =
        fx::optimize_for_inference(*gm, [] {
          fx::InferenceOptions o;
          o.decision = fx::InferenceOptions::Decision::kAll;
          return o;
        }());
    CHECK(report.convolutions == 3);
    const std::string printed = gm->graph().to_string();
    INFO(printed);
    CHECK(testdata::filecheck(R"(
      CHECK: aten::contiguous](args = (%x0,), kwargs = {memory_format: torch.channels_last})
      CHECK-NOT: aten::contiguous](args = (%x1
      CHECK: fx_onednn::conv](args = (%x1,
    )", printed));
    CHECK(report.layout_conversions == 2);  // x0's, and the concatenation's
    torch::NoGradGuard no_grad;
    CHECK(relative_error(gm(x, z).toTensor(), model->forward(x, z)) < 1e-5);
  }
}

TEST_CASE("a conv-bn-relu, conv-add-relu and linear graph lowers and fuses") {
  torch::manual_seed(0);
  auto model = std::make_shared<Conv>();
  model->eval();
  at::Tensor x = torch::randn({2, 3, 10, 10});
  fx::GraphModule gm = fx::symbolic_trace(model, x);
  fx::InferenceReport report = fx::optimize_for_inference(*gm);
  CHECK(report.convolutions == 2);
  CHECK(report.linear == 1);
  CHECK(report.fused_sums == 1);
  // b reads y, which the add then reads: the convolution cannot write
  // into the memory it reads.
  CHECK(report.in_place_sums == 0);
  CHECK(report.fused_activations == 3);  // relu, relu, hardswish
  CHECK(report.pooling == 3);
  const std::string printed = gm->graph().to_string();
  INFO(printed);
  CHECK(testdata::filecheck(R"(
    CHECK-NOT: aten::contiguous
    CHECK: fx_onednn::conv](args = (%x, %{{.*}}, [1, 1], [1, 1], [1, 1], 1, None, 'relu', 0.0, 0.0)
    CHECK: fx_onednn::conv](args = (%conv, %{{.*}}, [1, 1], [1, 1], [1, 1], 1, %conv, 'relu', 0.0, 0.0)
    CHECK-NOT: aten::conv2d
    CHECK-NOT: aten::batch_norm
    CHECK: fx_onednn::max_pool2d](args = (%conv_1, [3, 3], [2, 2], [0, 0], [1, 1], True)
    CHECK: fx_onednn::avg_pool2d](args = (%max_pool2d{{.*}}, [2, 2], [1, 1], [0, 0], False, True)
    CHECK-NOT: aten::max_pool2d
    CHECK: fx_onednn::avg_pool2d](args = (%{{.*}}, [4, 4], [4, 4], [0, 0], False, False)
    CHECK-NOT: aten::adaptive_avg_pool2d
    CHECK: fx_onednn::linear
    CHECK-SAME: 'hardswish'
  )", printed));
  // The packing is an init step's: the graph reads packed weights.
  CHECK(count_calls(gm->graph(), "fx_onednn::pack_conv_weight") == 0);
  CHECK(gm->init_steps().size() >= 2);
  torch::NoGradGuard no_grad;
  at::Tensor want = model->forward(x);
  at::Tensor got = gm(x).toTensor();
  CHECK(relative_error(got, want) < 1e-5);
  CHECK(got.is_contiguous());
}

TEST_CASE("global pooling of a dynamic image size stays aten's") {
  // Its window would be the traced size: oneDNN's pooling takes it as a
  // constant.
  torch::manual_seed(0);
  auto model = std::make_shared<Conv>();
  model->eval();
  fx::TraceOptions options;
  for (int64_t d : {2, 3}) {
    fx::DynamicDim dim;
    dim.input = 0;
    dim.dim = d;
    dim.symbol = d == 2 ? "H" : "W";
    dim.max = 64;
    options.dynamic.push_back(dim);
  }
  fx::GraphModule gm =
      fx::symbolic_trace(model, {torch::randn({2, 3, 10, 10})}, options);
  const fx::InferenceReport report = fx::optimize_for_inference(*gm);
  CHECK(report.pooling == 2);
  CHECK(count_calls(gm->graph(), "aten::adaptive_avg_pool2d") == 1);
  torch::NoGradGuard no_grad;
  for (int64_t size : {10, 13, 20}) {
    CAPTURE(size);
    const at::Tensor x = torch::randn({2, 3, size, size});
    CHECK(relative_error(gm(x).toTensor(), model->forward(x)) < 1e-5);
  }
}

TEST_CASE("every zoo model lowered matches eager") {
  torch::NoGradGuard no_grad;
  for (const std::string& name : models::traceable_zoo_model_names()) {
    CAPTURE(name);
    models::ZooModel model = models::make_zoo_model(name);
    fx::GraphModule gm = models::trace_zoo_model(model);
    fx::GraphModule lowered(gm->copy());
    fx::optimize_for_inference(*lowered);
    const std::string before = gm->graph().to_string();
    const c10::IValue want = model.forward(model.example_inputs);
    const c10::IValue got = lowered->forward(model.example_inputs);
    CHECK(output_error(got, want) < 1e-4);
    // Every weight is packed once, by an init step, never in forward.
    CHECK(count_calls(lowered->graph(), "fx_onednn::pack_conv_weight") == 0);
    CHECK(count_calls(lowered->graph(), "fx_onednn::pack_linear_weight") == 0);
    // The original is left as it was.
    CHECK(gm->graph().to_string() == before);
    if (name == "resnet18" || name == "mobilenet_v2" || name == "lenet" ||
        name == "unet") {
      CHECK(count_calls(lowered->graph(), "fx_onednn::conv") +
                count_calls(lowered->graph(), "fx_onednn::conv_chain") >
            0);
      CHECK(count_calls(lowered->graph(), "aten::conv2d") == 0);
    }
    if (name == "resnet18" || name == "resnet50") {
      // The stem's max pooling runs on oneDNN.
      CHECK(count_calls(lowered->graph(), "fx_onednn::max_pool2d") == 1);
      CHECK(count_calls(lowered->graph(), "aten::max_pool2d") == 0);
      // Each block's input dies at its residual add: added in place.
      CHECK(count_calls(lowered->graph(), "fx_onednn::conv_add_") ==
            (name == "resnet18" ? 8 : 16));
    }
    if (name == "mlp" || name == "transformer_encoder") {
      CHECK(count_calls(lowered->graph(), "fx_onednn::linear") > 0);
    }
  }
}

TEST_CASE("at batch 1, runs of convolutions run as one fx_onednn::conv_chain") {
  torch::NoGradGuard no_grad;
  models::ZooModel model = models::make_zoo_model("mobilenet_v2");
  const fx::GraphModule traced = models::trace_zoo_model(model);
  fx::GraphModule chained(traced->copy()), apart(traced->copy());
  const fx::InferenceReport report = fx::optimize_for_inference(*chained);
  fx::InferenceOptions options;
  options.chain_convolutions = false;
  fx::optimize_for_inference(*apart, options);
  // Its 52 convolutions, the first reading the image, in one chain.
  CHECK(report.conv_chains == 1);
  CHECK(report.chained == 52);
  CHECK(count_calls(chained->graph(), "fx_onednn::conv_chain") == 1);
  CHECK(count_calls(chained->graph(), "fx_onednn::conv") == 0);
  CHECK(count_calls(chained->graph(), "fx_onednn::conv_add_") == 0);
  CHECK(count_calls(apart->graph(), "fx_onednn::conv_chain") == 0);
  const at::Tensor x = model.example_inputs[0].toTensor();
  const at::Tensor want = apart(x).toTensor();
  const int saved = at::get_num_threads();
  for (int threads : {1, 2, 3}) {
    CAPTURE(threads);
    at::set_num_threads(threads);
    const at::Tensor got = chained(x).toTensor();
    CHECK(((got - want).abs().max() / want.abs().max()).item<double>() < 1e-5);
  }
  // Through LoadAwareThreads on a machine it counts busy: on one thread.
  fx::LoadAwareThreads aware;
  for (int i = 0; i < 4; ++i) aware.record(1e6, 1e6);
  REQUIRE(aware.threads() == 1);
  const at::Tensor got = aware.run([&] { return chained(x).toTensor(); });
  CHECK(((got - want).abs().max() / want.abs().max()).item<double>() < 1e-5);
  at::set_num_threads(saved);
  testdata::check_round_trips(chained, {x});
  // A graph traced at batch 2 keeps its convolutions apart.
  fx::GraphModule batch2 = fx::symbolic_trace(
      model.module, model.forward, {torch::randn({2, 3, 224, 224})});
  fx::InferenceOptions no_micro;
  no_micro.micro_batch = false;
  CHECK(fx::optimize_for_inference(*batch2, no_micro).conv_chains == 0);
  CHECK(count_calls(batch2->graph(), "fx_onednn::conv_chain") == 0);
}

TEST_CASE("a lowered graph runs on several threads at once, exactly") {
  // oneDNN shares one scratchpad between primitives unless each call
  // brings its own: two threads at once then overwrote each other's.
  torch::NoGradGuard no_grad;
  // Inception's factorized 1x7 and 7x1 convolutions are among those whose
  // oneDNN implementations use a scratchpad.
  torch::manual_seed(0);
  static const at::Tensor w1 = torch::randn({64, 32, 1, 7}) * 0.1;
  static const at::Tensor w2 = torch::randn({64, 64, 7, 1}) * 0.1;
  static const at::Tensor w3 = torch::randn({32, 64, 3, 3}) * 0.1;
  auto factorized = [](at::Tensor x) {
    const std::vector<int64_t> one = {1, 1};
    at::Tensor y = torch::relu(
        torch::conv2d(x, w1, {}, one, std::vector<int64_t>{0, 3}));
    y = torch::relu(torch::conv2d(y, w2, {}, one, std::vector<int64_t>{3, 0}));
    return torch::conv2d(y, w3, {}, std::vector<int64_t>{2, 2}, one);
  };
  // MobileNetV2 at batch 1: its convolutions in one fx_onednn::conv_chain.
  for (const char* name : {"factorized", "resnet18", "mobilenet_v2", "mlp"}) {
    CAPTURE(name);
    fx::GraphModule traced(nullptr);
    at::Tensor example;
    if (std::string(name) == "factorized") {
      example = torch::randn({1, 32, 35, 35});
      traced = fx::symbolic_trace(nullptr, fx::box_function(factorized),
                                  {example});
    } else {
      models::ZooModel model = models::make_zoo_model(name);
      model.module->eval();
      traced = models::trace_zoo_model(model);
      example = model.example_inputs[0].toTensor();
    }
    fx::GraphModule lowered = traced;
    fx::optimize_for_inference(*lowered);
    std::vector<at::Tensor> inputs;
    std::vector<at::Tensor> expected;
    for (int i = 0; i < 4; ++i) {
      inputs.push_back(torch::randn(example.sizes()));
    }
    std::thread reference([&] {
      at::set_num_threads(1);
      for (const at::Tensor& x : inputs) {
        expected.push_back(lowered->forward({x}).toTensor());
      }
    });
    reference.join();
    std::vector<int> wrong(inputs.size(), 0);
    std::vector<std::thread> threads;
    for (size_t t = 0; t < inputs.size(); ++t) {
      threads.emplace_back([&, t] {
        at::set_num_threads(1);
        for (int round = 0; round < 10; ++round) {
          if (!torch::equal(lowered->forward({inputs[t]}).toTensor(),
                            expected[t])) {
            ++wrong[t];
          }
        }
      });
    }
    for (std::thread& t : threads) t.join();
    CHECK(wrong == std::vector<int>(inputs.size(), 0));
  }
}

TEST_CASE("a lowered graph saves, loads (packing again) and still guards") {
  torch::NoGradGuard no_grad;
  models::ZooModel model = models::make_zoo_model("resnet18");
  fx::GraphModule gm = fx::PassManager()
                           .add("optimize_for_inference")
                           .run(models::trace_zoo_model(model))
                           .module;
  CHECK(count_calls(gm->graph(), "fx_onednn::conv") +
            count_calls(gm->graph(), "fx_onednn::conv_add_") ==
        20);
  std::stringstream file;
  fx::save(gm, file);
  fx::GraphModule loaded = fx::load(file);
  at::Tensor x = model.example_inputs[0].toTensor();
  at::Tensor want = gm(x).toTensor();
  CHECK(at::equal(loaded(x).toTensor(), want));
  CHECK(loaded->graph().to_string() == gm->graph().to_string());
  CHECK_THROWS_AS(loaded(x.to(at::kDouble)), fx::GuardError);
}

TEST_CASE("a lowered graph exports to TorchScript and runs there") {
  torch::NoGradGuard no_grad;
  models::ZooModel model = models::make_zoo_model("mobilenet_v2");
  fx::GraphModule lowered = models::trace_zoo_model(model);
  fx::optimize_for_inference(*lowered);
  torch::jit::Module script = fx::to_torchscript(lowered);
  const std::string code = script.get_method("forward").graph()->toString();
  CHECK_THAT(code, Catch::Contains("fx_onednn::conv"));
  at::Tensor x = model.example_inputs[0].toTensor();
  CHECK(torch::equal(script.forward({x}).toTensor(), lowered(x).toTensor()));
}

TEST_CASE("bf16 runs chains in bfloat16 and converts back at their ends") {
  torch::NoGradGuard no_grad;
  for (const char* name : {"resnet18", "mobilenet_v2", "unet"}) {
    CAPTURE(name);
    models::ZooModel model = models::make_zoo_model(name);
    fx::GraphModule lowered = models::trace_zoo_model(model);
    fx::InferenceOptions options;
    options.bf16 = true;
    if (!fx::onednn::bf16_supported()) {
      // No AVX-512 (an AVX2 machine): refused by name, the graph unchanged.
      const std::string before = lowered->graph().to_string();
      CHECK_THROWS_WITH(fx::optimize_for_inference(*lowered, options),
                        Catch::Contains("avx512_core") &&
                            Catch::Contains("bf16 = false"));
      CHECK(lowered->graph().to_string() == before);
      continue;
    }
    fx::optimize_for_inference(*lowered, options);
    const std::string printed = lowered->graph().to_string();
    CHECK_THAT(printed, Catch::Contains("aten::to.dtype](args = (%x, torch.bfloat16)"));
    const c10::IValue got = lowered->forward(model.example_inputs);
    const at::Tensor out = got.isTensor() ? got.toTensor()
                                          : got.toTupleRef().elements()[0].toTensor();
    CHECK(out.scalar_type() == at::kFloat);
    CHECK(output_error(got, model.forward(model.example_inputs)) < 5e-2);
    // The packing step packs bfloat16.
    bool packs_bf16 = false;
    for (const auto& step : lowered->init_steps()) {
      packs_bf16 = packs_bf16 || step.graph->to_string().find("bf16: True") !=
                                     std::string::npos;
    }
    CHECK(packs_bf16);
    // The cost model prices the packed weights as bfloat16.
    int packed = 0;
    for (const fx::Node* n : lowered->graph().nodes()) {
      const std::string target = n->target().to_string();
      // conv(input, weight, ...), linear(input, weight, ...),
      // conv_add_(self, input, weight, ...).
      const size_t weight = target == "fx_onednn::conv_add_" ? 2 : 1;
      if (target.rfind("fx_onednn::", 0) != 0 ||
          n->args().size() <= weight || !n->args()[weight].is_node()) {
        continue;
      }
      const fx::TensorMeta* w =
          n->args()[weight].to_node()->meta().get(fx::kTensorMeta);
      REQUIRE(w != nullptr);
      CHECK(w->dtype == at::kBFloat16);
      ++packed;
    }
    CHECK(packed > 0);
  }
}

TEST_CASE("a residual read after the add is not overwritten") {
  torch::NoGradGuard no_grad;
  torch::manual_seed(0);
  torch::nn::Conv2d a(torch::nn::Conv2dOptions(3, 3, 3).padding(1));
  torch::nn::Conv2d b(torch::nn::Conv2dOptions(3, 3, 3).padding(1));
  auto f = [&](at::Tensor x) {
    at::Tensor y = a(x);
    at::Tensor z = torch::relu(b(y) + y);
    return z * y;  // y is read after the add
  };
  at::Tensor x = torch::randn({1, 3, 8, 8});
  fx::GraphModule gm = fx::symbolic_trace(f, x);
  fx::InferenceReport report = fx::optimize_for_inference(*gm);
  CHECK(report.fused_sums == 1);
  CHECK(report.in_place_sums == 0);
  CHECK(relative_error(gm(x).toTensor(), f(x)) < 1e-5);
}

TEST_CASE("a lone convolution is lowered only where it pays") {
  torch::NoGradGuard no_grad;
  torch::manual_seed(0);
  // No lowered neighbour: lowering would convert its input and output and
  // fuse nothing; the cost model declines it.
  torch::nn::Conv2d conv(torch::nn::Conv2dOptions(8, 8, 1));
  conv->eval();
  at::Tensor x = torch::randn({1, 8, 32, 32});
  fx::GraphModule gm = fx::symbolic_trace(conv.ptr(), x);
  fx::InferenceReport report = fx::optimize_for_inference(*gm);
  CHECK(report.convolutions == 0);
  CHECK(report.declined == 1);
  CHECK(count_calls(gm->graph(), "aten::conv2d") == 1);

  fx::InferenceOptions all;
  all.decision = fx::InferenceOptions::Decision::kAll;
  fx::GraphModule forced = fx::symbolic_trace(conv.ptr(), x);
  CHECK(fx::optimize_for_inference(*forced, all).convolutions == 1);
  CHECK(relative_error(forced(x).toTensor(), conv(x)) < 1e-5);

  // Measured: either choice is right; the result still matches.
  fx::InferenceOptions measure;
  measure.decision = fx::InferenceOptions::Decision::kMeasure;
  models::ZooModel model = models::make_zoo_model("resnet18");
  fx::GraphModule measured = models::trace_zoo_model(model);
  report = fx::optimize_for_inference(*measured, measure);
  CHECK(report.convolutions + report.declined == 20);
  CHECK(relative_error(measured(model.example_inputs[0]).toTensor(),
                       model.forward(model.example_inputs).toTensor()) < 1e-4);
}

TEST_CASE("what cannot be lowered is left alone") {
  torch::NoGradGuard no_grad;
  // A convolution whose weight is an input, and a double graph.
  auto f = [](at::Tensor x, at::Tensor w) { return at::conv2d(x, w).relu(); };
  fx::GraphModule gm =
      fx::symbolic_trace(f, torch::randn({1, 2, 5, 5}), torch::randn({3, 2, 3, 3}));
  CHECK(fx::optimize_for_inference(*gm).convolutions == 0);
  CHECK(count_calls(gm->graph(), "aten::conv2d") == 1);

  torch::nn::Conv2d conv(torch::nn::Conv2dOptions(2, 3, 3));
  conv->to(at::kDouble);
  conv->eval();
  fx::GraphModule doubled = fx::symbolic_trace(
      conv.ptr(), torch::randn({1, 2, 5, 5}, at::kDouble));
  CHECK(fx::optimize_for_inference(*doubled).convolutions == 0);
  // Nor is a double graph micro-batched, whose aten convolutions at batch 8
  // move enough bytes to be (17 MB each).
  torch::nn::Sequential wide(
      torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 64, 1)),
      torch::nn::ReLU(), torch::nn::Conv2d(torch::nn::Conv2dOptions(64, 3, 1)));
  wide->to(at::kDouble);
  wide->eval();
  const at::Tensor batch = torch::randn({8, 3, 64, 64}, at::kDouble);
  fx::GraphModule wide_graph = fx::symbolic_trace(
      [&](at::Tensor y) { return wide->forward(y); }, batch);
  const fx::InferenceReport wide_report =
      fx::optimize_for_inference(*wide_graph);
  CHECK(wide_report.convolutions == 0);
  CHECK(wide_report.micro_batched == 0);
  CHECK(count_calls(wide_graph->graph(), "aten::slice.Tensor") == 0);

  // A chain's value promoted to double before its pooling: aten pools it.
  torch::nn::Conv2d single(torch::nn::Conv2dOptions(2, 3, 3));
  single->eval();
  auto promoted = [&](at::Tensor x, at::Tensor scale) {
    return at::max_pool2d(single(x) * scale, {2, 2});
  };
  const at::Tensor x = torch::randn({1, 2, 9, 9});
  const at::Tensor scale = torch::rand({1}, at::kDouble);
  fx::GraphModule mixed = fx::symbolic_trace(promoted, x, scale);
  fx::InferenceOptions every;
  every.decision = fx::InferenceOptions::Decision::kAll;
  const fx::InferenceReport report = fx::optimize_for_inference(*mixed, every);
  CHECK(report.convolutions == 1);
  CHECK(report.pooling == 0);
  CHECK(torch::allclose(mixed(x, scale).toTensor(), promoted(x, scale)));
}

TEST_CASE("the cost model prices lowered calls as the calls they replaced") {
  // The schedulers (parallelize_branches, split_pipeline) balance lowered
  // graphs by the cost model: unpriced, fx_onednn calls cost nothing and
  // the branches of a lowered googlenet went unbalanced.
  torch::NoGradGuard no_grad;
  models::ZooModel model = models::make_zoo_model("resnet18");
  fx::GraphModule gm = models::trace_zoo_model(model);
  fx::GraphModule lowered(gm->copy());
  fx::optimize_for_inference(*lowered);
  const fx::CostReport before = fx::estimate_cost(gm->graph());
  const fx::CostReport after = fx::estimate_cost(lowered->graph());
  for (const std::string& op : after.unmodelled_ops) {
    CAPTURE(op);
    CHECK(op.find("fx_onednn") == std::string::npos);
  }
  REQUIRE(before.total.macs > 1e9);
  CHECK(after.total.macs == Approx(before.total.macs).epsilon(1e-9));
  // Packed weights keep their logical sizes: the fc's 512 x 1000 floats are
  // weights it reads (they were the bias's 1000 alone), and the lowered
  // graph reads the weights the traced one did, less batch norm's
  // statistics (folded into the convolutions' weights and biases).
  bool linear_seen = false;
  for (const auto& [node, cost] : after.nodes) {
    if (node->target().to_string() != "fx_onednn::linear") continue;
    linear_seen = true;
    CHECK(cost.weight_bytes == (512 * 1000 + 1000) * 4);
  }
  CHECK(linear_seen);
  CHECK(after.total.weight_bytes < before.total.weight_bytes);
  CHECK(after.total.weight_bytes > 0.95 * before.total.weight_bytes);
  CHECK_THROWS_WITH(fx::price_as("mine::op", "aten::no_such_op"),
                    Catch::Contains("does not price 'aten::no_such_op'"));
}

TEST_CASE("a lowered MobileNetV2's chained convolutions are priced") {
  // At batch 1 its 52 convolutions run as one fx_onednn::conv_chain: the
  // cost model counts their multiply-adds as the convolutions' own.
  torch::NoGradGuard no_grad;
  models::ZooModel model = models::make_zoo_model("mobilenet_v2");
  fx::GraphModule gm = models::trace_zoo_model(model);
  fx::GraphModule lowered(gm->copy());
  REQUIRE(fx::optimize_for_inference(*lowered).chained == 52);
  const fx::CostReport before = fx::estimate_cost(gm->graph());
  const fx::CostReport after = fx::estimate_cost(lowered->graph());
  CHECK(after.unmodelled_ops.empty());
  REQUIRE(before.total.macs > 2e8);
  CHECK(after.total.macs == Approx(before.total.macs).epsilon(1e-9));
}

namespace {

// A segmentation head's decoder: transposed convolutions upsample.
struct Decoder : torch::nn::Module {
  Decoder() {
    enc = register_module("enc", torch::nn::Conv2d(
        torch::nn::Conv2dOptions(3, 16, 3).stride(2).padding(1)));
    up1 = register_module("up1", torch::nn::ConvTranspose2d(
        torch::nn::ConvTranspose2dOptions(16, 8, 3)
            .stride(2).padding(1).output_padding(1)));
    up2 = register_module("up2", torch::nn::ConvTranspose2d(
        torch::nn::ConvTranspose2dOptions(8, 4, 2).stride(2).groups(4)));
  }
  at::Tensor forward(at::Tensor x) {
    at::Tensor y = torch::relu(enc(x));
    y = torch::relu(up1(y));
    return torch::sigmoid(up2(y));
  }
  torch::nn::Conv2d enc{nullptr};
  torch::nn::ConvTranspose2d up1{nullptr}, up2{nullptr};
};

}  // namespace

TEST_CASE("transposed convolutions lower, fuse, save, load and export") {
  torch::NoGradGuard no_grad;
  torch::manual_seed(0);
  auto model = std::make_shared<Decoder>();
  model->eval();
  const at::Tensor x = torch::randn({2, 3, 16, 20});
  fx::GraphModule gm = fx::symbolic_trace(model, x);
  const fx::InferenceReport report = fx::optimize_for_inference(*gm);
  CHECK(report.convolutions == 3);
  CHECK(report.fused_activations == 3);  // relu, relu, sigmoid
  CHECK(count_calls(gm->graph(), "fx_onednn::conv_transpose") == 2);
  CHECK(count_calls(gm->graph(), "aten::conv_transpose2d.input") == 0);
  // One chain: no layout conversion between the lowered calls; the first
  // converts its input itself.
  CHECK(report.layout_conversions == 1);  // the output
  const at::Tensor want = model->forward(x);
  const at::Tensor got = gm(x).toTensor();
  CHECK(got.sizes() == want.sizes());
  CHECK(relative_error(got, want) < 1e-5);
  testdata::check_round_trips(gm, {x});
  // The cost model prices them as the transposed convolutions they were.
  const fx::GraphModule traced = fx::symbolic_trace(model, x);
  CHECK(fx::estimate_cost(gm->graph()).total.macs ==
        fx::estimate_cost(traced->graph()).total.macs);
}

TEST_CASE("linear of a weight read through t() lowers, folded or not") {
  torch::NoGradGuard no_grad;
  // x @ w + b with w [in, out], written as linear(x, t(w), b).
  torch::manual_seed(0);
  const at::Tensor w = torch::randn({3, 4});
  const at::Tensor b = torch::randn({4});
  const at::Tensor x = torch::randn({2, 3});
  for (bool fold : {true, false}) {
    CAPTURE(fold);
    fx::Attributes attributes;
    attributes.parameters["w"] = w;
    attributes.parameters["b"] = b;
    fx::GraphModule gm(fx::parse_graph(R"(graph():
      %x : f32[2, 3] = placeholder[target=x]
      %w : f32[3, 4] = get_attr[target=w]
      %b : f32[4] = get_attr[target=b]
      %t : f32[4, 3] = call_function[target=aten::t](args = (%w,), kwargs = {})
      %linear : f32[2, 4] = call_function[target=aten::linear](args = (%x, %t, %b), kwargs = {})
      %relu : f32[2, 4] = call_function[target=aten::relu](args = (%linear,), kwargs = {})
      return relu)"),
                       attributes);
    fx::InferenceOptions options;
    options.fold = fold;
    const fx::InferenceReport report = fx::optimize_for_inference(*gm, options);
    CAPTURE(gm->graph().to_string());
    CHECK(report.linear == 1);
    CHECK(report.fused_activations == 1);
    CHECK(count_calls(gm->graph(), "fx_onednn::linear") == 1);
    CHECK(relative_error(gm(x).toTensor(), at::relu(at::linear(x, w.t(), b))) <
          1e-5);
  }
}

TEST_CASE("gelu after a linear layer fuses, exact or tanh") {
  torch::NoGradGuard no_grad;
  torch::manual_seed(0);
  const at::Tensor w = torch::randn({4, 4});
  const at::Tensor x = torch::randn({2, 4});
  fx::Attributes attributes;
  attributes.parameters["w"] = w;
  fx::GraphModule gm(fx::parse_graph(R"(graph():
    %x : f32[2, 4] = placeholder[target=x]
    %w : f32[4, 4] = get_attr[target=w]
    %linear : f32[2, 4] = call_function[target=aten::linear](args = (%x, %w), kwargs = {})
    %gelu : f32[2, 4] = call_function[target=aten::gelu](args = (%linear,), kwargs = {})
    %linear_1 : f32[2, 4] = call_function[target=aten::linear](args = (%gelu, %w), kwargs = {})
    %gelu_1 : f32[2, 4] = call_function[target=aten::gelu](args = (%linear_1,), kwargs = {approximate: 'tanh'})
    return gelu_1)"),
                     attributes);
  const fx::InferenceReport report = fx::optimize_for_inference(*gm);
  CAPTURE(gm->graph().to_string());
  CHECK(report.linear == 2);
  CHECK(report.fused_activations == 2);
  CHECK(count_calls(gm->graph(), "aten::gelu") == 0);
  const at::Tensor want =
      at::gelu(at::linear(at::gelu(at::linear(x, w)), w), "tanh");
  CHECK(relative_error(gm(x).toTensor(), want) < 1e-5);
}

TEST_CASE("attention's scale traced as a 0-d tensor constant fuses into "
          "its matmul") {
  // TorchScript traces `(q @ k^T) * (1.0 / math.sqrt(d))` with the number
  // as a tensor constant (a GPT-style block written by hand).
  torch::NoGradGuard no_grad;
  torch::manual_seed(0);
  const at::Tensor q = torch::randn({1, 2, 8, 4});
  const at::Tensor k = torch::randn({1, 2, 8, 4});
  fx::Attributes attributes;
  attributes.buffers["_tensor_constant0"] = torch::tensor(0.5);  // float32
  attributes.buffers["_tensor_constant1"] = torch::tensor({0.5});  // 1-d
  attributes.buffers["_tensor_constant2"] = torch::tensor(2.0, at::kDouble);
  attributes.buffers["_tensor_constant3"] = torch::tensor(int64_t{2});
  fx::GraphModule gm(fx::parse_graph(R"(graph():
    %q : f32[1, 2, 8, 4] = placeholder[target=q]
    %k : f32[1, 2, 8, 4] = placeholder[target=k]
    %c0 : f32[] = get_attr[target=_tensor_constant0]
    %c1 : f32[1] = get_attr[target=_tensor_constant1]
    %c2 : f64[] = get_attr[target=_tensor_constant2]
    %c3 : i64[] = get_attr[target=_tensor_constant3]
    %t : f32[1, 2, 4, 8] = call_function[target=aten::transpose.int](args = (%k, -2, -1), kwargs = {})
    %s0 : f32[1, 2, 8, 8] = call_function[target=aten::matmul](args = (%q, %t), kwargs = {})
    %m0 : f32[1, 2, 8, 8] = call_function[target=aten::mul.Tensor](args = (%s0, %c0), kwargs = {})
    %s1 : f32[1, 2, 8, 8] = call_function[target=aten::matmul](args = (%q, %t), kwargs = {})
    %m1 : f32[1, 2, 8, 8] = call_function[target=aten::mul.Tensor](args = (%s1, %c1), kwargs = {})
    %s2 : f32[1, 2, 8, 8] = call_function[target=aten::matmul](args = (%q, %t), kwargs = {})
    %m2 : f32[1, 2, 8, 8] = call_function[target=aten::div.Tensor](args = (%s2, %c2), kwargs = {})
    %s3 : f32[1, 2, 8, 8] = call_function[target=aten::matmul](args = (%q, %t), kwargs = {})
    %m3 : f32[1, 2, 8, 8] = call_function[target=aten::mul.Tensor](args = (%s3, %c3), kwargs = {})
    return (m0, m1, m2, m3))"),
                     attributes);
  const std::vector<c10::IValue> want =
      gm(q, k).toTupleRef().elements().vec();
  const fx::InferenceReport report = fx::optimize_for_inference(*gm);
  const std::string printed = gm->graph().to_string();
  INFO(printed);
  CHECK(report.matmul == 4);
  // The 0-d floating-point constants are scales; the 1-d one and the
  // integer one stay multiplications.
  CHECK(count_calls(gm->graph(), "aten::div.Tensor") == 0);
  CHECK(count_calls(gm->graph(), "aten::mul.Tensor") == 2);
  CHECK(testdata::filecheck(R"(
    CHECK: fx_onednn::matmul](args = (%q, %t, 0.5)
    CHECK: fx_onednn::matmul](args = (%q, %t)
    CHECK: fx_onednn::matmul](args = (%q, %t, 0.5)
    CHECK: fx_onednn::matmul](args = (%q, %t)
  )", printed));
  const std::vector<c10::IValue> got = gm(q, k).toTupleRef().elements().vec();
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CHECK(relative_error(got[i].toTensor(), want[i].toTensor()) < 1e-6);
  }
}

TEST_CASE("a chain on a tiny image runs as eager at 1-4 threads") {
  // A padding larger than a 1x1 kernel reaches: some output rows read
  // padding only, and the thread given just those rows had no input row
  // for its primitive (oneDNN: "could not construct a memory descriptor").
  torch::NoGradGuard no_grad;
  struct Layer {
    int64_t in, out, kernel, stride, padding;
  };
  struct Case {
    std::vector<int64_t> image;
    std::vector<Layer> layers;
  };
  const std::vector<Case> cases = {
      {{1, 8, 1, 1}, {{8, 16, 3, 1, 1}, {16, 16, 1, 2, 2}, {16, 16, 1, 1, 0}}},
      {{1, 8, 1, 3}, {{8, 8, 3, 1, 1}, {8, 8, 1, 1, 3}, {8, 8, 1, 1, 0}}},
      {{1, 8, 2, 2}, {{8, 8, 1, 1, 0}, {8, 8, 1, 1, 4}, {8, 8, 3, 2, 1}}},
      {{1, 8, 1, 1}, {{8, 8, 1, 1, 2}, {8, 8, 1, 1, 2}, {8, 8, 3, 3, 0}}},
      {{1, 4, 3, 1}, {{4, 8, 3, 1, 1}, {8, 8, 1, 1, 5}, {8, 4, 3, 1, 2}}},
  };
  const int saved = at::get_num_threads();
  for (size_t index = 0; index < cases.size(); ++index) {
    const Case& c = cases[index];
    CAPTURE(index);
    torch::manual_seed(static_cast<uint64_t>(index));
    torch::nn::Sequential net;
    for (const Layer& l : c.layers) {
      net->push_back(torch::nn::Conv2d(
          torch::nn::Conv2dOptions(l.in, l.out, l.kernel)
              .stride(l.stride)
              .padding(l.padding)));
      net->push_back(torch::nn::ReLU());
    }
    net->eval();
    const at::Tensor x = torch::randn(c.image);
    const at::Tensor want = net->forward(x);
    fx::GraphModule gm = fx::symbolic_trace(
        [&](at::Tensor y) { return net->forward(y); }, x);
    fx::InferenceOptions all;
    all.decision = fx::InferenceOptions::Decision::kAll;
    const fx::InferenceReport report = fx::optimize_for_inference(*gm, all);
    CHECK(report.chained == 3);
    for (int threads : {1, 2, 3, 4}) {
      CAPTURE(threads);
      at::set_num_threads(threads);
      at::Tensor got;
      REQUIRE_NOTHROW(got = gm(x).toTensor());
      CHECK(got.sizes() == want.sizes());
      CHECK(relative_error(got, want) < 1e-5);
    }
  }
  at::set_num_threads(saved);
}
