// Sizes that depend on data (fx/ir/data_dependent.h): nonzero, masked_select,
// a boolean mask and unique each give their size a symbol (u0, u1, ...),
// which the tracer varies as it does a dynamic dimension's; later sizes
// computed from it become nodes, a bound the program needs is checked when
// the graph runs, and every run equals eager on inputs that keep no
// element, one, some and all.
#include <sstream>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "fx/fx.h"
#include "interpreter/shape_prop.h"
#include "passes/specialize_sizes.h"
#include "third_party/catch.h"

namespace {

bool contains(const fx::GraphModule& gm, const std::string& text) {
  return gm->graph().to_string().find(text) != std::string::npos;
}

std::string meta_text(const fx::GraphModule& gm) {
  fx::PrintOptions options;
  options.tensor_meta = true;
  return gm->graph().to_string(options);
}

// Inputs of `shape` keeping none, one, some and all of their elements
// (positive ones).
std::vector<torch::Tensor> selections(std::vector<int64_t> shape) {
  torch::Tensor none = -torch::rand(shape) - 0.5;
  torch::Tensor one = none.clone();
  one.view(-1)[one.numel() / 2] = 2.0;
  torch::Tensor some = torch::randn(shape);
  torch::Tensor all = torch::rand(shape) + 0.5;
  return {none, one, some, all};
}

}  // namespace

TEST_CASE("nonzero's rows are a symbol: sizes computed from them are nodes") {
  // The rows nonzero finds, as a flat list of coordinates, and that many
  // zeros beside them.
  auto fn = [](torch::Tensor x) {
    torch::Tensor idx = torch::nonzero(x > 0);
    const int64_t n = idx.size(0);
    torch::Tensor flat = idx.reshape({n * 2});
    return torch::cat({flat.to(torch::kFloat), torch::zeros({n})});
  };
  fx::GraphModule gm = fx::symbolic_trace(fn, torch::randn({4, 5}));
  CHECK(contains(gm, "call_function[target=aten::nonzero]"));
  CHECK(contains(gm, "%u0 : [#users="));
  CHECK(contains(gm, "= call_function[target=sym_size](args = (%nonzero, 0)"));
  CHECK(contains(gm, "call_function[target=sym_mul](args = (%u0, 2)"));
  const std::string meta = meta_text(gm);
  CHECK(meta.find("i64[u0, 2]") != std::string::npos);
  CHECK(meta.find("f32[3*u0]") != std::string::npos);
  for (const torch::Tensor& x : selections({4, 5})) {
    CHECK(torch::equal(gm(x).toTensor(), fn(x)));
  }
  // Another shape is another graph (x's size is fixed).
  CHECK_THROWS_AS(gm(torch::randn({4, 6})), fx::GuardError);

  SECTION("ShapeProp runs it at other sizes of u0 and fits the same") {
    // On an input with 3 positive elements, and on zeros (none).
    torch::Tensor x = -torch::ones({4, 5});
    x[1][2] = x[3][0] = x[3][4] = 1;
    fx::ShapeProp(gm).propagate({x});
    CHECK(meta_text(gm) == meta);
    fx::propagate_symbolic_shapes(gm, "test");
    CHECK(meta_text(gm) == meta);
  }

  SECTION("specialize_sizes keeps the sizes that depend on data") {
    CHECK_FALSE(fx::specialize_sizes(*gm));
    CHECK(contains(gm, "%u0 : [#users="));
    for (const torch::Tensor& x : selections({4, 5})) {
      CHECK(torch::equal(gm(x).toTensor(), fn(x)));
    }
  }

  SECTION("kept by fx::save / fx::load and by the printed IR") {
    std::stringstream file;
    fx::save(gm, file);
    fx::GraphModule loaded = fx::load(file);
    CHECK(meta_text(loaded) == meta);
    for (const torch::Tensor& x : selections({4, 5})) {
      CHECK(torch::equal(loaded(x).toTensor(), fn(x)));
    }
    const std::string printed = gm->graph().to_string();
    CHECK(fx::parse_graph(printed)->to_string() == printed);
  }
}

TEST_CASE("a mask after a leading dimension: its size is the mask's dimension") {
  // kept is [3, u0]: u0 is read from dimension 1 of the index's output.
  auto fn = [](torch::Tensor x) {
    torch::Tensor kept = x.index({torch::indexing::Slice(), x[0] > 0});
    return kept.reshape({kept.size(0) * kept.size(1)});
  };
  fx::GraphModule gm = fx::symbolic_trace(fn, torch::randn({3, 20}));
  CHECK(contains(gm, "= call_function[target=sym_size](args = (%index, 1)"));
  for (const torch::Tensor& x : selections({3, 20})) {
    CHECK(torch::equal(gm(x).toTensor(), fn(x)));
  }
}

TEST_CASE("a boolean mask and masked_select keep rows of any number") {
  // Rows whose sum is positive, with dynamic rows B, flattened: the size
  // is u0 * 4, the mask's numel B.
  auto fn = [](torch::Tensor x) {
    torch::Tensor kept = x.index({x.sum(1) > 0});
    torch::Tensor flat = kept.view({kept.size(0) * x.size(1)});
    torch::Tensor big = torch::masked_select(x, x > 1);
    return std::make_tuple(flat, big.view({1, big.size(0)}));
  };
  fx::TraceOptions options;
  options.dynamic = {fx::Dim("B").max(64).on(0, 0)};
  fx::GraphModule gm = fx::symbolic_trace(fn, {torch::randn({6, 4})}, options);
  CHECK(contains(gm, "%u0 : [#users="));
  CHECK(contains(gm, "%u1 : [#users="));
  CHECK(contains(gm, "call_function[target=aten::masked_select]"));
  for (int64_t b : {1, 2, 6, 64}) {
    for (const torch::Tensor& x : selections({b, 4})) {
      auto got = gm(x).toTupleRef().elements();
      auto [flat, big] = fn(x);
      CHECK(torch::equal(got[0].toTensor(), flat));
      CHECK(torch::equal(got[1].toTensor(), big));
    }
  }
  CHECK_THROWS_AS(gm(torch::randn({65, 4})), fx::GuardError);

  // Specialized to B = 6, the rows kept still follow the data.
  CHECK(fx::specialize_sizes(*gm));
  CHECK_FALSE(contains(gm, "%B : [#users="));
  for (const torch::Tensor& x : selections({6, 4})) {
    auto got = gm(x).toTupleRef().elements();
    auto [flat, big] = fn(x);
    CHECK(torch::equal(got[0].toTensor(), flat));
    CHECK(torch::equal(got[1].toTensor(), big));
  }
  CHECK_THROWS_AS(gm(torch::randn({2, 4})), fx::GuardError);
}

TEST_CASE("a data-dependent size's symbol is not one the user gave") {
  // The batch is named u0, so nonzero's rows are u1, for ShapeProp too.
  auto fn = [](torch::Tensor x) {
    torch::Tensor idx = torch::nonzero(x);
    return idx.reshape({idx.size(0) * 2});
  };
  fx::TraceOptions options;
  options.dynamic = {fx::Dim("u0").max(16).on(0, 0)};
  fx::GraphModule gm = fx::symbolic_trace(fn, {torch::randn({4, 5})}, options);
  CHECK(contains(gm, "%u1 : [#users="));
  const std::string meta = meta_text(gm);
  CHECK(meta.find("i64[u1, 2]") != std::string::npos);
  fx::ShapeProp(gm).propagate({torch::randn({3, 5})});
  CHECK(meta_text(gm) == meta);
  for (const torch::Tensor& x : selections({7, 5})) {
    CHECK(torch::equal(gm(x).toTensor(), fn(x)));
  }
}

TEST_CASE("unique's values and counts share one symbol") {
  auto fn = [](torch::Tensor x) {
    auto [values, inverse, counts] =
        at::_unique2(x, /*sorted=*/true, /*return_inverse=*/true,
                     /*return_counts=*/true);
    torch::Tensor pairs = torch::stack({values, counts}).view({2 * values.size(0)});
    return std::make_tuple(pairs, inverse);
  };
  fx::GraphModule gm =
      fx::symbolic_trace(fn, torch::randint(0, 6, {3, 5}));
  CHECK(contains(gm, "call_function[target=aten::_unique2]"));
  CHECK(contains(gm, "%u0 : [#users="));
  for (torch::Tensor x : {torch::zeros({3, 5}, torch::kLong),
                          torch::arange(15).view({3, 5}),
                          torch::randint(0, 4, {3, 5})}) {
    auto got = gm(x).toTupleRef().elements();
    auto [pairs, inverse] = fn(x);
    CHECK(torch::equal(got[0].toTensor(), pairs));
    CHECK(torch::equal(got[1].toTensor(), inverse));
  }
}

TEST_CASE("torch::where(mask) gives one index tensor per dimension") {
  auto fn = [](torch::Tensor x) {
    std::vector<torch::Tensor> at = torch::where(x > 0);
    return x.index({at[0], at[1]}) * at[1].to(torch::kFloat);
  };
  fx::GraphModule gm = fx::symbolic_trace(fn, torch::randn({3, 4}));
  for (const torch::Tensor& x : selections({3, 4})) {
    CHECK(torch::equal(gm(x).toTensor(), fn(x)));
  }
}

TEST_CASE("a bound the program needs is checked when the graph runs") {
  // The first row nonzero finds: there is none when nothing is nonzero, so
  // the trace at u0 = 0 fails and u0 is narrowed to at least 1, which the
  // graph checks.
  auto fn = [](torch::Tensor x) {
    torch::Tensor idx = torch::nonzero(x);
    return idx.select(0, 0) + idx.size(0);
  };
  fx::Tracer tracer;
  std::vector<c10::IValue> example = {torch::randn({3, 4})};
  fx::GraphModule gm(nullptr, tracer.trace(nullptr, fx::box_function(fn), example),
                     tracer.take_attributes());
  const fx::TraceStats& stats = tracer.stats();
  CHECK(contains(gm, "call_function[target=fx_guard::check_size](args = (%u0, 1, '>='"));
  REQUIRE(stats.narrowed.size() == 1);
  CHECK_THAT(stats.narrowed[0],
             Catch::StartsWith("1 <= u0 <= 12 (was 0 <= u0 <= 12)"));
  torch::Tensor one = torch::zeros({3, 4});
  one[2][1] = 5;
  for (const torch::Tensor& x : {one, torch::randn({3, 4})}) {
    CHECK(torch::equal(gm(x).toTensor(), fn(x)));
  }
  // Eager fails inside select; the graph names the size.
  CHECK_THROWS(fn(torch::zeros({3, 4})));
  CHECK_THROWS_WITH(gm(torch::zeros({3, 4})),
                    Catch::Contains("%u0 >= 1 (u0 is the size aten::nonzero "
                                    "%nonzero returned"));
  CHECK_THROWS_AS(gm(torch::zeros({3, 4})), fx::GuardError);
}

TEST_CASE("a selection from a selection is bounded by the first's bound") {
  // u1 selects from u0's elements: it can be as large as x (100), not as
  // the first trace's u0. Its first 20, and a size read from them: min(u1,
  // 20), which only traces beyond 20 tell from u1.
  auto fn = [](torch::Tensor x) {
    torch::Tensor kept = torch::masked_select(x, x > 0);
    torch::Tensor large = kept.index({kept > 1});
    torch::Tensor first = large.slice(0, 0, 20);
    return torch::cat({first, torch::zeros({first.size(0)})});
  };
  fx::Tracer tracer;
  std::vector<c10::IValue> example = {torch::randn({100})};
  fx::GraphModule gm(nullptr, tracer.trace(nullptr, fx::box_function(fn), example),
                     tracer.take_attributes());
  // Each bound is the elements it selects from, with x's all kept.
  const std::string printed = gm->graph().to_string();
  CHECK_THAT(printed, Catch::Contains("the graph was traced for 0 <= u1 <= 20"));
  CHECK_THAT(tracer.stats().narrowed.at(0),
             Catch::StartsWith("0 <= u1 <= 20 (was 0 <= u1 <= 100)"));
  torch::Tensor few = torch::full({100}, -1.0);
  few.slice(0, 0, 7).fill_(2.0);
  torch::Tensor twenty = torch::full({100}, -1.0);
  twenty.slice(0, 0, 20).fill_(2.0);
  for (const torch::Tensor& x : {few, twenty, -torch::ones({100})}) {
    CHECK(torch::equal(gm(x).toTensor(), fn(x)));
  }
  // More than 20: the graph, traced where min(u1, 20) is u1, refuses.
  CHECK_THROWS_AS(gm(torch::full({100}, 2.0)), fx::GuardError);
}

TEST_CASE("a size the near traces explain wrongly is left unknown") {
  // Nothing reads a size, so nothing needs checking; the metadata of the
  // first 20 of u1 is u1 below 20 and 20 above: not u1, as the first
  // traces alone (u1 <= 8) would have it, but unknown.
  auto fn = [](torch::Tensor x) {
    torch::Tensor kept = torch::masked_select(x, x > 0);
    torch::Tensor large = kept.index({kept > 1});
    return large.slice(0, 0, 20) * 2;
  };
  fx::Tracer tracer;
  std::vector<c10::IValue> example = {torch::randn({100})};
  fx::GraphModule gm(nullptr, tracer.trace(nullptr, fx::box_function(fn), example),
                     tracer.take_attributes());
  const std::string meta = meta_text(gm);
  INFO(meta);
  CHECK_THAT(meta, Catch::Contains("%index : f32[u1]"));
  CHECK_THAT(meta, Catch::Contains("%slice : f32[?]"));
  // ShapeProp, run on an example that keeps 7, finds u1's bound (100) as
  // the tracer does, and fits the same.
  torch::Tensor seven = -torch::ones({100});
  seven.slice(0, 0, 7).fill_(3.0);
  fx::ShapeProp(gm).propagate({seven});
  CHECK(meta_text(gm) == meta);
  fx::propagate_symbolic_shapes(gm, "test");
  CHECK(meta_text(gm) == meta);
  for (int64_t positive : {0, 7, 20, 60}) {
    torch::Tensor x = -torch::ones({100});
    x.slice(0, 0, positive).fill_(3.0);
    CHECK(torch::equal(gm(x).toTensor(), fn(x)));
  }
}

TEST_CASE("a size past which the program selects again is bounded there") {
  // Past 10 kept elements the program calls another operator whose size
  // depends on data, which a graph traced without it cannot hold: traced
  // up to 10, and checked.
  auto fn = [](torch::Tensor x) {
    torch::Tensor kept = torch::masked_select(x, x > 0);
    if (kept.size(0) > 10) kept = torch::masked_select(kept, kept > 1);
    return kept * 2;
  };
  fx::Tracer tracer;
  std::vector<c10::IValue> example = {torch::randn({40})};
  fx::GraphModule gm(nullptr, tracer.trace(nullptr, fx::box_function(fn), example),
                     tracer.take_attributes());
  REQUIRE_FALSE(tracer.stats().narrowed.empty());
  CHECK_THAT(tracer.stats().narrowed[0],
             Catch::StartsWith("0 <= u0 <= 10 (was 0 <= u0 <= 40): the trace "
                               "at u0=11"));
  for (int64_t positive : {0, 1, 5, 10}) {
    torch::Tensor x = -torch::ones({40});
    x.slice(0, 0, positive).fill_(3.0);
    CHECK(torch::equal(gm(x).toTensor(), fn(x)));
  }
  torch::Tensor eleven = -torch::ones({40});
  eleven.slice(0, 0, 11).fill_(3.0);
  CHECK_THROWS_AS(gm(eleven), fx::GuardError);
  CHECK_THROWS_WITH(gm(eleven),
                    Catch::Contains("%u0 <= 10 (u0 is the size "
                                    "aten::masked_select %masked_select "
                                    "returned"));
}

TEST_CASE("a selection indexed by the positions another selection found") {
  // torchvision's `keep = torch.where(scores > t)[0]; boxes[keep]` after an
  // earlier selection: the traces give u0 and u1 sizes of their own (u1
  // above u0 among them), and the indexing's shape is inferred without its
  // values, which only a run has.
  auto fn = [](torch::Tensor boxes, torch::Tensor scores) {
    torch::Tensor mask = scores > 0;
    torch::Tensor kept = boxes.index({mask});
    torch::Tensor kept_scores = scores.index({mask});
    torch::Tensor keep = torch::nonzero(kept_scores > 0.5).squeeze(1);
    return kept.index({keep});
  };
  fx::GraphModule gm =
      fx::symbolic_trace(fn, torch::rand({12, 4}), torch::randn({12}));
  for (const torch::Tensor& scores : selections({12})) {
    const torch::Tensor boxes = torch::rand({12, 4});
    CHECK(torch::equal(gm(boxes, scores).toTensor(), fn(boxes, scores)));
  }
}

TEST_CASE("a tensor of one element selects zero or one") {
  // Nothing reads the size: the metadata alone is symbolic.
  auto fn = [](torch::Tensor x) { return torch::masked_select(x, x > 0) * 2; };
  fx::GraphModule gm = fx::symbolic_trace(fn, torch::randn({1}));
  for (float v : {-1.0f, 1.0f}) {
    torch::Tensor x = torch::full({1}, v);
    CHECK(torch::equal(gm(x).toTensor(), fn(x)));
  }
}

TEST_CASE("what fx does not follow is refused by name") {
  SECTION("a mask beside integer indices") {
    auto fn = [](torch::Tensor x, torch::Tensor rows) {
      return x.index({rows, x[0] > 0});
    };
    CHECK_THROWS_WITH(
        fx::symbolic_trace(fn, torch::randn({3, 4}), torch::tensor({0, 2})),
        Catch::Contains("aten::index.Tensor indexes with a boolean mask and "
                        "integer indices together"));
  }
  SECTION("inside a body of control flow") {
    auto fn = [](torch::Tensor x) {
      using Tensors = std::vector<torch::Tensor>;
      return fx::cond(
          x.sum() > 0,
          [](const Tensors& in) {
            return Tensors{torch::masked_select(in[0], in[0] > 0).sum()};
          },
          [](const Tensors& in) { return Tensors{in[0].sum()}; }, {x})[0];
    };
    CHECK_THROWS_WITH(fx::symbolic_trace(fn, torch::randn({3})),
                      Catch::Contains("inside the body of a cond or while_loop"));
  }
  SECTION("a branch on the size is kept to the side the trace took") {
    // Traced with 8 rows and more, the graph checks there are at least 3.
    auto fn = [](torch::Tensor x) {
      return torch::ones({torch::nonzero(x).size(0) > 2 ? 1 : 2});
    };
    fx::GraphModule gm = fx::symbolic_trace(fn, torch::randn({3, 4}));
    CHECK(contains(gm, "(%u0, 3, '>='"));
    torch::Tensor x = torch::randn({3, 4});
    CHECK(torch::equal(gm(x).toTensor(), fn(x)));
    x.view(-1).narrow(0, 0, 10).zero_();
    CHECK_THROWS_AS(gm(x), fx::GuardError);
  }
}
