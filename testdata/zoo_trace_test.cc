// Traces every zoo model and checks the GraphModule against eager.
#include <c10/core/CPUAllocator.h>
#include <torch/torch.h>

#include "fx/fx.h"
#include "fx/ir/libtorch_compat.h"
#include "interpreter/interpreter.h"
#include "models/data_dependent.h"
#include "models/zoo.h"
#include "testdata/zoo_testing.h"
#include "third_party/catch.h"

namespace {

using models::make_zoo_model;
using models::ZooModel;

// Checks, node by node, that the metadata recorded while tracing is the
// metadata of the value computed at run time.
class MetaChecker : public fx::Interpreter {
 public:
  using fx::Interpreter::Interpreter;
  c10::IValue run_node(const fx::Node& node) override {
    c10::IValue value = fx::Interpreter::run_node(node);
    if (const fx::TensorMeta* tm = node.meta().get(fx::kTensorMeta)) {
      ++checked;
      INFO(node.format_node());
      REQUIRE(value.isTensor());
      const at::Tensor& t = value.toTensor();
      CHECK(tm->sizes == t.sizes().vec());
      CHECK(tm->dtype == t.scalar_type());
      CHECK(tm->device == t.device());
      // Strides matter only where they are observable: dense layouts.
      if (t.is_non_overlapping_and_dense()) {
        CHECK(tm->strides == t.strides().vec());
      }
    }
    return value;
  }
  int checked = 0;
};

TEST_CASE("every traceable zoo model runs as a GraphModule exactly as eager") {
  torch::NoGradGuard no_grad;
  for (const std::string& name : models::traceable_zoo_model_names()) {
    INFO(name);
    ZooModel model = make_zoo_model(name);
    fx::GraphModule gm = models::trace_zoo_model(model);
    gm->graph().lint();
    c10::IValue expected = model.forward(model.example_inputs);
    testdata::check_outputs_equal(gm->forward(model.example_inputs), expected);
    // Twice: values are freed after their last use, nothing is stale.
    testdata::check_outputs_equal(gm->forward(model.example_inputs), expected);
    fx::Interpreter interpreter(gm);
    testdata::check_outputs_equal(interpreter.run(model.example_inputs),
                                  expected);
  }
}

TEST_CASE("tracing is deterministic: the same graph text every time") {
  for (const std::string& name : models::traceable_zoo_model_names()) {
    INFO(name);
    ZooModel a = make_zoo_model(name);
    ZooModel b = make_zoo_model(name);
    CHECK(models::trace_zoo_model(a)->graph().to_string() ==
          models::trace_zoo_model(b)->graph().to_string());
  }
}

TEST_CASE("metadata recorded while tracing matches run time, node by node") {
  torch::NoGradGuard no_grad;
  for (const std::string& name : models::traceable_zoo_model_names()) {
    INFO(name);
    ZooModel model = make_zoo_model(name);
    MetaChecker checker(models::trace_zoo_model(model));
    checker.run(model.example_inputs);
    CHECK(checker.checked > 0);
  }
}

TEST_CASE("no zoo model needs a real kernel to trace") {
  for (const std::string& name : models::traceable_zoo_model_names()) {
    INFO(name);
    ZooModel model = make_zoo_model(name);
    fx::TraceOptions options;
    options.leaf_modules = model.leaf_modules;
    fx::Tracer tracer(options);
    tracer.trace(model.module, model.forward, model.example_inputs);
    CHECK(tracer.stats().real_kernel == 0);
    CHECK(tracer.stats().opaque_calls ==
          static_cast<int64_t>(model.leaf_modules.size()));
  }
}

TEST_CASE("ResNet-50 traces without running a real kernel") {
  ZooModel model = make_zoo_model("resnet50");
  fx::Tracer tracer;
  auto graph = tracer.trace(model.module, model.forward, model.example_inputs);
  const fx::TraceStats& stats = tracer.stats();
  CHECK(stats.real_kernel == 0);
  CHECK(stats.opaque_calls == 0);
  CHECK(stats.nodes == static_cast<int64_t>(graph->size()));
  CHECK(graph->find_nodes(fx::Opcode::kCallFunction, fx::op("aten::conv2d"))
            .size() == 53);
  CHECK(graph->find_nodes(fx::Opcode::kCallFunction,
                          fx::op("aten::batch_norm"))
            .size() == 53);
}

// Records the CPU allocations made while it is installed.
class CountingAllocator : public fx::compat::CpuAllocator {
 public:
  explicit CountingAllocator(c10::Allocator* base) : base_(base) {}
  c10::DataPtr allocate_hook(size_t bytes) const override {
    largest = std::max(largest, bytes);
    total += bytes;
    return base_->allocate(bytes);
  }
  c10::DeleterFnPtr raw_deleter() const override {
    return base_->raw_deleter();
  }
  mutable size_t largest = 0;
  mutable size_t total = 0;

 private:
  c10::Allocator* base_;
};

TEST_CASE("tracing ResNet-50 allocates no activation-sized buffer") {
  ZooModel model = make_zoo_model("resnet50");
  c10::Allocator* base = c10::GetCPUAllocator();
  CountingAllocator counting(base);
  constexpr uint8_t kPriority = 255;
  c10::SetCPUAllocator(&counting, kPriority);
  std::unique_ptr<fx::Graph> graph;
  try {
    fx::Tracer tracer;
    graph = tracer.trace(model.module, model.forward, model.example_inputs);
  } catch (...) {
    c10::SetCPUAllocator(base, kPriority);
    throw;
  }
  c10::SetCPUAllocator(base, kPriority);
  INFO("largest allocation " << counting.largest << " bytes, total "
                             << counting.total);
  // ResNet-50's smallest activation at 224x224 (1x2048x7x7 floats) is
  // 401 KB, its largest 3.2 MB.
  CHECK(counting.largest < 64 * 1024);
  CHECK(graph->size() > 400);
}

TEST_CASE("data-dependent control flow fails with the op, the place and a way out") {
  ZooModel model = make_zoo_model("data_dependent");
  auto before = model.module->named_parameters();
  std::vector<at::Tensor> copies;
  for (const auto& p : before) copies.push_back(p.value().clone());
  try {
    models::trace_zoo_model(model);
    FAIL("tracing a data-dependent model must fail");
  } catch (const fx::TraceError& e) {
    std::string what = e.what();
    CHECK_THAT(what, Catch::Contains("aten::item"));
    CHECK_THAT(what, Catch::Contains("needs the data of a tensor"));
    CHECK_THAT(what, Catch::Contains("leaf module"));
    CHECK_THAT(what, Catch::Contains("fx::wrap"));
  }
  // The module and the thread are as before.
  size_t i = 0;
  for (const auto& p : model.module->named_parameters()) {
    CHECK(torch::equal(p.value(), copies[i++]));
  }
  CHECK_FALSE(fx::is_tracing());
  CHECK_FALSE(c10::impl::tls_is_dispatch_key_included(
      c10::DispatchKey::DeferredInit));
  // ... and eager still runs.
  CHECK_NOTHROW(model.forward(model.example_inputs));
}

TEST_CASE("the leaf gate is one call_module node and takes both branches") {
  torch::NoGradGuard no_grad;
  ZooModel model = make_zoo_model("data_dependent_leaf");
  fx::GraphModule gm = models::trace_zoo_model(model);
  auto calls = gm->graph().find_nodes(fx::Opcode::kCallModule);
  REQUIRE(calls.size() == 1);
  CHECK(calls[0]->target().str() == "gate");
  CHECK(gm->leaf_module("gate") != nullptr);
  auto x = model.example_inputs[0].toTensor();
  for (double sign : {1.0, -1.0}) {
    auto input = x.abs() * sign + sign;
    CHECK(torch::equal(gm(input).toTensor(),
                       model.forward({input}).toTensor()));
  }
}

}  // namespace
