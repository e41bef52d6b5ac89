#include "fx/trace/tracer.h"

#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/torch.h>

#include <sstream>

#include "fx/fx.h"
#include "third_party/catch.h"

// Outside the anonymous namespace, so that -rdynamic exports its name.
namespace fx_test {
struct ReadsItsSumImpl : torch::nn::Module {
  __attribute__((noinline)) torch::Tensor forward(torch::Tensor x);
};
torch::Tensor ReadsItsSumImpl::forward(torch::Tensor x) {
  return x * x.sum().item<float>();
}
TORCH_MODULE(ReadsItsSum);
}  // namespace fx_test

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
  fx::Tracer tracer;
  auto graph = tracer.trace(model.ptr(), fx::box_forward(model.ptr()), {x});
  CHECK(tracer.stats().real_kernel == 0);  // factories run on meta
  fx::GraphModule gm(model.ptr(), std::move(graph), tracer.take_attributes());
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

// --- In-place operators ------------------------------------------------------

struct InPlaceImpl : torch::nn::Module {
  InPlaceImpl() {
    conv = register_module("conv", torch::nn::Conv2d(3, 4, 3));
    count = register_buffer("count", torch::zeros({1}));
  }
  torch::Tensor forward(torch::Tensor x) {
    torch::Tensor y = conv(x);
    torch::relu_(y);           // result ignored: y itself was changed
    y.mul_(2).add_(1);         // chained
    count.add_(1);             // a buffer updated in place
    return y + count;
  }
  torch::nn::Conv2d conv{nullptr};
  torch::Tensor count;
};
TORCH_MODULE(InPlace);

TEST_CASE("in-place ops rebind the tensor: later uses depend on them") {
  torch::manual_seed(0);
  InPlace model;
  auto x = torch::randn({1, 3, 8, 8});
  fx::GraphModule gm = fx::symbolic_trace(model, x);
  auto& g = gm->graph();
  Node* relu_ = g.find_nodes(Opcode::kCallFunction, fx::op("aten::relu_"))[0];
  Node* mul_ =
      g.find_nodes(Opcode::kCallFunction, fx::op("aten::mul_.Scalar"))[0];
  CHECK(mul_->args()[0].to_node() == relu_);
  Node* add = g.find_nodes(Opcode::kCallFunction, fx::op("aten::add.Tensor"))[0];
  auto adds_ = g.find_nodes(Opcode::kCallFunction, fx::op("aten::add_.Scalar"));
  REQUIRE(adds_.size() == 2);
  // y + count reads the results of y's add_ and count's add_.
  CHECK(add->args()[0].to_node() == adds_[0]);
  CHECK(add->args()[1].to_node() == adds_[1]);
  CHECK(adds_[1]->args()[0].to_node()->target().str() == "count");
  // Tracing did not touch the buffer; running updates it, as eager does.
  CHECK(model->count.item<float>() == 0);
  auto expected = model(x);
  CHECK(model->count.item<float>() == 1);
  CHECK(torch::equal(gm(x).toTensor(), expected + 1));
  CHECK(model->count.item<float>() == 2);
  // Dead code elimination keeps them all.
  CHECK_FALSE(g.eliminate_dead_code());
}

struct TrainBnImpl : torch::nn::Module {
  TrainBnImpl() { bn = register_module("bn", torch::nn::BatchNorm2d(3)); }
  torch::Tensor forward(torch::Tensor x) { return bn(x); }
  torch::nn::BatchNorm2d bn{nullptr};
};
TORCH_MODULE(TrainBn);

TEST_CASE("batch_norm in training mode updates running stats like eager") {
  TrainBn eager, traced;
  traced->train();
  eager->train();
  auto x = torch::randn({4, 3, 5, 5});
  fx::GraphModule gm = fx::symbolic_trace(traced, x);
  CHECK(torch::equal(traced->bn->running_mean, torch::zeros({3})));
  for (int i = 0; i < 3; ++i) {
    CHECK(torch::equal(gm(x).toTensor(), eager(x)));
  }
  CHECK(torch::equal(traced->bn->running_mean, eager->bn->running_mean));
  CHECK(torch::equal(traced->bn->running_var, eager->bn->running_var));
  CHECK(traced->bn->num_batches_tracked.item<int64_t>() ==
        eager->bn->num_batches_tracked.item<int64_t>());
  // The graph has training behaviour baked in: eval() is refused.
  gm->eval();
  CHECK_THROWS_WITH(gm(x), Catch::Contains("traced in training mode but is "
                                           "in eval mode now"));
}

// --- Inputs, outputs and guards ------------------------------------------------

struct ReshapeImpl : torch::nn::Module {
  torch::Tensor forward(torch::Tensor x) { return x.view({x.size(0), -1}); }
};
TORCH_MODULE(Reshape);

TEST_CASE("reading sizes specializes the graph and guards the input shape") {
  Reshape model;
  fx::Tracer tracer;
  auto graph = tracer.trace(model.ptr(), fx::box_forward(model.ptr()),
                            {torch::randn({2, 3, 4})});
  CHECK(tracer.stats().read_sizes);
  fx::GraphModule gm(model.ptr(), std::move(graph), tracer.take_attributes());
  CHECK(gm->graph().to_string() ==
        "graph():\n"
        "    %x : [#users=1] = placeholder[target=x]\n"
        "    %view : [#users=1] = call_function[target=aten::view](args = (%x, "
        "[2, -1]), kwargs = {})\n"
        "    return view");
  CHECK(gm(torch::randn({2, 3, 4})).toTensor().sizes() ==
        c10::IntArrayRef({2, 12}));
  CHECK_THROWS_AS(gm(torch::randn({5, 3, 4})), fx::GuardError);
  CHECK_THROWS_WITH(
      gm(torch::randn({5, 3, 4})),
      Catch::Contains("input 0 ('x') has shape [5, 3, 4] but the traced code "
                      "read the sizes of its example input [2, 3, 4]"));
  CHECK_THROWS_WITH(gm(torch::randn({2, 3, 4}, torch::kDouble)),
                    Catch::Contains("has dtype torch.float64 but the trace saw "
                                    "torch.float32"));
  CHECK_THROWS_WITH(gm(torch::randn({2, 12})),
                    Catch::Contains("has 2 dimensions but the trace saw 3"));
  CHECK_THROWS_WITH(gm->forward({}),
                    Catch::Contains("takes 1 input(s) (x) but 0 were given"));
}

TEST_CASE("a program that reads no sizes runs on other shapes") {
  Mlp model;
  fx::GraphModule gm = fx::symbolic_trace(model, torch::randn({2, 4}));
  auto x = torch::randn({7, 4});
  CHECK(torch::equal(gm(x).toTensor(), model(x)));
  const fx::InputGuard* guard =
      gm->graph().placeholders()[0]->meta().get(fx::kGuard);
  REQUIRE(guard != nullptr);
  CHECK(guard->to_string() == "f32[?, ?] on cpu");
}

struct ScaleImpl : torch::nn::Module {
  torch::Tensor forward(torch::Tensor x, int64_t k, bool negate) {
    return negate ? x * -k : x * k;
  }
};
TORCH_MODULE(Scale);

TEST_CASE("non-tensor inputs are baked in and guarded") {
  Scale model;
  fx::TraceOptions options;
  options.input_names = {"x", "k", "negate"};
  auto x = torch::randn({3});
  fx::GraphModule gm = fx::symbolic_trace(
      model.ptr(), fx::box_forward(model.ptr()), {x, 3, true}, options);
  CHECK(gm->graph().to_string() ==
        "graph():\n"
        "    %x : [#users=1] = placeholder[target=x]\n"
        "    %k : [#users=0] = placeholder[target=k]\n"
        "    %negate : [#users=0] = placeholder[target=negate]\n"
        "    %mul : [#users=1] = call_function[target=aten::mul.Scalar](args = "
        "(%x, -3), kwargs = {})\n"
        "    return mul");
  CHECK(torch::equal(gm(x, 3, true).toTensor(), x * -3));
  CHECK_THROWS_WITH(gm(x, 4, true),
                    Catch::Contains("input 1 ('k') is 4 but the trace saw 3, "
                                    "which is baked into the graph"));
  CHECK_THROWS_WITH(gm(x, 3, false),
                    Catch::Contains("input 2 ('negate') is False"));
}

struct ListsImpl : torch::nn::Module {
  std::tuple<torch::Tensor, std::vector<torch::Tensor>> forward(
      std::vector<torch::Tensor> xs) {
    auto joined = torch::cat(xs, 0);
    auto parts = joined.chunk(2, 0);
    auto [values, indices] = joined.max(0);
    return {values, {parts[1], parts[0]}};
  }
};
TORCH_MODULE(Lists);

TEST_CASE("tensor lists in, tuples and lists out, multi-output ops") {
  Lists model;
  std::vector<torch::Tensor> xs = {torch::randn({2, 3}), torch::randn({2, 3})};
  fx::GraphModule gm =
      fx::symbolic_trace(model, c10::List<torch::Tensor>(xs));
  auto& g = gm->graph();
  // Only the indexed outputs keep a getitem (max's indices are unused).
  Node* max = g.find_nodes(Opcode::kCallFunction, fx::op("aten::max.dim"))[0];
  CHECK(max->users().size() == 1);
  CHECK(g.output_node()->format_node() ==
        "return (getitem_4, [getitem_3, getitem_2])");
  c10::IValue out = gm(c10::List<torch::Tensor>(xs));
  auto expected = model(xs);
  const auto& elems = out.toTupleRef().elements();
  CHECK(torch::equal(elems[0].toTensor(), std::get<0>(expected)));
  auto parts = elems[1].toTensorVector();
  REQUIRE(parts.size() == 2);
  CHECK(torch::equal(parts[0], std::get<1>(expected)[0]));
  CHECK(torch::equal(parts[1], std::get<1>(expected)[1]));
  CHECK_THROWS_WITH(
      gm(c10::List<torch::Tensor>({xs[0]})),
      Catch::Contains("input 0 ('x') has 1 tensors but the trace saw 2"));
}

// --- Plain functions, constants, factories ---------------------------------

TEST_CASE("plain functions trace; tensors they capture become constants") {
  auto bias = torch::randn({3});
  auto fn = [bias](torch::Tensor x) {
    return torch::tanh(x) + bias + torch::tensor({1.0f, 2.0f, 3.0f});
  };
  auto x = torch::randn({2, 3});
  fx::GraphModule gm = fx::symbolic_trace(fn, x);
  auto attrs = gm->graph().find_nodes(Opcode::kGetAttr);
  REQUIRE(attrs.size() == 2);
  CHECK(attrs[0]->target().str() == "_tensor_constant0");
  CHECK(attrs[1]->target().str() == "_tensor_constant1");
  // (C++ leaves the order in which the operands are evaluated open.)
  CHECK((gm->fetch_attr("_tensor_constant0").is_same(bias) ||
         gm->fetch_attr("_tensor_constant1").is_same(bias)));
  CHECK(torch::equal(gm(x).toTensor(), fn(x)));
  // torch::tensor's elements were written while tracing: a plain constant,
  // no nodes that fill it on each run.
  CHECK(gm->graph().find_nodes(Opcode::kCallFunction, fx::op("aten::fill_.Scalar"))
            .empty());
  CHECK((torch::equal(gm->fetch_attr("_tensor_constant0"),
                      torch::tensor({1.0f, 2.0f, 3.0f})) ||
         torch::equal(gm->fetch_attr("_tensor_constant1"),
                      torch::tensor({1.0f, 2.0f, 3.0f}))));
}

// --- Data-dependent code ----------------------------------------------------------

TEST_CASE("data-dependent ops are named in the error") {
  auto x = torch::randn({4});
  CHECK_THROWS_WITH(
      fx::symbolic_trace([](torch::Tensor x) { return x * x.sum().item<float>(); },
                         x),
      Catch::Contains("aten::item") && Catch::Contains("fx::wrap"));
  // (nonzero, masked_select, masks and unique give their size a symbol:
  // data_dependent_test.cc.)
  CHECK_THROWS_WITH(
      fx::symbolic_trace(
          [](torch::Tensor x) {
            return torch::repeat_interleave((x > 0).to(torch::kLong));
          },
          x),
      Catch::Contains("aten::repeat_interleave") &&
          Catch::Contains("returns a tensor whose shape depends on the "
                          "input's data"));
  CHECK_THROWS_WITH(fx::symbolic_trace(
                        [](torch::Tensor x) {
                          return x.sum().is_nonzero() ? x : -x;
                        },
                        x),
                    Catch::Contains("aten::is_nonzero"));
  CHECK_THROWS_WITH(fx::symbolic_trace(
                        [](torch::Tensor x) {
                          return x + x.data_ptr<float>()[0];
                        },
                        x),
                    Catch::Contains("read a tensor's data directly"));
  CHECK(dispatch_state_clean());
}

struct CumulativeNormImpl : torch::nn::Module {
  CumulativeNormImpl() {
    bn = register_module(
        "bn", torch::nn::BatchNorm2d(
                  torch::nn::BatchNorm2dOptions(3).momentum(c10::nullopt)));
  }
  torch::Tensor forward(torch::Tensor x) { return bn(x); }
  torch::nn::BatchNorm2d bn{nullptr};
};
TORCH_MODULE(CumulativeNorm);

TEST_CASE("a data-dependence error names the tensor whose data was needed") {
  // In training with momentum=None, C++ BatchNorm reads its
  // num_batches_tracked buffer's value.
  CumulativeNorm model;
  model->train();
  CHECK_THROWS_WITH(
      fx::symbolic_trace(model, torch::randn({2, 3, 4, 4})),
      Catch::Contains("aten::item") &&
          Catch::Contains("needs the data of the buffer or parameter "
                          "'bn.num_batches_tracked' of module 'bn'"));
  CHECK_THROWS_WITH(
      fx::symbolic_trace(
          [](torch::Tensor x) { return x.is_nonzero() ? x : -x; },
          torch::randn({1})),
      Catch::Contains("needs the data of the input 'x'"));
  CHECK_THROWS_WITH(
      fx::symbolic_trace(
          [](torch::Tensor x) { return x * x.sum().item<float>(); },
          torch::randn({4})),
      Catch::Contains("needs the data of a tensor computed while tracing "
                      "(%sum)"));
  CHECK(dispatch_state_clean());
}

TEST_CASE("a data-dependence error shows the program's own C++ frames") {
  // Not called through fx::call, so no module path: the backtrace (taken on
  // the error path only) names the forward that asked for data. This test
  // is linked with -rdynamic, so that its functions are named.
  fx_test::ReadsItsSum model;
  try {
    fx::symbolic_trace(model, torch::randn({4}));
    FAIL("traced a data-dependent forward");
  } catch (const fx::TraceError& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK_THAT(what, Catch::Contains("C++ frames of the traced program"));
    CHECK_THAT(what, Catch::Contains("fx_test::ReadsItsSumImpl::forward"));
    // The tracer's and dispatcher's own frames are left out.
    CHECK_THAT(what, !Catch::Contains("c10::Dispatcher"));
    CHECK_THAT(what, !Catch::Contains("fx::Tracer::Session"));
  }
}

TEST_CASE("equal() of a proxy with itself is true, without a node") {
  auto fn = [](torch::Tensor x) { return torch::equal(x, x) ? x + 1 : x - 1; };
  auto x = torch::randn({2});
  fx::GraphModule gm = fx::symbolic_trace(fn, x);
  CHECK(torch::equal(gm(x).toTensor(), x + 1));
}

TEST_CASE("equal() of different tensors is false, checked at run time") {
  // C++ MultiheadAttention asks torch::equal(query, key) to pick its
  // self-attention path.
  auto fn = [](torch::Tensor q, torch::Tensor k) {
    return torch::equal(q, k) ? q * 2 : q + k;
  };
  const at::Tensor q = torch::randn({3, 2});
  const at::Tensor k = torch::randn({3, 2});
  fx::GraphModule gm = fx::symbolic_trace(fn, q, k);
  CHECK(torch::equal(gm(q, k).toTensor(), q + k));
  CHECK(gm->graph()
            .find_nodes(fx::Opcode::kCallFunction,
                        fx::op("fx_guard::check_not_equal"))
            .size() == 1);
  // The branch taken was "not equal": equal inputs are refused.
  CHECK_THROWS_AS(gm(q, q.clone()), fx::GuardError);
  CHECK_THROWS_WITH(gm(q, q.clone()),
                    Catch::Contains("torch::equal(%") &&
                        Catch::Contains("was false while tracing, but they "
                                        "are equal"));
  // Saved and loaded, the check stays.
  std::stringstream file;
  fx::save(gm, file);
  fx::GraphModule again = fx::load(file);
  CHECK(torch::equal(again(q, k).toTensor(), q + k));
  CHECK_THROWS_AS(again(q, q.clone()), fx::GuardError);

  // Different shapes are never equal: no check, but the shapes are guarded.
  const at::Tensor kv = torch::randn({5, 2});
  fx::GraphModule cross = fx::symbolic_trace(
      [](torch::Tensor a, torch::Tensor b) {
        return torch::equal(a, b) ? a : a.sum() + b.sum();
      },
      q, kv);
  CHECK(cross->graph()
            .find_nodes(fx::Opcode::kCallFunction,
                        fx::op("fx_guard::check_not_equal"))
            .empty());
  CHECK(torch::allclose(cross(q, kv).toTensor(), q.sum() + kv.sum()));
  CHECK_THROWS_AS(cross(q, q), fx::GuardError);
}

TEST_CASE("indexing with integer tensors traces; boolean masks do not") {
  // Swin's relative position bias: table[index] with a constant index.
  const at::Tensor index = torch::randint(0, 10, {4, 2}, torch::kLong);
  auto gather = [index](torch::Tensor table) {
    return table.index({index}) + 1;
  };
  const at::Tensor table = torch::randn({10, 3});
  fx::GraphModule gm = fx::symbolic_trace(gather, table);
  CHECK(torch::equal(gm(table).toTensor(), gather(table)));
  CHECK(gm(table).toTensor().sizes() == at::IntArrayRef({4, 2, 3}));
  // Indices that are inputs, and None for a leading dimension.
  auto pick = [](torch::Tensor x, torch::Tensor rows) {
    return x.index({torch::indexing::Slice(), rows});
  };
  const at::Tensor x = torch::randn({2, 5, 3});
  const at::Tensor rows = torch::tensor({4, 0, 4}, torch::kLong);
  fx::GraphModule picked = fx::symbolic_trace(pick, x, rows);
  CHECK(torch::equal(picked(x, rows).toTensor(), pick(x, rows)));
  // A boolean mask keeps a number of elements that depends on data: a
  // symbol (data_dependent_test.cc).
  auto positive = [](torch::Tensor t) { return t.index({t > 0}); };
  fx::GraphModule masked = fx::symbolic_trace(positive, x);
  CHECK(torch::equal(masked(x).toTensor(), positive(x)));
}

TEST_CASE("the stock TransformerDecoder (cross-attention) traces exactly") {
  torch::manual_seed(0);
  torch::nn::TransformerDecoder decoder(
      torch::nn::TransformerDecoderOptions(
          torch::nn::TransformerDecoderLayerOptions(8, 2)
              .dim_feedforward(16)
              .dropout(0.0),
          2));
  decoder->eval();
  auto forward = [&](torch::Tensor target, torch::Tensor memory) {
    return decoder->forward(target, memory);
  };
  const at::Tensor target = torch::randn({5, 1, 8});
  const at::Tensor memory = torch::randn({7, 1, 8});
  fx::GraphModule gm = fx::symbolic_trace(forward, target, memory);
  torch::NoGradGuard no_grad;
  CHECK(torch::allclose(gm(target, memory).toTensor(),
                        decoder->forward(target, memory), 1e-5, 1e-6));
  // Memory of the target's length: the attention's inputs have one shape,
  // and the "not equal" branch is checked at run time.
  const at::Tensor same_length = torch::randn({5, 1, 8});
  fx::GraphModule square = fx::symbolic_trace(forward, target, same_length);
  CHECK(torch::allclose(square(target, same_length).toTensor(),
                        decoder->forward(target, same_length), 1e-5, 1e-6));
  CHECK_FALSE(square->graph()
                  .find_nodes(fx::Opcode::kCallFunction,
                              fx::op("fx_guard::check_not_equal"))
                  .empty());
}

struct KeepsProxyImpl : torch::nn::Module {
  torch::Tensor forward(torch::Tensor x) {
    if (last.defined()) return x + last;
    last = x;
    return x;
  }
  torch::Tensor last;
};
TORCH_MODULE(KeepsProxy);

TEST_CASE("a proxy kept past its trace is reported when used") {
  KeepsProxy model;
  auto x = torch::randn({2});
  fx::symbolic_trace(model, x);
  CHECK_THROWS_WITH(model(x), Catch::Contains("after its trace ended"));
}

// --- Leaf modules and wrapped functions --------------------------------------

struct ClampImpl : torch::nn::Module {
  torch::Tensor forward(torch::Tensor x, double limit) {
    return x.clamp(-limit, limit);
  }
};
TORCH_MODULE(Clamp);

struct BlockImpl : torch::nn::Module {
  BlockImpl() {
    fc = register_module("fc", torch::nn::Linear(4, 4));
    clamp = register_module("clamp", Clamp());
  }
  torch::Tensor forward(torch::Tensor x) {
    return fx::call(clamp, fx::call(fc, x), 0.5);
  }
  torch::nn::Linear fc{nullptr};
  Clamp clamp{nullptr};
};
TORCH_MODULE(Block);

struct NetImpl : torch::nn::Module {
  NetImpl() { block = register_module("block", Block()); }
  torch::Tensor forward(torch::Tensor x) { return fx::call(block, x).relu(); }
  Block block{nullptr};
};
TORCH_MODULE(Net);

TEST_CASE("fx::call: leaf modules become call_module, others carry their path") {
  Net model;
  auto x = torch::randn({2, 4});
  fx::TraceOptions options;
  options.leaf_modules = {"block.clamp"};
  fx::GraphModule gm = fx::symbolic_trace(
      model.ptr(), fx::box_forward(model.ptr()), {x}, options);
  auto& g = gm->graph();
  auto calls = g.find_nodes(Opcode::kCallModule);
  REQUIRE(calls.size() == 1);
  CHECK(calls[0]->format_node() ==
        "%block_clamp : [#users=1] = call_module[target=block.clamp](args = "
        "(%addmm, 0.5), kwargs = {})");
  Node* addmm = g.find_nodes(Opcode::kCallFunction, fx::op("aten::addmm"))[0];
  CHECK(*addmm->meta().get(fx::kModulePath) == "block.fc");
  Node* relu = g.find_nodes(Opcode::kCallFunction, fx::op("aten::relu"))[0];
  CHECK(relu->meta().get(fx::kModulePath) == nullptr);
  CHECK(torch::equal(gm(x).toTensor(), model(x)));
  CHECK(gm->named_children().contains("block"));
  CHECK(gm->leaf_module("block.clamp")->module.get() ==
        model->block->clamp.ptr().get());
}

struct CrossAttentionImpl : torch::nn::Module {
  CrossAttentionImpl() {
    mha = register_module("mha", torch::nn::MultiheadAttention(8, 2));
  }
  // Leaf calls as the C++ call is written: with the module's defaults, and
  // with every argument (undefined tensors for "no mask").
  torch::Tensor forward(torch::Tensor q, torch::Tensor kv) {
    auto with_defaults = fx::call(mha, q, kv, kv);
    auto in_full = fx::call(mha, q, kv, kv, torch::Tensor(), false,
                            torch::Tensor());
    return std::get<0>(with_defaults) + std::get<0>(in_full);
  }
  torch::nn::MultiheadAttention mha{nullptr};
};
TORCH_MODULE(CrossAttention);

TEST_CASE("leaf calls take what the C++ call takes: defaults, no tensor") {
  CrossAttention model;
  model->eval();
  torch::manual_seed(0);
  const at::Tensor q = torch::randn({5, 1, 8});
  const at::Tensor kv = torch::randn({7, 1, 8});
  fx::TraceOptions options;
  options.leaf_modules = {"mha"};
  fx::GraphModule gm = fx::symbolic_trace(
      model.ptr(), fx::box_forward(model.ptr()), {q, kv}, options);
  CHECK(gm->graph().find_nodes(Opcode::kCallModule).size() == 2);
  torch::NoGradGuard no_grad;
  CHECK(torch::allclose(gm(q, kv).toTensor(), model(q, kv), 1e-6, 1e-6));
  // A module without defaults still says how many arguments it takes.
  torch::nn::Linear fc(4, 2);
  fx::BoxedForward boxed = fx::box_forward(fc.ptr(), "fc.forward");
  CHECK_THROWS_WITH(boxed({}), Catch::Contains("fc.forward takes 1 "
                                               "argument(s) but 0 were given"));
}

TEST_CASE("fx::call outside tracing is a plain call") {
  Net model;
  auto x = torch::randn({2, 4});
  CHECK(torch::equal(fx::call(model, x), model->forward(x)));
}

torch::Tensor scaled_softmax(const torch::Tensor& x, double scale) {
  if (x.sum().item<double>() > 1e9) return x;  // opaque: reads data
  return torch::softmax(x * scale, -1);
}
const auto wrapped_softmax =
    fx::wrap("fx_test::scaled_softmax", &scaled_softmax, /*is_pure=*/true);

TEST_CASE("fx::wrap keeps a function opaque: one call_function node") {
  auto fn = [](torch::Tensor x) { return wrapped_softmax(x + 1, 2.0); };
  auto x = torch::randn({2, 5});
  fx::GraphModule gm = fx::symbolic_trace(fn, x);
  auto& g = gm->graph();
  auto calls = g.find_nodes(Opcode::kCallFunction,
                            fx::Target(wrapped_softmax.function()));
  REQUIRE(calls.size() == 1);
  CHECK(calls[0]->format_node() ==
        "%scaled_softmax : [#users=1] = call_function[target=fx_test::scaled_"
        "softmax](args = (%add, 2.0), kwargs = {})");
  CHECK(torch::equal(gm(x).toTensor(), fn(x)));
  // Declared pure: removable when unused.
  CHECK_FALSE(calls[0]->is_impure());
  CHECK_THROWS_AS(fx::wrap("fx_test::scaled_softmax", &scaled_softmax),
                  fx::GraphError);
}

// --- Overriding the tracer ----------------------------------------------------

// Tags every node and keeps every module called through fx::call as a leaf.
class TaggingTracer : public fx::Tracer {
 public:
  bool is_leaf_module(const torch::nn::Module& /*module*/,
                      const std::string& path) override {
    return !path.empty();
  }
  Node* create_node(Opcode op, const fx::Target& target,
                    std::vector<fx::Argument> args, fx::Kwargs kwargs,
                    const std::string& name) override {
    Node* node = fx::Tracer::create_node(op, target, std::move(args),
                                         std::move(kwargs), name);
    node->meta().set(kTag, std::string("seen"));
    ++created;
    return node;
  }
  fx::Argument create_arg(const at::Tensor& tensor) override {
    ++args;
    return fx::Tracer::create_arg(tensor);
  }
  static constexpr fx::MetaKey<std::string> kTag{"tag"};
  int created = 0;
  int args = 0;
};

TEST_CASE("a Tracer subclass decides leaves and sees every node it makes") {
  Net model;
  auto x = torch::randn({2, 4});
  TaggingTracer tracer;
  auto graph = tracer.trace(model.ptr(), fx::box_forward(model.ptr()), {x});
  CHECK(tracer.created == static_cast<int>(graph->size()));
  CHECK(tracer.args > 0);
  for (Node* n : graph->nodes()) {
    REQUIRE(n->meta().get(TaggingTracer::kTag) != nullptr);
  }
  auto calls = graph->find_nodes(Opcode::kCallModule);
  REQUIRE(calls.size() == 1);
  CHECK(calls[0]->target().str() == "block");  // outermost leaf wins
  fx::GraphModule gm(model.ptr(), std::move(graph), tracer.take_attributes());
  CHECK(torch::equal(gm(x).toTensor(), model(x)));
}

TEST_CASE("stack traces are recorded on request") {
  Mlp model;
  fx::TraceOptions options;
  options.record_stack_traces = true;
  fx::GraphModule gm = fx::symbolic_trace(
      model.ptr(), fx::box_forward(model.ptr()), {torch::randn({2, 4})},
      options);
  Node* relu =
      gm->graph().find_nodes(Opcode::kCallFunction, fx::op("aten::relu"))[0];
  const std::string* trace = relu->meta().get(fx::kStackTrace);
  REQUIRE(trace != nullptr);
  // Frames of the program itself have names only when it is linked with
  // -rdynamic; libtorch's always do.
  CHECK_THAT(*trace, Catch::Contains("at::_ops::relu::call"));
}

// --- Re-tracing -------------------------------------------------------------------

TEST_CASE("a GraphModule can be traced again") {
  Mlp model;
  auto x = torch::randn({2, 4});
  fx::GraphModule gm = fx::symbolic_trace(model, x);
  fx::GraphModule again = fx::symbolic_trace(
      gm.ptr(),
      [gm](const std::vector<c10::IValue>& inputs) mutable {
        return gm->forward(inputs);
      },
      {x});
  CHECK(again->graph().to_string() == gm->graph().to_string());
  CHECK(torch::equal(again(x).toTensor(), gm(x).toTensor()));
}

}  // namespace
