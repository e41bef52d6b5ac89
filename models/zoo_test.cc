#include "models/zoo.h"

#include <cmath>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "models/data_dependent.h"
#include "models/inplace_ops.h"
#include "models/mobilenet_v2.h"
#include "models/resnet.h"
#include "testdata/zoo_testing.h"
#include "third_party/catch.h"

namespace models {
namespace {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

// The shapes of a (possibly nested tuple) value: "[1, 10]", "([2], [3])".
std::string shape_of(const c10::IValue& value) {
  if (value.isTensor()) {
    std::ostringstream out;
    out << value.toTensor().sizes();
    return out.str();
  }
  REQUIRE(value.isTuple());
  std::string out = "(";
  const auto& elements = value.toTupleRef().elements();
  for (size_t i = 0; i < elements.size(); ++i) {
    out += (i == 0 ? "" : ", ") + shape_of(elements[i]);
  }
  return out + ")";
}

// Parameters and buffers in the order of Python's state_dict(): module by
// module (pre-order), each module's own parameters, then its own buffers.
NamedTensors state_dict(const torch::nn::Module& root) {
  NamedTensors out;
  for (const auto& item : root.named_modules()) {
    const std::string prefix = item.key().empty() ? "" : item.key() + ".";
    for (const auto& p : item.value()->named_parameters(/*recurse=*/false)) {
      out.emplace_back(prefix + p.key(), p.value());
    }
    for (const auto& b : item.value()->named_buffers(/*recurse=*/false)) {
      out.emplace_back(prefix + b.key(), b.value());
    }
  }
  return out;
}

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::string golden_path(const std::string& file) {
  return "models/torchvision_names/" + file;
}

// The fill rule of torchvision_names/generate.py.
void fill_like_generate_py(torch::nn::Module& model) {
  torch::NoGradGuard no_grad;
  const NamedTensors entries = state_dict(model);
  for (size_t i = 0; i < entries.size(); ++i) {
    const auto& [name, t] = entries[i];
    if (!t.is_floating_point()) continue;
    torch::manual_seed(i);
    auto ends_with = [&name = name](const std::string& suffix) {
      return name.size() >= suffix.size() &&
             name.compare(name.size() - suffix.size(), suffix.size(), suffix) ==
                 0;
    };
    if (ends_with("running_var") || (t.dim() == 1 && ends_with("weight"))) {
      t.copy_(torch::rand(t.sizes()) + 0.5);
    } else if (t.dim() == 1) {
      t.copy_(torch::randn(t.sizes()) * 0.1);
    } else {
      const int64_t fan_in = t.numel() / t.size(0);
      t.copy_(torch::randn(t.sizes()) / std::sqrt(static_cast<double>(fan_in)));
    }
  }
}

TEST_CASE("zoo_model_names lists every model once, in a fixed order") {
  const std::vector<std::string> names = zoo_model_names();
  CHECK(names == std::vector<std::string>{
                     "mlp", "lenet", "resnet18", "resnet50", "mobilenet_v2",
                     "transformer_encoder", "lstm_tagger", "unet",
                     "inplace_ops", "data_dependent",
                     "data_dependent_leaf"});
}

TEST_CASE("make_zoo_model rejects unknown names") {
  CHECK_THROWS_AS(make_zoo_model("resnet1000"), std::invalid_argument);
}

TEST_CASE("every zoo model runs in eval mode with the expected output shape") {
  const std::vector<std::pair<std::string, std::string>> expected = {
      {"mlp", "[4, 10]"},
      {"lenet", "[2, 10]"},
      {"resnet18", "[1, 1000]"},
      {"resnet50", "[1, 1000]"},
      {"mobilenet_v2", "[1, 1000]"},
      {"transformer_encoder", "[2, 5]"},
      {"lstm_tagger", "([7, 3, 8], ([1, 3, 64], [1, 3, 64]))"},
      {"unet", "[1, 2, 64, 64]"},
      {"inplace_ops", "[2, 10]"},
      {"data_dependent", "[2, 3]"},
      {"data_dependent_leaf", "[2, 3]"},
  };
  REQUIRE(expected.size() == zoo_model_names().size());
  torch::NoGradGuard no_grad;
  for (const auto& [name, shape] : expected) {
    INFO(name);
    ZooModel model = make_zoo_model(name);
    CHECK(model.name == name);
    for (const auto& module : model.module->modules()) {
      CHECK_FALSE(module->is_training());
    }
    const c10::IValue out = model.forward(model.example_inputs);
    CHECK(shape_of(out) == shape);
  }
}

TEST_CASE("zoo models are deterministic") {
  torch::NoGradGuard no_grad;
  for (const std::string& name : zoo_model_names()) {
    INFO(name);
    ZooModel a = make_zoo_model(name);
    ZooModel b = make_zoo_model(name);
    const NamedTensors sa = state_dict(*a.module);
    const NamedTensors sb = state_dict(*b.module);
    REQUIRE(sa.size() == sb.size());
    for (size_t i = 0; i < sa.size(); ++i) {
      INFO(sa[i].first);
      CHECK(sa[i].first == sb[i].first);
      CHECK(torch::equal(sa[i].second, sb[i].second));
    }
    REQUIRE(a.example_inputs.size() == b.example_inputs.size());
    for (size_t i = 0; i < a.example_inputs.size(); ++i) {
      CHECK(testdata::outputs_bitwise_equal(a.example_inputs[i],
                                            b.example_inputs[i]));
    }
    CHECK(testdata::outputs_bitwise_equal(a.forward(a.example_inputs),
                                          b.forward(b.example_inputs)));
  }
}

TEST_CASE("batch norms have non-trivial statistics and affine parameters") {
  for (const char* name : {"resnet18", "mobilenet_v2", "unet"}) {
    INFO(name);
    ZooModel model = make_zoo_model(name);
    int batch_norms = 0;
    for (const auto& module : model.module->modules()) {
      if (auto* bn = module->as<torch::nn::BatchNorm2d>()) {
        ++batch_norms;
        CHECK(bn->running_var.min().item<double>() > 0);
        CHECK_FALSE(
            torch::equal(bn->running_var, torch::ones_like(bn->running_var)));
        CHECK_FALSE(torch::equal(bn->running_mean,
                                 torch::zeros_like(bn->running_mean)));
        CHECK_FALSE(torch::equal(bn->weight, torch::ones_like(bn->weight)));
        CHECK_FALSE(torch::equal(bn->bias, torch::zeros_like(bn->bias)));
      }
    }
    CHECK(batch_norms > 0);
  }
}

TEST_CASE("state_dict keys equal torchvision's") {
  for (const char* name : {"resnet18", "resnet50", "mobilenet_v2"}) {
    INFO(name);
    const std::vector<std::string> golden =
        read_lines(golden_path(std::string(name) + ".txt"));
    ZooModel model = make_zoo_model(name);

    std::set<std::string> names;
    for (const auto& p : model.module->named_parameters())
      names.insert(p.key());
    for (const auto& b : model.module->named_buffers()) names.insert(b.key());
    CHECK(names == std::set<std::string>(golden.begin(), golden.end()));

    std::vector<std::string> ordered;
    for (const auto& entry : state_dict(*model.module)) {
      ordered.push_back(entry.first);
    }
    CHECK(ordered == golden);
  }
}

TEST_CASE("logits equal torchvision's for the same weights") {
  torch::NoGradGuard no_grad;
  for (const char* name : {"resnet18", "resnet50", "mobilenet_v2"}) {
    INFO(name);
    ZooModel model = make_zoo_model(name);
    fill_like_generate_py(*model.module);
    torch::manual_seed(1234);
    const torch::Tensor x = torch::randn({1, 3, 224, 224});
    const torch::Tensor logits = model.forward({x}).toTensor().flatten();

    std::vector<double> golden;
    for (const std::string& line :
         read_lines(golden_path(std::string(name) + "_logits.txt"))) {
      golden.push_back(std::stod(line));
    }
    const torch::Tensor expected =
        torch::tensor(golden, torch::kDouble).to(torch::kFloat);
    REQUIRE(logits.sizes() == expected.sizes());
    INFO("max abs diff " << (logits - expected).abs().max().item<double>());
    CHECK(torch::allclose(logits, expected, /*rtol=*/1e-4, /*atol=*/1e-4));
  }
}

TEST_CASE("resnet and mobilenet_v2 classes can be built directly") {
  torch::NoGradGuard no_grad;
  ResNet resnet = resnet18(/*num_classes=*/7);
  resnet->eval();
  CHECK(resnet->forward(torch::randn({2, 3, 64, 64})).sizes() ==
        std::vector<int64_t>{2, 7});
  MobileNetV2 mobilenet(/*num_classes=*/5);
  mobilenet->eval();
  CHECK(mobilenet->forward(torch::randn({1, 3, 96, 96})).sizes() ==
        std::vector<int64_t>{1, 5});
}

TEST_CASE("Gate branches on the sign of the sum of its input") {
  Gate gate;
  const torch::Tensor positive = torch::tensor({1.0, 2.0, -0.5});
  CHECK(torch::equal(gate(positive), positive * 2));
  const torch::Tensor negative = torch::tensor({-1.0, 0.5});
  CHECK(torch::equal(gate(negative), -negative));
}

TEST_CASE("InplaceNet's static control flow follows its members") {
  torch::NoGradGuard no_grad;
  const torch::Tensor x = torch::randn({2, 3, 8, 8});
  torch::manual_seed(0);
  InplaceNet with_residual(/*num_blocks=*/3, /*use_residual=*/true);
  torch::manual_seed(0);
  InplaceNet without_residual(/*num_blocks=*/3, /*use_residual=*/false);
  CHECK(with_residual->blocks->size() == 3);
  const torch::Tensor a = with_residual(x);
  const torch::Tensor b = without_residual(x);
  CHECK(a.sizes() == std::vector<int64_t>{2, 10});
  CHECK_FALSE(torch::equal(a, b));
  InplaceNet no_blocks(/*num_blocks=*/0, /*use_residual=*/true);
  CHECK(no_blocks->blocks->size() == 0);
  CHECK(no_blocks(x).sizes() == std::vector<int64_t>{2, 10});
}

}  // namespace
}  // namespace models
