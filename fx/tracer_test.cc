#include "fx/tracer.h"

#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/torch.h>

#include "fx/fx.h"
#include "third_party/catch.h"

namespace {

using fx::Node;
using fx::Opcode;

struct MlpImpl : torch::nn::Module {
  MlpImpl() {
    fc1 = register_module("fc1", torch::nn::Linear(4, 8));
    fc2 = register_module("fc2", torch::nn::Linear(8, 3));
  }
  torch::Tensor forward(torch::Tensor x) {
    return fc2(torch::relu(fc1(x)));
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(Mlp);

std::vector<std::string> node_names(const fx::Graph& g) {
  std::vector<std::string> out;
  for (Node* n : g.nodes()) out.push_back(n->name());
  return out;
}

bool dispatch_state_clean() {
  return !c10::impl::tls_is_dispatch_key_included(
             c10::DispatchKey::DeferredInit) &&
         !c10::impl::tls_is_dispatch_key_excluded(
             c10::DispatchKey::DeferredInit) &&
         !fx::is_tracing();
}

TEST_CASE("an MLP traces to aten ops with parameters as get_attr nodes") {
  torch::manual_seed(0);
  Mlp model;
  auto x = torch::randn({2, 4});
  fx::GraphModule gm = fx::symbolic_trace(model, x);
  CHECK(gm->graph().to_string() ==
        "graph():\n"
        "    %x : [#users=1] = placeholder[target=x]\n"
        "    %fc1_weight : [#users=1] = get_attr[target=fc1.weight]\n"
        "    %t : [#users=1] = call_function[target=aten::t](args = "
        "(%fc1_weight,), kwargs = {})\n"
        "    %fc1_bias : [#users=1] = get_attr[target=fc1.bias]\n"
        "    %addmm : [#users=1] = call_function[target=aten::addmm](args = "
        "(%fc1_bias, %x, %t), kwargs = {})\n"
        "    %relu : [#users=1] = call_function[target=aten::relu](args = "
        "(%addmm,), kwargs = {})\n"
        "    %fc2_weight : [#users=1] = get_attr[target=fc2.weight]\n"
        "    %t_1 : [#users=1] = call_function[target=aten::t](args = "
        "(%fc2_weight,), kwargs = {})\n"
        "    %fc2_bias : [#users=1] = get_attr[target=fc2.bias]\n"
        "    %addmm_1 : [#users=1] = call_function[target=aten::addmm](args = "
        "(%fc2_bias, %relu, %t_1), kwargs = {})\n"
        "    return addmm_1");
  // Bitwise equal: the same op sequence.
  CHECK(torch::equal(gm(x).toTensor(), model(x)));
  // The GraphModule owns (shares) exactly the parameters the graph uses.
  auto params = gm->named_parameters();
  CHECK(params.size() == 4);
  CHECK(params["fc1.weight"].is_same(model->fc1->weight));
  CHECK(dispatch_state_clean());
}

TEST_CASE("metadata recorded while tracing matches the values at run time") {
  Mlp model;
  auto x = torch::randn({2, 4});
  fx::GraphModule gm = fx::symbolic_trace(model, x);
  Node* relu =
      gm->graph().find_nodes(Opcode::kCallFunction, fx::op("aten::relu"))[0];
  const fx::TensorMeta* tm = relu->meta().get(fx::kTensorMeta);
  REQUIRE(tm != nullptr);
  CHECK(tm->sizes == std::vector<int64_t>{2, 8});
  CHECK(tm->dtype == c10::ScalarType::Float);
  // Module paths come from the parameters a call uses.
  Node* addmm =
      gm->graph().find_nodes(Opcode::kCallFunction, fx::op("aten::addmm"))[0];
  REQUIRE(addmm->meta().get(fx::kModulePath) != nullptr);
  CHECK(*addmm->meta().get(fx::kModulePath) == "fc1");
}

struct FactoryImpl : torch::nn::Module {
  torch::Tensor forward(torch::Tensor x) {
    return x + torch::ones({3}) + torch::randn({3}) * 0 +
           torch::arange(3, torch::kFloat);
  }
};
TORCH_MODULE(Factory);

TEST_CASE("factory calls are recorded, random ones stay random") {
  Factory model;
  auto x = torch::zeros({2, 3});
  fx::GraphModule gm = fx::symbolic_trace(model, x);
  auto& g = gm->graph();
  CHECK(g.find_nodes(Opcode::kCallFunction, fx::op("aten::ones")).size() == 1);
  CHECK(g.find_nodes(Opcode::kCallFunction, fx::op("aten::randn")).size() == 1);
  CHECK(g.find_nodes(Opcode::kCallFunction, fx::op("aten::arange.start_step"))
            .size() +
            g.find_nodes(Opcode::kCallFunction, fx::op("aten::arange"))
                .size() ==
        1);
  CHECK(g.find_nodes(Opcode::kGetAttr).empty());
  CHECK(torch::equal(gm(x).toTensor(), model(x)));
}

struct RandomImpl : torch::nn::Module {
  torch::Tensor forward(torch::Tensor x) { return x + torch::rand_like(x); }
};
TORCH_MODULE(Random);

TEST_CASE("a random op draws new numbers on every run") {
  Random model;
  auto x = torch::zeros({100});
  fx::GraphModule gm = fx::symbolic_trace(model, x);
  auto a = gm(x).toTensor();
  auto b = gm(x).toTensor();
  CHECK_FALSE(torch::equal(a, b));
}

TEST_CASE("code() is the forward in C++, one statement per node") {
  torch::manual_seed(0);
  Mlp model;
  auto x = torch::randn({2, 4});
  fx::GraphModule gm = fx::symbolic_trace(model, x);
  CHECK(gm->code() ==
        "at::Tensor forward(at::Tensor x) {\n"
        "  fx::check_tensor_input(x, \"x\", 0, at::ScalarType::Float, "
        "at::Device(\"cpu\"), 2, c10::nullopt);\n"
        "  at::Tensor& fc1_weight = fc1_weight_;\n"
        "  auto t = at::_ops::t::call(fc1_weight);\n"
        "  at::Tensor& fc1_bias = fc1_bias_;\n"
        "  auto addmm = at::_ops::addmm::call(fc1_bias, x, t, 1, 1);  "
        "x.reset();  t.reset();\n"
        "  auto relu = at::_ops::relu::call(addmm);  addmm.reset();\n"
        "  at::Tensor& fc2_weight = fc2_weight_;\n"
        "  auto t_1 = at::_ops::t::call(fc2_weight);\n"
        "  at::Tensor& fc2_bias = fc2_bias_;\n"
        "  auto addmm_1 = at::_ops::addmm::call(fc2_bias, relu, t_1, 1, 1);  "
        "relu.reset();  t_1.reset();\n"
        "  return addmm_1;\n"
        "}\n");
  std::string readable = gm->print_readable();
  CHECK_THAT(readable,
             Catch::Contains("auto relu = at::_ops::relu::call(addmm);  "
                             "addmm.reset();  // f32[2, 8]"));
  CHECK_THAT(readable,
             Catch::Contains("at::Tensor fc1_weight_;  // fc1.weight: f32[8, 4]"));
}

}  // namespace
