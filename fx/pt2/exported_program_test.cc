#include "fx/pt2/exported_program.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include <caffe2/serialize/inline_container.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>
#include <torch/version.h>

#include "fx/fx.h"
#include "fx/ir/control_flow.h"
#include "fx/torchscript/torchscript.h"
#include "lowering/optimize_for_inference.h"
#include "onnx/to_onnx.h"
#include "quantization/numeric_suite.h"
#include "quantization/quantize_fx.h"
#include "testdata/onnx_runtime.h"
#include "testdata/test_files.h"
#include "third_party/catch.h"

namespace {

// The .pt2 files of testdata/exported_programs.py, written once.
const std::string& programs() {
  static const std::string dir = testdata::exported_programs("pt2_programs");
  return dir;
}

// STEM.pt: a list of tensors torch.save wrote.
std::vector<at::Tensor> tensors(const std::string& stem) {
  std::ifstream in(programs() + "/" + stem + ".pt", std::ios::binary);
  std::vector<char> bytes{std::istreambuf_iterator<char>(in),
                          std::istreambuf_iterator<char>()};
  std::vector<at::Tensor> out;
  const c10::IValue list = torch::pickle_load(bytes);
  for (const c10::IValue& v : list.toListRef()) out.push_back(v.toTensor());
  return out;
}

// NAME_io.pt: the inputs, then the outputs, of the program in Python.
std::vector<at::Tensor> io(const std::string& name) {
  return tensors(name + "_io");
}

// Bitwise against the same torch (2.13 wrote the files); Debian's 1.13
// rounds its convolutions and batch statistics otherwise.
bool as_python_computed(const at::Tensor& got, const at::Tensor& want) {
  if (TORCH_VERSION_MAJOR >= 2) return torch::equal(got, want);
  if (!want.is_floating_point()) return torch::equal(got, want);
  // Relative to the output's largest magnitude (a product by 63 of values
  // near 0 keeps the matrix product's absolute rounding).
  const double scale = std::max(1.0, want.abs().max().item<double>());
  return torch::allclose(got, want, 1e-5, 1e-6 * scale);
}

// FROM.pt2 (mlp.pt2 unless given) with the JSON record `record` edited by
// `edit`, written as NAME.
std::string edited(const std::string& name, const std::string& record,
                   const std::function<void(nlohmann::json&)>& edit,
                   const std::string& from = "mlp") {
  caffe2::serialize::PyTorchStreamReader reader(programs() + "/" + from +
                                                ".pt2");
  const std::string path = testdata::test_file(name + ".pt2");
  caffe2::serialize::PyTorchStreamWriter writer(path);
  for (const std::string& r : reader.getAllRecords()) {
    if (r == ".data/version" || r == "version") continue;  // the writer's own
    auto [data, size] = reader.getRecord(r);
    std::string bytes(static_cast<const char*>(data.get()), size);
    if (r == record) {
      nlohmann::json j = nlohmann::json::parse(bytes);
      edit(j);
      bytes = j.dump();
    }
    writer.writeRecord(r, bytes.data(), bytes.size());
  }
  writer.writeEndOfFile();
  return path;
}

std::string write(const std::string& name, const std::string& bytes) {
  const std::string path = testdata::test_file(name);
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in),
                     std::istreambuf_iterator<char>());
}

}  // namespace

TEST_CASE("a .pt2 program runs bitwise as it ran in Python") {
  torch::NoGradGuard no_grad;
  for (const char* name : {"mlp", "cnn"}) {
    CAPTURE(name);
    fx::GraphModule gm =
        fx::load_exported_program(programs() + "/" + name + ".pt2");
    const std::vector<at::Tensor> t = io(name);
    REQUIRE(t.size() == 2);
    const at::Tensor got = gm(t[0]).toTensor();
    CHECK(as_python_computed(got, t[1]));
    // The graph is the exported one, parameters by their qualified names.
    const fx::Graph& g = gm->graph();
    CAPTURE(g.to_string());
    CHECK(g.placeholders().size() == 1);
    CHECK(g.placeholders()[0]->name() == "x");
    CHECK(gm->tensor_attributes().count("bn.running_mean") == 1);
    CHECK(g.to_string().find("aten::batch_norm") != std::string::npos);
  }
}

TEST_CASE("a .pt2 program's values carry their metadata, and its nodes map by overload") {
  fx::GraphModule gm = fx::load_exported_program(programs() + "/mlp.pt2");
  const std::string text = gm->graph().to_string();
  CAPTURE(text);
  // torch.ops.aten.mul.Tensor given the number 2: aten::mul.Scalar.
  CHECK(text.find("aten::mul.Scalar") != std::string::npos);
  CHECK(text.find("aten::linear") != std::string::npos);
  for (const fx::Node* n : gm->graph().nodes()) {
    if (n->op() == fx::Opcode::kOutput) continue;
    CAPTURE(n->name());
    REQUIRE(n->tensor_meta() != nullptr);
  }
  const fx::Node* linear = nullptr;
  for (const fx::Node* n : gm->graph().nodes()) {
    if (n->name() == "linear") linear = n;
  }
  REQUIRE(linear != nullptr);
  CHECK(linear->tensor_meta()->sizes == std::vector<int64_t>{2, 3});
}

TEST_CASE("a .pt2 program with two outputs and a tensor constant") {
  torch::NoGradGuard no_grad;
  fx::GraphModule gm = fx::load_exported_program(programs() + "/two_outputs.pt2");
  const std::vector<at::Tensor> t = io("two_outputs");
  REQUIRE(t.size() == 3);
  const c10::IValue out = gm(t[0]);
  REQUIRE(out.isTuple());
  CHECK(torch::equal(out.toTupleRef().elements()[0].toTensor(), t[1]));
  CHECK(torch::equal(out.toTupleRef().elements()[1].toTensor(), t[2]));
  fx::GraphModule cnn = fx::load_exported_program(programs() + "/cnn.pt2");
  CHECK(cnn->tensor_attributes().count("offset") == 1);
}

TEST_CASE("a .pt2 program transforms and saves as any GraphModule") {
  torch::NoGradGuard no_grad;
  fx::GraphModule gm = fx::load_exported_program(programs() + "/cnn.pt2");
  const std::vector<at::Tensor> t = io("cnn");
  const std::string path = testdata::test_file("cnn_from_pt2.fx");
  fx::save(gm, path);
  fx::GraphModule again = fx::load(path);
  CHECK(torch::equal(again(t[0]).toTensor(), gm(t[0]).toTensor()));
}

TEST_CASE("a .pt2 program is in the mode it was exported in, and quantizes") {
  torch::NoGradGuard no_grad;
  // Eval-mode exports: eval mode, which post-training quantization takes.
  fx::GraphModule mlp = fx::load_exported_program(programs() + "/mlp.pt2");
  CHECK_FALSE(mlp->is_training());
  const std::vector<at::Tensor> t = io("mlp");
  fx::GraphModule int8 = fx::quantize_dynamic_fx(mlp);
  CHECK(int8->graph().to_string().find("quantized::linear") != std::string::npos);
  CHECK(fx::sqnr_db(t[1], int8(t[0]).toTensor()) > 20);
  // A training-mode export (batch norm's training argument true): training
  // mode, refused by post-training quantization.
  fx::GraphModule training =
      fx::load_exported_program(programs() + "/training_batch_norm.pt2");
  CHECK(training->is_training());
  CHECK_THROWS_WITH(fx::quantize_dynamic_fx(training),
                    Catch::Contains("training mode"));
}

TEST_CASE("a .pt2 program reads from a stream as from its file") {
  torch::NoGradGuard no_grad;
  std::ifstream file(programs() + "/cnn.pt2", std::ios::binary);
  fx::GraphModule gm = fx::load_exported_program(file);
  const std::vector<at::Tensor> t = io("cnn");
  CHECK(as_python_computed(gm(t[0]).toTensor(), t[1]));
  CHECK(gm->graph().to_string() ==
        fx::load_exported_program(programs() + "/cnn.pt2")->graph().to_string());
  std::istringstream truncated(read(programs() + "/cnn.pt2").substr(0, 100));
  CHECK_THROWS_WITH(fx::load_exported_program(truncated),
                    Catch::Contains("load_exported_program(a stream)"));
}

TEST_CASE("a .pt2 program's input is guarded to its exported shape") {
  torch::NoGradGuard no_grad;
  fx::GraphModule gm = fx::load_exported_program(programs() + "/mlp.pt2");
  CHECK_THROWS_AS(gm(torch::randn({3, 4})), fx::GuardError);
  CHECK_THROWS_AS(gm(torch::randn({2, 4}, torch::kDouble)), fx::GuardError);
  CHECK_NOTHROW(gm(torch::randn({2, 4})));
}

// The outputs of `gm` on FILE.pt's inputs (`inputs` of them: NAME_io.pt,
// NAME_io_K.pt) against the rest of the file: Python's ep.module() at that
// shape.
void check_at_shape(fx::GraphModule& gm, const std::string& file,
                    size_t inputs, double tolerance = 0) {
  CAPTURE(file);
  const std::vector<at::Tensor> t = tensors(file);
  REQUIRE(t.size() > inputs);
  std::vector<c10::IValue> in(t.begin(), t.begin() + inputs);
  const c10::IValue out = gm->forward(in);
  std::vector<at::Tensor> got;
  if (out.isTuple()) {
    for (const c10::IValue& v : out.toTupleRef().elements()) {
      got.push_back(v.toTensor());
    }
  } else {
    got.push_back(out.toTensor());
  }
  REQUIRE(got.size() == t.size() - inputs);
  for (size_t i = 0; i < got.size(); ++i) {
    const at::Tensor& want = t[inputs + i];
    REQUIRE(got[i].sizes() == want.sizes());
    CAPTURE(i, (got[i].to(at::kDouble) - want.to(at::kDouble)).abs().max().item<double>());
    if (tolerance == 0) {
      CHECK(as_python_computed(got[i], want));
    } else {
      CHECK(torch::allclose(got[i].to(at::kDouble), want.to(at::kDouble),
                            tolerance, tolerance));
    }
  }
}

const fx::InputGuard& guard_of(const fx::GraphModule& gm, size_t input) {
  const fx::InputGuard* g = gm->graph().placeholders().at(input)->meta().get(fx::kGuard);
  REQUIRE(g != nullptr);
  return *g;
}

TEST_CASE("a .pt2 program with a dynamic batch runs at every batch its range allows") {
  torch::NoGradGuard no_grad;
  fx::GraphModule gm = fx::load_exported_program(programs() + "/dynamic.pt2");
  // Dim("batch", max=64): torch.export's symbol, its range [0, 64].
  const fx::InputGuard& g = guard_of(gm, 0);
  REQUIRE(g.dynamic.size() == 1);
  CHECK(g.dynamic[0].dim == 0);
  CHECK(g.dynamic[0].min == 0);
  CHECK(g.dynamic[0].max == 64);
  const std::string symbol = g.dynamic[0].symbol;
  const fx::TensorMeta* x = gm->graph().placeholders()[0]->tensor_meta();
  REQUIRE(x->symbolic_sizes.size() == 2);
  CHECK(x->symbolic_sizes[0].to_string() == symbol);
  check_at_shape(gm, "dynamic_io", 1);
  for (int k = 0; k < 3; ++k) check_at_shape(gm, "dynamic_io_" + std::to_string(k), 1);
  CHECK_THROWS_WITH(gm(torch::randn({65, 4})),
                    Catch::Contains(symbol + " = 65") &&
                        Catch::Contains(symbol + " <= 64"));
  CHECK_THROWS_AS(gm(torch::randn({3, 5})), fx::GuardError);
  // Lowered, the same within 1e-5 at each shape.
  fx::GraphModule lowered(gm->copy());
  fx::optimize_for_inference(*lowered);
  for (int k = 0; k < 3; ++k) {
    check_at_shape(lowered, "dynamic_io_" + std::to_string(k), 1, 1e-5);
  }
}

TEST_CASE("a .pt2 program's size arithmetic imports as ours") {
  torch::NoGradGuard no_grad;
  fx::GraphModule gm =
      fx::load_exported_program(programs() + "/dynamic_sizes.pt2");
  const std::string text = gm->graph().to_string();
  CAPTURE(text);
  for (const char* f : {"target=sym_size]", "target=sym_mul]",
                        "target=sym_add]", "target=sym_floordiv]"}) {
    CHECK(text.find(f) != std::string::npos);
  }
  // b - 1 given where aten::mul.Tensor takes a tensor: the Scalar overload.
  CHECK(text.find("aten::mul.Scalar") != std::string::npos);
  // The sizes torch.export recorded, as functions of its symbol.
  const std::string symbol = guard_of(gm, 0).dynamic.at(0).symbol;
  for (const fx::Node* n : gm->graph().nodes()) {
    if (n->name() == "view") {
      REQUIRE(n->tensor_meta() != nullptr);
      REQUIRE(!n->tensor_meta()->symbolic_sizes.empty());
      CHECK(n->tensor_meta()->symbolic_sizes[0].to_string() == "3*" + symbol);
    }
  }
  check_at_shape(gm, "dynamic_sizes_io", 1);
  for (int k = 0; k < 3; ++k) {
    check_at_shape(gm, "dynamic_sizes_io_" + std::to_string(k), 1);
  }
}

TEST_CASE("two .pt2 inputs sharing their dynamic dimensions are held to it") {
  torch::NoGradGuard no_grad;
  fx::GraphModule gm =
      fx::load_exported_program(programs() + "/dynamic_two_inputs.pt2");
  CHECK(guard_of(gm, 0).dynamic.size() == 2);
  CHECK(guard_of(gm, 1).dynamic.size() == 2);
  CHECK(guard_of(gm, 0).dynamic[1].symbol == guard_of(gm, 1).dynamic[1].symbol);
  check_at_shape(gm, "dynamic_two_inputs_io", 2);
  for (int k = 0; k < 3; ++k) {
    check_at_shape(gm, "dynamic_two_inputs_io_" + std::to_string(k), 2);
  }
  // A mask of another length than x's, a batch past 16: refused.
  CHECK_THROWS_AS(gm(torch::randn({2, 5, 8}), torch::rand({2, 6}) > 0.5),
                  fx::GuardError);
  CHECK_THROWS_AS(gm(torch::randn({17, 5, 8}), torch::rand({17, 5}) > 0.5),
                  fx::GuardError);
  fx::GraphModule lowered(gm->copy());
  fx::optimize_for_inference(*lowered);
  for (int k = 0; k < 3; ++k) {
    check_at_shape(lowered, "dynamic_two_inputs_io_" + std::to_string(k), 2,
                   1e-5);
  }
}

TEST_CASE("a dynamic .pt2 program the reader cannot hold is refused by name") {
  const std::string model = "models/model.json";
  auto input_sizes = [](nlohmann::json& j) -> nlohmann::json& {
    return j["graph_module"]["graph"]["tensor_values"]["x"]["sizes"];
  };
  // A symbol without a range.
  CHECK_THROWS_WITH(
      fx::load_exported_program(edited(
          "no_range", model,
          [](nlohmann::json& j) { j["range_constraints"] = nlohmann::json::object(); },
          "dynamic")),
      Catch::Contains("which range_constraints does not bound"));
  // An input dimension derived from another's symbol.
  CHECK_THROWS_WITH(
      fx::load_exported_program(edited(
          "derived", model,
          [&](nlohmann::json& j) {
            nlohmann::json& e = input_sizes(j)[0]["as_expr"]["expr_str"];
            e = "Mul(Integer(2), " + e.get<std::string>() + ")";
          },
          "dynamic")),
      Catch::Contains("derived from others are not read yet"));
  // A symbol whose name is not an identifier (printed and read back as
  // another expression): not read.
  CHECK_THROWS_WITH(
      fx::load_exported_program(edited(
          "bad_symbol", model,
          [&](nlohmann::json& j) {
            input_sizes(j)[0]["as_expr"]["expr_str"] =
                "Symbol('a*b c', positive=True, integer=True)";
          },
          "dynamic")),
      Catch::Contains("a size this reader cannot read"));
  // A size with no hint (data dependent).
  CHECK_THROWS_WITH(
      fx::load_exported_program(edited(
          "no_hint", model,
          [&](nlohmann::json& j) { input_sizes(j)[0]["as_expr"].erase("hint"); },
          "dynamic")),
      Catch::Contains("data dependent"));
  // A runtime assertion.
  CHECK_THROWS_WITH(
      fx::load_exported_program(edited(
          "assertion", model,
          [](nlohmann::json& j) {
            j["graph_module"]["graph"]["nodes"][0]["target"] =
                "torch.ops.aten._assert_scalar.default";
          },
          "dynamic_sizes")),
      Catch::Contains("_assert_scalar") &&
          Catch::Contains("of an argument of kind as_tensor"));
  // A hostile range.
  CHECK_THROWS_WITH(
      fx::load_exported_program(edited(
          "bad_range", model,
          [](nlohmann::json& j) {
            for (auto& r : j["range_constraints"]) {
              r["min_val"] = 10;
              r["max_val"] = 2;
            }
          },
          "dynamic")),
      Catch::Contains("is the range [10, 2]"));
}

TEST_CASE("torch.cond and torch.while_loop read as cond and while_loop "
          "nodes with their bodies as subgraphs") {
  torch::NoGradGuard no_grad;
  fx::GraphModule cond = fx::load_exported_program(programs() + "/cond.pt2");
  CHECK(cond->graph().subgraph("true_graph_0") != nullptr);
  CHECK(cond->graph().subgraph("false_graph_0") != nullptr);
  check_at_shape(cond, "cond_io", 1);
  // Both branches: a * 2 where the sum is positive, a + 1 where it is not.
  const at::Tensor x = torch::rand({3}) + 0.1;
  CHECK(torch::equal(cond(x).toTensor(), x * 2));
  CHECK(torch::equal(cond(-x).toTensor(), -x + 1));
  CHECK(torch::equal(cond(torch::zeros({3})).toTensor(), torch::ones({3})));

  // The buffer the loop body reads is an additional input (export lifts
  // it); the trip count is the data's.
  fx::GraphModule loop = fx::load_exported_program(programs() + "/while_loop.pt2");
  CHECK(loop->graph().subgraphs().size() == 2);
  check_at_shape(loop, "while_loop_io", 1);
  for (float v : {0.5f, 1.0f, 3.0f, 1000.0f}) {
    CAPTURE(v);
    const c10::IValue out = loop(torch::full({3}, v));
    const auto& items = out.toTupleRef().elements();
    int64_t halvings = 0;
    for (float w = v; w > 1; w *= 0.5f) ++halvings;
    CHECK(items[1].toTensor().item<int64_t>() == halvings);
    CHECK(torch::equal(items[0].toTensor(),
                       torch::full({3}, v * std::pow(0.5f, halvings))));
  }
  // Saved and loaded with its bodies.
  std::stringstream file;
  fx::save(loop, file);
  CHECK(fx::load(file)->graph().to_string() == loop->graph().to_string());

  // As ONNX If and Loop, under ONNX Runtime.
  const std::filesystem::path cond_file = onnx_testing::scratch() / "cond.onnx";
  fx::to_onnx(*cond, cond_file.string());
  for (const at::Tensor& input : {x, -x}) {
    onnx_testing::check_against_ort(cond, cond_file, {input});
  }
  const std::filesystem::path loop_file =
      onnx_testing::scratch() / "while_loop.onnx";
  fx::to_onnx(*loop, loop_file.string());
  for (float v : {0.5f, 3.0f, 1000.0f}) {
    onnx_testing::check_against_ort(loop, loop_file, {torch::full({3}, v)});
  }
}

TEST_CASE("scan and map read as scan and map nodes") {
  torch::NoGradGuard no_grad;
  fx::GraphModule rnn = fx::load_exported_program(programs() + "/scan.pt2");
  INFO(rnn->graph());
  CHECK(rnn->graph().subgraphs().size() == 2);
  CHECK(rnn->graph()
            .find_nodes(fx::Opcode::kCallFunction,
                        fx::Target(fx::scan_function()))
            .size() == 1);
  CHECK(rnn->graph()
            .find_nodes(fx::Opcode::kCallFunction,
                        fx::Target(fx::map_function()))
            .size() == 1);
  // Python's output on the same inputs, bitwise.
  check_at_shape(rnn, "scan_io", 2);
  // Saved and loaded with its bodies (the program's shapes are static).
  std::stringstream file;
  fx::save(rnn, file);
  fx::GraphModule loaded = fx::load(file);
  const at::Tensor x = torch::randn({2, 5, 4});
  const at::Tensor h0 = torch::randn({2, 8});
  CHECK(torch::equal(loaded(x, h0).toTensor(), rnn(x, h0).toTensor()));
  // As ONNX Scan, under ONNX Runtime.
  const std::filesystem::path onnx_file =
      onnx_testing::scratch() / "scan.onnx";
  fx::to_onnx(*rnn, onnx_file.string());
  onnx_testing::check_against_ort(rnn, onnx_file, {x, h0});
}

TEST_CASE("what the reader does not read yet is refused by name") {
  // A higher-order operator other than cond, while_loop, scan and map.
  CHECK_THROWS_WITH(
      fx::load_exported_program(edited(
          "associative_scan", "models/model.json",
          [](nlohmann::json& j) {
            j["graph_module"]["graph"]["nodes"][2]["target"] =
                "torch.ops.higher_order.associative_scan";
          },
          "cond")),
      Catch::Contains("torch.ops.higher_order.associative_scan") &&
          Catch::Contains("control flow") && Catch::Contains("not read yet"));
  // A training step's joint graph: its loss as an output.
  CHECK_THROWS_WITH(
      fx::load_exported_program(edited(
          "loss_output", "models/model.json",
          [](nlohmann::json& j) {
            auto& spec = j["graph_module"]["signature"]["output_specs"][0];
            spec["loss_output"] = spec["user_output"];
            spec.erase("user_output");
          })),
      Catch::Contains("output_specs[0]") && Catch::Contains("'loss_output'") &&
          Catch::Contains("joint graph"));
}

// NAME_state.pt: the inputs, then the buffers (by name), as Python's
// ep.module() left them after one call on NAME_io.pt's inputs.
std::vector<at::Tensor> state(const std::string& name) {
  return tensors(name + "_state");
}

TEST_CASE("a functional .pt2 program's buffer mutations update its buffers as Python's did") {
  // run_decompositions: batch norm's statistics and its count come out of
  // the graph as buffer_mutation outputs, copied into the buffers.
  torch::NoGradGuard no_grad;
  if (TORCH_VERSION_MAJOR < 2) {
    // Debian's 1.13 has no _native_batch_norm_legit_functional (2.0's).
    CHECK_THROWS_WITH(fx::load_exported_program(
                          programs() + "/functional_training_batch_norm.pt2"),
                      Catch::Contains("_native_batch_norm_legit_functional") &&
                          Catch::Contains("not an operator this LibTorch registers"));
    return;
  }
  fx::GraphModule gm = fx::load_exported_program(
      programs() + "/functional_training_batch_norm.pt2");
  const std::string text = gm->graph().to_string();
  CAPTURE(text);
  CHECK(text.find("aten::copy_") != std::string::npos);
  const std::vector<at::Tensor> t = io("functional_training_batch_norm");
  const std::vector<at::Tensor> after = state("functional_training_batch_norm");
  REQUIRE(after.size() == 4);
  const at::Tensor before = gm->tensor_attributes().at("bn.running_mean").clone();
  CHECK(as_python_computed(gm(t[0]).toTensor(), t[1]));
  const auto& attributes = gm->tensor_attributes();
  CHECK_FALSE(torch::equal(before, attributes.at("bn.running_mean")));
  CHECK(torch::equal(attributes.at("bn.num_batches_tracked"), after[1]));
  CHECK(as_python_computed(attributes.at("bn.running_mean"), after[2]));
  CHECK(as_python_computed(attributes.at("bn.running_var"), after[3]));
  // Dead code elimination keeps the copies (they write a buffer).
  gm->graph().eliminate_dead_code();
  size_t copies = 0;
  for (const fx::Node* n : gm->graph().nodes()) {
    copies += n->format_node().find("aten::copy_") != std::string::npos;
  }
  CHECK(copies == 3);
}

TEST_CASE("a .pt2 program that mutates its input and a buffer does so as Python's did") {
  // In place in the graph (torch.export's default IR), and as
  // user_input_mutation and buffer_mutation outputs (decomposed).
  torch::NoGradGuard no_grad;
  for (const char* name : {"mutates_input", "functional_mutates_input"}) {
    CAPTURE(name);
    fx::GraphModule gm = fx::load_exported_program(programs() + "/" + name + ".pt2");
    CAPTURE(gm->graph().to_string());
    const std::vector<at::Tensor> t = io(name);
    const std::vector<at::Tensor> after = state(name);
    REQUIRE(after.size() == 2);
    const at::Tensor x = t[0].clone();
    CHECK(as_python_computed(gm(x).toTensor(), t[1]));
    CHECK(torch::equal(x, after[0]));
    CHECK(torch::equal(gm->tensor_attributes().at("calls"), after[1]));
    gm(x);
    CHECK(gm->tensor_attributes().at("calls").item<float>() == 2.0f);
  }
}

TEST_CASE("a .pt2 program's runtime assertions are checked as Python checks them") {
  // torch._check(x.shape[0] % 2 == 0) and != 6, exported with
  // prefer_deferred_runtime_asserts_over_guards: aten._assert_scalar of
  // size comparisons, as fx_guard::check_size.
  torch::NoGradGuard no_grad;
  fx::GraphModule gm = fx::load_exported_program(programs() + "/asserts.pt2");
  const std::string text = gm->graph().to_string();
  CAPTURE(text);
  CHECK(text.find("target=sym_mod]") != std::string::npos);
  CHECK(text.find("fx_guard::check_size") != std::string::npos);
  const std::string symbol = guard_of(gm, 0).dynamic.at(0).symbol;
  check_at_shape(gm, "asserts_io", 1);
  for (int k = 0; k < 3; ++k) check_at_shape(gm, "asserts_io_" + std::to_string(k), 1);
  // The assertion of an even batch is the input's guard too: batches the
  // symbolic passes sample (ShapeProp, the ONNX export) are even.
  CHECK(guard_of(gm, 0).dynamic.at(0).multiple_of == 2);
  auto refuses = [&](fx::GraphModule& m) {
    CHECK_THROWS_WITH(m(torch::randn({3, 3})),
                      Catch::Contains(symbol + " = 3") &&
                          Catch::Contains(symbol + " % 2 == 0"));
    CHECK_THROWS_AS(m(torch::randn({3, 3})), fx::GuardError);
    CHECK_THROWS_WITH(m(torch::randn({6, 3})),
                      Catch::Contains("Ne(" + symbol + ", 6)"));
    // reshape(2, b // 2, 3) asks b // 2 != 1 (Python refuses 2 too).
    CHECK_THROWS_WITH(m(torch::randn({2, 3})),
                      Catch::Contains("Ne(" + symbol + ", 2)"));
    CHECK_THROWS_AS(m(torch::randn({66, 3})), fx::GuardError);
    // The smallest batch the range allows, 0, holds every assertion.
    CHECK(m(torch::randn({0, 3})).toTensor().sizes() == at::IntArrayRef{0, 3});
  };
  refuses(gm);
  // Lowered, saved and loaded: the same checks.
  fx::GraphModule lowered(gm->copy());
  fx::optimize_for_inference(*lowered);
  for (int k = 0; k < 3; ++k) {
    check_at_shape(lowered, "asserts_io_" + std::to_string(k), 1, 1e-5);
  }
  refuses(lowered);
  const std::string path = testdata::test_file("asserts_from_pt2.fx");
  fx::save(gm, path);
  fx::GraphModule again = fx::load(path);
  refuses(again);
  // Generated C++ computes the remainder as Python does, checked.
  CHECK_THAT(gm->code(), Catch::Contains("fx::checked_python_mod("));
  // TorchScript: aten::remainder of ints, the checks as TorchScript's.
  torch::jit::Module scripted = fx::to_torchscript(gm);
  const at::Tensor x8 = tensors("asserts_io_1")[0];
  CHECK(torch::equal(scripted.forward({x8}).toTensor(), tensors("asserts_io_1")[1]));
  CHECK_THROWS_WITH(scripted.forward({torch::randn({6, 3})}),
                    Catch::Contains("Ne(" + symbol + ", 6)"));
  // ONNX: sym_mod as Mod; the checks stated in the file's metadata.
  const std::filesystem::path file = onnx_testing::scratch() / "asserts.onnx";
  fx::to_onnx(*gm, file.string());
  for (int k = 0; k < 3; ++k) {
    onnx_testing::check_against_ort(gm, file, {tensors("asserts_io_" + std::to_string(k))[0]});
  }
}

void check_tokens_and_mask();

TEST_CASE("a .pt2 program of int64 and bool inputs, and one exported with strict=True") {
  torch::NoGradGuard no_grad;
  if (TORCH_VERSION_MAJOR < 2) {
    // 1.13's aten::_assert_tensor_metadata takes no device or layout.
    CHECK_THROWS_WITH(
        fx::load_exported_program(programs() + "/tokens_and_mask.pt2"),
        Catch::Contains("aten::_assert_tensor_metadata has no argument 'device'") &&
            Catch::Contains("in this LibTorch (1.13"));
  } else {
    check_tokens_and_mask();
  }
  // strict=True (TorchDynamo) writes the same kind of program.
  fx::GraphModule strict = fx::load_exported_program(programs() + "/strict_mlp.pt2");
  check_at_shape(strict, "strict_mlp_io", 1);
  for (int k = 0; k < 2; ++k) check_at_shape(strict, "strict_mlp_io_" + std::to_string(k), 1);
}

void check_tokens_and_mask() {
  fx::GraphModule tokens = fx::load_exported_program(programs() + "/tokens_and_mask.pt2");
  CHECK(guard_of(tokens, 0).dtype == at::kLong);
  CHECK(guard_of(tokens, 1).dtype == at::kBool);
  check_at_shape(tokens, "tokens_and_mask_io", 2);
  fx::GraphModule lowered(tokens->copy());
  fx::optimize_for_inference(*lowered);
  const std::filesystem::path file = onnx_testing::scratch() / "tokens_and_mask.onnx";
  fx::to_onnx(*tokens, file.string());
  for (int k = 0; k < 3; ++k) {
    const std::string shape = "tokens_and_mask_io_" + std::to_string(k);
    check_at_shape(tokens, shape, 2);
    check_at_shape(lowered, shape, 2, 1e-5);
    const std::vector<at::Tensor> t = tensors(shape);
    onnx_testing::check_against_ort(tokens, file, {t[0], t[1]});
  }
  // A float mask where the program takes bool: refused.
  CHECK_THROWS_AS(tokens(torch::zeros({2, 5}, at::kLong), torch::zeros({2, 5})),
                  fx::GuardError);
}

TEST_CASE("a training-mode .pt2 program updates its statistics as Python's did") {
  // torch.export's default IR keeps batch norm's in-place update of its
  // running statistics (and num_batches_tracked's add_).
  torch::NoGradGuard no_grad;
  fx::GraphModule gm =
      fx::load_exported_program(programs() + "/training_batch_norm.pt2");
  const std::vector<at::Tensor> t = io("training_batch_norm");
  const at::Tensor before = gm->tensor_attributes().at("bn.running_mean").clone();
  CHECK(as_python_computed(gm(t[0]).toTensor(), t[1]));
  const at::Tensor after = gm->tensor_attributes().at("bn.running_mean");
  CHECK_FALSE(torch::equal(before, after));
  CHECK(gm->tensor_attributes().at("bn.num_batches_tracked").item<int64_t>() == 1);
}

TEST_CASE("bad .pt2 files are refused with what is wrong") {
  CHECK_THROWS_WITH(fx::load_exported_program(testdata::test_file("missing.pt2")),
                    Catch::Contains("missing.pt2"));
  CHECK_THROWS_AS(fx::load_exported_program(write("not_zip.pt2", "hello")),
                  fx::ExportedProgramError);
  CHECK_THROWS_WITH(fx::load_exported_program(write("not_zip.pt2", "hello")),
                    Catch::Contains("not a torch.export.save archive"));
  // A truncated archive, at several lengths.
  const std::string whole = read(programs() + "/mlp.pt2");
  for (size_t keep : {size_t{30}, whole.size() / 2, whole.size() - 10}) {
    CAPTURE(keep);
    CHECK_THROWS_AS(
        fx::load_exported_program(write("cut.pt2", whole.substr(0, keep))),
        fx::ExportedProgramError);
  }
  // A TorchScript file is a zip too, but no exported program.
  torch::jit::Module script("m");
  script.register_parameter("w", torch::ones({2}), false);
  const std::string ts = testdata::test_file("script.pt");
  script.save(ts);
  CHECK_THROWS_WITH(fx::load_exported_program(ts),
                    Catch::Contains("models/model.json"));
}

TEST_CASE("a .pt2 file whose program or weights lie is refused, never read past") {
  using nlohmann::json;
  const std::string weights = "data/weights/model_weights_config.json";
  auto weight_sizes = [](json& j, std::vector<int64_t> sizes) {
    json& meta = j["config"]["linear.weight"]["tensor_meta"];
    meta["sizes"] = json::array();
    for (int64_t s : sizes) meta["sizes"].push_back({{"as_int", s}});
  };
  CHECK_THROWS_WITH(
      fx::load_exported_program(edited("huge", weights, [&](json& j) {
        weight_sizes(j, {int64_t{1} << 41, 4});
      })),
      Catch::Contains("'linear.weight'") && Catch::Contains("2^40"));
  CHECK_THROWS_WITH(
      fx::load_exported_program(edited("short", weights, [&](json& j) {
        weight_sizes(j, {30, 4});
      })),
      Catch::Contains("holds 48 bytes where its sizes and strides need 480"));
  CHECK_THROWS_WITH(
      fx::load_exported_program(edited("stride", weights, [](json& j) {
        j["config"]["linear.weight"]["tensor_meta"]["strides"][0] = {
            {"as_int", int64_t{1} << 62}};
      })),
      Catch::Contains("strides reaching past"));
  CHECK_THROWS_WITH(
      fx::load_exported_program(edited("escape", weights, [](json& j) {
        j["config"]["linear.weight"]["path_name"] = "../models/model.json";
      })),
      Catch::Contains("outside its directory"));
  const std::string model = "models/model.json";
  CHECK_THROWS_WITH(
      fx::load_exported_program(edited("version", model, [](json& j) {
        j["schema_version"]["major"] = 9;
      })),
      Catch::Contains("schema version 9."));
  CHECK_THROWS_WITH(
      fx::load_exported_program(edited("dangling", model, [](json& j) {
        j["graph_module"]["graph"]["nodes"][0]["inputs"][0]["arg"]
         ["as_tensor"]["name"] = "nowhere";
      })),
      Catch::Contains("names 'nowhere', which no input or earlier node defines"));
  CHECK_THROWS_WITH(
      fx::load_exported_program(edited("not_json", model, [](json& j) {
        j = "just a string";
      })),
      Catch::Contains("has no field 'schema_version'"));
  CHECK_THROWS_WITH(
      fx::load_exported_program(edited("foreign", model, [](json& j) {
        j["graph_module"]["graph"]["nodes"][0]["target"] =
            "torch.ops.mylib.custom.default";
      })),
      Catch::Contains("outside aten"));
  // Unknown fields are ignored.
  torch::NoGradGuard no_grad;
  fx::GraphModule gm = fx::load_exported_program(
      edited("extra", model, [](json& j) { j["a_field_of_later"] = {1, 2}; }));
  const std::vector<at::Tensor> t = io("mlp");
  CHECK(as_python_computed(gm(t[0]).toTensor(), t[1]));
}

TEST_CASE("a dynamic .pt2 program exports to ONNX that runs at every shape") {
  torch::NoGradGuard no_grad;
  for (const auto& [name, inputs] :
       std::vector<std::pair<std::string, size_t>>{{"dynamic", 1},
                                                   {"dynamic_sizes", 1}}) {
    CAPTURE(name);
    fx::GraphModule gm = fx::load_exported_program(programs() + "/" + name + ".pt2");
    const std::filesystem::path file = onnx_testing::scratch() / (name + ".onnx");
    fx::to_onnx(*gm, file.string());
    // One file, the example's shape and the others, against ours (itself
    // bitwise Python's).
    for (int k = 0; k < 3; ++k) {
      const std::vector<at::Tensor> t =
          tensors(name + "_io_" + std::to_string(k));
      const std::vector<c10::IValue> in(t.begin(), t.begin() + inputs);
      onnx_testing::check_against_ort(gm, file, in);
    }
  }
}

TEST_CASE("exported models run as in Python at every shape, lowered and in ONNX") {
  torch::NoGradGuard no_grad;
  // A BERT-style encoder and a GPT-style decoder (dynamic batch and
  // length), an LSTM and a MobileNet-style block (dynamic batch).
  // Debian's 1.13 rounds otherwise, and has no scaled_dot_product_attention
  // (torch 2.0's): there the transformers are refused by name.
  const bool same_torch = TORCH_VERSION_MAJOR >= 2;
  const double same = same_torch ? 1e-6 : 1e-5;
  for (const char* name : {"encoder", "gpt", "lstm", "mobile_block"}) {
    CAPTURE(name);
    const std::string path = programs() + "/" + name + ".pt2";
    if (!same_torch && (std::string(name) == "encoder" || std::string(name) == "gpt")) {
      CHECK_THROWS_WITH(fx::load_exported_program(path),
                        Catch::Contains("scaled_dot_product_attention"));
      continue;
    }
    fx::GraphModule gm = fx::load_exported_program(path);
    CHECK_FALSE(guard_of(gm, 0).dynamic.empty());
    // The same aten kernels as Python's program.module(): equal, but for
    // a rounding at one shape of the encoder's (2.4e-7 at its export
    // shape; bitwise at the three others, and for the others at all four).
    check_at_shape(gm, std::string(name) + "_io", 1, same);
    fx::GraphModule lowered(gm->copy());
    const fx::InferenceReport report = fx::optimize_for_inference(*lowered);
    CAPTURE(report.to_string());
    CHECK(report.linear + report.convolutions + report.recurrent > 0);
    const std::filesystem::path file =
        onnx_testing::scratch() / (std::string(name) + "_dynamic.onnx");
    fx::to_onnx(*gm, file.string());
    for (int k = 0; k < 3; ++k) {
      const std::string shape = std::string(name) + "_io_" + std::to_string(k);
      check_at_shape(gm, shape, 1, same);
      check_at_shape(lowered, shape, 1, 1e-5);
      const std::vector<at::Tensor> t = tensors(shape);
      onnx_testing::check_against_ort(gm, file, {t[0]});
    }
  }
}

