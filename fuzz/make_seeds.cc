// Writes the fuzzers' seed corpora: every traceable zoo model's graph as
// text (with and without types) for parse_graph, every zoo model saved with
// fx::save for load, and CLI input specs for input_spec.
//
//   bazel run //fuzz:make_seeds -- DIR     writes DIR/parse_graph, DIR/load,
//                                          DIR/input_spec
//
// The saved files keep each model's graph, guards, meta and attribute names
// but shrink every tensor to at most 2 elements, so that a seed is a few KB
// (a fuzzer mutates small inputs quickly) yet has every record a real file
// has. The small MLP and LeNet are also saved whole, once plain and once
// after fuse_conv_bn (which adds init steps). A small program with control
// flow (a cond in a while_loop's body: nested subgraphs; a scan and a map)
// is traced for both too.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "fx/runtime/graph_module.h"
#include "fx/io/serialization.h"
#include "fx/trace/control_flow.h"
#include "passes/fuse_conv_bn.h"
#include "models/zoo.h"

namespace {

void write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

void shrink_tensors(fx::GraphModuleImpl& gm) {
  torch::NoGradGuard no_grad;
  for (const auto& entry : gm.tensor_attributes()) {
    at::Tensor t = entry.second;
    int64_t keep = std::min<int64_t>(t.numel(), 2);
    t.set_data(at::zeros({keep}, t.options()));
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  try {
    const std::filesystem::path dir(argv[1]);
    for (const char* sub : {"parse_graph", "load", "input_spec"}) {
      std::filesystem::create_directories(dir / sub);
    }
    int graphs = 0, files = 0;
    for (const std::string& name : models::traceable_zoo_model_names()) {
      models::ZooModel model = models::make_zoo_model(name);
      fx::GraphModule gm = models::trace_zoo_model(model);
      fx::PrintOptions typed;
      typed.tensor_meta = true;
      write_text(dir / "parse_graph" / (name + ".txt"),
                 gm->graph().to_string());
      write_text(dir / "parse_graph" / (name + "_typed.txt"),
                 gm->graph().to_string(typed));
      graphs += 2;
      if (name == "mlp" || name == "lenet") {
        fx::save(gm, (dir / "load" / (name + "_whole.fx")).string());
        fx::fuse_conv_bn(*gm);
        fx::save(gm, (dir / "load" / (name + "_folded.fx")).string());
        files += 2;
        gm = models::trace_zoo_model(model);
      }
      shrink_tensors(*gm);
      fx::save(gm, (dir / "load" / (name + ".fx")).string());
      ++files;
    }
    {
      // Control flow: a loop whose body branches, reading a parameter.
      using Tensors = std::vector<at::Tensor>;
      auto linear = std::make_shared<torch::nn::LinearImpl>(2, 2);
      auto loop = [&](const at::Tensor& x) {
        return fx::while_loop(
            [](const Tensors& c) { return c[0].abs().sum() < 8; },
            [&](const Tensors& c) {
              return fx::cond(
                  c[0].sum() > 0,
                  [&](const Tensors& in) { return Tensors{linear->forward(in[0]) + 1}; },
                  [](const Tensors& in) { return Tensors{in[0] * 2 - 1}; },
                  {c[0]});
            },
            {x})[0];
      };
      fx::GraphModule gm = fx::symbolic_trace(
          linear, [&](const std::vector<c10::IValue>& in) {
            return c10::IValue(loop(in[0].toTensor()));
          },
          {torch::ones({2})});
      fx::PrintOptions typed;
      typed.tensor_meta = true;
      write_text(dir / "parse_graph" / "control_flow.txt", gm->graph().to_string());
      write_text(dir / "parse_graph" / "control_flow_typed.txt",
                 gm->graph().to_string(typed));
      fx::save(gm, (dir / "load" / "control_flow.fx").string());
      graphs += 2;
      ++files;
      // A scan and a map over its steps.
      auto steps = [&](const at::Tensor& x) {
        fx::ScanResult r = fx::scan(
            [&](const Tensors& h, const Tensors& s) {
              at::Tensor next = torch::tanh(linear->forward(h[0]) + s[0]);
              return std::pair{Tensors{next}, Tensors{next}};
            },
            {x[0]}, {x});
        return fx::map([](const Tensors& s) { return Tensors{s[0] * 2}; },
                       r.ys)[0];
      };
      fx::GraphModule scanned = fx::symbolic_trace(
          linear, [&](const std::vector<c10::IValue>& in) {
            return c10::IValue(steps(in[0].toTensor()));
          },
          {torch::ones({3, 2})});
      write_text(dir / "parse_graph" / "scan.txt",
                 scanned->graph().to_string(typed));
      fx::save(scanned, (dir / "load" / "scan.fx").string());
      ++graphs;
      ++files;
    }
    int specs = 0;
    for (const char* spec :
         {"1x3x224x224", "1x3x224x224:float32", "5:int64", "2x3:bool",
          "0x4:float16", "7x1x1:uint8", "8:bfloat16", "3x3:float64"}) {
      write_text(dir / "input_spec" / ("spec" + std::to_string(specs++)),
                 spec);
    }
    std::printf("wrote %d graphs, %d saved files and %d input specs to %s\n",
                graphs, files, specs, dir.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_seeds: %s\n", e.what());
    return 1;
  }
}
