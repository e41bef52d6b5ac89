#include "lowering/lower_onednn.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "fx/ir/errors.h"
#include "fx/runtime/graph_module.h"
#include "lowering/onednn_ops.h"
#include "lowering/passes/passes.h"
#include "passes/pass_manager.h"
#include "passes/registry.h"

namespace fx {
namespace {

// Each switch and option: its name, what it does, and the field of
// InferenceOptions it reads and writes.
struct BoolOption {
  const char* name;
  const char* doc;
  bool InferenceOptions::*field;
};

const std::vector<BoolOption>& bool_options() {
  static const auto* options = new std::vector<BoolOption>{
      {"lower_convolutions", "convolutions and transposed ones",
       &InferenceOptions::lower_convolutions},
      {"lower_linear", "linear layers", &InferenceOptions::lower_linear},
      {"lower_matmul", "products of two activations (attention's)",
       &InferenceOptions::lower_matmul},
      {"lower_recurrent", "LSTM and GRU layers",
       &InferenceOptions::lower_recurrent},
      {"lower_int8", "int8 convolutions (VNNI)",
       &InferenceOptions::lower_int8},
      {"lower_pooling", "max and average pooling between convolutions",
       &InferenceOptions::lower_pooling},
      {"lower_batch_norm", "batch norms no convolution absorbed",
       &InferenceOptions::lower_batch_norm},
      {"lower_squeeze_excite", "squeeze-and-excitation blocks as one call",
       &InferenceOptions::lower_squeeze_excite},
      {"concat_buffers", "channel concatenation chains into one buffer",
       &InferenceOptions::concat_buffers},
      {"in_place", "residual adds into the residual's memory",
       &InferenceOptions::in_place},
      {"bf16", "bfloat16 weights and activations (AVX-512 BF16)",
       &InferenceOptions::bf16},
  };
  return *options;
}

const std::vector<std::pair<const char*, InferenceOptions::Decision>>&
decisions() {
  static const auto* names =
      new std::vector<std::pair<const char*, InferenceOptions::Decision>>{
          {"cost_model", InferenceOptions::Decision::kCostModel},
          {"measure", InferenceOptions::Decision::kMeasure},
          {"all", InferenceOptions::Decision::kAll},
      };
  return *names;
}

// "cost_model, measure or all".
std::string decision_names() {
  std::vector<std::string> names;
  for (const auto& [text, decision] : decisions()) names.push_back(text);
  return absl::StrCat(absl::StrJoin(names.begin(), names.end() - 1, ", "),
                      " or ", names.back());
}

// Every option: name and what it does.
std::vector<std::pair<std::string, std::string>> all_option_docs() {
  std::vector<std::pair<std::string, std::string>> out;
  for (const BoolOption& option : bool_options()) {
    out.emplace_back(option.name, absl::StrCat(option.doc, " (true/false)"));
  }
  out.emplace_back("decision", absl::StrCat("whether a convolution is "
                                            "lowered: ", decision_names()));
  out.emplace_back("measure_rounds", "with decision=measure: timed runs");
  return out;
}

// `options` of the pass `pass` set on a copy of `base` (the names are
// known: make_pass refuses others first).
InferenceOptions parse(const std::string& pass, const PassOptions& options,
                       InferenceOptions base) {
  for (const auto& option : options) {
    // Named, not structured bindings: lambdas capture them (C++17).
    const std::string& name = option.first;
    const std::string& value = option.second;
    const auto bool_option_named =
        std::find_if(bool_options().begin(), bool_options().end(),
                     [&](const BoolOption& o) { return name == o.name; });
    if (bool_option_named != bool_options().end()) {
      base.*bool_option_named->field = bool_option(pass, name, value);
    } else if (name == "decision") {
      const auto decision =
          std::find_if(decisions().begin(), decisions().end(),
                       [&](const auto& d) { return value == d.first; });
      if (decision == decisions().end()) {
        throw GraphError(absl::StrCat("pass ", pass, ": option decision "
                                      "takes ", decision_names(), ", not '",
                                      value, "'"));
      }
      base.decision = decision->second;
    } else if (name == "measure_rounds") {
      const int64_t rounds = int_option(pass, name, value);
      if (rounds < 1 || rounds > 1000) {
        throw GraphError(absl::StrCat("pass ", pass, ": option "
                                      "measure_rounds takes 1 to 1000, not ",
                                      value));
      }
      base.measure_rounds = static_cast<int>(rounds);
    } else {
      throw GraphError(absl::StrCat("pass ", pass, " takes no option '",
                                    name, "'"));
    }
  }
  return base;
}

// The lowering's passes in the order they run (linear layers, matmuls and
// recurrent layers first: a lowered call reads its inputs where its last
// absorbed node was, so the convolutions' in-place adds must see where
// those reads are), each with what it does, how
// it is made, the switch of InferenceOptions that holds it in the lowering
// (null: held whenever the lowering is) and the options it takes.
struct LoweringStep {
  const char* pass;
  const char* description;
  std::unique_ptr<Pass> (*make)(const InferenceOptions&);
  bool InferenceOptions::*held_by;
  std::vector<std::string> options;
};

const std::vector<LoweringStep>& lowering_steps() {
  using namespace lowering;  // NOLINT: the passes' factories
  static const auto* steps = new std::vector<LoweringStep>{
      {"lower_onednn_linear",
       "linear layers to fx_onednn::linear on packed weights, their "
       "activations fused",
       make_lower_linear, &InferenceOptions::lower_linear, {"bf16"}},
      {"lower_onednn_matmul",
       "products of two activations (attention's) to fx_onednn::matmul, "
       "the scale after them fused",
       make_lower_matmul, &InferenceOptions::lower_matmul, {}},
      {"lower_onednn_recurrent",
       "LSTM and GRU layers to fx_onednn::lstm / gru",
       make_lower_recurrent, &InferenceOptions::lower_recurrent, {}},
      {"lower_onednn_int8",
       "int8 convolutions (convert_fx's quantized::conv2d) to "
       "fx_onednn::qconv on packed weights, a quantized add after one "
       "fused, where the CPU has VNNI",
       make_lower_int8, &InferenceOptions::lower_int8, {"in_place"}},
      {"lower_onednn_convolutions",
       "convolutions and transposed ones to fx_onednn::conv / "
       "conv_transpose on packed weights, their residual adds and "
       "activations fused, where lowering pays",
       make_lower_convolutions, &InferenceOptions::lower_convolutions,
       {"decision", "measure_rounds", "in_place", "bf16"}},
      {"lower_onednn_pooling",
       "max, average and global average pooling of channels-last chains to "
       "fx_onednn::max_pool2d / avg_pool2d",
       make_lower_pooling, &InferenceOptions::lower_pooling, {}},
      {"lower_onednn_batch_norm",
       "batch norms of channels-last chains no convolution absorbed to "
       "fx_onednn::batch_norm, a relu after fused",
       make_lower_batch_norm, &InferenceOptions::lower_batch_norm, {}},
      {"lower_onednn_squeeze_excite",
       "squeeze-and-excitation blocks of lowered operators to "
       "fx_onednn::squeeze_excite",
       make_lower_squeeze_excite, &InferenceOptions::lower_squeeze_excite,
       {}},
      {"onednn_channels_last",
       "keep activations channels-last between lowered convolutions: "
       "convert where their chains start and end",
       make_channels_last, nullptr, {}},
      {"onednn_concat_buffers",
       "write chains of channel concatenations of channels-last values into "
       "one buffer, each concatenation a view",
       make_concat_buffers, &InferenceOptions::concat_buffers, {}},
      {"onednn_fold_weights",
       "fold the lowered calls' weight packing into an init step (and drop "
       "what no call reads), when the lowering packed any",
       make_fold_weights, nullptr, {}},
  };
  return *steps;
}

// The pass names of the steps.
bool is_lowering_step(const std::string& pass) {
  for (const LoweringStep& step : lowering_steps()) {
    if (pass == step.pass) return true;
  }
  return false;
}

}  // namespace

std::vector<PassStep> onednn_lowering_steps(const InferenceOptions& options) {
  const PassOptions given = LowerOnednn::to_pass_options(options);
  std::vector<PassStep> out;
  for (const LoweringStep& step : lowering_steps()) {
    if (step.held_by != nullptr && !(options.*step.held_by)) continue;
    PassOptions taken;
    for (const auto& option : given) {
      if (std::find(step.options.begin(), step.options.end(),
                    option.first) != step.options.end()) {
        taken.push_back(option);
      }
    }
    out.push_back({step.pass, std::move(taken)});
  }
  return out;
}

void register_onednn_lowering_passes() {
  const std::vector<std::pair<std::string, std::string>> docs =
      all_option_docs();
  for (const LoweringStep& step : lowering_steps()) {
    std::vector<std::pair<std::string, std::string>> options;
    for (const auto& doc : docs) {
      if (std::find(step.options.begin(), step.options.end(), doc.first) !=
          step.options.end()) {
        options.push_back(doc);
      }
    }
    const std::string name = step.pass;
    const auto make = step.make;
    register_pass({name,
                   absl::StrCat(step.description,
                                " (optimize_for_inference's step; needs "
                                "//lowering)"),
                   [name, make](const PassOptions& given) {
                     return make(parse(name, given, {}));
                   },
                   std::move(options)});
  }
  register_pass({"lower_onednn",
                 "the oneDNN lowering's passes (lower_onednn_linear to "
                 "onednn_fold_weights) as one, the switches choosing which "
                 "(needs //lowering)",
                 [](const PassOptions& options) {
                   return std::unique_ptr<Pass>(
                       new LowerOnednn(LowerOnednn::parse_options(options)));
                 },
                 docs});
}

InferenceOptions LowerOnednn::parse_options(const PassOptions& options,
                                            InferenceOptions base) {
  return parse("lower_onednn", options, base);
}

PassOptions LowerOnednn::to_pass_options(const InferenceOptions& options) {
  const InferenceOptions defaults;
  PassOptions out;
  for (const BoolOption& option : bool_options()) {
    if (options.*option.field != defaults.*option.field) {
      out.emplace_back(option.name, options.*option.field ? "true" : "false");
    }
  }
  if (options.decision != defaults.decision) {
    for (const auto& [text, decision] : decisions()) {
      if (decision == options.decision) out.emplace_back("decision", text);
    }
  }
  if (options.measure_rounds != defaults.measure_rounds) {
    out.emplace_back("measure_rounds", std::to_string(options.measure_rounds));
  }
  return out;
}

void check_bf16_supported(const InferenceOptions& options) {
  if (options.bf16 && !onednn::bf16_supported()) {
    throw Error(
        "optimize_for_inference: InferenceOptions::bf16 needs a CPU with "
        "AVX-512 (avx512_core), where oneDNN has bfloat16 kernels; this one "
        "has none: lower in float32 (bf16 = false)");
  }
}

bool LowerOnednn::run(GraphModuleImpl& module) {
  absl::flat_hash_map<std::string, int64_t> sums;
  bool changed = false;
  // A graph traced in training mode stays as it is (all counts zero).
  if (!module.traced_training().value_or(false)) {
    check_bf16_supported(options_);
    PassManager passes;
    passes.add(onednn_lowering_steps(options_));
    changed = passes.run_in_place(module);
    for (const PassManager::Statistic& statistic : passes.statistics()) {
      if (is_lowering_step(statistic.pass)) {
        sums[statistic.name] += statistic.value;
      }
    }
  }
  statistics_.clear();
#define FX_COUNT(field, owner)                                  \
  if (is_lowering_step(owner)) {                                \
    statistics_.emplace_back(#field, sums[#field]);             \
  }
  FX_INFERENCE_COUNTS(FX_COUNT)
#undef FX_COUNT
  return changed;
}

std::vector<std::pair<std::string, int64_t>> LowerOnednn::statistics() const {
  return statistics_;
}

}  // namespace fx
