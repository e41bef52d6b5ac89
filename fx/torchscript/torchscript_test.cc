#include "fx/torchscript/torchscript.h"

#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "fx/fx.h"
#include "fx/ir/control_flow.h"
#include "fx/torchscript/internal/torchscript_interpreter.h"
#include "interpreter/transformer.h"
#include "libtorch/python.h"
#include "lowering/optimize_for_inference.h"
#include "passes/specialize_sizes.h"
#include "passes/fuse_conv_bn.h"
#include "models/zoo.h"
#include "testdata/zoo_testing.h"
#include "testdata/round_trip.h"
#include "testdata/test_files.h"
#include "third_party/catch.h"

namespace {

// The TorchScript files testdata/torchscript_models.py writes (once per test
// run), in the test's temporary directory.
std::string model_path(const std::string& name) {
  static const std::string dir =
      testdata::torchscript_models("torchscript_models");
  return dir + "/" + name + ".pt";
}

}  // namespace

TEST_CASE("torchvision models from TorchScript trace into equal GraphModules") {
  for (const char* name : {"resnet18_scripted", "resnet18_traced",
                           "mobilenet_v2_scripted", "squeezenet_traced",
                           "resnet50_scripted"}) {
    INFO(name);
    torch::jit::Module script = torch::jit::load(model_path(name));
    script.eval();
    torch::manual_seed(1);
    at::Tensor x = torch::randn({1, 3, 224, 224});
    fx::GraphModule gm = fx::symbolic_trace(script, {x});
    // Parameters by their qualified names.
    CHECK(gm->graph().find_nodes(fx::Opcode::kGetAttr).size() > 10);
    CHECK(gm->has_tensor_attribute(
        std::string(name).rfind("resnet", 0) == 0 ? "layer1.0.conv1.weight"
                                                  : "features.0.0.weight") ==
          (std::string(name).rfind("resnet", 0) == 0 ||
           std::string(name).rfind("mobilenet", 0) == 0));
    CHECK(gm->graph().placeholders()[0]->name() == "x");
    torch::NoGradGuard no_grad;
    at::Tensor expected = script.forward({x}).toTensor();
    at::Tensor ours = gm(x).toTensor();
    CHECK(torch::equal(ours, expected));

    // conv/bn folding applies to the imported graph (aten::conv2d from
    // scripted files, aten::_convolution from traced ones); SqueezeNet has
    // no batch norm.
    fx::GraphModule folded = gm->copy();
    const bool has_batch_norm = std::string(name).rfind("squeezenet", 0) != 0;
    REQUIRE(fx::fuse_conv_bn(*folded) == has_batch_norm);
    folded->recompile();
    CHECK(folded->graph()
              .find_nodes(fx::Opcode::kCallFunction, fx::op("aten::batch_norm"))
              .empty());
    CHECK(torch::allclose(folded(x).toTensor(), expected, 1e-4, 1e-4));
  }
}

TEST_CASE("a scripted model with control flow on tensor values is refused") {
  torch::jit::Module script = torch::jit::load(model_path("data_dependent_scripted"));
  try {
    fx::symbolic_trace(script, {torch::randn({2, 3})});
    FAIL("traced data-dependent control flow");
  } catch (const fx::TraceError& e) {
    INFO(e.what());
    // The operator that needed data, the TorchScript node that called it,
    // and the Python source line.
    CHECK_THAT(e.what(), Catch::Contains("aten::item"));
    CHECK_THAT(e.what(), Catch::Contains("aten::Float"));
    CHECK_THAT(e.what(), Catch::Contains("x.sum()"));
    CHECK_THAT(e.what(), Catch::Contains("torchscript_models.py"));
  }
  CHECK_FALSE(fx::is_tracing());

  // One call down: the call stack, outermost call first.
  script = torch::jit::load(model_path("calls_data_dependent_scripted"));
  try {
    fx::symbolic_trace(script, {torch::randn({2, 3})});
    FAIL("traced data-dependent control flow");
  } catch (const fx::TraceError& e) {
    const std::string what = e.what();
    INFO(what);
    const size_t outer = what.find("self.inner(x)");
    const size_t inner = what.find("x.sum()");
    CHECK(outer != std::string::npos);
    CHECK(inner != std::string::npos);
    CHECK(outer < inner);
  }
  CHECK_FALSE(fx::is_tracing());
}

TEST_CASE("a scripted model's data-dependent sizes import as symbols") {
  // boxes[scores > 0.5], its first two columns flattened to n * 2, and
  // torch.nonzero of the mask: TorchScript's own aten::size reads u0.
  torch::jit::Module script = torch::jit::load(model_path("selects_boxes_scripted"));
  fx::GraphModule gm =
      fx::symbolic_trace(script, {torch::rand({10, 4}), torch::rand({10})});
  const std::string printed = gm->graph().to_string();
  INFO(printed);
  CHECK_THAT(printed, Catch::Contains("target=aten::nonzero]"));
  CHECK_THAT(printed, Catch::Contains("target=sym_size](args = (%index, 0)"));
  // No score passes, every score passes, some do.
  for (double shift : {-1.0, 1.0, 0.0}) {
    const at::Tensor boxes = torch::rand({10, 4});
    const at::Tensor scores = torch::rand({10}) + shift;
    const auto expected = script.forward({boxes, scores}).toTupleRef().elements();
    const auto got = gm(boxes, scores).toTupleRef().elements();
    REQUIRE(got.size() == 2);
    CHECK(torch::equal(got[0].toTensor(), expected[0].toTensor()));
    CHECK(torch::equal(got[1].toTensor(), expected[1].toTensor()));
  }
}

TEST_CASE("a scripted model that sets its attributes to what they hold imports") {
  // forward sets self.anchors (to the same tensors, cast to the input's
  // dtype), makes an object of a TorchScript class, and splits by the
  // sizes it lists, one of them data-dependent.
  torch::jit::Module script =
      torch::jit::load(model_path("caches_anchors_scripted"));
  const c10::IValue anchors = script.attr("anchors");
  fx::GraphModule gm =
      fx::symbolic_trace(script, {torch::rand({6, 4}), torch::rand({6})});
  INFO(gm->graph().to_string());
  // Each trace found the module as it was, and so does the user: the
  // same list, of the same tensors, which hold data (not a trace's).
  const c10::IValue after = script.attr("anchors");
  CHECK(after.isSameIdentity(anchors));
  for (const c10::IValue& a : after.toListRef()) {
    CHECK(a.toTensor().has_storage());
  }
  for (double shift : {-1.0, 1.0, 0.0}) {
    const at::Tensor boxes = torch::rand({6, 4});
    const at::Tensor scores = torch::rand({6}) + shift;
    const c10::IValue want = script.forward({boxes, scores});
    const c10::IValue got = gm(boxes, scores);
    REQUIRE(got.toListRef().size() == 3);
    for (size_t i = 0; i < 3; ++i) {
      CHECK(torch::equal(got.toListRef()[i].toTensor(),
                         want.toListRef()[i].toTensor()));
    }
  }
}

TEST_CASE("a scripted model that keeps state between calls is refused") {
  // self.calls += 1: a graph reads attributes as they were when traced.
  torch::jit::Module script = torch::jit::load(model_path("counts_calls_scripted"));
  CHECK_THROWS_WITH(
      fx::symbolic_trace(script, {torch::randn({3})}),
      Catch::Contains("forward sets the module attribute calls to a value "
                      "other than it held") &&
          Catch::Contains("keep that state outside forward"));
  // And leaves the module as it was.
  CHECK(script.attr("calls").toInt() == 0);
}

TEST_CASE("checking what forward set leaves a training module's buffers") {
  // In training, the check's eager call updates batch norm's statistics;
  // the module's are restored.
  torch::jit::Module script =
      torch::jit::load(model_path("caches_anchors_scripted"));
  script.train();
  torch::jit::Module norm = script.attr("norm").toModule();
  const at::Tensor mean = norm.attr("running_mean").toTensor().clone();
  const at::Tensor eager_mean = [&] {
    torch::jit::Module copy = script.deepcopy();
    copy.forward({torch::rand({6, 4}), torch::ones({6})});
    return copy.attr("norm").toModule().attr("running_mean").toTensor();
  }();
  CHECK_FALSE(torch::equal(eager_mean, mean));  // a call does change it
  fx::symbolic_trace(script, {torch::rand({6, 4}), torch::ones({6})});
  CHECK(torch::equal(norm.attr("running_mean").toTensor(), mean));
}

TEST_CASE("a failure in a traced file names the TorchScript node and module") {
  // torch.jit.trace gives its aten::Int nodes no source line.
  torch::jit::Module script =
      torch::jit::load(model_path("data_dependent_traced"));
  try {
    fx::symbolic_trace(script, {torch::randn({1, 3, 224, 224})});
    FAIL("traced data-dependent code");
  } catch (const fx::TraceError& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK_THAT(what, Catch::Contains("aten::item needs the data"));
    CHECK_THAT(what, Catch::Contains("of module inner.1, at the TorchScript "
                                     "node"));
    CHECK_THAT(what, Catch::Contains("= aten::Int(%"));
    CHECK_THAT(what, !Catch::Contains("line 0"));
  }
  CHECK_FALSE(fx::is_tracing());
}

TEST_CASE("TorchScript control flow on known values traces into the branch taken") {
  torch::jit::Module script = torch::jit::load(model_path("control_flow_scripted"));
  script.eval();
  torch::manual_seed(3);
  at::Tensor x = torch::randn({3, 4});
  // fx's own TorchScript interpreter runs this model: prim::Loop,
  // prim::If, lists, a dict, prim::CallMethod and prim::CallFunction.
  torch::NoGradGuard no_grad;
  c10::IValue expected = script.forward({x});
  testdata::check_outputs_equal(
      fx::internal::run_torchscript_method(script.get_method("forward"), {x}),
      expected);

  fx::GraphModule gm = fx::symbolic_trace(script, {x});
  testdata::check_outputs_equal(gm(x), expected);
  // The loop ran x.size(0) = 3 times; the branch kept is the linear one.
  CHECK(gm->graph().find_nodes(fx::Opcode::kCallFunction, fx::op("aten::add.Scalar")).size() == 3);
  CHECK(gm->graph().find_nodes(fx::Opcode::kCallFunction, fx::op("aten::linear")).size() == 1);
  CHECK(gm->has_tensor_attribute("linear.weight"));
  // The trace read x.size(0): other sizes are refused, not run wrongly.
  CHECK_THROWS_AS(gm(torch::randn({5, 4})), fx::GuardError);
}

TEST_CASE("TorchScript branches and loops on tensor values import as cond "
          "and while_loop") {
  torch::jit::Module script =
      torch::jit::load(model_path("tensor_control_flow_scripted"));
  script.eval();
  torch::manual_seed(5);
  fx::GraphModule gm = fx::symbolic_trace(script, {torch::randn({2, 4})});
  const fx::Graph& g = gm->graph();
  CHECK(g.find_nodes(fx::Opcode::kCallFunction,
                     fx::Target(fx::cond_function())).size() == 1);
  CHECK(g.find_nodes(fx::Opcode::kCallFunction,
                     fx::Target(fx::while_loop_function())).size() == 1);
  CHECK(g.subgraphs().size() == 4);
  torch::NoGradGuard no_grad;
  // Both branches, zero to a dozen halvings, other batch sizes.
  for (float scale : {0.1f, 3.0f, 5000.0f}) {
    for (float sign : {1.0f, -1.0f}) {
      for (int64_t rows : {1, 2, 5}) {
        at::Tensor x = torch::rand({rows, 4}) * scale * sign;
        INFO("scale " << scale * sign << ", rows " << rows);
        CHECK(torch::equal(gm(x).toTensor(), script.forward({x}).toTensor()));
      }
    }
  }
  // The graph saves and loads with its bodies.
  std::stringstream file;
  fx::save(gm, file);
  fx::GraphModule loaded = fx::load(file);
  at::Tensor x = torch::full({2, 4}, -7.0);
  CHECK(torch::equal(loaded(x).toTensor(), script.forward({x}).toTensor()));
  // And back to TorchScript: prim::If and prim::Loop again.
  torch::jit::Module back = fx::to_torchscript(gm);
  for (const at::Tensor& input : {x, torch::rand({3, 4}) * 9}) {
    CHECK(torch::equal(back.forward({input}).toTensor(),
                       script.forward({input}).toTensor()));
  }
}

TEST_CASE("vararg operators get their input count: f-string asserts, a scripted ViT") {
  // aten::format(str self, ...) takes the number of inputs on the stack;
  // without it the operator read a stale value as its format string.
  torch::jit::Module script =
      torch::jit::load(model_path("formats_message_scripted"));
  at::Tensor x = torch::randn({2, 4});
  fx::GraphModule gm = fx::symbolic_trace(script, {x});
  CHECK(torch::equal(gm(x).toTensor(), script.forward({x}).toTensor()));

  // torchvision's VisionTransformer (vit_b_16's code, small): class token,
  // torch._assert on sizes with f-string messages, encoder blocks.
  script = torch::jit::load(model_path("small_vit_scripted"));
  script.eval();
  torch::manual_seed(4);
  at::Tensor image = torch::randn({1, 3, 32, 32});
  gm = fx::symbolic_trace(script, {image});
  torch::NoGradGuard no_grad;
  at::Tensor expected = script.forward({image}).toTensor();
  at::Tensor ours = gm(image).toTensor();
  CHECK(torch::allclose(ours, expected, 1e-5, 1e-6));
}

TEST_CASE("TorchScript nodes only TorchScript runs are traced through its interpreter") {
  torch::jit::Module script = torch::jit::load(model_path("no_grad_scripted"));
  at::Tensor x = torch::randn({2, 3});
  // A `with` block (prim::Enter) is not one fx's interpreter runs...
  CHECK_THROWS_AS(
      fx::internal::run_torchscript_method(script.get_method("forward"), {x}),
      fx::internal::UnsupportedNode);
  // ...so symbolic_trace hands the module to TorchScript's.
  fx::GraphModule gm = fx::symbolic_trace(script, {x});
  CHECK(torch::equal(gm(x).toTensor(), script.forward({x}).toTensor()));
  CHECK(gm->graph().find_nodes(fx::Opcode::kCallFunction, fx::op("aten::mul.Scalar")).size() == 1);
  CHECK_FALSE(fx::is_tracing());
}

TEST_CASE("GraphModules export to TorchScript and load back in C++") {
  for (std::string name : {"resnet18", "lenet", "mlp", "mobilenet_v2",
                                  "inplace_ops"}) {
    INFO(name);
    models::ZooModel model = models::make_zoo_model(name);
    fx::GraphModule gm = models::trace_zoo_model(model);
    torch::jit::Module exported = fx::to_torchscript(gm);
    // The same parameters under the same names.
    std::set<std::string> names;
    for (const auto& p : exported.named_parameters()) names.insert(p.name);
    std::set<std::string> expected_names;
    for (const auto& p : gm->named_parameters()) expected_names.insert(p.key());
    CHECK(names == expected_names);

    torch::NoGradGuard no_grad;
    c10::IValue expected = gm->forward(model.example_inputs);
    // The graph as exported, bitwise: TorchScript's executor optimizes off
    // (LibTorch 2.13's decomposes aten::addmm into mm and add, which round
    // differently: 7.6e-6 on an MLP's layer).
    torch::jit::GraphOptimizerEnabledGuard as_exported(false);
    testdata::check_outputs_equal(exported.forward(model.example_inputs),
                                  expected);
    const std::string path = model_path("exported_" + name);
    exported.save(path);
    torch::jit::Module loaded = torch::jit::load(path);
    testdata::check_outputs_equal(loaded.forward(model.example_inputs),
                                  expected);
  }
}

TEST_CASE("exported TorchScript checks the inputs as the GraphModule does") {
  models::ZooModel model = models::make_zoo_model("resnet18");
  fx::GraphModule gm = models::trace_zoo_model(model);
  const std::string path = model_path("exported_guards");
  fx::to_torchscript(gm).save(path);
  torch::jit::Module loaded = torch::jit::load(path);
  torch::NoGradGuard no_grad;
  // Shapes: the trace read the input's sizes.
  std::vector<c10::IValue> wrong_shape = {torch::randn({2, 3, 64, 64})};
  CHECK_THROWS_WITH(gm->forward(wrong_shape), Catch::Contains("has shape"));
  CHECK_THROWS_WITH(
      loaded.forward(wrong_shape),
      Catch::Contains("input 0 ('x') has shape [2, 3, 64, 64] but the traced "
                      "code read the sizes of its example input [1, 3, 224, "
                      "224]") &&
          Catch::Contains("trace the model again"));
  CHECK_THROWS_WITH(loaded.forward({torch::randn({1, 3, 224, 224},
                                                 torch::kDouble)}),
                    Catch::Contains("does not have dtype torch.float32"));
  CHECK_THROWS_WITH(loaded.forward({torch::randn({3, 224, 224})}),
                    Catch::Contains("has 3 dimensions but the trace saw 4"));
  // Python (of the same torch) sees the same message.
  const std::string command =
      std::string(FX_LIBTORCH_PYTHON) +
      " -c \"import sys, torch; m = torch.jit.load(sys.argv[1])\n"
      "try: m(torch.randn(2, 3, 64, 64))\n"
      "except Exception as e: sys.exit(0 if 'has shape [2, 3, 64, 64]' in str(e) else 1)\n"
      "sys.exit(2)\" " + path;
  CHECK(std::system(command.c_str()) == 0);
}

TEST_CASE("a model with a list input exports its length guard") {
  fx::GraphModule gm = fx::symbolic_trace(
      [](std::vector<at::Tensor> xs) { return torch::cat(xs, 1) * 2; },
      std::vector<at::Tensor>{torch::ones({2, 3}), torch::ones({2, 1})});
  torch::jit::Module exported = fx::to_torchscript(gm);
  std::vector<at::Tensor> xs = {torch::randn({2, 3}), torch::randn({2, 1})};
  CHECK(torch::equal(exported.forward({xs}).toTensor(),
                     gm(xs).toTensor()));
  CHECK_THROWS_WITH(
      exported.forward({std::vector<at::Tensor>{torch::randn({2, 3})}}),
      Catch::Contains("input 0 ('x') has 1 tensors but the trace saw 2"));
  CHECK_THROWS_WITH(
      exported.forward({std::vector<at::Tensor>{
          torch::randn({2, 3}), torch::randn({2, 1}, torch::kDouble)}}),
      Catch::Contains("input 0 ('x')[1] does not have dtype torch.float32"));
}

TEST_CASE("an imported TorchScript model, folded, exports and loads in Python") {
  torch::jit::Module script = torch::jit::load(model_path("resnet18_traced"));
  torch::manual_seed(2);
  at::Tensor x = torch::randn({1, 3, 224, 224});
  fx::GraphModule gm = fx::symbolic_trace(script, {x});
  REQUIRE(fx::fuse_conv_bn(*gm));
  gm->recompile();
  torch::NoGradGuard no_grad;
  at::Tensor expected = gm(x).toTensor();
  const std::string path = model_path("folded_resnet18");
  fx::to_torchscript(gm).save(path);
  // Python runs the file on the same input and compares.
  const std::string data = model_path("folded_resnet18_io");
  std::vector<char> bytes =
      torch::pickle_save(c10::ivalue::Tuple::create({x, expected}));
  std::ofstream(data, std::ios::binary).write(bytes.data(), bytes.size());
  // LibTorch 2.13's files load in Python 2.13 (1.13 refuses them).
  const std::string command =
      std::string(FX_LIBTORCH_PYTHON) +
      " -c \"import sys, torch; m = torch.jit.load(sys.argv[1]); "
      "x, y = torch.load(sys.argv[2]); "
      "sys.exit(0 if torch.equal(m(x), y) else 1)\" " + path + " " + data;
  CHECK(std::system(command.c_str()) == 0);
}

TEST_CASE("export names what TorchScript cannot hold") {
  models::ZooModel model = models::make_zoo_model("data_dependent_leaf");
  fx::GraphModule gm = models::trace_zoo_model(model);
  CHECK_THROWS_WITH(fx::to_torchscript(gm),
                    Catch::Contains("leaf modules are C++ code") &&
                        Catch::Contains("call_module"));
}

TEST_CASE("dict outputs import, print, save, load and export") {
  torch::NoGradGuard no_grad;
  torch::manual_seed(4);
  const at::Tensor x = torch::randn({1, 3, 224, 224});
  for (const char* name : {"dict_output_scripted", "dict_output_traced"}) {
    INFO(name);
    torch::jit::Module script = torch::jit::load(model_path(name));
    script.eval();
    const c10::IValue expected = script.forward({x});
    REQUIRE(expected.isGenericDict());
    fx::GraphModule gm = fx::symbolic_trace(script, {x});
    testdata::check_outputs_equal(gm(x), expected);
    // One node of the builtin dict, keys in insertion order.
    const std::string printed = gm->graph().to_string();
    CHECK_THAT(printed,
               Catch::Contains("target=dict](args = (['out', 'aux'], ["));
    // The generated C++ builds it through the same builtin.
    CHECK_THAT(gm->code(), Catch::Contains("fx::find_function(\"dict\")"));
    // Saved, loaded and exported: the same graph and dict, bitwise.
    testdata::check_round_trips(gm, {x});
  }
}

TEST_CASE("size arithmetic in traced files (prim::NumToTensor) is recorded") {
  // shufflenet_v2's channel shuffle, as torch.jit.trace records it:
  // aten::size -> prim::NumToTensor -> floor_divide -> aten::Int -> view.
  torch::jit::Module script =
      torch::jit::load(model_path("channel_shuffle_traced"));
  torch::manual_seed(5);
  const at::Tensor x = torch::randn({1, 6, 5, 6});
  fx::GraphModule gm = fx::symbolic_trace(script, {x});
  const std::string printed = gm->graph().to_string();
  INFO(printed);
  CHECK_THAT(printed, Catch::Contains("sym_floordiv"));
  CHECK(printed.find("scalar_tensor") == std::string::npos);
  for (const at::Tensor& input :
       {x, torch::randn({2, 9, 5, 6}), torch::randn({3, 3, 2, 7})}) {
    CHECK(torch::equal(gm(input).toTensor(),
                       script.forward({input}).toTensor()));
  }
  // Asked to, the trace folds the sizes and guards the shape.
  fx::TraceOptions options;
  options.specialize_sizes = true;
  fx::GraphModule fixed = fx::symbolic_trace(script, {x}, options);
  CHECK(torch::equal(fixed(x).toTensor(), script.forward({x}).toTensor()));
  CHECK_THROWS_AS(fixed(torch::randn({1, 9, 5, 6})), fx::GuardError);
  CHECK(fixed->graph().to_string().find("sym_") == std::string::npos);
}

TEST_CASE("branches and asserts on sizes become checks in the graph") {
  torch::jit::Module script =
      torch::jit::load(model_path("guards_length_scripted"));
  fx::GraphModule gm = fx::symbolic_trace(script, {torch::randn({2, 16, 8})});
  const std::string printed = gm->graph().to_string();
  INFO(printed);
  CHECK_THAT(printed, Catch::Contains("fx_guard::check_size"));
  // What TorchScript raises for, the graph refuses, naming the check.
  CHECK_THROWS_WITH(gm(torch::randn({2, 33, 8})),
                    Catch::Contains("%T <= 32") &&
                        Catch::Contains("held while tracing, but not for 33 "
                                        "and 32"));
  CHECK_THROWS_AS(gm(torch::randn({2, 16, 9})), fx::GuardError);
  torch::jit::Module exported = fx::to_torchscript(gm);
  CHECK_THROWS_WITH(exported.forward({torch::randn({2, 33, 8})}),
                    Catch::Contains("%T <= 32"));
  // A loop over unbind's tensors, unrolled: their number is checked.
  torch::jit::Module steps = torch::jit::load(model_path("sum_steps_scripted"));
  const at::Tensor x = torch::randn({2, 4, 3});
  fx::GraphModule unrolled = fx::symbolic_trace(steps, {x});
  CHECK(torch::equal(unrolled(x).toTensor(), steps.forward({x}).toTensor()));
  const at::Tensor y = torch::randn({3, 4, 3});
  CHECK(torch::equal(unrolled(y).toTensor(), steps.forward({y}).toTensor()));
  CHECK_THROWS_WITH(unrolled(torch::randn({2, 5, 3})),
                    Catch::Contains("aten::unbind") &&
                        Catch::Contains("returned 4 tensors while tracing, "
                                        "but 5 now"));
  CHECK_THROWS_WITH(fx::to_torchscript(unrolled).forward({torch::randn({2, 5, 3})}),
                    Catch::Contains("returned 4 tensors while tracing, but 5 now"));
  // A float made from a size (attention's 1/sqrt(head_dim)): the size is
  // checked to keep its value, and the others stay generic. Before, the
  // whole input shape was specialized.
  torch::jit::Module scales =
      torch::jit::load(model_path("scales_by_width_scripted"));
  fx::TraceStats stats;
  fx::GraphModule scaled =
      fx::symbolic_trace(scales, {torch::randn({2, 4})}, {}, &stats);
  CHECK_FALSE(stats.read_sizes);
  CHECK(stats.specialized_by.empty());
  CHECK_THAT(scaled->graph().to_string(), Catch::Contains("fx_guard::check_size"));
  for (int64_t b : {1, 2, 7}) {
    const at::Tensor x = torch::randn({b, 4});
    CHECK(torch::allclose(scaled(x).toTensor(), scales.forward({x}).toTensor()));
  }
  CHECK_THROWS_WITH(scaled(torch::randn({2, 9})),
                    Catch::Contains("== 4") &&
                        Catch::Contains("aten::sqrt") &&
                        Catch::Contains("takes it as a constant"));
  // Folded to the example's sizes (the ONNX export's view), no check is left.
  fx::GraphModule fixed = fx::symbolic_trace(script, {torch::randn({2, 16, 8})});
  CHECK(fx::specialize_sizes(*fixed));
  CHECK(fixed->graph().to_string().find("check_size") == std::string::npos);
}

TEST_CASE("imported TorchScript runs every shape TorchScript runs") {
  // Scripted and traced files that read sizes: token models at other
  // batches and lengths, image patches at other sides.
  struct Case {
    std::string name;
    std::vector<at::Tensor> inputs;  // the first is the example
    // What the graph has that makes it generic.
    std::string generic = "sym_size";
  };
  torch::manual_seed(7);
  auto tokens = [](int64_t b, int64_t t) {
    return torch::randint(0, 100, {b, t});
  };
  const std::vector<Case> cases = {
      {"token_encoder_scripted", {tokens(2, 16), tokens(3, 24), tokens(1, 5)}},
      {"causal_encoder_scripted", {tokens(2, 16), tokens(5, 7), tokens(1, 64)}},
      {"causal_encoder_traced", {tokens(2, 16), tokens(3, 24), tokens(1, 1)}},
      {"patches_scripted",
       {torch::randn({1, 3, 8, 12}), torch::randn({2, 3, 16, 4}),
        torch::randn({1, 5, 4, 4})}},
      {"patches_traced",
       {torch::randn({1, 3, 8, 12}), torch::randn({2, 3, 16, 4}),
        torch::randn({1, 5, 4, 4})}},
      {"guards_length_scripted",
       {torch::randn({2, 16, 8}), torch::randn({1, 32, 8}),
        torch::randn({5, 1, 8})}},
      {"lstm_lm_scripted", {tokens(2, 16), tokens(3, 5), tokens(1, 40)}},
      // The number of chunks is checked, not the shapes.
      {"chunked_qkv_scripted",
       {torch::randn({2, 5, 16}), torch::randn({1, 9, 16})},
       "fx_guard::check_length"},
      {"chunked_qkv_traced",
       {torch::randn({2, 5, 16}), torch::randn({1, 9, 16})},
       "fx_guard::check_length"},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    torch::jit::Module script = torch::jit::load(model_path(c.name));
    script.eval();
    fx::GraphModule gm = fx::symbolic_trace(script, {c.inputs[0]});
    const std::string printed = gm->graph().to_string();
    INFO(printed);
    CHECK_THAT(printed, Catch::Contains(c.generic));
    // Generated C++ reads the sizes from the tensors.
    if (c.generic == "sym_size") {
      CHECK_THAT(gm->code(), Catch::Contains(".size("));
    } else {
      CHECK_THAT(gm->code(), Catch::Contains(c.generic));
    }
    std::stringstream file;
    fx::save(gm, file);
    fx::GraphModule loaded = fx::load(file);
    torch::jit::Module exported = fx::to_torchscript(gm);
    // A Transformer keeps the size nodes; the lowering keeps them working.
    fx::GraphModule transformed = fx::Transformer(gm).transform();
    CHECK_THAT(transformed->graph().to_string(), Catch::Contains(c.generic));
    fx::GraphModule lowered = fx::symbolic_trace(script, {c.inputs[0]});
    fx::optimize_for_inference(*lowered);
    for (const at::Tensor& input : c.inputs) {
      INFO(input.sizes());
      const at::Tensor expected = script.forward({input}).toTensor();
      CHECK(torch::equal(gm(input).toTensor(), expected));
      CHECK(torch::equal(loaded(input).toTensor(), expected));
      CHECK(torch::equal(exported.forward({input}).toTensor(), expected));
      CHECK(torch::equal(transformed(input).toTensor(), expected));
      const at::Tensor fast = lowered(input).toTensor();
      CHECK((fast - expected).abs().max().item<double>() <=
            1e-5 * expected.abs().max().item<double>());
    }
  }
}
