// The int8 benchmark: fx::prepare_fx / convert_fx on torchvision 0.14
// models traced to TorchScript, against float32 and against Python's
// torch.ao quantize_fx (tools/pyquant_reference.py) on the same models,
// with the same weights and the same calibration and evaluation images.
//
// 1. Accuracy, per engine (onednn, qnnpack): the SQNR of the int8 output
//    against float32 on the evaluation images, ours beside Python's.
// 2. Speed (onednn): the int8 GraphModule against the float32 one,
//    interleaved rounds, medians, at batch 1 and 8; Python's converted
//    model and float32 eager from the same run.
// 3. prepare_fx + convert_fx time (without calibration) of ResNet-50.
// 4. Quantization-aware training (qnnpack, MobileNetV2): prepare_qat_fx
//    and fx::distill_qat on the calibration images, the converted model's
//    SQNR beside post-training quantization's and beside Python's
//    prepare_qat_fx trained by the same procedure (converted, and as the
//    QAT module itself computes), and the median training step's time.
// 5. ONNX Runtime's int8 beside ours, on six CNNs (those of 1-2 and
//    EfficientNet-B0 and GoogLeNet): the converted model exported as
//    QuantizeLinear / DequantizeLinear (fx::to_onnx) and run by ONNX
//    Runtime's CPU library (tools/timed_process.h) on the same input and
//    threads, in turn with ours (each after a pause: ONNX Runtime's
//    threads spin for a while after each call: ours timed right after
//    them took up to 2x their time at batch 1), warm; SQNR of each
//    against float32.
// 6. Transformers in dynamic int8 beside ONNX Runtime's own dynamic int8
//    (tools/int8_transformers.h).
// Ends with the targets, each PASS or MISS (exit status 1 on a miss).
#include <torch/script.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "fx/fx.h"
#include "fx/torchscript/torchscript.h"
#include "quantization/numeric_suite.h"
#include "quantization/qat.h"
#include "quantization/qconfig.h"
#include "lowering/optimize_for_inference.h"
#include "onnx/to_onnx.h"
#include "quantization/quantize_fx.h"
#include "tools/benchmark_support.h"
#include "tools/int8_transformers.h"
#include "tools/timed_process.h"

ABSL_FLAG(std::vector<std::string>, models, {},
          "torchvision models (default: resnet18, resnet50, mobilenet_v2, "
          "mobilenet_v3_small; --quick: resnet18, mobilenet_v2)");
ABSL_FLAG(std::vector<std::string>, batches, {},
          "batch sizes timed (default 1,8; --quick: 1)");
ABSL_FLAG(std::vector<std::string>, ort_models, {},
          "models timed beside ONNX Runtime's int8 (default: resnet18, "
          "resnet50, mobilenet_v2, mobilenet_v3_small, efficientnet_b0, "
          "googlenet; --quick: resnet18; none: skip)");
ABSL_FLAG(std::vector<std::string>, transformer_models, {},
          "transformers timed in dynamic int8 beside ONNX Runtime's "
          "(default: bert_encoder, bert_base, gpt_decoder; --quick: "
          "bert_encoder; none: skip)");
ABSL_FLAG(int64_t, qat_steps, 0,
          "quantization-aware training steps (default 40; --quick: 4)");

namespace {

using namespace fx::benchmark;  // NOLINT: the benchmark vocabulary

constexpr char kTorchScriptModels[] = "testdata/torchscript_models.py";
constexpr char kPythonScript[] = "tools/pyquant_reference.py";
const std::vector<std::string> kModels = {"resnet18", "resnet50",
                                          "mobilenet_v2", "mobilenet_v3_small"};
const std::vector<std::string> kQuickModels = {"resnet18", "mobilenet_v2"};
// Held to the speed targets (the three).
const std::vector<std::string> kTimed = {"resnet18", "resnet50",
                                         "mobilenet_v2"};
const std::vector<std::string> kEngines = {"onednn", "qnnpack"};
constexpr int kCalibration = 4;
constexpr int kEvaluation = 2;
constexpr double kSqnrSlackDb = 1.0;
// int8 over float32: 3x with VNNI (int8 dot products summed in 32 bits, 4x
// float's multiply-adds per instruction); 2x without, where oneDNN's int8
// kernels take two instructions and a 16-bit sum per pair of products
// (quantization/qconfig.h), about 1.3x float's arithmetic rate, the rest
// from moving a quarter of the bytes.
double speed_up_target() { return fx::cpu_has_vnni() ? 3.0 : 2.0; }
constexpr double kPrepareConvertMs = 1000;
// Quantization-aware training: where post-training quantization failed
// (libtorch's qnnpack kernels before convert_fx read relu6's input
// contiguous), the model, engine and learning rate.
constexpr char kQatModel[] = "mobilenet_v2";
constexpr char kQatEngine[] = "qnnpack";
constexpr double kQatLr = 1e-5;
constexpr double kQatSqnrDb = 20;
constexpr double kQatStepRatio = 1.5;

torch::jit::Module load_script(const std::string& dir, const std::string& name) {
  torch::jit::Module script = torch::jit::load(dir + "/" + name + "_traced.pt");
  script.eval();
  return script;
}

// The images tools/pyquant_reference.py wrote: calibration, then
// evaluation.
std::vector<at::Tensor> load_images(const std::string& dir,
                                    const std::string& name) {
  std::ifstream in(dir + "/" + name + "_data.pt", std::ios::binary);
  std::vector<char> bytes{std::istreambuf_iterator<char>(in),
                          std::istreambuf_iterator<char>()};
  std::vector<at::Tensor> images;
  const c10::IValue list = torch::pickle_load(bytes);
  for (const c10::IValue& v : list.toListRef()) {
    images.push_back(v.toTensor());
  }
  return images;
}

// --- 5. Beside ONNX Runtime's int8 ---------------------------------------------------

constexpr char kOrtTimerScript[] = "tools/ort_timer.js";
const std::vector<std::string> kOrtModels = {
    "resnet18",        "resnet50", "mobilenet_v2", "mobilenet_v3_small",
    "efficientnet_b0", "googlenet"};
const std::vector<std::string> kQuickOrtModels = {"resnet18"};
// The targets: every model at most 0.9x ONNX Runtime's int8 time,
// their geometric mean at most 0.8x, SQNR at most 0.5 dB below ORT's.
constexpr double kOrtTarget = 0.9;
constexpr double kOrtGeomeanTarget = 0.8;
constexpr double kOrtSqnrSlackDb = 0.5;
// Between the variants timed beside ONNX Runtime, as benchmark_inference's.
constexpr std::chrono::milliseconds kPause(50);

struct OrtInt8Run {
  std::string model;
  int64_t batch = 1;
  double ours_ms = 0, ort_ms = 0;
  double ratio = 0;  // median of per-round ours / ORT
  double sqnr_ours = 0, sqnr_ort = 0;
  int rounds = 0;
  std::string failure;
};

// One model at one batch size: traced at that batch, calibrated on
// kCalibration images of normal noise (seeded as the Python reference
// seeds its own; each repeated to the batch), converted (onednn), exported
// as QDQ and timed beside ONNX Runtime on one more such image (repeated to
// the batch).
OrtInt8Run measure_ort_int8(const std::string& dir, const std::string& timer,
                            const std::string& name, int64_t batch,
                            int rounds, int threads) {
  OrtInt8Run r;
  r.model = name;
  r.batch = batch;
  try {
    torch::manual_seed(12345);
    std::vector<at::Tensor> images;
    for (int i = 0; i <= kCalibration; ++i) {
      images.push_back(torch::randn({1, 3, 224, 224}));
    }
    auto batched = [batch](const at::Tensor& image) {
      return image.expand({batch, -1, -1, -1}).contiguous();
    };
    const at::Tensor x = batched(images[kCalibration]);
    torch::jit::Module script = load_script(dir, name);
    const at::Tensor want = script.forward({x}).toTensor();
    fx::GraphModule gm = fx::symbolic_trace(script, {x});
    fx::set_quantized_engine("onednn");
    fx::GraphModule prepared =
        fx::prepare_fx(gm, fx::get_default_qconfig_mapping("onednn"));
    for (int i = 0; i < kCalibration; ++i) prepared(batched(images[i]));
    fx::GraphModule int8 = fx::convert_fx(prepared);
    const std::string onnx =
        absl::StrCat(dir, "/", name, "_int8_b", batch, ".onnx");
    fx::to_onnx(*int8, onnx);
    // Ours as a user deploys it: convert_fx's graph lowered (its
    // convolutions on fx_onednn::qconv where the CPU has VNNI).
    fx::GraphModule lowered(int8->copy());
    fx::optimize_for_inference(*lowered);
    r.sqnr_ours = fx::sqnr_db(want, lowered(x).toTensor());

    TimedProcess ort(ort_timer_command(timer, onnx, threads), kOrt, {x}, dir);
    ort.run(2);
    r.sqnr_ort = fx::sqnr_db(want, ort.output().reshape_as(want));
    const int calls = batch == 1 ? 3 : 1;
    // Each sample warm: an untimed call, then the median of `calls`; each
    // after a pause, in which ONNX Runtime's threads stop spinning.
    auto ours = [&] { return warm_median_ms([&] { lowered(x); }, calls); };
    auto theirs = [&] { return ort.warm_median_ms(calls); };
    std::vector<std::vector<double>> samples;
    {
      const PinnedThreads pinned;
      samples = take_turns({ours, theirs}, rounds, kPause);
    }
    r.rounds = rounds;
    r.ours_ms = median(samples[0]);
    r.ort_ms = median(samples[1]);
    r.ratio = median_paired_ratio(samples[0], samples[1]);
  } catch (const std::exception& e) {
    r.failure = std::string(e.what()).substr(0, 300);
  }
  return r;
}

double ort_geomean(const std::vector<OrtInt8Run>& runs, bool* all) {
  double log_sum = 0;
  int n = 0;
  *all = !runs.empty();
  for (const OrtInt8Run& r : runs) {
    if (!r.failure.empty()) {
      *all = false;
      continue;
    }
    log_sum += std::log(r.ratio);
    ++n;
  }
  return n > 0 ? std::exp(log_sum / n) : 0;
}

void print_ort(const std::vector<OrtInt8Run>& runs, int threads) {
  Table table({"model", "batch", "ours int8 ms", "ORT int8 ms", "ours / ORT",
               "SQNR ours (dB)", "SQNR ORT (dB)", "rounds"},
              2);
  for (const OrtInt8Run& r : runs) {
    if (!r.failure.empty()) {
      table.add_row({r.model, std::to_string(r.batch), "failed: " + r.failure});
      continue;
    }
    table.add_row({r.model, std::to_string(r.batch), fixed(r.ours_ms, 2),
                   fixed(r.ort_ms, 2), times(r.ratio), fixed(r.sqnr_ours, 2),
                   fixed(r.sqnr_ort, 2), std::to_string(r.rounds)});
  }
  bool all = false;
  const double geomean = ort_geomean(runs, &all);
  print_section(
      absl::StrFormat("5. Beside ONNX Runtime's int8 (%d threads)", threads),
      table,
      {"ours: convert_fx's int8 GraphModule (onednn qconfig, calibrated on "
       "4 images of normal noise, each repeated to the batch), intra-op "
       "threads pinned; ORT: ONNX Runtime 1.30's CPU library "
       "(onnxruntime-node, all graph optimizations) on that model exported "
       "by fx::to_onnx (QuantizeLinear / DequantizeLinear around each int8 "
       "operator), kept loaded in a Node.js process (tools/ort_timer.js); "
       "the same input (a fifth such image repeated to the batch) and "
       "thread count; in turn round by round, each after a 50 ms pause, "
       "warm (each sample: an untimed call, then the median of 3 timed calls at batch 1, of 1 "
       "at 8), medians; ratios are medians of per-round ratios (below 1: "
       "ours is faster). SQNR: each output against float32's on that "
       "input.",
       absl::StrFormat("geometric mean of ours / ORT: %s", times(geomean))});
}

std::vector<TargetCheck> check_ort(const std::vector<OrtInt8Run>& runs) {
  std::vector<TargetCheck> checks;
  for (const OrtInt8Run& r : runs) {
    const std::string where = absl::StrCat(r.model, " batch ", r.batch);
    const bool ok = r.failure.empty();
    checks.push_back(
        {absl::StrFormat("%s: int8 at most %.1fx ONNX Runtime's int8", where,
                         kOrtTarget),
         ok ? times(r.ratio) : r.failure, ok && r.ratio <= kOrtTarget});
    checks.push_back(
        {absl::StrFormat("%s: int8 SQNR at least ONNX Runtime's - %.1f dB",
                         where, kOrtSqnrSlackDb),
         ok ? absl::StrFormat("%.2f vs %.2f dB", r.sqnr_ours, r.sqnr_ort)
            : r.failure,
         ok && r.sqnr_ours >= r.sqnr_ort - kOrtSqnrSlackDb, false});
  }
  if (!runs.empty()) {
    bool all = false;
    const double geomean = ort_geomean(runs, &all);
    checks.push_back(
        {absl::StrFormat("int8 geometric mean at most %.1fx ONNX Runtime's",
                         kOrtGeomeanTarget),
         all ? times(geomean) : "not every row measured",
         all && geomean <= kOrtGeomeanTarget});
  }
  return checks;
}

// --- 1. Accuracy -----------------------------------------------------------------

struct AccuracyRun {
  std::string model, engine;
  double ours = 0;
  std::optional<double> python;
  std::string summary, failure;
};

AccuracyRun measure_accuracy(const std::string& dir, const std::string& name,
                             const std::string& engine,
                             const PythonReference& py) {
  AccuracyRun r;
  r.model = name;
  r.engine = engine;
  r.python = py.number(absl::StrCat(name, ".", engine, ".sqnr"));
  try {
    const std::vector<at::Tensor> images = load_images(dir, name);
    if (images.size() != kCalibration + kEvaluation) {
      throw std::runtime_error("the Python reference wrote no images");
    }
    torch::jit::Module script = load_script(dir, name);
    fx::GraphModule gm = fx::symbolic_trace(script, {images[0]});
    fx::set_quantized_engine(engine);
    fx::GraphModule prepared =
        fx::prepare_fx(gm, fx::get_default_qconfig_mapping(engine));
    for (int i = 0; i < kCalibration; ++i) prepared(images[i]);
    fx::GraphModule int8 = fx::convert_fx(prepared);
    std::vector<at::Tensor> want, got;
    for (int i = kCalibration; i < kCalibration + kEvaluation; ++i) {
      want.push_back(script.forward({images[i]}).toTensor());
      got.push_back(int8(images[i]).toTensor());
    }
    r.ours = fx::sqnr_db(at::cat(want), at::cat(got));
    r.summary = fx::summarize_quantized(int8).to_string();
  } catch (const std::exception& e) {
    r.failure = std::string(e.what()).substr(0, 300);
  }
  fx::set_quantized_engine("onednn");
  return r;
}

void print_accuracy(const std::vector<AccuracyRun>& runs) {
  Table table({"model", "engine", "SQNR ours (dB)", "SQNR Python (dB)",
               "ours - Python", "converted graph"},
              2);
  for (const AccuracyRun& r : runs) {
    if (!r.failure.empty()) {
      table.add_row({r.model, r.engine, "failed: " + r.failure});
      continue;
    }
    table.add_row({r.model, r.engine, fixed(r.ours, 2), fixed(r.python, 2),
                   r.python ? fixed(r.ours - *r.python, 2) : "n/a", r.summary});
  }
  print_section(
      "1. Accuracy: int8 against float32 (same weights, calibration and "
      "evaluation images in both)",
      table,
      {absl::StrFormat("Calibrated on %d images, SQNR over %d others "
                       "(10 log10 of signal over noise energy).",
                       kCalibration, kEvaluation)});
}

// --- 2. Speed ----------------------------------------------------------------------

struct SpeedRun {
  std::string model;
  int64_t batch = 1;
  double fp32_ms = 0, int8_ms = 0;
  // convert_fx's module lowered (optimize_for_inference), as deployed.
  double lowered_ms = 0;
  double speed_up = 0;  // median of per-round fp32 / int8
  std::optional<double> python_int8_ms, python_fp32_ms;
  double sqnr = 0;      // int8 against fp32 on the timed input
  std::string failure;
};

SpeedRun measure_speed(const std::string& dir, const std::string& name,
                       int64_t batch, int rounds, const PythonReference& py) {
  SpeedRun r;
  r.model = name;
  r.batch = batch;
  r.python_int8_ms = py.number(absl::StrCat(name, ".int8_ms.", batch));
  r.python_fp32_ms = py.number(absl::StrCat(name, ".fp32_ms.", batch));
  try {
    torch::jit::Module script = load_script(dir, name);
    torch::manual_seed(batch);
    const at::Tensor x = torch::randn({batch, 3, 224, 224});
    fx::GraphModule fp32 = fx::symbolic_trace(script, {x});
    fx::set_quantized_engine("onednn");
    fx::GraphModule prepared =
        fx::prepare_fx(fp32, fx::get_default_qconfig_mapping("onednn"));
    for (int i = 0; i < 2; ++i) prepared(torch::randn_like(x));
    fx::GraphModule int8 = fx::convert_fx(prepared);
    r.sqnr = fx::sqnr_db(fp32(x).toTensor(), int8(x).toTensor());
    fx::GraphModule lowered(int8->copy());
    fx::optimize_for_inference(*lowered);
    auto samples = interleaved_samples_ms(
        {[&] { fp32(x); }, [&] { int8(x); }, [&] { lowered(x); }}, rounds, 1);
    r.fp32_ms = median(samples[0]);
    r.int8_ms = median(samples[1]);
    r.lowered_ms = median(samples[2]);
    r.speed_up = median_paired_ratio(samples[0], samples[1]);
  } catch (const std::exception& e) {
    r.failure = std::string(e.what()).substr(0, 300);
  }
  return r;
}

void print_speed(const std::vector<SpeedRun>& runs, int threads) {
  Table table({"model", "batch", "fp32 ms", "int8 ms", "fp32 / int8",
               "int8 lowered ms", "Python fp32 ms", "Python int8 ms",
               "lowered / Python", "SQNR (dB)"},
              2);
  for (const SpeedRun& r : runs) {
    if (!r.failure.empty()) {
      table.add_row({r.model, std::to_string(r.batch), "failed: " + r.failure});
      continue;
    }
    table.add_row({r.model, std::to_string(r.batch), fixed(r.fp32_ms, 2),
                   fixed(r.int8_ms, 2), times(r.speed_up),
                   fixed(r.lowered_ms, 2), fixed(r.python_fp32_ms, 2),
                   fixed(r.python_int8_ms, 2),
                   times(ratio(r.lowered_ms, r.python_int8_ms)),
                   fixed(r.sqnr, 1)});
  }
  print_section(
      absl::StrFormat("2. Speed (onednn, %d threads): the int8 GraphModule "
                      "against the float32 import, interleaved",
                      threads),
      table,
      {"fp32: the TorchScript file imported (as eager as C++ gets); int8: "
       "convert_fx's module (LibTorch's quantized:: operators, as Python's); "
       "lowered: that module after fx::optimize_for_inference (its "
       "convolutions on fx_onednn::qconv where the CPU has VNNI), the three "
       "interleaved; Python: quantize_fx's converted model and the float32 "
       "model, timed interleaved in the same run by "
       "tools/pyquant_reference.py."});
}

// --- 3. prepare + convert ----------------------------------------------------------

struct PrepareRun {
  std::string model;
  double prepare_ms = 0, convert_ms = 0;
  std::string failure;
};

PrepareRun measure_prepare(const std::string& dir, const std::string& name,
                           int repeats) {
  PrepareRun r;
  r.model = name;
  try {
    torch::jit::Module script = load_script(dir, name);
    const at::Tensor x = torch::randn({1, 3, 224, 224});
    fx::GraphModule gm = fx::symbolic_trace(script, {x});
    const fx::QConfigMapping mapping = fx::get_default_qconfig_mapping("onednn");
    fx::GraphModule prepared{nullptr};
    r.prepare_ms = median_ms(
        [&] {
          auto start = Clock::now();
          prepared = fx::prepare_fx(gm, mapping);
          return ms_since(start);
        },
        repeats);
    prepared(x);
    r.convert_ms = median_ms(
        [&] {
          auto start = Clock::now();
          fx::convert_fx(prepared);
          return ms_since(start);
        },
        repeats);
  } catch (const std::exception& e) {
    r.failure = std::string(e.what()).substr(0, 300);
  }
  return r;
}

// --- 4. Quantization-aware training ----------------------------------------------

struct QatRun {
  int64_t steps = 0;
  double before = 0;   // the QAT module converted untrained (observed once)
  double after = 0;    // converted after training
  double fake = 0;     // the trained QAT module itself
  double step_ms = 0;  // median
  double int8_vs_ptq = 0;  // converted QAT over PTQ's int8 time, median ratio
  std::optional<double> ptq;  // post-training quantization, section 1
  std::optional<double> python, python_fake, python_step_ms;
  std::string failure;
};

QatRun measure_qat(const std::string& dir, int64_t steps, int repeats,
                   const std::vector<AccuracyRun>& accuracy,
                   const PythonReference& py) {
  QatRun r;
  r.steps = steps;
  const std::string key = absl::StrCat(kQatModel, ".", kQatEngine, ".");
  r.python = py.number(key + "qat_sqnr");
  r.python_fake = py.number(key + "qat_fake_sqnr");
  r.python_step_ms = py.number(key + "qat_step_ms");
  for (const AccuracyRun& a : accuracy) {
    if (a.model == kQatModel && a.engine == kQatEngine && a.failure.empty()) {
      r.ptq = a.ours;
    }
  }
  try {
    const std::vector<at::Tensor> images = load_images(dir, kQatModel);
    if (images.size() != kCalibration + kEvaluation) {
      throw std::runtime_error("the Python reference wrote no images");
    }
    torch::jit::Module script = load_script(dir, kQatModel);
    fx::GraphModule gm = fx::symbolic_trace(script, {images[0]});
    fx::set_quantized_engine(kQatEngine);
    const fx::QConfigMapping mapping = fx::get_default_qat_qconfig_mapping(kQatEngine);
    std::vector<std::vector<c10::IValue>> batches;
    for (int i = 0; i < kCalibration; ++i) batches.push_back({images[i]});
    std::vector<at::Tensor> want;
    for (int i = kCalibration; i < kCalibration + kEvaluation; ++i) {
      want.push_back(script.forward({images[i]}).toTensor());
    }
    auto sqnr = [&](fx::GraphModule int8) {
      std::vector<at::Tensor> got;
      for (int i = kCalibration; i < kCalibration + kEvaluation; ++i) {
        got.push_back(int8(images[i]).toTensor());
      }
      return fx::sqnr_db(at::cat(want), at::cat(got));
    };
    fx::GraphModule observed = fx::prepare_qat_fx(gm, mapping);
    for (const auto& batch : batches) observed->forward(batch);
    r.before = sqnr(fx::convert_fx(observed));
    fx::GraphModule student = fx::prepare_qat_fx(gm, mapping);
    fx::DistillationOptions options;
    options.steps = steps;
    options.lr = kQatLr;
    const fx::DistillationReport report = fx::distill_qat(student, gm, batches, options);
    r.step_ms = median(report.step_ms);
    r.fake = sqnr(student);
    fx::GraphModule qat_int8 = fx::convert_fx(student);
    r.after = sqnr(qat_int8);
    // The same int8 graph as post-training quantization's: as fast.
    fx::GraphModule prepared =
        fx::prepare_fx(gm, fx::get_default_qconfig_mapping(kQatEngine));
    for (const auto& batch : batches) prepared->forward(batch);
    fx::GraphModule ptq_int8 = fx::convert_fx(prepared);
    torch::NoGradGuard no_grad;
    const at::Tensor x = images[kCalibration];
    const auto samples = interleaved_samples_ms(
        {[&] { ptq_int8(x); }, [&] { qat_int8(x); }}, repeats, 1);
    r.int8_vs_ptq = median_paired_ratio(samples[1], samples[0]);
  } catch (const std::exception& e) {
    r.failure = std::string(e.what()).substr(0, 300);
  }
  fx::set_quantized_engine("onednn");
  return r;
}

void print_qat(const QatRun& r, int threads) {
  Table table({"side", "SQNR untrained (dB)", "SQNR trained (dB)",
               "QAT module itself (dB)", "ms per step", "ours / Python"},
              2);
  if (!r.failure.empty()) {
    table.add_row({"ours", "failed: " + r.failure});
  } else {
    table.add_row({"ours (fx::prepare_qat_fx)", fixed(r.before, 2),
                   fixed(r.after, 2), fixed(r.fake, 2), fixed(r.step_ms, 1),
                   times(ratio(r.step_ms, r.python_step_ms))});
  }
  table.add_row({"Python prepare_qat_fx", "", fixed(r.python, 2),
                 fixed(r.python_fake, 2), fixed(r.python_step_ms, 1), ""});
  print_section(
      absl::StrFormat("4. Quantization-aware training: %s on %s, %d steps of "
                      "distillation (fx::distill_qat), %d threads",
                      kQatModel, kQatEngine, r.steps, threads),
      table,
      {absl::StrFormat("The converted model's int8 time over post-training "
                       "quantization's: %s (batch 1, interleaved, median "
                       "ratio).", times(r.int8_vs_ptq)),
       absl::StrFormat("Post-training quantization of the same model: %s dB "
                       "(section 1). Trained on the %d calibration images in "
                       "turn, batch 1, Adam at %g, observers off halfway; "
                       "SQNR over the %d evaluation images. Python converts "
                       "with libtorch's qnnpack relu6, which reads its "
                       "convolutions' channels-last output as contiguous.",
                       fixed(r.ptq, 2), kCalibration, kQatLr, kEvaluation)});
}

std::vector<TargetCheck> check_targets(const std::vector<AccuracyRun>& accuracy,
                                       const std::vector<SpeedRun>& speed,
                                       const PrepareRun& prepare,
                                       const std::optional<QatRun>& qat) {
  std::vector<TargetCheck> checks;
  for (const AccuracyRun& r : accuracy) {
    const bool ok = r.failure.empty() && r.python &&
                    r.ours >= *r.python - kSqnrSlackDb;
    checks.push_back(
        {absl::StrCat(r.model, " ", r.engine,
                      " SQNR at least Python quantize_fx's - 1 dB"),
         r.failure.empty()
             ? absl::StrFormat("%.2f vs %s dB", r.ours, fixed(r.python, 2))
             : r.failure,
         ok, false});
  }
  for (const SpeedRun& r : speed) {
    if (std::count(kTimed.begin(), kTimed.end(), r.model) == 0) continue;
    const std::string where = absl::StrCat(r.model, " batch ", r.batch);
    checks.push_back(
        {absl::StrFormat("%s: int8 at least %.0fx faster than float32%s",
                         where, speed_up_target(),
                         fx::cpu_has_vnni() ? "" : " (no VNNI)"),
         r.failure.empty() ? times(r.speed_up) : r.failure,
         r.failure.empty() && r.speed_up >= speed_up_target()});
    const std::optional<double> vs = ratio(r.lowered_ms, r.python_int8_ms);
    checks.push_back(
        {where + ": int8 (lowered) at most Python quantize_fx's time",
         r.failure.empty() ? times(vs) : r.failure,
         !r.failure.empty() ? std::optional<bool>(false)
         : vs               ? std::optional<bool>(*vs <= 1.0)
                            : std::nullopt});
    checks.push_back({where + ": int8 output within 15 dB of float32 (SQNR)",
                      fixed(r.sqnr, 1), r.failure.empty() && r.sqnr > 15, false});
  }
  checks.push_back(
      {absl::StrCat("prepare_fx + convert_fx of ", prepare.model, " under 1 s"),
       prepare.failure.empty()
           ? absl::StrFormat("%.0f + %.0f ms", prepare.prepare_ms,
                             prepare.convert_ms)
           : prepare.failure,
       prepare.failure.empty() &&
           prepare.prepare_ms + prepare.convert_ms < kPrepareConvertMs});
  if (qat) {
    const QatRun& r = *qat;
    const std::string where = absl::StrCat(kQatModel, " on ", kQatEngine, " QAT");
    const bool ok = r.failure.empty();
    checks.push_back({where + ": SQNR at least 20 dB",
                      ok ? absl::StrFormat("%.2f dB", r.after) : r.failure,
                      ok && r.after >= kQatSqnrDb, false});
    checks.push_back(
        {where + ": converted, SQNR at least Python's converted - 1 dB",
         ok ? absl::StrFormat("%.2f vs %s dB", r.after, fixed(r.python, 2))
            : r.failure,
         ok && r.python && r.after >= *r.python - kSqnrSlackDb, false});
    checks.push_back(
        {where + ": the QAT module itself, SQNR at least Python's - 1 dB",
         ok ? absl::StrFormat("%.2f vs %s dB", r.fake, fixed(r.python_fake, 2))
            : r.failure,
         ok && r.python_fake && r.fake >= *r.python_fake - kSqnrSlackDb, false});
    // Gated in full runs: --quick's few steps leave the moving-average
    // ranges short of the histogram observer's.
    checks.push_back(
        {where + ": SQNR at least post-training quantization's - 1 dB",
         ok ? absl::StrFormat("%.2f vs %s dB", r.after, fixed(r.ptq, 2)) : r.failure,
         ok && r.ptq && r.after >= *r.ptq - kSqnrSlackDb, true});
    checks.push_back({where + ": converted, as fast as post-training "
                              "quantization's int8 (at most 1.05x)",
                      ok ? times(r.int8_vs_ptq) : r.failure,
                      ok && r.int8_vs_ptq <= 1.05});
    const std::optional<double> vs = ratio(r.step_ms, r.python_step_ms);
    checks.push_back({where + ": a training step at most 1.5x Python's",
                      ok ? times(vs) : r.failure,
                      !ok  ? std::optional<bool>(false)
                      : vs ? std::optional<bool>(*vs <= kQatStepRatio)
                           : std::nullopt,
                      true});
  }
  return checks;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "int8 quantization (fx::prepare_fx / convert_fx) against float32 and "
      "Python's quantize_fx.\n  bazel run //tools:benchmark_quantization -- "
      "[--quick] [--threads=N] [--repeats=N] [--models=a,b] [--batches=1,8] "
      "[--qat_steps=N] [--ort_models=a,b|none] [--transformer_models=a,b|none]\n--quick: resnet18 and mobilenet_v2, batch 1, 3 "
      "rounds, 4 QAT steps.");
  absl::ParseCommandLine(argc, argv);
  const auto [quick, threads, repeats] = run_flags();
  at::set_num_threads(threads);
  torch::NoGradGuard no_grad;
  const std::string before = machine_summary();

  std::vector<std::string> names = absl::GetFlag(FLAGS_models);
  if (names.empty()) names = quick ? kQuickModels : kModels;
  std::vector<int64_t> batches;
  for (const std::string& b : absl::GetFlag(FLAGS_batches)) {
    batches.push_back(std::stoll(b));
  }
  if (batches.empty()) {
    batches = quick ? std::vector<int64_t>{1} : std::vector<int64_t>{1, 8};
  }

  std::vector<std::string> ort_names = absl::GetFlag(FLAGS_ort_models);
  if (ort_names.empty()) ort_names = quick ? kQuickOrtModels : kOrtModels;
  const std::string dir = "/tmp/fx_benchmark_quantization";
  std::vector<std::string> files;
  for (const std::string& name : names) files.push_back(name + "_traced");
  for (const std::string& name : ort_names) {
    const std::string file = name + "_traced";
    if (name != "none" && std::count(files.begin(), files.end(), file) == 0) {
      files.push_back(file);
    }
  }
  PythonReference written = run_python_reference(
      argv[0], kTorchScriptModels,
      absl::StrCat(dir, " ", absl::StrJoin(files, " ")),
      Python::kTorchvision);
  if (!written.unavailable.empty()) {
    std::cerr << "TorchScript models not written: " << written.unavailable
              << "\n";
    return 1;
  }
  std::vector<std::string> timed;
  for (const std::string& name : names) {
    if (std::count(kTimed.begin(), kTimed.end(), name) > 0) timed.push_back(name);
  }
  int64_t qat_steps = absl::GetFlag(FLAGS_qat_steps);
  if (qat_steps <= 0) qat_steps = quick ? 4 : 40;
  const bool qat = std::count(names.begin(), names.end(), kQatModel) > 0;
  PythonReference py = run_python_reference(
      argv[0], kPythonScript,
      absl::StrFormat("%s %s --engines=%s --calibration=%d --evaluation=%d "
                      "--batches=%s --rounds=%d --threads=%d --qat_steps=%d "
                      "--qat_models=%s --qat_lr=%g%s",
                      dir, absl::StrJoin(names, " "),
                      absl::StrJoin(kEngines, ","), kCalibration, kEvaluation,
                      absl::StrJoin(batches, ","), repeats, threads,
                      qat ? qat_steps : 0, kQatModel, kQatLr,
                      // The same qconfig on both sides: onednn's default
                      // observes 7-bit activations without VNNI.
                      fx::cpu_has_vnni() ? "" : " --onednn_reduce_range"));

  std::vector<AccuracyRun> accuracy;
  for (const std::string& name : names) {
    for (const std::string& engine : kEngines) {
      std::cerr << "quantizing " << name << " for " << engine << "\n";
      accuracy.push_back(measure_accuracy(dir, name, engine, py));
    }
  }
  std::vector<SpeedRun> speed;
  for (int64_t batch : batches) {
    for (const std::string& name : names) {
      std::cerr << "timing " << name << " at batch " << batch << "\n";
      speed.push_back(measure_speed(dir, name, batch, repeats, py));
    }
  }
  std::vector<OrtInt8Run> ort_runs;
  if (ort_names.front() != "none") {
    const std::optional<std::string> timer =
        find_runfile(argv[0], kOrtTimerScript);
    for (int64_t batch : batches) {
      for (const std::string& name : ort_names) {
        std::cerr << "timing " << name << " at batch " << batch
                  << " beside ONNX Runtime's int8\n";
        if (!timer) {
          OrtInt8Run failed;
          failed.model = name;
          failed.batch = batch;
          failed.failure = std::string(kOrtTimerScript) + " not found";
          ort_runs.push_back(failed);
          continue;
        }
        ort_runs.push_back(
            measure_ort_int8(dir, *timer, name, batch, repeats, threads));
      }
    }
  }
  std::vector<std::string> transformers = absl::GetFlag(FLAGS_transformer_models);
  if (transformers.empty()) transformers = int8_transformer_models(quick);
  std::vector<TransformerInt8Run> transformer_runs;
  if (transformers.front() != "none") {
    transformer_runs = measure_int8_transformers(argv[0], dir + "/transformers",
                                                 transformers, batches,
                                                 repeats, threads);
  }
  const std::string big =
      std::count(names.begin(), names.end(), "resnet50") ? "resnet50"
                                                         : names.front();
  std::cerr << "timing prepare_fx and convert_fx on " << big << "\n";
  const PrepareRun prepare = measure_prepare(dir, big, quick ? 1 : 5);
  std::optional<QatRun> qat_run;
  if (qat) {
    std::cerr << "quantization-aware training of " << kQatModel << "\n";
    torch::AutoGradMode grad_mode(true);
    qat_run = measure_qat(dir, qat_steps, repeats, accuracy, py);
  }

  std::cout << "fx for LibTorch int8 quantization benchmark ("
            << (quick ? "--quick" : "full") << " run)\n"
            << "before: " << before << "; after: " << machine_summary()
            << "\nthreads: " << threads << "; rounds: " << repeats << "\n";
  if (!py.unavailable.empty()) {
    std::cout << "Python reference unavailable: " << py.unavailable << "\n";
  } else {
    std::cout << "Python reference: torch " << py.text("torch_version")
              << " quantize_fx, models from " << py.text("models")
              << " (TorchScript files written by Debian's torch 1.13)\n";
  }
  print_accuracy(accuracy);
  print_speed(speed, threads);
  Table table({"model", "prepare_fx ms", "convert_fx ms"});
  table.add_row({prepare.model, fixed(prepare.prepare_ms, 1),
                 fixed(prepare.convert_ms, 1)});
  print_section("3. prepare_fx + convert_fx (no calibration), medians", table);
  if (qat_run) print_qat(*qat_run, threads);
  if (!ort_runs.empty()) print_ort(ort_runs, threads);
  if (!transformer_runs.empty()) print_int8_transformers(transformer_runs, threads);
  std::vector<TargetCheck> checks =
      check_targets(accuracy, speed, prepare, qat_run);
  for (TargetCheck& check : check_ort(ort_runs)) checks.push_back(check);
  for (TargetCheck& check : check_int8_transformers(transformer_runs)) {
    checks.push_back(check);
  }
  return print_targets(checks, quick);
}
