// Inputs that once gave silently wrong results: each case here failed before
// its fix. A GraphModule either runs exactly as eager or refuses.
#include <thread>

#include <torch/torch.h>

#include "fx/fx.h"
#include "interpreter/interpreter.h"
#include "interpreter/shape_prop.h"
#include "passes/eliminate_noops.h"
#include "passes/fold_constants.h"
#include "passes/fuse_conv_bn.h"
#include "third_party/catch.h"

namespace {

using fx::Node;
using fx::Opcode;

at::Tensor run(fx::GraphModule& gm, const at::Tensor& x) {
  return gm(x).toTensor();
}

// --- A tensor made in forward and written in place is fresh on every run ---

TEST_CASE("a factory filled in place is fresh on every run") {
  auto f = [](at::Tensor x) {
    at::Tensor o = torch::empty({4}, x.options());
    o.copy_(x * 2);
    return o;
  };
  fx::GraphModule gm = fx::symbolic_trace(f, torch::zeros({4}));
  at::Tensor y1 = run(gm, torch::ones({4}));
  at::Tensor y2 = run(gm, torch::full({4}, 5.f));
  CHECK(torch::equal(y1, torch::full({4}, 2.f)));
  CHECK(torch::equal(y2, torch::full({4}, 10.f)));
  CHECK_FALSE(y1.is_same(y2));
  CHECK(y1.data_ptr() != y2.data_ptr());
}

TEST_CASE("a torch::tensor literal multiplied in place keeps its value") {
  auto f = [](at::Tensor x) {
    at::Tensor c = torch::tensor({1.f, 2.f, 3.f});
    c.mul_(x);
    return c + 1;
  };
  fx::GraphModule gm = fx::symbolic_trace(f, torch::zeros({3}));
  for (int i = 0; i < 3; ++i) {
    at::Tensor x = torch::full({3}, float(i + 2));
    CHECK(torch::equal(run(gm, x), f(x)));
  }
}

TEST_CASE("a constant written through a view is fresh on every run") {
  // torch::tensor's data is computed while tracing; the view and the write
  // into it are the graph's.
  auto f = [](at::Tensor x) {
    at::Tensor o = torch::tensor({1.f, 2.f, 3.f});
    o.narrow(0, 1, 2).mul_(x);
    return o * 1;
  };
  fx::GraphModule gm = fx::symbolic_trace(f, torch::zeros({2}));
  for (float v : {2.f, 3.f, 5.f}) {
    at::Tensor x = torch::full({2}, v);
    CHECK(torch::equal(run(gm, x), f(x)));
  }
}

TEST_CASE("a view of a C++-built tensor written in place, the tensor returned") {
  // The view (made while tracing) and its base become two constants
  // sharing memory: a copy of one would not be seen through the other.
  auto f = [](at::Tensor x) {
    at::Tensor o = torch::tensor({0.f, 0.f, 0.f, 0.f});
    o.narrow(0, 1, 2).copy_(x);
    return o;
  };
  fx::GraphModule gm = fx::symbolic_trace(f, torch::zeros({2}));
  at::Tensor y1 = run(gm, torch::full({2}, 2.f));
  at::Tensor y2 = run(gm, torch::full({2}, 3.f));
  CHECK(torch::equal(y1, f(torch::full({2}, 2.f))));
  CHECK(torch::equal(y2, f(torch::full({2}, 3.f))));
  // The view is a view of the one constant in the graph.
  CHECK(gm->graph()
            .find_nodes(Opcode::kCallFunction, fx::op("aten::as_strided"))
            .size() == 1);
}

TEST_CASE("a written constant sharing memory with another is refused") {
  // Captured tensors, one a view of the other, become two constants.
  at::Tensor whole = torch::zeros({4});
  at::Tensor part = whole.narrow(0, 1, 2);
  auto f = [whole, part](at::Tensor x) {
    part.copy_(x);
    return whole * 1;
  };
  CHECK_THROWS_WITH(fx::symbolic_trace(f, torch::zeros({2})),
                    Catch::Contains("shares memory with another constant"));
  CHECK(torch::equal(whole, torch::zeros({4})));
  CHECK_FALSE(fx::is_tracing());
}

TEST_CASE("forwards from several threads never share an output") {
  auto f = [](at::Tensor x) {
    at::Tensor o = torch::empty({4}, x.options());
    o.copy_(x * 2);
    return o;
  };
  fx::GraphModule gm = fx::symbolic_trace(f, torch::zeros({4}));
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 500; ++i) {
        float v = float(t * 1000 + i);
        at::Tensor y = gm(torch::full({4}, v)).toTensor();
        std::this_thread::yield();
        if (!torch::equal(y, torch::full({4}, 2 * v))) ++wrong;
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(wrong == 0);
}

// --- Sizes that decide how many tensors an op returns are guarded ---------

TEST_CASE("unbind's list length is guarded like a size read") {
  auto f = [](at::Tensor x) {
    at::Tensor acc = torch::zeros_like(x.select(0, 0));
    for (const at::Tensor& row : x.unbind(0)) acc = acc + row;
    return acc;
  };
  fx::GraphModule gm = fx::symbolic_trace(f, torch::zeros({4, 3}));
  at::Tensor x = torch::randn({4, 3});
  CHECK(torch::allclose(run(gm, x), f(x)));
  CHECK_THROWS_AS(run(gm, torch::randn({8, 3})), fx::GuardError);
}

TEST_CASE("chunk and split lengths are guarded") {
  auto f = [](at::Tensor x) {
    at::Tensor acc = torch::zeros({1, 2});
    for (const at::Tensor& c : x.split(1, 0)) acc = acc + c;
    return acc;
  };
  fx::GraphModule gm = fx::symbolic_trace(f, torch::zeros({3, 2}));
  CHECK_THROWS_AS(run(gm, torch::randn({5, 2})), fx::GuardError);
}

// --- Strides and contiguity the program read are guarded ------------------

TEST_CASE("strides read while tracing are guarded") {
  auto f = [](at::Tensor x) {
    return x.as_strided({3, 2}, {2 * x.stride(0), x.stride(0)});
  };
  fx::GraphModule gm = fx::symbolic_trace(f, torch::zeros({6, 1}));
  at::Tensor contiguous = torch::arange(6.f).reshape({6, 1});
  CHECK(torch::equal(run(gm, contiguous), f(contiguous)));
  at::Tensor strided = torch::arange(12.f).reshape({6, 2}).narrow(1, 0, 1);
  REQUIRE(strided.sizes() == contiguous.sizes());
  CHECK_THROWS_AS(run(gm, strided), fx::GuardError);
}

TEST_CASE("a no-op contiguous() guards the contiguity it relied on") {
  auto f = [](at::Tensor x) { return x.contiguous().view({-1}); };
  fx::GraphModule gm = fx::symbolic_trace(f, torch::zeros({2, 3}));
  at::Tensor x = torch::randn({2, 3});
  CHECK(torch::equal(run(gm, x), f(x)));
  at::Tensor transposed = torch::randn({3, 2}).t();
  try {
    run(gm, transposed);
    FAIL("a transposed input ran");
  } catch (const fx::GuardError& e) {
    CHECK_THAT(e.what(), Catch::Contains("strides"));
  }
}

// --- Sizes that depend on data, used as values, are refused ---------------

TEST_CASE("a float computed from _unique's size: a TraceError") {
  // _unique's size is a symbol (u0), but a float divided by it changes the
  // graph from trace to trace.
  auto f = [](at::Tensor x) {
    return x.sum() / double(std::get<0>(at::_unique(x)).numel());
  };
  try {
    fx::symbolic_trace(f, torch::tensor({1.f, 2.f, 3.f, 4.f}));
    FAIL("traced");
  } catch (const fx::TraceError& e) {
    CHECK_THAT(e.what(), Catch::Contains("aten::_unique"));
  }
}

// --- Metadata agrees with what runs ----------------------------------------

TEST_CASE("where records its values' dtype, not the condition's") {
  auto f = [](at::Tensor c, at::Tensor a) {
    return torch::where(c, a, -a).to(torch::kBool);
  };
  at::Tensor c = torch::tensor({true, false, true});
  at::Tensor a = torch::tensor({1.f, 0.f, 3.f});
  fx::GraphModule gm = fx::symbolic_trace(f, c, a);
  Node* where =
      gm->graph().find_nodes(Opcode::kCallFunction, fx::op("aten::where.self"))
          .at(0);
  CHECK(where->meta().get(fx::kTensorMeta)->dtype == at::kFloat);
  fx::eliminate_noops(*gm);
  gm->recompile();
  at::Tensor y = gm(c, a).toTensor();
  CHECK(y.scalar_type() == at::kBool);
  CHECK(torch::equal(y, f(c, a)));
}

TEST_CASE("where with a scalar branch traces") {
  auto f = [](at::Tensor c, at::Tensor a) {
    return torch::where(c, a, 0.5) + torch::where(c, 1.0, 0.0);
  };
  at::Tensor c = torch::tensor({true, false, true});
  at::Tensor a = torch::tensor({1.f, 0.f, 3.f});
  fx::GraphModule gm = fx::symbolic_trace(f, c, a);
  CHECK(torch::equal(gm(c, a).toTensor(), f(c, a)));
}

// --- Tensors the graph reads are the current ones -------------------------

struct NestedImpl : torch::nn::Module {
  NestedImpl() { fc = register_module("fc", torch::nn::Linear(3, 2)); }
  at::Tensor forward(at::Tensor x) { return fc(x); }
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(Nested);

TEST_CASE("a replaced attribute is not run stale") {
  Nested model;
  fx::GraphModule gm = fx::symbolic_trace(model, torch::zeros({1, 3}));
  at::Tensor x = torch::randn({1, 3});
  gm->register_tensor_attribute("fc.weight", torch::zeros({2, 3}),
                                /*is_parameter=*/true);
  // The Interpreter reads the new weight; the GraphModule must not run the
  // old one.
  at::Tensor interpreted = fx::Interpreter(gm).run({x}).toTensor();
  CHECK(torch::equal(interpreted, model->fc->bias.detach().unsqueeze(0)));
  at::Tensor y;
  try {
    y = run(gm, x);
  } catch (const fx::GraphError&) {
    gm->recompile();
    y = run(gm, x);
  }
  CHECK(torch::equal(y, interpreted));
}

TEST_CASE("folded values are copies: loading weights leaves them alone") {
  auto model = torch::nn::Linear(3, 2);
  model->eval();
  fx::GraphModule gm = fx::symbolic_trace(model, torch::zeros({2, 3}));
  REQUIRE(fx::fold_constants(*gm));
  gm->recompile();
  at::Tensor x = torch::randn({2, 3});
  at::Tensor before = run(gm, x);
  // torch::load writes into the parameters in place.
  {
    torch::NoGradGuard no_grad;
    model->weight.mul_(2);
  }
  // Folded values are computed copies: unchanged until run_init().
  CHECK(torch::equal(run(gm, x), before));
  gm->run_init();
  CHECK(torch::allclose(run(gm, x), model(x)));
}

// --- Memory: what a rejected edit or a failed step leaves -------------------

namespace second {

at::Tensor twice(const at::Tensor& x) { return x * 2; }
const auto wrapped_twice = fx::wrap("fx_soundness::twice", &twice);

}  // namespace second

TEST_CASE("erasing the node the graph inserts before is reported, not read") {
  fx::Graph g;
  Node* x = g.placeholder("x");
  Node* a = g.call_function(fx::op("aten::relu"), {x});
  g.output(x);
  {
    auto guard = g.inserting_before(a);
    g.erase_node(a);
    CHECK_THROWS_WITH(g.call_function(fx::op("aten::neg"), {x}),
                      Catch::Contains("insertion point %relu was erased"));
  }
  // Outside the guard the graph inserts at its end again.
  g.call_function(fx::op("aten::neg"), {x});
  g.lint();
  CHECK(g.size() == 3);
}

TEST_CASE("a proxy of an earlier trace is refused by the next one") {
  at::Tensor kept;
  auto first = [&](at::Tensor x) {
    kept = x * 3;  // a tensor of this trace, kept past it
    return kept;
  };
  fx::symbolic_trace(first, torch::zeros({2}));
  auto next = [&](at::Tensor x) { return second::wrapped_twice(kept) + x; };
  CHECK_THROWS_AS(fx::symbolic_trace(next, torch::zeros({2})),
                  fx::TraceError);
  CHECK_FALSE(fx::is_tracing());
}

TEST_CASE("set_graph with a graph that cannot compile changes nothing") {
  auto model = torch::nn::Linear(3, 2);
  fx::GraphModule gm = fx::symbolic_trace(model, torch::zeros({1, 3}));
  const std::string before = gm->graph().to_string();
  auto bad = std::make_unique<fx::Graph>();
  Node* x = bad->placeholder("x");
  // Lints, but aten::relu takes one argument.
  bad->output(bad->call_function(fx::op("aten::relu"), {x, x}));
  CHECK_THROWS_AS(gm->set_graph(std::move(bad)), fx::GraphError);
  CHECK(gm->graph().to_string() == before);
  at::Tensor in = torch::randn({1, 3});
  CHECK(torch::equal(run(gm, in), model(in)));
}

TEST_CASE("run_init keeps every step when one fails") {
  auto model = torch::nn::Linear(3, 2);
  model->eval();
  fx::GraphModule gm = fx::symbolic_trace(model, torch::zeros({2, 3}));
  REQUIRE(fx::fold_constants(*gm));
  gm->recompile();
  REQUIRE(gm->init_steps().size() == 1);
  // New weights of the wrong shape: the step (weight.t()) still runs, so
  // make it fail by a weight of the wrong rank.
  {
    torch::NoGradGuard no_grad;
    model->weight.set_(torch::zeros({2, 3, 1}));
  }
  CHECK_THROWS(gm->run_init());
  CHECK(gm->init_steps().size() == 1);
  {
    torch::NoGradGuard no_grad;
    model->weight.set_(torch::ones({2, 3}));
  }
  gm->run_init();
  at::Tensor in = torch::randn({2, 3});
  CHECK(torch::allclose(run(gm, in), model(in)));
}

TEST_CASE("a failed fold leaves the graph as it was") {
  auto g = std::make_unique<fx::Graph>();
  Node* x = g->placeholder("x");
  // mm of [2, 3] and [2, 3] fails when the init step runs.
  Node* bad = g->call_function(fx::op("aten::mm"),
                               {g->get_attr("a"), g->get_attr("b")});
  g->output(g->call_function(fx::op("aten::add.Tensor"), {x, bad}));
  fx::Attributes attributes;
  attributes.buffers["a"] = torch::ones({2, 3});
  attributes.buffers["b"] = torch::ones({2, 3});
  fx::GraphModule gm(std::move(g), std::move(attributes));
  const std::string before = gm->graph().to_string();
  CHECK_THROWS(fx::fold_constants(*gm));
  CHECK(gm->graph().to_string() == before);
  gm->graph().lint();
  CHECK(gm->init_steps().empty());
}

struct SharedNormImpl : torch::nn::Module {
  SharedNormImpl() {
    a = register_module("a", torch::nn::Conv2d(3, 4, 3));
    b = register_module("b", torch::nn::Conv2d(3, 4, 3));
    bn = register_module("bn", torch::nn::BatchNorm2d(4));
  }
  at::Tensor forward(at::Tensor x) { return bn(a(x)) + bn(b(x)); }
  torch::nn::Conv2d a{nullptr}, b{nullptr};
  torch::nn::BatchNorm2d bn{nullptr};
};
TORCH_MODULE(SharedNorm);

TEST_CASE("one BatchNorm after two convolutions folds into both") {
  torch::manual_seed(0);
  SharedNorm model;
  {
    torch::NoGradGuard no_grad;
    model->bn->running_mean.uniform_(-0.5, 0.5);
    model->bn->running_var.uniform_(0.5, 2.0);
  }
  model->eval();
  at::Tensor x = torch::randn({1, 3, 8, 8});
  fx::GraphModule gm = fx::symbolic_trace(model, x);
  REQUIRE(fx::fuse_conv_bn(*gm));
  gm->recompile();
  CHECK(gm->graph()
            .find_nodes(Opcode::kCallFunction, fx::op("aten::batch_norm"))
            .empty());
  CHECK(torch::allclose(run(gm, x), model(x), 1e-5, 1e-5));
}

}  // namespace
