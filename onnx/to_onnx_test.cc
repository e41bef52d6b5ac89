// fx::to_onnx on the zoo: every exported model passes ONNX's checker with
// full shape inference (to_onnx runs it; Python's checker is asked too),
// and ONNX Runtime computes what the GraphModule computes, within 1e-5 of
// the output's largest magnitude. What does not map is refused by name,
// and nothing is written.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <onnx/onnx_pb.h>
#include <torch/script.h>
#include <torch/torch.h>

#include "fx/fx.h"
#include "fx/torchscript/torchscript.h"
#include "interpreter/shape_prop.h"
#include "lowering/operators.h"
#include "passes/operator_families.h"
#include "lowering/onednn_ops.h"
#include "lowering/optimize_for_inference.h"
#include "models/zoo.h"
#include "testdata/codegen_models.h"
#include "testdata/excited_blocks.h"
#include "testdata/onnx_runtime.h"
#include "testdata/recurrent_scan.h"
#include "testdata/test_helpers.h"
#include "onnx/to_onnx.h"
#include "passes/cost_model.h"
#include "passes/typed_attributes.h"
#include "quantization/numeric_suite.h"
#include "quantization/qconfig.h"
#include "quantization/quantize_fx.h"
#include "third_party/catch.h"

namespace {

namespace fs = std::filesystem;
using onnx_testing::check_against_ort;
using onnx_testing::scratch;

// The op types of an exported file's nodes, in order.
std::vector<std::string> exported_ops(const fs::path& file) {
  onnx::ModelProto proto;
  std::ifstream in(file, std::ios::binary);
  REQUIRE(proto.ParseFromIstream(&in));
  std::vector<std::string> ops;
  for (const auto& node : proto.graph().node()) ops.push_back(node.op_type());
  return ops;
}

int64_t count_of(const std::vector<std::string>& ops, const char* op) {
  return std::count(ops.begin(), ops.end(), op);
}

std::string joined(const std::vector<std::string>& ops) {
  std::string out;
  for (const std::string& op : ops) out += op + " ";
  return out;
}

}  // namespace

TEST_CASE("zoo models export to ONNX and run under ONNX Runtime as the GraphModule") {
  for (const char* name :
       {"mlp", "lenet", "resnet18", "mobilenet_v2", "unet", "resnet50",
        "transformer_encoder", "lstm_tagger"}) {
    INFO(name);
    models::ZooModel model = models::make_zoo_model(name);
    fx::GraphModule gm = models::trace_zoo_model(model);
    const fs::path file = scratch() / (std::string(name) + ".onnx");
    fx::to_onnx(*gm, file.string());
    REQUIRE(fs::file_size(file) > 0);

    onnx::ModelProto proto;
    std::ifstream in(file, std::ios::binary);
    REQUIRE(proto.ParseFromIstream(&in));
    CHECK(proto.opset_import(0).version() == 17);
    CHECK(proto.graph().input(0).name() == gm->graph().find_nodes(fx::Opcode::kPlaceholder)[0]->name());
    CHECK(proto.graph().output(0).name() ==
          (model.forward(model.example_inputs).isTuple() ? "output_0" : "output"));
    check_against_ort(gm, file, model.example_inputs);
  }
}

TEST_CASE("cond and while_loop export as ONNX If and Loop, run by ONNX Runtime") {
  // A branch, a loop and a branch in the loop's body (the generated-code
  // test's model).
  fx::codegen::Model model = testdata::control_flow_model();
  model.module->eval();
  fx::GraphModule gm =
      fx::symbolic_trace(model.module, model.forward, {torch::rand({2, 4})});
  const fs::path file = scratch() / "control_flow.onnx";
  fx::to_onnx(*gm, file.string());
  const std::vector<std::string> ops = exported_ops(file);
  CHECK(count_of(ops, "If") == 1);
  CHECK(count_of(ops, "Loop") == 1);
  // Both branches, zero to a dozen iterations, as the data asks.
  for (float scale : {0.1f, 5.0f, 3000.0f}) {
    for (float sign : {1.0f, -1.0f}) {
      INFO("scale " << scale * sign);
      check_against_ort(gm, file, {torch::rand({2, 4}) * scale * sign});
    }
  }
  // A body that writes its input in place is refused (the graph outside
  // would see the write; ONNX values cannot change).
  std::unique_ptr<fx::Graph> writes = fx::parse_graph(R"(graph():
    %x : [#users=2] = placeholder[target=x]
    %sum : [#users=1] = call_function[target=aten::sum](args = (%x,), kwargs = {})
    %true_graph_0 : [#users=1] = get_attr[target=true_graph_0]
    %false_graph_0 : [#users=1] = get_attr[target=false_graph_0]
    %cond : [#users=1] = call_function[target=cond](args = (%sum, %true_graph_0, %false_graph_0, [%x]), kwargs = {})
    %getitem : [#users=1] = call_function[target=getitem](args = (%cond, 0), kwargs = {})
    return getitem

false_graph_0 = graph():
    %x : [#users=1] = placeholder[target=x]
    return (x,)

true_graph_0 = graph():
    %x : [#users=1] = placeholder[target=x]
    %relu_ : [#users=1] = call_function[target=aten::relu_](args = (%x,), kwargs = {})
    return (relu_,))");
  fx::GraphModule writer(std::move(writes), fx::Attributes{});
  fx::ShapeProp(writer).propagate({torch::randn({3})});
  CHECK_THROWS_WITH(fx::to_onnx_string(*writer),
                    Catch::Contains("an input of its body of control flow, in "
                                    "place"));

  // A .pt2-style graph without metadata on the node is refused by name.
  std::unique_ptr<fx::Graph> g = fx::parse_graph(gm->graph().to_string());
  fx::GraphModule bare(model.module, std::move(g));
  CHECK_THROWS_WITH(fx::to_onnx_string(*bare),
                    Catch::Contains("has no tensor metadata"));

}

namespace {


}  // namespace

TEST_CASE("scan and map export as ONNX Scan, run by ONNX Runtime") {
  torch::manual_seed(0);
  testdata::Recurrent model;
  model->eval();
  torch::NoGradGuard no_grad;
  fx::GraphModule gm = fx::symbolic_trace(model, torch::randn({2, 5, 4}),
                                          torch::zeros({2, 8}));
  const fs::path file = scratch() / "scan.onnx";
  fx::to_onnx(*gm, file.string());
  CHECK(count_of(exported_ops(file), "Scan") == 2);
  for (int i = 0; i < 3; ++i) {
    check_against_ort(gm, file, {torch::randn({2, 5, 4}), torch::randn({2, 8})});
  }
}

TEST_CASE("unfolded, every parameter is an initializer named by its path") {
  models::ZooModel model = models::make_zoo_model("resnet18");
  fx::GraphModule gm = models::trace_zoo_model(model);
  fx::OnnxOptions options;
  options.fold = false;
  onnx::ModelProto proto;
  REQUIRE(proto.ParseFromString(fx::to_onnx_string(*gm, options)));
  size_t parameters = 0, batch_norms = 0;
  for (const auto& init : proto.graph().initializer()) {
    parameters += gm->named_parameters().contains(init.name());
  }
  for (const auto& node : proto.graph().node()) {
    batch_norms += node.op_type() == "BatchNormalization";
  }
  CHECK(parameters == gm->named_parameters().size());
  CHECK(batch_norms == 20);
  // Folded (the default), the batch norms are in the convolutions.
  REQUIRE(proto.ParseFromString(fx::to_onnx_string(*gm)));
  for (const auto& node : proto.graph().node()) {
    CHECK(node.op_type() != "BatchNormalization");
  }
  const fs::path file = scratch() / "resnet18_unfolded.onnx";
  fx::to_onnx(*gm, file.string(), options);
  check_against_ort(gm, file, model.example_inputs);
}

TEST_CASE("every fx_onednn operator a graph holds is priced and exports") {
  // Each is declared once (lowering/operators.def); the lowering registers
  // their schemas (optimize_for_inference links it). The packing operators
  // run only in init steps, which are neither priced nor exported (the
  // export unpacks the weights: unpack_weight).
  std::map<std::string, fx::OperatorFamilyInfo> families;
  for (const auto& [name, info] : fx::operator_families()) {
    families.emplace(name, info);
  }
  std::set<std::string> declared;
  for (const fx::onednn::OperatorDeclaration& op :
       fx::onednn::operator_declarations()) {
    CAPTURE(op.name);
    declared.insert(op.name);
    // Its traits in the table of operator families.
    REQUIRE(families.count(op.name) > 0);
    CHECK(families.at(op.name).family == fx::OperatorFamily::kLowered);
    CHECK(families.at(op.name).traits == op.traits);
    const auto schema =
        c10::Dispatcher::singleton().findSchema({op.name, ""});
    REQUIRE(schema.has_value());
    CHECK(op.schema.rfind(op.name.substr(11) + "(", 0) == 0);
    CHECK(fx::is_priced(op.name) == !op.init_step);
    CHECK(fx::has_onnx_mapping(op.name) == !op.init_step);
    if (!op.priced_as.empty()) CHECK(fx::is_priced(op.priced_as));
  }
  CHECK(declared.size() == 29);
  // And nothing registered in fx_onednn goes undeclared.
  for (const c10::OperatorName& name :
       c10::Dispatcher::singleton().getAllOpNames()) {
    if (name.name.rfind("fx_onednn::", 0) != 0) continue;
    CAPTURE(name.name);
    CHECK(declared.count(name.name) > 0);
  }
  CHECK_FALSE(fx::is_priced("fx_onednn::no_such_op"));
  CHECK(fx::is_priced("aten::conv2d"));
}

TEST_CASE("the export's passes are a pipeline of the steps a graph needs") {
  models::ZooModel model = models::make_zoo_model("resnet18");
  fx::GraphModule gm = models::trace_zoo_model(model);
  CHECK(fx::to_string(fx::onnx_export_pipeline(*gm).steps) ==
        "fuse_conv_bn,fold_constants{writes=true},eliminate_dead_code");
  fx::OnnxOptions unfolded;
  unfolded.fold = false;
  CHECK(fx::onnx_export_pipeline(*gm, unfolded).steps.empty());
  // A graph that computes sizes, of fixed shapes (a TorchScript file's
  // size arithmetic): specialized first.
  fx::GraphModule sized = fx::parse_graph_module(
      "graph():\n"
      "    %x : f32[2, 3, 4] = placeholder[target=x]\n"
      "    %sym_size = call_function[target=sym_size](args = (%x, 0), kwargs = {})\n"
      "    %view : f32[2, 12] = call_function[target=aten::view](args = (%x, [%sym_size, -1]), kwargs = {})\n"
      "    return view\n");
  CHECK(fx::to_string(fx::onnx_export_pipeline(*sized, unfolded).steps) ==
        "specialize_sizes");
  const std::optional<fx::PassPipeline> registered =
      fx::pass_pipeline_named("to_onnx");
  REQUIRE(registered.has_value());
  CHECK(fx::to_string(registered->steps) ==
        "decompose_attention,specialize_sizes,fuse_conv_bn,"
        "fold_constants{writes=true},eliminate_dead_code");
}

namespace {

// Two bidirectional batch-first LSTM layers, then two GRU layers.
struct RecurrentNetImpl : torch::nn::Module {
  torch::nn::LSTM lstm{register_module(
      "lstm", torch::nn::LSTM(torch::nn::LSTMOptions(8, 16).num_layers(2)
                                  .bidirectional(true).batch_first(true)))};
  torch::nn::GRU gru{register_module(
      "gru", torch::nn::GRU(torch::nn::GRUOptions(32, 8).num_layers(2)
                                .batch_first(true)))};
  std::tuple<at::Tensor, at::Tensor, at::Tensor> forward(at::Tensor x) {
    auto [y, state] = lstm->forward(x);
    auto [z, h] = gru->forward(y);
    return {z, std::get<0>(state) + 1, h};
  }
};
TORCH_MODULE(RecurrentNet);

}  // namespace

TEST_CASE("C++ LSTM and GRU layers (stacked, bidirectional, batch first) export") {
  RecurrentNet net;
  net->eval();
  at::Tensor x = torch::randn({2, 5, 8});
  fx::GraphModule gm = fx::symbolic_trace(net, x);
  const fs::path file = scratch() / "recurrent.onnx";
  fx::to_onnx(*gm, file.string());
  check_against_ort(gm, file, {x});
  // Lowered (fx_onednn::lstm in both directions, fx_onednn::gru): the same
  // ONNX layers, aten's gates and biases restored.
  fx::GraphModule lowered(gm->copy());
  REQUIRE(fx::optimize_for_inference(*lowered).recurrent == 2);
  const fs::path lowered_file = scratch() / "recurrent_lowered.onnx";
  fx::to_onnx(*lowered, lowered_file.string());
  check_against_ort(lowered, lowered_file, {x});
}

TEST_CASE("graphs lowered to oneDNN export as the operators they replaced") {
  // Each fx_onednn operator as the standard ones: convolutions with their
  // residual adds and activations (resnet18, mobilenet_v2's clip, the
  // U-Net's transposed convolutions), max pooling, linear layers and
  // attention's matmuls (the TransformerEncoder), an LSTM; the weights
  // unpacked, so the file holds what the unlowered export holds.
  for (const char* name : {"resnet18", "mobilenet_v2", "unet",
                           "transformer_encoder", "lstm_tagger"}) {
    INFO(name);
    models::ZooModel model = models::make_zoo_model(name);
    fx::GraphModule gm = models::trace_zoo_model(model);
    fx::GraphModule lowered(gm->copy());
    const fx::InferenceReport report = fx::optimize_for_inference(*lowered);
    REQUIRE(report.convolutions + report.linear + report.recurrent > 0);
    const fs::path file = scratch() / (std::string(name) + "_lowered.onnx");
    fx::to_onnx(*lowered, file.string());
    onnx::ModelProto proto;
    std::ifstream in(file, std::ios::binary);
    REQUIRE(proto.ParseFromIstream(&in));
    for (const auto& node : proto.graph().node()) CHECK(node.domain().empty());
    check_against_ort(lowered, file, model.example_inputs);
    // As large as the unlowered graph's export, within its layout's
    // rounding (packed weights are not exported as they are stored).
    const std::string plain = fx::to_onnx_string(*gm);
    CHECK(std::abs(static_cast<double>(fs::file_size(file)) -
                   static_cast<double>(plain.size())) <
          0.01 * static_cast<double>(plain.size()));
  }
}

namespace {

// A DenseNet layer: batch norm and relu before the convolution, on the
// concatenation so far (fx_onednn::batch_norm once lowered).
struct PreActivationImpl : torch::nn::Module {
  PreActivationImpl() {
    stem = register_module("stem", torch::nn::Conv2d(
        torch::nn::Conv2dOptions(3, 8, 3).padding(1)));
    norm = register_module("norm", torch::nn::BatchNorm2d(8));
    conv = register_module("conv", torch::nn::Conv2d(
        torch::nn::Conv2dOptions(8, 4, 3).padding(1)));
  }
  at::Tensor forward(at::Tensor x) {
    at::Tensor f = stem(x);
    return torch::cat({f, conv(torch::relu(norm(f)))}, 1);
  }
  torch::nn::Conv2d stem{nullptr}, conv{nullptr};
  torch::nn::BatchNorm2d norm{nullptr};
};
TORCH_MODULE(PreActivation);

}  // namespace

TEST_CASE("a lowered batch norm exports as BatchNormalization and Relu") {
  torch::manual_seed(2);
  PreActivation model;
  {
    torch::NoGradGuard no_grad;
    model->norm->running_mean.normal_();
    model->norm->running_var.uniform_(0.5, 2.0);
    model->norm->weight.normal_();
  }
  model->eval();
  const at::Tensor x = torch::randn({1, 3, 10, 10});
  fx::GraphModule gm = fx::symbolic_trace(model.ptr(), x);
  fx::GraphModule lowered(gm->copy());
  REQUIRE(fx::optimize_for_inference(*lowered).batch_norms == 1);
  const fs::path file = scratch() / "pre_activation_lowered.onnx";
  fx::to_onnx(*lowered, file.string());
  const std::vector<std::string> ops = exported_ops(file);
  INFO(joined(ops));
  CHECK(count_of(ops, "BatchNormalization") == 1);
  CHECK(count_of(ops, "Relu") == 1);
  check_against_ort(lowered, file, {x});
}

namespace {

// A dense block: each layer reads the concatenation of all outputs so far
// (one buffer once lowered, each concatenation a view of it).
struct DenseBlockImpl : torch::nn::Module {
  DenseBlockImpl() {
    stem = register_module("stem", torch::nn::Conv2d(
        torch::nn::Conv2dOptions(3, 8, 3).padding(1)));
    a = register_module("a", torch::nn::Conv2d(
        torch::nn::Conv2dOptions(8, 4, 3).padding(1)));
    b = register_module("b", torch::nn::Conv2d(
        torch::nn::Conv2dOptions(12, 4, 3).padding(1)));
  }
  at::Tensor forward(at::Tensor x) {
    const at::Tensor f = stem(x);
    const at::Tensor g = a(torch::relu(torch::cat({f}, 1)));
    const at::Tensor h = b(torch::relu(torch::cat({f, g}, 1)));
    return torch::cat({f, g, h}, 1);
  }
  torch::nn::Conv2d stem{nullptr}, a{nullptr}, b{nullptr};
};
TORCH_MODULE(DenseBlock);

}  // namespace

TEST_CASE("a lowered concatenation buffer exports as Concat") {
  torch::manual_seed(9);
  DenseBlock model;
  model->eval();
  const at::Tensor x = torch::randn({2, 3, 7, 7});
  fx::GraphModule gm = fx::symbolic_trace(model.ptr(), x);
  fx::GraphModule lowered(gm->copy());
  REQUIRE(fx::optimize_for_inference(*lowered).concatenations == 3);
  const fs::path file = scratch() / "dense_block_lowered.onnx";
  fx::to_onnx(*lowered, file.string());
  const std::vector<std::string> ops = exported_ops(file);
  INFO(joined(ops));
  CHECK(count_of(ops, "Concat") == 2);
  check_against_ort(lowered, file, {x});
}

namespace {

// MobileNetV3's and EfficientNet's squeeze-excitation after a convolution
// (fx_onednn::squeeze_excite once lowered).
struct ExcitedImpl : torch::nn::Module {
  ExcitedImpl() {
    stem = register_module("stem", torch::nn::Conv2d(
        torch::nn::Conv2dOptions(3, 16, 3).padding(1)));
    fc1 = register_module("fc1", torch::nn::Conv2d(
        torch::nn::Conv2dOptions(16, 4, 1)));
    fc2 = register_module("fc2", torch::nn::Conv2d(
        torch::nn::Conv2dOptions(4, 16, 1)));
    fc3 = register_module("fc3", torch::nn::Conv2d(
        torch::nn::Conv2dOptions(16, 4, 1)));
    fc4 = register_module("fc4", torch::nn::Conv2d(
        torch::nn::Conv2dOptions(4, 16, 1)));
  }
  at::Tensor forward(at::Tensor x) {
    at::Tensor y = torch::relu(stem(x));
    y = torch::hardsigmoid(
            fc2(torch::relu(fc1(torch::adaptive_avg_pool2d(y, {1, 1}))))) * y;
    return torch::sigmoid(
               fc4(torch::silu(fc3(torch::adaptive_avg_pool2d(y, {1, 1}))))) * y;
  }
  torch::nn::Conv2d stem{nullptr}, fc1{nullptr}, fc2{nullptr}, fc3{nullptr},
      fc4{nullptr};
};
TORCH_MODULE(Excited);

}  // namespace

TEST_CASE("a lowered squeeze-excitation block exports as the block it replaced") {
  torch::manual_seed(4);
  Excited model;
  model->eval();
  const at::Tensor x = torch::randn({2, 3, 9, 9});
  fx::GraphModule gm = fx::symbolic_trace(model.ptr(), x);
  fx::GraphModule lowered(gm->copy());
  REQUIRE(fx::optimize_for_inference(*lowered).squeeze_excites == 2);
  const fs::path file = scratch() / "excited_lowered.onnx";
  fx::to_onnx(*lowered, file.string());
  const std::vector<std::string> ops = exported_ops(file);
  INFO(joined(ops));
  CHECK(count_of(ops, "GlobalAveragePool") == 2);
  CHECK(count_of(ops, "Conv") == 5);
  CHECK(count_of(ops, "HardSigmoid") == 1);
  CHECK(count_of(ops, "Mul") >= 2);
  check_against_ort(lowered, file, {x});
}

namespace {

// MaxViT's relative attention: einsum with spaces and capitals.
struct EinsumImpl : torch::nn::Module {
  at::Tensor forward(at::Tensor q, at::Tensor k) {
    at::Tensor scores =
        torch::einsum("B H I D, B H J D -> B H I J", {q, k}).softmax(-1);
    // Implicit output: the subscripts seen once, in alphabetical order
    // ("hjz,hiz": ij, where the order first seen would give ji).
    return scores + torch::einsum("hjz,hiz", {k[0], q[0]}).unsqueeze(0);
  }
};
TORCH_MODULE(Einsum);

}  // namespace

TEST_CASE("einsum exports as ONNX's Einsum") {
  Einsum model;
  model->eval();
  const at::Tensor q = torch::randn({2, 3, 5, 4}), k = torch::randn({2, 3, 6, 4});
  const std::vector<c10::IValue> inputs = {q, k};
  fx::GraphModule gm = fx::symbolic_trace(model, q, k);
  const fs::path file = scratch() / "einsum.onnx";
  fx::to_onnx(*gm, file.string());
  check_against_ort(gm, file, inputs);
}

TEST_CASE("PyTorch's fused transformer ops export as their parts") {
  // A BERT-style encoder of nn.TransformerEncoderLayer traced in eval mode
  // without autograd: its TorchScript file holds
  // aten::_transformer_encoder_layer_fwd, split for the export.
  const std::string dir = scratch().string();
  REQUIRE(std::system(("/usr/bin/python3 testdata/onnx_runtime_models.py " + dir +
                       " bert_encoder:1 > /dev/null 2>&1")
                          .c_str()) == 0);
  torch::jit::Module script = torch::jit::load(dir + "/bert_encoder.pt");
  script.eval();
  torch::manual_seed(0);
  const std::vector<c10::IValue> inputs = {torch::randint(1000, {1, 128}, torch::kLong)};
  fx::GraphModule gm = fx::symbolic_trace(script, inputs);
  REQUIRE(gm->graph().to_string().find("aten::_transformer_encoder_layer_fwd") !=
          std::string::npos);
  const fs::path file = scratch() / "bert_encoder.onnx";
  fx::to_onnx(*gm, file.string());
  check_against_ort(gm, file, inputs);
  // Lowered, the same: its parts on oneDNN, exported as the standard ones
  // (each layer's two residual adds, fused into its linear layers, as Add).
  fx::GraphModule lowered(gm->copy());
  const fx::InferenceReport report = fx::optimize_for_inference(*lowered);
  REQUIRE(report.attention == 4);
  CHECK(report.fused_sums == 8);
  const fs::path lowered_file = scratch() / "bert_encoder_lowered.onnx";
  fx::to_onnx(*lowered, lowered_file.string());
  check_against_ort(lowered, lowered_file, inputs);
  // Traced with a dynamic batch and length, the file's own size arithmetic
  // exports as ONNX's: one model for every shape in range.
  fx::TraceOptions options;
  options.dynamic = {{.input = 0, .dim = 0, .symbol = "B", .max = 8},
                     {.input = 0, .dim = 1, .symbol = "T", .max = 128}};
  fx::GraphModule dynamic = fx::symbolic_trace(script, inputs, options);
  const fs::path dynamic_file = scratch() / "bert_encoder_dynamic.onnx";
  fx::to_onnx(*dynamic, dynamic_file.string());
  for (auto [b, t] : {std::pair<int64_t, int64_t>{3, 64}, {1, 128}}) {
    INFO(b << " x " << t);
    check_against_ort(dynamic, dynamic_file,
                      {torch::randint(1000, {b, t}, torch::kLong)});
  }
}

namespace {

// An upsampling decoder: grouped transposed convolutions and activations.
struct DecoderImpl : torch::nn::Module {
  torch::nn::ConvTranspose2d up1{register_module(
      "up1", torch::nn::ConvTranspose2d(
                 torch::nn::ConvTranspose2dOptions(8, 6, 4).stride(2).padding(1).groups(2)))};
  torch::nn::ConvTranspose2d up2{register_module(
      "up2", torch::nn::ConvTranspose2d(
                 torch::nn::ConvTranspose2dOptions(6, 3, 3).stride(2).output_padding(1)))};
  at::Tensor forward(at::Tensor x) {
    return torch::sigmoid(up2(torch::relu(up1(x))));
  }
};
TORCH_MODULE(Decoder);

// MobileNetV3's squeeze-excitation: a gate of hardsigmoid.
struct SqueezeExciteImpl : torch::nn::Module {
  torch::nn::Conv2d conv{register_module(
      "conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(4, 8, 3).padding(1)))};
  torch::nn::Conv2d fc1{register_module("fc1", torch::nn::Conv2d(8, 2, 1))};
  torch::nn::Conv2d fc2{register_module("fc2", torch::nn::Conv2d(2, 8, 1))};
  at::Tensor forward(at::Tensor x) {
    at::Tensor y = torch::hardswish(conv(x));
    at::Tensor s = torch::adaptive_avg_pool2d(y, {1, 1});
    return y * torch::hardsigmoid(fc2(torch::relu(fc1(s))));
  }
};
TORCH_MODULE(SqueezeExcite);

}  // namespace

TEST_CASE("lowered transposed convolutions export with their activations") {
  Decoder decoder;
  decoder->eval();
  at::Tensor x = torch::randn({2, 8, 5, 5});
  fx::GraphModule gm = fx::symbolic_trace(decoder, x);
  fx::GraphModule lowered(gm->copy());
  fx::optimize_for_inference(*lowered);
  REQUIRE(lowered->graph().to_string().find("fx_onednn::conv_transpose") !=
          std::string::npos);
  const fs::path file = scratch() / "decoder_lowered.onnx";
  fx::to_onnx(*lowered, file.string());
  check_against_ort(lowered, file, {x});
}

TEST_CASE("a squeeze-excitation's convolutions export their fused hardsigmoid gate") {
  SqueezeExcite se;
  se->eval();
  at::Tensor x = torch::randn({2, 4, 6, 6});
  fx::GraphModule gm = fx::symbolic_trace(se, x);
  fx::GraphModule lowered(gm->copy());
  fx::InferenceOptions options;
  options.decision = fx::InferenceOptions::Decision::kAll;
  // The block's convolutions each (fused whole, it exports as below).
  options.lower_squeeze_excite = false;
  REQUIRE(fx::optimize_for_inference(*lowered, options).fused_activations ==
          3);
  const std::string text = lowered->graph().to_string();
  CAPTURE(text);
  REQUIRE(text.find("aten::hardsigmoid") == std::string::npos);
  REQUIRE(text.find("'hardsigmoid', 0.0, 0.0") != std::string::npos);
  const at::Tensor want = gm(x).toTensor();
  CHECK((lowered(x).toTensor() - want).abs().max().item<double>() < 1e-5);
  const fs::path file = scratch() / "squeeze_excite_lowered.onnx";
  fx::to_onnx(*lowered, file.string());
  check_against_ort(lowered, file, {x});
}

TEST_CASE("lowered GRU layers export with aten's gates and biases restored") {
  torch::nn::GRU gru(torch::nn::GRUOptions(8, 16).num_layers(2));
  gru->eval();
  at::Tensor x = torch::randn({5, 3, 8});
  fx::GraphModule gm = fx::symbolic_trace(gru, x);
  fx::GraphModule lowered(gm->copy());
  REQUIRE(fx::optimize_for_inference(*lowered).recurrent == 1);
  const fs::path file = scratch() / "gru_lowered.onnx";
  fx::to_onnx(*lowered, file.string());
  check_against_ort(lowered, file, {x});
}

namespace {

// A GPT-style block: causal self-attention written by hand (a mask buffer,
// masked_fill, softmax), layer norm, a residual, GELU and a where.
struct CausalBlockImpl : torch::nn::Module {
  static constexpr int64_t kHeads = 4, kWidth = 32;
  torch::nn::Embedding tokens{register_module("tokens", torch::nn::Embedding(100, kWidth))};
  torch::nn::LayerNorm norm{register_module(
      "norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kWidth})))};
  torch::nn::Linear qkv{register_module("qkv", torch::nn::Linear(kWidth, 3 * kWidth))};
  torch::nn::Linear proj{register_module("proj", torch::nn::Linear(kWidth, kWidth))};
  at::Tensor future{register_buffer("future", torch::ones({16, 16}).triu(1).to(torch::kBool))};

  at::Tensor forward(at::Tensor ids) {
    using torch::indexing::Slice;
    const int64_t batch = ids.size(0), length = ids.size(1);
    at::Tensor x = norm(tokens(ids));
    std::vector<at::Tensor> parts = qkv(x).chunk(3, -1);
    auto heads = [&](const at::Tensor& t) {
      return t.view({batch, length, kHeads, kWidth / kHeads}).transpose(1, 2);
    };
    at::Tensor scores = heads(parts[0]).matmul(heads(parts[1]).transpose(-2, -1)) /
                        std::sqrt(static_cast<double>(kWidth / kHeads));
    scores = scores.masked_fill(future.index({Slice(0, length), Slice(0, length)}),
                                -std::numeric_limits<float>::infinity());
    at::Tensor y = torch::softmax(scores, -1).matmul(heads(parts[2]));
    y = proj(y.transpose(1, 2).contiguous().view({batch, length, kWidth})) + x;
    y = torch::gelu(y);
    return torch::where(y > 0, y, y * 0.1);
  }
};
TORCH_MODULE(CausalBlock);

}  // namespace

TEST_CASE("hand-written causal attention (mask, masked_fill, where) exports") {
  CausalBlock block;
  block->eval();
  at::Tensor ids = torch::randint(100, {2, 12}, torch::kLong);
  fx::GraphModule gm = fx::symbolic_trace(block, ids);
  const fs::path file = scratch() / "causal.onnx";
  fx::to_onnx(*gm, file.string());
  check_against_ort(gm, file, {ids});
}


TEST_CASE("int8 modules export in QDQ form, and ONNX Runtime's int8 agrees with ours") {
  for (const std::string engine : {"onednn", "qnnpack"}) {
    fx::set_quantized_engine(engine);
    for (const char* name : {"lenet", "resnet18", "mobilenet_v2"}) {
      INFO(engine << " " << name);
      models::ZooModel model = models::make_zoo_model(name);
      fx::GraphModule gm = models::trace_zoo_model(model);
      fx::GraphModule prepared =
          fx::prepare_fx(gm, fx::get_default_qconfig_mapping(engine));
      {
        torch::NoGradGuard no_grad;
        torch::manual_seed(1);
        const at::Tensor x = model.example_inputs[0].toTensor();
        for (int i = 0; i < 4; ++i) prepared->forward({torch::randn_like(x)});
        prepared->forward(model.example_inputs);
      }
      fx::GraphModule int8 = fx::convert_fx(prepared);
      const fs::path file = scratch() / (engine + "_" + name + "_int8.onnx");
      fx::to_onnx(*int8, file.string());

      onnx::ModelProto proto;
      std::ifstream in(file, std::ios::binary);
      REQUIRE(proto.ParseFromIstream(&in));
      size_t quantize = 0, dequantize = 0, int8_weights = 0;
      for (const auto& node : proto.graph().node()) {
        quantize += node.op_type() == "QuantizeLinear";
        dequantize += node.op_type() == "DequantizeLinear";
      }
      for (const auto& init : proto.graph().initializer()) {
        int8_weights += init.data_type() == onnx::TensorProto::INT8 && init.dims_size() >= 2;
      }
      CHECK(quantize > 0);
      CHECK(dequantize > quantize);
      CHECK(int8_weights > 0);

      // ONNX Runtime's int8 kernels round where libtorch's do not quite:
      // its output is compared with ours by SQNR, beside ours against float.
      at::Tensor ours, reference;
      {
        torch::NoGradGuard no_grad;
        ours = int8->forward(model.example_inputs).toTensor();
        reference = gm->forward(model.example_inputs).toTensor();
      }
      const at::Tensor ort =
          onnx_testing::run_ort(file, {model.example_inputs[0].toTensor()}).at("output");
      const double ort_vs_ours = fx::sqnr_db(ours, ort);
      const double ours_vs_float = fx::sqnr_db(reference, ours);
      const double ort_vs_float = fx::sqnr_db(reference, ort);
      std::cout << engine << " " << name << " int8: ONNX Runtime vs ours " << ort_vs_ours
                << " dB; ours vs float " << ours_vs_float
                << " dB; ONNX Runtime vs float " << ort_vs_float << " dB\n";
      INFO("ONNX Runtime vs ours " << ort_vs_ours << " dB; ours vs float "
                                   << ours_vs_float << " dB; ONNX Runtime vs float "
                                   << ort_vs_float << " dB");
      // The export keeps the quantization: ONNX Runtime is as close to float
      // as our int8 module is, and, where that is close, close to ours. On
      // a CPU without VNNI (AVX2) ONNX Runtime's uint8 x int8 kernels add
      // pairs of products in 16 bits and saturate at full-range activations
      // (qnnpack's lenet: 25 dB against float, ours 41): there only
      // onednn's 7-bit activations are held to it.
      if (fx::cpu_has_vnni() || engine == "onednn") {
        CHECK(ort_vs_float >= ours_vs_float - 3);
        if (ours_vs_float >= 20) CHECK(ort_vs_ours >= 25);
      }
      if (engine != "onednn" || !fx::cpu_has_vnni()) continue;
      // Lowered (convolutions on fx_onednn::qconv, residual adds fused):
      // the same QDQ model, ONNX Runtime agreeing with the lowered graph.
      fx::GraphModule lowered(int8->copy());
      fx::optimize_for_inference(*lowered);
      CHECK(fx::optimize_for_inference(*fx::GraphModule(int8->copy()))
                .int8_convolutions > 0);
      const fs::path lowered_file = scratch() / (std::string(name) + "_int8_lowered.onnx");
      fx::to_onnx(*lowered, lowered_file.string());
      at::Tensor ours_lowered;
      {
        torch::NoGradGuard no_grad;
        ours_lowered = lowered->forward(model.example_inputs).toTensor();
      }
      const at::Tensor ort_lowered =
          onnx_testing::run_ort(lowered_file, {model.example_inputs[0].toTensor()})
              .at("output");
      INFO("lowered: ONNX Runtime vs ours " << fx::sqnr_db(ours_lowered, ort_lowered)
                                            << " dB; ONNX Runtime vs float "
                                            << fx::sqnr_db(reference, ort_lowered) << " dB");
      CHECK(fx::sqnr_db(reference, ort_lowered) >= fx::sqnr_db(reference, ours_lowered) - 3);
      if (ours_vs_float >= 20) CHECK(fx::sqnr_db(ours_lowered, ort_lowered) >= 25);
    }
  }
}

TEST_CASE("int8 squeeze-excitation blocks lowered export as QDQ around their parts") {
  if (!fx::onednn::int8_supported()) return;  // the lowering leaves them
  fx::set_quantized_engine("onednn");
  torch::NoGradGuard no_grad;
  torch::manual_seed(5);
  auto model = std::make_shared<testdata::ExcitedBlocks>();
  model->eval();
  const at::Tensor x = torch::randn({2, 3, 17, 19});
  fx::GraphModule gm = fx::symbolic_trace(model, x);
  fx::GraphModule prepared =
      fx::prepare_fx(gm, fx::get_default_qconfig_mapping("onednn"));
  for (int i = 0; i < 4; ++i) prepared(torch::randn_like(x));
  fx::GraphModule lowered(fx::convert_fx(prepared)->copy());
  fx::optimize_for_inference(*lowered);
  REQUIRE(testdata::count_calls(lowered, "fx_onednn::qactivation") == 2);
  REQUIRE(testdata::count_calls(lowered, "fx_onednn::qmul_channels") == 2);
  REQUIRE(testdata::count_calls(lowered, "fx_onednn::qmean_channels") == 1);
  const fs::path file = scratch() / "excited_int8_lowered.onnx";
  fx::to_onnx(*lowered, file.string());
  const std::vector<std::string> ops = exported_ops(file);
  INFO(joined(ops));
  CHECK(count_of(ops, "HardSwish") == 1);
  CHECK(count_of(ops, "HardSigmoid") == 1);
  CHECK(count_of(ops, "Sigmoid") >= 1);
  CHECK(count_of(ops, "GlobalAveragePool") == 2);
  const at::Tensor ours = lowered(x).toTensor();
  const at::Tensor want = model->forward(x);
  const at::Tensor ort = onnx_testing::run_ort(file, {x}).at("output");
  CAPTURE(fx::sqnr_db(want, ours), fx::sqnr_db(want, ort), fx::sqnr_db(ours, ort));
  CHECK(fx::sqnr_db(want, ort) >= fx::sqnr_db(want, ours) - 3);
  CHECK(fx::sqnr_db(ours, ort) >= 25);
}

namespace {

// A feed-forward block: linear, gelu, linear, relu; then a linear layer
// with a residual connection.
struct GeluMlp : torch::nn::Module {
  GeluMlp() {
    fc1 = register_module("fc1", torch::nn::Linear(16, 32));
    fc2 = register_module("fc2", torch::nn::Linear(32, 8));
    fc3 = register_module("fc3", torch::nn::Linear(8, 8));
  }
  at::Tensor forward(at::Tensor x) {
    const at::Tensor y = torch::relu(fc2(torch::gelu(fc1(x))));
    return fc3(y) + y;
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
};

}  // namespace

TEST_CASE("dynamic int8 linear layers lowered export as ONNX Runtime's "
          "quantize_dynamic writes them") {
  if (!fx::onednn::int8_supported()) return;  // the lowering leaves them
  fx::set_quantized_engine("onednn");
  torch::NoGradGuard no_grad;
  torch::manual_seed(9);
  auto mlp = std::make_shared<GeluMlp>();
  mlp->eval();
  // 2-d: a C++ Linear traces as aten::linear (3-d: matmul, then the bias).
  const at::Tensor x = torch::randn({15, 16});
  fx::GraphModule gm = fx::symbolic_trace(mlp, x);
  fx::GraphModule lowered(fx::quantize_dynamic_fx(gm)->copy());
  const fx::InferenceReport report = fx::optimize_for_inference(*lowered);
  REQUIRE(report.int8_linear == 3);
  REQUIRE(testdata::count_calls(lowered, "fx_onednn::qlinear_dynamic") == 3);
  INFO(lowered->graph().to_string());
  CHECK(testdata::count_calls(lowered, "aten::gelu") == 0);
  CHECK(report.fused_sums == 1);
  CHECK(testdata::count_calls(lowered, "aten::add.Tensor") == 0);
  const fs::path file = scratch() / "mlp_dynamic_int8_lowered.onnx";
  fx::to_onnx(*lowered, file.string());
  const std::vector<std::string> ops = exported_ops(file);
  INFO(joined(ops));
  CHECK(count_of(ops, "DynamicQuantizeLinear") == 3);
  CHECK(count_of(ops, "MatMulInteger") == 3);
  const at::Tensor ours = lowered(x).toTensor();
  const at::Tensor ort = onnx_testing::run_ort(file, {x}).at("output");
  // The same quantization on both sides: equal but for float rounding.
  CHECK(testdata::relative_error(ort.reshape_as(ours), ours) < 1e-3);
  CHECK(fx::sqnr_db(mlp->forward(x), ours) > 30);
}

TEST_CASE("arithmetic is computed in the type torch promotes to") {
  auto fn = [](at::Tensor ids) { return (ids + 0.5) * (ids / 4) + (ids > 2.5); };
  at::Tensor ids = torch::arange(12, torch::kLong).reshape({3, 4});
  fx::GraphModule gm = fx::symbolic_trace(fn, ids);
  const fs::path file = scratch() / "promotion.onnx";
  fx::to_onnx(*gm, file.string());
  check_against_ort(gm, file, {ids});
}

TEST_CASE("an in-place write whose input is read afterwards is refused") {
  // %c = clone(x); %m = mul_(c, 2); %r = add(c, m): in eager, c is m.
  auto g = std::make_unique<fx::Graph>();
  fx::Node* x = g->placeholder("x");
  fx::Node* c = g->call_function(fx::op("aten::clone"), {x});
  fx::Node* m = g->call_function(fx::op("aten::mul_.Scalar"), {c, 2});
  g->output(g->call_function(fx::op("aten::add.Tensor"), {c, m}));
  fx::GraphModule gm(std::move(g), fx::Attributes{});
  fx::ShapeProp(gm).propagate({torch::randn({2, 3})});
  CHECK_THROWS_WITH(fx::to_onnx_string(*gm),
                    Catch::Contains("writes %clone in place") &&
                        Catch::Contains("%add reads it afterwards"));
}

TEST_CASE("a write into a view of a tensor read again is refused, not exported wrong") {
  // inplace_ops adds 1 to x.narrow(1, 0, 4) in place, then reads x.
  models::ZooModel model = models::make_zoo_model("inplace_ops");
  fx::GraphModule gm = models::trace_zoo_model(model);
  CHECK_THROWS_WITH(fx::to_onnx_string(*gm),
                    Catch::Contains("writes %narrow in place") &&
                        Catch::Contains("which shares its storage"));
}

TEST_CASE("Python's ONNX checker with full shape inference accepts an export") {
  models::ZooModel model = models::make_zoo_model("resnet18");
  fx::GraphModule gm = models::trace_zoo_model(model);
  const fs::path file = scratch() / "resnet18_python_check.onnx";
  fx::to_onnx(*gm, file.string());
  CHECK(onnx_testing::run_command("/usr/bin/python3 -c \"import onnx, sys; "
            "onnx.checker.check_model(onnx.load(sys.argv[1]), full_check=True)\" " +
            file.string()) == 0);
}

TEST_CASE("exports are byte-identical across runs") {
  models::ZooModel model = models::make_zoo_model("lenet");
  fx::GraphModule gm = models::trace_zoo_model(model);
  CHECK(fx::to_onnx_string(*gm) == fx::to_onnx_string(*gm));
  fx::GraphModule again = models::trace_zoo_model(models::make_zoo_model("lenet"));
  CHECK(fx::to_onnx_string(*gm) == fx::to_onnx_string(*again));
}

namespace {

struct CumsumNetImpl : torch::nn::Module {
  torch::nn::Linear fc{register_module("fc", torch::nn::Linear(4, 3))};
  at::Tensor forward(at::Tensor x) { return torch::cumsum(fc(x), 1); }
};
TORCH_MODULE(CumsumNet);

}  // namespace

TEST_CASE("an operator without a mapping is refused by name; a registered mapping exports it") {
  CumsumNet net;
  net->eval();
  at::Tensor x = torch::randn({2, 4});
  fx::GraphModule gm = fx::symbolic_trace(net, x);
  const fs::path file = scratch() / "cumsum.onnx";
  fs::remove(file);
  CHECK_THROWS_WITH(fx::to_onnx(*gm, file.string()),
                    Catch::Contains("aten::cumsum") && Catch::Contains("%cumsum") &&
                        Catch::Contains("register_onnx_mapping"));
  CHECK_FALSE(fs::exists(file));  // nothing written

  CHECK_FALSE(fx::has_onnx_mapping("aten::cumsum"));
  CHECK(fx::has_onnx_mapping("aten::relu_"));  // as its functional form
  CHECK(fx::has_onnx_mapping("aten::add_.Tensor"));
  fx::register_onnx_mapping("aten::cumsum", [](fx::OnnxBuilder& b) {
    const fx::Node& n = b.node();
    b.add("CumSum", {b.value(n.args()[0]), b.int64s({n.args()[1].to_int()}, true)},
          b.output());
  });
  CHECK(fx::has_onnx_mapping("aten::cumsum"));
  fx::to_onnx(*gm, file.string());
  check_against_ort(gm, file, {x});
}

TEST_CASE("leaf modules, training-mode graphs and wrong mappings are refused with what to do") {
  {
    models::ZooModel model = models::make_zoo_model("data_dependent_leaf");
    fx::GraphModule gm = models::trace_zoo_model(model);
    CHECK_THROWS_WITH(fx::to_onnx_string(*gm),
                      Catch::Contains("leaf module 'gate'") &&
                          Catch::Contains("register_onnx_mapping"));
  }
  {
    models::ZooModel model = models::make_zoo_model("resnet18");
    model.module->train();
    fx::GraphModule trained = models::trace_zoo_model(model);
    CHECK_THROWS_WITH(fx::to_onnx_string(*trained),
                      Catch::Contains("training mode") && Catch::Contains("eval()"));
  }
  {
    CumsumNet net;
    net->eval();
    fx::GraphModule gm = fx::symbolic_trace(net, torch::randn({2, 4}));
    fx::register_onnx_mapping("aten::cumsum", [](fx::OnnxBuilder& b) {
      b.add("Identity", {b.value(b.node().args()[0])}, b.fresh("elsewhere"));
    });
    CHECK_THROWS_WITH(fx::to_onnx_string(*gm), Catch::Contains("did not produce"));
    fx::OnnxOptions options;
    options.opset = 13;
    CHECK_THROWS_WITH(fx::to_onnx_string(*gm, options), Catch::Contains("opset 13"));
  }
}

TEST_CASE("nonzero, masked_select and boolean masks export with their "
          "data-dependent sizes, lowered too, and run under ONNX Runtime") {
  // Boxes whose score passes 0.5 (a mask of one dimension, and of two over
  // a [2, 5] grid), their positions, and the coordinates above 0.8: four
  // sizes known only at run time (u0 to u3), one of them computed with.
  auto f = [](torch::Tensor boxes, torch::Tensor scores) {
    const torch::Tensor keep = scores > 0.5;
    const torch::Tensor kept = boxes.index({keep});
    return std::vector<torch::Tensor>{
        kept.narrow(1, 0, 2).reshape({kept.size(0) * 2}),
        torch::nonzero(keep),
        torch::masked_select(boxes, boxes > 0.8),
        boxes.view({2, 5, 4}).index({scores.view({2, 5}) > 0.5}) * 2};
  };
  torch::manual_seed(0);
  fx::GraphModule gm =
      fx::symbolic_trace(f, torch::rand({10, 4}), torch::rand({10}));
  const fs::path file = scratch() / "data_dependent.onnx";
  fx::to_onnx(*gm, file.string());
  const std::vector<std::string> ops = exported_ops(file);
  INFO(joined(ops));
  CHECK(count_of(ops, "NonZero") == 1);
  CHECK(count_of(ops, "Compress") == 3);
  fx::GraphModule lowered(gm->copy());
  fx::optimize_for_inference(*lowered);
  const fs::path lowered_file = scratch() / "data_dependent_lowered.onnx";
  fx::to_onnx(*lowered, lowered_file.string());
  // No score passes, every score passes, some do.
  for (double shift : {-1.0, 1.0, 0.0}) {
    const torch::Tensor boxes = torch::rand({10, 4});
    const torch::Tensor scores = torch::rand({10}) + shift;
    check_against_ort(gm, file, {boxes, scores});
    check_against_ort(lowered, lowered_file, {boxes, scores});
    const auto expected = f(boxes, scores);
    const c10::IValue out = gm(boxes, scores);
    const c10::IValue out_lowered = lowered(boxes, scores);
    const auto got = out.toListRef();
    const auto got_lowered = out_lowered.toListRef();
    REQUIRE(got.size() == expected.size());
    for (size_t i = 0; i < expected.size(); ++i) {
      CHECK(torch::equal(got[i].toTensor(), expected[i]));
      CHECK(torch::allclose(got_lowered[i].toTensor(), expected[i], 1e-5, 1e-5));
    }
  }
}

TEST_CASE("argmax, any / all, the logical operators and index_copy export "
          "and run under ONNX Runtime as the GraphModule") {
  // argmax with and without a dim, argmin keeping it; any / all over
  // everything and over a dim; logical and / or / xor of floats (nonzero
  // is true); index_copy along dim 1 at two positions.
  auto f = [](torch::Tensor x, torch::Tensor index, torch::Tensor source) {
    const torch::Tensor positive = x.gt(0);
    return std::vector<torch::Tensor>{
        x.argmax(),
        x.argmax(1),
        x.argmin(0, /*keepdim=*/true),
        positive.any(),
        positive.all(1),
        positive.any(0, /*keepdim=*/true),
        x.logical_and(x.lt(0.5)),
        x.logical_or(source.select(1, 0).unsqueeze(1)),
        positive.logical_xor(x.lt(-0.5)),
        x.index_copy(1, index, source)};
  };
  torch::manual_seed(0);
  const torch::Tensor index = torch::tensor({3, 0}, torch::kLong);
  fx::GraphModule gm = fx::symbolic_trace(
      f, torch::randn({4, 5}), index, torch::randn({4, 2}));
  const fs::path file = scratch() / "selections.onnx";
  fx::to_onnx(*gm, file.string());
  const std::vector<std::string> ops = exported_ops(file);
  INFO(joined(ops));
  CHECK(count_of(ops, "ArgMax") == 2);
  CHECK(count_of(ops, "ArgMin") == 1);
  CHECK(count_of(ops, "ScatterElements") == 1);
  CHECK(count_of(ops, "Xor") == 1);
  for (int64_t seed : {1, 2, 3}) {
    torch::manual_seed(seed);
    // Ties: argmax and argmin give the first index, in both.
    torch::Tensor x = torch::randn({4, 5});
    x[0][3] = x[0][1] = 10;
    x[2] = 0;
    check_against_ort(gm, file,
                      {x, torch::tensor({seed % 5, 4 - seed % 5}, torch::kLong),
                       torch::randn({4, 2})});
  }
  // No elements: any is false and all true, as in torch.
  fx::GraphModule empty = fx::symbolic_trace(
      [](torch::Tensor x) {
        return std::vector<torch::Tensor>{x.gt(0).any(), x.gt(0).all(),
                                          x.sum(1)};
      },
      torch::randn({0, 3}));
  const fs::path empty_file = scratch() / "empty_reductions.onnx";
  fx::to_onnx(*empty, empty_file.string());
  check_against_ort(empty, empty_file, {torch::randn({0, 3})});
}
