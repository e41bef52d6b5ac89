#include "fx/io/parser.h"

#include <torch/torch.h>

#include <clocale>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "fx/fx.h"
#include "models/zoo.h"
#include "testdata/zoo_testing.h"
#include "testdata/test_files.h"
#include "third_party/catch.h"

namespace {

// Same nodes, names, opcodes, targets, args, kwargs, in the same order.
void check_same_graph(const fx::Graph& a, const fx::Graph& b) {
  std::vector<fx::Node*> x = a.nodes().to_vector();
  std::vector<fx::Node*> y = b.nodes().to_vector();
  REQUIRE(x.size() == y.size());
  fx::NodeMap map;
  for (size_t i = 0; i < x.size(); ++i) {
    INFO(x[i]->format_node());
    CHECK(x[i]->name() == y[i]->name());
    CHECK(x[i]->op() == y[i]->op());
    CHECK(x[i]->target() == y[i]->target());
    auto mapped = [&](fx::Node* n) -> fx::Argument { return map.at(n); };
    std::vector<fx::Argument> args;
    for (const auto& arg : x[i]->args()) args.push_back(fx::map_arg(arg, mapped));
    CHECK((args == y[i]->args()));
    REQUIRE(x[i]->kwargs().size() == y[i]->kwargs().size());
    for (size_t k = 0; k < x[i]->kwargs().size(); ++k) {
      CHECK(x[i]->kwargs()[k].first == y[i]->kwargs()[k].first);
      CHECK((fx::map_arg(x[i]->kwargs()[k].second, mapped) ==
             y[i]->kwargs()[k].second));
    }
    CHECK(x[i]->users().size() == y[i]->users().size());
    map[x[i]] = y[i];
  }
}

// The ParseError `text` raises.
fx::ParseError parse_error(const std::string& text) {
  try {
    fx::parse_graph(text);
  } catch (const fx::ParseError& e) {
    return e;
  }
  FAIL("parse_graph accepted:\n" << text);
  throw;
}

}  // namespace

TEST_CASE("parse_graph reads the header example back") {
  const std::string text = R"(graph():
    %x : [#users=1] = placeholder[target=x]
    %linear_weight : [#users=1] = get_attr[target=linear.weight]
    %linear : [#users=1] = call_function[target=aten::linear](args = (%x, %linear_weight), kwargs = {})
    %relu : [#users=1] = call_function[target=aten::relu](args = (%linear,), kwargs = {})
    return relu)";
  auto g = fx::parse_graph(text);
  CHECK(g->to_string() == text);
  CHECK(g->size() == 5);
  fx::Node* relu = g->output_node()->args()[0].to_node();
  CHECK(relu->target() == fx::op("aten::relu"));
  CHECK(relu->args()[0].to_node()->users().size() == 1);
}

TEST_CASE("parse_graph round-trips every kind of argument") {
  fx::Graph g;
  fx::Node* x = g.placeholder("x");
  fx::Node* y = g.placeholder("y");
  std::vector<fx::Argument> values = {
      fx::Argument(),
      true,
      false,
      0,
      -7,
      int64_t{9223372036854775807},
      int64_t{-9223372036854775807} - 1,
      1.0,
      -0.0,
      0.1,
      1e-05,
      1e+20,
      -2.5e-300,
      std::numeric_limits<double>::infinity(),
      -std::numeric_limits<double>::infinity(),
      std::nan(""),
      c10::complex<double>(0, 2),
      c10::complex<double>(1, -2.5),
      c10::complex<double>(-0.0, 1),
      std::string("plain"),
      std::string("it's \"quoted\" \\ with\nnew\tlines\r and \x01 \x7f"),
      std::string(""),
      c10::ScalarType::Float,
      c10::ScalarType::Long,
      c10::ScalarType::BFloat16,
      c10::ScalarType::Bool,
      c10::Layout::Strided,
      c10::Device("cpu"),
      c10::Device("cuda:1"),
      c10::MemoryFormat::ChannelsLast,
      c10::MemoryFormat::Preserve,
      fx::Argument::list({}),
      fx::Argument::tuple({}),
      fx::Argument::tuple({x}),
      fx::Argument::list({x, y, fx::Argument(), 3}),
      fx::Argument::tuple({fx::Argument::list({1, 2}),
                           fx::Argument::tuple({x, fx::Argument::tuple({y})})}),
  };
  fx::Node* call = g.call_function(
      fx::op("aten::add.Tensor"), values,
      {{"alpha", 2}, {"memory_format", c10::MemoryFormat::Contiguous},
       {"nested", fx::Argument::list({fx::Argument::tuple({x, 1.5})})}});
  g.output(fx::Argument::tuple({call, fx::Argument::list({x, y}), 3}));
  const std::string text = g.to_string();
  auto parsed = fx::parse_graph(text);
  CHECK(parsed->to_string() == text);
  check_same_graph(g, *parsed);
  // nan and -0.0 compare bitwise.
  fx::Node* parsed_call = parsed->find_nodes(fx::Opcode::kCallFunction)[0];
  CHECK((parsed_call->args()[8] == fx::Argument(-0.0)));
  CHECK((parsed_call->args()[8] != fx::Argument(0.0)));
  CHECK(parsed_call->args()[15].is_double());
  CHECK(std::isnan(parsed_call->args()[15].to_double()));
}

TEST_CASE("parse_graph reads call_method, call_module and functions") {
  const std::string text = R"(graph():
    %x : [#users=1] = placeholder[target=x]
    %layer1_0 : [#users=1] = call_module[target=layer1.0](args = (%x,), kwargs = {})
    %relu : [#users=1] = call_method[target=relu](args = (%layer1_0,), kwargs = {})
    %max_1 : [#users=2] = call_function[target=aten::max.dim](args = (%relu, 1), kwargs = {keepdim: False})
    %getitem : [#users=1] = call_function[target=getitem](args = (%max_1, 0), kwargs = {})
    %getitem_1 : [#users=1] = call_function[target=getitem](args = (%max_1, 1), kwargs = {})
    return (getitem, getitem_1))";
  auto g = fx::parse_graph(text);
  CHECK(g->to_string() == text);
  auto getitems = g->find_nodes(fx::Opcode::kCallFunction, fx::getitem());
  CHECK(getitems.size() == 2);
  CHECK(g->find_nodes(fx::Opcode::kCallModule)[0]->target().str() == "layer1.0");
  CHECK(g->find_nodes(fx::Opcode::kCallMethod)[0]->target().str() == "relu");
}

TEST_CASE("parse_graph reads the type slot into tensor meta") {
  const std::string text = R"(graph():
    %x : f32[2, 3, 4, 5]{60, 1, 15, 3} [#users=1] = placeholder[target=x]
    %max_1 : (f32[2, 4, 5], i64[2, 4, 5]) [#users=1] = call_function[target=aten::max.dim](args = (%x, 1), kwargs = {})
    %getitem : f32[2, 4, 5] [#users=1] = call_function[target=getitem](args = (%max_1, 0), kwargs = {})
    return getitem)";
  auto g = fx::parse_graph(text);
  CHECK(g->to_string({.tensor_meta = true}) == text);
  fx::Node* x = g->placeholders()[0];
  const fx::TensorMeta* meta = x->meta().get(fx::kTensorMeta);
  REQUIRE(meta);
  CHECK(meta->memory_format == c10::MemoryFormat::ChannelsLast);
  CHECK(meta->strides == std::vector<int64_t>{60, 1, 15, 3});
  fx::Node* max = x->users().to_vector()[0];
  const auto* list = max->meta().get(fx::kTensorMetaList);
  REQUIRE(list);
  REQUIRE(list->size() == 2);
  CHECK((*list)[1].dtype == c10::ScalarType::Long);
  CHECK((*list)[1].strides == std::vector<int64_t>{20, 5, 1});
}

TEST_CASE("parse_graph round-trips every zoo model, and the parsed graph runs") {
  for (const std::string& name : models::traceable_zoo_model_names()) {
    INFO(name);
    models::ZooModel model = models::make_zoo_model(name);
    fx::GraphModule gm = models::trace_zoo_model(model);
    for (bool meta : {false, true}) {
      const std::string text = gm->graph().to_string({.tensor_meta = meta});
      auto parsed = fx::parse_graph(text);
      CHECK(parsed->to_string({.tensor_meta = meta}) == text);
      check_same_graph(gm->graph(), *parsed);
      if (meta) {
        for (fx::Node* n : parsed->nodes()) {
          if (n->op() == fx::Opcode::kOutput) continue;
          INFO(n->name());
          CHECK((n->meta().contains("tensor_meta") ||
                 n->meta().contains("tensor_meta_list") ||
                 text.find("%" + n->name() + " : [") != std::string::npos));
        }
      }
    }
    // A GraphModule over the parsed graph, with the traced one's tensors and
    // leaf modules, gives the same outputs.
    fx::Attributes attributes;
    for (const auto& [path, tensor] : gm->tensor_attributes()) {
      (gm->is_parameter(path) ? attributes.parameters
                              : attributes.buffers)[path] = tensor;
    }
    attributes.modules = gm->leaf_modules();
    attributes.traced_training = gm->traced_training();
    fx::GraphModule reparsed(fx::parse_graph(gm->graph().to_string()),
                             std::move(attributes));
    torch::NoGradGuard no_grad;
    testdata::check_outputs_equal(gm->forward(model.example_inputs),
                                  reparsed->forward(model.example_inputs));
  }
}

TEST_CASE("numbers print and parse alike under a locale with a decimal comma") {
  // A German locale, built into the test's directory (Debian's `locales`
  // package has its source; tools/setup.sh installs it).
  const std::string dir = testdata::test_file("locales");
  const std::string command = "mkdir -p " + dir +
                              " && localedef -i de_DE -f UTF-8 " + dir +
                              "/de_DE.UTF-8 2>/dev/null";
  REQUIRE(std::system(command.c_str()) == 0);
  ::setenv("LOCPATH", dir.c_str(), 1);
  REQUIRE(std::setlocale(LC_ALL, "de_DE.UTF-8") != nullptr);
  // The locale is in force: C's own printing uses a comma.
  char probe[16];
  std::snprintf(probe, sizeof(probe), "%.1f", 0.5);
  REQUIRE(std::string(probe) == "0,5");

  CHECK(fx::Argument(0.5).to_string() == "0.5");
  CHECK(fx::Argument(1e-7).to_string() == "1e-07");
  CHECK(fx::Argument(-2.25e22).to_string() == "-2.25e+22");
  auto g = fx::parse_graph(
      "graph():\n"
      "    %x : [#users=1] = placeholder[target=x]\n"
      "    %mul : [#users=1] = call_function[target=aten::mul.Scalar](args = "
      "(%x, 0.125), kwargs = {})\n"
      "    return mul");
  CHECK(g->find_nodes(fx::Opcode::kCallFunction)[0]->args()[1].to_double() ==
        0.125);
  for (const std::string& name : models::traceable_zoo_model_names()) {
    INFO(name);
    models::ZooModel model = models::make_zoo_model(name);
    fx::GraphModule gm = models::trace_zoo_model(model);
    const std::string text = gm->graph().to_string({.tensor_meta = true});
    CHECK(fx::parse_graph(text)->to_string({.tensor_meta = true}) == text);
  }
  std::setlocale(LC_ALL, "C");
}

TEST_CASE("parse_graph reports malformed text with line and column") {
  struct Case {
    std::string text;
    int line;
    int column;
    std::string message;
  };
  const std::string head = "graph():\n    %x : [#users=1] = placeholder[target=x]\n";
  const std::vector<Case> cases = {
      {"", 1, 1, "empty"},
      {"graph:\n", 1, 1, "graph():"},
      {head, 3, 1, "no return line"},
      {head + "    return y\n", 3, 12, "'y' is not a node defined above"},
      {head + "    %r : [#users=1] = call_function[target=aten::relu](args = (%y,), kwargs = {})\n    return r",
       3, 64, "%y is not defined before this line"},
      {head + "    %x : [#users=1] = placeholder[target=x]\n    return x", 3, 5,
       "%x is defined twice (first on line 2)"},
      {head + "    %r = call_fn[target=aten::relu](args = (%x,), kwargs = {})\n    return r",
       3, 10, "unknown opcode 'call_fn'"},
      {head + "    %r = call_function[target=aten::no_such_op](args = (%x,), kwargs = {})\n    return r",
       3, 31, "neither a registered function"},
      {head + "    %r = call_function[target=aten::relu](args = (%x,, kwargs = {})\n    return r",
       3, 54, "expected a value"},
      {head + "    %r = call_function[target=aten::relu](args = %x, kwargs = {})\n    return r",
       3, 50, "args must be a tuple"},
      {head + "    %r = call_function[target=aten::add.Tensor](args = (%x, 1), kwargs = {alpha 2})\n    return r",
       3, 81, "expected ':' after the keyword name"},
      {head + "    %r = call_function[target=aten::mul.Scalar](args = (%x, 'abc), kwargs = {})\n    return r",
       3, 61, "string is not closed"},
      {head + "    %r = call_function[target=aten::mul.Scalar](args = (%x, 99999999999999999999), kwargs = {})\n    return r",
       3, 61, "out of range"},
      {head + "    %r = call_function[target=aten::mul.Scalar](args = (%x, 1.5.2), kwargs = {})\n    return r",
       3, 61, "malformed number"},
      {head + "    %r = call_function[target=aten::mul.Scalar](args = (%x, torch.float99), kwargs = {})\n    return r",
       3, 61, "unknown value 'torch.float99'"},
      {head + "    %r : q7[2] = call_function[target=aten::relu](args = (%x,), kwargs = {})\n    return r",
       3, 10, "unknown dtype 'q7'"},
      {head + "    return x\n    return x", 4, 5, "nothing may follow"},
      {head + "    return x\n\na.b = graph():\n    return x", 5, 1,
       "subgraph 'a.b' comes before its parent 'a'"},
      {head + "    return x\na = graph():\n    %y = placeholder[target=y]\n"
              "    return y\na = graph():\n    return y",
       7, 1, "already holds a subgraph named 'a'"},
      {head + "    return x\na = graph():\n    %y = placeholder[target=y]\n",
       6, 0, "the graph has no return line"},
      {head + "    return x junk", 3, 14, "expected the end of the line"},
      {head + "    %int : [#users=1] = placeholder[target=y]\n    return x", 3, 6,
       "'int' cannot name a node"},
      {head + "    hello\n    return x", 3, 5, "expected a node"},
      {head + "    %r = call_function[target=aten::relu](args = " +
           std::string(300, '[') + std::string(300, ']') +
           ", kwargs = {})\n    return r",
       3, 0, "nested too deeply"},
  };
  for (const Case& c : cases) {
    INFO(c.text);
    fx::ParseError e = parse_error(c.text);
    INFO(e.what());
    CHECK(e.line() == c.line);
    if (c.column) CHECK(e.column() == c.column);
    CHECK(std::string(e.what()).find(c.message) != std::string::npos);
    CHECK(std::string(e.what()).rfind("parse_graph: line ", 0) == 0);
  }
}

TEST_CASE("parse_graph never crashes on truncated or corrupted text") {
  models::ZooModel model = models::make_zoo_model("lenet");
  fx::GraphModule gm = models::trace_zoo_model(model);
  const std::string text = gm->graph().to_string({.tensor_meta = true});
  // Every prefix without the whole return line is a ParseError (one
  // cutting the returned name short may name another node).
  const size_t return_line = text.find("\n    return ");
  REQUIRE(return_line != std::string::npos);
  for (size_t n = 0; n < text.size(); ++n) {
    if (n <= return_line + 12) {
      CHECK_THROWS_AS(fx::parse_graph(text.substr(0, n)), fx::ParseError);
    } else {
      try {
        fx::parse_graph(text.substr(0, n));
      } catch (const fx::ParseError&) {
      }
    }
  }
  // Random byte changes: a graph or a ParseError, nothing else.
  std::mt19937 rng(1234);
  const std::string alphabet = "%()[]{},:=' \n\\#.-+0123456789abejx_";
  int parsed = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string corrupt = text;
    for (int k = 0; k < 1 + i % 3; ++k) {
      corrupt[rng() % corrupt.size()] = alphabet[rng() % alphabet.size()];
    }
    try {
      fx::parse_graph(corrupt);
      ++parsed;
    } catch (const fx::ParseError&) {
    }
  }
  CHECK(parsed < 3000);
}
