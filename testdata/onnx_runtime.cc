#include "testdata/onnx_runtime.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <torch/torch.h>

#include "testdata/test_files.h"
#include "third_party/catch.h"

namespace onnx_testing {

namespace fs = std::filesystem;

int run_command(const std::string& command) {
  INFO(command);
  return std::system(command.c_str());
}

fs::path scratch() {
  fs::path dir = testdata::test_file("to_onnx_test");
  fs::create_directories(dir);
  return dir;
}

namespace {

std::string ort_modules() {
  const char* dir = std::getenv("FX_ORT_DIR");
  return std::string(dir ? dir : "/usr/local/lib/fx-libtorch/onnxruntime") +
         "/node_modules";
}

std::string shape_text(const at::Tensor& t) {
  std::string s;
  for (int64_t i = 0; i < t.dim(); ++i) {
    s += (i ? "x" : "") + std::to_string(t.size(i));
  }
  return s;
}

void write_raw(const fs::path& path, const at::Tensor& t) {
  at::Tensor c = t.contiguous();
  std::ofstream out(path, std::ios::binary);
  out.write(static_cast<const char*>(c.data_ptr()), c.numel() * c.element_size());
  REQUIRE(out.good());
}


}  // namespace

std::map<std::string, at::Tensor> run_ort(const fs::path& model,
                                          const std::vector<at::Tensor>& inputs) {
  const fs::path dir = model.parent_path() / (model.stem().string() + "_ort");
  fs::create_directories(dir);
  std::string command = "NODE_PATH=" + ort_modules() +
                        " node testdata/ort_run.js " + model.string() +
                        " " + dir.string();
  for (size_t i = 0; i < inputs.size(); ++i) {
    const fs::path file = dir / ("input_" + std::to_string(i) + ".bin");
    write_raw(file, inputs[i]);
    command += " " + file.string() + ":" +
               (inputs[i].scalar_type() == at::kLong   ? "int64"
                : inputs[i].scalar_type() == at::kBool ? "bool"
                                                       : "float32") +
               ":" + shape_text(inputs[i]);
  }
  const fs::path listing = dir / "outputs.txt";
  REQUIRE(run_command(command + " > " + listing.string()) == 0);
  std::map<std::string, at::Tensor> outputs;
  std::ifstream lines(listing);
  std::string name, dtype, shape;
  while (lines >> name >> dtype >> shape) {
    REQUIRE((dtype == "float32" || dtype == "int64" || dtype == "bool"));
    const at::ScalarType type = dtype == "int64"  ? at::kLong
                                : dtype == "bool" ? at::kBool
                                                  : at::kFloat;
    std::vector<int64_t> dims;
    std::stringstream parts(shape == "scalar" ? "" : shape);
    for (std::string d; std::getline(parts, d, 'x');) dims.push_back(std::stoll(d));
    std::ifstream data(dir / (name + ".bin"), std::ios::binary);
    at::Tensor t = at::empty(dims, type);
    const auto bytes = static_cast<std::streamsize>(t.numel() * t.element_size());
    data.read(static_cast<char*>(t.data_ptr()), bytes);
    REQUIRE(data.gcount() == bytes);
    outputs.emplace(name, t);
  }
  return outputs;
}

void flatten_outputs(const c10::IValue& value, const std::string& name,
                     std::map<std::string, at::Tensor>* out) {
  if (value.isTensor()) {
    out->emplace(name, value.toTensor());
  } else if (value.isGenericDict()) {
    for (const auto& item : value.toGenericDict()) {
      flatten_outputs(item.value(), name + "_" + item.key().toStringRef(), out);
    }
  } else if (value.isList()) {
    const c10::List<c10::IValue> list = value.toList();
    for (size_t i = 0; i < list.size(); ++i) {
      flatten_outputs(list.get(i), name + "_" + std::to_string(i), out);
    }
  } else {
    const auto& elements = value.toTupleRef().elements();
    for (size_t i = 0; i < elements.size(); ++i) {
      flatten_outputs(elements[i], name + "_" + std::to_string(i), out);
    }
  }
}

void check_against_ort(fx::GraphModule gm, const fs::path& file,
                       const std::vector<c10::IValue>& inputs, double tolerance) {
  std::vector<at::Tensor> tensors;
  for (const c10::IValue& v : inputs) tensors.push_back(v.toTensor());
  std::map<std::string, at::Tensor> expected;
  {
    torch::NoGradGuard no_grad;
    flatten_outputs(gm->forward(inputs), "output", &expected);
  }
  std::map<std::string, at::Tensor> actual = run_ort(file, tensors);
  REQUIRE(actual.size() == expected.size());
  for (const auto& [name, want] : expected) {
    INFO("output " << name);
    REQUIRE(actual.count(name));
    const at::Tensor& got = actual.at(name);
    REQUIRE(got.sizes() == want.sizes());
    REQUIRE(got.scalar_type() == want.scalar_type());
    if (want.scalar_type() == at::kBool || want.numel() == 0) {
      CHECK(torch::equal(got, want));
      continue;
    }
    const double scale = std::max(1.0, want.abs().max().item<double>());
    const double error = (got - want).abs().max().item<double>();
    INFO("max |diff| " << error << " (largest magnitude " << scale << ")");
    CHECK(error <= tolerance * scale);
  }
}

}  // namespace onnx_testing
