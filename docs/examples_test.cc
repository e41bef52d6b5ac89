// Compiles and runs every C++ example of README.md and docs/*.md.
//
// docs/extract_examples.py writes the pages' ```cpp blocks into
// examples.inc, one namespace per page (docs_readme, docs_tracing, ...),
// and declares check_NAME for each example NAME. This file defines the
// checks, one test case each: each calls what its example defines, on real
// models, and asserts what the page says it does. An example without a
// check does not link.
#include <unistd.h>

#include <cmath>
#include <exception>
#include <fstream>
#include <functional>
#include <iterator>
#include <iostream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <torch/script.h>
#include <torch/torch.h>

#include "docs/examples.inc"
#include "fx/fx.h"
#include "fx/torchscript/torchscript.h"
#include "lowering/optimize_for_inference.h"
#include "models/zoo.h"
#include "onnx/to_onnx.h"
#include "passes/pass_manager.h"
#include "quantization/quantize_fx.h"
#include "scheduling/child_processes.h"
#include "scheduling/pipeline_runtime.h"
#include "testdata/test_files.h"
#include "testdata/test_helpers.h"
#include "third_party/catch.h"

namespace {

using testdata::relative_error;

// What `run` writes to std::cout.
std::string printed_by(const std::function<void()>& run) {
  std::ostringstream captured;
  std::streambuf* saved = std::cout.rdbuf(captured.rdbuf());
  try {
    run();
  } catch (...) {
    std::cout.rdbuf(saved);
    throw;
  }
  std::cout.rdbuf(saved);
  return captured.str();
}

// The examples write files into the working directory ("net.fx",
// "stage_1.fx"): run them in the test's own temporary directory.
void in_test_tmpdir() { REQUIRE(chdir(testdata::test_tmpdir().c_str()) == 0); }

// Compares what the code printed with the output block the page shows; on
// a difference, prints the code's text as it is (Catch2 wraps long lines),
// to paste into the page if the change is meant.
void check_output(const std::string& printed, const char* page_shows) {
  if (printed != page_shows) {
    std::cerr << "---- the page shows:\n" << page_shows
              << "\n---- the code prints:\n" << printed << "\n----\n";
  }
  CHECK(printed == page_shows);
}

size_t count_calls(const fx::GraphModule& gm, const char* op) {
  return gm->graph().find_nodes(fx::Opcode::kCallFunction, fx::op(op)).size();
}

struct Traced {
  models::ZooModel model;
  fx::GraphModule gm;
  at::Tensor x;
};

Traced trace_zoo(const std::string& name) {
  models::ZooModel model = models::make_zoo_model(name);
  fx::GraphModule gm = models::trace_zoo_model(model);
  at::Tensor x = model.example_inputs[0].toTensor();
  return {std::move(model), std::move(gm), x};
}

}  // namespace

// One test case per example: "README.md: tour", ...
void run_check(void (*check)()) {
  torch::NoGradGuard no_grad;
  in_test_tmpdir();
  torch::manual_seed(0);
  check();
}

#define DOCS_EXAMPLE_CASE(namespace_, name, page) \
  TEST_CASE(page ": " #name) { run_check(&namespace_::check_##name); }
DOCS_EXAMPLES(DOCS_EXAMPLE_CASE)

// --- README.md ---------------------------------------------------------------

void docs_readme::check_tour() {
  std::string printed = printed_by([] { tour(); });  // its own TORCH_CHECKs hold
  // The graph the README shows, then the C++ of forward.
  const size_t graph_end = printed.find("\n", printed.find("    return "));
  REQUIRE(graph_end != std::string::npos);
  check_output(printed.substr(0, graph_end), output_tour_graph);
  CHECK(printed.find("forward(", graph_end) != std::string::npos);
  fx::GraphModule saved = fx::load("net.fx");
  CHECK(count_calls(saved, "aten::gelu") == 1);
  CHECK(count_calls(saved, "aten::relu") == 0);
  CHECK(count_calls(saved, "aten::batch_norm") == 0);
}

// --- docs/tracing.md ---------------------------------------------------------

void docs_tracing::check_trace_gated() {
  Gated model;
  at::Tensor x = torch::randn({2, 16});
  fx::GraphModule gm = trace_gated(model, x);
  check_output(gm->graph().to_string(), output_gated_graph);
  CHECK(gm->graph().find_nodes(fx::Opcode::kCallModule).size() == 1);
  CHECK(torch::equal(gm(x).toTensor(), model(x)));
  CHECK_THROWS_AS(gm(torch::randn({3, 16})), fx::GuardError);
}

void docs_tracing::check_control_flow() {
  torch::manual_seed(0);
  Normalize model;
  at::Tensor x = torch::randn({2, 4});
  fx::GraphModule gm = fx::symbolic_trace(model, x);
  check_output(gm->graph().to_string(), output_control_flow_graph);
  // Both branches, and 0 to 9 halvings.
  for (float scale : {0.5f, 4.0f, 300.0f}) {
    for (float sign : {1.0f, -1.0f}) {
      at::Tensor input = torch::rand({3, 4}) * scale * sign;
      CHECK(torch::equal(gm(input).toTensor(), model(input)));
    }
  }
}

void docs_tracing::check_scan() {
  torch::manual_seed(0);
  torch::NoGradGuard no_grad;
  Elman model;
  fx::GraphModule gm = trace_elman(model);
  CHECK(gm->graph().subgraph("scan_combine_graph_0") != nullptr);
  CHECK(gm->graph().subgraph("map_body_graph_0") != nullptr);
  for (int64_t steps : {1, 5, 9}) {
    const at::Tensor x = torch::randn({2, steps, 4});
    const at::Tensor h0 = torch::randn({2, 8});
    CHECK(torch::equal(gm(x, h0).toTensor(), model(x, h0)));
  }
}

// --- docs/dynamic_shapes.md -------------------------------------------------

void docs_dynamic_shapes::check_dynamic_batch() {
  auto model = std::make_shared<Classifier>();
  fx::GraphModule gm = trace_any_batch(model);
  check_output(gm->graph().to_string(), output_dynamic_batch_graph);
  for (int64_t b : {1, 64}) {
    at::Tensor x = torch::randn({b, 1, 8, 8});
    CHECK(torch::equal(gm(x).toTensor(), model->forward(x)));
  }
  CHECK_THROWS_WITH(gm(torch::randn({65, 1, 8, 8})),
                    Catch::Contains("has B = 65 (dimension 0), outside what "
                                    "the trace allows: 1 <= B <= 64"));
  CHECK_THROWS_AS(gm(torch::randn({2, 1, 9, 9})), fx::GuardError);
}

void docs_dynamic_shapes::check_data_dependent_boxes() {
  fx::GraphModule gm = trace_kept_corners();
  check_output(gm->graph().to_string(), output_data_dependent_boxes_graph);
  for (double threshold : {2.0, 0.0, 0.5}) {
    // No score passes 2; every score passes 0.
    at::Tensor boxes = torch::rand({100, 4});
    at::Tensor scores = torch::rand({100}) + (0.5 - threshold);
    CHECK(torch::equal(gm(boxes, scores).toTensor(),
                       kept_corners(boxes, scores)));
  }
}

// --- docs/ir.md --------------------------------------------------------------

void docs_ir::check_build_graph() {
  std::ostringstream printed;
  printed << *linear_relu();
  check_output(printed.str(), output_linear_relu);
}

void docs_ir::check_parse() {
  std::unique_ptr<fx::Graph> graph = add_relu();
  std::string text = graph->to_string();
  CHECK(text.rfind("graph():\n    %x : [#users=1] = placeholder[target=x]\n", 0) == 0);
  CHECK(fx::parse_graph(text)->to_string() == text);
  fx::GraphModule gm(std::move(graph), fx::Attributes{});
  at::Tensor x = torch::randn({3, 4});
  CHECK(torch::equal(gm(x).toTensor(), torch::relu(x + x)));
}

void docs_ir::check_save_and_load() {
  Traced t = trace_zoo("lenet");
  auto [again, from_memory] = save_and_load(t.gm, testdata::test_file("lenet.fx"));
  at::Tensor y = t.gm(t.x).toTensor();
  CHECK(torch::equal(again(t.x).toTensor(), y));
  CHECK(torch::equal(from_memory(t.x).toTensor(), y));
  CHECK(again->graph().to_string() == t.gm->graph().to_string());
}

// --- docs/writing_transformations.md -----------------------------------------

namespace docs_writing_transformations {
namespace {
at::Tensor add(at::Tensor x, at::Tensor y) { return x + y; }
}  // namespace
}  // namespace docs_writing_transformations

void docs_writing_transformations::check_transform() {
  models::ZooModel model = models::make_zoo_model("mlp");
  at::Tensor x = model.example_inputs[0].toTensor();
  fx::GraphModule gm = transform(model.module, model.forward, {x});
  CHECK(torch::equal(gm(x).toTensor(), model.forward({x}).toTensor()));
}

void docs_writing_transformations::check_replace_add_with_mul() {
  at::Tensor x = torch::randn({2, 3});
  at::Tensor y = torch::randn({2, 3});
  fx::GraphModule gm = fx::symbolic_trace(&add, x, y);
  check_output(gm->graph().to_string(), output_add_graph);
  CHECK(replace_add_with_mul(*gm));
  gm->recompile();
  check_output(gm->graph().to_string(), output_mul_graph);
  CHECK(torch::equal(gm(x, y).toTensor(), x * y));
  // An add with alpha is no plain add: left as it is.
  fx::GraphModule scaled = fx::symbolic_trace(
      [](at::Tensor a, at::Tensor b) { return torch::add(a, b, 2); }, x, y);
  CHECK_FALSE(replace_add_with_mul(*scaled));
  CHECK(count_calls(scaled, "aten::add.Tensor") == 1);
}

void docs_writing_transformations::check_relu_after_conv() {
  torch::nn::Conv2d conv(torch::nn::Conv2dOptions(3, 4, 3));
  at::Tensor x = torch::randn({1, 3, 8, 8});
  fx::GraphModule gm = fx::symbolic_trace(conv, x);
  CHECK(relu_after_conv(*gm));
  gm->recompile();
  std::vector<fx::Node*> relus =
      gm->graph().find_nodes(fx::Opcode::kCallFunction, fx::op("aten::relu"));
  REQUIRE(relus.size() == 1);
  fx::Node* conv_node = relus[0]->args()[0].to_node();
  CHECK(conv_node->target() == fx::op("aten::conv2d"));
  CHECK(conv_node->users().size() == 1);  // only the relu reads it now
  CHECK(gm->graph().output_node()->args()[0].to_node() == relus[0]);
  CHECK(torch::equal(gm(x).toTensor(), torch::relu(conv(x))));
}

void docs_writing_transformations::check_rewrite_pattern() {
  auto fn = [](at::Tensor x, at::Tensor b) { return torch::relu(x + b) * x; };
  at::Tensor x = torch::randn({4, 5});
  at::Tensor b = torch::randn({5});
  fx::GraphModule gm = fx::symbolic_trace(fn, x, b);
  CHECK(relu_as_clamp(*gm) == 1);
  CHECK(count_calls(gm, "aten::relu") == 0);
  CHECK(count_calls(gm, "aten::clamp_min") == 1);
  CHECK(torch::equal(gm(x, b).toTensor(), fn(x, b)));
}

// --- docs/training.md ------------------------------------------------------

void docs_training::check_qat() {
  torch::AutoGradMode grad(true);  // the checks run under NoGradGuard
  torch::manual_seed(0);
  Classifier model;
  std::vector<std::pair<at::Tensor, at::Tensor>> batches;
  for (int i = 0; i < 6; ++i) {
    batches.emplace_back(torch::randn({5, 8}), torch::randint(3, {5}));
  }
  fx::GraphModule int8 = quantization_aware(model, batches);
  CHECK(fx::summarize_quantized(int8).quantized_ops >= 2);
  model->eval();
  torch::NoGradGuard no_grad;
  const at::Tensor x = batches[0].first;
  CHECK(int8(x).toTensor().sizes() == model->forward(x).sizes());
  fx::set_quantized_engine("onednn");
}

void docs_training::check_fine_tune() {
  torch::AutoGradMode grad(true);  // the checks run under NoGradGuard
  auto make = [] {
    torch::manual_seed(0);
    return Classifier();
  };
  Classifier traced = make();
  Classifier eager = make();
  std::vector<std::pair<at::Tensor, at::Tensor>> batches;
  for (int i = 0; i < 4; ++i) {
    batches.emplace_back(torch::randn({5, 8}), torch::randint(3, {5}));
  }
  fine_tune(traced, batches);
  eager->train();
  torch::optim::SGD optimizer(eager->parameters(),
                              torch::optim::SGDOptions(0.01).momentum(0.9));
  for (const auto& [x, target] : batches) {
    optimizer.zero_grad();
    torch::nn::functional::cross_entropy(eager->forward(x), target).backward();
    optimizer.step();
  }
  auto a = traced->named_parameters();
  auto b = eager->named_parameters();
  REQUIRE(a.size() == b.size());
  for (const auto& item : a) {
    INFO(item.key());
    CHECK(torch::equal(item.value(), b[item.key()]));
  }
  auto buffers = eager->named_buffers();
  for (const auto& item : traced->named_buffers()) {
    INFO(item.key());
    CHECK(torch::equal(item.value(), buffers[item.key()]));
  }
  CHECK_FALSE(torch::equal(a["fc1.weight"], make()->fc1->weight));  // it trained
}

namespace {

// conv, relu, conv, conv, silu.
struct ThreeConvsImpl : torch::nn::Module {
  torch::nn::Conv2d a{register_module("a", torch::nn::Conv2d(3, 4, 3))};
  torch::nn::Conv2d b{register_module("b", torch::nn::Conv2d(4, 4, 3))};
  torch::nn::Conv2d c{register_module("c", torch::nn::Conv2d(4, 2, 3))};
  at::Tensor forward(at::Tensor x) {
    return torch::silu(c(b(torch::relu(a(x)))));
  }
};
TORCH_MODULE(ThreeConvs);

}  // namespace

// --- docs/onnx.md ----------------------------------------------------------

void docs_onnx::check_export_onnx() {
  export_onnx();  // in the test's own temporary directory
  std::ifstream in("conv.onnx", std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  CHECK(bytes.str().size() > 8 * 3 * 3 * 3 * sizeof(float));  // the weights
  CHECK(bytes.str().find("Conv") != std::string::npos);
}

namespace {

struct RunningSumImpl : torch::nn::Module {
  at::Tensor forward(at::Tensor x) { return torch::cumsum(x, 1); }
};
TORCH_MODULE(RunningSum);

}  // namespace

void docs_onnx::check_cumsum_mapping() {
  RunningSum model;
  model->eval();
  fx::GraphModule gm = fx::symbolic_trace(model, torch::randn({2, 5}));
  CHECK_THROWS_WITH(fx::to_onnx_string(*gm), Catch::Contains("aten::cumsum"));
  register_cumsum();
  CHECK(fx::to_onnx_string(*gm).find("CumSum") != std::string::npos);
}

void docs_writing_transformations::check_conv_activations() {
  ThreeConvs net;
  net->eval();
  fx::GraphModule gm = fx::symbolic_trace(net, torch::randn({1, 3, 12, 12}));
  std::vector<std::string> found = conv_activations(*gm);
  REQUIRE(found.size() == 2);
  CHECK(found[0].find("+relu") != std::string::npos);
  CHECK(found[1].find("+silu") != std::string::npos);
}

void docs_writing_transformations::check_decompose_relu() {
  auto fn = [](at::Tensor x) { return torch::relu(x) + 1; };
  at::Tensor x = torch::randn({2, 3});
  fx::GraphModule gm = fx::symbolic_trace(fn, x);
  fx::GraphModule decomposed = decompose_relu(gm);
  check_output(decomposed->graph().to_string(), output_decomposed_graph);
  CHECK(count_calls(gm, "aten::relu") == 1);  // left as it was
  CHECK(torch::equal(decomposed(x).toTensor(), fn(x)));
}

void docs_writing_transformations::check_node_timer() {
  Traced t = trace_zoo("lenet");
  std::vector<std::pair<std::string, double>> times = time_nodes(t.gm, t.x);
  std::set<std::string> timed;
  for (const auto& [name, seconds] : times) {
    CHECK(seconds >= 0);
    timed.insert(name);
  }
  std::set<std::string> nodes;
  for (fx::Node* node : t.gm->graph().nodes()) nodes.insert(node->name());
  CHECK(timed == nodes);
  CHECK(times.size() == nodes.size());
  for (size_t i = 1; i < times.size(); ++i) {
    CHECK(times[i - 1].second >= times[i].second);
  }
}

void docs_writing_transformations::check_shape_prop() {
  fx::GraphModule gm =
      fx::symbolic_trace([](at::Tensor x) { return torch::relu(x); },
                         torch::randn({2, 3}));
  check_output(graph_with_shapes(gm, torch::randn({8, 3})), output_shapes);
}

void docs_writing_transformations::check_pass_manager() {
  Traced t = trace_zoo("resnet18");
  fx::GraphModule folded = fold(t.gm);
  CHECK(count_calls(folded, "aten::batch_norm") == 0);
  CHECK(count_calls(t.gm, "aten::batch_norm") == 20);  // gm is left as it was
  CHECK(relative_error(folded(t.x).toTensor(), t.gm(t.x).toTensor()) < 1e-5);
}

void docs_writing_transformations::check_custom_pass() {
  at::Tensor x = torch::randn({2, 3});
  at::Tensor y = torch::randn({2, 3});
  fx::GraphModule gm = fx::symbolic_trace(&add, x, y);
  fx::GraphModule multiplied = multiply_instead(gm);
  CHECK(torch::equal(multiplied(x, y).toTensor(), x * y));
  CHECK(torch::equal(gm(x, y).toTensor(), x + y));
}

void docs_writing_transformations::check_pipeline() {
  Traced t = trace_zoo("resnet18");
  fx::GraphModule lowered = lower_pass_by_pass(t.gm);
  CHECK(count_calls(t.gm, "aten::conv2d") == 20);  // gm is left as it was
  CHECK(count_calls(lowered, "aten::conv2d") == 0);
  // The stem's pooling stays aten's, as the option asks.
  CHECK(count_calls(lowered, "aten::max_pool2d") == 1);
  fx::GraphModule whole(t.gm->copy());
  fx::InferenceOptions options;
  options.lower_pooling = false;
  fx::optimize_for_inference(*whole, options);
  CHECK(lowered->graph().to_string() == whole->graph().to_string());
  CHECK(relative_error(lowered(t.x).toTensor(), t.gm(t.x).toTensor()) < 1e-4);
}

// --- docs/deploying.md -------------------------------------------------------

void docs_deploying::check_lower() {
  Traced t = trace_zoo("resnet18");
  at::Tensor y = run_lowered(t.gm, t.x);
  CHECK(relative_error(y, t.gm(t.x).toTensor()) < 1e-4);
  CHECK(count_calls(t.gm, "aten::conv2d") == 20);  // gm is left as it was
}

void docs_deploying::check_pin() {
  const std::vector<std::vector<int>> where = serve_on_pinned_threads();
  REQUIRE(where.size() == 2);
  CHECK(where[0].size() == 1);
  CHECK(where[1].size() == 1);
  CHECK(where[0] != where[1]);
  // Unpinned again: each thread may run on more than its one CPU.
  for (const std::vector<int>& cpus : fx::intra_op_thread_cpus()) {
    CHECK(cpus.size() > 1);
  }
}

void docs_deploying::check_load_aware() {
  torch::NoGradGuard no_grad;
  models::ZooModel model = models::make_zoo_model("resnet18");
  fx::GraphModule lowered = models::trace_zoo_model(model);
  fx::optimize_for_inference(*lowered);
  const at::Tensor x = model.example_inputs[0].toTensor();
  const int before = at::get_num_threads();
  const int on_fewer = serve_load_aware(lowered, {x, x, x});
  // However busy the machine, the caller's thread count is as it was.
  CHECK(at::get_num_threads() == before);
  CHECK(on_fewer >= 0);
  CHECK(on_fewer <= 3);
}

void docs_deploying::check_quantize() {
  Traced t = trace_zoo("lenet");
  std::vector<at::Tensor> calibration;
  for (int i = 0; i < 4; ++i) calibration.push_back(torch::randn({2, 1, 32, 32}));
  fx::GraphModule int8 = quantize(t.gm, calibration);
  CHECK(fx::summarize_quantized(int8).quantized_ops > 0);
  at::Tensor reference = t.gm(t.x).toTensor();
  at::Tensor error = int8(t.x).toTensor() - reference;
  double sqnr = 10 * std::log10(reference.pow(2).sum().item<double>() /
                                error.pow(2).sum().item<double>());
  CHECK(sqnr > 20);
}

// --- docs/scheduling.md ------------------------------------------------------

void docs_scheduling::check_pipeline() {
  models::ZooModel model = models::make_zoo_model("lenet");
  fx::GraphModule gm = fx::symbolic_trace(model.module, model.forward,
                                          {torch::randn({1, 1, 32, 32})});
  fx::Pipeline p = split_in_two(gm);
  REQUIRE(p.stages.size() == 2);
  const std::string master = "127.0.0.1:" + std::to_string(fx::free_local_port());
  std::exception_ptr served;
  std::thread host_b([&] {
    try {
      serve_stage_1(master);
    } catch (...) {
      served = std::current_exception();
    }
  });
  at::Tensor batch = torch::randn({4, 1, 32, 32});
  at::Tensor y;
  try {
    y = drive(p, master, batch);
  } catch (...) {
    host_b.join();
    throw;
  }
  host_b.join();
  if (served) std::rethrow_exception(served);
  std::vector<at::Tensor> one_by_one;
  for (int64_t i = 0; i < 4; ++i) {
    one_by_one.push_back(gm(batch.narrow(0, i, 1)).toTensor());
  }
  CHECK(torch::equal(y, torch::cat(one_by_one)));
}

void docs_scheduling::check_branches() {
  Traced t = trace_zoo("unet");
  fx::GraphModule lowered = t.gm;
  fx::optimize_for_inference(*lowered);
  at::Tensor y = run_branches_at_once(lowered, t.x);
  CHECK(relative_error(y, lowered(t.x).toTensor()) < 1e-5);
}

// --- docs/generated_cpp.md ---------------------------------------------------

void docs_generated_cpp::check_generated_class() {
  models::ZooModel model = models::make_zoo_model("resnet18");
  at::Tensor x = model.example_inputs[0].toTensor();
  at::Tensor y = run_generated(*model.module, x);
  CHECK(relative_error(y, model.forward({x}).toTensor()) < 1e-4);
}

// --- docs/torchscript.md -----------------------------------------------------

void docs_exported_programs::check_run_exported_program() {
  torch::NoGradGuard no_grad;
  const std::string dir = testdata::exported_programs("docs_pt2", {"cnn"});
  // cnn_io.pt: the input, then the output the program gave in Python.
  std::ifstream in(dir + "/cnn_io.pt", std::ios::binary);
  std::vector<char> bytes{std::istreambuf_iterator<char>(in),
                          std::istreambuf_iterator<char>()};
  const c10::IValue io = torch::pickle_load(bytes);
  const at::Tensor x = io.toListRef()[0].toTensor();
  const at::Tensor want = io.toListRef()[1].toTensor();
  CHECK(relative_error(run_exported_program(dir + "/cnn.pt2", x), want) < 1e-5);
}

void docs_torchscript::check_fold_torchscript_file() {
  Traced t = trace_zoo("resnet18");
  fx::to_torchscript(t.gm).save(testdata::test_file("resnet18.pt"));
  fold_torchscript_file(testdata::test_file("resnet18.pt"), testdata::test_file("resnet18_folded.pt"));
  torch::jit::Module folded = torch::jit::load(testdata::test_file("resnet18_folded.pt"));
  at::Tensor y = folded.forward({t.x}).toTensor();
  CHECK(relative_error(y, t.model.forward({t.x}).toTensor()) < 1e-4);
  fx::GraphModule imported = fx::symbolic_trace(folded, {t.x});
  CHECK(count_calls(imported, "aten::batch_norm") == 0);
}
