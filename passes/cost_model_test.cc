#include "passes/cost_model.h"

#include <torch/torch.h>

#include "fx/fx.h"
#include "interpreter/shape_prop.h"
#include "models/zoo.h"
#include "third_party/catch.h"

namespace {

using fx::Node;
using fx::NodeCost;
using fx::Opcode;

const NodeCost& cost_of(const fx::CostReport& report, const std::string& name) {
  for (const auto& [node, cost] : report.nodes) {
    if (node->name() == name) return cost;
  }
  FAIL("no node named " << name << " in the report");
  static NodeCost none;
  return none;
}

// A graph written by hand, with its metadata from ShapeProp.
struct HandBuilt {
  fx::GraphModule gm{nullptr};
  fx::CostReport report;
};

HandBuilt hand_built() {
  torch::manual_seed(0);
  auto g = std::make_unique<fx::Graph>();
  fx::Attributes a;
  auto param = [&](const std::string& path, at::Tensor t) {
    a.parameters[path] = t;
    return g->get_attr(path);
  };
  Node* x = g->placeholder("x");
  // A grouped, strided, padded convolution with a bias.
  Node* conv = g->call_function(
      fx::op("aten::conv2d"),
      {x, param("conv.weight", torch::randn({6, 2, 3, 3})),
       param("conv.bias", torch::randn({6})), std::vector<int64_t>{2, 2},
       std::vector<int64_t>{1, 1}, std::vector<int64_t>{1, 1}, 2});
  Node* bn = g->call_function(
      fx::op("aten::batch_norm"),
      {conv, param("bn.weight", torch::rand({6})),
       param("bn.bias", torch::rand({6})), param("bn.mean", torch::rand({6})),
       param("bn.var", torch::rand({6})), false, 0.1, 1e-5, true});
  Node* relu = g->call_function(fx::op("aten::relu_"), {bn});
  Node* pool = g->call_function(fx::op("aten::max_pool2d"),
                                {relu, std::vector<int64_t>{2}});
  Node* gap = g->call_function(fx::op("aten::adaptive_avg_pool2d"),
                               {relu, std::vector<int64_t>{1, 1}});
  Node* flat = g->call_function(fx::op("aten::flatten.using_ints"), {gap, 1});
  Node* linear = g->call_function(
      fx::op("aten::linear"), {flat, param("fc.weight", torch::randn({5, 6})),
                               param("fc.bias", torch::randn({5}))});
  Node* up =
      g->call_function(fx::op("aten::conv_transpose2d.input"),
                       {pool, param("up.weight", torch::randn({6, 3, 3, 3})),
                        nullptr, std::vector<int64_t>{2, 2}});
  Node* tr = g->call_function(fx::op("aten::transpose.int"), {up, 2, 3});
  Node* copied = g->call_function(fx::op("aten::reshape"),
                                  {tr, std::vector<int64_t>{2, -1}});
  Node* sm = g->call_function(fx::op("aten::softmax.int"), {copied, 1});
  Node* cum = g->call_function(fx::op("aten::cumsum"), {sm, 1});
  Node* sig = g->call_method("sigmoid", {linear});
  g->output(fx::Argument::tuple({cum, sig}));
  HandBuilt h;
  h.gm = fx::GraphModule(std::move(g), a);
  fx::ShapeProp(h.gm).propagate({torch::randn({2, 4, 9, 9})});
  h.report = fx::estimate_cost(h.gm->graph());
  return h;
}

TEST_CASE("each kind of operator costs what its formula says") {
  torch::NoGradGuard no_grad;
  HandBuilt h = hand_built();
  const fx::CostReport& r = h.report;

  // conv2d: x f32[2, 4, 9, 9], weight f32[6, 2, 3, 3] (groups 2), out
  // f32[2, 6, 5, 5]: 300 outputs of 2*3*3 multiply-adds, plus the bias.
  const NodeCost& conv = cost_of(r, "conv2d");
  CHECK(conv.macs == 300 * 18);
  CHECK(conv.flops == 2 * 300 * 18 + 300);
  CHECK(conv.bytes_read == (648 + 108 + 6) * 4);
  CHECK(conv.bytes_written == 300 * 4);
  CHECK(conv.weight_bytes == (108 + 6) * 4);
  CHECK(conv.modelled);

  // batch_norm in eval: scale and shift per element; reads 4 statistics.
  const NodeCost& bn = cost_of(r, "batch_norm");
  CHECK(bn.flops == 300 * fx::kNormApplyFlops);
  CHECK(bn.macs == 0);
  CHECK(bn.bytes_read == (300 + 4 * 6) * 4);
  CHECK(bn.weight_bytes == 4 * 6 * 4);
  // Computed inputs are not weights.
  CHECK(cost_of(r, "relu_").weight_bytes == 0);
  // In place: reads and writes its input.
  CHECK(cost_of(r, "relu_").flops == 300);
  CHECK(cost_of(r, "relu_").bytes_read == 1200);
  CHECK(cost_of(r, "relu_").bytes_written == 1200);
  // max_pool2d, kernel [2] = 2x2: f32[2, 6, 2, 2], 4 inputs per output.
  CHECK(cost_of(r, "max_pool2d").flops == 48 * 4);
  // Global average pooling looks at every input element once.
  CHECK(cost_of(r, "adaptive_avg_pool2d").flops == 300);
  // Flattening a contiguous tensor is a view: nothing moves.
  const NodeCost& flat = cost_of(r, "flatten");
  CHECK((flat.flops == 0 && flat.bytes() == 0 && flat.modelled));
  // linear: f32[2, 6] x f32[5, 6]^T + bias: 10 outputs of 6.
  const NodeCost& linear = cost_of(r, "linear");
  CHECK(linear.macs == 60);
  CHECK(linear.flops == 130);
  CHECK(linear.bytes_read == (12 + 30 + 5) * 4);
  // conv_transpose2d: f32[2, 6, 2, 2] in, weight f32[6, 3, 3, 3]: each
  // input element reaches 3*3*3 outputs.
  CHECK(cost_of(r, "conv_transpose2d").macs == 48 * 27);
  CHECK(cost_of(r, "conv_transpose2d").flops == 2 * 48 * 27);
  // transpose is a view; reshaping the transposed tensor copies it.
  CHECK(cost_of(r, "transpose").bytes() == 0);
  const NodeCost& copied = cost_of(r, "reshape");
  const double up_bytes = cost_of(r, "conv_transpose2d").bytes_written;
  CHECK(copied.flops == 0);
  CHECK(copied.bytes_read == up_bytes);
  CHECK(copied.bytes_written == up_bytes);
  CHECK(cost_of(r, "softmax").flops == up_bytes / 4 * fx::kSoftmaxFlops);
  // call_method resolves to the operator.
  CHECK(cost_of(r, "sigmoid").flops == 10);
  CHECK(cost_of(r, "sigmoid").modelled);

  // Unknown: data movement only, and said so.
  const NodeCost& cum = cost_of(r, "cumsum");
  CHECK(!cum.modelled);
  CHECK(cum.flops == 0);
  CHECK(cum.bytes_read == up_bytes);
  CHECK(r.unmodelled_ops == std::vector<std::string>{"aten::cumsum"});
  CHECK(!r.total.modelled);

  // Totals and groups add up.
  double flops = 0;
  for (const auto& [node, cost] : r.nodes) flops += cost.flops;
  CHECK(r.total.flops == flops);
  CHECK(r.nodes.size() == 13);
  CHECK(r.by_module_tree.at("").flops == flops);
  CHECK(r.by_module_path.size() == 1);  // no module paths: all root
}

TEST_CASE("arguments are found by schema name, given as kwargs") {
  // As the normalize_args pass writes calls: every argument by name.
  torch::NoGradGuard no_grad;
  auto g = std::make_unique<fx::Graph>();
  Node* x = g->placeholder("x");
  Node* w = g->get_attr("w");
  Node* b = g->get_attr("b");
  Node* conv = g->call_function(
      fx::op("aten::conv2d"), {},
      {{"input", x}, {"weight", w}, {"bias", b},
       {"stride", std::vector<int64_t>{2, 2}}});
  Node* bn = g->call_function(
      fx::op("aten::batch_norm"), {},
      {{"input", conv}, {"weight", nullptr}, {"bias", nullptr},
       {"running_mean", nullptr}, {"running_var", nullptr},
       {"training", true}, {"momentum", 0.1}, {"eps", 1e-5},
       {"cudnn_enabled", false}});
  g->output(bn);
  fx::Attributes a;
  a.parameters["w"] = torch::randn({6, 4, 3, 3});
  a.parameters["b"] = torch::randn({6});
  fx::GraphModule gm(std::move(g), a);
  fx::ShapeProp(gm).propagate({torch::randn({2, 4, 9, 9})});
  fx::CostReport r = fx::estimate_cost(gm->graph());
  // f32[2, 6, 4, 4]: 192 outputs of 4*3*3, plus the bias.
  CHECK(cost_of(r, "conv2d").macs == 192 * 36);
  CHECK(cost_of(r, "conv2d").flops == 2 * 192 * 36 + 192);
  // Training: statistics too.
  CHECK(cost_of(r, "batch_norm").flops ==
        192 * (fx::kNormStatsFlops + fx::kNormApplyFlops));
}

TEST_CASE("without metadata, a known operator is reported unmodelled") {
  auto g = std::make_unique<fx::Graph>();
  Node* x = g->placeholder("x");
  Node* w = g->get_attr("w");
  g->output(g->call_function(fx::op("aten::conv2d"), {x, w}));
  fx::CostReport r = fx::estimate_cost(*g);
  REQUIRE(r.nodes.size() == 1);
  CHECK(!r.nodes[0].second.modelled);
  CHECK(r.unmodelled_ops ==
        std::vector<std::string>{"aten::conv2d (no tensor metadata)"});
}

double gmacs(const std::string& name) {
  models::ZooModel model = models::make_zoo_model(name);
  fx::GraphModule gm = models::trace_zoo_model(model);
  fx::CostReport r = fx::estimate_cost(gm->graph());
  INFO(name << "\n" << fx::format_cost_table(r, {.top_n = 5}));
  CHECK(r.unmodelled_ops.empty());
  CHECK(r.total.modelled);
  return r.total.macs / 1e9;
}

TEST_CASE("zoo models cost what torchvision's are quoted at") {
  // torchvision: ResNet-50 4.09-4.11 GMACs, ResNet-18 1.81, MobileNetV2 0.30
  // (convolutions and the classifier).
  const double resnet50 = gmacs("resnet50");
  CHECK(resnet50 == Approx(4.10).epsilon(0.03));
  const double resnet18 = gmacs("resnet18");
  CHECK(resnet18 == Approx(1.81).epsilon(0.03));
  const double mobilenet = gmacs("mobilenet_v2");
  CHECK(mobilenet >= 0.30);
  CHECK(mobilenet <= 0.32);
}

TEST_CASE("every traceable zoo model is fully modelled") {
  for (const char* name : {"mlp", "lenet", "transformer_encoder", "lstm_tagger",
                           "unet", "inplace_ops"}) {
    INFO(name);
    models::ZooModel model = models::make_zoo_model(name);
    fx::CostReport r =
        fx::estimate_cost(models::trace_zoo_model(model)->graph());
    CHECK(r.unmodelled_ops.empty());
    CHECK(r.total.flops > 0);
    CHECK(r.total.bytes_read > 0);
  }
  // A leaf module is opaque.
  models::ZooModel model = models::make_zoo_model("data_dependent_leaf");
  fx::CostReport r =
      fx::estimate_cost(models::trace_zoo_model(model)->graph());
  CHECK(r.unmodelled_ops == std::vector<std::string>{"call_module gate"});
}

TEST_CASE("an LSTM costs its gate matrix products at every step") {
  models::ZooModel model = models::make_zoo_model("lstm_tagger");
  fx::GraphModule gm = models::trace_zoo_model(model);
  fx::CostReport r = fx::estimate_cost(gm->graph());
  Node* lstm = gm->graph().find_nodes(Opcode::kCallFunction,
                                      fx::op("aten::lstm.input"))[0];
  at::Tensor w_ih = gm->fetch_attr("lstm.weight_ih_l0");
  at::Tensor w_hh = gm->fetch_attr("lstm.weight_hh_l0");
  const int64_t hidden = w_hh.size(1);
  // Input [7, 3] tokens: 21 positions, one layer, one direction.
  const double macs = 21.0 * (w_ih.numel() + w_hh.numel());
  CHECK(cost_of(r, lstm->name()).macs == macs);
  CHECK(cost_of(r, lstm->name()).flops ==
        2 * macs +
            21.0 * hidden * (fx::kLstmPointwiseFlops + fx::kLstmBiasFlops));
  // The embedding reads the rows it gathers, not the table.
  const NodeCost& embedding = cost_of(r, "embedding");
  CHECK(embedding.flops == 0);
  CHECK(embedding.bytes_read ==
        21 * 8 + embedding.bytes_written);  // i64 indices
  CHECK(embedding.bytes_written < gm->fetch_attr("embedding.weight").numel() * 4);
}

TEST_CASE("a GRU costs its gate matrix products at every step") {
  // Two layers, batch first: [2, 5, 6] is 10 positions for each layer.
  torch::nn::GRU gru(torch::nn::GRUOptions(6, 4).num_layers(2).batch_first(true));
  gru->eval();
  fx::GraphModule gm = fx::symbolic_trace(
      [gru](at::Tensor x) mutable { return std::get<0>(gru->forward(x)); },
      torch::randn({2, 5, 6}));
  fx::CostReport r = fx::estimate_cost(gm->graph());
  CHECK(r.unmodelled_ops.empty());
  const std::vector<Node*> calls =
      gm->graph().find_nodes(Opcode::kCallFunction, fx::op("aten::gru.input"));
  REQUIRE(calls.size() == 1);
  double weights = 0;
  for (const at::Tensor& p : gru->parameters()) {
    if (p.dim() == 2) weights += static_cast<double>(p.numel());
  }
  const double macs = 10.0 * weights;
  CHECK(cost_of(r, calls[0]->name()).macs == macs);
  // Per unit of each layer's state ([2 layers, batch 2, 4 units]).
  CHECK(cost_of(r, calls[0]->name()).flops ==
        2 * macs + 10.0 * 2 * 4 * (fx::kGruPointwiseFlops + fx::kGruBiasFlops));
}

TEST_CASE("costs group by module path, exactly and by prefix") {
  models::ZooModel model = models::make_zoo_model("resnet18");
  fx::GraphModule gm = models::trace_zoo_model(model);
  fx::CostReport r = fx::estimate_cost(gm->graph());
  // conv1: 64 x 112 x 112 outputs of 3 x 7 x 7.
  CHECK(r.by_module_path.at("conv1").macs == 64.0 * 112 * 112 * 3 * 7 * 7);
  double layer1 = 0;
  for (const auto& [path, cost] : r.by_module_path) {
    if (path.rfind("layer1.", 0) == 0) layer1 += cost.flops;
  }
  CHECK(layer1 > 0);
  CHECK(r.by_module_tree.at("layer1").flops == layer1);
  CHECK(r.by_module_tree.at("layer1.0").flops <
        r.by_module_tree.at("layer1").flops);
  CHECK(r.by_module_tree.at("").flops == r.total.flops);
  CHECK(r.by_module_tree.at("").macs == r.total.macs);
}

TEST_CASE("ShapeProp at another batch size scales the cost") {
  torch::NoGradGuard no_grad;
  models::ZooModel model = models::make_zoo_model("resnet18");
  fx::GraphModule gm = models::trace_zoo_model(model);
  const double macs = fx::estimate_cost(gm->graph()).total.macs;
  fx::ShapeProp(gm).propagate({torch::randn({2, 3, 224, 224})});
  CHECK(fx::estimate_cost(gm->graph()).total.macs == 2 * macs);
}

namespace {
// A CNN as LibTorch's examples write it: the batch read with x.size(0).
struct SizeReadingImpl : torch::nn::Module {
  SizeReadingImpl() {
    conv = register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 8, 3)));
    fc = register_module("fc", torch::nn::Linear(8 * 6 * 6, 10));
  }
  at::Tensor forward(at::Tensor x) {
    x = torch::relu(conv(x));
    return fc(x.view({x.size(0), -1}));
  }
  torch::nn::Conv2d conv{nullptr};
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(SizeReading);
}  // namespace

TEST_CASE("a graph with dynamic dimensions costs what it does at a given shape") {
  SizeReading model;
  model->eval();
  fx::TraceOptions options;
  options.dynamic = {{.input = 0, .dim = 0, .symbol = "B", .max = 64}};
  fx::GraphModule gm = fx::symbolic_trace(model, {torch::randn({2, 3, 8, 8})}, options);
  const double at_2 = fx::estimate_cost(gm->graph()).total.flops;
  const fx::CostReport at_8 = fx::estimate_cost_at(*gm, {torch::zeros({8, 3, 8, 8})});
  CHECK(at_8.total.flops == Approx(4 * at_2));
  CHECK(at_8.total.modelled);
  // As a graph traced at that batch costs; the module keeps its own meta.
  fx::GraphModule traced_8 = fx::symbolic_trace(model, torch::randn({8, 3, 8, 8}));
  CHECK(at_8.total.flops == fx::estimate_cost(traced_8->graph()).total.flops);
  CHECK(fx::estimate_cost(gm->graph()).total.flops == at_2);
  CHECK_THROWS_AS(fx::estimate_cost_at(*gm, {torch::zeros({65, 3, 8, 8})}), fx::GuardError);

  // Pricing runs the graph, but leaves what running writes as it was.
  torch::nn::BatchNorm2d bn(3);
  bn->train();
  fx::GraphModule training = fx::symbolic_trace(bn, torch::randn({2, 3, 8, 8}));
  const at::Tensor mean = training->fetch_attr("running_mean").clone();
  fx::estimate_cost_at(*training, {torch::randn({2, 3, 8, 8}) + 5});
  CHECK(torch::equal(training->fetch_attr("running_mean"), mean));
}

TEST_CASE("the roofline: per node, the slower of compute and memory") {
  torch::NoGradGuard no_grad;
  HandBuilt h = hand_built();
  const fx::Machine machine{1e9, 1e8};  // 1 GFLOP/s, 100 MB/s
  const NodeCost& conv = cost_of(h.report, "conv2d");
  // 11100 FLOPs: 11.1 us; 4248 bytes: 42.48 us.
  CHECK(fx::estimated_seconds(conv, machine) == Approx(42.48e-6));
  CHECK(fx::bound_of(conv, machine) == fx::Bound::kMemory);
  const fx::Machine slow_compute{1e6, 1e9};
  CHECK(fx::estimated_seconds(conv, slow_compute) == Approx(11.1e-3));
  CHECK(fx::bound_of(conv, slow_compute) == fx::Bound::kCompute);
  CHECK(fx::bound_of(cost_of(h.report, "flatten"), machine) ==
        fx::Bound::kNone);
  double total = 0;
  for (const auto& [node, cost] : h.report.nodes) {
    total += fx::estimated_seconds(cost, machine);
  }
  CHECK(fx::estimated_seconds(h.report, machine) == Approx(total));
  CHECK_THROWS_WITH(fx::estimated_seconds(conv, fx::Machine{0, 1}),
                    Catch::Contains("positive peak_flops_per_second"));
}

TEST_CASE("weights in memory are fetched before computing") {
  torch::NoGradGuard no_grad;
  HandBuilt h = hand_built();
  const NodeCost& conv = cost_of(h.report, "conv2d");
  // 11100 FLOPs at 1 GFLOP/s: 11.1 us; 4248 bytes at 1 GB/s: 4.248 us, of
  // which 456 are weights.
  fx::Machine machine{1e9, 1e9};
  CHECK(fx::estimated_seconds(conv, machine) == Approx(11.1e-6));
  CHECK(fx::estimated_seconds(conv, machine, fx::WeightsIn::kMemory) ==
        Approx(11.1e-6 + 0.456e-6));
  // Memory-bound, the weights' time is already in it.
  const fx::Machine fast{1e12, 1e9};
  CHECK(fx::estimated_seconds(conv, fast, fx::WeightsIn::kMemory) ==
        Approx(4.248e-6));

  // A report's weights decide for all its nodes: the hand-built graph reads
  // 1,340 bytes of weights.
  CHECK(h.report.total.weight_bytes == (108 + 6 + 24 + 30 + 5 + 162) * 4);
  double in_cache = 0;
  double in_memory = 0;
  for (const auto& [node, cost] : h.report.nodes) {
    in_cache += fx::estimated_seconds(cost, machine);
    in_memory += fx::estimated_seconds(cost, machine, fx::WeightsIn::kMemory);
  }
  CHECK(in_memory > in_cache);
  CHECK(fx::weights_in(1340, machine) == fx::WeightsIn::kCache);
  machine.cache_bytes = 1340;
  CHECK(fx::weights_in(1340, machine) == fx::WeightsIn::kCache);
  CHECK(fx::estimated_seconds(h.report, machine) == Approx(in_cache));
  machine.cache_bytes = 1339;
  CHECK(fx::estimated_seconds(h.report, machine) == Approx(in_memory));
  // The table prices its rows the same way.
  const std::string table =
      fx::format_cost_table(h.report, {.machine = &machine});
  INFO(table);
  CHECK(table.find(fx::format_seconds(in_memory)) != std::string::npos);

  machine.cache_bytes = -1;
  CHECK_THROWS_WITH(fx::estimated_seconds(conv, machine),
                    Catch::Contains("cache_bytes must be at least 0"));
}

TEST_CASE("embedding's weights are the rows it gathers") {
  torch::NoGradGuard no_grad;
  auto g = std::make_unique<fx::Graph>();
  fx::Attributes a;
  a.parameters["table"] = torch::randn({1000, 16});
  Node* ids = g->placeholder("ids");
  Node* table = g->get_attr("table");
  g->output(g->call_function(fx::op("aten::embedding"), {table, ids}));
  fx::GraphModule gm(std::move(g), a);
  fx::ShapeProp(gm).propagate({torch::tensor({1, 5, 7}, torch::kLong)});
  const fx::CostReport report = fx::estimate_cost(gm->graph());
  const NodeCost& cost = cost_of(report, "embedding");
  CHECK(cost.weight_bytes == 3 * 16 * 4);
  CHECK(cost.bytes_read == 3 * 8 + 3 * 16 * 4);
}

TEST_CASE("quantities print with 3 significant digits") {
  CHECK(fx::format_quantity(0, "B") == "0 B");
  CHECK(fx::format_quantity(512, "B") == "512 B");
  CHECK(fx::format_quantity(3211264, "B") == "3.21 MB");
  CHECK(fx::format_quantity(236027904, "FLOPs") == "236 MFLOPs");
  CHECK(fx::format_quantity(4.1e9, "MACs") == "4.10 GMACs");
  CHECK(fx::format_quantity(999.7, "B") == "1.00 KB");
  CHECK(fx::format_quantity(12345, "B") == "12.3 KB");
  CHECK(fx::format_seconds(0) == "0 ns");
  CHECK(fx::format_seconds(850e-9) == "850 ns");
  CHECK(fx::format_seconds(12.34e-6) == "12.3 us");
  CHECK(fx::format_seconds(1.2) == "1.20 s");
}

TEST_CASE("the cost table is deterministic text") {
  torch::NoGradGuard no_grad;
  HandBuilt h = hand_built();
  const std::string table = fx::format_cost_table(h.report, {.top_n = 3});
  CHECK(table == fx::format_cost_table(hand_built().report, {.top_n = 3}));
  // Sorted by FLOPs; 5400 MACs of the convolution are its 11.1 KFLOPs with
  // the bias (see above).
  CHECK(table ==
        "node              target                        module        FLOPs"
        "        MACs     read  written  %FLOPs\n"
        "conv2d            aten::conv2d                          11.1 KFLOPs"
        "  5.40 KMACs  3.05 KB  1.20 KB    69.5\n"
        "conv_transpose2d  aten::conv_transpose2d.input          2.59 KFLOPs"
        "  1.30 KMACs    840 B    600 B    16.2\n"
        "softmax           aten::softmax.int                       750 FLOPs"
        "      0 MACs    600 B    600 B     4.7\n"
        "... 10 more rows\n"
        "total (13 nodes)                                        16.0 KFLOPs"
        "  6.76 KMACs  10.8 KB  6.32 KB   100.0\n"
        "unmodelled: aten::cumsum\n");
  // Unmodelled nodes say so.
  const std::string full = fx::format_cost_table(h.report);
  INFO(full);
  CHECK(full.find("\ncumsum ") != std::string::npos);
  CHECK(full.find(" aten::cumsum (unmodelled) ") != std::string::npos);
}

TEST_CASE("the cost table groups by module and adds the roofline") {
  models::ZooModel model = models::make_zoo_model("resnet18");
  fx::GraphModule gm = models::trace_zoo_model(model);
  fx::CostReport r = fx::estimate_cost(gm->graph());
  const fx::Machine machine{1e12, 1e11};
  const std::string tree = fx::format_cost_table(
      r, {.group_by = fx::CostTableOptions::GroupBy::kModuleTree,
          .top_n = 4,
          .machine = &machine});
  INFO(tree);
  CHECK(tree.rfind("module ", 0) == 0);
  CHECK(tree.find("\nlayer1 ") != std::string::npos);
  CHECK(tree.find("compute") != std::string::npos);
  CHECK(tree.find("more rows\ntotal (70 nodes)") != std::string::npos);
  CHECK(tree.find(fx::format_seconds(fx::estimated_seconds(r, machine))) !=
        std::string::npos);
  CHECK(tree.find("unmodelled") == std::string::npos);
  // The rows of the top level add up to the total.
  const std::string full_tree = fx::format_cost_table(
      r, {.group_by = fx::CostTableOptions::GroupBy::kModuleTree});
  INFO(full_tree);
  CHECK(full_tree.find("\n(outside submodules) ") != std::string::npos);

  // By exact path, relu_ and add_ (which use no parameter) are the root's.
  const std::string exact = fx::format_cost_table(
      r, {.group_by = fx::CostTableOptions::GroupBy::kModulePath,
          .machine = &machine});
  CHECK(exact.find("\n(root) ") != std::string::npos);
  CHECK(exact.find("memory") != std::string::npos);
}

}  // namespace
