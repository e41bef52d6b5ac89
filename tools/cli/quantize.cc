// fx quantize MODEL: int8 post-training quantization (prepare, calibrate,
// convert, or dynamic) of a bundled model or a file, its report, and the
// result printed, saved or exported to TorchScript.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <optional>

#include <torch/script.h>
#include <torch/torch.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "fx/fx.h"
#include "fx/io/internal/files.h"
#include "fx/torchscript/torchscript.h"
#include "onnx/to_onnx.h"
#include "quantization/numeric_suite.h"
#include "quantization/qat.h"
#include "quantization/quantize_fx.h"
#include "tools/cli/commands.h"
#include "tools/cli/support.h"

namespace cli {
namespace {

// One calibration batch per entry (the forward's inputs), as --calibrate
// (`spec`) says.
std::vector<std::vector<c10::IValue>> calibration_batches(
    const std::string& spec, const std::vector<c10::IValue>& examples) {
  std::vector<std::vector<c10::IValue>> batches;
  if (absl::StartsWith(spec, "random:")) {
    int n = 0;
    if (!absl::SimpleAtoi(spec.substr(7), &n) || n <= 0) {
      throw fx::QuantizationError("--calibrate=" + spec +
                                  ": give a positive count, e.g. random:8");
    }
    if (examples.empty()) {
      throw fx::QuantizationError(
          "--calibrate=random:N needs the inputs' shapes: give --input");
    }
    for (int i = 0; i < n; ++i) {
      torch::manual_seed(1000 + i);
      std::vector<c10::IValue> batch;
      for (const c10::IValue& e : examples) {
        batch.push_back(e.isTensor() && e.toTensor().is_floating_point()
                            ? c10::IValue(torch::randn_like(e.toTensor()))
                            : e);
      }
      batches.push_back(std::move(batch));
    }
    return batches;
  }
  std::error_code error;
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(spec, error)) {
    if (entry.is_regular_file()) files.push_back(entry.path().string());
  }
  if (error) {
    throw fx::QuantizationError("--calibrate=" + spec +
                                ": neither random:N nor a readable directory (" +
                                error.message() + ")");
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) {
    throw fx::QuantizationError("--calibrate=" + spec +
                                ": the directory holds no files");
  }
  for (const std::string& file : files) {
    c10::IValue v;
    std::string problem;
    try {
      std::optional<c10::IValue> loaded =
          fx::checked_pickle_load(fx::read_file(file, "fx quantize"), &problem);
      if (loaded) v = std::move(*loaded);
    } catch (const c10::Error& e) {
      problem = e.what_without_backtrace();
    } catch (const std::exception& e) {
      problem = e.what();
    }
    if (!problem.empty()) {
      throw fx::QuantizationError("--calibrate: " + file +
                                  " is not a tensor file (torch.save): " +
                                  problem);
    }
    std::vector<c10::IValue> batch;
    if (v.isTensor()) {
      batch.push_back(v);
    } else if (v.isList() || v.isTuple()) {
      for (const c10::IValue& e : v.isList() ? v.toListRef()
                                              : v.toTupleRef().elements()) {
        batch.push_back(e);
      }
    } else {
      throw fx::QuantizationError("--calibrate: " + file +
                                  " holds neither a tensor nor a list of "
                                  "tensors");
    }
    batches.push_back(std::move(batch));
  }
  return batches;
}

// A tensor output, or a QuantizationError saying what --qat needs.
at::Tensor tensor_output(const c10::IValue& v) {
  if (!v.isTensor()) {
    throw fx::QuantizationError(
        "--qat distils from the float model's output, which must be one "
        "tensor; this model returns " + v.tagKind());
  }
  return v.toTensor();
}

void progress(const char* what, size_t done, size_t total) {
  const size_t width = 30;
  const size_t filled = total == 0 ? width : done * width / total;
  std::cerr << "\r" << what << " [" << std::string(filled, '#')
            << std::string(width - filled, '.') << "] " << done << "/"
            << total << (done == total ? "\n" : "") << std::flush;
}

class Quantize : public Command {
 public:
  Quantize()
      : Command("quantize", {"MODEL"},
                "int8 post-training quantization of a model: prepare, "
                "calibrate, convert (or dynamic); print, report, save or "
                "export the result",
                "MODEL is a bundled model (`fx zoo` lists them), a "
                "GraphModule file, or a TorchScript file (give --input).") {
    add_input_flag(flags(), &input_);
    flags().add("calibrate", &calibrate_,
                "the calibration data, random:N (N batches of normal noise "
                "shaped like the inputs) or a directory whose files (in name "
                "order) each hold one batch: a tensor, or a list of tensors "
                "for several inputs, as torch.save writes them");
    flags().add("qat", &qat_,
                "quantization-aware training before converting: this many "
                "steps of distillation from the float model on the "
                "calibration data, in turn (fx::distill_qat: Adam, --lr; "
                "observers on for the first half; batch norms frozen); "
                "reports the SQNR without and with it");
    flags().add("lr", &lr_, "--qat's learning rate");
    flags().add("engine", &engine_,
                "the quantized engine, onednn (x86) or qnnpack (ARM)");
    flags().add("dynamic", &dynamic_,
                "dynamic quantization (linear layers and LSTMs; no "
                "calibration) instead of static");
    flags().add("report", &report_,
                "print each quantized node's SQNR against float32 (on up to "
                "4 calibration batches)");
    add_passes_flag(flags(), &passes_);
    add_print_flag(flags(), &print_);
    flags().add("save", &save_,
                "write the quantized GraphModule to this file (fx::save)");
    flags().add("torchscript", &torchscript_,
                "export the quantized GraphModule as TorchScript to this file");
    flags().add("onnx", &onnx_,
                "export the int8 module in ONNX's QDQ form (opset 17) to this "
                "file (fx::to_onnx): QuantizeLinear / DequantizeLinear around "
                "float operators, which ONNX Runtime and TensorRT run as int8");
  }

 private:
  int run(const std::vector<std::string>& args) override;

  // --qat: prepare_qat_fx, distillation from `module` on `batches`, and
  // convert_fx; prints the SQNR on the batches without training (the
  // observers having seen each batch once) and with it.
  fx::GraphModule quantization_aware(
      fx::GraphModule module,
      const std::vector<std::vector<c10::IValue>>& batches) const;

  std::vector<std::string> input_;
  std::string calibrate_ = "random:8";
  int64_t qat_ = 0;
  double lr_ = 1e-5;
  std::string engine_ = "onednn";
  bool dynamic_ = false;
  bool report_ = false;
  std::string passes_;
  std::string print_ = "graph";
  std::string save_;
  std::string torchscript_;
  std::string onnx_;
};

int Quantize::run(const std::vector<std::string>& args) {
  const std::string& name = args[0];
  check_print(print_);
  check_passes(passes_);
  std::vector<c10::IValue> examples;
  fx::GraphModule module = open_model(name, input_, &examples);
  const std::string& engine = engine_;
  fx::set_quantized_engine(engine);
  if (qat_ < 0 || (qat_ > 0 && dynamic_)) {
    throw fx::QuantizationError(
        qat_ < 0 ? "--qat=" + std::to_string(qat_) +
                       ": give a number of steps, 1 or more"
                 : std::string("--qat trains for static quantization: drop "
                               "--dynamic"));
  }
  torch::NoGradGuard no_grad;
  const auto start = std::chrono::steady_clock::now();
  fx::GraphModule quantized{nullptr};
  fx::GraphModule prepared{nullptr};
  std::vector<std::vector<c10::IValue>> batches;
  if (dynamic_) {
    fx::DynamicOptions options;
    options.engine = engine;
    quantized = fx::quantize_dynamic_fx(module, options);
    prepared = module;
    if (!examples.empty()) batches.push_back(examples);
  } else if (qat_ > 0) {
    batches = calibration_batches(calibrate_, examples);
    quantized = quantization_aware(module, batches);
    prepared = fx::prepare_fx(module, fx::get_default_qconfig_mapping(engine),
                              examples);
    for (const auto& batch : batches) prepared->forward(batch);
  } else {
    prepared = fx::prepare_fx(module, fx::get_default_qconfig_mapping(engine),
                              examples);
    batches = calibration_batches(calibrate_, examples);
    for (size_t i = 0; i < batches.size(); ++i) {
      progress("calibrating", i, batches.size());
      prepared->forward(batches[i]);
    }
    progress("calibrating", batches.size(), batches.size());
    quantized = fx::convert_fx(prepared);
  }
  std::cerr << "quantized " << name << " for " << engine << " in "
            << milliseconds_since(start) << " ms: "
            << fx::summarize_quantized(quantized).to_string() << "\n";
  // --passes on the int8 module (optimize_for_inference: its convolutions
  // on oneDNN's int8 kernels); what is printed, checked and written is the
  // result, the report compares the converted module's nodes.
  fx::GraphModule result = quantized;
  if (!passes_.empty()) {
    result = run_passes(quantized, passes_).module;
    std::cerr << "passes " << passes_ << ": " << quantized->graph().size()
              << " -> " << result->graph().size() << " nodes\n";
  }
  print_module(result, print_);
  if (report_ && !batches.empty()) {
    std::vector<std::vector<c10::IValue>> some(
        batches.begin(), batches.begin() + std::min<size_t>(4, batches.size()));
    std::cout << fx::format_quantization_report(
        fx::quantization_report(prepared, quantized, some));
  }
  if (!examples.empty()) {
    const c10::IValue want = module->forward(examples);
    const c10::IValue got = result->forward(examples);
    if (want.isTensor() && got.isTensor()) {
      std::cout << absl::StrFormat(
          "output SQNR against float32 on the example input: %.1f dB\n",
          fx::sqnr_db(want.toTensor(), got.toTensor()));
    }
  }
  if (!onnx_.empty()) {
    fx::to_onnx(*result, onnx_);
    std::cerr << "wrote " << onnx_ << "\n";
  }
  if (!torchscript_.empty()) {
    fx::to_torchscript(result).save(torchscript_);
    std::cerr << "wrote " << torchscript_ << "\n";
  }
  if (!save_.empty()) {
    fx::save(result, save_);
    std::cerr << "wrote " << save_ << "\n";
  }
  return 0;
}

fx::GraphModule Quantize::quantization_aware(
    fx::GraphModule module,
    const std::vector<std::vector<c10::IValue>>& batches) const {
  std::vector<c10::IValue> example;
  if (!batches.empty()) example = batches.front();
  const fx::QConfigMapping mapping = fx::get_default_qat_qconfig_mapping(engine_);
  std::vector<at::Tensor> want;
  for (const auto& batch : batches) want.push_back(tensor_output(module->forward(batch)));
  // The SQNR of a converted module against float32, over the batches.
  auto sqnr = [&](fx::GraphModule converted) {
    std::vector<at::Tensor> got;
    for (const auto& batch : batches) {
      got.push_back(tensor_output(converted->forward(batch)));
    }
    return fx::sqnr_db(at::cat(want), at::cat(got));
  };
  {
    // Without training: the observers see each batch once.
    fx::GraphModule observed = fx::prepare_qat_fx(module, mapping, example);
    for (const auto& batch : batches) observed->forward(batch);
    std::cout << absl::StrFormat(
        "SQNR against float32 over the %d batches, without --qat: %.1f dB\n",
        batches.size(), sqnr(fx::convert_fx(observed)));
  }
  fx::GraphModule student = fx::prepare_qat_fx(module, mapping, example);
  fx::DistillationOptions options;
  options.steps = qat_;
  options.lr = lr_;
  const fx::DistillationReport report =
      fx::distill_qat(student, module, batches, options);
  fx::GraphModule converted = fx::convert_fx(student);
  std::vector<double> ms = report.step_ms;
  std::sort(ms.begin(), ms.end());
  std::cout << absl::StrFormat(
      "SQNR against float32 over the %d batches, with --qat=%d: %.1f dB "
      "(relative distillation loss %.3g -> %.3g; %.0f ms per step, median)\n",
      batches.size(), qat_, sqnr(converted), report.first_loss,
      report.last_loss, ms[ms.size() / 2]);
  return converted;
}

}  // namespace

std::unique_ptr<Command> make_quantize() {
  return std::make_unique<Quantize>();
}

}  // namespace cli
