#include "passes/eliminate_noops.h"

#include <torch/torch.h>
#include <ATen/ops/contiguous_ops.h>

#include "fx/fx.h"
#include "passes/pass_manager.h"
#include "testdata/test_helpers.h"
#include "third_party/catch.h"

namespace {

using testdata::count_calls;

using fx::Argument;
using fx::Node;

at::Tensor element(const c10::IValue& tuple, size_t i) {
  return tuple.toTupleRef().elements().at(i).toTensor();
}

fx::TensorMeta meta(std::vector<int64_t> sizes,
                    c10::ScalarType dtype = c10::ScalarType::Float) {
  fx::TensorMeta m;
  m.strides = fx::strides_for(sizes, c10::MemoryFormat::Contiguous);
  m.sizes = std::move(sizes);
  m.dtype = dtype;
  return m;
}

// A hand-built graph whose nodes carry kTensorMeta, as traced ones do.
struct Builder {
  std::unique_ptr<fx::Graph> graph = std::make_unique<fx::Graph>();

  // An f32 input of these sizes, guarded on them (the textual IR has no
  // guards: what eliminate_noops does without them is in
  // testdata/ir/passes/eliminate_noops_*.ir).
  Node* input(const std::string& name, std::vector<int64_t> sizes) {
    Node* x = graph->placeholder(name);
    fx::InputGuard guard;
    guard.dim = static_cast<int64_t>(sizes.size());
    guard.check_sizes = true;
    guard.sizes = sizes;
    x->meta().set(fx::kGuard, guard);
    x->meta().set(fx::kTensorMeta, meta(std::move(sizes)));
    return x;
  }
  Node* call(const char* op, std::vector<Argument> args, fx::TensorMeta m,
             fx::Kwargs kwargs = {}) {
    Node* n =
        graph->call_function(fx::op(op), std::move(args), std::move(kwargs));
    n->meta().set(fx::kTensorMeta, std::move(m));
    return n;
  }
  fx::GraphModule module(Argument result) {
    graph->output(std::move(result));
    return fx::GraphModule(std::move(graph), fx::Attributes());
  }
};

TEST_CASE("calls that return their input unchanged are removed") {
  Builder b;
  Node* x = b.input("x", {2, 8});
  Node* relu = b.call("aten::relu", {x}, meta({2, 8}));
  Node* contiguous = b.call("aten::contiguous", {relu}, meta({2, 8}));
  Node* to = b.call("aten::to.dtype", {contiguous, c10::ScalarType::Float},
                    meta({2, 8}));
  Node* view =
      b.call("aten::view", {to, std::vector<int64_t>{2, 8}}, meta({2, 8}));
  Node* reshape = b.call("aten::reshape", {view, std::vector<int64_t>{-1, 8}},
                         meta({2, 8}));
  Node* expand = b.call("aten::expand", {reshape, std::vector<int64_t>{2, 8}},
                        meta({2, 8}));
  Node* flatten =
      b.call("aten::flatten.using_ints", {expand, 1, -1}, meta({2, 8}));
  Node* to_1 = b.call("aten::to.dtype_layout", {}, meta({2, 8}),
                      {{"self", flatten},
                       {"dtype", c10::ScalarType::Float},
                       {"layout", c10::Layout::Strided},
                       {"device", c10::Device("cpu")}});
  Node* add = b.call("aten::add.Tensor", {to_1, x}, meta({2, 8}));
  fx::GraphModule gm = b.module(add);

  CHECK(fx::eliminate_noops(*gm));
  CHECK(gm->graph().to_string() ==
        "graph():\n"
        "    %x : [#users=2] = placeholder[target=x]\n"
        "    %relu : [#users=1] = call_function[target=aten::relu](args = "
        "(%x,), kwargs = {})\n"
        "    %add : [#users=1] = call_function[target=aten::add.Tensor](args "
        "= (%relu, %x), kwargs = {})\n"
        "    return add");
  CHECK_FALSE(fx::eliminate_noops(*gm));
  gm->recompile();
  at::Tensor in = torch::randn({2, 8});
  CHECK(torch::equal(gm(in).toTensor(), in.relu() + in));
}

TEST_CASE("a view whose metadata is changed in place is kept") {
  Builder b;
  Node* x = b.input("x", {2, 8});
  Node* relu = b.call("aten::relu", {x}, meta({2, 8}));
  Node* view =
      b.call("aten::view", {relu, std::vector<int64_t>{2, 8}}, meta({2, 8}));
  fx::TensorMeta transposed = meta({8, 2});
  transposed.strides = {1, 8};
  transposed.memory_format = c10::MemoryFormat::Preserve;
  Node* t_ = b.call("aten::t_", {view}, transposed);
  fx::GraphModule gm = b.module(Argument::tuple({t_, relu}));
  CHECK_FALSE(fx::eliminate_noops(*gm));
  CHECK(count_calls(gm->graph(), "aten::view") == 1);
  at::Tensor in = torch::randn({2, 8});
  c10::IValue out = gm(in);
  CHECK((element(out, 0).sizes().vec() == std::vector<int64_t>{8, 2}));
  // Had %view gone, t_ would have transposed %relu itself.
  CHECK(torch::equal(element(out, 1), in.relu()));
}

// What C++ code does to a tensor that is already as wanted. contiguous is
// called through the dispatcher, as a TorchScript model calls it: the C++
// method returns early on a contiguous tensor and records nothing.
at::Tensor tidy(const at::Tensor& x) {
  at::Tensor y = torch::relu(x).to(torch::kFloat);
  y = at::_ops::contiguous::call(y, c10::MemoryFormat::Contiguous);
  y = y.view({x.size(0), -1}).flatten(1, 1).expand({x.size(0), x.size(1)});
  at::Tensor copy = x.to(torch::kFloat, /*non_blocking=*/false,
                         /*copy=*/true);
  at::Tensor tc =
      at::_ops::contiguous::call(x.t(), c10::MemoryFormat::Contiguous);
  return y * 2 + copy + tc.sum();
}

TEST_CASE("a traced function loses its no-op conversions and views") {
  torch::NoGradGuard no_grad;
  at::Tensor x = torch::randn({2, 8});
  fx::GraphModule gm = fx::symbolic_trace(&tidy, x);
  REQUIRE(count_calls(gm->graph(), "aten::to.dtype") == 2);
  REQUIRE(count_calls(gm->graph(), "aten::contiguous") == 2);
  REQUIRE(count_calls(gm->graph(), "aten::view") == 1);
  REQUIRE(count_calls(gm->graph(), "aten::flatten.using_ints") == 1);
  REQUIRE(count_calls(gm->graph(), "aten::expand") == 1);
  CHECK(fx::eliminate_noops(*gm));
  // The copy and the contiguous of the transpose stay.
  CHECK(count_calls(gm->graph(), "aten::to.dtype") == 1);
  CHECK(count_calls(gm->graph(), "aten::contiguous") == 1);
  CHECK(count_calls(gm->graph(), "aten::view") == 0);
  CHECK(count_calls(gm->graph(), "aten::flatten.using_ints") == 0);
  CHECK(count_calls(gm->graph(), "aten::expand") == 0);
  gm->recompile();
  CHECK(torch::equal(gm(x).toTensor(), tidy(x)));
  at::Tensor other = torch::randn({2, 8});
  CHECK(torch::equal(gm(other).toTensor(), tidy(other)));
}

TEST_CASE("EliminateNoops is the pass named eliminate_noops") {
  auto pass = std::make_unique<fx::EliminateNoops>();
  CHECK(pass->name() == "eliminate_noops");
  Builder b;
  Node* x = b.input("x", {3});
  Node* to = b.call("aten::to.dtype", {x, c10::ScalarType::Float}, meta({3}));
  fx::GraphModule gm = b.module(b.call("aten::exp", {to}, meta({3})));
  fx::PassResult result = fx::PassManager().add(std::move(pass)).run(gm);
  CHECK(result.modified);
  CHECK(count_calls(result.module->graph(), "aten::to.dtype") == 0);
}

}  // namespace
