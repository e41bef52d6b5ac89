#include "passes/fuse_conv_bn.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/torch.h>

#include "absl/strings/str_cat.h"
#include "fx/fx.h"
#include "fx/io/parser.h"
#include "passes/pass_manager.h"
#include "models/zoo.h"
#include "testdata/test_helpers.h"
#include "third_party/catch.h"

namespace {

using testdata::count_calls;

using fx::Node;
using fx::Opcode;

std::vector<at::Tensor> parameter_copies(const torch::nn::Module& module) {
  std::vector<at::Tensor> out;
  for (const auto& t : module.parameters()) out.push_back(t.clone());
  for (const auto& t : module.buffers()) out.push_back(t.clone());
  return out;
}

void check_unchanged(const torch::nn::Module& module,
                     const std::vector<at::Tensor>& before) {
  std::vector<at::Tensor> now;
  for (const auto& t : module.parameters()) now.push_back(t);
  for (const auto& t : module.buffers()) now.push_back(t);
  REQUIRE(now.size() == before.size());
  for (size_t i = 0; i < now.size(); ++i) CHECK(torch::equal(now[i], before[i]));
}

TEST_CASE("folded ResNet-18/50 and MobileNetV2 match eager without batch_norm") {
  torch::NoGradGuard no_grad;
  for (const char* name : {"resnet18", "resnet50", "mobilenet_v2"}) {
    INFO(name);
    models::ZooModel model = models::make_zoo_model(name);
    auto before = parameter_copies(*model.module);
    fx::GraphModule gm = models::trace_zoo_model(model);
    size_t convs = count_calls(gm->graph(), "aten::conv2d");
    fx::PassResult result =
        fx::PassManager().add("fuse_conv_bn").add("eliminate_dead_code").run(gm);
    CHECK(result.modified);
    const fx::Graph& folded = result.module->graph();
    CHECK(count_calls(folded, "aten::batch_norm") == 0);
    CHECK(count_calls(folded, "aten::conv2d") == convs);
    at::Tensor expected = model.forward(model.example_inputs).toTensor();
    at::Tensor got = result.module->forward(model.example_inputs).toTensor();
    CHECK(torch::allclose(got, expected, /*rtol=*/1e-4, /*atol=*/1e-5));
    // The model, and the GraphModule given to the pass, are untouched.
    check_unchanged(*model.module, before);
    CHECK(count_calls(gm->graph(), "aten::batch_norm") > 0);
    CHECK(torch::equal(gm->forward(model.example_inputs).toTensor(), expected));
  }
}

TEST_CASE("the fused convolution reads folded attributes computed by an init step") {
  torch::NoGradGuard no_grad;
  models::ZooModel model = models::make_zoo_model("resnet18");
  fx::GraphModule gm = models::trace_zoo_model(model);
  fx::fuse_conv_bn(*gm);
  gm->recompile();
  Node* conv =
      gm->graph().find_nodes(Opcode::kCallFunction, fx::op("aten::conv2d"))[0];
  CHECK(conv->format_node() ==
        "%conv2d : [#users=1] = call_function[target=aten::conv2d](args = "
        "(%x, %_folded_conv1_weight_fused, %_folded_conv1_bias_fused, [2, 2], "
        "[3, 3]), kwargs = {})");
  REQUIRE(gm->init_steps().size() == 1);
  CHECK(gm->init_steps()[0].outputs.size() == 2 * 20);  // 20 conv/bn pairs
  // After new weights are loaded, run_init recomputes the folded ones.
  model.module->named_parameters()["conv1.weight"].mul_(2);
  at::Tensor stale = gm->forward(model.example_inputs).toTensor();
  at::Tensor expected = model.forward(model.example_inputs).toTensor();
  CHECK_FALSE(torch::allclose(stale, expected, 1e-4, 1e-5));
  gm->run_init();
  CHECK(torch::allclose(gm->forward(model.example_inputs).toTensor(), expected,
                        1e-4, 1e-5));
}

struct ConvBnImpl : torch::nn::Module {
  ConvBnImpl(bool share_conv_output) : share(share_conv_output) {
    conv = register_module(
        "conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 4, 3).bias(false)));
    bn = register_module("bn", torch::nn::BatchNorm2d(4));
  }
  torch::Tensor forward(torch::Tensor x) {
    auto y = conv(x);
    auto z = bn(y);
    return share ? z + y : z;
  }
  bool share;
  torch::nn::Conv2d conv{nullptr};
  torch::nn::BatchNorm2d bn{nullptr};
};
TORCH_MODULE(ConvBn);

void randomize(torch::nn::BatchNorm2d& bn) {
  torch::NoGradGuard no_grad;
  bn->weight.uniform_(0.5, 1.5);
  bn->bias.normal_();
  bn->running_mean.normal_();
  bn->running_var.uniform_(0.5, 1.5);
}

// The graph it leaves: testdata/ir/passes/fuse_conv_bn.ir; which
// batch_norms stay (training mode, a convolution read elsewhere too):
// fuse_conv_bn_keeps_shared_and_training.ir. Here, what it computes.
TEST_CASE("a conv without bias folds and computes what it did") {
  torch::NoGradGuard no_grad;
  auto x = torch::randn({2, 3, 8, 8});
  ConvBn model(false);
  randomize(model->bn);
  model->eval();
  fx::GraphModule gm = fx::symbolic_trace(model, x);
  CHECK(fx::fuse_conv_bn(*gm));
  gm->recompile();
  CHECK(count_calls(gm->graph(), "aten::batch_norm") == 0);
  CHECK(torch::allclose(gm(x).toTensor(), model(x), 1e-4, 1e-5));
}

struct LinearBnImpl : torch::nn::Module {
  LinearBnImpl() {
    fc = register_module("fc", torch::nn::Linear(6, 5));
    bn = register_module("bn", torch::nn::BatchNorm1d(5));
  }
  torch::Tensor forward(torch::Tensor x) { return bn(fc(x)).relu(); }
  torch::nn::Linear fc{nullptr};
  torch::nn::BatchNorm1d bn{nullptr};
};
TORCH_MODULE(LinearBn);

TEST_CASE("linear followed by BatchNorm1d folds (addmm of t(weight))") {
  torch::NoGradGuard no_grad;
  LinearBn model;
  model->bn->running_mean.normal_();
  model->bn->running_var.uniform_(0.5, 1.5);
  model->bn->weight.uniform_(0.5, 1.5);
  model->eval();
  auto x = torch::randn({4, 6});
  fx::GraphModule gm = fx::symbolic_trace(model, x);
  REQUIRE(count_calls(gm->graph(), "aten::addmm") == 1);
  CHECK(fx::fuse_conv_bn(*gm));
  gm->recompile();
  CHECK(count_calls(gm->graph(), "aten::batch_norm") == 0);
  CHECK(torch::allclose(gm(x).toTensor(), model(x), 1e-4, 1e-5));
}

}  // namespace

struct GroupedTransposeBnImpl : torch::nn::Module {
  GroupedTransposeBnImpl() {
    up = register_module(
        "up", torch::nn::ConvTranspose2d(
                  torch::nn::ConvTranspose2dOptions(4, 6, 3).stride(2).groups(2)));
    bn = register_module("bn", torch::nn::BatchNorm2d(6));
  }
  torch::Tensor forward(torch::Tensor x) { return bn(up(x)); }
  torch::nn::ConvTranspose2d up{nullptr};
  torch::nn::BatchNorm2d bn{nullptr};
};
TORCH_MODULE(GroupedTransposeBn);

TEST_CASE("a grouped transposed convolution followed by BatchNorm folds") {
  torch::NoGradGuard no_grad;
  torch::manual_seed(3);
  GroupedTransposeBn model;
  randomize(model->bn);
  model->eval();
  const at::Tensor x = torch::randn({2, 4, 5, 5});
  fx::GraphModule gm = fx::symbolic_trace(model, x);
  CHECK(fx::fuse_conv_bn(*gm));
  gm->recompile();
  CHECK(count_calls(gm->graph(), "aten::batch_norm") == 0);
  CHECK(torch::allclose(gm(x).toTensor(), model(x), 1e-4, 1e-5));
}

namespace {

// F::linear of 3 -> 4 features as addmm(fc.bias, x, t(fc.weight)) with
// `kwargs`, then BatchNorm1d(4) in eval mode.
fx::GraphModule addmm_batch_norm(const at::Tensor& fc_bias,
                                 const std::string& kwargs) {
  fx::Attributes attributes;
  attributes.parameters["fc.weight"] = torch::randn({4, 3});
  attributes.parameters["fc.bias"] = fc_bias;
  attributes.parameters["bn.weight"] = torch::rand({4}) + 0.5;
  attributes.parameters["bn.bias"] = torch::randn({4});
  attributes.buffers["bn.running_mean"] = torch::randn({4});
  attributes.buffers["bn.running_var"] = torch::rand({4}) + 0.5;
  return fx::GraphModule(fx::parse_graph(absl::StrCat(R"(graph():
    %x = placeholder[target=x]
    %fc_weight = get_attr[target=fc.weight]
    %fc_bias = get_attr[target=fc.bias]
    %t = call_function[target=aten::t](args = (%fc_weight,), kwargs = {})
    %addmm = call_function[target=aten::addmm](args = (%fc_bias, %x, %t), kwargs = {)",
                                                      kwargs, R"(})
    %bn_weight = get_attr[target=bn.weight]
    %bn_bias = get_attr[target=bn.bias]
    %bn_running_mean = get_attr[target=bn.running_mean]
    %bn_running_var = get_attr[target=bn.running_var]
    %batch_norm = call_function[target=aten::batch_norm](args = (%addmm, %bn_weight, %bn_bias, %bn_running_mean, %bn_running_var, False, 0.1, 1e-05, False), kwargs = {})
    return batch_norm)")),
                         attributes);
}

}  // namespace

TEST_CASE("addmm with alpha and beta given as 1.0 folds as with 1") {
  torch::NoGradGuard no_grad;
  torch::manual_seed(0);
  fx::GraphModule gm =
      addmm_batch_norm(torch::randn({4}), "beta: 1.0, alpha: 1.0");
  const at::Tensor x = torch::randn({5, 3});
  const at::Tensor want = gm(x).toTensor();
  CHECK(fx::fuse_conv_bn(*gm));
  gm->recompile();
  CHECK(count_calls(gm->graph(), "aten::batch_norm") == 0);
  CHECK(torch::allclose(gm(x).toTensor(), want, 1e-4, 1e-5));
}

TEST_CASE("addmm whose bias only broadcasts ([1, out]) is left unfolded") {
  torch::NoGradGuard no_grad;
  torch::manual_seed(1);
  fx::GraphModule gm = addmm_batch_norm(torch::randn({1, 4}), "");
  const at::Tensor x = torch::randn({5, 3});
  const at::Tensor want = gm(x).toTensor();
  const std::string before = gm->graph().to_string();
  CHECK_FALSE(fx::fuse_conv_bn(*gm));
  CHECK(gm->graph().to_string() == before);
  CHECK(gm->init_steps().empty());
  CHECK(torch::equal(gm(x).toTensor(), want));
}

// The operator init steps call (fx/runtime/folding.h), on its own: the
// aten steps it stands for, bitwise, and a clear error for parameters that
// do not go together.
TEST_CASE("fx_fold::fuse_conv_bn_weights computes torch's fold, bitwise") {
  torch::NoGradGuard no_grad;
  torch::manual_seed(5);
  const at::Tensor mean = torch::randn({6});
  const at::Tensor var = torch::rand({6}) + 0.5;
  const at::Tensor gamma = torch::rand({6}) + 0.5;
  const at::Tensor beta = torch::randn({6});
  const at::Tensor scale = gamma * torch::rsqrt(var + 1e-5);
  auto call = [](std::vector<c10::IValue> stack) {
    static const c10::OperatorHandle op =
        c10::Dispatcher::singleton().findSchemaOrThrow(
            "fx_fold::fuse_conv_bn_weights", "");
    op.callBoxed(&stack);
    REQUIRE(stack.size() == 2);
    return std::make_pair(stack[0].toTensor(), stack[1].toTensor());
  };

  SECTION("a convolution with a bias") {
    const at::Tensor w = torch::randn({6, 3, 3, 3});
    const at::Tensor b = torch::randn({6});
    auto [fw, fb] = call({w, b, mean, var, 1e-5, gamma, beta, false, 1});
    CHECK(torch::equal(fw, w * scale.reshape({-1, 1, 1, 1})));
    CHECK(torch::equal(fb, torch::addcmul(beta, b - mean, scale)));
  }
  SECTION("a linear layer without bias, a batch norm without affine") {
    const at::Tensor w = torch::randn({6, 4});
    const at::Tensor inv_std = torch::rsqrt(var + 1e-3);
    auto [fw, fb] = call({w, c10::IValue(), mean, var, 1e-3, c10::IValue(),
                          c10::IValue(), false, 1});
    CHECK(torch::equal(fw, w * inv_std.reshape({-1, 1})));
    CHECK(torch::equal(fb, -mean * inv_std));
  }
  SECTION("a transposed convolution of 2 groups: W is [in, out / groups, k]") {
    const at::Tensor w = torch::randn({4, 3, 2, 2});  // 4 in, 6 out
    auto [fw, fb] = call({w, c10::IValue(), mean, var, 1e-5, gamma, beta,
                          true, 2});
    // Output channel g * 3 + j is W[g * 2 + i, j].
    at::Tensor expected = w.clone();
    for (int64_t g = 0; g < 2; ++g) {
      for (int64_t i = 0; i < 2; ++i) {
        for (int64_t j = 0; j < 3; ++j) {
          expected[g * 2 + i][j] *= scale[g * 3 + j];
        }
      }
    }
    CHECK(torch::allclose(fw, expected, 0, 0));
    CHECK(torch::equal(fb, torch::addcmul(beta, -mean, scale)));
  }
  SECTION("statistics of another channel count are refused by name") {
    const at::Tensor w = torch::randn({5, 3, 3, 3});
    CHECK_THROWS_WITH(
        call({w, c10::IValue(), mean, var, 1e-5, gamma, beta, false, 1}),
        Catch::Contains("bn_rm (the running mean) must hold one value per "
                        "output channel (5 for a weight of [5, 3, 3, 3])") &&
            Catch::Contains("got [6]"));
    const at::Tensor wt = torch::randn({4, 3, 2, 2});
    CHECK_THROWS_WITH(
        call({wt, c10::IValue(), mean, var, 1e-5, gamma, beta, true, 3}),
        Catch::Contains("a transposed weight's first dimension (input "
                        "channels) must divide into groups, got [4, 3, 2, 2] "
                        "in 3 groups"));
    CHECK_THROWS_WITH(
        call({w, torch::randn({4}), torch::randn({5}), torch::rand({5}), 1e-5,
              c10::IValue(), c10::IValue(), false, 1}),
        Catch::Contains("conv_b (the layer's bias) must hold one value per "
                        "output channel (5") &&
            Catch::Contains("pass the layer's own bias"));
    CHECK_THROWS_WITH(call({torch::randn({6}), c10::IValue(), mean, var, 1e-5,
                            gamma, beta, false, 1}),
                      Catch::Contains("at least 2 dimensions"));
  }
}
