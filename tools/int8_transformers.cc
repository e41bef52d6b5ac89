#include "tools/int8_transformers.h"

#include <torch/torch.h>

#include <chrono>
#include <iostream>
#include <cmath>
#include <optional>
#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "fx/fx.h"
#include "lowering/optimize_for_inference.h"
#include "quantization/numeric_suite.h"
#include "quantization/quantize_fx.h"
#include "tools/timed_process.h"

namespace fx {
namespace benchmark {
namespace {

constexpr char kModelsScript[] = "testdata/onnx_runtime_models.py";
constexpr char kQuantizeScript[] = "tools/ort_quantize_dynamic.py";
constexpr char kTimerScript[] = "tools/ort_timer.js";
constexpr double kTarget = 1.0;
constexpr double kSqnrSlackDb = 1.0;
constexpr std::chrono::milliseconds kPause(50);

// For logits ([batch, length, vocabulary]): the share of positions whose
// top token is float32's; nullopt for other outputs.
std::optional<double> argmax_agreement(const at::Tensor& want,
                                       const at::Tensor& got) {
  if (want.dim() != 3) return std::nullopt;
  return at::eq(want.argmax(-1), got.reshape_as(want).argmax(-1))
      .to(at::kDouble)
      .mean()
      .item<double>();
}

TransformerInt8Run measure(const std::string& dir, const std::string& timer,
                           const std::string& name, const std::string& spec,
                           int64_t batch, int rounds, int threads) {
  TransformerInt8Run r;
  r.model = name;
  r.batch = batch;
  try {
    const at::Tensor ids = ort_input(spec, batch);
    if (ids.scalar_type() != at::kLong) {
      throw std::runtime_error("not a model of token ids: " + spec);
    }
    LoweredScript model = load_and_lower(dir + "/" + name + ".pt", ids);
    const at::Tensor& want = model.want;
    fx::GraphModule& float_lowered = model.lowered;
    fx::GraphModule int8 = fx::quantize_dynamic_fx(model.traced);
    for (const fx::Node* n : int8->graph().nodes()) {
      r.linear_int8 += n->op() == fx::Opcode::kCallFunction &&
                       n->target().is_operator() &&
                       n->target().op().schema().name() ==
                           "quantized::linear_dynamic";
    }
    fx::optimize_for_inference(*int8);
    const at::Tensor got = first_tensor(int8(ids));
    r.sqnr_ours = fx::sqnr_db(want, got);
    r.top1_ours = argmax_agreement(want, got);

    TimedProcess ort(
        ort_timer_command(
            timer, absl::StrCat(dir, "/", name, "_b", batch, "_int8.onnx"), threads),
        kOrt, {ids}, dir);
    ort.run(2);
    const at::Tensor theirs = ort.output();
    r.sqnr_ort = fx::sqnr_db(want, theirs.reshape_as(want));
    r.top1_ort = argmax_agreement(want, theirs);

    const int calls = batch == 1 ? 3 : 1;
    auto ours = [&] { return warm_median_ms([&] { int8(ids); }, calls); };
    auto ours_float = [&] {
      return warm_median_ms([&] { float_lowered(ids); }, calls);
    };
    auto ort_int8 = [&] { return ort.warm_median_ms(calls); };
    std::vector<std::vector<double>> samples;
    {
      const PinnedThreads pinned;
      samples = take_turns({ours, ort_int8, ours_float}, rounds, kPause);
    }
    r.rounds = rounds;
    r.ours_ms = median(samples[0]);
    r.ort_ms = median(samples[1]);
    r.float_ms = median(samples[2]);
    r.ratio = median_paired_ratio(samples[0], samples[1]);
  } catch (const std::exception& e) {
    r.failure = std::string(e.what()).substr(0, 300);
  }
  return r;
}

}  // namespace

const std::vector<std::string>& int8_transformer_models(bool quick) {
  static const std::vector<std::string> full = {"bert_encoder", "bert_base",
                                                "gpt_decoder"};
  static const std::vector<std::string> few = {"bert_encoder"};
  return quick ? few : full;
}

std::vector<TransformerInt8Run> measure_int8_transformers(
    const std::string& argv0, const std::string& dir,
    const std::vector<std::string>& models, const std::vector<int64_t>& batches,
    int rounds, int threads) {
  std::vector<std::string> requests, onnx_files;
  for (const std::string& name : models) {
    requests.push_back(absl::StrCat(name, ":", absl::StrJoin(batches, ":")));
    for (int64_t batch : batches) onnx_files.push_back(absl::StrCat(name, "_b", batch));
  }
  const PythonReference specs = run_python_reference(
      argv0, kModelsScript, absl::StrCat(dir, " ", absl::StrJoin(requests, " ")),
      Python::kTorchvision);
  PythonReference quantized;
  if (specs.unavailable.empty()) {
    quantized = run_python_reference(
        argv0, kQuantizeScript,
        absl::StrCat(dir, " ", absl::StrJoin(onnx_files, " ")), Python::kExport);
  }
  const std::optional<std::string> timer = find_runfile(argv0, kTimerScript);
  std::vector<TransformerInt8Run> runs;
  for (int64_t batch : batches) {
    for (const std::string& name : models) {
      const std::string file = absl::StrCat(name, "_b", batch);
      std::string why;
      if (!timer) why = std::string(kTimerScript) + " not found";
      else if (!specs.unavailable.empty()) why = specs.unavailable;
      else if (!quantized.unavailable.empty()) why = quantized.unavailable;
      else if (specs.values.count(name) == 0) why = "not written by " + std::string(kModelsScript);
      else if (quantized.values.count(file) == 0) why = "not quantized by " + std::string(kQuantizeScript);
      if (!why.empty()) {
        TransformerInt8Run failed;
        failed.model = name;
        failed.batch = batch;
        failed.failure = why;
        runs.push_back(failed);
        continue;
      }
      std::cerr << "timing " << name << " at batch " << batch
                << " in dynamic int8 beside ONNX Runtime's\n";
      runs.push_back(measure(dir, *timer, name, specs.values.at(name), batch,
                             rounds, threads));
    }
  }
  return runs;
}

void print_int8_transformers(const std::vector<TransformerInt8Run>& runs,
                             int threads) {
  Table table({"model", "batch", "ours int8 ms", "ORT int8 ms", "ours / ORT",
               "ours float ms", "SQNR ours (dB)", "SQNR ORT (dB)",
               "top-1 ours", "top-1 ORT", "int8 linear", "rounds"},
              2);
  for (const TransformerInt8Run& r : runs) {
    if (!r.failure.empty()) {
      table.add_row({r.model, std::to_string(r.batch), "failed: " + r.failure});
      continue;
    }
    table.add_row({r.model, std::to_string(r.batch), fixed(r.ours_ms, 2),
                   fixed(r.ort_ms, 2), times(r.ratio), fixed(r.float_ms, 2),
                   fixed(r.sqnr_ours, 1), fixed(r.sqnr_ort, 1),
                   r.top1_ours ? fixed(100 * *r.top1_ours, 1) + "%" : "n/a",
                   r.top1_ort ? fixed(100 * *r.top1_ort, 1) + "%" : "n/a",
                   std::to_string(r.linear_int8), std::to_string(r.rounds)});
  }
  print_section(
      absl::StrFormat("6. Transformers in dynamic int8 beside ONNX Runtime's "
                      "(%d threads)",
                      threads),
      table,
      {"ours: the TorchScript file traced in eval mode without autograd "
       "(PyTorch's fused encoder ops inside), fx::quantize_dynamic_fx (the "
       "fused ops split first; int8 weights per tensor, activations "
       "quantized per call) and fx::optimize_for_inference, intra-op threads "
       "pinned; ORT: ONNX Runtime 1.30's CPU library on the float ONNX file "
       "torch.onnx exported from the same module, quantized by "
       "onnxruntime.quantization.quantize_dynamic (QInt8 weights; "
       "tools/ort_quantize_dynamic.py); the same token ids and threads, in "
       "turn round by round with our float32 lowered graph, each after a "
       "50 ms pause, warm, medians; ratios are medians of per-round ratios. "
       "SQNR: each output against float32's (TorchScript as loaded) on "
       "those ids; top-1: the share of the decoder's positions whose top "
       "token is float32's (the encoders give a pooled state: n/a)."});
}

std::vector<TargetCheck> check_int8_transformers(
    const std::vector<TransformerInt8Run>& runs) {
  std::vector<TargetCheck> checks;
  for (const TransformerInt8Run& r : runs) {
    const std::string where = absl::StrCat(r.model, " batch ", r.batch);
    const bool ok = r.failure.empty();
    checks.push_back(
        {absl::StrFormat("%s: dynamic int8 at most %.1fx ONNX Runtime's", where,
                         kTarget),
         ok ? times(r.ratio) : r.failure, ok && r.ratio <= kTarget});
    checks.push_back(
        {absl::StrFormat("%s: dynamic int8 SQNR at least ONNX Runtime's - %.0f dB",
                         where, kSqnrSlackDb),
         ok ? absl::StrFormat("%.1f vs %.1f dB", r.sqnr_ours, r.sqnr_ort)
            : r.failure,
         ok && r.sqnr_ours >= r.sqnr_ort - kSqnrSlackDb, false});
  }
  return checks;
}

}  // namespace benchmark
}  // namespace fx
