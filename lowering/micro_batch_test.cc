#include "lowering/micro_batch.h"

#include <torch/torch.h>


#include "fx/fx.h"
#include "lowering/optimize_for_inference.h"
#include "testdata/round_trip.h"
#include "testdata/test_helpers.h"
#include "third_party/catch.h"

namespace {

using testdata::count_calls;

// MobileNetV2's first layers (a wide expansion, a depthwise convolution, a
// narrow projection) and a classifier after them.
struct Stem : torch::nn::Module {
  explicit Stem(bool mix_batch = false) : mix_batch(mix_batch) {
    expand = register_module("expand", torch::nn::Conv2d(
        torch::nn::Conv2dOptions(3, 48, 1)));
    depthwise = register_module("depthwise", torch::nn::Conv2d(
        torch::nn::Conv2dOptions(48, 48, 3).padding(1).stride(2).groups(48)));
    project = register_module("project", torch::nn::Conv2d(
        torch::nn::Conv2dOptions(48, 8, 1)));
    fc = register_module("fc", torch::nn::Linear(8, 5));
  }
  at::Tensor forward(at::Tensor x) {
    at::Tensor y = torch::relu6(depthwise(torch::relu6(expand(x))));
    if (mix_batch) y = y - y.mean(0, true);  // each sample reads the others
    y = project(y);
    return fc(torch::adaptive_avg_pool2d(y, {1, 1}).flatten(1));
  }
  bool mix_batch;
  torch::nn::Conv2d expand{nullptr}, depthwise{nullptr}, project{nullptr};
  torch::nn::Linear fc{nullptr};
};

// A wide expansion, then a 3x3 convolution down to a few channels:
// compute-bound, and on 32x32 images too small to run one at a time at
// its batch's speed.
struct ExpandThenConv : torch::nn::Module {
  ExpandThenConv() {
    expand = register_module("expand", torch::nn::Conv2d(
        torch::nn::Conv2dOptions(3, 48, 1)));
    conv = register_module("conv", torch::nn::Conv2d(
        torch::nn::Conv2dOptions(48, 8, 3).padding(1)));
  }
  at::Tensor forward(at::Tensor x) {
    return conv(torch::relu(expand(x))).sum({2, 3});
  }
  torch::nn::Conv2d expand{nullptr}, conv{nullptr};
};

// Thresholds for a small model: its expansion (48 channels at 32x32,
// 786 KB at batch 4 with its input) and depthwise layers are "large".
fx::MicroBatchOptions small_thresholds() {
  fx::MicroBatchOptions options;
  options.min_bytes = 512 << 10;
  options.micro_batch_bytes = 256 << 10;
  return options;
}

// Lowered without micro-batching, for the tests to call fx::micro_batch.
fx::GraphModule lowered(fx::GraphModule gm) {
  fx::InferenceOptions options;
  options.micro_batch = false;
  fx::optimize_for_inference(*gm, options);
  return gm;
}

template <typename Module>
fx::GraphModule lowered(const std::shared_ptr<Module>& module,
                        const at::Tensor& x) {
  return lowered(fx::symbolic_trace(module, x));
}

template <typename Module, typename... Args>
std::shared_ptr<Module> in_eval(Args... args) {
  auto module = std::make_shared<Module>(args...);
  module->eval();
  return module;
}

}  // namespace

TEST_CASE("the leading layers of a batch run one micro-batch at a time") {
  torch::NoGradGuard no_grad;
  torch::manual_seed(0);
  auto model = in_eval<Stem>();
  const at::Tensor x = torch::randn({4, 3, 32, 32});
  const at::Tensor want = model->forward(x);
  fx::GraphModule whole = lowered(model, x);
  fx::GraphModule split = lowered(model, x);
  const fx::MicroBatchReport report =
      fx::micro_batch(*split, small_thresholds());
  split->recompile();
  CHECK(report.micro_batch == 1);
  CHECK(report.micro_batches == 4);
  // expand, depthwise and the projection after them (a tenth of the
  // depthwise output's bytes cross there); the classifier runs once.
  CHECK(report.nodes == 3);
  const fx::Graph& g = split->graph();
  CHECK(count_calls(g, "aten::slice.Tensor") == 4);
  CHECK(count_calls(g, "aten::cat") == 1);
  CHECK(count_calls(g, "fx_onednn::conv") == 12);
  CHECK(count_calls(g, "fx_onednn::linear") == 1);
  const at::Tensor got = split(x).toTensor();
  CHECK(torch::allclose(got, whole(x).toTensor(), 1e-5, 1e-6));
  CHECK(torch::allclose(got, want, 1e-4, 1e-5));

  // The same graph from every run; it saves, loads and exports.
  fx::GraphModule again = lowered(model, x);
  fx::micro_batch(*again, small_thresholds());
  CHECK(again->graph().to_string() == g.to_string());
  testdata::check_round_trips(split, {x});

  // Micro-batches of two when two samples fit.
  fx::MicroBatchOptions pairs = small_thresholds();
  pairs.micro_batch_bytes *= 2;
  fx::GraphModule halves = lowered(model, x);
  CHECK(fx::micro_batch(*halves, pairs).micro_batch == 2);
  halves->recompile();
  CHECK(count_calls(halves->graph(), "aten::slice.Tensor") == 2);
  CHECK(torch::allclose(halves(x).toTensor(), want, 1e-4, 1e-5));
}

TEST_CASE("a micro-batched graph whose batch is free runs every batch size") {
  // A TorchScript file's graph guards no sizes: its micro-batches take
  // their rows from the batch each call brings.
  torch::NoGradGuard no_grad;
  torch::manual_seed(2);
  auto model = in_eval<Stem>();
  const at::Tensor x = torch::randn({4, 3, 32, 32});
  fx::GraphModule traced = fx::symbolic_trace(model, x);
  traced->graph().placeholders()[0]->meta().get_mutable(fx::kGuard)
      ->check_sizes = false;
  fx::GraphModule gm = lowered(traced);
  REQUIRE(fx::micro_batch(*gm, small_thresholds()).micro_batches == 4);
  gm->recompile();
  for (int64_t batch : {4, 1, 3, 9, 0}) {
    CAPTURE(batch);
    const at::Tensor y = torch::randn({batch, 3, 32, 32});
    const at::Tensor got = gm(y).toTensor();
    REQUIRE(got.sizes() == model->forward(y).sizes());
    CHECK(torch::allclose(got, model->forward(y), 1e-4, 1e-5));
  }
}

TEST_CASE("what micro-batching leaves whole") {
  torch::NoGradGuard no_grad;
  torch::manual_seed(1);
  auto model = in_eval<Stem>();
  SECTION("batch 1, or layers smaller than the threshold") {
    fx::GraphModule one = lowered(model, torch::randn({1, 3, 32, 32}));
    CHECK(fx::micro_batch(*one, small_thresholds()).nodes == 0);
    fx::GraphModule small = lowered(model, torch::randn({4, 3, 32, 32}));
    const std::string before = small->graph().to_string();
    CHECK(fx::micro_batch(*small).nodes == 0);  // 16 MiB
    CHECK(small->graph().to_string() == before);
  }
  SECTION("a dynamic batch") {
    const at::Tensor x = torch::randn({4, 3, 32, 32});
    fx::TraceOptions options;
    options.dynamic = {{.input = 0, .dim = 0, .symbol = "B", .max = 64}};
    fx::GraphModule gm = lowered(fx::symbolic_trace(model, {x}, options));
    CHECK(fx::micro_batch(*gm, small_thresholds()).nodes == 0);
  }
  SECTION("what reads other samples ends the part") {
    auto mixing = in_eval<Stem>(/*mix_batch=*/true);
    const at::Tensor x = torch::randn({4, 3, 32, 32});
    fx::GraphModule gm = lowered(mixing, x);
    const fx::MicroBatchReport report =
        fx::micro_batch(*gm, small_thresholds());
    gm->recompile();
    CHECK(report.nodes == 2);  // expand and depthwise, not the mean
    CHECK(torch::allclose(gm(x).toTensor(), mixing->forward(x), 1e-4, 1e-5));
  }
  SECTION("a compute-bound layer on small images ends the part") {
    auto two = in_eval<ExpandThenConv>();
    for (int64_t size : {32, 64}) {
      CAPTURE(size);
      const at::Tensor x = torch::randn({4, 3, size, size});
      fx::GraphModule gm = lowered(two, x);
      const fx::MicroBatchReport report =
          fx::micro_batch(*gm, small_thresholds());
      gm->recompile();
      // At 32x32 the part ends before the 3x3 convolution, where the
      // expansion's 48 channels would cross: not worth it. At 64x64 the
      // convolution runs per image too, and 8 channels cross.
      CHECK(report.nodes == (size == 32 ? 0 : 2));
      CHECK(torch::allclose(gm(x).toTensor(), two->forward(x), 1e-4, 1e-5));
    }
  }
  SECTION("a constant with a batch of its own") {
    // (expand(x) * w), w of [4, 48, 1, 1]: sample i takes w[i], so the
    // product and the projection after it stay whole, and the expansion's
    // output is too large to concatenate: nothing is split.
    const at::Tensor w = torch::rand({4, 48, 1, 1});
    auto expand = torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 48, 1));
    auto project = torch::nn::Conv2d(torch::nn::Conv2dOptions(48, 4, 1));
    expand->eval();
    project->eval();
    auto scaled = [&](at::Tensor x) {
      return project->forward(expand->forward(x) * w);
    };
    const at::Tensor x = torch::randn({4, 3, 32, 32});
    fx::GraphModule gm =
        lowered(fx::symbolic_trace(nullptr, fx::box_function(scaled), {x}));
    const fx::MicroBatchReport report =
        fx::micro_batch(*gm, small_thresholds());
    gm->recompile();
    CHECK(report.nodes == 0);
    CHECK(count_calls(gm->graph(), "aten::mul.Tensor") == 1);
    CHECK(torch::allclose(gm(x).toTensor(), scaled(x), 1e-4, 1e-5));
  }
}
