// The generalizer (TraceOptions::dynamic) on small programs, in the
// sanitizers' reach: each fit it makes (a size, an affine function, a
// product, a floor division), what it refuses (a changed structure, float
// or constant, a literal no fit explains, bad options), and the relations
// it guards, through fx::save / fx::load and the printed IR.
#include <sstream>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "fx/fx.h"
#include "third_party/catch.h"

namespace {

fx::DynamicDim dim(size_t input, int64_t d, std::string symbol,
                   int64_t max = std::numeric_limits<int64_t>::max(),
                   int64_t multiple_of = 1) {
  fx::DynamicDim out;
  out.input = input;
  out.dim = d;
  out.symbol = std::move(symbol);
  out.max = max;
  out.multiple_of = multiple_of;
  return out;
}

template <typename F>
fx::GraphModule trace(F fn, std::vector<c10::IValue> inputs,
                      std::vector<fx::DynamicDim> dims) {
  fx::TraceOptions options;
  options.dynamic = std::move(dims);
  return fx::symbolic_trace(fn, inputs, options);
}

bool contains(const fx::GraphModule& gm, const std::string& text) {
  return gm->graph().to_string().find(text) != std::string::npos;
}

}  // namespace

TEST_CASE("sizes, affine functions, products and floor divisions are fitted") {
  // narrow to T - 2: an affine function; a view to B * T: a product; a
  // view to T / 4: a floor division (T a multiple of 4).
  auto fn = [](torch::Tensor x) {
    const int64_t B = x.size(0), T = x.size(1);
    torch::Tensor head = x.narrow(1, 0, T - 2);
    torch::Tensor rows = x.reshape({B * T, -1});
    torch::Tensor windows = x.view({B, T / 4, 4 * x.size(2)});
    return std::make_tuple(head, rows, windows);
  };
  fx::GraphModule gm = trace(fn, {torch::randn({2, 8, 3})},
                             {dim(0, 0, "B"), dim(0, 1, "T", 512, 4)});
  CHECK(contains(gm, "%B : [#users="));
  CHECK(contains(gm, "call_function[target=sym_floordiv]"));
  CHECK(contains(gm, "call_function[target=sym_mul]"));
  CHECK(contains(gm, "call_function[target=sym_add]"));
  for (auto [b, t] : {std::pair<int64_t, int64_t>{1, 4}, {3, 20}, {5, 512}}) {
    torch::Tensor x = torch::randn({b, t, 3});
    auto got = gm(x).toTupleRef().elements();
    auto [head, rows, windows] = fn(x);
    CHECK(torch::equal(got[0].toTensor(), head));
    CHECK(torch::equal(got[1].toTensor(), rows));
    CHECK(torch::equal(got[2].toTensor(), windows));
  }
  CHECK_THROWS_AS(gm(torch::randn({2, 10, 3})), fx::GuardError);  // T % 4
  CHECK_THROWS_AS(gm(torch::randn({2, 8, 4})), fx::GuardError);   // fixed

  SECTION("kept by fx::save / fx::load and by the printed IR") {
    std::stringstream file;
    fx::save(gm, file);
    fx::GraphModule loaded = fx::load(file);
    torch::Tensor x = torch::randn({4, 12, 3});
    CHECK(torch::equal(loaded(x).toTupleRef().elements()[2].toTensor(),
                       std::get<2>(fn(x))));
    CHECK_THROWS_WITH(loaded(torch::randn({2, 10, 3})),
                      Catch::Contains("T % 4 == 0"));
    const std::string printed = gm->graph().to_string();
    CHECK(fx::parse_graph(printed)->to_string() == printed);
  }
}

TEST_CASE("metadata the near traces explain wrongly is left unknown") {
  // The first 20 rows: [B] below B = 20, traced near B = 6; the trace at
  // B's max (64) has 20, so the metadata says unknown, not B.
  fx::Tracer tracer([] {
    fx::TraceOptions options;
    options.dynamic = {dim(0, 0, "B", 64)};
    return options;
  }());
  std::unique_ptr<fx::Graph> graph = tracer.trace(
      nullptr,
      [](const std::vector<c10::IValue>& in) {
        return c10::IValue(in[0].toTensor().slice(0, 0, 20).relu());
      },
      {torch::randn({6, 3})});
  CHECK_FALSE(tracer.stats().read_sizes);
  const std::string printed =
      graph->to_string(fx::PrintOptions{.tensor_meta = true});
  INFO(printed);
  CHECK_THAT(printed, Catch::Contains("%x : f32[B, 3]") &&
                          Catch::Contains("%slice : f32[?, 3]"));
}

TEST_CASE("a program that reads no size is traced again for its metadata") {
  fx::Tracer tracer([] {
    fx::TraceOptions options;
    options.dynamic = {dim(0, 0, "B")};
    return options;
  }());
  std::unique_ptr<fx::Graph> graph = tracer.trace(
      nullptr,
      [](const std::vector<c10::IValue>& in) {
        return c10::IValue(in[0].toTensor().relu().flatten());
      },
      {torch::randn({2, 3})});
  CHECK(tracer.stats().traces == 3);
  CHECK_FALSE(tracer.stats().read_sizes);
  CHECK_THAT(graph->to_string(fx::PrintOptions{.tensor_meta = true}),
             Catch::Contains("%x : f32[B, 3]") &&
                 Catch::Contains("%relu : f32[B, 3]") &&
                 Catch::Contains("%flatten : f32[3*B]"));
}

TEST_CASE("metadata gives sizes as functions of the dynamic ones") {
  // x.view({B * T, -1}), a strided slice and a transpose: products, floor
  // division and symbolic strides.
  auto f = [](torch::Tensor x) {
    auto flat = x.view({x.size(0) * x.size(1), -1});
    auto half = x.slice(1, 0, x.size(1), 2);
    return std::make_tuple(flat, half.transpose(0, 1));
  };
  fx::GraphModule gm = trace(f, {torch::randn({2, 8, 4})},
                             {dim(0, 0, "B"), dim(0, 1, "T", 512, 2)});
  const std::string printed =
      gm->graph().to_string(fx::PrintOptions{.tensor_meta = true});
  CHECK_THAT(printed, Catch::Contains("f32[B*T, 4]") &&
                          Catch::Contains("f32[B, T//2, 4]{4*T, 8, 1}") &&
                          Catch::Contains("f32[T//2, B, 4]{8, 4*T, 1}"));
  // The example's sizes stay in `sizes`.
  for (const fx::Node* n : gm->graph().nodes()) {
    if (n->name() != "view") continue;
    REQUIRE(n->tensor_meta() != nullptr);
    CHECK((n->tensor_meta()->sizes == std::vector<int64_t>{16, 4}));
    CHECK(n->tensor_meta()->symbolic_sizes.at(0).at({{"B", 3}, {"T", 5}}) == 15);
  }
  // fx::save keeps them; the printed text has no example sizes to give
  // them back, and says so.
  std::stringstream file;
  fx::save(gm, file);
  CHECK(fx::load(file)->graph().to_string(fx::PrintOptions{.tensor_meta = true}) ==
        printed);
  CHECK_THROWS_WITH(fx::parse_graph(printed),
                    Catch::Contains("symbolic sizes ('B, T, 4') cannot be read back"));
}

TEST_CASE("what the generalizer refuses, by name") {
  auto scaled = [](torch::Tensor x) {
    return x * (1.0 / static_cast<double>(x.size(1)));
  };
  CHECK_THROWS_WITH(trace(scaled, {torch::randn({2, 8})}, {dim(0, 1, "T")}),
                    Catch::Contains("cannot be generalized") &&
                        Catch::Contains("aten::mul"));
  auto cube = [](torch::Tensor x) {
    return x.sum() + torch::zeros({x.size(0) * x.size(0) * x.size(0)});
  };
  CHECK_THROWS_WITH(trace(cube, {torch::randn({3})}, {dim(0, 0, "N")}),
                    Catch::Contains("cannot express as a function"));
  auto two = [](torch::Tensor x, torch::Tensor y) {
    return x + y.view({y.size(0), -1});
  };
  CHECK_THROWS_WITH(
      trace(two, {torch::randn({2, 3}), torch::randn({2, 3})},
            {dim(0, 0, "B"), dim(1, 0, "C")}),
      Catch::Contains("give them one symbol"));
  // Broadcasting inputs that share a symbol generalize.
  fx::GraphModule shared =
      trace(two, {torch::randn({2, 3}), torch::randn({2, 3})},
            {dim(0, 0, "B"), dim(1, 0, "B")});
  CHECK_THROWS_WITH(shared(torch::randn({4, 3}), torch::randn({5, 3})),
                    Catch::Contains("dimensions named B must be equal"));
  auto relu = [](torch::Tensor x) { return x.relu(); };
  CHECK_THROWS_WITH(trace(relu, {torch::randn({2})}, {dim(0, 0, "2B")}),
                    Catch::Contains("a symbol is an identifier"));
  CHECK_THROWS_WITH(trace(relu, {torch::randn({2})}, {dim(1, 0, "B")}),
                    Catch::Contains("dynamic dimensions are for tensor inputs"));
  CHECK_THROWS_WITH(
      trace(relu, {torch::randn({2, 2})}, {dim(0, 0, "B"), dim(0, 0, "C")}),
      Catch::Contains("is given twice"));
  CHECK_THROWS_WITH(
      trace(two, {torch::randn({2, 3}), torch::randn({3, 3})},
            {dim(0, 0, "B"), dim(1, 0, "B")}),
      Catch::Contains("dimensions sharing a symbol are equal"));
  auto flat = [](torch::Tensor x) { return x.view({x.size(0)}); };
  CHECK_THROWS_WITH(trace(flat, {torch::randn({2})}, {dim(0, 0, "B", 2)}),
                    Catch::Contains("fewer than two sizes"));
}

namespace {

// Traces `fn` with `dims` and returns the graph and what the tracer said.
template <typename F>
std::pair<fx::GraphModule, fx::TraceStats> traced_with_stats(
    F fn, const std::vector<c10::IValue>& inputs,
    std::vector<fx::DynamicDim> dims) {
  fx::TraceOptions options;
  options.dynamic = std::move(dims);
  fx::Tracer tracer(options);
  std::unique_ptr<fx::Graph> graph =
      tracer.trace(nullptr, fx::box_function(fn), inputs);
  fx::TraceStats stats = tracer.stats();
  return {fx::GraphModule(nullptr, std::move(graph), tracer.take_attributes()),
          std::move(stats)};
}

// The graph computes what eager computes for x (bitwise; NaN where eager's
// is), or refuses x with a GuardError where eager runs: never a different
// result, never a run where eager throws.
enum class Outcome { kRight, kRefused };
template <typename F>
Outcome right_or_refused(fx::GraphModule gm, F fn, const at::Tensor& x) {
  at::Tensor want;
  bool eager_threw = false;
  try {
    want = fn(x);
  } catch (const c10::Error&) {
    eager_threw = true;
  }
  try {
    const at::Tensor got = gm(x).toTensor();
    CHECK_FALSE(eager_threw);
    if (!eager_threw) {
      CHECK(got.sizes() == want.sizes());
      CHECK(torch::equal(got.isnan(), want.isnan()));
      CHECK(torch::equal(got.nan_to_num(0), want.nan_to_num(0)));
    }
    return Outcome::kRight;
  } catch (const fx::GuardError&) {
    return Outcome::kRefused;
  }
}

}  // namespace

TEST_CASE("at size 1 a graph traced at larger sizes is right or refused") {
  // x [B, 1, 8]: squeeze drops the batch too at B = 1, and the view reads
  // the size squeeze left (8, not B). Traced at B = 4 only near 4, the
  // graph returned [1, 8] at B = 1 where eager returns [8, 1].
  auto squeezed = [](torch::Tensor x) {
    torch::Tensor y = x.squeeze();
    return y.view({y.size(0), -1});
  };
  auto [gm, stats] = traced_with_stats(squeezed, {torch::randn({4, 1, 8})},
                                       {fx::Dim("B").on(0, 0)});
  REQUIRE(stats.narrowed.size() == 1);
  CHECK_THAT(stats.narrowed[0],
             Catch::StartsWith("B >= 2 (was B >= 1)") &&
                 Catch::Contains("aten::view"));
  CHECK(right_or_refused(gm, squeezed, torch::randn({1, 1, 8})) ==
        Outcome::kRefused);
  CHECK_THROWS_WITH(gm(torch::randn({1, 1, 8})), Catch::Contains("B >= 2"));
  for (int64_t b : {2, 3, 5, 64}) {
    CAPTURE(b);
    CHECK(right_or_refused(gm, squeezed, torch::randn({b, 1, 8})) ==
          Outcome::kRight);
  }

  // Statistics over the batch where there is more than one: at B = 1 the
  // graph (traced at B = 4) divided by B - 1 = 0, NaN where eager is x * 3.
  auto standardized = [](torch::Tensor x) {
    const int64_t B = x.size(0);
    if (B > 1) {
      torch::Tensor centred = x - x.mean(0);
      return centred / (centred.pow(2).sum(0) / (B - 1)).sqrt();
    }
    return x * 3;
  };
  auto [stats_gm, stats2] = traced_with_stats(
      standardized, {torch::randn({4, 5})}, {fx::Dim("B").max(32).on(0, 0)});
  CHECK(stats2.narrowed.size() == 1);
  CHECK(right_or_refused(stats_gm, standardized, torch::randn({1, 5})) ==
        Outcome::kRefused);
  for (int64_t b : {2, 3, 31, 32}) {
    CAPTURE(b);
    CHECK(right_or_refused(stats_gm, standardized, torch::randn({b, 5})) ==
          Outcome::kRight);
  }
  CHECK(right_or_refused(stats_gm, standardized, torch::randn({33, 5})) ==
        Outcome::kRefused);

  // A program whose size-1 trace agrees keeps its bound of 1.
  auto flat = [](torch::Tensor x) { return x.view({x.size(0), -1}) * 2; };
  auto [flat_gm, flat_stats] = traced_with_stats(
      flat, {torch::randn({4, 2, 3})}, {fx::Dim("B").max(16).on(0, 0)});
  CHECK(flat_stats.narrowed.empty());
  CHECK(flat_stats.traces == 5);  // the example, 2 near it, 1 and 16
  for (int64_t b : {1, 16}) {
    CHECK(right_or_refused(flat_gm, flat, torch::randn({b, 2, 3})) ==
          Outcome::kRight);
  }
  CHECK(right_or_refused(flat_gm, flat, torch::randn({17, 2, 3})) ==
        Outcome::kRefused);
}

TEST_CASE("a branch, a clamp or a check on a size past the traced sizes narrows the bound") {
  // Each traced at T = 4 with T <= 64; before, the graph ran T = 20 and 64
  // as it did T = 4.
  auto branch = [](torch::Tensor x) {
    return x.size(1) > 16 ? x * 2 : x + 1;
  };
  auto clamped = [](torch::Tensor x) {
    return x.narrow(1, 0, std::min<int64_t>(x.size(1), 16));
  };
  auto checked = [](torch::Tensor x) {
    TORCH_CHECK(x.size(1) <= 32, "at most 32 positions, got ", x.size(1));
    return x.view({x.size(0), x.size(1) * 3});
  };
  const std::vector<fx::DynamicDim> dims = {fx::Dim("T").max(64).on(0, 1)};
  const at::Tensor example = torch::randn({2, 4, 3});
  struct Expect {
    const char* name;
    int64_t max;
  };
  auto run = [&](auto fn, Expect expect) {
    CAPTURE(expect.name);
    auto [gm, stats] = traced_with_stats(fn, {example}, dims);
    REQUIRE(stats.narrowed.size() == 1);
    CHECK_THAT(stats.narrowed[0],
               Catch::StartsWith("1 <= T <= " + std::to_string(expect.max) +
                                 " (was 1 <= T <= 64)"));
    for (int64_t t : {int64_t{1}, int64_t{2}, expect.max - 1, expect.max}) {
      CAPTURE(t);
      CHECK(right_or_refused(gm, fn, torch::randn({2, t, 3})) ==
            Outcome::kRight);
    }
    for (int64_t t : {expect.max + 1, int64_t{64}}) {
      CAPTURE(t);
      CHECK(right_or_refused(gm, fn, torch::randn({2, t, 3})) ==
            Outcome::kRefused);
    }
    return stats;
  };
  const fx::TraceStats b = run(branch, {"branch", 16});
  CHECK_THAT(b.narrowed[0], Catch::Contains("aten::mul"));
  run(clamped, {"clamped", 16});
  const fx::TraceStats c = run(checked, {"checked", 32});
  CHECK_THAT(c.narrowed[0], Catch::Contains("at most 32 positions"));
}

TEST_CASE("fx::Dim builds the dynamic dimensions torch.export's Dim names") {
  const fx::Dim batch = fx::Dim("B").max(64);
  const fx::DynamicDim d = fx::Dim("T").min(2).max(512).multiple_of(8).on(1, 2);
  CHECK(d.input == 1);
  CHECK(d.dim == 2);
  CHECK(d.symbol == "T");
  CHECK(d.relation() == "2 <= T <= 512, T % 8 == 0");
  CHECK(batch.on(0, 0).relation() == "1 <= B <= 64");
  auto add = [](torch::Tensor x, torch::Tensor mask) {
    return x.view({x.size(0), -1}) + mask.view({mask.size(0), -1});
  };
  fx::TraceOptions options;
  options.dynamic = {batch.on(0, 0), batch.on(1, 0)};
  fx::GraphModule gm = fx::symbolic_trace(
      add, {torch::randn({3, 4}), torch::randn({3, 4})}, options);
  CHECK(torch::equal(gm(torch::ones({64, 4}), torch::ones({64, 4})).toTensor(),
                     torch::full({64, 4}, 2.0)));
  CHECK_THROWS_WITH(gm(torch::ones({65, 4}), torch::ones({65, 4})),
                    Catch::Contains("1 <= B <= 64"));
}

TEST_CASE("a dimension the program needs fixed is refused at trace time") {
  // The features of a Linear layer: nothing reads the size, but no other
  // size runs; before, the trace was accepted and failed inside addmm later.
  torch::nn::Linear fc(8, 4);
  auto project = [&](torch::Tensor x) { return fc->forward(x).relu(); };
  CHECK_THROWS_WITH(trace(project, {torch::randn({2, 8})}, {dim(0, 1, "F")}),
                    Catch::Contains("tracing again at F=") &&
                        Catch::Contains("the dimension cannot be dynamic"));
  // Its batch is dynamic.
  fx::GraphModule gm =
      trace(project, {torch::randn({2, 8})}, {dim(0, 0, "B")});
  const at::Tensor x = torch::randn({5, 8});
  CHECK(torch::equal(gm(x).toTensor(), project(x)));
}

TEST_CASE("roundings and sums of sizes are fitted where three traces cannot pin them") {
  // Each refused before: three traces fit no a * S + b with a division by
  // a divisor of multiple_of, and fix no offset of a rounding.
  const at::Tensor example = torch::randn({2, 4, 3});
  const std::vector<fx::DynamicDim> dims = {fx::Dim("T").max(40).on(0, 1)};
  auto half = [](torch::Tensor x) {  // the first (T + 1) / 2 positions
    return x.narrow(1, 0, (x.size(1) + 1) / 2);
  };
  auto padded = [](torch::Tensor x) {  // zeros up to a multiple of 8
    const int64_t T = x.size(1);
    return torch::constant_pad_nd(x, {0, 0, 0, (T + 7) / 8 * 8 - T});
  };
  auto rows = [](torch::Tensor x) {  // a view to the padded length
    const int64_t T = x.size(1);
    torch::Tensor p = torch::constant_pad_nd(x, {0, 0, 0, (T + 7) / 8 * 8 - T});
    return p.view({x.size(0), (T + 7) / 8 * 8 / 8, -1});
  };
  auto check = [&](auto fn, const char* name, const char* printed) {
    CAPTURE(name);
    auto [gm, stats] = traced_with_stats(fn, {example}, dims);
    CHECK_THAT(gm->graph().to_string(), Catch::Contains(printed));
    CHECK(stats.narrowed.empty());
    // Every size the bounds allow, and one past them.
    for (int64_t t = 1; t <= 40; ++t) {
      CAPTURE(t);
      CHECK(right_or_refused(gm, fn, torch::randn({2, t, 3})) ==
            Outcome::kRight);
    }
    CHECK(right_or_refused(gm, fn, torch::randn({2, 41, 3})) ==
          Outcome::kRefused);
    return stats;
  };
  const fx::TraceStats h = check(half, "half", "sym_floordiv");
  // Three near traces, those that told candidates apart, and the bounds'.
  CHECK(h.traces <= 3 + 16 + 2);
  const fx::TraceStats p = check(padded, "padded", "sym_floordiv");
  CHECK(p.traces > 5);
  CHECK(p.traces <= 3 + 16 + 2);
  check(rows, "rows", "sym_floordiv");
  // Kept by fx::save / fx::load.
  auto [gm, stats] = traced_with_stats(padded, {example}, dims);
  std::stringstream file;
  fx::save(gm, file);
  fx::GraphModule loaded = fx::load(file);
  const at::Tensor x = torch::randn({2, 13, 3});
  CHECK(torch::equal(loaded(x).toTensor(), padded(x)));
}

TEST_CASE("a sum of two dynamic sizes is fitted") {
  // Two inputs of independent lengths joined: a literal T + S.
  auto joined = [](torch::Tensor x, torch::Tensor y) {
    torch::Tensor both = torch::cat({x, y}, 1);
    return both.view({x.size(0), x.size(1) + y.size(1), -1}) +
           torch::zeros({x.size(1) + y.size(1), 1});
  };
  fx::TraceOptions options;
  options.dynamic = {fx::Dim("T").max(32).on(0, 1), fx::Dim("S").max(32).on(1, 1)};
  fx::Tracer tracer(options);
  std::unique_ptr<fx::Graph> graph = tracer.trace(
      nullptr, fx::box_function(joined),
      {torch::randn({2, 5, 3}), torch::randn({2, 3, 3})});
  fx::GraphModule gm(nullptr, std::move(graph), tracer.take_attributes());
  CHECK_THAT(gm->graph().to_string(), Catch::Contains("sym_add"));
  for (int64_t t : {1, 2, 7, 32}) {
    for (int64_t s : {1, 4, 31, 32}) {
      CAPTURE(t, s);
      const at::Tensor x = torch::randn({2, t, 3}), y = torch::randn({2, s, 3});
      CHECK(torch::equal(gm(x, y).toTensor(), joined(x, y)));
    }
  }
  CHECK_THROWS_AS(gm(torch::randn({2, 33, 3}), torch::randn({2, 3, 3})),
                  fx::GuardError);
}

TEST_CASE("a transposed or sliced example is traced again in its own layout") {
  // A program that reads the layout: before, the traces at other sizes
  // ran on contiguous zeros, took the other branch, and the error blamed a
  // branch on a size. Now the traces agree, and the strides it read are
  // what is refused, by name.
  auto by_layout = [](torch::Tensor x) {
    return x.is_contiguous() ? x * 2 : x + 1;
  };
  CHECK_THROWS_WITH(
      trace(by_layout, {torch::randn({3, 8, 2}).transpose(0, 1)},
            {fx::Dim("T").max(64).on(0, 0)}),
      Catch::Contains("which the traced code read") &&
          Catch::Contains("pass a contiguous example input") &&
          !Catch::Contains("cannot be generalized"));
  // A program that does not read it runs at every size, contiguous or not.
  auto flat = [](torch::Tensor x) {
    return x.reshape({x.size(0), -1}) * 2;
  };
  const std::vector<fx::DynamicDim> dims = {fx::Dim("T").max(64).on(0, 0)};
  const at::Tensor transposed = torch::randn({3, 8, 2}).transpose(0, 1);
  const at::Tensor sliced = torch::randn({8, 6}).slice(1, 0, 6, 2);
  for (const at::Tensor& example : {transposed, sliced}) {
    CAPTURE(example.strides());
    REQUIRE_FALSE(example.is_contiguous());
    auto [gm, stats] = traced_with_stats(flat, {example}, dims);
    for (int64_t t : {int64_t{1}, int64_t{5}, int64_t{64}}) {
      CAPTURE(t);
      std::vector<int64_t> shape = example.sizes().vec();
      shape[0] = t;
      // Contiguous, and in the example's layout.
      CHECK(right_or_refused(gm, flat, torch::randn(shape)) == Outcome::kRight);
      const at::Tensor laid_out =
          example.dim() == 3
              ? torch::randn({shape[1], t, shape[2]}).transpose(0, 1)
              : torch::randn({t, shape[1] * 2}).slice(1, 0, shape[1] * 2, 2);
      CHECK(right_or_refused(gm, flat, laid_out) == Outcome::kRight);
    }
  }
}

TEST_CASE("a C++ division of a size that can be negative is not taken for floor division") {
  // C++'s `/` truncates toward zero where the graph's sym_floordiv floors:
  // roll by (T - 5) / 2 shifts by -1 at T = 2 and by 0 at T = 4, floor
  // division by -2 and -1. The traces near T = 8 and at the bounds (1,
  // 40) agree with both; the graph floored, wrong at T = 2 and 4.
  auto shifted = [](torch::Tensor x) {
    const int64_t T = x.size(1);
    return x.roll({(T - 5) / 2}, {1});
  };
  const at::Tensor example = torch::randn({2, 8, 3});
  CHECK_THROWS_WITH(
      trace(shifted, {example}, {fx::Dim("T").max(40).on(0, 1)}),
      Catch::Contains("truncates where the graph would floor"));
  // From T = 5 the numerator is not negative: the two agree, and the
  // rounding is fitted.
  fx::GraphModule gm =
      trace(shifted, {example}, {fx::Dim("T").min(5).max(40).on(0, 1)});
  CHECK_THAT(gm->graph().to_string(), Catch::Contains("sym_floordiv"));
  for (int64_t t = 5; t <= 40; ++t) {
    CAPTURE(t);
    CHECK(right_or_refused(gm, shifted, torch::randn({2, t, 3})) ==
          Outcome::kRight);
  }
  for (int64_t t : {4, 41}) {
    CAPTURE(t);
    CHECK(right_or_refused(gm, shifted, torch::randn({2, t, 3})) ==
          Outcome::kRefused);
  }
}
