#include "fx/io/serialization.h"

#include <torch/serialize.h>
#include <torch/torch.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "fx/fx.h"
#include "fx/io/internal/files.h"
#include "passes/fuse_conv_bn.h"
#include "models/zoo.h"
#include "testdata/zoo_testing.h"
#include "third_party/catch.h"

namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("fx_serialization_test_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

std::string file_bytes(const std::string& path) {
  return fx::read_file(path, "serialization_test");
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

fx::Attributes leaf_modules_of(const fx::GraphModule& gm) {
  fx::Attributes attributes;
  attributes.modules = gm->leaf_modules();
  return attributes;
}

std::string meta_summary(const fx::Graph& graph) {
  std::string out;
  for (const fx::Node* n : graph.nodes()) {
    out += n->name() + ":";
    if (const auto* m = n->meta().get(fx::kTensorMeta)) {
      out += m->to_string() + (m->requires_grad ? " grad" : "") + " " +
             m->device.str();
    }
    if (const auto* list = n->meta().get(fx::kTensorMetaList)) {
      for (const auto& m : *list) out += " " + m.to_string();
    }
    if (const auto* p = n->meta().get(fx::kModulePath)) out += " @" + *p;
    if (const auto* g = n->meta().get(fx::kGuard)) out += " guard " + g->to_string();
    out += "\n";
  }
  return out;
}

}  // namespace

TEST_CASE("save and load every zoo model: same graph, meta, tensors, outputs") {
  const std::string path = temp_path("zoo.fx");
  for (const std::string& name : models::traceable_zoo_model_names()) {
    INFO(name);
    models::ZooModel model = models::make_zoo_model(name);
    fx::GraphModule gm = models::trace_zoo_model(model);
    fx::save(gm, path);
    fx::GraphModule loaded = fx::load(path, leaf_modules_of(gm));

    CHECK(loaded->graph().to_string({.tensor_meta = true}) ==
          gm->graph().to_string({.tensor_meta = true}));
    CHECK(meta_summary(loaded->graph()) == meta_summary(gm->graph()));
    CHECK(loaded->traced_training() == gm->traced_training());
    REQUIRE(loaded->tensor_attributes().size() == gm->tensor_attributes().size());
    for (const auto& [attr, tensor] : gm->tensor_attributes()) {
      INFO(attr);
      at::Tensor other = loaded->fetch_attr(attr);
      CHECK(loaded->is_parameter(attr) == gm->is_parameter(attr));
      CHECK(other.requires_grad() == tensor.requires_grad());
      CHECK(other.sizes() == tensor.sizes());
      CHECK(torch::equal(other, tensor));
    }
    // named_parameters() of the loaded module, as an optimizer would see it.
    CHECK(loaded->named_parameters().keys() == gm->named_parameters().keys());

    torch::NoGradGuard no_grad;
    testdata::check_outputs_equal(gm->forward(model.example_inputs),
                                  loaded->forward(model.example_inputs));
    // The guards came back: a wrong rank is refused as by the traced module.
    if (model.example_inputs[0].isTensor() &&
        model.example_inputs[0].toTensor().dim() > 1) {
      std::vector<c10::IValue> bad = model.example_inputs;
      bad[0] = model.example_inputs[0].toTensor().flatten();
      CHECK_THROWS_AS(loaded->forward(bad), fx::GuardError);
    }
  }
  std::remove(path.c_str());
}

TEST_CASE("a folded ResNet-18 keeps its init steps through save and load") {
  models::ZooModel model = models::make_zoo_model("resnet18");
  fx::GraphModule gm = models::trace_zoo_model(model);
  REQUIRE(fx::fuse_conv_bn(*gm));
  gm->recompile();
  REQUIRE(!gm->init_steps().empty());
  const std::string path = temp_path("folded.fx");
  fx::save(gm, path);
  fx::GraphModule loaded = fx::load(path);
  CHECK(loaded->init_steps().size() == gm->init_steps().size());
  CHECK(loaded->init_steps()[0].graph->to_string() ==
        gm->init_steps()[0].graph->to_string());
  torch::NoGradGuard no_grad;
  at::Tensor x = model.example_inputs[0].toTensor();
  CHECK(torch::equal(loaded(x).toTensor(), gm(x).toTensor()));

  // New weights, then run_init on the loaded module refolds them.
  at::Tensor y_before = loaded(x).toTensor();
  loaded->fetch_attr("bn1.weight").mul_(2);
  loaded->run_init();
  CHECK(!torch::allclose(loaded(x).toTensor(), y_before));

  // Weights given to load win over the file's.
  fx::Attributes attributes;
  attributes.parameters["fc.bias"] = torch::zeros({1000});
  fx::GraphModule zero_bias = fx::load(path, attributes);
  CHECK(torch::equal(zero_bias->fetch_attr("fc.bias"), torch::zeros({1000})));
  std::remove(path.c_str());
}

TEST_CASE("save is deterministic and replaces a file only once complete") {
  models::ZooModel model = models::make_zoo_model("lenet");
  fx::GraphModule gm = models::trace_zoo_model(model);
  const std::string a = temp_path("a.fx");
  const std::string b = temp_path("b.fx");
  fx::save(gm, a);
  fx::save(gm, b);
  const std::string bytes = file_bytes(a);
  CHECK(!bytes.empty());
  CHECK(bytes == file_bytes(b));

  // A save that fails (here: the path is a directory, which rename will not
  // replace) leaves what was there and no partial file behind.
  const std::string directory = temp_path("a_directory.fx");
  std::filesystem::create_directory(directory);
  CHECK_THROWS_WITH(fx::save(gm, directory), Catch::Contains("cannot replace"));
  CHECK(std::filesystem::is_directory(directory));
  std::filesystem::remove(directory);
  for (const auto& entry :
       std::filesystem::directory_iterator(std::filesystem::path(a).parent_path())) {
    CHECK(entry.path().string().find(".partial.") == std::string::npos);
  }
  CHECK_THROWS_WITH(fx::save(gm, "/nonexistent-dir/x.fx"),
                    Catch::Contains("cannot create a file beside"));

  // Threads saving to one path at once each write a partial file of their
  // own: the file is always one whole save.
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      try {
        fx::save(gm, a);
      } catch (...) {
        ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(failures == 0);
  CHECK(file_bytes(a) == bytes);
  // The mode a newly created file gets (mkstemp's own is 0600).
  const mode_t mask = ::umask(0);
  ::umask(mask);
  CHECK(static_cast<mode_t>(std::filesystem::status(a).permissions()) ==
        (0666 & ~mask));
  std::remove(a.c_str());
  std::remove(b.c_str());
}

TEST_CASE("save to and load from streams: the file's bytes, in memory") {
  models::ZooModel model = models::make_zoo_model("resnet18");
  fx::GraphModule gm = models::trace_zoo_model(model);
  fx::fuse_conv_bn(*gm);
  gm->recompile();
  const std::string path = temp_path("stream.fx");
  fx::save(gm, path);
  std::ostringstream out;
  fx::save(gm, out);
  CHECK(out.str() == file_bytes(path));

  std::istringstream in(out.str());
  fx::GraphModule loaded = fx::load(in);
  CHECK(loaded->graph().to_string({.tensor_meta = true}) ==
        gm->graph().to_string({.tensor_meta = true}));
  CHECK(loaded->init_steps().size() == gm->init_steps().size());
  torch::NoGradGuard no_grad;
  testdata::check_outputs_equal(gm->forward(model.example_inputs),
                                loaded->forward(model.example_inputs));

  // Errors name the stream; a stream that refuses bytes is an error too.
  std::istringstream truncated(out.str().substr(0, out.str().size() / 2));
  CHECK_THROWS_AS(fx::load(truncated), fx::GraphError);
  std::istringstream truncated_again(out.str().substr(0, out.str().size() / 2));
  CHECK_THROWS_WITH(fx::load(truncated_again), Catch::Contains("the stream"));
  std::ostringstream closed;
  closed.setstate(std::ios::badbit);
  CHECK_THROWS_WITH(fx::save(gm, closed), Catch::Contains("the stream refused"));
  std::remove(path.c_str());
}

TEST_CASE("load rejects missing, truncated and foreign files clearly") {
  models::ZooModel model = models::make_zoo_model("lenet");
  fx::GraphModule gm = models::trace_zoo_model(model);
  const std::string path = temp_path("bad.fx");
  fx::save(gm, path);
  const std::string bytes = file_bytes(path);

  CHECK_THROWS_WITH(fx::load(temp_path("missing.fx")),
                    Catch::Contains("cannot open") && Catch::Contains("missing.fx"));

  // Every truncation is an error naming the file, never a crash.
  for (size_t n : {size_t{0}, size_t{1}, size_t{100}, bytes.size() / 2,
                   bytes.size() - 100, bytes.size() - 1}) {
    INFO(n);
    write_bytes(path, bytes.substr(0, n));
    CHECK_THROWS_WITH(fx::load(path), Catch::Contains("is truncated or is not "
                                                      "a file written by fx::save") &&
                                          Catch::Contains(path));
  }

  // A tensor file is not a GraphModule file.
  c10::Dict<std::string, at::Tensor> tensors;
  tensors.insert("w", torch::ones({2}));
  std::vector<char> other = torch::pickle_save(c10::IValue(tensors));
  write_bytes(path, std::string(other.data(), other.size()));
  CHECK_THROWS_WITH(fx::load(path), Catch::Contains("has no 'format' entry"));
  std::remove(path.c_str());
}

TEST_CASE("load reports a hand-edited graph with line and column") {
  models::ZooModel model = models::make_zoo_model("lenet");
  fx::GraphModule gm = models::trace_zoo_model(model);
  const std::string path = temp_path("edited.fx");
  fx::save(gm, path);
  c10::IValue root = torch::pickle_load([&] {
    const std::string b = file_bytes(path);
    return std::vector<char>(b.data(), b.data() + b.size());
  }());
  auto dict = root.toGenericDict();
  std::string text = dict.at("graph").toStringRef();
  // Break the third line: drop the '=' after the node's type.
  size_t line3 = text.find('\n', text.find('\n') + 1) + 1;
  size_t eq = text.find(" = ", line3);
  text.erase(eq + 1, 1);
  dict.insert_or_assign("graph", text);
  std::vector<char> edited = torch::pickle_save(root);
  write_bytes(path, std::string(edited.data(), edited.size()));
  try {
    fx::load(path);
    FAIL("load accepted a malformed graph");
  } catch (const fx::ParseError& e) {
    CHECK(e.line() == 3);
    // Column of 'call_function', where the '=' was expected.
    CHECK(e.column() == static_cast<int>(eq - line3) + 3);
    CHECK_THAT(e.what(), Catch::Contains(path) && Catch::Contains("line 3"));
  }
  std::remove(path.c_str());
}

TEST_CASE("load asks for the leaf modules a file cannot hold") {
  models::ZooModel model = models::make_zoo_model("data_dependent_leaf");
  fx::GraphModule gm = models::trace_zoo_model(model);
  REQUIRE(!gm->leaf_modules().empty());
  const std::string path = temp_path("leaf.fx");
  fx::save(gm, path);
  const std::string leaf = gm->leaf_modules().begin()->first;
  CHECK_THROWS_WITH(fx::load(path),
                    Catch::Contains("calls leaf module " + leaf) &&
                        Catch::Contains("attributes.modules"));
  std::remove(path.c_str());
}
