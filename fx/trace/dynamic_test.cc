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
  auto square = [](torch::Tensor x) {
    return x.sum() + torch::zeros({x.size(0) * x.size(0) + 1});
  };
  CHECK_THROWS_WITH(trace(square, {torch::randn({3})}, {dim(0, 0, "N")}),
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
