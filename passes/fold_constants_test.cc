#include "passes/fold_constants.h"

#include <torch/torch.h>

#include "fx/fx.h"
#include "passes/typed_attributes.h"
#include "third_party/catch.h"

namespace {

using fx::Node;
using fx::Opcode;

struct LinearImpl : torch::nn::Module {
  LinearImpl() { fc = register_module("fc", torch::nn::Linear(4, 3)); }
  torch::Tensor forward(torch::Tensor x) { return fc(x); }
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(Linear);

TEST_CASE("weight.t() folds into an attribute computed by an init step") {
  Linear model;
  model->eval();  // traced for inference (see the training-mode case below)
  auto x = torch::randn({2, 4});
  fx::GraphModule gm = fx::symbolic_trace(model, x);
  // The graph and the init step it leaves:
  // testdata/ir/passes/fold_constants_weight_t.ir. Here, what it computes.
  CHECK(fx::fold_constants(*gm));
  gm->recompile();
  REQUIRE(gm->init_steps().size() == 1);
  CHECK(gm->init_steps()[0].outputs == std::vector<std::string>{"_folded.t"});
  CHECK(torch::equal(gm(x).toTensor(), model(x)));
  // Nothing more to fold.
  CHECK_FALSE(fx::fold_constants(*gm));
}

struct MixedImpl : torch::nn::Module {
  MixedImpl() {
    scale = register_buffer("scale", torch::full({3}, 2.0));
    count = register_buffer("count", torch::zeros({3}));
  }
  torch::Tensor forward(torch::Tensor x) {
    auto offset = torch::ones({3}) * scale;   // constant: folds
    auto noise = torch::rand({3}) * 0;        // random: stays
    auto acc = torch::zeros({3});             // written in place: stays
    acc.add_(x.sum(0));
    count.add_(1);                            // a buffer written in place
    auto seen = count * 1;                    // reads it: stays
    return x + offset + noise + acc + seen;
  }
  torch::Tensor scale, count;
};
TORCH_MODULE(Mixed);

TEST_CASE("only pure values of unchanging inputs fold") {
  Mixed model;
  auto x = torch::randn({2, 3});
  fx::GraphModule gm = fx::symbolic_trace(model, x);
  CHECK(fx::fold_constants(*gm));
  gm->recompile();
  auto& g = gm->graph();
  auto attributes = g.find_nodes(Opcode::kGetAttr);
  std::vector<std::string> targets;
  for (Node* n : attributes) targets.push_back(n->target().str());
  CHECK(targets == std::vector<std::string>{"_folded.mul", "count"});
  CHECK(g.find_nodes(Opcode::kCallFunction, fx::op("aten::rand")).size() == 1);
  CHECK(g.find_nodes(Opcode::kCallFunction, fx::op("aten::zeros")).size() == 1);
  // Runs as the model does, count included, several times.
  Mixed reference;
  for (int i = 0; i < 3; ++i) {
    CHECK(torch::equal(gm(x).toTensor(), reference(x)));
  }
  CHECK(torch::equal(model->count, reference->count));
}

struct WritesOtherImpl : torch::nn::Module {
  WritesOtherImpl() { w = register_parameter("w", torch::randn({3})); }
  torch::Tensor forward(torch::Tensor x) {
    auto acc = x * 1;
    acc.add_(w * 2);  // writes acc, only reads w * 2
    return acc;
  }
  torch::Tensor w;
};
TORCH_MODULE(WritesOther);

TEST_CASE("an in-place operator blocks folding only of what it writes") {
  WritesOther model;
  model->eval();
  auto x = torch::randn({3});
  fx::GraphModule gm = fx::symbolic_trace(model, x);
  CHECK(fx::fold_constants(*gm));
  gm->recompile();
  auto& g = gm->graph();
  CHECK(g.find_nodes(Opcode::kCallFunction, fx::op("aten::mul.Scalar")).size() == 1);
  CHECK(g.find_nodes(Opcode::kGetAttr).size() == 1);  // _folded.mul
  CHECK(torch::equal(gm(x).toTensor(), model(x)));
}

TEST_CASE("a graph traced in training mode keeps its trained parameters unfolded") {
  Linear model;  // modules are in training mode until eval()
  auto x = torch::randn({2, 4});
  fx::GraphModule gm = fx::symbolic_trace(model, x);
  // weight.t() would carry no gradient back to the weight.
  CHECK_FALSE(fx::fold_constants(*gm));
  CHECK(gm->init_steps().empty());
  // A frozen parameter (no gradient wanted) folds.
  model->fc->weight.requires_grad_(false);
  CHECK(fx::fold_constants(*gm));
  gm->recompile();
  CHECK(torch::equal(gm(x).toTensor(), model(x)));
}

TEST_CASE("a batch_norm in training mode keeps its statistics unfolded") {
  torch::nn::BatchNorm1d bn(3);
  bn->train();
  fx::GraphModule gm = fx::symbolic_trace(bn, torch::randn({4, 3}));
  CHECK_FALSE(fx::fold_constants(*gm));
}

struct ScaledImpl : torch::nn::Module {
  ScaledImpl() { w = register_parameter("w", torch::randn({3, 4})); }
  torch::Tensor forward(torch::Tensor x) { return x.matmul((w * 2).t()); }
  torch::Tensor w;
};
TORCH_MODULE(Scaled);

TEST_CASE("a copy keeps the init steps; run_init recomputes after new weights") {
  Scaled model;
  model->eval();
  auto x = torch::randn({2, 4});
  fx::GraphModule gm = fx::symbolic_trace(model, x);
  CHECK(fx::fold_constants(*gm));
  gm->recompile();
  fx::GraphModule copy(gm->copy());
  REQUIRE(copy->init_steps().size() == 1);
  CHECK(copy->has_tensor_attribute("w"));  // read only by the init step
  {
    torch::NoGradGuard no_grad;
    model->w.fill_(0.5);  // "loading new weights"
  }
  CHECK_FALSE(torch::allclose(copy(x).toTensor(), model(x)));  // stale
  copy->run_init();
  CHECK(torch::allclose(copy(x).toTensor(), model(x)));
  CHECK_FALSE(torch::allclose(gm(x).toTensor(), model(x)));  // its own
}

}  // namespace

namespace {

// Swin's idiom: a mask built by writes into zeros, then read.
struct MaskedImpl : torch::nn::Module {
  int order = 0;  // 1: a read before the last write; 2: a write of x
  torch::Tensor forward(torch::Tensor x) {
    torch::Tensor mask = x.new_zeros({4, 4});
    mask.slice(0, 0, 2).fill_(1.0);
    if (order == 1) {
      torch::Tensor early = x + mask;
      mask.slice(1, 0, 1).fill_(3.0);
      return early * mask;
    }
    if (order == 2) mask.slice(0, 3, 4).copy_(x.slice(0, 0, 1));
    mask.slice(1, 2, 4).fill_(2.0);
    return x + mask.view({16}).view({4, 4});
  }
};
TORCH_MODULE(Masked);

int64_t calls_to(const fx::Graph& graph, std::string_view name) {
  int64_t n = 0;
  for (const Node* node : graph.nodes()) n += node->is_call_to({name});
  return n;
}

}  // namespace

TEST_CASE("writes into tensors the graph makes fold with them when asked") {
  for (int order : {0, 1, 2}) {
    INFO("order " << order);
    Masked model;
    model->order = order;
    const torch::Tensor x = torch::randn({4, 4});
    fx::GraphModule gm = fx::symbolic_trace(model, x);
    fx::GraphModule plain(gm->copy());
    fx::fold_constants(*plain);
    CHECK(calls_to(plain->graph(), "aten::fill_.Scalar") > 0);  // not asked
    fx::FoldOptions options;
    options.writes = true;
    fx::fold_constants(*gm, options);
    gm->recompile();
    // Order 0: the mask is a constant. A read before the last write, or a
    // write of the input, keeps the writes in the graph.
    CHECK(calls_to(gm->graph(), "aten::fill_.Scalar") == (order == 0 ? 0 : 2));
    CHECK(calls_to(gm->graph(), "aten::new_zeros") == (order == 0 ? 0 : 1));
    CHECK(torch::equal(gm(x).toTensor(), model(x)));
    const torch::Tensor y = torch::randn({4, 4});
    CHECK(torch::equal(gm(y).toTensor(), model(y)));
  }
}

namespace {

// A write through what dropout returns in inference mode (its input, though
// its schema does not say so) into a buffer of the module.
struct WriteThroughDropoutImpl : torch::nn::Module {
  WriteThroughDropoutImpl() { buffer = register_buffer("buffer", torch::zeros({4})); }
  torch::Tensor forward(torch::Tensor x) {
    torch::Tensor d = torch::dropout(buffer, 0.1, false);
    d.slice(0, 0, 2).fill_(1.0);
    return x + d;
  }
  torch::Tensor buffer;
};
TORCH_MODULE(WriteThroughDropout);

}  // namespace

TEST_CASE("writes fold only into tensors a factory of the graph made") {
  WriteThroughDropout model;
  model->eval();
  const torch::Tensor x = torch::randn({4});
  fx::GraphModule gm = fx::symbolic_trace(model, x);
  fx::GraphModule copy(gm->copy());  // shares the buffer, as to_onnx's copy
  fx::FoldOptions options;
  options.writes = true;
  fx::fold_constants(*copy, options);
  // Nothing ran: the module's buffer is as it was, and the write stays.
  CHECK(torch::equal(model->buffer, torch::zeros({4})));
  CHECK(calls_to(copy->graph(), "aten::fill_.Scalar") == 1);
}

TEST_CASE("a pure call that makes a script object folds into an object attribute") {
  // A TorchScript-style int8 graph that packs its weight on every call:
  // the packed weights (a torchbind object) are made once by an init step.
  fx::GraphModule gm = fx::parse_graph_module(R"(graph():
    %x : f32[1, 4, 6, 6] = placeholder[target=x]
    %q = call_function[target=aten::quantize_per_tensor](args = (%x, 0.03, 128, torch.quint8), kwargs = {})
    %w : f32[8, 4, 3, 3] = get_attr[target=conv.weight]
    %wq = call_function[target=aten::quantize_per_tensor](args = (%w, 0.02, 0, torch.qint8), kwargs = {})
    %packed = call_function[target=quantized::conv2d_prepack](args = (%wq, None, [1, 1], [1, 1], [1, 1], 1), kwargs = {})
    %conv = call_function[target=quantized::conv2d.new](args = (%q, %packed, 0.05, 100), kwargs = {})
    %y = call_function[target=aten::dequantize.self](args = (%conv,), kwargs = {})
    return y)");
  torch::NoGradGuard no_grad;
  const at::Tensor x = torch::randn({1, 4, 6, 6});
  const at::Tensor before = gm(x).toTensor();
  CHECK(fx::fold_constants(*gm));
  gm->recompile();
  REQUIRE(gm->init_steps().size() == 1);
  CHECK(gm->init_steps()[0].outputs ==
        std::vector<std::string>{"_folded.packed"});
  CHECK(gm->has_object_attribute("_folded.packed"));
  size_t prepacks = 0;
  for (const Node* n : gm->graph().nodes()) {
    prepacks += n->is_call_to({"quantized::conv2d_prepack"});
  }
  CHECK(prepacks == 0);
  CHECK(torch::equal(gm(x).toTensor(), before));
}
