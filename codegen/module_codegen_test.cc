#include "codegen/module_codegen.h"

#include <cstdio>
#include <fstream>

#include <torch/torch.h>

#include "codegen/generator.h"
#include "codegen/runtime.h"
#include "fx/fx.h"
#include "fx/io/input_spec.h"
#include "passes/pass_manager.h"
#include "testdata/dense_excite_lowered.h"
#include "testdata/mobilenet_v2_chained.h"
#include "testdata/mobilenet_v2_micro_batched.h"
#include "testdata/lenet_generated.h"
#include "lowering/optimize_for_inference.h"
#include "testdata/resnet18_folded.h"
#include "testdata/resnet18_lowered.h"
#include "testdata/codegen_models.h"
#include "testdata/lenet_int8.h"
#include "quantization/numeric_suite.h"
#include "quantization/quantize_fx.h"
#include "testdata/resnet18_split.h"
#include "testdata/control_flow_generated.h"
#include "testdata/scan_generated.h"
#include "testdata/selects_boxes_generated.h"
#include "testdata/two_heads_generated.h"
#include "models/zoo.h"
#include "third_party/catch.h"

namespace {

fx::GraphModule folded_resnet18(const models::ZooModel& model) {
  fx::GraphModule gm =
      fx::symbolic_trace(model.module, model.forward, model.example_inputs);
  return fx::PassManager()
      .add("fuse_conv_bn")
      .add("remove_dropout")
      .add("eliminate_dead_code")
      .run(gm)
      .module;
}

TEST_CASE("ResNet-18 generated at build time matches the GraphModule") {
  torch::NoGradGuard no_grad;
  models::ZooModel model = models::make_zoo_model("resnet18");
  fx::GraphModule gm = folded_resnet18(model);
  testdata::ResNet18Folded generated(*model.module);
  at::Tensor x = model.example_inputs[0].toTensor();
  at::Tensor ours = generated.forward(x);
  // The same operators on the same tensors: bitwise equal.
  CHECK(torch::equal(ours, gm(x).toTensor()));
  CHECK(torch::allclose(ours, model.forward(model.example_inputs).toTensor(),
                        1e-4, 1e-5));
  // Only the original weights are bound; folded ones are computed.
  const auto& names = testdata::ResNet18Folded::tensor_names();
  CHECK(std::find(names.begin(), names.end(), "bn1.running_var") !=
        names.end());
  CHECK(std::find(names.begin(), names.end(), "conv1.weight") != names.end());

  // New weights: run_init folds them again.
  auto params = model.module->named_parameters();
  params["bn1.weight"].mul_(2);
  generated.run_init();
  fx::GraphModule refolded = folded_resnet18(model);
  CHECK(torch::equal(generated.forward(x), refolded(x).toTensor()));
  CHECK_FALSE(torch::allclose(generated.forward(x), ours));
}

TEST_CASE("ResNet-18 lowered to oneDNN and generated matches the lowered GraphModule") {
  torch::NoGradGuard no_grad;
  models::ZooModel model = models::make_zoo_model("resnet18");
  fx::GraphModule gm = models::trace_zoo_model(model);
  fx::optimize_for_inference(*gm);
  testdata::ResNet18Lowered generated(*model.module);
  at::Tensor x = model.example_inputs[0].toTensor();
  at::Tensor ours = generated.forward(x);
  // The same fx_onednn operators on the same packed weights.
  CHECK(torch::equal(ours, gm(x).toTensor()));
  CHECK(torch::allclose(ours, model.forward(model.example_inputs).toTensor(),
                        1e-4, 1e-5));
  // The code calls the lowered operators through the dispatcher.
  const std::string code = gm->code();
  CHECK_THAT(code, Catch::Contains("findSchemaOrThrow(\"fx_onednn::conv\", \"\")"));
}

TEST_CASE("lowered operators that take lists of tensors generate and run") {
  // Squeeze-excitation, a dense block's concatenation buffer (pieces of one
  // tensor each), an LSTM's states and weights: lists in the boxed calls.
  torch::NoGradGuard no_grad;
  fx::codegen::Model model = testdata::dense_excite_model();
  const at::Tensor x = torch::randn({1, 3, 8, 8});
  fx::GraphModule gm = fx::symbolic_trace(model.module, model.forward, {x});
  const fx::InferenceReport report = fx::optimize_for_inference(*gm);
  REQUIRE(report.squeeze_excites == 1);
  REQUIRE(report.concatenations == 3);
  REQUIRE(report.recurrent == 1);
  testdata::DenseExciteLowered generated(*model.module);
  const at::Tensor ours = generated.forward(x);
  CHECK(torch::equal(ours, gm(x).toTensor()));
  CHECK(torch::allclose(ours, model.forward({x}).toTensor(), 1e-4, 1e-5));
}

TEST_CASE("a chained graph generates C++ that runs as the GraphModule does") {
  // MobileNetV2 lowered at batch 1: its convolutions one conv_chain call.
  torch::NoGradGuard no_grad;
  fx::codegen::Model model = testdata::mobilenet_v2_model();
  torch::manual_seed(5);
  const at::Tensor x = torch::randn({1, 3, 224, 224});
  fx::GraphModule gm = fx::symbolic_trace(model.module, model.forward, {x});
  REQUIRE(fx::optimize_for_inference(*gm).conv_chains == 1);
  testdata::MobileNetV2Chained generated(*model.module);
  const at::Tensor ours = generated.forward(x);
  CHECK(torch::equal(ours, gm(x).toTensor()));
  CHECK(torch::allclose(ours, model.forward({x}).toTensor(), 1e-4, 1e-5));
  CHECK_THAT(gm->code(),
             Catch::Contains("findSchemaOrThrow(\"fx_onednn::conv_chain\", \"\")"));
}

TEST_CASE("a micro-batched graph generates C++ that runs as the GraphModule does") {
  // MobileNetV2 lowered at batch 4: its first layers copied per image, each
  // on a slice of the input's rows, their outputs concatenated.
  torch::NoGradGuard no_grad;
  models::ZooModel model = models::make_zoo_model("mobilenet_v2");
  model.module->eval();
  torch::manual_seed(4);
  const at::Tensor x = torch::randn({4, 3, 224, 224});
  fx::GraphModule gm = fx::symbolic_trace(model.module, model.forward, {x});
  REQUIRE(fx::optimize_for_inference(*gm).micro_batches == 4);
  testdata::MobileNetV2MicroBatched generated(*model.module);
  const at::Tensor ours = generated.forward(x);
  CHECK(torch::equal(ours, gm(x).toTensor()));
  CHECK(torch::allclose(ours, model.forward({x}).toTensor(), 1e-4, 1e-5));
  CHECK_THAT(gm->code(), Catch::Contains("sym_size"));
}

TEST_CASE("LeNet quantized to int8 at build time matches convert_fx's module") {
  torch::NoGradGuard no_grad;
  fx::set_quantized_engine("onednn");
  models::ZooModel model = models::make_zoo_model("lenet");
  fx::GraphModule prepared = fx::prepare_fx(
      models::trace_zoo_model(model), fx::get_default_qconfig_mapping("onednn"));
  for (const auto& batch : testdata::lenet_calibration()) prepared->forward(batch);
  fx::GraphModule int8 = fx::convert_fx(prepared);
  testdata::LenetInt8 generated(*model.module);
  const at::Tensor x = model.example_inputs[0].toTensor();
  // The same quantized kernels on the same packed weights and scales.
  const at::Tensor ours = generated.forward(x);
  CHECK(torch::equal(ours, int8(x).toTensor()));
  CHECK(fx::sqnr_db(model.forward(model.example_inputs).toTensor(), ours) > 15);
  // The packed weights are script objects the constructor made.
  CHECK_THAT(int8->code(), Catch::Contains("c10::IValue& _packed_"));
}

TEST_CASE("a forward split into many functions computes the same") {
  torch::NoGradGuard no_grad;
  models::ZooModel model = models::make_zoo_model("resnet18");
  testdata::ResNet18Folded whole(*model.module);
  testdata::ResNet18Split split(*model.module);
  at::Tensor x = model.example_inputs[0].toTensor();
  CHECK(torch::equal(split.forward(x), whole.forward(x)));
  // The guard is still checked (in the first function).
  CHECK_THROWS_AS(split.forward(torch::randn({1, 3, 64, 64})), fx::GuardError);

  // How the emitter splits: parts of about 16 nodes, for forward and the
  // init step, each handing its live tensors to the next.
  fx::GraphModule gm = folded_resnet18(model);
  fx::codegen::ModuleOptions options;
  options.class_name = "Split";
  options.max_nodes_per_function = 16;
  fx::codegen::GeneratedModule code = fx::codegen::emit_module(*gm, options);
  const size_t nodes = gm->graph().size();
  size_t parts = 0;
  for (size_t at = code.header.find(" forward_part_"); at != std::string::npos;
       at = code.header.find(" forward_part_", at + 1)) {
    ++parts;
  }
  CHECK(parts >= nodes / 16 / 2);
  CHECK(parts <= nodes / 16 + 1);
  CHECK(code.header.find(" init_0_part_1(fx::ForwardFrame& frame);") !=
        std::string::npos);
  CHECK(code.source.find("return forward_part_1(frame);") != std::string::npos);
  CHECK(code.source.find("= std::move(frame.tensors[0]);") != std::string::npos);
  // The default does not split a graph of this size.
  options.max_nodes_per_function = 2000;
  CHECK(fx::codegen::emit_module(*gm, options).header.find("_part_") ==
        std::string::npos);
}

TEST_CASE("generated code runs on the weights file written beside it") {
  torch::NoGradGuard no_grad;
  // Written by the generator during the build, from the same seeded model.
  fx::TensorMap weights = fx::load_tensors("testdata/lenet_generated.weights");
  CHECK(weights.size() == testdata::LenetGenerated::tensor_names().size());
  testdata::LenetGenerated generated(weights);
  models::ZooModel model = models::make_zoo_model("lenet");
  at::Tensor x = model.example_inputs[0].toTensor();
  CHECK(torch::allclose(generated.forward(x),
                        model.forward(model.example_inputs).toTensor(), 1e-5,
                        1e-6));
}

TEST_CASE("generated code returns a dict as the model does") {
  torch::NoGradGuard no_grad;
  fx::codegen::Model model = testdata::two_heads_model();
  testdata::TwoHeadsGenerated generated(fx::named_tensors(*model.module));
  const at::Tensor x = torch::randn({1, 3, 8, 8});
  const c10::IValue got(generated.forward(x));
  const c10::IValue want = model.forward({x});
  REQUIRE(got.isGenericDict());
  const auto a = got.toGenericDict();
  const auto b = want.toGenericDict();
  REQUIRE(a.size() == 2);
  auto ai = a.begin();
  for (const auto& item : b) {  // the same keys, in the same order
    CHECK(ai->key() == item.key());
    CHECK(torch::equal(ai->value().toTensor(), item.value().toTensor()));
    ++ai;
  }
}

TEST_CASE("generated code runs control flow as the model does") {
  torch::NoGradGuard no_grad;
  fx::codegen::Model model = testdata::control_flow_model();
  testdata::ControlFlowGenerated generated(fx::named_tensors(*model.module));
  // Both branches, zero to a dozen iterations.
  for (float scale : {0.1f, 5.0f, 3000.0f}) {
    for (float sign : {1.0f, -1.0f}) {
      const at::Tensor x = torch::rand({2, 4}) * scale * sign;
      CHECK(torch::equal(generated.forward(x), model.forward({x}).toTensor()));
    }
  }
}

TEST_CASE("generated code runs scan and map as the model does") {
  torch::NoGradGuard no_grad;
  fx::codegen::Model model = testdata::scan_model();
  testdata::ScanGenerated generated(fx::named_tensors(*model.module));
  for (int i = 0; i < 3; ++i) {
    const at::Tensor x = torch::randn({2, 5, 4});
    CHECK(torch::equal(generated.forward(x), model.forward({x}).toTensor()));
  }
}

TEST_CASE("generated code computes with sizes that depend on data") {
  torch::NoGradGuard no_grad;
  fx::codegen::Model model = testdata::selects_boxes_model();
  testdata::SelectsBoxesGenerated generated(fx::named_tensors(*model.module));
  // One score passes, some, all.
  torch::manual_seed(0);
  for (double shift : {-0.45, 0.0, 1.0}) {
    const at::Tensor boxes = torch::rand({10, 4});
    at::Tensor scores = torch::rand({10}) + shift;
    if (shift < 0) scores[3] = 0.75;
    const at::Tensor want = model.forward({boxes, scores}).toTensor();
    CHECK(torch::equal(generated.forward(boxes, scores), want));
  }
  // None: the first box's corners need one, which the graph checks.
  CHECK_THROWS_WITH(generated.forward(torch::rand({10, 4}), torch::zeros({10})),
                    Catch::Contains("u0 >= 1 (u0 is the size aten::index.Tensor"));
}

TEST_CASE("generated code checks its tensors and inputs") {
  torch::NoGradGuard no_grad;
  models::ZooModel model = models::make_zoo_model("resnet18");
  fx::TensorMap tensors = fx::named_tensors(*model.module);
  tensors.erase("layer1.0.conv1.weight");
  CHECK_THROWS_WITH(testdata::ResNet18Folded(tensors),
                    Catch::Contains("ResNet18Folded: no tensor "
                                    "'layer1.0.conv1.weight'"));
  tensors = fx::named_tensors(*model.module);
  tensors["fc.weight"] = torch::zeros({10, 512});
  CHECK_THROWS_WITH(
      testdata::ResNet18Folded(tensors),
      Catch::Contains("tensor 'fc.weight' is Float[10, 512] but the code was "
                      "generated for Float[1000, 512]"));
  testdata::ResNet18Folded generated(*model.module);
  CHECK_THROWS_AS(generated.forward(torch::zeros({1, 3, 224, 224},
                                                 torch::kDouble)),
                  fx::GuardError);
}

TEST_CASE("emitted modules are deterministic and embed constants") {
  auto fn = [](torch::Tensor x) {
    return torch::relu(x + torch::tensor({1.0f, 2.0f, 3.0f}));
  };
  fx::GraphModule gm = fx::symbolic_trace(fn, torch::randn({2, 3}));
  fx::codegen::ModuleOptions options;
  options.class_name = "AddConstant";
  options.namespace_name = "a::b";
  options.header_include = "add_constant.h";
  fx::codegen::GeneratedModule first = fx::codegen::emit_module(*gm, options);
  fx::codegen::GeneratedModule second = fx::codegen::emit_module(*gm, options);
  CHECK(first.header == second.header);
  CHECK(first.source == second.source);
  CHECK(first.bound_tensors.empty());
  INFO(first.header << first.source);
  CHECK(first.header.find("namespace a {\nnamespace b {\n") !=
        std::string::npos);
  CHECK(first.header.find("class AddConstant {") != std::string::npos);
  CHECK(first.source.find("#include \"add_constant.h\"") != std::string::npos);
  // 1.0f, 2.0f, 3.0f as bytes: 0,0,128,63, 0,0,0,64, 0,0,64,64.
  CHECK(first.source.find("0,0,128,63,0,0,0,64,0,0,64,64") !=
        std::string::npos);
  CHECK(first.source.find("fx::embedded_tensor(kConstant0, 12, "
                          "at::ScalarType::Float, {3})") != std::string::npos);
  options.class_name = "not a name";
  CHECK_THROWS_WITH(fx::codegen::emit_module(*gm, options),
                    Catch::Contains("'not a name' is not a C++ identifier"));
}

TEST_CASE("tensor files round-trip and bad ones are named") {
  const std::string path = "tensors_test.weights";
  fx::TensorMap tensors = {{"a.weight", torch::randn({2, 3})},
                           {"b", torch::arange(4)}};
  fx::save_tensors(tensors, path);
  fx::TensorMap loaded = fx::load_tensors(path);
  REQUIRE(loaded.size() == 2);
  CHECK(torch::equal(loaded["a.weight"], tensors["a.weight"]));
  CHECK(torch::equal(loaded["b"], tensors["b"]));
  {
    std::ofstream out(path, std::ios::trunc);
    out << "not a tensor file";
  }
  CHECK_THROWS_WITH(fx::load_tensors(path),
                    Catch::Contains("is not a tensor file"));
  CHECK_THROWS_WITH(fx::load_tensors("no/such/file"),
                    Catch::Contains("cannot open 'no/such/file'"));
  std::remove(path.c_str());
}

TEST_CASE("input specs parse or say what is wrong") {
  at::Tensor t = fx::example_input("1x3x8x8:float64");
  CHECK(t.sizes() == c10::IntArrayRef({1, 3, 8, 8}));
  CHECK(t.scalar_type() == torch::kDouble);
  CHECK(fx::example_input("5").sizes() == c10::IntArrayRef({5}));
  CHECK_THROWS_WITH(fx::example_input("1xAx3"),
                    Catch::Contains("'A' is not a size"));
  CHECK_THROWS_WITH(fx::example_input("2x2:float33"),
                    Catch::Contains("unknown dtype 'float33'"));
  CHECK_THROWS_WITH(fx::example_input("99999999999x99999999999"),
                    Catch::Contains("overflows int64"));
  CHECK_THROWS_WITH(fx::example_input("1x2:float:int8"),
                    Catch::Contains("more than one ':'"));
  fx::InputSpec spec = fx::parse_input_spec("0x4:double");
  CHECK(fx::to_string(spec) == "0x4:float64");
  CHECK(fx::parse_input_spec(fx::to_string(spec)).sizes == spec.sizes);
}

}  // namespace
