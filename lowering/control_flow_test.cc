// The lowering inside the bodies of control flow: optimize_for_inference
// folds batch norms and lowers convolutions and linear layers in cond's
// branches and while_loop's bodies as in the graph around them.
#include <torch/torch.h>

#include <algorithm>
#include <vector>

#include "fx/fx.h"
#include "lowering/optimize_for_inference.h"
#include "passes/pass_manager.h"
#include "testdata/test_helpers.h"
#include "third_party/catch.h"

namespace {

using Tensors = std::vector<at::Tensor>;
using torch::nn::BatchNorm2d;
using torch::nn::Conv2d;
using torch::nn::Conv2dOptions;
using torch::nn::Linear;

// A stem, then a branch on the activations' mean (a residual block with a
// batch norm, or a 1x1 convolution), then a loop that refines while the
// activations are large (at most three times), then a head.
struct GatedNetImpl : torch::nn::Module {
  GatedNetImpl() {
    stem = register_module("stem", Conv2d(Conv2dOptions(3, 8, 3).padding(1)));
    stem_bn = register_module("stem_bn", BatchNorm2d(8));
    block = register_module("block", Conv2d(Conv2dOptions(8, 8, 3).padding(1)));
    block_bn = register_module("block_bn", BatchNorm2d(8));
    squeeze = register_module("squeeze", Conv2d(Conv2dOptions(8, 8, 1)));
    refine = register_module("refine", Conv2d(Conv2dOptions(8, 8, 1)));
    head = register_module("head", Linear(8, 4));
  }
  torch::Tensor forward(torch::Tensor x) {
    at::Tensor y = torch::relu(stem_bn(stem(x)));
    y = fx::cond(
        y.mean() > threshold,
        [&](const Tensors& in) {
          return Tensors{torch::relu(block_bn(block(in[0])) + in[0])};
        },
        [&](const Tensors& in) { return Tensors{torch::relu(squeeze(in[0]))}; },
        {y})[0];
    Tensors carried = fx::while_loop(
        [](const Tensors& c) {
          return torch::logical_and(c[1] < 3, c[0].abs().mean() > 0.05);
        },
        [&](const Tensors& c) {
          return Tensors{torch::relu(refine(c[0])) * 0.5, c[1] + 1};
        },
        {y, torch::zeros({}, torch::kLong)});
    at::Tensor pooled = torch::adaptive_avg_pool2d(carried[0], {1, 1});
    return head(pooled.flatten(1));
  }
  double threshold = 0.3;
  Conv2d stem{nullptr}, block{nullptr}, squeeze{nullptr}, refine{nullptr};
  BatchNorm2d stem_bn{nullptr}, block_bn{nullptr};
  Linear head{nullptr};
};
TORCH_MODULE(GatedNet);

// Calls of `target` in the graph and each body.
size_t calls_everywhere(const fx::Graph& graph, const std::string& target) {
  size_t n = 0;
  for (const fx::Graph* g : graph.all_graphs()) {
    n += testdata::count_calls(*g, target);
  }
  return n;
}

TEST_CASE("optimize_for_inference lowers the bodies of cond and while_loop") {
  torch::manual_seed(0);
  GatedNet model;
  // Batch norms with statistics of their own, so that folding them shows.
  for (auto* bn : {&model->stem_bn, &model->block_bn}) {
    (*bn)->running_mean.uniform_(-0.2, 0.2);
    (*bn)->running_var.uniform_(0.5, 2.0);
  }
  model->eval();
  torch::NoGradGuard no_grad;
  // Inputs at three batch sizes and four scales; the branch's threshold
  // the median of their stems' means, so that both branches are taken.
  std::vector<at::Tensor> inputs;
  std::vector<double> means;
  for (int batch : {1, 2, 5}) {
    for (float scale : {0.01f, 0.2f, 1.0f, 4.0f}) {
      inputs.push_back(torch::rand({batch, 3, 12, 12}) * scale);
      means.push_back(
          torch::relu(model->stem_bn(model->stem(inputs.back())))
              .mean()
              .item<double>());
    }
  }
  std::vector<double> sorted = means;
  std::sort(sorted.begin(), sorted.end());
  model->threshold = (sorted[5] + sorted[6]) / 2;
  const at::Tensor example = torch::rand({2, 3, 12, 12});
  fx::GraphModule gm = fx::symbolic_trace(model, example);
  REQUIRE(gm->graph().subgraphs().size() == 4);
  CHECK(calls_everywhere(gm->graph(), "aten::conv2d") == 4);

  fx::InferenceOptions options;
  options.decision = fx::InferenceOptions::Decision::kAll;
  const fx::InferenceReport report = fx::optimize_for_inference(*gm, options);
  INFO(gm->graph());
  // Every convolution lowered, two in branches and one in the loop's body;
  // the branch's batch norm folded into its convolution.
  CHECK(report.convolutions == 4);
  CHECK(report.linear == 1);
  CHECK(calls_everywhere(gm->graph(), "aten::conv2d") == 0);
  CHECK(calls_everywhere(gm->graph(), "aten::batch_norm") == 0);
  for (const char* body : {"true_graph_0", "false_graph_0", "while_loop_body_graph_0"}) {
    INFO(body);
    CHECK(testdata::count_calls(*gm->graph().subgraph(body),
                                "fx_onednn::conv") == 1);
  }
  // The residual add of the true branch fused into its convolution.
  CHECK(report.fused_sums >= 1);

  // Equal to eager within 1e-5 on inputs taking either branch, at the
  // example's and other batch sizes.
  int true_branch = 0, false_branch = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const at::Tensor& x = inputs[i];
    (means[i] > model->threshold ? true_branch : false_branch)++;
    const at::Tensor want = model(x);
    const at::Tensor got = gm(x).toTensor();
    INFO("input " << i << ": " << x.sizes());
    REQUIRE(got.sizes() == want.sizes());
    CHECK(testdata::relative_error(got, want) < 1e-5);
  }
  CHECK(true_branch > 0);
  CHECK(false_branch > 0);
}

TEST_CASE("passes run inside bodies are counted once per graph") {
  torch::manual_seed(0);
  GatedNet model;
  model->eval();
  fx::GraphModule gm = fx::symbolic_trace(model, torch::rand({1, 3, 8, 8}));
  fx::PassManager passes;
  passes.add(fx::parse_pass_pipeline(
      "fuse_conv_bn,lower_onednn_convolutions{decision=all}"));
  passes.run_in_place(*gm);
  int64_t convolutions = 0;
  for (const fx::PassManager::Statistic& s : passes.statistics()) {
    if (s.pass == "lower_onednn_convolutions" && s.name == "convolutions") {
      convolutions += s.value;
    }
  }
  // Summed over the graph (the stem) and the three bodies.
  CHECK(convolutions == 4);
}

}  // namespace
