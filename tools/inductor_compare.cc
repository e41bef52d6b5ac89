#include "tools/inductor_compare.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "fx/ir/libtorch_compat.h"
#include "tools/timed_process.h"

#if FX_LIBTORCH_2
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#endif

namespace fx {
namespace benchmark {
namespace {

constexpr char kScript[] = "tools/inductor_reference.py";
constexpr char kCompile[] = "torch.compile (tools/inductor_reference.py)";
constexpr double kTarget = 0.9;
constexpr std::chrono::milliseconds kPause(50);
// Each row's timed rounds fit in this many milliseconds.
constexpr double kBudgetMs = 30000;

std::string first_line(const std::string& text) {
  return text.substr(0, std::min(text.find('\n'), size_t{300}));
}

#if FX_LIBTORCH_2
using AotiModel = torch::inductor::AOTIModelPackageLoader;
#else
struct AotiModel {};  // LibTorch 1.x has no AOTInductor
#endif

// AOTInductor's package of the model at this input, compiled by the
// build's Python and loaded here; sets r.aoti_failure when it cannot.
std::unique_ptr<AotiModel> load_aoti(const std::string& argv0,
                                     const std::string& dir,
                                     const InductorModel& model,
                                     const at::Tensor& x, InductorRun& r) {
#if FX_LIBTORCH_2
  try {
    const std::string package =
        absl::StrCat(dir, "/", model.name, "_b", r.batch, ".pt2");
    const PythonReference made = run_python_reference(
        argv0, kScript,
        absl::StrCat("package ", model.name, " ", model.script, " ", package,
                     " ", raw_inputs({x}, dir)),
        Python::kBuild);
    if (!made.unavailable.empty()) throw std::runtime_error(made.unavailable);
    r.package_seconds = made.number("packaged");
    return std::make_unique<AotiModel>(package);
  } catch (const std::exception& e) {
    r.aoti_failure = first_line(e.what());
    return nullptr;
  }
#else
  (void)argv0, (void)dir, (void)model, (void)x;
  r.aoti_failure = "AOTInductor needs LibTorch 2.x";
  return nullptr;
#endif
}

at::Tensor run_aoti(AotiModel& model, const at::Tensor& x) {
#if FX_LIBTORCH_2
  return model.run({x}).at(0);
#else
  (void)model;
  return x;
#endif
}

InductorRun measure(const std::string& argv0, const std::string& script,
                    const std::string& dir, const InductorModel& model,
                    int64_t batch, int rounds, int threads) {
  InductorRun r;
  r.model = model.name;
  r.batch = batch;
  try {
    const at::Tensor x = ort_input(model.spec, batch);
    LoweredScript ours_model = load_and_lower(model.script, x);
    const at::Tensor& want = ours_model.want;
    fx::GraphModule& lowered = ours_model.lowered;
    const at::Tensor ours = first_tensor(lowered(x));
    r.ours_error = relative_error(ours, want);

    std::unique_ptr<TimedProcess> compiled;
    try {
      compiled = std::make_unique<TimedProcess>(
          absl::StrCat(python_interpreter(Python::kBuild), " ", script,
                       " serve ", model.name, " ", model.script, " ", threads),
          kCompile, std::vector<at::Tensor>{x}, dir);
      compiled->run(2);
      r.compile_error =
          relative_error(compiled->output().reshape_as(want), want);
    } catch (const std::exception& e) {
      r.compile_failure = first_line(e.what());
      compiled.reset();
    }
    std::unique_ptr<AotiModel> aoti = load_aoti(argv0, dir, model, x, r);
    if (aoti) {
      r.aoti_error = relative_error(run_aoti(*aoti, x).reshape_as(want), want);
    }
    if (!compiled && !aoti) {
      throw std::runtime_error(r.compile_failure + "; " + r.aoti_failure);
    }

    // Each sample warm (one untimed call, then the median of `calls`).
    std::vector<std::function<double(int)>> variants = {
        [&](int calls) { return warm_median_ms([&] { lowered(x); }, calls); }};
    if (compiled) {
      variants.push_back(
          [&](int calls) { return compiled->warm_median_ms(calls); });
    }
    if (aoti) {
      variants.push_back([&](int calls) {
        return warm_median_ms([&] { run_aoti(*aoti, x); }, calls);
      });
    }
    const TurnSamples turns =
        sample_in_turns(variants, rounds, 2, kBudgetMs, 0, kPause);
    r.rounds = turns.rounds;
    const std::vector<std::vector<double>>& samples = turns.samples;
    r.ours_ms = median(samples[0]);
    size_t next = 1;
    if (compiled) {
      r.compile_ms = median(samples[next]);
      r.vs_compile = median_paired_ratio(samples[0], samples[next]);
      ++next;
    }
    if (aoti) {
      r.aoti_ms = median(samples[next]);
      r.vs_aoti = median_paired_ratio(samples[0], samples[next]);
    }
  } catch (const std::exception& e) {
    r.failure = first_line(e.what());
  }
  return r;
}

std::string error_text(std::optional<double> error) {
  return error ? absl::StrFormat("%.1e", *error) : "";
}

}  // namespace

const std::vector<std::string>& inductor_models(bool quick) {
  static const std::vector<std::string> full = {
      "resnet18",     "resnet50",  "mobilenet_v2", "mobilenet_v3_small",
      "bert_encoder", "bert_base", "gpt_decoder",  "gpt2_small",
      "lstm_lm",      "bilstm_tagger"};
  static const std::vector<std::string> few = {"bert_encoder"};
  return quick ? few : full;
}

std::vector<InductorRun> measure_inductor(
    const std::string& argv0, const std::string& dir,
    const std::vector<InductorModel>& models,
    const std::vector<int64_t>& batches, int rounds, int threads) {
  std::vector<InductorRun> runs;
  std::filesystem::create_directories(dir);
  const std::optional<std::string> script = find_runfile(argv0, kScript);
  for (int64_t batch : batches) {
    for (const InductorModel& model : models) {
      if (!script || model.script.empty()) {
        InductorRun failed;
        failed.model = model.name;
        failed.batch = batch;
        failed.failure = !script ? std::string(kScript) + " not found"
                                 : "no TorchScript file of it was written "
                                   "(name it in --models or --ort_models)";
        runs.push_back(failed);
        continue;
      }
      std::cerr << "timing " << model.name << " at batch " << batch
                << " beside torch.compile and AOTInductor\n";
      runs.push_back(
          measure(argv0, *script, dir, model, batch, rounds, threads));
    }
  }
  return runs;
}

void print_inductor(const std::vector<InductorRun>& runs, int threads) {
  Table table({"model", "batch", "ours ms", "compile ms", "AOTI ms",
               "ours / compile", "ours / AOTI", "error ours", "error compile",
               "error AOTI", "AOTI build s", "rounds"},
              2);
  std::vector<std::string> notes;
  for (const InductorRun& r : runs) {
    const std::string where = absl::StrCat(r.model, " batch ", r.batch);
    if (!r.failure.empty()) {
      table.add_row({r.model, std::to_string(r.batch), "failed: " + r.failure});
      continue;
    }
    table.add_row({r.model, std::to_string(r.batch), fixed(r.ours_ms, 2),
                   fixed(r.compile_ms, 2), fixed(r.aoti_ms, 2),
                   times(r.vs_compile), times(r.vs_aoti),
                   error_text(r.ours_error), error_text(r.compile_error),
                   error_text(r.aoti_error), fixed(r.package_seconds, 0),
                   std::to_string(r.rounds)});
    if (!r.compile_failure.empty()) {
      notes.push_back(where + ", torch.compile: " + r.compile_failure);
    }
    if (!r.aoti_failure.empty()) {
      notes.push_back(where + ", AOTInductor: " + r.aoti_failure);
    }
  }
  notes.insert(
      notes.begin(),
      "ours: the TorchScript file traced and fx::optimize_for_inference, "
      "intra-op threads pinned; compile: torch.compile (Inductor, "
      "freezing on) of the Python module with that file's weights "
      "(tools/inductor_reference.py, the build's Python and torch), in its "
      "own process; AOTI: AOTInductor's package of torch.export's program "
      "of that module (freezing on), run by LibTorch's "
      "torch::inductor::AOTIModelPackageLoader in this process; the same "
      "input and threads, in turn round by round, each after a 50 ms "
      "pause, warm, medians; ratios are medians of per-round ratios. "
      "error: the largest difference from the TorchScript file's output, "
      "over its largest magnitude.");
  print_section(absl::StrFormat("9. Float32 beside torch.compile and "
                                "AOTInductor (%d threads)",
                                threads),
                table, notes);
}

void check_inductor_targets(const std::vector<InductorRun>& runs,
                            std::vector<TargetCheck>* checks) {
  for (const InductorRun& r : runs) {
    const std::string where = absl::StrCat(r.model, " batch ", r.batch);
    auto check = [&](const char* name, std::optional<double> ratio,
                     const std::string& failure) {
      const std::string why = !r.failure.empty() ? r.failure : failure;
      checks->push_back(
          {absl::StrFormat("%s: at most %.1fx %s's time", where, kTarget, name),
           ratio ? times(ratio) : why,
           ratio ? std::optional<bool>(*ratio <= kTarget) : std::nullopt});
    };
    check("torch.compile", r.vs_compile, r.compile_failure);
    check("AOTInductor", r.vs_aoti, r.aoti_failure);
  }
}

}  // namespace benchmark
}  // namespace fx
