#include "scheduling/pipeline.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "fx/fx.h"
#include "fx/ir/errors.h"
#include "models/zoo.h"
#include "testdata/test_helpers.h"
#include "third_party/catch.h"

namespace fx {
namespace {

using testdata::trace_function;

PipelineOptions with_stages(int64_t stages) {
  PipelineOptions options;
  options.stages = stages;
  return options;
}

PipelineOptions at_points(std::vector<std::string> points) {
  PipelineOptions options;
  options.split_points = std::move(points);
  return options;
}

struct Traced {
  models::ZooModel model;
  GraphModule module;
};

Traced trace_zoo(const std::string& name) {
  models::ZooModel model = models::make_zoo_model(name);
  model.module->eval();
  GraphModule gm = models::trace_zoo_model(model);
  return {std::move(model), gm};
}

std::vector<std::string> placeholder_names(const GraphModule& gm) {
  std::vector<std::string> names;
  for (Node* p : gm->graph().placeholders()) names.push_back(p->name());
  return names;
}

TEST_CASE("ResNet-18 in 2 and 3 stages computes bitwise what the graph does") {
  Traced t = trace_zoo("resnet18");
  at::Tensor expected = t.module->forward(t.model.example_inputs).toTensor();
  for (int64_t stages : {2, 3}) {
    Pipeline p = split_pipeline(t.module, with_stages(stages));
    REQUIRE(p.stages.size() == static_cast<size_t>(stages));
    at::Tensor y = run_pipeline_locally(p, t.model.example_inputs).toTensor();
    CHECK(torch::equal(y, expected));
    // Balanced by the cost model: no stage far above its share.
    double total = 0;
    double slowest = 0;
    int64_t nodes = 0;
    for (const PipelineStage& stage : p.stages) {
      total += stage.compute_seconds;
      slowest = std::max(slowest, stage.compute_seconds);
      nodes += stage.nodes;
      CHECK(stage.nodes > 0);
    }
    CHECK(slowest < 1.25 * total / static_cast<double>(stages));
    // Every call node runs in exactly one stage.
    int64_t calls = 0;
    for (Node* n : t.module->graph().nodes()) {
      if (n->op() != Opcode::kPlaceholder && n->op() != Opcode::kGetAttr &&
          n->op() != Opcode::kOutput) {
        ++calls;
      }
    }
    CHECK(nodes == calls);
    // Each stage takes what the one before sends.
    for (size_t s = 1; s < p.stages.size(); ++s) {
      CHECK(p.stages[s].inputs == p.stages[s - 1].outputs);
      CHECK((p.stages[s].input_meta == p.stages[s - 1].output_meta));
      CHECK(placeholder_names(p.stages[s].module) == p.stages[s].inputs);
    }
    CHECK(placeholder_names(p.stages[0].module) ==
          placeholder_names(t.module));
  }
}

TEST_CASE("stages hold only the parameters they use, shared with the model") {
  Traced t = trace_zoo("resnet18");
  Pipeline p = split_pipeline(t.module, at_points({"layer3"}));
  REQUIRE(p.stages.size() == 2);
  bool first_has_fc = false;
  for (const auto& item : p.stages[0].module->named_parameters()) {
    if (item.key().rfind("fc.", 0) == 0) first_has_fc = true;
  }
  CHECK_FALSE(first_has_fc);
  at::Tensor fc = p.stages[1].module->fetch_attr("fc.weight");
  CHECK(fc.data_ptr() == t.module->fetch_attr("fc.weight").data_ptr());
  // The cut goes before the first node traced inside layer3.
  const Node* first = nullptr;
  for (Node* n : p.stages[1].module->graph().nodes()) {
    if (n->op() == Opcode::kCallFunction) {
      first = n;
      break;
    }
  }
  REQUIRE(first != nullptr);
  const std::string* path = first->meta().get(kModulePath);
  REQUIRE(path != nullptr);
  CHECK(path->rfind("layer3", 0) == 0);
}

TEST_CASE("a split point naming a node cuts right after it") {
  at::Tensor x = torch::randn({4, 8});
  GraphModule gm = trace_function(
      [](at::Tensor x) {
        at::Tensor a = torch::relu(x);
        at::Tensor b = torch::sigmoid(a);
        at::Tensor c = torch::tanh(b);
        return c + x;  // the input crosses both cuts
      },
      {x});
  Pipeline p = split_pipeline(gm, at_points({"relu", "sigmoid"}));
  REQUIRE(p.stages.size() == 3);
  CHECK(p.stages[0].nodes == 1);
  CHECK(p.stages[1].nodes == 1);
  CHECK(p.stages[0].outputs == std::vector<std::string>{"x", "relu"});
  CHECK(p.stages[1].outputs == std::vector<std::string>{"x", "sigmoid"});
  CHECK(p.stages[1].module->graph().to_string() ==
        "graph():\n"
        "    %x : [#users=1] = placeholder[target=x]\n"
        "    %relu : [#users=1] = placeholder[target=relu]\n"
        "    %sigmoid : [#users=1] = call_function[target=aten::sigmoid](args "
        "= (%relu,), kwargs = {})\n"
        "    return (x, sigmoid)");
  CHECK(torch::equal(run_pipeline_locally(p, {x}).toTensor(),
                     gm(x).toTensor()));
}

TEST_CASE("bad split points and impossible cuts are named errors") {
  at::Tensor x = torch::randn({4, 8});
  GraphModule gm = trace_function(
      [](at::Tensor x) {
        std::vector<at::Tensor> rows = x.unbind(0);
        at::Tensor a = torch::relu(rows[0]);
        return a + rows[1];
      },
      {x});
  std::string text = gm->graph().to_string();
  CHECK_THROWS_WITH(split_pipeline(gm, at_points({"nowhere"})),
                    Catch::Contains("'nowhere' names neither a call node"));
  // After unbind, its list is live: only tensors may cross.
  CHECK_THROWS_WITH(split_pipeline(gm, at_points({"unbind"})),
                    Catch::Contains("%unbind would cross it"));
  CHECK_THROWS_WITH(split_pipeline(gm, with_stages(50)),
                    Catch::Contains("ask for fewer stages"));
  CHECK_THROWS_WITH(split_pipeline(gm, with_stages(0)),
                    Catch::Contains("stages = 0"));
  CHECK_THROWS_WITH(
      split_pipeline(gm, at_points({"relu", "getitem"})),
      Catch::Contains("does not come after the one before it"));
  // Nothing was changed.
  CHECK(gm->graph().to_string() == text);
}

// Attention over [B, T, 8] that reads its sizes late (a reshape to B * T
// and back), traced with B and T dynamic.
GraphModule dynamic_attention() {
  TraceOptions options;
  options.dynamic = {{.input = 0, .dim = 0, .symbol = "B"},
                     {.input = 0, .dim = 1, .symbol = "T", .max = 64}};
  return symbolic_trace(
      [](at::Tensor x) {
        const int64_t B = x.size(0), T = x.size(1);
        at::Tensor q = torch::tanh(x * 2);
        at::Tensor att = torch::softmax(q.matmul(q.transpose(1, 2)) / 2, -1);
        at::Tensor y = att.matmul(q) + x;
        at::Tensor flat = torch::relu(y.reshape({B * T, 8}));
        return flat.view({B, T, 8}).sum(-1);
      },
      std::vector<c10::IValue>{torch::randn({2, 6, 8})}, options);
}

TEST_CASE("a graph with dynamic dimensions splits into stages that run every shape") {
  GraphModule gm = dynamic_attention();
  for (const PipelineOptions& options :
       {with_stages(2), with_stages(3), at_points({"softmax"})}) {
    Pipeline p = split_pipeline(gm, options);
    const int64_t stages = static_cast<int64_t>(p.stages.size());
    CHECK(stages == (options.split_points.empty() ? options.stages : 2));
    CHECK_THAT(format_pipeline(p), Catch::Contains("[B, T, 8]"));
    if (!options.split_points.empty()) {
      // The reshape and view past the cut read B and T again from what the
      // stage receives.
      const std::string last = p.stages.back().module->graph().to_string();
      CHECK_THAT(last, Catch::Contains("call_function[target=sym_size]"));
      CHECK_THAT(last, Catch::Contains("aten::view"));
    }
    for (auto [b, t] : {std::pair<int64_t, int64_t>{2, 6}, {1, 5}, {3, 12}, {4, 1}}) {
      INFO(stages << " stages at B=" << b << ", T=" << t);
      at::Tensor x = torch::randn({b, t, 8});
      CHECK(torch::equal(run_pipeline_locally(p, {x}).toTensor(),
                         gm->forward({x}).toTensor()));
    }
    // Stage 0 keeps the graph's guards.
    CHECK_THROWS_WITH(run_pipeline_locally(p, {torch::randn({2, 65, 8})}),
                      Catch::Contains("T <= 64"));
  }
  // After the reshape to B * T, nothing crossing has a dimension B or T to
  // read the view's sizes from again.
  CHECK_THROWS_WITH(split_pipeline(gm, at_points({"relu"})),
                    Catch::Contains("no tensor crossing it has a dimension of size B"));
  // An output whose size is no function of the symbols (B * (T + 1)):
  // the last stage could not size what it sends back.
  TraceOptions options;
  options.dynamic = {{.input = 0, .dim = 0, .symbol = "B"},
                     {.input = 0, .dim = 1, .symbol = "T"}};
  GraphModule odd = symbolic_trace(
      [](at::Tensor x) {
        return torch::cat({torch::relu(x), x.narrow(1, 0, 1)}, 1).flatten();
      },
      std::vector<c10::IValue>{torch::randn({2, 6})}, options);
  CHECK_THROWS_WITH(split_pipeline(odd, with_stages(2)),
                    Catch::Contains("the graph returns %flatten f32[?]"));
}

TEST_CASE("a cut is refused where a later in-place write would be lost") {
  at::Tensor x = torch::randn({4, 8});
  GraphModule gm = trace_function(
      [](at::Tensor x) {
        at::Tensor y = x * 2;
        at::Tensor v = y.view({32});
        at::Tensor s = torch::sigmoid(y);
        v.relu_();  // writes y through its view
        return s + y;
      },
      {x});
  // Between sigmoid and relu_, y and its view v both cross.
  CHECK_THROWS_WITH(split_pipeline(gm, at_points({"sigmoid"})),
                    Catch::Contains("sharing storage"));
  // The balanced split avoids that cut and stays exact.
  Pipeline p = split_pipeline(gm, with_stages(2));
  CHECK(torch::equal(run_pipeline_locally(p, {x}).toTensor(),
                     gm(x).toTensor()));
}

TEST_CASE("lowered or quantized modules are refused, naming the way out") {
  Traced t = trace_zoo("mlp");
  Pipeline p = split_pipeline(t.module, with_stages(2));
  CHECK(p.stages.size() == 2);
  GraphModule with_steps = t.module;
  // A module with an init step (as constant folding makes).
  auto graph = std::make_shared<Graph>();
  Node* w = graph->get_attr(
      t.module->named_parameters().begin()->key());
  graph->output(Argument::tuple({graph->call_function(op("aten::neg"), {w})}));
  Attributes attributes;
  for (const auto& item : t.module->named_parameters()) {
    attributes.parameters.emplace(item.key(), item.value());
  }
  std::vector<GraphModuleImpl::InitStep> steps{{graph, {"negated"}}};
  auto folded = std::make_shared<GraphModuleImpl>(
      t.module->graph().clone(), attributes, steps);
  CHECK_THROWS_WITH(split_pipeline(GraphModule(folded), with_stages(2)),
                    Catch::Contains("split the traced graph first"));
}

TEST_CASE("a stage saved and loaded runs as it did") {
  Traced t = trace_zoo("resnet18");
  Pipeline p = split_pipeline(t.module, with_stages(2));
  c10::IValue middle = p.stages[0].module->forward(t.model.example_inputs);
  std::vector<c10::IValue> inputs;
  if (middle.isTuple()) {
    for (const c10::IValue& v : middle.toTupleRef().elements()) {
      inputs.push_back(v);
    }
  } else {
    inputs.push_back(middle);
  }
  const std::string path = "/tmp/fx_pipeline_test_stage_1.fx";
  save(p.stages[1].module, path);
  GraphModule loaded = load(path);
  std::remove(path.c_str());
  CHECK(torch::equal(loaded->forward(inputs).toTensor(),
                     p.stages[1].module->forward(inputs).toTensor()));
  // The metadata the runtime allocates buffers from survives the file.
  const TensorMeta* meta =
      loaded->graph().placeholders()[0]->meta().get(kTensorMeta);
  REQUIRE(meta != nullptr);
  CHECK((*meta == p.stages[1].input_meta[0]));
}

TEST_CASE("the prediction: GPipe over micro-batches, and the plan's text") {
  Traced t = trace_zoo("resnet50");
  Pipeline p = split_pipeline(t.module, with_stages(2));
  PipelinePrediction one = predict_pipeline(p, 1, Link{});
  PipelinePrediction eight = predict_pipeline(p, 8, Link{});
  REQUIRE(eight.stage_seconds.size() == 2);
  // One micro-batch gains nothing; eight nearly double the throughput.
  CHECK(one.speedup() < 1.0);
  CHECK(eight.speedup() > 1.6);
  CHECK(eight.speedup() < 2.0);
  // A stream keeps the pipeline full: each batch takes 8 of the slowest
  // stage, less than a batch alone (which fills and drains).
  const double slowest =
      std::max(eight.stage_seconds[0], eight.stage_seconds[1]);
  CHECK(eight.stream_batch_seconds == Approx(8 * slowest));
  CHECK(eight.stream_batch_seconds < eight.batch_seconds);
  // A slow link costs time.
  PipelinePrediction slow = predict_pipeline(p, 8, Link{1e6, 1e-3});
  CHECK(slow.batch_seconds > eight.batch_seconds);
  // Deterministic text.
  std::string text = format_pipeline(p);
  CHECK(text == format_pipeline(split_pipeline(t.module, with_stages(2))));
  CHECK(text.find("stage 1: ") != std::string::npos);
  CHECK(text.find("Float[1, ") != std::string::npos);
}

TEST_CASE("a stage whose weights exceed the cache fetches them from memory") {
  // ResNet-18's 46.8 MB of weights, 33.6 of them in layer4: with a 30 MB
  // cache the stage holding layer4 reads its weights from memory on every
  // run, the other keeps its weights in cache.
  Traced t = trace_zoo("resnet18");
  PipelineOptions options = with_stages(2);
  const Pipeline in_cache = split_pipeline(t.module, options);
  options.machine.cache_bytes = 30e6;
  const Pipeline small_cache = split_pipeline(t.module, options);
  std::vector<WeightsIn> where;
  for (const PipelineStage& stage : small_cache.stages) {
    const CostReport report = estimate_cost(stage.module->graph());
    where.push_back(weights_in(report.total.weight_bytes, options.machine));
    CHECK(stage.compute_seconds ==
          Approx(estimated_seconds(report, options.machine)));
  }
  REQUIRE(where.size() == 2);
  CHECK((where[0] == WeightsIn::kCache && where[1] == WeightsIn::kMemory));
  // The stage with layer4 costs more than in cache, so the cut moves later.
  CHECK(small_cache.stages[0].nodes > in_cache.stages[0].nodes);
  for (const Pipeline* p : {&in_cache, &small_cache}) {
    CHECK(torch::equal(
        run_pipeline_locally(*p, t.model.example_inputs).toTensor(),
        t.module->forward(t.model.example_inputs).toTensor()));
  }
}

TEST_CASE("rebalancing by measured stage times moves the cut") {
  Traced t = trace_zoo("resnet18");
  PipelineOptions options = with_stages(2);
  options.machine.cache_bytes = 30e6;
  const Pipeline first = split_pipeline(t.module, options);
  // Stage 0 measured twice as slow as predicted: the cut moves earlier.
  const Pipeline second = rebalance_pipeline(
      t.module, first,
      {2 * first.stages[0].compute_seconds, first.stages[1].compute_seconds},
      options);
  CHECK(second.stages[0].nodes < first.stages[0].nodes);
  // Measured as predicted: the same cuts.
  const Pipeline same = rebalance_pipeline(
      t.module, first,
      {first.stages[0].compute_seconds, first.stages[1].compute_seconds},
      options);
  CHECK(same.stages[0].nodes == first.stages[0].nodes);
  CHECK_THROWS_WITH(rebalance_pipeline(t.module, first, {1.0}, options),
                    Catch::Contains("1 measured times for 2 stages"));
}

// A stage's "measured" seconds: its call nodes, those named conv* at
// `conv` seconds each and the rest at 1 (the cost model prices them
// otherwise, so the first cut is off balance).
std::vector<double> node_count_seconds(const Pipeline& p, double conv) {
  std::vector<double> seconds;
  for (const PipelineStage& stage : p.stages) {
    double total = 0;
    for (const std::string& name : stage.node_names) {
      total += name.rfind("conv", 0) == 0 ? conv : 1.0;
    }
    seconds.push_back(total);
  }
  return seconds;
}

double slowest(const std::vector<double>& seconds) {
  return *std::max_element(seconds.begin(), seconds.end());
}

TEST_CASE("tune_pipeline keeps the cut whose slowest stage measured fastest") {
  Traced t = trace_zoo("resnet18");
  const PipelineOptions options = with_stages(2);
  const Pipeline by_cost_model = split_pipeline(t.module, options);
  std::vector<const GraphModuleImpl*> measured_modules;
  auto measure = [&](Pipeline& p) {
    measured_modules.push_back(p.stages[1].module.get());
    return node_count_seconds(p, 20.0);
  };
  const TunedPipeline tuned = tune_pipeline(t.module, options, measure, 3);
  REQUIRE(tuned.measured.size() >= 2);
  CHECK(measured_modules.size() == tuned.measured.size());
  CHECK(tuned.measured[0] == node_count_seconds(by_cost_model, 20.0));
  CHECK(tuned.stage_seconds == tuned.measured[tuned.kept]);
  CHECK(tuned.stage_seconds == node_count_seconds(tuned.pipeline, 20.0));
  for (const std::vector<double>& seconds : tuned.measured) {
    CHECK(slowest(tuned.stage_seconds) <= slowest(seconds));
  }
  CHECK(slowest(tuned.stage_seconds) < slowest(tuned.measured[0]));
  // As balanced as a cut by the true node times themselves.
  PipelineOptions by_truth = options;
  by_truth.node_seconds = [](const Node& n) {
    return n.name().rfind("conv", 0) == 0 ? 20.0 : 1.0;
  };
  const double best =
      slowest(node_count_seconds(split_pipeline(t.module, by_truth), 20.0));
  INFO("tuned " << slowest(tuned.stage_seconds) << ", best " << best);
  CHECK(slowest(tuned.stage_seconds) <= 1.05 * best);
  // The cut kept is the one measured, as `measure` left it.
  CHECK(std::count(measured_modules.begin(), measured_modules.end(),
                   tuned.pipeline.stages[1].module.get()) == 1);
  CHECK(torch::equal(
      run_pipeline_locally(tuned.pipeline, t.model.example_inputs).toTensor(),
      t.module->forward(t.model.example_inputs).toTensor()));

  SECTION("a rebalance that measures slower is not kept") {
    int calls = 0;
    const TunedPipeline first_kept = tune_pipeline(
        t.module, options,
        [&](Pipeline&) {
          ++calls;
          return calls == 1 ? std::vector<double>{1.0, 2.0}
                            : std::vector<double>{3.0, 0.5};
        },
        3);
    CHECK(first_kept.kept == 0);
    CHECK(first_kept.stage_seconds == std::vector<double>{1.0, 2.0});
    CHECK(first_kept.pipeline.stages[0].node_names ==
          by_cost_model.stages[0].node_names);
  }
  SECTION("no rounds: the cost model's cut, measured once") {
    const TunedPipeline once = tune_pipeline(t.module, options, measure, 0);
    CHECK(once.measured.size() == 1);
    CHECK(once.kept == 0);
    CHECK(once.pipeline.stages[0].node_names ==
          by_cost_model.stages[0].node_names);
  }
  SECTION("measured as predicted: the same cut again, so it stops") {
    int calls = 0;
    const TunedPipeline stopped = tune_pipeline(
        t.module, options,
        [&](Pipeline& p) {
          ++calls;
          return std::vector<double>{p.stages[0].compute_seconds,
                                     p.stages[1].compute_seconds};
        },
        3);
    CHECK(calls == 1);
    CHECK(stopped.measured.size() == 1);
  }
  SECTION("bad measurements are refused by name") {
    CHECK_THROWS_WITH(
        tune_pipeline(t.module, options,
                      [](Pipeline&) { return std::vector<double>{1.0}; }),
        Catch::Contains("measure returned 1 times for 2 stages"));
    CHECK_THROWS_WITH(
        tune_pipeline(t.module, options,
                      [](Pipeline&) { return std::vector<double>{1.0, 0.0}; }),
        Catch::Contains("0 seconds for stage 1"));
    CHECK_THROWS_WITH(
        tune_pipeline(t.module, options,
                      [](Pipeline&) {
                        return std::vector<double>{std::nan(""), 1.0};
                      }),
        Catch::Contains("nan seconds for stage 0"));
    CHECK_THROWS_WITH(tune_pipeline(t.module, options, measure, -1),
                      Catch::Contains("-1 rounds"));
  }
}

TEST_CASE("time_stages_at_once: every stage timed while the others run") {
  Traced t = trace_zoo("resnet18");
  const Pipeline p = split_pipeline(t.module, with_stages(3));
  const std::vector<double> seconds =
      time_stages_at_once(p, t.model.example_inputs, 3);
  REQUIRE(seconds.size() == 3);
  for (double s : seconds) {
    CHECK(s > 0);
    CHECK(s < 10.0);
  }
  // Grad mode carries into the stages' threads: no autograd graph here.
  {
    torch::NoGradGuard no_grad;
    CHECK(time_stages_at_once(p, t.model.example_inputs, 1, 2).size() == 3);
  }
  CHECK_THROWS_WITH(time_stages_at_once(p, t.model.example_inputs, 0),
                    Catch::Contains("0 rounds and 1 threads per stage"));
  CHECK_THROWS_WITH(time_stages_at_once(p, t.model.example_inputs, 2, 0),
                    Catch::Contains("each must be at least 1"));
  // A stage that throws: its error, after every thread has stopped.
  CHECK_THROWS(time_stages_at_once(p, {torch::zeros({1, 5})}, 2));
}

TEST_CASE("balancing by measured node times") {
  Traced t = trace_zoo("resnet18");
  std::map<std::string, double> seconds =
      profile_node_seconds(t.module, t.model.example_inputs, 2);
  CHECK(seconds.size() > 50);
  PipelineOptions options;
  options.node_seconds = [&](const Node& n) {
    auto it = seconds.find(n.name());
    return it == seconds.end() ? 0.0 : it->second;
  };
  Pipeline p = split_pipeline(t.module, options);
  double total = 0;
  for (const auto& [name, s] : seconds) total += s;
  CHECK(std::max(p.stages[0].compute_seconds, p.stages[1].compute_seconds) <
        0.75 * total);
  CHECK(torch::equal(run_pipeline_locally(p, t.model.example_inputs).toTensor(),
                     t.module->forward(t.model.example_inputs).toTensor()));
}

}  // namespace
}  // namespace fx
