#include "quantization/qconfig.h"

#include <cpuid.h>

#include <ATen/Context.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "fx/ir/meta.h"
#include "fx/ir/node.h"

namespace fx {

std::pair<int64_t, int64_t> ObserverSpec::range() const {
  int64_t lo = 0, hi = 255;
  if (dtype == c10::ScalarType::QInt8) {
    lo = -128;
    hi = 127;
  } else if (dtype == c10::ScalarType::QInt32) {
    lo = -(int64_t{1} << 31);
    hi = (int64_t{1} << 31) - 1;
  }
  if (reduce_range) {
    lo /= 2;
    hi /= 2;
  }
  return {quant_min.value_or(lo), quant_max.value_or(hi)};
}

std::string ObserverSpec::kind_name() const {
  switch (kind) {
    case ObserverKind::kMinMax: return "min_max";
    case ObserverKind::kMovingAverageMinMax: return "moving_average_min_max";
    case ObserverKind::kHistogram: return "histogram";
    case ObserverKind::kPerChannelMinMax: return "per_channel_min_max";
    case ObserverKind::kMovingAveragePerChannelMinMax:
      return "moving_average_per_channel_min_max";
    case ObserverKind::kFixedQParams: return "fixed_qparams";
  }
  return "min_max";
}

std::string ObserverSpec::qscheme_name() const {
  switch (qscheme) {
    case QScheme::kPerTensorAffine: return "per_tensor_affine";
    case QScheme::kPerTensorSymmetric: return "per_tensor_symmetric";
    case QScheme::kPerChannelAffine: return "per_channel_affine";
    case QScheme::kPerChannelSymmetric: return "per_channel_symmetric";
  }
  return "per_tensor_affine";
}

bool ObserverSpec::per_channel() const {
  return qscheme == QScheme::kPerChannelAffine ||
         qscheme == QScheme::kPerChannelSymmetric;
}

bool ObserverSpec::symmetric() const {
  return qscheme == QScheme::kPerTensorSymmetric ||
         qscheme == QScheme::kPerChannelSymmetric;
}

ObserverSpec min_max_observer(c10::ScalarType dtype) {
  ObserverSpec s;
  s.kind = ObserverKind::kMinMax;
  s.dtype = dtype;
  return s;
}

ObserverSpec moving_average_min_max_observer(c10::ScalarType dtype) {
  ObserverSpec s = min_max_observer(dtype);
  s.kind = ObserverKind::kMovingAverageMinMax;
  return s;
}

ObserverSpec histogram_observer(c10::ScalarType dtype) {
  ObserverSpec s = min_max_observer(dtype);
  s.kind = ObserverKind::kHistogram;
  return s;
}

ObserverSpec default_weight_observer() {
  ObserverSpec s = min_max_observer(c10::ScalarType::QInt8);
  s.qscheme = QScheme::kPerTensorSymmetric;
  return s;
}

ObserverSpec default_per_channel_weight_observer() {
  ObserverSpec s = default_weight_observer();
  s.kind = ObserverKind::kPerChannelMinMax;
  s.qscheme = QScheme::kPerChannelSymmetric;
  return s;
}

ObserverSpec moving_average_per_channel_min_max_observer() {
  ObserverSpec s = default_per_channel_weight_observer();
  s.kind = ObserverKind::kMovingAveragePerChannelMinMax;
  return s;
}

std::vector<std::string> available_engines() {
  std::vector<std::string> names;
  for (at::QEngine e : at::globalContext().supportedQEngines()) {
    if (e == at::QEngine::ONEDNN) names.push_back("onednn");
    if (e == at::QEngine::QNNPACK) names.push_back("qnnpack");
  }
  return names;
}

void check_quantized_engine(const std::string& engine) {
  const std::vector<std::string> names = available_engines();
  for (const std::string& n : names) {
    if (n == engine) return;
  }
  throw QuantizationError(absl::StrCat(
      "unknown quantization engine '", engine, "': this libtorch has ",
      names.empty() ? std::string("none") : absl::StrJoin(names, ", ")));
}

void set_quantized_engine(const std::string& engine) {
  check_quantized_engine(engine);
  at::globalContext().setQEngine(engine == "qnnpack" ? at::QEngine::QNNPACK
                                                     : at::QEngine::ONEDNN);
}

bool cpu_has_vnni() {
  // AVX-VNNI (the 256-bit form) from CPUID leaf 7, subleaf 1, EAX bit 4:
  // clang 14's __builtin_cpu_supports has no name for it. Its registers are
  // AVX2's, which the OS saves wherever __builtin_cpu_supports("avx2") holds.
  static const bool vnni = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    const bool avx_vnni = __builtin_cpu_supports("avx2") &&
                          __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) &&
                          (eax & (1u << 4)) != 0;
    return __builtin_cpu_supports("avx512vnni") || avx_vnni;
  }();
  return vnni;
}

QConfig default_qconfig(const std::string& engine) {
  check_quantized_engine(engine);
  QConfig q;
  q.activation = histogram_observer(c10::ScalarType::QUInt8);
  q.activation.reduce_range = engine == "onednn" && !cpu_has_vnni();
  q.weight = engine == "onednn" ? default_per_channel_weight_observer()
                                : default_weight_observer();
  return q;
}

QConfig default_qat_qconfig(const std::string& engine) {
  check_quantized_engine(engine);
  QConfig q;
  q.activation = moving_average_min_max_observer(c10::ScalarType::QUInt8);
  q.activation.reduce_range = engine == "onednn" && !cpu_has_vnni();
  if (engine == "onednn") {
    q.weight = moving_average_per_channel_min_max_observer();
  } else {
    q.weight = default_weight_observer();
    q.weight.kind = ObserverKind::kMovingAverageMinMax;
  }
  return q;
}

QConfigMapping& QConfigMapping::set_global(Entry qconfig) {
  global_ = std::move(qconfig);
  return *this;
}

QConfigMapping& QConfigMapping::set_object_type(const std::string& op,
                                                Entry qconfig) {
  by_op_[op] = std::move(qconfig);
  return *this;
}

QConfigMapping& QConfigMapping::set_module_name(const std::string& path,
                                                Entry qconfig) {
  by_module_[path] = std::move(qconfig);
  return *this;
}

QConfigMapping& QConfigMapping::set_node_name(const std::string& name,
                                              Entry qconfig) {
  by_node_[name] = std::move(qconfig);
  return *this;
}

QConfigMapping& QConfigMapping::set_engine(const std::string& engine) {
  check_quantized_engine(engine);
  engine_ = engine;
  return *this;
}

QConfigMapping::Entry QConfigMapping::qconfig_for(
    const Node& node, const std::string& family) const {
  if (auto it = by_node_.find(node.name()); it != by_node_.end()) {
    return it->second;
  }
  if (const std::string* path = node.meta().get(kModulePath)) {
    // The longest prefix that is the path or one of its parents.
    const Entry* best = nullptr;
    size_t best_length = 0;
    for (const auto& [prefix, entry] : by_module_) {
      const bool matches =
          prefix.empty() || *path == prefix ||
          (absl::StartsWith(*path, prefix) && (*path)[prefix.size()] == '.');
      if (matches && (best == nullptr || prefix.size() >= best_length)) {
        best = &entry;
        best_length = prefix.size();
      }
    }
    if (best != nullptr) return *best;
  }
  if (node.target().is_operator()) {
    if (auto it = by_op_.find(node.target().to_string()); it != by_op_.end()) {
      return it->second;
    }
  }
  if (auto it = by_op_.find(family); it != by_op_.end()) return it->second;
  return global_;
}

QConfigMapping get_default_qconfig_mapping(const std::string& engine) {
  const QConfig q = default_qconfig(engine);
  QConfigMapping m;
  m.set_engine(engine).set_global(q);
  return m;
}

QConfigMapping get_default_qat_qconfig_mapping(const std::string& engine) {
  QConfigMapping m;
  m.set_engine(engine).set_global(default_qat_qconfig(engine));
  return m;
}

}  // namespace fx
