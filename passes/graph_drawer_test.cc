#include "passes/graph_drawer.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include <torch/torch.h>

#include "fx/fx.h"
#include "interpreter/shape_prop.h"
#include "passes/cost_model.h"
#include "models/zoo.h"
#include "third_party/catch.h"

namespace {

using fx::Node;

// Where a test may write files: Bazel's undeclared outputs (kept after the
// test, for a look) or its temporary directory.
std::string output_path(const std::string& name) {
  for (const char* var : {"TEST_UNDECLARED_OUTPUTS_DIR", "TEST_TMPDIR"}) {
    if (const char* dir = std::getenv(var))
      return std::string(dir) + "/" + name;
  }
  return "/tmp/" + name;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream out;
  out << in.rdbuf();
  return out.str();
}

// x -> linear -> relu, with metadata from ShapeProp.
fx::GraphModule linear_relu() {
  torch::manual_seed(0);
  auto g = std::make_unique<fx::Graph>();
  Node* x = g->placeholder("x");
  Node* w = g->get_attr("fc.weight");
  Node* linear = g->call_function(fx::op("aten::linear"), {x, w});
  g->output(g->call_function(fx::op("aten::relu"), {linear}));
  fx::Attributes attributes;
  attributes.parameters["fc.weight"] = torch::randn({4, 3});
  fx::GraphModule gm(std::move(g), attributes);
  torch::NoGradGuard no_grad;
  fx::ShapeProp(gm).propagate({torch::randn({2, 3})});
  return gm;
}

TEST_CASE("a small graph as DOT text") {
  fx::GraphModule gm = linear_relu();
  fx::CostReport cost = fx::estimate_cost(gm->graph());
  fx::DotOptions options;
  options.cost = &cost;
  CHECK(fx::to_dot(gm->graph(), options) ==
        "digraph \"fx_graph\" {\n"
        "  rankdir=TB;\n"
        "  node [shape=record, style=\"filled,rounded\", "
        "fontname=\"Helvetica\", fontsize=10];\n"
        "  \"x\" [label=\"{name=%x|op_code=placeholder|target=x|f32[2, 3]}\", "
        "fillcolor=\"AliceBlue\"];\n"
        "  \"fc_weight\" [label=\"{name=%fc_weight|op_code=get_attr|"
        "target=fc.weight|f32[4, 3]}\", fillcolor=\"LightGrey\"];\n"
        "  \"linear\" [label=\"{name=%linear|op_code=call_function|"
        "target=aten::linear|f32[2, 4]|flops=48 FLOPs (24 MACs)|"
        "bytes=72 B read, 32 B written}\", fillcolor=\"#CAFFE3\"];\n"
        "  \"relu\" [label=\"{name=%relu|op_code=call_function|"
        "target=aten::relu|f32[2, 4]|flops=8 FLOPs (0 MACs)|"
        "bytes=32 B read, 32 B written}\", fillcolor=\"#CAFFE3\"];\n"
        "  \"output\" [label=\"{name=%output|op_code=output|target=output|"
        "f32[2, 4]}\", fillcolor=\"PowderBlue\"];\n"
        "  \"x\" -> \"linear\";\n"
        "  \"fc_weight\" -> \"linear\";\n"
        "  \"linear\" -> \"relu\";\n"
        "  \"relu\" -> \"output\";\n"
        "}\n");

  // Without get_attr nodes, metadata and costs.
  options = fx::DotOptions();
  options.get_attr = false;
  options.tensor_meta = false;
  options.name = "small";
  const std::string dot = fx::to_dot(gm->graph(), options);
  CHECK(dot.rfind("digraph \"small\" {\n", 0) == 0);
  CHECK(dot.find("fc_weight") == std::string::npos);
  CHECK(dot.find("f32[") == std::string::npos);
  CHECK(dot.find("flops=") == std::string::npos);
  CHECK(dot.find("  \"linear\" [label=\"{name=%linear|op_code=call_function|"
                 "target=aten::linear}\"") != std::string::npos);
}

TEST_CASE("labels escape what DOT records treat specially") {
  CHECK(fx::escape_dot_record("a{b}|<c>\"d\\e\nf") ==
        "a\\{b\\}\\|\\<c\\>\\\"d\\\\e\\nf");

  auto g = std::make_unique<fx::Graph>();
  Node* x = g->placeholder("x");
  Node* t = g->call_function(fx::op("aten::transpose.int"), {x, 0, 1});
  Node* m = g->call_method("weird", {t, "a{b}|<c>\"d"},
                           {{"note", "x>y"}, {"other", x}});
  g->output(m);
  fx::TensorMeta strided;
  strided.sizes = {3, 2};
  strided.strides = {1, 3};
  strided.memory_format = c10::MemoryFormat::Preserve;
  t->meta().set(fx::kTensorMeta, strided);
  const std::string dot = fx::to_dot(*g);
  CHECK(dot.find("  \"weird\" [label=\"{name=%weird|op_code=call_method|"
                 "target=weird|args=('a\\{b\\}\\|\\<c\\>\\\"d',)|"
                 "kwargs=\\{note: 'x\\>y'\\}}\", fillcolor=\"Thistle1\"];\n") !=
        std::string::npos);
  CHECK(dot.find("|f32[3, 2]\\{1, 3\\}}") != std::string::npos);
  // Graphviz reads it: a bad escape would be "bad label format".
  const std::string svg = output_path("escaping.svg");
  fx::render_dot(dot, svg);
  CHECK(read_file(svg).find("&lt;c&gt;") != std::string::npos);
}

TEST_CASE("DOT text is deterministic") {
  models::ZooModel a = models::make_zoo_model("mobilenet_v2");
  models::ZooModel b = models::make_zoo_model("mobilenet_v2");
  fx::GraphModule gm_a = models::trace_zoo_model(a);
  fx::GraphModule gm_b = models::trace_zoo_model(b);
  fx::CostReport cost_a = fx::estimate_cost(gm_a->graph());
  fx::CostReport cost_b = fx::estimate_cost(gm_b->graph());
  fx::DotOptions options_a, options_b;
  options_a.cost = &cost_a;
  options_b.cost = &cost_b;
  const std::string dot = fx::to_dot(gm_a->graph(), options_a);
  CHECK(dot == fx::to_dot(gm_a->graph(), options_a));
  CHECK(dot == fx::to_dot(gm_b->graph(), options_b));
}

TEST_CASE("a ResNet-18 graph renders to SVG with Graphviz") {
  models::ZooModel model = models::make_zoo_model("resnet18");
  fx::GraphModule gm = models::trace_zoo_model(model);
  fx::CostReport cost = fx::estimate_cost(gm->graph());
  fx::DotOptions options;
  options.name = "resnet18";
  options.cost = &cost;
  const std::string path = output_path("resnet18.svg");
  // Graphviz is part of the setup: no `dot` is a failure, not a skip.
  fx::render_dot(fx::to_dot(gm->graph(), options), path);
  const std::string svg = read_file(path);
  CHECK((svg.rfind("<?xml", 0) == 0 || svg.find("<svg") != std::string::npos));
  CHECK(svg.find("<svg") != std::string::npos);
  CHECK(svg.find("name=%layer4_1_conv2_weight") != std::string::npos);
  CHECK(svg.find("target=aten::adaptive_avg_pool2d") != std::string::npos);
  CHECK(svg.find("f32[1, 512, 7, 7]") != std::string::npos);
}

TEST_CASE("LeNet with shapes and costs renders to SVG and PNG") {
  models::ZooModel model = models::make_zoo_model("lenet");
  fx::GraphModule gm = models::trace_zoo_model(model);
  fx::CostReport cost = fx::estimate_cost(gm->graph());
  fx::DotOptions options;
  options.name = "lenet";
  options.cost = &cost;
  const std::string dot = fx::to_dot(gm->graph(), options);
  fx::render_dot(dot, output_path("lenet_graph.svg"));
  fx::render_dot(dot, output_path("lenet_graph.png"));
  CHECK(read_file(output_path("lenet_graph.svg")).find("flops=") !=
        std::string::npos);
  CHECK(read_file(output_path("lenet_graph.png")).rfind("\x89PNG", 0) == 0);
}

TEST_CASE("render_dot says what went wrong") {
  CHECK_THROWS_WITH(fx::render_dot("digraph {}", output_path("g.jpeg")),
                    Catch::Contains("name it .svg, .png or .pdf"));
  CHECK_THROWS_AS(fx::render_dot("digraph {", output_path("broken.svg")),
                  fx::GraphError);
  CHECK_THROWS_WITH(fx::render_dot("digraph {", output_path("broken.svg")),
                    Catch::Contains("syntax error"));
  CHECK_THROWS_WITH(
      fx::render_dot("digraph {}", output_path("no/such/dir/g.svg")),
      Catch::Contains("failed"));

  const std::string saved = std::getenv("PATH");
  setenv("PATH", "/nonexistent", 1);
  CHECK_THROWS_WITH(fx::render_dot("digraph {}", output_path("g.svg")),
                    Catch::Contains("`dot` was not found on PATH") &&
                        Catch::Contains("install graphviz"));
  setenv("PATH", saved.c_str(), 1);
}

}  // namespace
