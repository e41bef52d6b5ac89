// fx demo: the bundled ResNet-18 traced with a dynamic batch and image size,
// printed (graph and generated C++), run against eager at three shapes, and
// deployed: eager, TorchScript's freeze +
// optimize_for_inference, the graph lowered to oneDNN and int8, timed side
// by side.
#include <chrono>
#include <iostream>
#include <vector>

#include <torch/script.h>
#include <torch/torch.h>

#include "absl/strings/str_format.h"
#include "fx/fx.h"
#include "fx/torchscript/torchscript.h"
#include "lowering/optimize_for_inference.h"
#include "quantization/numeric_suite.h"
#include "quantization/quantize_fx.h"
#include "tools/cli/commands.h"
#include "tools/cli/support.h"

namespace cli {
namespace {

// The deployment story: eager, TorchScript's freeze + optimize_for_inference
// (of the graph exported with fx::to_torchscript), the graph lowered by
// fx::optimize_for_inference, and int8 (fx::prepare_fx / convert_fx, then
// lowered), timed side by side. Returns whether the lowered output matches eager.
bool deployment(const Traced& t, const at::Tensor& x) {
  const int threads = 2;
  at::set_num_threads(threads);
  std::cout << "\n== Deploying it (" << threads
            << " threads, batch 1, medians of 15 interleaved rounds)\n";
  auto start = std::chrono::steady_clock::now();
  fx::GraphModule lowered(t.module->copy());
  fx::optimize_for_inference(*lowered);
  const double lowering_ms = std::chrono::duration<double, std::milli>(
                                 std::chrono::steady_clock::now() - start)
                                 .count();
  torch::jit::Module exported = fx::to_torchscript(t.module);
  exported.eval();
  torch::jit::Module frozen = torch::jit::freeze(exported);
  torch::jit::Module optimized = torch::jit::optimize_for_inference(frozen);
  // int8: calibrated on 8 batches of noise shaped like the input.
  start = std::chrono::steady_clock::now();
  fx::set_quantized_engine("onednn");
  fx::GraphModule prepared =
      fx::prepare_fx(t.module, fx::get_default_qconfig_mapping("onednn"));
  for (int i = 0; i < 8; ++i) {
    torch::manual_seed(500 + i);
    prepared(torch::randn_like(x));
  }
  fx::GraphModule int8 = fx::convert_fx(prepared);
  // Lowered too: its convolutions on oneDNN's int8 kernels (with VNNI).
  fx::optimize_for_inference(*int8);
  const double quantizing_ms = std::chrono::duration<double, std::milli>(
                                   std::chrono::steady_clock::now() - start)
                                   .count();
  const at::Tensor eager = t.model.forward({x}).toTensor();
  const at::Tensor ours = lowered(x).toTensor();
  const at::Tensor theirs = optimized.forward({x}).toTensor();
  const at::Tensor quantized = int8(x).toTensor();
  for (int i = 0; i < 3; ++i) optimized.forward({x});  // TorchScript's warm-up
  const std::vector<double> ms = interleaved_ms(
      {[&] { t.model.forward({x}); }, [&] { optimized.forward({x}); },
       [&] { lowered(x); }, [&] { int8(x); }},
      15);
  auto error = [&](const at::Tensor& y) {
    return (y - eager).abs().max().item<double>() /
           eager.abs().max().item<double>();
  };
  const double ours_error = error(ours);
  std::cout << absl::StrFormat(
      "  eager (torch::nn::Module)                     %7.2f ms\n"
      "  TorchScript freeze + optimize_for_inference   %7.2f ms  "
      "(max difference from eager %.1e, relative)\n"
      "  fx::optimize_for_inference (oneDNN, fused)    %7.2f ms  "
      "(max difference from eager %.1e, relative; lowered in %.0f ms)\n"
      "  fx::convert_fx (int8, onednn), lowered        %7.2f ms  "
      "(SQNR against eager %.1f dB; calibrated, converted and lowered in "
      "%.0f ms)\n"
      "  lowered / eager %.2fx, lowered / TorchScript-optimized %.2fx, "
      "int8 / eager %.2fx\n",
      ms[0], ms[1], error(theirs), ms[2], ours_error, lowering_ms, ms[3],
      fx::sqnr_db(eager, quantized), quantizing_ms, ms[2] / ms[0],
      ms[2] / ms[1], ms[3] / ms[0]);
  return ours_error < 1e-4;
}

// What the demo traces as dynamic: the batch, and the image's sides in
// multiples of 16 (112 and 224 among them).
std::vector<fx::DynamicDim> batch_and_sides() {
  std::vector<fx::DynamicDim> dims(3);
  dims[0].dim = 0;
  dims[0].symbol = "N";
  dims[0].max = 64;
  for (int64_t d : {2, 3}) {
    fx::DynamicDim& side = dims[d - 1];
    side.dim = d;
    side.symbol = d == 2 ? "H" : "W";
    side.min = 32;
    side.max = 1024;
    side.multiple_of = 16;
  }
  return dims;
}

int demo() {
  std::cout << "== Tracing ResNet-18 (models/resnet.h, eval mode) on a "
               "1x3x224x224 input, the batch N and the sides H, W dynamic\n";
  Traced t = trace_zoo_model("resnet18", batch_and_sides());
  print_stats(t);
  std::cout << "\n== The graph (print(gm.graph) in torch.fx)\n"
            << t.module->graph() << "\n";
  std::cout << "\n== The generated C++ forward (gm.code in torch.fx)\n"
            << t.module->code();
  std::cout << "\n== Running it at three shapes (one graph)\n";
  torch::NoGradGuard no_grad;
  bool equal = true;
  const at::Tensor x = t.model.example_inputs[0].toTensor();
  for (const at::Tensor& input :
       {x, at::Tensor(torch::randn({8, 3, 224, 224})),
        at::Tensor(torch::randn({1, 3, 112, 112}))}) {
    at::Tensor eager = t.model.forward({input}).toTensor();
    at::Tensor traced = t.module(input).toTensor();
    const bool same = torch::equal(eager, traced);
    equal = equal && same;
    std::cout << absl::StrFormat(
        "input %-16s eager and GraphModule outputs %s, top class %d, max "
        "|difference| %g, %s\n",
        c10::str(input.sizes()), c10::str(traced.sizes()),
        traced[0].argmax().item<int64_t>(),
        (eager - traced).abs().max().item<double>(),
        same ? "bitwise equal" : "NOT bitwise equal");
  }
  try {
    t.module(torch::randn({1, 3, 100, 100}));
    equal = false;
  } catch (const fx::GuardError& e) {
    std::cout << "\nA 100x100 input breaks a relation the graph holds for:\n  "
              << e.what() << "\n";
  }
  // The deployment story at batch 1, on the graph specialized to it (what
  // TorchScript's export and freeze take).
  Traced specialized = trace_zoo_model("resnet18");
  return deployment(specialized, x) && equal ? 0 : 1;
}

class Demo : public Command {
 public:
  Demo()
      : Command("demo", {},
                "trace the bundled ResNet-18 with a dynamic batch and image "
                "size, print its graph and generated C++, run it at three "
                "shapes and compare with eager, then time it deployed: "
                "TorchScript-optimized, lowered to oneDNN, int8") {}

 private:
  int run(const std::vector<std::string>&) override { return demo(); }
};

}  // namespace

std::unique_ptr<Command> make_demo() { return std::make_unique<Demo>(); }

}  // namespace cli
